//! Canary events (issue 52 item 5): what one tick decided and why, as Flagger records it on
//! the Canary object (`kubectl describe canary`): a type (Normal or Warning), a reason and a
//! message in Flagger's wording (`Advance podinfo.test canary weight 10`, `Halt podinfo.test
//! advancement success rate 80.00% < 99%`).
//!
//! A message never carries a secret and never grows beyond [`MAX_EVENT_MESSAGE_BYTES`]:
//! [`event_message`] removes the credentials of every URL in it (userinfo and query), the
//! userinfo and query values of the canary's webhook URLs wherever they appear, and control
//! characters, then bounds it.

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// The longest event message, in bytes; a longer one is cut at a character boundary and ends
/// with `…`.
pub const MAX_EVENT_MESSAGE_BYTES: usize = 512;

/// What replaces a credential in a message.
pub const REDACTED: &str = "<redacted>";

/// Query values (and passwords) shorter than this are not scrubbed where they appear outside
/// a URL: a one- or two-letter value would mangle every word that contains it. Inside a URL
/// every query is removed whatever its length.
const MIN_SCRUBBED_SECRET: usize = 4;

/// How much of an incoming message redaction reads (bounds its cost): it is cut at the last
/// whitespace before this many bytes, so no URL is split.
const MAX_SCANNED_BYTES: usize = 4 * MAX_EVENT_MESSAGE_BYTES;

/// The Kubernetes event type Flagger records (`corev1.EventTypeNormal` / `EventTypeWarning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// Progress as expected.
    Normal,
    /// Something held, failed or was refused.
    Warning,
}

impl EventKind {
    /// `Normal` or `Warning`, as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Normal => "Normal",
            EventKind::Warning => "Warning",
        }
    }
}

/// An event's reason. Flagger records every canary event with the reason `Synced`; new
/// reasons are added at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventReason {
    /// A canary run (tick) recorded something: every Flagger canary event.
    Synced,
}

impl EventReason {
    /// The reason as Kubernetes shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Synced => "Synced",
        }
    }
}

/// One event of a canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryEvent {
    /// Entry time of the tick that recorded it (of the latest one, when repeated).
    pub time_ms: TimestampMs,
    /// Normal or Warning.
    pub kind: EventKind,
    /// Why it was recorded.
    pub reason: EventReason,
    /// What happened, in Flagger's wording; bounded and free of credentials.
    pub message: String,
    /// How many ticks in a row recorded this same event (Kubernetes' event count: `x3`).
    pub count: u32,
    /// Entry time of the first of them.
    pub first_time_ms: TimestampMs,
}

impl CanaryEvent {
    /// A `Synced` event recorded once at `time_ms`. `message` must already be safe (see
    /// [`event_message`]); it is bounded again here.
    pub fn new(time_ms: TimestampMs, kind: EventKind, message: String) -> Self {
        CanaryEvent {
            time_ms,
            kind,
            reason: EventReason::Synced,
            message: bounded(message),
            count: 1,
            first_time_ms: time_ms,
        }
    }

    /// Whether `other` is the same event recorded again (same type, reason and message).
    pub fn repeats(&self, other: &CanaryEvent) -> bool {
        self.kind == other.kind && self.reason == other.reason && self.message == other.message
    }
}

/// `message`, made safe to keep and show: credentials removed (see the module), control
/// characters replaced by spaces, and cut to [`MAX_EVENT_MESSAGE_BYTES`]. Of a message longer
/// than 2 KiB only the part before its last whitespace within 2 KiB is read (so no URL or
/// secret is cut in two); the rest is shown as `…`. `urls` are the
/// canary's webhook URLs, whose userinfo and query values are scrubbed wherever they appear.
pub fn event_message<'a>(message: &str, urls: impl IntoIterator<Item = &'a str>) -> String {
    let scanned = scan_prefix(message);
    let mut out = redact_urls(scanned);
    for secret in urls.into_iter().flat_map(url_secrets) {
        if secret.len() >= MIN_SCRUBBED_SECRET && out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), REDACTED);
        }
    }
    let mut out: String = out
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if scanned.len() < message.len() {
        out.push('…');
    }
    bounded(out)
}

