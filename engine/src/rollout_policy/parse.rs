//! Parsing and validating a rollout policy document: every problem is reported with its YAML
//! path (`waves[1].selector.labels.tier`), as for canary resources and module definitions.
//! What needs the state (the products exist, the environments exist, every wave selects
//! one and no environment is in two waves, a grouped product has an entity in every wave, no
//! product is in two policies) is checked on apply, with the same paths.

use std::collections::{BTreeMap, BTreeSet};

use crate::canary::parse_duration;
use crate::error::CommandError;
use crate::labels::{validate_label_key, validate_label_value, MAX_LABELS};
use crate::name::{validate_name, validate_product_id};
use crate::yaml_budget::{self, Document};
use crate::yaml_error::{from_serde, YamlError, YamlErrors, YamlShape};
use crate::TimestampMs;

use super::raw::{RawPolicy, RawSelector, RawWave};
use super::{OnFailure, Selector, Wave};

/// Largest policy document accepted.
pub const MAX_POLICY_BYTES: usize = 64 * 1024;
/// Most waves in a policy.
pub const MAX_WAVES: usize = 32;
/// Most products moving with the policy's product.
pub const MAX_GROUP_PRODUCTS: usize = 8;
/// Most environments one selector names.
pub const MAX_SELECTOR_ENVIRONMENTS: usize = 256;
/// Longest soak: 30 days.
pub const MAX_SOAK_MS: TimestampMs = 30 * 24 * 3_600_000;
/// Shortest soak given: one second (a wave without soak leaves `soak` out).
pub const MIN_SOAK_MS: TimestampMs = 1_000;

/// A validated policy document (what the state adds to it is in [`super::RolloutPolicy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPolicySpec {
    /// The product it belongs to.
    pub product: String,
    /// The products that move with it, in upgrade order.
    pub products: Vec<String>,
    /// The waves, in order.
    pub waves: Vec<Wave>,
}

/// Parses and validates a rollout policy. Shape errors (bad YAML, unknown fields, wrong
/// types) stop at the first and carry a line; value errors are all reported, each with its
/// path.
pub fn parse_rollout_policy(yaml: &str) -> Result<RolloutPolicySpec, YamlErrors> {
    if yaml.len() > MAX_POLICY_BYTES {
        return Err(YamlErrors::single(YamlError::new(
            "",
            format!(
                "policy is {} bytes, at most {MAX_POLICY_BYTES} bytes allowed",
                yaml.len()
            ),
        )));
    }
    let yaml = yaml_budget::check(Document::RolloutPolicy, yaml)
        .map_err(|e| YamlErrors::single(e.to_yaml_error()))?;
    match yaml
        .shape()
        .map_err(|e| YamlErrors::single(from_serde(&e)))?
    {
        YamlShape::Mapping => {}
        YamlShape::Null => {
            return Err(YamlErrors::single(YamlError::new(
                "",
                "policy is empty: expected a mapping with product and waves",
            )))
        }
        other => {
            return Err(YamlErrors::single(YamlError::new(
                "",
                format!(
                    "a rollout policy must be a YAML mapping with product and waves, not {}",
                    other.describe()
                ),
            )))
        }
    }
    let raw: RawPolicy = yaml
        .parse()
        .map_err(|e| YamlErrors::single(from_serde(&e)))?;
    let mut v = Validator { errors: Vec::new() };
    let spec = v.policy(raw);
    match (spec, YamlErrors::from_vec(v.errors)) {
        (Some(spec), None) => Ok(spec),
        (_, Some(errors)) => Err(errors),
        // Not reached: every path that yields no spec records an error first.
        (None, None) => Err(YamlErrors::single(YamlError::new(
            "",
            "invalid rollout policy",
        ))),
    }
}

/// The reason of a field refusal, without the field (the path says it).
fn reason(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { reason, .. } => reason,
        other => other.to_string(),
    }
}

