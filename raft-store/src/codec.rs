//! Versioned binary encoding for everything the store persists and the node sends.
//!
//! A value is one format-version byte followed by its bincode (standard config, serde). A
//! decoder refuses versions it does not know, so a future release can migrate old values
//! instead of misreading them.
//!
//! Every decode is bounded ([`Limit`], SPEC S3): bytes come from the network or from files,
//! and bincode trusts the lengths it reads. Without a bound, a string that declares 2^45 bytes
//! in an 11-byte message makes the decoder allocate 32 TiB and the process abort. So
//! [`decode_bounded`] refuses an input longer than the limit's encoded size, and gives bincode
//! a budget (`with_limit`) that every declared length and every decoded primitive is charged
//! against **before** anything is allocated: a length prefix beyond the budget is an error,
//! not an allocation. The budget follows the input: the smallest power of four at least
//! [`BUDGET_FACTOR`] times the input's length (at most the limit's), so decoding `n` bytes
//! allocates at most about `32 n` bytes (plus serde's capped pre-allocation of 1 MiB per
//! nested sequence), whatever lengths they declare.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The format version written today.
pub const FORMAT_VERSION: u8 = 1;

/// Largest encoded command a node accepts from a client or forwards to the leader.
pub const MAX_COMMAND_BYTES: usize = 256 << 10;
/// Largest gRPC message a hub node accepts or sends (one Raft message, one API call).
pub const MAX_MESSAGE_BYTES: usize = hub_proto::MAX_MESSAGE_BYTES;
/// Largest state record a node decodes (from its store, or from a snapshot file); before
/// snapshots were streamed through files, also the largest snapshot.
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;
/// Largest snapshot file a node builds, sends or receives. The file stays on disk and is
/// read one record at a time (each within [`Limit::Snapshot`]), so this bounds disk, not
/// memory.
pub const MAX_SNAPSHOT_FILE_BYTES: u64 = 64 << 30;

/// How much bincode's budget exceeds the encoded size. bincode charges a decoded value's
/// in-memory size: a `u64` costs 8 even when its varint took 1 byte, a string its length plus
/// 8 for the length. No encoding costs more than 8 times its bytes (the 1-byte varint of a
/// `u64`), so every valid encoding within a limit fits its budget.
pub const BUDGET_FACTOR: usize = 8;

/// What a decoded value may be at most: its encoded size, and (through bincode's budget) what
/// decoding it may allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// One command ([`MAX_COMMAND_BYTES`]): a forwarded write, and the small values the store
    /// keeps beside the log and the state (vote, log ids, membership, a snapshot's header).
    Command,
    /// One Raft message or reply, or one stored log entry ([`MAX_MESSAGE_BYTES`]).
    Message,
    /// One state record ([`MAX_SNAPSHOT_BYTES`]).
    Snapshot,
}

impl Limit {
    /// The longest encoding (format byte included) this limit accepts.
    pub const fn max_bytes(self) -> usize {
        match self {
            Limit::Command => MAX_COMMAND_BYTES,
            Limit::Message => MAX_MESSAGE_BYTES,
            Limit::Snapshot => MAX_SNAPSHOT_BYTES,
        }
    }
}

/// The smallest budget; every budget is this times a power of four.
const MIN_BUDGET: usize = 1 << 16;

/// bincode's budget for decoding `len` bytes (see the module documentation).
pub fn budget_for(len: usize) -> usize {
    let need = len.saturating_mul(BUDGET_FACTOR);
    let mut budget = MIN_BUDGET;
    while budget < need {
        budget = budget.saturating_mul(4);
    }
    budget
}

