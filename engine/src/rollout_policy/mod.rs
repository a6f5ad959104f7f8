//! Rollout policies (issue 20): how a product's releases roll across the fleet, in waves.
//!
//! A policy belongs to one product (`product`) and may name products that move with it
//! (`products`): the group, upgraded in the order `products..., product` within each wave.
//! Each wave selects environments by name or by labels, lets at most `maxParallel` of its
//! entities change at once, and must soak for `soak` after its last entity is done before the
//! next wave opens. What the waves decide is in [`crate::evaluate`] (the `rollout-wave`
//! constraint); what is committed about a rollout's progress is in [`crate::rollout`]. The
//! YAML format and the rules are documented in `docs/FLEET.md`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::labels::EnvironmentLabels;
use crate::TimestampMs;

mod parse;
mod raw;

pub use parse::{
    parse_rollout_policy, RolloutPolicySpec, MAX_GROUP_PRODUCTS, MAX_POLICY_BYTES, MAX_SOAK_MS,
    MAX_WAVES, MIN_SOAK_MS,
};

/// What a failure in a wave does to the release's rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnFailure {
    /// Later waves stop: no new plan to the release is issued until an operator resumes.
    Halt,
    /// Halt, and recall the release (of every product of the group) fleet-wide: entities
    /// running it roll off through the recall roll-off.
    Recall,
}

impl OnFailure {
    /// As the YAML spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Halt => "halt",
            OnFailure::Recall => "recall",
        }
    }
}

/// Which environments a wave takes: those named, and those carrying every label listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// Environments by name.
    pub environments: BTreeSet<String>,
    /// Labels an environment must all carry (`AND`); empty: no label selection.
    pub labels: BTreeMap<String, String>,
}

impl Selector {
    /// Whether environment `name` with `labels` is selected: named, or (with labels given)
    /// carrying every one of them.
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.environments.contains(name)
            || (!self.labels.is_empty() && EnvironmentLabels::matches(labels, &self.labels))
    }
}

/// One wave of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wave {
    /// Unique within the policy (a DNS label).
    pub name: String,
    /// Which environments it takes.
    pub selector: Selector,
    /// How long it must stay done before the next wave opens (ms; 0: no soak).
    pub soak_ms: TimestampMs,
    /// Most entities of the wave changing to the release at once; `None`: no limit.
    pub max_parallel: Option<u32>,
    /// What a failure in this wave does.
    pub on_failure: OnFailure,
}

/// A product's rollout policy, as applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutPolicy {
    /// The product it belongs to (`group:name`); also its key.
    pub product: String,
    /// Products that move with it, upgraded before it within each wave, in this order.
    pub products: Vec<String>,
    /// The waves, in order.
    pub waves: Vec<Wave>,
    /// The document as applied.
    pub yaml: String,
    /// Entry time of its first apply.
    pub created_ms: TimestampMs,
    /// Entry time of its last change.
    pub updated_ms: TimestampMs,
}

impl RolloutPolicy {
    /// The group in upgrade order: `products`, then `product`.
    pub fn group(&self) -> impl Iterator<Item = &str> + '_ {
        self.products
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(self.product.as_str()))
    }

    /// Whether `product` is in the group.
    pub fn governs(&self, product: &str) -> bool {
        self.group().any(|p| p == product)
    }

    /// The position of `product` in the group's upgrade order.
    pub fn position(&self, product: &str) -> Option<usize> {
        self.group().position(|p| p == product)
    }

    /// The wave (index) that takes environment `name` with `labels`: the one whose selector
    /// selects it (apply and label changes keep it to one; a policy from before that check
    /// may select twice, and then the first wave takes it). `None`: no wave does (its
    /// entities come after the last wave).
    pub fn wave_of(&self, name: &str, labels: &BTreeMap<String, String>) -> Option<usize> {
        self.waves
            .iter()
            .position(|w| w.selector.selects(name, labels))
    }

    /// The wave named `name`.
    pub fn wave(&self, name: &str) -> Option<&Wave> {
        self.waves.iter().find(|w| w.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_selecting_wave_takes_an_environment() {
        let yaml = "product: com.example:api\nproducts: [com.example:db]\nwaves:\n\
                    - {name: canary, selector: {environments: [eu-1], labels: {tier: canary}}}\n\
                    - {name: prod, selector: {labels: {tier: prod}}}\n\
                    - {name: all-eu, selector: {labels: {region: eu}}}\n";
        let spec = parse_rollout_policy(yaml).unwrap();
        let p = RolloutPolicy {
            product: spec.product,
            products: spec.products,
            waves: spec.waves,
            yaml: yaml.into(),
            created_ms: 0,
            updated_ms: 0,
        };
        assert_eq!(
            p.group().collect::<Vec<_>>(),
            ["com.example:db", "com.example:api"]
        );
        assert_eq!(p.position("com.example:api"), Some(1));
        assert!(!p.governs("com.example:web"));
        assert_eq!(p.wave_of("eu-1", &labels(&[("tier", "prod")])), Some(0));
        assert_eq!(p.wave_of("eu-2", &labels(&[("tier", "canary")])), Some(0));
        assert_eq!(
            p.wave_of("eu-3", &labels(&[("tier", "prod"), ("region", "eu")])),
            Some(1)
        );
        assert_eq!(p.wave_of("eu-4", &labels(&[("region", "eu")])), Some(2));
        assert_eq!(p.wave_of("us-1", &labels(&[("region", "us")])), None);
    }
}