struct Validator {
    errors: Vec<YamlError>,
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(YamlError::new(path, message));
    }

    /// Checks a result of a `validate_*` function, recording its refusal at `path`.
    fn check(&mut self, path: &str, result: Result<(), CommandError>) -> bool {
        match result {
            Ok(()) => true,
            Err(e) => {
                self.err(path, reason(e));
                false
            }
        }
    }

    fn policy(&mut self, raw: RawPolicy) -> Option<RolloutPolicySpec> {
        let product = match raw.product {
            None => {
                self.err("product", "required: the product the policy belongs to");
                None
            }
            Some(p) => self
                .check("product", validate_product_id("product", &p))
                .then_some(p),
        };
        let mut products = Vec::new();
        let list = raw.products.unwrap_or_default();
        if list.len() > MAX_GROUP_PRODUCTS {
            self.err(
                "products",
                format!(
                    "{} products, at most {MAX_GROUP_PRODUCTS} allowed",
                    list.len()
                ),
            );
        }
        for (i, p) in list.into_iter().enumerate() {
            let path = format!("products[{i}]");
            if !self.check(&path, validate_product_id(&path, &p)) {
                continue;
            }
            if product.as_deref() == Some(p.as_str()) {
                self.err(path, format!("{p} is the policy's own product"));
            } else if products.contains(&p) {
                self.err(path, format!("{p} is listed twice"));
            } else {
                products.push(p);
            }
        }
        let waves = self.waves(raw.waves);
        Some(RolloutPolicySpec {
            product: product?,
            products,
            waves: waves?,
        })
    }

    fn waves(&mut self, raw: Option<Vec<RawWave>>) -> Option<Vec<Wave>> {
        let Some(raw) = raw else {
            self.err("waves", "required: at least one wave");
            return None;
        };
        if raw.is_empty() {
            self.err("waves", "must list at least one wave");
            return None;
        }
        if raw.len() > MAX_WAVES {
            self.err(
                "waves",
                format!("{} waves, at most {MAX_WAVES} allowed", raw.len()),
            );
            return None;
        }
        let mut names = BTreeSet::new();
        // Environments named so far, with the wave (index) that names them.
        let mut named: BTreeMap<String, usize> = BTreeMap::new();
        let mut out = Vec::new();
        let mut ok = true;
        for (i, w) in raw.into_iter().enumerate() {
            let path = format!("waves[{i}]");
            match self.wave(&path, w) {
                Some(wave) => {
                    if !names.insert(wave.name.clone()) {
                        self.err(
                            format!("{path}.name"),
                            format!("wave {:?} is named twice", wave.name),
                        );
                        ok = false;
                    }
                    for env in &wave.selector.environments {
                        if let Some(first) = named.insert(env.clone(), i) {
                            self.err(
                                format!("{path}.selector.environments"),
                                format!(
                                    "{env} is already in waves[{first}]: an environment belongs \
                                     to one wave of a policy"
                                ),
                            );
                            ok = false;
                        }
                    }
                    out.push(wave);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn wave(&mut self, path: &str, raw: RawWave) -> Option<Wave> {
        let name = match raw.name {
            None => {
                self.err(format!("{path}.name"), "required");
                None
            }
            Some(n) => {
                let p = format!("{path}.name");
                self.check(&p, validate_name(&p, &n)).then_some(n)
            }
        };
        let selector = match raw.selector {
            None => {
                self.err(
                    format!("{path}.selector"),
                    "required: environments, labels or both",
                );
                None
            }
            Some(s) => self.selector(&format!("{path}.selector"), s),
        };
        let soak_ms = match raw.soak.as_deref() {
            None => Some(0),
            Some(text) => match parse_duration(text) {
                Ok(ms) if ms > MAX_SOAK_MS => {
                    self.err(format!("{path}.soak"), "at most 30 days (720h)");
                    None
                }
                Ok(ms) if ms < MIN_SOAK_MS => {
                    self.err(
                        format!("{path}.soak"),
                        format!("{text:?} is under one second: leave `soak` out for no soak"),
                    );
                    None
                }
                Ok(ms) => Some(ms),
                Err(e) => {
                    self.err(format!("{path}.soak"), e.to_string());
                    None
                }
            },
        };
        let max_parallel = match raw.max_parallel {
            None => Some(None),
            Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => u32::try_from(n).ok().map(Some),
            Some(n) => {
                self.err(
                    format!("{path}.maxParallel"),
                    format!("must be at least 1, got {n}"),
                );
                None
            }
        };
        let on_failure = match raw.on_failure.as_deref() {
            None | Some("halt") => Some(OnFailure::Halt),
            Some("recall") => Some(OnFailure::Recall),
            Some(other) => {
                self.err(
                    format!("{path}.onFailure"),
                    format!("{other:?} is not halt or recall"),
                );
                None
            }
        };
        Some(Wave {
            name: name?,
            selector: selector?,
            soak_ms: soak_ms?,
            max_parallel: max_parallel?,
            on_failure: on_failure?,
        })
    }

    fn selector(&mut self, path: &str, raw: RawSelector) -> Option<Selector> {
        let mut ok = true;
        let mut environments = BTreeSet::new();
        let names = raw.environments.unwrap_or_default();
        if names.len() > MAX_SELECTOR_ENVIRONMENTS {
            self.err(
                format!("{path}.environments"),
                format!(
                    "{} environments, at most {MAX_SELECTOR_ENVIRONMENTS} allowed",
                    names.len()
                ),
            );
            ok = false;
        }
        for (i, n) in names.into_iter().enumerate() {
            let p = format!("{path}.environments[{i}]");
            if !self.check(&p, validate_name(&p, &n)) {
                ok = false;
            } else if !environments.insert(n.clone()) {
                self.err(p, format!("{n} is listed twice"));
                ok = false;
            }
        }
        let labels: BTreeMap<String, String> = raw.labels.unwrap_or_default();
        if labels.len() > MAX_LABELS {
            self.err(
                format!("{path}.labels"),
                format!("{} labels, at most {MAX_LABELS} allowed", labels.len()),
            );
            ok = false;
        }
        for (k, val) in &labels {
            let p = format!("{path}.labels.{k}");
            ok &= self.check(&p, validate_label_key(&p, k));
            ok &= self.check(&p, validate_label_value(&p, val));
        }
        if ok && environments.is_empty() && labels.is_empty() {
            self.err(path, "selects nothing: give environments, labels or both");
            ok = false;
        }
        ok.then_some(Selector {
            environments,
            labels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "\
product: com.example:api
products: [com.example:db]
waves:
  - name: eu-canary
    selector: {environments: [eu-1], labels: {tier: canary}}
    soak: 30m
    maxParallel: 2
    onFailure: halt
  - name: prod
    selector: {labels: {tier: prod}}
    soak: 1h
    maxParallel: 5
    onFailure: recall
";

    fn paths(yaml: &str) -> Vec<String> {
        parse_rollout_policy(yaml)
            .unwrap_err()
            .iter()
            .map(|e| e.path.clone())
            .collect()
    }

    #[test]
    fn the_example_policy() {
        let p = parse_rollout_policy(POLICY).unwrap();
        assert_eq!(p.product, "com.example:api");
        assert_eq!(p.products, ["com.example:db"]);
        assert_eq!(p.waves.len(), 2);
        let w = &p.waves[0];
        assert_eq!(w.name, "eu-canary");
        assert_eq!(w.soak_ms, 30 * 60_000);
        assert_eq!(w.max_parallel, Some(2));
        assert_eq!(w.on_failure, OnFailure::Halt);
        assert!(w.selector.environments.contains("eu-1"));
        assert_eq!(
            w.selector.labels.get("tier").map(String::as_str),
            Some("canary")
        );
        assert_eq!(p.waves[1].on_failure, OnFailure::Recall);
        assert_eq!(p.waves[1].soak_ms, 3_600_000);
    }

    #[test]
    fn defaults_no_soak_no_limit_halt() {
        let p = parse_rollout_policy(
            "product: com.example:api\nwaves:\n  - {name: all, selector: {labels: {tier: prod}}}\n",
        )
        .unwrap();
        let w = &p.waves[0];
        assert_eq!(
            (w.soak_ms, w.max_parallel, w.on_failure),
            (0, None, OnFailure::Halt)
        );
        assert!(p.products.is_empty());
    }

    #[test]
    fn every_value_error_is_reported_with_its_path() {
        let bad = POLICY
            .replace("soak: 30m", "soak: 30 minutes")
            .replace("maxParallel: 5", "maxParallel: 0")
            .replace("onFailure: recall", "onFailure: retry")
            .replace("{tier: prod}", "{Tier: prod}");
        assert_eq!(
            paths(&bad),
            [
                "waves[0].soak",
                "waves[1].selector.labels.Tier",
                "waves[1].maxParallel",
                "waves[1].onFailure"
            ]
        );
        let errors = parse_rollout_policy(&bad).unwrap_err().to_string();
        assert!(
            errors.contains("waves[1].maxParallel: must be at least 1, got 0"),
            "{errors}"
        );
        assert!(
            errors.contains("waves[1].onFailure: \"retry\" is not halt or recall"),
            "{errors}"
        );
    }

    #[test]
    fn structural_errors() {
        assert_eq!(
            paths("products: [x]\nwaves: []\n"),
            ["product", "products[0]", "waves"]
        );
        assert_eq!(
            paths("product: com.example:api\nproducts: [com.example:api]\nwaves:\n  - {name: a, selector: {}}\n  - {name: a, selector: {environments: [e1, e1]}}\n"),
            ["products[0]", "waves[0].selector", "waves[1].selector.environments[1]"]
        );
        assert_eq!(
            paths("product: com.example:api\nwaves:\n  - {name: a, selector: {environments: [e]}}\n  - {name: a, selector: {environments: [f]}, soak: 800h}\n"),
            ["waves[1].soak"]
        );
        assert_eq!(
            paths("product: com.example:api\nwaves:\n  - {name: a, selector: {environments: [e]}}\n  - {name: a, selector: {environments: [f]}}\n"),
            ["waves[1].name"]
        );
        // A soak given is at least one second; 0 and 999ms are refused, 1s is not.
        for soak in ["0s", "999ms"] {
            let yaml = format!("product: com.example:api\nwaves:\n  - {{name: a, selector: {{environments: [e]}}, soak: {soak}}}\n");
            assert_eq!(paths(&yaml), ["waves[0].soak"], "soak {soak}");
        }
        let errors = parse_rollout_policy(
            "product: com.example:api\nwaves:\n  - {name: a, selector: {environments: [e]}, soak: 500ms}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            errors.contains("waves[0].soak: \"500ms\" is under one second"),
            "{errors}"
        );
        assert!(parse_rollout_policy(
            "product: com.example:api\nwaves:\n  - {name: a, selector: {environments: [e]}, soak: 1s}\n"
        )
        .is_ok());
        // An environment named by two waves.
        let yaml = "product: com.example:api\nwaves:\n  - {name: a, selector: {environments: [e, f]}}\n  - {name: b, selector: {environments: [g]}}\n  - {name: c, selector: {environments: [f]}}\n";
        assert_eq!(paths(yaml), ["waves[2].selector.environments"]);
        let errors = parse_rollout_policy(yaml).unwrap_err().to_string();
        assert!(errors.contains("f is already in waves[0]"), "{errors}");
        assert_eq!(
            paths("product: com.example:api\nwaves:\n  - {selector: {environments: [e]}}\n"),
            ["waves[0].name"]
        );
    }

    #[test]
    fn shape_errors_name_the_field_and_the_line() {
        let e = parse_rollout_policy(
            "product: com.example:api\nwaves:\n  - name: a\n    selectr: {}\n",
        )
        .unwrap_err();
        let first = e.first();
        assert_eq!(first.path, "waves[0].selectr");
        assert_eq!(first.line, Some(4));
        let e = parse_rollout_policy(
            "product: com.example:api\nwaves:\n  - name: a\n    maxParallel: many\n",
        )
        .unwrap_err();
        assert_eq!(e.first().path, "waves[0].maxParallel");
        assert!(parse_rollout_policy("").is_err());
        assert!(parse_rollout_policy("- a\n").is_err());
        assert!(parse_rollout_policy("a: [").is_err());
    }
}
