//! Certificate revocation (issue 56 item 6): the replicated list of revoked certificates,
//! which every node consults for each peer it accepts (nodes, agents and operators alike).
//!
//! A certificate is revoked by its serial number. Serials are stored and compared in one
//! canonical form ([`normalise_serial`] for what an operator types, [`serial_from_der_bytes`]
//! for a certificate's own bytes, both producing it): **lowercase hex, two digits per byte,
//! no separators, without leading zero bytes** (`00` for the serial zero). So
//! `00:8F:3A:01`, `8f3a01`, `8F3A01` and the DER INTEGER `00 8f 3a 01` all are `8f3a01`.
//!
//! The list is one [`RevokedCertificate`] record per serial (`Command::RevokeCertificate`,
//! admins only), at most [`MAX_REVOKED_CERTIFICATES`]. Revoking a serial again changes nothing
//! and succeeds (a retry after a timeout must not fail), keeping the first entry. An entry
//! that gave its certificate's `notAfter` is dropped by a later revocation once that entry's
//! time is [`PRUNE_AFTER_EXPIRY_MS`] past it: the certificate no longer passes the validity
//! check anyway. [`RevocationListVersion`] changes whenever the list does.

use hub_identity::Identity;
use serde::{Deserialize, Serialize};

use crate::error::CommandError;
use crate::TimestampMs;

/// Longest serial number, in bytes of its value (RFC 5280 §4.1.2.2: "Conforming CAs MUST NOT
/// use serialNumber values longer than 20 octets"). Counted without leading zero bytes, so
/// the serial of a 20-byte value whose DER INTEGER needs a sign byte is still accepted.
pub const MAX_SERIAL_BYTES: usize = 20;

/// Longest serial number text [`normalise_serial`] reads: 21 bytes with `:` between them
/// (a sign byte and 20), and a little more. Longer text is refused before it is looked at.
pub const MAX_SERIAL_TEXT_LEN: usize = 64;

/// Most revoked certificates the cluster keeps. Every node holds the list in memory and
/// consults it for every connection it accepts, and each entry is replicated state (at most
/// about 1 KiB: at most 10 MiB in all). A CA with this many compromised certificates is
/// itself compromised: rotate it (docs/SECURITY.md) instead of growing the list. Entries of
/// expired certificates stop counting once pruned (see [`PRUNE_AFTER_EXPIRY_MS`]).
pub const MAX_REVOKED_CERTIFICATES: usize = 10_000;

/// Longest revocation reason, in characters.
pub const MAX_REASON_CHARS: usize = 200;

/// How long past its certificate's `notAfter` an entry is kept: a day, so that a node whose
/// clock lags the entry times by less than that still refuses the certificate (it would
/// otherwise pass that node's validity check).
pub const PRUNE_AFTER_EXPIRY_MS: TimestampMs = 24 * 60 * 60 * 1000;

/// One certificate of a `RevokeCertificates` batch: what `RevokeCertificate` says of one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateRevocation {
    /// The serial number, in hex ([`normalise_serial`]).
    pub serial: String,
    /// Why; required, printable, at most [`MAX_REASON_CHARS`] characters.
    pub reason: String,
    /// Whom the certificate names, `kind/name`, if known.
    pub identity: Option<String>,
    /// The certificate's `notAfter`, if known: the entry is pruned a day after it.
    pub not_after: Option<TimestampMs>,
}

/// Why a text is not a certificate serial number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SerialError {
    /// Nothing given.
    #[error("a serial number is required")]
    Empty,
    /// More text than any serial number needs.
    #[error(
        "{len} characters; a serial number is at most {MAX_SERIAL_BYTES} bytes in hex ({MAX_SERIAL_TEXT_LEN} characters with ':' between bytes)"
    )]
    TextTooLong {
        /// The text's length in bytes.
        len: usize,
    },
    /// A character that is neither a hex digit nor `:`.
    #[error(
        "{text:?} is not a serial number: hex digits (0-9, a-f, A-F), optionally with ':' between bytes"
    )]
    NotHex {
        /// The text.
        text: String,
    },
    /// `:`-separated, but a group is not one byte (two hex digits).
    #[error("{text:?}: with ':' separators every byte is two hex digits (0f:3a, not f:3a)")]
    BadGroup {
        /// The text.
        text: String,
    },
    /// A value longer than RFC 5280 allows.
    #[error(
        "{text:?} is {bytes} bytes; a serial number is at most {MAX_SERIAL_BYTES} bytes (RFC 5280)"
    )]
    TooLong {
        /// The text.
        text: String,
        /// Its value's length in bytes, without leading zero bytes.
        bytes: usize,
    },
}

