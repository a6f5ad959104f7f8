//! Which workload one request to the service's main address goes to: A/B match rules first
//! (a request matching any rule goes to the canary), then the committed canary weight, spread
//! exactly (an accumulator, not a coin: 10% is every tenth request).

use std::sync::atomic::{AtomicU64, Ordering};

/// The two workloads behind a canary's service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    /// The stable release.
    Primary,
    /// The release under analysis.
    Canary,
}

impl Workload {
    /// `primary` or `canary`.
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Primary => "primary",
            Workload::Canary => "canary",
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
    pub fn new(name: &str, op: &str, value: &str) -> Result<Self, String> {
        let condition = match op {
            "exact" => HeaderCondition::Exact(value.to_string()),
            "prefix" => HeaderCondition::Prefix(value.to_string()),
            "regex" => HeaderCondition::Regex(
                regex::Regex::new(&format!("^(?:{value})$"))
                    .map_err(|e| format!("header {name}: regex {value:?}: {e}"))?,
            ),
            other => return Err(format!("header {name}: unknown match {other:?}")),
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
}

/// Picks workloads for requests according to a [`Routing`].
#[derive(Debug, Default)]
pub struct Selector {
    /// Requests seen, for the exact spread of the weight.
    counter: AtomicU64,
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
        if weight == 0 {
            return Workload::Primary;
        }
        // Request n goes to the canary when floor((n+1)·w/100) > floor(n·w/100): exactly w of
        // every 100 consecutive requests, evenly spread.
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        if (n + 1) * weight / 100 > n * weight / 100 {
            Workload::Canary
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
            };
            let canary = (0..1000)
                .filter(|_| s.pick(&routing, std::iter::empty()) == Workload::Canary)
                .count();
            assert_eq!(canary, 10 * weight as usize, "weight {weight}");
        }
    }

    #[test]
    fn match_rules_send_matching_requests_to_the_canary() {
        let routing = Routing {
            canary_weight: 0,
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
        assert!(HeaderMatch::new("a", "glob", "x").is_err());
    }
}