/// Decodes `body` with bincode's budget set to the smallest step of the ladder that holds
/// `budget` (bincode takes its limit as a const generic).
fn decode_with_budget<T: DeserializeOwned>(
    body: &[u8],
    budget: usize,
) -> Result<(T, usize), bincode::error::DecodeError> {
    macro_rules! ladder {
        ($($shift:literal),*) => {
            $(
                if budget <= MIN_BUDGET << $shift {
                    let config = bincode::config::standard().with_limit::<{ MIN_BUDGET << $shift }>();
                    return bincode::serde::decode_from_slice(body, config);
                }
            )*
        };
    }
    // 64 KiB, 256 KiB, ... 16 GiB: covers the largest limit's budget (8 GiB).
    ladder!(0, 2, 4, 6, 8, 10, 12, 14, 16, 18);
    Err(bincode::error::DecodeError::LimitExceeded)
}

/// Decodes one value from `reader` with bincode's budget set as [`decode_with_budget`] does.
fn decode_reader_with_budget<T: DeserializeOwned, R: std::io::Read>(
    reader: &mut R,
    budget: usize,
) -> Result<T, bincode::error::DecodeError> {
    macro_rules! ladder {
        ($($shift:literal),*) => {
            $(
                if budget <= MIN_BUDGET << $shift {
                    let config = bincode::config::standard().with_limit::<{ MIN_BUDGET << $shift }>();
                    return bincode::serde::decode_from_std_read(reader, config);
                }
            )*
        };
    }
    ladder!(0, 2, 4, 6, 8, 10, 12, 14, 16, 18);
    Err(bincode::error::DecodeError::LimitExceeded)
}

/// Why bytes could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Zero bytes.
    #[error("empty value")]
    Empty,
    /// Written by a release this one cannot read.
    #[error("unknown format version {0} (this release reads {FORMAT_VERSION})")]
    UnknownVersion(u8),
    /// More bytes than the limit allows.
    #[error("value is {bytes} bytes, at most {limit} allowed")]
    TooLarge {
        /// The input's length.
        bytes: usize,
        /// The limit's encoded size.
        limit: usize,
    },
    /// Lengths inside the value declare more than its input can hold.
    #[error("value declares lengths beyond its decoding budget of {budget} bytes")]
    LimitExceeded {
        /// bincode's budget for this input ([`budget_for`]).
        budget: usize,
    },
    /// The body is not a valid encoding of the expected type.
    #[error("malformed value: {0}")]
    Malformed(String),
}

/// A value's bincode body, after its format byte: refused unless that byte is
/// [`FORMAT_VERSION`].
pub fn stored_body(bytes: &[u8]) -> Result<&[u8], CodecError> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => Ok(body),
        Some((version, _)) => Err(CodecError::UnknownVersion(*version)),
        None => Err(CodecError::Empty),
    }
}

/// A value's bincode body, after its format byte: refused if `bytes` is over `limit` or of
/// another format version.
pub fn bounded_body(bytes: &[u8], limit: Limit) -> Result<&[u8], CodecError> {
    let max = limit.max_bytes();
    if bytes.len() > max {
        return Err(CodecError::TooLarge {
            bytes: bytes.len(),
            limit: max,
        });
    }
    stored_body(bytes)
}

/// Encodes `value` behind the format version.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    // Serializing plain data into a Vec has no failure mode (no I/O, no size limit).
    bincode::serde::encode_into_std_write(value, &mut out, bincode::config::standard())
        .expect("encoding into memory cannot fail");
    out
}

/// Decodes the value at the start of bytes produced by [`encode`], within `limit`: the value
/// and the body's bytes after it.
fn decode_start<T: DeserializeOwned>(bytes: &[u8], limit: Limit) -> Result<(T, usize), CodecError> {
    let body = bounded_body(bytes, limit)?;
    // The input is at most `max` bytes, so its budget is at most the limit's.
    let (value, read) = decode_body_prefix(body)?;
    Ok((value, body.len() - read))
}

