//! The config file: a tiny YAML subset.
//!
//! One top-level `key: value` per line; `#` comments (whole-line, or after whitespace in a
//! value); blank lines; values plain, `'single'`- or `"double"`-quoted. Known keys are
//! [`KNOWN_KEYS`]; everything else is ignored, including indented lines (nested YAML that
//! belongs to other keys), list items and lines that do not parse, as long as they are not
//! for a known key. A known key with a malformed value, a duplicate known key or a missing
//! `port` is a [`ConfigError`] naming the key.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

/// The keys this service reads; any other key is ignored.
pub const KNOWN_KEYS: [&str; 7] = [
    "port",
    "bind",
    "error_rate",
    "latency_ms",
    "ready_after_ms",
    "starts_file",
    "message",
];

/// The parsed config.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// TCP port to listen on (`port`, required; 0 picks a free port).
    pub port: u16,
    /// Address to bind (`bind`, default `127.0.0.1`; `localhost` means `127.0.0.1`).
    pub bind: IpAddr,
    /// Fraction of `GET /` requests answered 500 (`error_rate`, 0.0–1.0, default 0).
    pub error_rate: f64,
    /// Milliseconds added to every `GET /` (`latency_ms`, default 0).
    pub latency_ms: u64,
    /// `/healthz` answers 503 until this many milliseconds after start (`ready_after_ms`,
    /// default 0): a service that is slow to become ready.
    pub ready_after_ms: u64,
    /// File to which every start appends `<version> <pid>\n` (`starts_file`); a relative
    /// path is relative to the config file's directory.
    pub starts_file: Option<PathBuf>,
    /// Extra line echoed by `GET /` (`message`).
    pub message: Option<String>,
}

/// Why a config file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key at fault, if any (a known key, or `None` for file-level problems).
    pub key: Option<String>,
    /// 1-based line number, when the problem is on one line.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    fn key(key: &str, line: usize, reason: impl Into<String>) -> Self {
        ConfigError {
            key: Some(key.to_string()),
            line: Some(line),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.key, self.line) {
            (Some(key), Some(line)) => write!(f, "key `{key}` (line {line}): {}", self.reason),
            (Some(key), None) => write!(f, "key `{key}`: {}", self.reason),
            (None, Some(line)) => write!(f, "line {line}: {}", self.reason),
            (None, None) => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Reads and parses the config file at `path`; a relative `starts_file` is resolved against
/// the file's directory.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        key: None,
        line: None,
        reason: format!("cannot read {}: {e}", path.display()),
    })?;
    let mut config = parse(&text)?;
    if let Some(file) = &config.starts_file {
        if file.is_relative() {
            let dir = path.parent().unwrap_or_else(|| Path::new(""));
            config.starts_file = Some(dir.join(file));
        }
    }
    Ok(config)
}

/// Parses config text (see the module documentation for the accepted subset).
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let mut port: Option<u16> = None;
    let mut config = Config {
        port: 0,
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        error_rate: 0.0,
        latency_ms: 0,
        ready_after_ms: 0,
        starts_file: None,
        message: None,
    };
    let mut seen: Vec<&str> = Vec::new();
    for (index, raw_line) in text.lines().enumerate() {
        let n = index + 1;
        let line = raw_line.strip_suffix('\r').unwrap_or(raw_line);
        let line = line.strip_prefix('\u{feff}').unwrap_or(line);
        // Indented lines belong to some other key's nested value; blank lines and comments
        // carry nothing.
        if line.starts_with([' ', '\t']) || line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((raw_key, raw_value)) = split_key(line) else {
            // Not `key: value`. Only refuse it if it looks like an attempt at a known key.
            let first = line
                .split(|c: char| c.is_whitespace() || c == '=' || c == ':')
                .next()
                .unwrap_or("");
            let first = unquote_key(first);
            if let Some(key) = KNOWN_KEYS.iter().find(|k| **k == first) {
                return Err(ConfigError::key(
                    key,
                    n,
                    format!("expected `{key}: VALUE`, got {line:?}"),
                ));
            }
            continue;
        };
        let key = unquote_key(raw_key.trim());
        let Some(&key) = KNOWN_KEYS.iter().find(|k| **k == key) else {
            continue;
        };
        if seen.contains(&key) {
            return Err(ConfigError::key(key, n, "duplicate key"));
        }
        seen.push(key);
        let value = scalar(raw_value).map_err(|reason| ConfigError::key(key, n, reason))?;
        match key {
            "port" => {
                let v = value.ok_or_else(|| ConfigError::key(key, n, "must not be empty"))?;
                let parsed = v.parse::<u16>().map_err(|_| {
                    ConfigError::key(key, n, format!("must be an integer 0-65535, got {v:?}"))
                })?;
                port = Some(parsed);
            }
            "bind" => {
                if let Some(v) = value {
                    config.bind = if v == "localhost" {
                        IpAddr::V4(Ipv4Addr::LOCALHOST)
                    } else {
                        v.parse().map_err(|_| {
                            ConfigError::key(key, n, format!("must be an IP address, got {v:?}"))
                        })?
                    };
                }
            }
            "error_rate" => {
                if let Some(v) = value {
                    let rate = v
                        .parse::<f64>()
                        .ok()
                        .filter(|r| (0.0..=1.0).contains(r))
                        .ok_or_else(|| {
                            ConfigError::key(
                                key,
                                n,
                                format!("must be a number from 0.0 to 1.0, got {v:?}"),
                            )
                        })?;
                    config.error_rate = rate;
                }
            }
            "latency_ms" => {
                if let Some(v) = value {
                    config.latency_ms = v.parse::<u64>().map_err(|_| {
                        ConfigError::key(
                            key,
                            n,
                            format!("must be a non-negative integer, got {v:?}"),
                        )
                    })?;
                }
            }
            "ready_after_ms" => {
                if let Some(v) = value {
                    config.ready_after_ms = v.parse::<u64>().map_err(|_| {
                        ConfigError::key(
                            key,
                            n,
                            format!("must be a non-negative integer, got {v:?}"),
                        )
                    })?;
                }
            }
            "starts_file" => config.starts_file = value.map(PathBuf::from),
            "message" => {
                if let Some(v) = &value {
                    if v.chars().any(|c| c.is_control() && c != '\t') {
                        return Err(ConfigError::key(
                            key,
                            n,
                            "must be one line (no control characters)",
                        ));
                    }
                }
                config.message = value;
            }
            _ => {}
        }
    }
    config.port = port.ok_or(ConfigError {
        key: Some("port".into()),
        line: None,
        reason: "is required".into(),
    })?;
    Ok(config)
}

