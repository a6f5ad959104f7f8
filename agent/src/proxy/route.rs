//! Which workload one request to the service's main address goes to: A/B match rules first
//! (a request matching any rule goes to the canary), then the committed canary weight, spread
//! exactly (an accumulator, not a coin: 10% is every tenth request), then, with a fresh
//! baseline (issue 20), the baseline's weight out of the rest, spread the same way.

use std::sync::atomic::{AtomicU64, Ordering};

/// The workloads behind a canary's service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    /// The stable release.
    Primary,
    /// The release under analysis.
    Canary,
    /// The fresh baseline: the primary's release, started with the canary (issue 20).
    Baseline,
}

impl Workload {
    /// `primary`, `canary` or `baseline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Primary => "primary",
            Workload::Canary => "canary",
            Workload::Baseline => "baseline",
        }
    }
}

/// How a header value is compared.
#[derive(Debug, Clone)]
pub enum HeaderCondition {
    /// Equal to.
    Exact(String),
    /// Starts with.
    Prefix(String),
    /// Matches the whole value.
    Regex(regex::Regex),
}

/// Why a header condition cannot be built ([`HeaderMatch::new`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum InvalidHeaderMatch {
    /// The regex does not compile.
    #[error("header {name}: regex {value:?}: {source}")]
    Regex {
        /// The header.
        name: String,
        /// The pattern.
        value: String,
        /// The error.
        source: regex::Error,
    },
    /// An operator other than `exact`, `prefix` and `regex`.
    #[error("header {name}: unknown match {op:?}")]
    UnknownOp {
        /// The header.
        name: String,
        /// The operator.
        op: String,
    },
}

/// One A/B condition: the request's header `name` (lowercase) satisfies `condition`.
#[derive(Debug, Clone)]
pub struct HeaderMatch {
    /// Lowercase header name.
    pub name: String,
    /// The comparison.
    pub condition: HeaderCondition,
}

impl HeaderMatch {
    /// Builds a condition; `op` is `exact`, `prefix` or `regex` (anchored to the whole value).
    pub fn new(name: &str, op: &str, value: &str) -> Result<Self, InvalidHeaderMatch> {
        let condition = match op {
            "exact" => HeaderCondition::Exact(value.to_string()),
            "prefix" => HeaderCondition::Prefix(value.to_string()),
            "regex" => {
                HeaderCondition::Regex(regex::Regex::new(&format!("^(?:{value})$")).map_err(
                    |source| InvalidHeaderMatch::Regex {
                        name: name.to_string(),
                        value: value.to_string(),
                        source,
                    },
                )?)
            }
            other => {
                return Err(InvalidHeaderMatch::UnknownOp {
                    name: name.to_string(),
                    op: other.to_string(),
                })
            }
        };
        Ok(HeaderMatch {
            name: name.to_ascii_lowercase(),
            condition,
        })
    }

    fn matches(&self, value: &str) -> bool {
        match &self.condition {
            HeaderCondition::Exact(v) => value == v,
            HeaderCondition::Prefix(p) => value.starts_with(p.as_str()),
            HeaderCondition::Regex(r) => r.is_match(value),
        }
    }
}

/// The routing of the main address: the canary's weight (0–100) and A/B rules (a request
/// matching every condition of any one rule goes to the canary).
#[derive(Debug, Clone, Default)]
pub struct Routing {
    /// Percentage of requests sent to the canary.
    pub canary_weight: u8,
    /// A/B rules; each rule is a list of conditions that must all hold.
    pub match_rules: Vec<Vec<HeaderMatch>>,
    /// Percentage of requests sent to the fresh baseline (0: none runs), taken out of the
    /// primary's share: at most `100 - canary_weight` count.
    pub baseline_weight: u8,
}

/// Picks workloads for requests according to a [`Routing`].
#[derive(Debug, Default)]
pub struct Selector {
    /// Requests seen, for the exact spread of the weight.
    counter: AtomicU64,
    /// Requests not sent to the canary, for the exact spread of the baseline's weight.
    rest: AtomicU64,
}

/// Whether item `n` of a stream is one of the `part` of every `whole` items, evenly spread:
/// floor((n+1)·part/whole) > floor(n·part/whole).
fn is_share(n: u64, part: u64, whole: u64) -> bool {
    whole > 0 && (n + 1) * part / whole > n * part / whole
}

