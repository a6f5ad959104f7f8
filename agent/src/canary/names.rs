//! Names of a canary's things: its id (`<environment>/<name>`) and data directory, the
//! pseudo-entities its workloads run as (Flagger's `<name>-primary` / `<name>-canary`), and a
//! workload's config with its port set.
//!
//! Everything here is checked before it names a path or an entity, so a hostile plan cannot
//! name a directory outside `DATA/canary/`.

use super::CanaryError;
use crate::driver::process::names::check_label;

/// A canary id (`<environment>/<name>`), both parts checked as DNS labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryId {
    /// The environment (the resource's namespace).
    pub environment: String,
    /// The resource's name.
    pub name: String,
}

impl CanaryId {
    /// Splits and checks `id`.
    pub fn parse(id: &str) -> Result<Self, CanaryError> {
        let invalid = |why: String| CanaryError::InvalidId {
            id: id.to_string(),
            why,
        };
        let (environment, name) = id
            .split_once('/')
            .ok_or_else(|| invalid("is not of the form <environment>/<name>".into()))?;
        check_label(environment).map_err(|why| invalid(format!("environment {why}")))?;
        check_label(name).map_err(|why| invalid(format!("name {why}")))?;
        Ok(Self {
            environment: environment.to_string(),
            name: name.to_string(),
        })
    }

    /// The directory name under `DATA/canary/`: `<environment>--<name>`.
    pub fn dir_name(&self) -> String {
        format!("{}--{}", self.environment, self.name)
    }
}

impl std::fmt::Display for CanaryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.environment, self.name)
    }
}

/// The entity ids of a canary's target and of its two workloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadIds {
    /// The target entity (`eid:<env>:<kind>:<name>`): the original workload.
    pub target: String,
    /// `eid:<env>:<kind>:<name>-primary`.
    pub primary: String,
    /// `eid:<env>:<kind>:<name>-canary`.
    pub canary: String,
    /// `eid:<env>:<kind>:<name>-baseline` (the fresh baseline, issue 20).
    pub baseline: String,
}

impl WorkloadIds {
    /// The ids for target entity `target` of `environment`; checks that the target and both
    /// pseudo-entity names are valid entity ids.
    pub fn of(target: &str, environment: &str) -> Result<Self, CanaryError> {
        let invalid = |why: String| CanaryError::InvalidTarget {
            entity: target.to_string(),
            why,
        };
        let parts: Vec<&str> = target.split(':').collect();
        let [eid, env, kind, name] = parts.as_slice() else {
            return Err(invalid(
                "is not of the form eid:<environment>:<kind>:<name>".into(),
            ));
        };
        if *eid != "eid" {
            return Err(invalid("does not start with \"eid:\"".into()));
        }
        if *env != environment {
            return Err(invalid(format!(
                "belongs to environment {env:?}, this agent serves {environment:?}"
            )));
        }
        if kind.is_empty() || kind.len() > 63 || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(invalid(format!(
                "kind {kind:?} must be 1-63 ASCII letters or digits"
            )));
        }
        check_label(name).map_err(|why| invalid(format!("name {name:?} {why}")))?;
        for suffix in ["primary", "canary", "baseline"] {
            let pseudo = format!("{name}-{suffix}");
            check_label(&pseudo)
                .map_err(|why| invalid(format!("the {suffix} workload's name {pseudo:?} {why}")))?;
        }
        Ok(Self {
            target: target.to_string(),
            primary: format!("{target}-primary"),
            canary: format!("{target}-canary"),
            baseline: format!("{target}-baseline"),
        })
    }
}

