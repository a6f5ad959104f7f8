//! Flagger's load tester, built in (issue 52 item 4; docs/CANARY.md "The built-in load
//! tester").
//!
//! Flagger users point webhooks at a `flagger-loadtester` service in their namespace: `POST /`
//! with `metadata.cmd` runs a command (`hey` to generate load, `curl … | grep …` as an
//! acceptance gate), and `/gate/approve` and `/gate/halt` answer gates. The hub has no such
//! service: a webhook whose URL host is a load tester's ([`is_load_tester_url`]) is read
//! here instead, into a typed [`LoadTesterCall`]. Nothing is ever run by a shell: a command
//! is split into words the way a POSIX shell would (no expansion), and only `hey` and `curl`
//! (optionally piped into one `grep`) are understood; anything else is refused by name.
//!
//! Where the parts run: the leader answers the gates and the rollout hooks from the
//! resource (a `hey` load is accepted, as Flagger's load tester accepts it and runs it in the
//! background); the agent of the canary's environment runs each `hey` load of the canary's
//! rollout hooks while the canary is progressing, against the stable addresses of
//! `<svc>`, `<svc>-primary` and `<svc>-canary` ([`StableAddresses`]).
//!
//! Pure: no I/O, no clock.

pub use hub_wire::canary_addresses::StableAddresses;

use super::duration::parse_duration;
use super::spec::{Webhook, WebhookType};

/// The first DNS label of a load tester's host: Flagger's Helm chart installs it as
/// `flagger-loadtester` (in each namespace), its kustomize base as `loadtester`
/// (in `flagger-system`).
pub const LOAD_TESTER_NAMES: [&str; 2] = ["flagger-loadtester", "loadtester"];

/// Most concurrent workers of one `hey` load (`-c`; hey's default is 50).
pub const MAX_WORKERS: u32 = 256;
/// Most requests of one `hey` load without `-z` (`-n`).
pub const MAX_REQUESTS: u64 = 10_000_000;
/// Longest `-z` of one `hey` load.
pub const MAX_LOAD_DURATION_MS: i64 = 3_600_000;
/// Highest total rate of one `hey` load (`-q` × `-c`), requests per second.
pub const MAX_TOTAL_RATE: u64 = 10_000;
/// Longest command text read.
pub const MAX_COMMAND_BYTES: usize = 4096;

/// What a webhook to the load tester asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadTesterCall {
    /// `POST /` with `metadata.cmd`.
    Command(LoadCommand),
    /// `/gate/approve`: the gate is open.
    GateApprove,
    /// `/gate/halt`: the gate stays closed.
    GateHalt,
    /// Another path of Flagger's load tester API (`/gate/check`, `/rollback/check`, …),
    /// which the hub does not build in.
    NotBuiltIn {
        /// The URL's path.
        path: String,
    },
}

/// A command the built-in load tester understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadCommand {
    /// `hey …`: load.
    Hey(HeyLoad),
    /// `curl … [| grep …]`: an acceptance check.
    Curl(CurlCheck),
}

/// One `hey` invocation (rakyll/hey's flags, as Flagger's load tester image ships it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeyLoad {
    /// The URL requested.
    pub url: String,
    /// `-z`: run for this long (then `requests` is ignored), in milliseconds.
    pub duration_ms: Option<i64>,
    /// `-n`: requests in all (default 200).
    pub requests: u64,
    /// `-c`: concurrent workers (default 50).
    pub workers: u32,
    /// `-q`: rate limit per worker, in thousandths of a request per second (none: as fast
    /// as answers come).
    pub rate_milli_per_worker: Option<u64>,
    /// `-m`: the method (default GET).
    pub method: String,
    /// `-H`: extra headers, in order.
    pub headers: Vec<(String, String)>,
    /// `-d`: the request body.
    pub body: Option<String>,
    /// `-host`: the Host header.
    pub host: Option<String>,
    /// `-t`: timeout of each request in milliseconds (default 20 s; 0: none, read as 20 s).
    pub timeout_ms: i64,
}