/// Splits `key: value` (or `key:` at the end of the line) at the first `:` followed by
/// whitespace or the end of the line, outside quotes.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let bytes = line.as_bytes();
    let mut quote: Option<u8> = None;
    for (i, &b) in bytes.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b == b'#' && (i == 0 || bytes[i - 1] == b' ' || bytes[i - 1] == b'\t') => {
                return None
            }
            None if b == b':' => {
                let next = bytes.get(i + 1);
                if next.is_none() || next == Some(&b' ') || next == Some(&b'\t') {
                    return Some((&line[..i], &line[i + 1..]));
                }
            }
            None => {}
        }
    }
    None
}

/// A key, with one level of matching quotes removed.
fn unquote_key(key: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = key.strip_prefix(q).and_then(|k| k.strip_suffix(q)) {
            return inner;
        }
    }
    key
}

/// Parses a scalar value: `None` for an empty value, `~` or `null`; quoted strings are
/// unquoted (`''` in single quotes, `\"`, `\\`, `\n`, `\t` in double quotes); a trailing
/// ` # comment` is dropped. Block scalars, flow collections and anchors are refused.
fn scalar(raw: &str) -> Result<Option<String>, String> {
    let s = raw.trim_start_matches([' ', '\t']);
    if let Some(rest) = s.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    trailing(&rest[i + 1..])?;
                    return Ok(Some(out));
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('/') => out.push('/'),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(other) => return Err(format!("unsupported escape \\{other}")),
                    None => return Err("unterminated double-quoted string".into()),
                },
                c => out.push(c),
            }
        }
        return Err("unterminated double-quoted string".into());
    }
    if let Some(rest) = s.strip_prefix('\'') {
        let mut out = String::new();
        let mut chars = rest.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().map(|(_, c)| *c) == Some('\'') {
                    chars.next();
                    out.push('\'');
                    continue;
                }
                trailing(&rest[i + 1..])?;
                return Ok(Some(out));
            }
            out.push(c);
        }
        return Err("unterminated single-quoted string".into());
    }
    // Plain scalar: up to a ` #` comment.
    let mut end = s.len();
    let bytes = s.as_bytes();
    for i in 0..bytes.len() {
        if bytes[i] == b'#' && (i == 0 || bytes[i - 1] == b' ' || bytes[i - 1] == b'\t') {
            end = i;
            break;
        }
    }
    let v = s[..end].trim_end_matches([' ', '\t']);
    if v.is_empty() || v == "~" || v == "null" || v == "Null" || v == "NULL" {
        return Ok(None);
    }
    if v.starts_with(['|', '>', '[', '{', '&', '*', '!']) {
        return Err(format!(
            "must be a plain or quoted scalar on one line, got {v:?}"
        ));
    }
    Ok(Some(v.to_string()))
}

