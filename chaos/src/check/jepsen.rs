//! Jepsen register histories (`jepsen.util` log lines, as in the etcd runs porcupine tests
//! against) converted to [`RegisterOp`]s on one key, so the checker can be held to a peer's
//! labelled suite.
//!
//! A line is `INFO jepsen.util - PROC :TYPE :F VALUE`, with TYPE `invoke`, `ok`, `fail` or
//! `info` and F `read`, `write` or `cas`. A process runs one operation at a time; the
//! completion pairs with its pending invoke. Times are line numbers.
//! - `:ok :read V` (`nil` for never written), `:ok :write V`, `:ok :cas [A B]`: completed Ok.
//! - `:fail :cas [A B]`: completed, the compare failed ([`Outcome::Mismatch`]).
//! - `:fail :read :timed-out`: no answer (an Unknown read, which constrains nothing).
//! - `:info … :timed-out`: a write or CAS that may take effect at any time, or never
//!   ([`Outcome::Unknown`]); Jepsen retires the process.
//! - an invoke never completed: Unknown too.
//!
//! Lines of other loggers are skipped; a `jepsen.util` line that fits none of these, or a
//! completion without a pending invoke, is refused with its line number.

use std::collections::HashMap;

use super::history::{OpKind, Outcome, RegisterOp};

/// The key every converted operation is on.
pub const JEPSEN_KEY: &str = "jepsen";

/// Why a Jepsen log could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JepsenError {
    /// A `jepsen.util` line that is not a register operation event.
    #[error("line {line}: not a register operation event: {text:?}")]
    Unparsable {
        /// 1-based line number.
        line: usize,
        /// The line (at most 200 characters).
        text: String,
    },
    /// A completion for a process with no pending invoke.
    #[error("line {line}: process {process} completes an operation it never invoked")]
    Unmatched {
        /// 1-based line number.
        line: usize,
        /// The process.
        process: u32,
    },
}

/// What one event line says.
enum Line {
    Invoke(OpKind),
    Complete(Outcome),
}

fn parse_u64(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// `[A B]` → (A, B).
fn parse_pair(s: &str) -> Option<(u64, u64)> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let mut it = inner.split_whitespace();
    let pair = (parse_u64(it.next()?)?, parse_u64(it.next()?)?);
    it.next().is_none().then_some(pair)
}

/// The process and event of a `jepsen.util` event line's fields after `-`.
fn parse_event(fields: &[&str]) -> Option<(u32, Line)> {
    let (proc, kind, f, value) = match fields {
        [p, k, f, v @ ..] => (p.parse::<u32>().ok()?, *k, *f, v.join(" ")),
        _ => return None,
    };
    let line = match (kind, f, value.as_str()) {
        (":invoke", ":read", "nil") => Line::Invoke(OpKind::Read),
        (":invoke", ":write", v) => Line::Invoke(OpKind::Write {
            value: parse_u64(v)?,
        }),
        (":invoke", ":cas", v) => {
            let (expect, new) = parse_pair(v)?;
            Line::Invoke(OpKind::Cas { expect, new })
        }
        (":ok", ":read", "nil") => Line::Complete(Outcome::Ok { read_value: None }),
        (":ok", ":read", v) => Line::Complete(Outcome::Ok {
            read_value: Some(parse_u64(v)?),
        }),
        (":ok", ":write", v) if parse_u64(v).is_some() => {
            Line::Complete(Outcome::Ok { read_value: None })
        }
        (":ok", ":cas", v) if parse_pair(v).is_some() => {
            Line::Complete(Outcome::Ok { read_value: None })
        }
        (":fail", ":cas", v) if parse_pair(v).is_some() => Line::Complete(Outcome::Mismatch),
        (":fail" | ":info", ":read" | ":write" | ":cas", ":timed-out") => {
            Line::Complete(Outcome::Unknown)
        }
        _ => return None,
    };
    Some((proc, line))
}