/// `text` cut to [`MAX_EVENT_MESSAGE_BYTES`] at a character boundary, ending with `…` when
/// cut.
fn bounded(text: String) -> String {
    if text.len() <= MAX_EVENT_MESSAGE_BYTES {
        return text;
    }
    let ellipsis = '…'.len_utf8();
    let mut end = MAX_EVENT_MESSAGE_BYTES - ellipsis;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = text[..end].to_string();
    out.push('…');
    out
}

/// The part of `message` redaction reads: all of it when short, else up to the last
/// whitespace before [`MAX_SCANNED_BYTES`] (nothing, if there is none), so that no URL or
/// secret is cut in two.
fn scan_prefix(message: &str) -> &str {
    if message.len() <= MAX_SCANNED_BYTES {
        return message;
    }
    let mut end = MAX_SCANNED_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let head = &message[..end];
    head.rfind(char::is_whitespace).map_or("", |i| &head[..i])
}

/// Whether `c` ends a URL inside running text.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | ']')
}

/// `text` with every URL's userinfo (`user:password@`) removed and its query and fragment
/// replaced by `?<redacted>`.
fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        let after = sep + 3;
        let end = rest[after..]
            .find(ends_url)
            .map_or(rest.len(), |i| after + i);
        out.push_str(&rest[..after]);
        out.push_str(&redact_url_tail(&rest[after..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The part of a URL after `://`, without userinfo, query or fragment (the query marked as
/// removed).
fn redact_url_tail(tail: &str) -> String {
    let authority_end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
    let host_start = tail[..authority_end].rfind('@').map_or(0, |at| at + 1);
    let without_userinfo = &tail[host_start..];
    match without_userinfo.find(['?', '#']) {
        Some(q) => format!("{}?{REDACTED}", &without_userinfo[..q]),
        None => without_userinfo.to_string(),
    }
}

/// The credentials a webhook URL may carry: its userinfo, its password, its whole query and
/// each query value (percent-encoded as written, and decoded).
fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let Some(sep) = url.find("://") else {
        return secrets;
    };
    let tail = &url[sep + 3..];
    let authority_end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
    if let Some(at) = tail[..authority_end].rfind('@') {
        let userinfo = &tail[..at];
        secrets.push(userinfo.to_string());
        if let Some((_, password)) = userinfo.split_once(':') {
            secrets.push(password.to_string());
            secrets.push(percent_decoded(password));
        }
    }
    if let Some(q) = tail.find('?') {
        let query = tail[q + 1..].split('#').next().unwrap_or_default();
        secrets.push(query.to_string());
        for pair in query.split('&') {
            let value = pair.split_once('=').map_or(pair, |(_, v)| v);
            secrets.push(value.to_string());
            secrets.push(percent_decoded(value));
        }
    }
    // Longest first, so that a value inside the whole query is not replaced before it.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// `text` with `%XX` escapes (and `+` in a query) decoded; invalid escapes are kept.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value in thousandths as Go's `%.2f` prints it (`80000` → `80.00`).
pub(super) fn two_decimals(milli: i64) -> String {
    // Rounds the binary value exactly, half to even, as Go does.
    format!("{:.2}", milli as f64 / 1000.0)
}

/// A value in thousandths as Go's `%v` prints a float64 (`99000` → `99`, `99500` → `99.5`):
/// thousandths never need an exponent.
pub(super) fn go_float(milli: i64) -> String {
    let whole = milli / 1000;
    let frac = (milli % 1000).abs();
    let sign = if milli < 0 && whole == 0 { "-" } else { "" };
    if frac == 0 {
        return format!("{sign}{whole}");
    }
    let digits = format!("{frac:03}");
    format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
}

/// A duration in microseconds as Go's `time.Duration` prints it (`1500000` → `1.5s`,
/// `250500` → `250.5ms`, `90000000` → `1m30s`).
pub(super) fn go_duration(micros: i64) -> String {
    if micros == 0 {
        return "0s".to_string();
    }
    let sign = if micros < 0 { "-" } else { "" };
    let u = micros.unsigned_abs();
    let fraction = |value: u64, digits: usize| {
        let scale = 10u64.pow(digits as u32);
        let frac = format!("{:0digits$}", value % scale);
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            (value / scale).to_string()
        } else {
            format!("{}.{frac}", value / scale)
        }
    };
    if u < 1_000 {
        return format!("{sign}{u}µs");
    }
    if u < 1_000_000 {
        return format!("{sign}{}ms", fraction(u, 3));
    }
    let seconds = fraction(u % 60_000_000, 6);
    let minutes = u / 60_000_000;
    match (minutes / 60, minutes % 60) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOOK: &str = "https://bot:s3cr3t-pw@gate.example/approve?token=t0k3n-abc&team=a";

    #[test]
    fn urls_in_a_message_lose_their_userinfo_and_query() {
        let msg = format!("error sending request for url ({HOOK}): connection refused");
        let out = event_message(&msg, [HOOK]);
        assert_eq!(
            out,
            "error sending request for url (https://gate.example/approve?<redacted>): \
             connection refused"
        );
    }

    #[test]
    fn webhook_secrets_are_scrubbed_outside_urls_too() {
        let msg = "denied for user bot:s3cr3t-pw, token t0k3n-abc, decoded p@ss word";
        let hook = "http://u:p%40ss+word@h/?k=t0k3n-abc";
        let out = event_message(msg, [HOOK, hook]);
        assert!(!out.contains("s3cr3t-pw"), "{out}");
        assert!(!out.contains("t0k3n-abc"), "{out}");
        assert!(!out.contains("p@ss word"), "{out}");
        assert!(out.contains("denied for user"), "{out}");
    }

    #[test]
    fn short_values_are_not_scrubbed_from_words() {
        let out = event_message("a team of one", [HOOK]);
        assert_eq!(out, "a team of one");
    }

    #[test]
    fn messages_are_bounded_and_single_line() {
        let long = "é ".repeat(3_000);
        let out = event_message(&format!("line\nbreak {long}"), [HOOK]);
        assert!(out.len() <= MAX_EVENT_MESSAGE_BYTES, "{}", out.len());
        assert!(out.starts_with("line break é é"), "{out}");
        assert!(out.ends_with('…'), "{out}");
        // A secret beyond the scanned part never survives a cut.
        let hidden = format!(
            "{} https://x:{}@h/",
            "a".repeat(MAX_SCANNED_BYTES - 20),
            "pw"
        );
        let out = event_message(&hidden, []);
        assert!(!out.contains("x:pw"), "{out}");
        let unbroken = "b".repeat(MAX_SCANNED_BYTES + 10);
        assert_eq!(event_message(&unbroken, []), "…");
    }

    #[test]
    fn numbers_print_as_go_prints_them() {
        assert_eq!(two_decimals(80_000), "80.00");
        assert_eq!(two_decimals(99_995), "100.00"); // 99.995 is just above in binary
        assert_eq!(two_decimals(80_125), "80.12"); // an exact tie rounds to even
        assert_eq!(go_float(99_000), "99");
        assert_eq!(go_float(99_500), "99.5");
        assert_eq!(go_float(1), "0.001");
        assert_eq!(go_float(-250), "-0.25");
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(999), "999µs");
        assert_eq!(go_duration(500_000), "500ms");
        assert_eq!(go_duration(250_500), "250.5ms");
        assert_eq!(go_duration(1_500_000), "1.5s");
        assert_eq!(go_duration(90_000_000), "1m30s");
        assert_eq!(go_duration(3_600_000_000), "1h0m0s");
        assert_eq!(go_duration(-2_000), "-2ms");
    }

    #[test]
    fn percent_decoding_keeps_invalid_escapes() {
        assert_eq!(percent_decoded("a%41%4"), "aA%4");
        assert_eq!(percent_decoded("%zz+"), "%zz ");
    }
}