/// One `curl` acceptance check, optionally piped into `grep`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurlCheck {
    /// The URL requested.
    pub url: String,
    /// `-X`, or POST with `-d`, else GET.
    pub method: String,
    /// `-H`: extra headers.
    pub headers: Vec<(String, String)>,
    /// `-d`: the body.
    pub body: Option<String>,
    /// `-f`: an HTTP status of 400 or more fails the check.
    pub fail_on_http_error: bool,
    /// `| grep PATTERN`: the answer must contain a match.
    pub grep: Option<GrepPattern>,
    /// `-m`: timeout in milliseconds (default 10 s).
    pub timeout_ms: i64,
}

/// The pattern of `grep [-i] [-E|-F] [-q] PATTERN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepPattern {
    /// The pattern as written.
    pub pattern: String,
    /// `-F`: a fixed string, not a regular expression.
    pub fixed: bool,
    /// `-i`: case-insensitive.
    pub ignore_case: bool,
}

/// Why a load tester command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadTesterError {
    /// No `metadata.cmd` on a `POST /`.
    #[error("a load tester webhook needs metadata.cmd")]
    NoCommand,
    /// Longer than [`MAX_COMMAND_BYTES`].
    #[error("the command is longer than {MAX_COMMAND_BYTES} bytes")]
    TooLong,
    /// Unbalanced quotes or a trailing backslash.
    #[error("the command cannot be split into words (an unclosed quote?)")]
    Unsplittable,
    /// A program other than `hey` and `curl`.
    #[error("{0:?} is not a command the built-in load tester runs: use hey or curl (optionally | grep PATTERN)")]
    UnsupportedProgram(String),
    /// Shell syntax other than one pipe into `grep`.
    #[error(
        "{0:?}: the built-in load tester runs no shell: only `curl … | grep PATTERN` may pipe"
    )]
    ShellSyntax(String),
    /// A flag the hub does not implement.
    #[error("{program} flag {flag:?} is not supported by the built-in load tester")]
    UnsupportedFlag {
        /// `hey`, `curl` or `grep`.
        program: &'static str,
        /// The flag as written.
        flag: String,
    },
    /// A flag's value is missing or wrong.
    #[error("{program} {flag}: {reason}")]
    BadValue {
        /// `hey`, `curl` or `grep`.
        program: &'static str,
        /// The flag.
        flag: String,
        /// What is wrong.
        reason: String,
    },
    /// No URL, or more than one.
    #[error("{program} needs exactly one http:// or https:// URL")]
    Url {
        /// `hey` or `curl`.
        program: &'static str,
    },
}

/// Whether `url` names a load tester: its host's first label is one of
/// [`LOAD_TESTER_NAMES`] (`flagger-loadtester.test`, `loadtester.flagger-system`, …).
pub fn is_load_tester_url(url: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    let Some(host) = parsed.host_str() else {
        return false;
    };
    let first = host.split('.').next().unwrap_or("");
    LOAD_TESTER_NAMES.contains(&first)
}

/// What `webhook` asks of the load tester; `None` when its URL is not a load tester's.
pub fn load_tester_call(webhook: &Webhook) -> Option<Result<LoadTesterCall, LoadTesterError>> {
    if !is_load_tester_url(&webhook.url) {
        return None;
    }
    let path = url::Url::parse(&webhook.url)
        .map(|u| u.path().trim_end_matches('/').to_string())
        .unwrap_or_default();
    Some(match path.as_str() {
        "" => match webhook.metadata.get("cmd") {
            None => Err(LoadTesterError::NoCommand),
            Some(cmd) => parse_command(cmd).map(LoadTesterCall::Command),
        },
        "/gate/approve" => Ok(LoadTesterCall::GateApprove),
        "/gate/halt" => Ok(LoadTesterCall::GateHalt),
        _ => Ok(LoadTesterCall::NotBuiltIn { path }),
    })
}