/// The canonical form (see the module documentation) of a serial number as people and tools
/// write it: hex digits in either case, either as one run (`8F3A01`; an odd number of digits
/// reads as a number, `f3a01` is `0f3a01`) or as bytes separated by `:` (`00:8f:3a:01`, two
/// digits each). Leading zero bytes (a DER sign byte, padding) are dropped. Refused: empty
/// text, anything else (no `0x`, spaces or decimal), and values longer than
/// [`MAX_SERIAL_BYTES`].
pub fn normalise_serial(text: &str) -> Result<String, SerialError> {
    if text.is_empty() {
        return Err(SerialError::Empty);
    }
    if text.len() > MAX_SERIAL_TEXT_LEN {
        return Err(SerialError::TextTooLong { len: text.len() });
    }
    if !text.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
        return Err(SerialError::NotHex { text: text.into() });
    }
    let mut digits = String::with_capacity(text.len() + 1);
    if text.contains(':') {
        if text.split(':').any(|byte| byte.len() != 2) {
            return Err(SerialError::BadGroup { text: text.into() });
        }
        digits.extend(text.split(':'));
    } else {
        if text.len() % 2 == 1 {
            digits.push('0');
        }
        digits.push_str(text);
    }
    // Only hex digits, an even number of them: decoding cannot fail.
    let bytes = hex::decode(&digits).map_err(|_| SerialError::NotHex { text: text.into() })?;
    let canonical = serial_from_der_bytes(&bytes);
    if canonical.len() / 2 > MAX_SERIAL_BYTES {
        return Err(SerialError::TooLong {
            text: text.into(),
            bytes: canonical.len() / 2,
        });
    }
    Ok(canonical)
}

/// The canonical form of a certificate's serial number from the content bytes of its DER
/// INTEGER (as X.509 parsers hand them out, e.g. `x509-parser`'s `raw_serial()`): a leading
/// `0x00` sign byte and any further leading zero bytes are dropped, the rest written as
/// lowercase hex. Equals [`normalise_serial`] of the same value. Total: empty input is the
/// serial zero (`00`); a value longer than [`MAX_SERIAL_BYTES`] gets its form too (no
/// revocation can name it). A negative serial (not allowed by RFC 5280; the hub's CA never
/// issues one) is written by its two's-complement bytes.
pub fn serial_from_der_bytes(bytes: &[u8]) -> String {
    let first = bytes.iter().position(|b| *b != 0);
    match first {
        Some(i) => hex::encode(&bytes[i..]),
        None => "00".to_string(),
    }
}

/// One revoked certificate (a record, keyed by its canonical serial). Entries are never
/// changed in place: a revocation adds one, pruning removes one ([`RevocationListVersion`]
/// relies on that).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedCertificate {
    /// The serial number, canonical ([`normalise_serial`]).
    pub serial: String,
    /// Why, as the admin gave it ([`check_reason`]).
    pub reason: String,
    /// Whom the certificate names, if the admin said (`operator/alice`, `agent/prod`,
    /// `node/3`): shown with the entry; the serial alone decides what is refused.
    pub identity: Option<Identity>,
    /// The certificate's `notAfter` (milliseconds since the Unix epoch), if given: the entry
    /// may be pruned [`PRUNE_AFTER_EXPIRY_MS`] after it.
    pub not_after: Option<TimestampMs>,
    /// Entry time of the revocation ([`crate::entry_clock`]).
    pub revoked_at: TimestampMs,
    /// Who revoked it (the entry's verified actor).
    pub revoked_by: Identity,
    /// Log index of the revoking entry: unique, and larger than every earlier entry's.
    pub revoked_index: u64,
}