/// Converts a Jepsen register log to operations on [`JEPSEN_KEY`].
pub fn parse_jepsen_log(text: &str) -> Result<Vec<RegisterOp>, JepsenError> {
    let mut ops: Vec<RegisterOp> = Vec::new();
    let mut pending: HashMap<u32, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let fields: Vec<&str> = raw.split_whitespace().collect();
        let Some(rest) = (match fields.as_slice() {
            ["INFO", "jepsen.util", "-", rest @ ..] => Some(rest),
            _ => None,
        }) else {
            continue;
        };
        let unparsable = || JepsenError::Unparsable {
            line,
            text: raw.chars().take(200).collect(),
        };
        let (process, event) = parse_event(rest).ok_or_else(unparsable)?;
        let time = line as u64;
        match event {
            Line::Invoke(kind) => {
                if pending.contains_key(&process) {
                    return Err(unparsable());
                }
                pending.insert(process, ops.len());
                ops.push(RegisterOp {
                    id: ops.len() as u64,
                    client: process,
                    key: JEPSEN_KEY.to_string(),
                    kind,
                    invoke_ns: time,
                    complete_ns: None,
                    outcome: Outcome::Unknown,
                });
            }
            Line::Complete(outcome) => {
                let at = pending
                    .remove(&process)
                    .ok_or(JepsenError::Unmatched { line, process })?;
                let op = &mut ops[at];
                let fits = matches!(
                    (op.kind, outcome),
                    (OpKind::Read, Outcome::Ok { .. } | Outcome::Unknown)
                        | (
                            OpKind::Write { .. } | OpKind::Cas { .. },
                            Outcome::Ok { read_value: None } | Outcome::Unknown
                        )
                        | (OpKind::Cas { .. }, Outcome::Mismatch)
                );
                if !fits {
                    return Err(unparsable());
                }
                op.outcome = outcome;
                op.complete_ns = (outcome != Outcome::Unknown).then_some(time);
            }
        }
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:write\t4
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 2\t:invoke\t:cas\t[4 1]
INFO  jepsen.util - 1\t:ok\t:write\t4
INFO  jepsen.util - 2\t:fail\t:cas\t[4 1]
INFO  jepsen.core - some other logger
INFO  jepsen.util - 3\t:invoke\t:write\t2
INFO  jepsen.util - 3\t:info\t:write\t:timed-out
INFO  jepsen.util - 4\t:invoke\t:cas\t[2 3]
";

    #[test]
    fn every_event_kind_converts() {
        let ops = parse_jepsen_log(LOG).unwrap();
        let got: Vec<(OpKind, Outcome, Option<u64>)> = ops
            .iter()
            .map(|o| (o.kind, o.outcome, o.complete_ns))
            .collect();
        assert_eq!(
            got,
            [
                (OpKind::Read, Outcome::Ok { read_value: None }, Some(3)),
                (
                    OpKind::Write { value: 4 },
                    Outcome::Ok { read_value: None },
                    Some(5)
                ),
                (
                    OpKind::Cas { expect: 4, new: 1 },
                    Outcome::Mismatch,
                    Some(6)
                ),
                (OpKind::Write { value: 2 }, Outcome::Unknown, None),
                (OpKind::Cas { expect: 2, new: 3 }, Outcome::Unknown, None),
            ]
        );
    }

    #[test]
    fn malformed_lines_are_refused_with_their_number() {
        let bad =
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0\t:ok\t:cas\tnope\n";
        assert!(matches!(
            parse_jepsen_log(bad),
            Err(JepsenError::Unparsable { line: 2, .. })
        ));
        let unmatched = "INFO  jepsen.util - 7\t:ok\t:write\t1\n";
        assert_eq!(
            parse_jepsen_log(unmatched),
            Err(JepsenError::Unmatched {
                line: 1,
                process: 7
            })
        );
    }
}