/// The answer the leader records for a webhook `call` to the load tester, without calling
/// anything; `None` when its URL is not a load tester's. A `hey` load is accepted (the agent
/// runs it, see [`analysis_loads`]); `/gate/approve` is open and `/gate/halt` closed; what
/// is not built in fails with why (a closed gate, or a failed check).
pub fn built_in_answer(call: &super::WebhookCall) -> Option<super::WebhookResult> {
    let webhook = Webhook {
        name: call.name.clone(),
        kind: call.kind,
        url: call.url.clone(),
        timeout_ms: call.timeout_ms,
        retries: call.retries,
        metadata: call.payload.metadata.clone(),
        mute_alert: false,
    };
    let (ok, message) = match load_tester_call(&webhook)? {
        Ok(LoadTesterCall::GateApprove) => {
            (true, "gate approved by the built-in load tester".into())
        }
        Ok(LoadTesterCall::GateHalt) => (
            false,
            "gate halted by the built-in load tester (/gate/halt)".into(),
        ),
        Ok(LoadTesterCall::Command(LoadCommand::Hey(h))) if runs_load(call.kind) => (
            true,
            format!(
                "load accepted: the agent of {} runs hey against {}",
                call.payload.namespace, h.url
            ),
        ),
        Ok(LoadTesterCall::Command(LoadCommand::Hey(_))) => (
            false,
            format!(
                "the built-in load tester runs hey only for {} and {} webhooks",
                WebhookType::PreRollout.as_str(),
                WebhookType::Rollout.as_str()
            ),
        ),
        Ok(LoadTesterCall::Command(LoadCommand::Curl(c))) => (
            false,
            format!(
                "curl checks ({}) are not run by this hub's built-in load tester yet",
                c.url
            ),
        ),
        Ok(LoadTesterCall::NotBuiltIn { path }) => (
            false,
            format!("the built-in load tester has no {path}: the gate stays closed"),
        ),
        Err(e) => (false, e.to_string()),
    };
    Some(super::WebhookResult {
        ok,
        status: None,
        message,
    })
}

/// Whether a `hey` of a hook of `kind` is run while the canary is analysed.
fn runs_load(kind: WebhookType) -> bool {
    matches!(kind, WebhookType::PreRollout | WebhookType::Rollout)
}

/// The `hey` loads the agent keeps running while a canary with `webhooks` is analysed: those
/// of its pre-rollout and rollout hooks, by webhook name.
pub fn analysis_loads(webhooks: &[Webhook]) -> Vec<(String, HeyLoad)> {
    webhooks
        .iter()
        .filter(|w| runs_load(w.kind))
        .filter_map(|w| match load_tester_call(w) {
            Some(Ok(LoadTesterCall::Command(LoadCommand::Hey(load)))) => {
                Some((w.name.clone(), load))
            }
            _ => None,
        })
        .collect()
}

/// Splits and reads one command.
pub fn parse_command(cmd: &str) -> Result<LoadCommand, LoadTesterError> {
    if cmd.len() > MAX_COMMAND_BYTES {
        return Err(LoadTesterError::TooLong);
    }
    let words = shlex::split(cmd).ok_or(LoadTesterError::Unsplittable)?;
    for w in &words {
        let is_syntax = matches!(
            w.as_str(),
            "&&" | "||" | ";" | "&" | ">" | ">>" | "<" | "2>&1" | "$(" | "`"
        );
        if is_syntax {
            return Err(LoadTesterError::ShellSyntax(w.clone()));
        }
    }
    let mut parts = words.split(|w| w == "|");
    let first = parts.next().unwrap_or(&[]);
    let rest: Vec<&[String]> = parts.collect();
    match first.first().map(String::as_str) {
        Some("hey") if rest.is_empty() => parse_hey(&first[1..]).map(LoadCommand::Hey),
        Some("hey") => Err(LoadTesterError::ShellSyntax("|".into())),
        Some("curl") => {
            let grep = match rest.as_slice() {
                [] => None,
                [g] => Some(parse_grep(g)?),
                _ => return Err(LoadTesterError::ShellSyntax("|".into())),
            };
            parse_curl(&first[1..], grep).map(LoadCommand::Curl)
        }
        Some(other) => Err(LoadTesterError::UnsupportedProgram(other.to_string())),
        None => Err(LoadTesterError::NoCommand),
    }
}