impl RevokedCertificate {
    /// Whether an entry applied at entry time `now` may drop this one: its certificate
    /// expired at least [`PRUNE_AFTER_EXPIRY_MS`] before.
    pub fn prunable_at(&self, now: TimestampMs) -> bool {
        self.not_after.is_some_and(|t| expired_long_ago(t, now))
    }
}

/// Whether a certificate whose `notAfter` is `not_after` expired at least
/// [`PRUNE_AFTER_EXPIRY_MS`] before `now`: the one pruning rule.
pub(crate) fn expired_long_ago(not_after: TimestampMs, now: TimestampMs) -> bool {
    not_after <= now.saturating_sub(PRUNE_AFTER_EXPIRY_MS)
}

/// A cheap fingerprint of the revocation list ([`crate::State::revocation_list_version`]):
/// different whenever the list is. A node compares it with the one it last loaded to notice
/// a change without reading the list.
///
/// Why two numbers suffice: an entry is only ever added (with the revoking entry's log index,
/// larger than every index before) or removed, never changed. An addition raises
/// `newest_index`; a removal without an addition lowers `count`; and a list whose count and
/// newest index both equal an earlier list's holds no entry added since, so it is a subset of
/// that list of the same size: the same list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RevocationListVersion {
    /// Revoked certificates in the list.
    pub count: usize,
    /// The largest [`RevokedCertificate::revoked_index`] in the list; 0 when empty.
    pub newest_index: u64,
}

/// Bidirectional-text controls: they make a reason read differently from what it holds.
const BIDI_CONTROLS: &[char] = &[
    '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}',
    '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
];

/// Checks a revocation reason: not blank, at most [`MAX_REASON_CHARS`] characters, printable
/// (no control characters, no bidirectional-text controls). The error names the field
/// `reason`.
pub fn check_reason(reason: &str) -> Result<(), CommandError> {
    let invalid = |why: String| CommandError::invalid("reason", why);
    if reason.trim().is_empty() {
        return Err(invalid(
            "is required: say why the certificate is revoked".into(),
        ));
    }
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(invalid(format!(
            "{chars} characters; at most {MAX_REASON_CHARS}"
        )));
    }
    if let Some((at, c)) = reason
        .chars()
        .enumerate()
        .find(|(_, c)| c.is_control() || BIDI_CONTROLS.contains(c))
    {
        return Err(invalid(format!(
            "{reason:?} holds the unprintable character {} at character {at}",
            c.escape_unicode()
        )));
    }
    Ok(())
}