impl Selector {
    /// The workload for one request with `headers` (name, value) under `routing`.
    pub fn pick<'h>(
        &self,
        routing: &Routing,
        headers: impl Iterator<Item = (&'h str, &'h str)> + Clone,
    ) -> Workload {
        if routing.match_rules.iter().any(|rule| {
            !rule.is_empty()
                && rule.iter().all(|m| {
                    headers
                        .clone()
                        .any(|(name, value)| name.eq_ignore_ascii_case(&m.name) && m.matches(value))
                })
        }) {
            return Workload::Canary;
        }
        let weight = u64::from(routing.canary_weight.min(100));
        let baseline = u64::from(routing.baseline_weight).min(100 - weight);
        if weight == 0 && baseline == 0 {
            return Workload::Primary;
        }
        // Exactly w of every 100 consecutive requests go to the canary; of the other 100 − w,
        // exactly b go to the baseline: b of every 100 in all, each evenly spread.
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        if is_share(n, weight, 100) {
            return Workload::Canary;
        }
        if baseline == 0 {
            return Workload::Primary;
        }
        let m = self.rest.fetch_add(1, Ordering::Relaxed);
        if is_share(m, baseline, 100 - weight) {
            Workload::Baseline
        } else {
            Workload::Primary
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_is_spread_exactly() {
        for weight in [0u8, 1, 10, 33, 50, 99, 100] {
            let s = Selector::default();
            let routing = Routing {
                canary_weight: weight,
                match_rules: Vec::new(),
                baseline_weight: 0,
            };
            let canary = (0..1000)
                .filter(|_| s.pick(&routing, std::iter::empty()) == Workload::Canary)
                .count();
            assert_eq!(canary, 10 * weight as usize, "weight {weight}");
        }
    }

    #[test]
    fn a_fresh_baseline_gets_exactly_the_canarys_share_out_of_the_primarys() {
        for weight in [1u8, 5, 10, 25, 33, 50] {
            let s = Selector::default();
            let routing = Routing {
                canary_weight: weight,
                match_rules: Vec::new(),
                baseline_weight: weight,
            };
            let mut counts = std::collections::BTreeMap::new();
            for _ in 0..1000 {
                *counts
                    .entry(s.pick(&routing, std::iter::empty()))
                    .or_insert(0usize) += 1;
            }
            let w = 10 * weight as usize;
            assert_eq!(counts.get(&Workload::Canary), Some(&w), "weight {weight}");
            assert_eq!(counts.get(&Workload::Baseline), Some(&w), "weight {weight}");
            assert_eq!(
                counts.get(&Workload::Primary).copied().unwrap_or(0),
                1000 - 2 * w,
                "weight {weight}"
            );
        }
        // A baseline weight beyond the rest is cut to it: all traffic leaves the primary.
        let s = Selector::default();
        let routing = Routing {
            canary_weight: 60,
            match_rules: Vec::new(),
            baseline_weight: 60,
        };
        let primary = (0..100)
            .filter(|_| s.pick(&routing, std::iter::empty()) == Workload::Primary)
            .count();
        assert_eq!(primary, 0);
    }

    #[test]
    fn match_rules_send_matching_requests_to_the_canary() {
        let routing = Routing {
            canary_weight: 0,
            baseline_weight: 0,
            match_rules: vec![vec![
                HeaderMatch::new("X-Canary", "exact", "insider").unwrap()
            ]],
        };
        let s = Selector::default();
        let yes = [("x-canary", "insider")];
        let no = [("x-canary", "outsider")];
        assert_eq!(s.pick(&routing, yes.iter().copied()), Workload::Canary);
        assert_eq!(s.pick(&routing, no.iter().copied()), Workload::Primary);
        let r = HeaderMatch::new("user-agent", "regex", ".*Firefox.*").unwrap();
        assert!(r.matches("Mozilla/5.0 Firefox/120"));
        assert!(!HeaderMatch::new("a", "prefix", "ab").unwrap().matches("a"));
        assert!(matches!(
            HeaderMatch::new("a", "glob", "x"),
            Err(InvalidHeaderMatch::UnknownOp { .. })
        ));
        assert!(matches!(
            HeaderMatch::new("a", "regex", "("),
            Err(InvalidHeaderMatch::Regex { .. })
        ));
    }
}