/// Decodes the value at the start of `body` (bincode, no format byte: a part of a value whose
/// format byte and size were checked), with the budget of `body`'s length: the value and the
/// bytes it took. What follows it in `body` is left alone.
pub fn decode_body_prefix<T: DeserializeOwned>(body: &[u8]) -> Result<(T, usize), CodecError> {
    let budget = budget_for(body.len());
    decode_with_budget(body, budget).map_err(|e| match e {
        bincode::error::DecodeError::LimitExceeded => CodecError::LimitExceeded { budget },
        // serde's messages (`unknown Command tag 97`) as they are, not in bincode's Debug form.
        bincode::error::DecodeError::OtherString(message) => CodecError::Malformed(message),
        e => CodecError::Malformed(e.to_string()),
    })
}

/// Decodes the value at the front of `reader` (bincode, no format byte: a part of a file
/// whose format byte was checked), which holds at most `remaining` more bytes: the budget is
/// that of `remaining` bytes, and never more than `limit`'s. The reader is left just after
/// the value.
pub fn decode_body_from_reader<T: DeserializeOwned, R: std::io::Read>(
    reader: &mut R,
    remaining: u64,
    limit: Limit,
) -> Result<T, CodecError> {
    let len = usize::try_from(remaining)
        .unwrap_or(usize::MAX)
        .min(limit.max_bytes());
    let budget = budget_for(len);
    decode_reader_with_budget(reader, budget).map_err(|e| match e {
        bincode::error::DecodeError::LimitExceeded => CodecError::LimitExceeded { budget },
        bincode::error::DecodeError::OtherString(message) => CodecError::Malformed(message),
        e => CodecError::Malformed(e.to_string()),
    })
}

/// Decodes bytes produced by [`encode`] within `limit`; trailing bytes are an error.
pub fn decode_bounded<T: DeserializeOwned>(bytes: &[u8], limit: Limit) -> Result<T, CodecError> {
    match decode_start(bytes, limit)? {
        (value, 0) => Ok(value),
        (_, trailing) => Err(CodecError::Malformed(format!("{trailing} trailing bytes"))),
    }
}