/// The identity a revoked certificate names, from its `kind/name` text (`operator/alice`,
/// `agent/prod`, `node/3`: how the engine writes identities; the node takes it from the
/// certificate's URI SAN `hub://<cluster>/<kind>/<name>`). A token is refused: no certificate
/// names one. The error names the field `identity`.
pub fn parse_certificate_identity(text: &str) -> Result<Identity, CommandError> {
    let identity =
        Identity::parse(text).map_err(|e| CommandError::invalid("identity", e.to_string()))?;
    if !identity.is_certificate_identity() {
        return Err(CommandError::invalid(
            "identity",
            format!(
                "{identity}: no certificate names a token (revoke it with hubctl token revoke)"
            ),
        ));
    }
    Ok(identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colon_separated_uppercase_plain_and_der_bytes_agree() {
        let der = [0x00, 0x8f, 0x3a, 0x01];
        let canonical = serial_from_der_bytes(&der);
        assert_eq!(canonical, "8f3a01");
        for text in ["00:8F:3A:01", "8F:3A:01", "8f3a01", "8F3A01", "008f3a01"] {
            assert_eq!(normalise_serial(text).as_deref(), Ok("8f3a01"), "{text}");
        }
        // A DER INTEGER without a sign byte (high bit clear), and an odd number of digits.
        assert_eq!(serial_from_der_bytes(&[0x0f, 0x3a, 0x01]), "0f3a01");
        assert_eq!(normalise_serial("f3a01").as_deref(), Ok("0f3a01"));
        assert_eq!(normalise_serial("0F:3A:01").as_deref(), Ok("0f3a01"));
        // Zero, however written.
        assert_eq!(serial_from_der_bytes(&[0x00]), "00");
        assert_eq!(serial_from_der_bytes(&[]), "00");
        assert_eq!(normalise_serial("0").as_deref(), Ok("00"));
        assert_eq!(normalise_serial("00:00").as_deref(), Ok("00"));
    }

    #[test]
    fn a_twenty_byte_serial_is_the_longest() {
        // As rcgen writes the hub's serials: 20 bytes of a hash, high bit cleared.
        let twenty: Vec<u8> = (0x41..0x55).collect();
        assert_eq!(twenty.len(), MAX_SERIAL_BYTES);
        let hex = serial_from_der_bytes(&twenty);
        assert_eq!(normalise_serial(&hex), Ok(hex.clone()));
        let colons = twenty
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(normalise_serial(&colons), Ok(hex.clone()));
        // 20 bytes with the high bit set: 21 octets of DER with the sign byte, still taken.
        let high = format!("00:ff{}", &colons[2..]);
        let from_der = serial_from_der_bytes(&[&[0u8, 0xff][..], &twenty[1..]].concat());
        assert_eq!(normalise_serial(&high), Ok(from_der));
        // 21 bytes of value are refused.
        assert_eq!(
            normalise_serial(&format!("01{hex}")),
            Err(SerialError::TooLong {
                text: format!("01{hex}"),
                bytes: 21
            })
        );
    }

    #[test]
    fn an_entry_is_prunable_a_day_after_its_certificate_expired() {
        let entry = |not_after| RevokedCertificate {
            serial: "01".into(),
            reason: "r".into(),
            identity: None,
            not_after,
            revoked_at: 0,
            revoked_by: Identity::Operator("root".into()),
            revoked_index: 1,
        };
        let t = 1_000_000_000;
        assert!(!entry(Some(t)).prunable_at(t + PRUNE_AFTER_EXPIRY_MS - 1));
        assert!(entry(Some(t)).prunable_at(t + PRUNE_AFTER_EXPIRY_MS));
        assert!(!entry(None).prunable_at(TimestampMs::MAX));
        // No overflow at the ends of time.
        assert!(!entry(Some(TimestampMs::MAX)).prunable_at(TimestampMs::MIN));
        assert!(entry(Some(TimestampMs::MIN)).prunable_at(TimestampMs::MAX));
    }

    #[test]
    fn reasons_and_identities_are_checked() {
        assert_eq!(check_reason("laptop stolen"), Ok(()));
        assert_eq!(check_reason(&"é".repeat(MAX_REASON_CHARS)), Ok(()));
        let e = check_reason("red \u{1b}[31m").unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid reason: \"red \\u{1b}[31m\" holds the unprintable character \\u{1b} at character 4"
        );
        assert_eq!(parse_certificate_identity("node/3"), Ok(Identity::Node(3)));
        let e = parse_certificate_identity("token/ci")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid identity: token/ci: no certificate names a token"),
            "{e}"
        );
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(normalise_serial(""), Err(SerialError::Empty));
        for bad in ["0x8f3a", "8f 3a", "8f-3a", "-8f", "8g", "é", "12\n"] {
            assert!(
                matches!(normalise_serial(bad), Err(SerialError::NotHex { .. })),
                "{bad:?}"
            );
        }
        for bad in [":", "8f:", ":8f", "8f::3a", "8:f3", "8f3:a0", "08f:3a"] {
            assert!(
                matches!(normalise_serial(bad), Err(SerialError::BadGroup { .. })),
                "{bad:?}"
            );
        }
        let long = "0".repeat(MAX_SERIAL_TEXT_LEN + 1);
        assert_eq!(
            normalise_serial(&long),
            Err(SerialError::TextTooLong {
                len: MAX_SERIAL_TEXT_LEN + 1
            })
        );
        // The message names the value and the rule.
        let e = normalise_serial("8f:3g").unwrap_err().to_string();
        assert!(e.contains("\"8f:3g\"") && e.contains("hex digits"), "{e}");
    }
}