/// Go's flag syntax: `-name value`, `-name=value`, `--name`; returns (name, inline value).
fn go_flag(word: &str) -> Option<(&str, Option<&str>)> {
    let body = word.strip_prefix("--").or_else(|| word.strip_prefix('-'))?;
    if body.is_empty() {
        return None;
    }
    Some(match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    })
}

fn bad(program: &'static str, flag: &str, reason: impl Into<String>) -> LoadTesterError {
    LoadTesterError::BadValue {
        program,
        flag: flag.to_string(),
        reason: reason.into(),
    }
}

fn is_http_url(word: &str) -> bool {
    url::Url::parse(word).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
}

fn header(
    program: &'static str,
    flag: &str,
    value: &str,
) -> Result<(String, String), LoadTesterError> {
    match value.split_once(':') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(bad(
            program,
            flag,
            format!("{value:?} is not `Name: value`"),
        )),
    }
}

fn number<T: std::str::FromStr>(
    program: &'static str,
    flag: &str,
    value: &str,
) -> Result<T, LoadTesterError> {
    value
        .parse()
        .map_err(|_| bad(program, flag, format!("{value:?} is not a number")))
}

/// A decimal number of requests per second in thousandths (`10`, `0.5`).
fn rate_milli(value: &str) -> Result<u64, LoadTesterError> {
    let (int, frac) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || (!frac.is_empty() && !digits(frac)) || frac.len() > 3 || int.len() > 9 {
        return Err(bad(
            "hey",
            "-q",
            format!("{value:?} is not a rate (requests per second)"),
        ));
    }
    let int: u64 = number("hey", "-q", int)?;
    let frac: u64 = format!("{frac:0<3}").parse().unwrap_or(0);
    Ok(int * 1000 + frac)
}

fn parse_hey(args: &[String]) -> Result<HeyLoad, LoadTesterError> {
    let mut load = HeyLoad {
        url: String::new(),
        duration_ms: None,
        requests: 200,
        workers: 50,
        rate_milli_per_worker: None,
        method: "GET".into(),
        headers: Vec::new(),
        body: None,
        host: None,
        timeout_ms: 20_000,
    };
    let mut urls = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = &args[i];
        i += 1;
        let Some((name, inline)) = go_flag(word) else {
            urls.push(word.clone());
            continue;
        };
        // Boolean flags take no value.
        if matches!(
            name,
            "h2" | "disable-compression" | "disable-keepalive" | "disable-redirects"
        ) {
            continue;
        }
        let value = match inline {
            Some(v) => v.to_string(),
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| bad("hey", word, "needs a value"))?;
                i += 1;
                v.clone()
            }
        };
        hey_flag(&mut load, name, &value)?;
    }
    load.url = one_url("hey", urls)?;
    check_hey_bounds(&load)?;
    Ok(load)
}

fn hey_flag(load: &mut HeyLoad, name: &str, value: &str) -> Result<(), LoadTesterError> {
    let flag = format!("-{name}");
    match name {
        "z" => {
            let ms = parse_duration(value).map_err(|e| bad("hey", &flag, e.to_string()))?;
            load.duration_ms = Some(ms);
        }
        "n" => load.requests = number("hey", &flag, value)?,
        "c" => load.workers = number("hey", &flag, value)?,
        "q" => load.rate_milli_per_worker = Some(rate_milli(value)?).filter(|r| *r > 0),
        "m" => load.method = value.to_ascii_uppercase(),
        "H" => load.headers.push(header("hey", &flag, value)?),
        "d" => load.body = Some(value.to_string()),
        "host" => load.host = Some(value.to_string()),
        "t" => {
            let secs: i64 = number("hey", &flag, value)?;
            load.timeout_ms = if secs <= 0 {
                20_000
            } else {
                secs.saturating_mul(1000)
            };
        }
        "T" => load
            .headers
            .push(("Content-Type".into(), value.to_string())),
        "A" => load.headers.push(("Accept".into(), value.to_string())),
        _ => {
            return Err(LoadTesterError::UnsupportedFlag {
                program: "hey",
                flag,
            })
        }
    }
    Ok(())
}