/// Decodes the value at the start of bytes produced by [`encode`] (a file's header), within
/// `limit`: `bytes` may hold more after it (read no more than the limit's size of a file).
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8], limit: Limit) -> Result<T, CodecError> {
    decode_start(bytes, limit).map(|(value, _trailing)| value)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let bytes = encode(&("x".to_string(), 7u64));
        assert_eq!(bytes[0], FORMAT_VERSION);
        let back: (String, u64) = decode_bounded(&bytes, Limit::Command).unwrap();
        assert_eq!(back, ("x".to_string(), 7));
        assert!(matches!(
            decode_bounded::<u64>(&[], Limit::Command),
            Err(CodecError::Empty)
        ));
        assert!(matches!(
            decode_bounded::<u64>(&[9, 1], Limit::Command),
            Err(CodecError::UnknownVersion(9))
        ));
        let mut long = encode(&1u8);
        long.push(0);
        assert!(matches!(
            decode_bounded::<u8>(&long, Limit::Command),
            Err(CodecError::Malformed(_))
        ));
        assert!(matches!(
            decode_bounded::<String>(&[1, 200], Limit::Command),
            Err(CodecError::Malformed(_))
        ));
        // A prefix: what follows the value is left alone, and the same refusals hold.
        assert_eq!(decode_prefix::<u8>(&long, Limit::Command).unwrap(), 1);
        assert!(matches!(
            decode_prefix::<u64>(&[9, 1], Limit::Command),
            Err(CodecError::UnknownVersion(9))
        ));
        assert!(matches!(
            decode_prefix::<String>(&[1, 200], Limit::Command),
            Err(CodecError::Malformed(_))
        ));
    }

    /// The 11-byte length bomb of issue 14: the format byte, then a string length of 2^45 as
    /// bincode's varint (0xfd + u64 little-endian), then one byte of "content".
    pub(crate) fn length_bomb() -> Vec<u8> {
        let mut b = vec![FORMAT_VERSION, 0xfd];
        b.extend_from_slice(&(1u64 << 45).to_le_bytes());
        b.push(b'x');
        b
    }

    #[test]
    fn a_declared_length_beyond_the_limit_is_an_error_not_an_allocation() {
        let bomb = length_bomb();
        assert_eq!(bomb.len(), 11);
        for limit in [Limit::Command, Limit::Message, Limit::Snapshot] {
            let started = Instant::now();
            // An unbounded decoder would abort the test process here (allocation failure).
            let r = decode_bounded::<String>(&bomb, limit);
            assert!(
                matches!(r, Err(CodecError::LimitExceeded { .. })),
                "{limit:?}: {r:?}"
            );
            let r = decode_bounded::<(Vec<String>, u8)>(&bomb, limit);
            assert!(r.is_err(), "{limit:?}: {r:?}");
            assert!(started.elapsed() < Duration::from_secs(1));
        }
    }

    #[test]
    fn the_budget_follows_the_input() {
        assert_eq!(budget_for(0), MIN_BUDGET);
        assert_eq!(budget_for(11), MIN_BUDGET);
        assert_eq!(budget_for(MIN_BUDGET / 8 + 1), MIN_BUDGET * 4);
        for len in [
            1,
            1000,
            MAX_COMMAND_BYTES,
            MAX_MESSAGE_BYTES,
            MAX_SNAPSHOT_BYTES,
        ] {
            let b = budget_for(len);
            assert!(b >= len * BUDGET_FACTOR && b <= (len * BUDGET_FACTOR).max(MIN_BUDGET) * 4);
        }
        assert!(budget_for(MAX_SNAPSHOT_BYTES) <= MIN_BUDGET << 18);
        // A small input may not declare much, whatever the limit: 64 KiB declared in 7 bytes.
        let mut b = vec![FORMAT_VERSION, 0xfc];
        b.extend_from_slice(&(1u32 << 16).to_le_bytes());
        b.push(b'x');
        for limit in [Limit::Command, Limit::Message, Limit::Snapshot] {
            assert!(
                matches!(
                    decode_bounded::<String>(&b, limit),
                    Err(CodecError::LimitExceeded { .. })
                ),
                "{limit:?}"
            );
        }
        // 1 KiB declared is within the budget: allocated, then the input is found short.
        let mut b = vec![FORMAT_VERSION, 0xfb];
        b.extend_from_slice(&1024u16.to_le_bytes());
        b.push(b'x');
        assert!(matches!(
            decode_bounded::<String>(&b, Limit::Command),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn inputs_longer_than_the_limit_are_refused_before_decoding() {
        let big = encode(&vec![7u8; MAX_COMMAND_BYTES]);
        assert!(matches!(
            decode_bounded::<Vec<u8>>(&big, Limit::Command),
            Err(CodecError::TooLarge { limit, .. }) if limit == MAX_COMMAND_BYTES
        ));
        assert_eq!(
            decode_bounded::<Vec<u8>>(&big, Limit::Message)
                .unwrap()
                .len(),
            MAX_COMMAND_BYTES
        );
    }

    #[test]
    fn every_valid_encoding_within_a_limit_fits_its_budget() {
        // The worst case for bincode's accounting: u64s that each take one byte on the wire
        // and are charged 8, filling the whole command limit.
        let n = MAX_COMMAND_BYTES - 16;
        let worst: Vec<u64> = vec![1; n];
        let bytes = encode(&worst);
        assert!(bytes.len() <= MAX_COMMAND_BYTES, "{}", bytes.len());
        let back: Vec<u64> = decode_bounded(&bytes, Limit::Command).unwrap();
        assert_eq!(back.len(), n);
        // Many empty strings: 1 byte each, charged 8 for the length.
        let strings: Vec<String> = vec![String::new(); n];
        let back: Vec<String> = decode_bounded(&encode(&strings), Limit::Command).unwrap();
        assert_eq!(back.len(), n);
    }
}