/// The hub's rendered `config` (YAML) with its top-level `port` set to `port`; empty text
/// becomes `port: N`. `what` names the config in errors (e.g. `primary workload config of
/// revision 1a2b…`).
pub fn config_with_port(what: &str, config: &str, port: u16) -> Result<String, CanaryError> {
    use hub_wire::yaml_budget::{check, Document, YamlRefusal};
    use serde_yaml_ng::{Mapping, Value};
    let refused = |why: String| CanaryError::Config {
        what: what.to_string(),
        why,
    };
    let value: Value = match check(Document::ConfigOverrides, config) {
        Ok(checked) => checked.parse(),
        Err(YamlRefusal::Syntax(e)) => Err(e),
        Err(YamlRefusal::Budget(e)) => return Err(refused(e.to_string())),
    }
    .map_err(|e| refused(format!("invalid YAML: {e}")))?;
    let mut map = match value {
        Value::Null => Mapping::new(),
        Value::Mapping(m) => m,
        other => {
            let kind = match other {
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Sequence(_) => "a sequence",
                _ => "a tagged value",
            };
            return Err(CanaryError::Config {
                what: what.to_string(),
                why: format!("must be a YAML mapping to set its port, got {kind}"),
            });
        }
    };
    map.insert(Value::from("port"), Value::from(port));
    serde_yaml_ng::to_string(&Value::Mapping(map)).map_err(|e| CanaryError::Config {
        what: what.to_string(),
        why: format!("cannot write it back as YAML: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_ids_are_checked_labels() {
        let id = CanaryId::parse("prod/web").unwrap();
        assert_eq!((id.environment.as_str(), id.name.as_str()), ("prod", "web"));
        assert_eq!(id.dir_name(), "prod--web");
        assert_eq!(id.to_string(), "prod/web");
        for bad in [
            "prod",
            "prod/",
            "/web",
            "prod/../x",
            "prod/a/b",
            "Prod/web",
            "prod/-web",
            "prod/.",
        ] {
            assert!(CanaryId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pseudo_entities_follow_flaggers_naming() {
        let ids = WorkloadIds::of("eid:prod:helmChart:web", "prod").unwrap();
        assert_eq!(ids.target, "eid:prod:helmChart:web");
        assert_eq!(ids.primary, "eid:prod:helmChart:web-primary");
        assert_eq!(ids.canary, "eid:prod:helmChart:web-canary");
        for bad in [
            "eid:dev:helmChart:web",
            "eid:prod:helm-chart:web",
            "eid:prod:helmChart:../web",
            "xid:prod:helmChart:web",
            "eid:prod:helmChart",
        ] {
            assert!(WorkloadIds::of(bad, "prod").is_err(), "{bad}");
        }
        // A name that fits but whose `-primary` does not.
        let long = format!("eid:prod:helmChart:{}", "a".repeat(60));
        let e = WorkloadIds::of(&long, "prod").unwrap_err().to_string();
        assert!(e.contains("primary"), "{e}");
    }

    #[test]
    fn config_port_is_set_in_the_mapping() {
        let out =
            config_with_port("cfg", "message: hi\nport: 8080\nnested:\n  a: 1\n", 9001).unwrap();
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&out).unwrap();
        assert_eq!(v["port"].as_u64(), Some(9001));
        assert_eq!(v["message"].as_str(), Some("hi"));
        assert_eq!(v["nested"]["a"].as_u64(), Some(1));
        // Keys keep their order; the port keeps its place.
        assert!(out.starts_with("message: hi\nport: 9001\n"), "{out}");

        let added = config_with_port("cfg", "message: hi\n", 9001).unwrap();
        assert_eq!(added, "message: hi\nport: 9001\n");
        for empty in ["", "\n", "# only a comment\n", "~"] {
            assert_eq!(
                config_with_port("cfg", empty, 7).unwrap(),
                "port: 7\n",
                "{empty:?}"
            );
        }
        for (bad, want) in [
            ("- a\n- b\n", "got a sequence"),
            ("just text", "got a string"),
            ("42", "got a number"),
            ("a: [", "invalid YAML"),
            (
                &*format!("a: {}", "[".repeat(10_000)),
                "nesting deeper than 128",
            ),
        ] {
            let e = config_with_port("primary workload config of revision abc", bad, 7)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("primary workload config of revision abc"),
                "{bad}: {e}"
            );
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