fn check_hey_bounds(load: &HeyLoad) -> Result<(), LoadTesterError> {
    if load.workers == 0 || load.workers > MAX_WORKERS {
        return Err(bad(
            "hey",
            "-c",
            format!("must be between 1 and {MAX_WORKERS}"),
        ));
    }
    if load.duration_ms.is_none() && (load.requests == 0 || load.requests > MAX_REQUESTS) {
        return Err(bad(
            "hey",
            "-n",
            format!("must be between 1 and {MAX_REQUESTS}"),
        ));
    }
    if let Some(ms) = load.duration_ms {
        if ms <= 0 || ms > MAX_LOAD_DURATION_MS {
            return Err(bad("hey", "-z", "must be between 1ms and 1h"));
        }
    }
    if let Some(r) = load.rate_milli_per_worker {
        if r.saturating_mul(u64::from(load.workers)) > MAX_TOTAL_RATE * 1000 {
            return Err(bad(
                "hey",
                "-q",
                format!("-q × -c must be at most {MAX_TOTAL_RATE} requests per second"),
            ));
        }
    }
    Ok(())
}

fn one_url(program: &'static str, urls: Vec<String>) -> Result<String, LoadTesterError> {
    match <[String; 1]>::try_from(urls) {
        Ok([u]) if is_http_url(&u) => Ok(u),
        _ => Err(LoadTesterError::Url { program }),
    }
}

fn parse_curl(args: &[String], grep: Option<GrepPattern>) -> Result<CurlCheck, LoadTesterError> {
    let mut check = CurlCheck {
        url: String::new(),
        method: String::new(),
        headers: Vec::new(),
        body: None,
        fail_on_http_error: false,
        grep,
        timeout_ms: 10_000,
    };
    let mut urls = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = &args[i];
        i += 1;
        let mut take = |flag: &str| -> Result<String, LoadTesterError> {
            let v = args
                .get(i)
                .ok_or_else(|| bad("curl", flag, "needs a value"))?;
            i += 1;
            Ok(v.clone())
        };
        if let Some(long) = word.strip_prefix("--") {
            match long {
                "silent" | "show-error" | "location" => {}
                "fail" => check.fail_on_http_error = true,
                "data" | "data-raw" | "data-binary" => check.body = Some(take(word)?),
                "request" => check.method = take(word)?.to_ascii_uppercase(),
                "header" => check.headers.push(header("curl", word, &take(word)?)?),
                "max-time" => check.timeout_ms = curl_seconds(word, &take(word)?)?,
                _ => {
                    return Err(LoadTesterError::UnsupportedFlag {
                        program: "curl",
                        flag: word.clone(),
                    })
                }
            }
            continue;
        }
        let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) else {
            urls.push(word.clone());
            continue;
        };
        // Short flags combine (`-sd DATA`, `-sSf`); one taking a value ends the group and
        // takes the rest of the word, or the next word.
        for (at, c) in shorts.char_indices() {
            let rest = &shorts[at + c.len_utf8()..];
            let mut value = |flag: &str| -> Result<String, LoadTesterError> {
                if rest.is_empty() {
                    take(flag)
                } else {
                    Ok(rest.to_string())
                }
            };
            match c {
                's' | 'S' | 'L' | 'v' => continue,
                'f' => {
                    check.fail_on_http_error = true;
                    continue;
                }
                'd' => check.body = Some(value("-d")?),
                'X' => check.method = value("-X")?.to_ascii_uppercase(),
                'H' => check.headers.push(header("curl", "-H", &value("-H")?)?),
                'm' => check.timeout_ms = curl_seconds("-m", &value("-m")?)?,
                other => {
                    return Err(LoadTesterError::UnsupportedFlag {
                        program: "curl",
                        flag: format!("-{other}"),
                    })
                }
            }
            break;
        }
    }
    check.url = one_url("curl", urls)?;
    if check.method.is_empty() {
        check.method = if check.body.is_some() { "POST" } else { "GET" }.into();
    }
    Ok(check)
}