/// After a closing quote only whitespace and a comment may follow.
fn trailing(rest: &str) -> Result<(), String> {
    let t = rest.trim_start_matches([' ', '\t']);
    if t.is_empty() || (t.starts_with('#') && t.len() < rest.len()) {
        Ok(())
    } else {
        Err(format!("unexpected text after the closing quote: {t:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        parse(text).expect_err("config should be refused")
    }

    #[test]
    fn minimal_config_uses_defaults() {
        let c = parse("port: 8080\n").unwrap();
        assert_eq!(
            c,
            Config {
                port: 8080,
                bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
                error_rate: 0.0,
                latency_ms: 0,
                ready_after_ms: 0,
                starts_file: None,
                message: None,
            }
        );
    }

    #[test]
    fn full_config_with_comments_unknown_keys_and_nesting() {
        let text = "\u{feff}# demo config\r\n\
                    port: 9000   # the port\r\n\
                    \n\
                    bind: 0.0.0.0\n\
                    error_rate: 0.25\n\
                    latency_ms: 15\n\
                    starts_file: '/tmp/it''s starts'\n\
                    message: \"hello # not a comment\"\n\
                    owner: team-a\n\
                    logging:\n\
                    \x20 level: debug\n\
                    \x20 port: not-a-number\n\
                    list:\n\
                    - port: nope\n\
                    some free text that is not yaml\n\
                    url: http://x:1/y\n";
        let c = parse(text).unwrap();
        assert_eq!(c.port, 9000);
        assert_eq!(c.bind, "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(c.error_rate, 0.25);
        assert_eq!(c.latency_ms, 15);
        assert_eq!(c.starts_file, Some(PathBuf::from("/tmp/it's starts")));
        assert_eq!(c.message.as_deref(), Some("hello # not a comment"));
    }

    #[test]
    fn quoted_values_and_nulls() {
        let c = parse("\"port\": \"0\"\nbind: localhost\nerror_rate: 1\nmessage: ~\nstarts_file:\nlatency_ms: null\n")
            .unwrap();
        assert_eq!(c.port, 0);
        assert_eq!(c.bind, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(c.error_rate, 1.0);
        assert_eq!(c.message, None);
        assert_eq!(c.starts_file, None);
        assert_eq!(c.latency_ms, 0);
        let c = parse("port: 1\nmessage: a \"b\" c  \nerror_rate: 1.0e-1\n").unwrap();
        assert_eq!(c.message.as_deref(), Some("a \"b\" c"));
        assert_eq!(c.error_rate, 0.1);
    }

    #[test]
    fn relative_starts_file_resolves_against_the_config_dir() {
        let dir = std::env::temp_dir().join(format!("demo-service-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.yml");
        std::fs::write(&path, "port: 1\nstarts_file: starts.txt\n").unwrap();
        let c = load(&path).unwrap();
        assert_eq!(c.starts_file, Some(dir.join("starts.txt")));
        std::fs::remove_dir_all(&dir).unwrap();
        let e = load(&dir.join("missing.yml")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }

    #[test]
    fn missing_port() {
        let e = err("bind: 127.0.0.1\n");
        assert_eq!(e.key.as_deref(), Some("port"));
        assert_eq!(e.to_string(), "key `port`: is required");
        assert_eq!(err("").key.as_deref(), Some("port"));
        // Nested `port:` does not count.
        assert_eq!(err("server:\n  port: 80\n").key.as_deref(), Some("port"));
    }

    #[test]
    fn malformed_known_keys_are_named() {
        let cases = [
            ("port: 70000\n", "port"),
            ("port: -1\n", "port"),
            ("port: eighty\n", "port"),
            ("port:\n", "port"),
            ("port: [1]\n", "port"),
            ("port: 1\nbind: nowhere\n", "bind"),
            ("port: 1\nerror_rate: 1.5\n", "error_rate"),
            ("port: 1\nerror_rate: -0.1\n", "error_rate"),
            ("port: 1\nerror_rate: NaN\n", "error_rate"),
            ("port: 1\nerror_rate: half\n", "error_rate"),
            ("port: 1\nlatency_ms: 1.5\n", "latency_ms"),
            ("port: 1\nlatency_ms: -3\n", "latency_ms"),
            ("port: 1\nmessage: \"unterminated\n", "message"),
            ("port: 1\nmessage: 'a' b\n", "message"),
            ("port: 1\nmessage: \"a\\nb\"\n", "message"),
            ("port: 1\nmessage: |\n  block\n", "message"),
            ("port: 1\nport: 2\n", "port"),
            ("port 8080\n", "port"),
            ("port=8080\n", "port"),
            ("port:8080\n", "port"),
        ];
        for (text, key) in cases {
            let e = err(text);
            assert_eq!(e.key.as_deref(), Some(key), "{text:?}: {e}");
            assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
        }
        let e = err("# c\nport: 1\nerror_rate: 2\n");
        assert_eq!(e.line, Some(3));
        assert_eq!(
            e.to_string(),
            "key `error_rate` (line 3): must be a number from 0.0 to 1.0, got \"2\""
        );
    }
}