fn curl_seconds(flag: &str, value: &str) -> Result<i64, LoadTesterError> {
    let secs: u32 = number("curl", flag, value)?;
    if secs == 0 || i64::from(secs) * 1000 > MAX_LOAD_DURATION_MS {
        return Err(bad("curl", flag, "must be between 1 and 3600 seconds"));
    }
    Ok(i64::from(secs) * 1000)
}

fn parse_grep(words: &[String]) -> Result<GrepPattern, LoadTesterError> {
    if words.first().map(String::as_str) != Some("grep") {
        let name = words.first().cloned().unwrap_or_default();
        return Err(LoadTesterError::UnsupportedProgram(name));
    }
    let mut g = GrepPattern {
        pattern: String::new(),
        fixed: false,
        ignore_case: false,
    };
    let mut patterns = Vec::new();
    for word in &words[1..] {
        match word.strip_prefix('-').filter(|s| !s.is_empty()) {
            Some(flags) => {
                for c in flags.chars() {
                    match c {
                        'q' | 's' | 'E' => {}
                        'F' => g.fixed = true,
                        'i' => g.ignore_case = true,
                        other => {
                            return Err(LoadTesterError::UnsupportedFlag {
                                program: "grep",
                                flag: format!("-{other}"),
                            })
                        }
                    }
                }
            }
            None => patterns.push(word.clone()),
        }
    }
    g.pattern = match <[String; 1]>::try_from(patterns) {
        Ok([p]) => p,
        Err(_) => return Err(bad("grep", "PATTERN", "exactly one pattern, and no file")),
    };
    if !g.fixed {
        regex::RegexBuilder::new(&g.pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| bad("grep", "PATTERN", e.to_string()))?;
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hey(cmd: &str) -> HeyLoad {
        match parse_command(cmd) {
            Ok(LoadCommand::Hey(h)) => h,
            other => panic!("{cmd}: {other:?}"),
        }
    }

    #[test]
    fn the_seed_load_test_reads_as_hey() {
        let h = hey("hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/");
        assert_eq!(h.url, "http://podinfo-canary.test:9898/");
        assert_eq!(h.duration_ms, Some(60_000));
        assert_eq!(h.rate_milli_per_worker, Some(10_000));
        assert_eq!(h.workers, 2);
        assert_eq!(h.method, "GET");
    }

    #[test]
    fn hey_flags_of_the_corpus() {
        let h = hey("hey -z 2m -q 10 -c 2 -host www.example.com -H 'Cookie: type=insider' http://gateway-istio.istio-ingress/");
        assert_eq!(h.host.as_deref(), Some("www.example.com"));
        assert_eq!(h.headers, vec![("Cookie".into(), "type=insider".into())]);
        let h = hey(
            "hey -z 1m -q 10 -c 2 -h2 -host app.example.com http://apisix-gateway.apisix/api/info",
        );
        assert_eq!(h.duration_ms, Some(60_000));
        let h = hey("hey -n 5 -c 1 -q 0.5 -m post -d x -t 3 http://a/");
        assert_eq!((h.requests, h.rate_milli_per_worker), (5, Some(500)));
        assert_eq!(
            (h.method.as_str(), h.body.as_deref(), h.timeout_ms),
            ("POST", Some("x"), 3000)
        );
    }

    #[test]
    fn curl_gates_read_with_their_grep() {
        let c = match parse_command("curl -sd 'test' http://podinfo-canary.test/token | grep token")
        {
            Ok(LoadCommand::Curl(c)) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(c.method, "POST");
        assert_eq!(c.body.as_deref(), Some("test"));
        assert_eq!(c.url, "http://podinfo-canary.test/token");
        assert_eq!(c.grep.map(|g| g.pattern), Some("token".into()));
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        for (cmd, want) in [
            ("helm test podinfo", "\"helm\" is not a command"),
            ("hey -z 1m http://a/ ; rm -rf /", "runs no shell"),
            ("curl http://a/ | sh", "\"sh\" is not a command"),
            ("hey -x 1 http://a/", "hey flag \"-x\" is not supported"),
            ("hey -c 0 http://a/", "hey -c: must be between 1 and 256"),
            ("hey -z 1m", "hey needs exactly one"),
            ("hey -z 1m 'http://a/", "cannot be split"),
            ("curl http://a/ | grep '('", "grep PATTERN"),
            ("hey -q 1000 -c 100 http://a/", "-q × -c"),
        ] {
            let e = parse_command(cmd).expect_err(cmd).to_string();
            assert!(e.contains(want), "{cmd}: {e}");
        }
    }

    #[test]
    fn a_command_at_its_length_budget_reads_and_one_byte_more_is_refused() {
        let base = "hey -z 1m http://a/";
        let at = format!("{base}{}", "x".repeat(MAX_COMMAND_BYTES - base.len()));
        assert_eq!(at.len(), MAX_COMMAND_BYTES);
        assert!(parse_command(&at).is_ok());
        let over = format!("{at}x");
        assert_eq!(parse_command(&over), Err(LoadTesterError::TooLong));
    }

    #[test]
    fn load_tester_urls_and_their_paths() {
        assert!(is_load_tester_url("http://flagger-loadtester.test/"));
        assert!(is_load_tester_url("http://loadtester.flagger-system/"));
        assert!(!is_load_tester_url("http://my-loadtester.test/"));
        let w = |url: &str| Webhook {
            name: "w".into(),
            kind: WebhookType::ConfirmRollout,
            url: url.into(),
            timeout_ms: 1000,
            retries: 0,
            metadata: Default::default(),
            mute_alert: false,
        };
        assert_eq!(
            load_tester_call(&w("http://flagger-loadtester.test/gate/approve")),
            Some(Ok(LoadTesterCall::GateApprove))
        );
        assert_eq!(
            load_tester_call(&w("http://flagger-loadtester.test/gate/halt")),
            Some(Ok(LoadTesterCall::GateHalt))
        );
        assert_eq!(
            load_tester_call(&w("http://flagger-loadtester.test/gate/check")),
            Some(Ok(LoadTesterCall::NotBuiltIn {
                path: "/gate/check".into()
            }))
        );
        assert_eq!(
            load_tester_call(&w("http://flagger-loadtester.test/")),
            Some(Err(LoadTesterError::NoCommand))
        );
        assert_eq!(load_tester_call(&w("http://hooks.example/")), None);
    }

    #[test]
    fn stable_addresses_resolve_the_three_service_names() {
        use std::net::Ipv4Addr;
        assert_eq!(
            StableAddresses::resolve("podinfo", 9898, "podinfo-canary.test"),
            Some(Ipv4Addr::new(127, 0, 0, 3))
        );
        assert_eq!(
            StableAddresses::resolve("podinfo", 9898, "podinfo-primary"),
            Some(Ipv4Addr::new(127, 0, 0, 2))
        );
        assert_eq!(
            StableAddresses::resolve("podinfo", 9898, "podinfo.test.svc.cluster.local"),
            Some(Ipv4Addr::new(127, 0, 0, 1))
        );
        assert_eq!(
            StableAddresses::resolve("podinfo", 9898, "other.test"),
            None
        );
        assert_eq!(
            StableAddresses::of(9898).canary.to_string(),
            "127.0.0.3:9898"
        );
    }
}
