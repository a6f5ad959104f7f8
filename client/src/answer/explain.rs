//! `explain`: SPEC P3's four questions for one entity (is there a candidate, does it meet
//! the constraints, was a plan issued, how did the last one end), with every constraint.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Typed;
use crate::query::Query;

/// The answer to `explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// The change the hub would make next.
    pub candidate: Option<ProposedChange>,
    /// Every constraint checked, in order.
    pub constraints: Vec<ConstraintView>,
    /// The entity's id.
    pub entity: String,
    /// When the leader evaluated it.
    pub evaluated_at: String,
    /// Whether there is a candidate.
    pub has_candidate: bool,
    /// Registries of the entity's environment whose TLS is not verified.
    pub insecure_registries: Vec<RegistryRef>,
    /// The plan issued for the candidate.
    pub issued: Option<IssuedView>,
    /// The entity's last finished plan.
    pub last_execution: Option<LastExecution>,
    /// When the earliest blocking constraint may clear.
    pub may_clear_at: Option<String>,
    /// Whether the candidate meets the constraints.
    pub meets_constraints: MeetsConstraints,
    /// Newer releases passed over, with why.
    pub skipped: Vec<String>,
    /// One line, as Activity shows it.
    pub summary: String,
}

/// A candidate change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedChange {
    /// The version it replaces.
    pub from_version: Option<String>,
    /// The plan kind it would be.
    pub kind: String,
    /// Why.
    pub reason: String,
    /// The version it deploys.
    pub to_version: Option<String>,
}

/// One constraint's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConstraintView {
    /// Its name.
    pub constraint: String,
    /// When a failed constraint may clear.
    pub may_clear_at: Option<String>,
    /// Whether it passed.
    pub passed: bool,
    /// Why.
    pub reason: String,
}

/// A registry named in an explanation (its address without credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryRef {
    /// Its name.
    pub name: String,
    /// Its address, credentials removed.
    pub url: String,
}

/// The plan issued for the candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedView {
    /// `p-…`.
    pub plan: String,
    /// Its status.
    pub status: String,
}

/// How the entity's last plan ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastExecution {
    /// `stage: message` when it failed.
    pub failure: Option<String>,
    /// Its kind.
    pub kind: String,
    /// `p-…`.
    pub plan: String,
    /// Its status.
    pub status: String,
}

/// Whether the candidate meets the constraints. On the wire: `true`, `false`, `"issued"`
/// (a plan for it is active), or `null` (nothing to decide: no candidate, or the entity is
/// not evaluated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeetsConstraints {
    /// It does: a plan will be issued.
    Yes,
    /// It does not: see the failed constraints.
    No,
    /// A plan for it is already issued or running.
    Issued,
    /// Nothing to decide.
    Undecided,
}

/// The word `"issued"`, the only text [`MeetsConstraints`] takes.
const ISSUED: &str = "issued";

impl Serialize for MeetsConstraints {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MeetsConstraints::Yes => s.serialize_bool(true),
            MeetsConstraints::No => s.serialize_bool(false),
            MeetsConstraints::Issued => s.serialize_str(ISSUED),
            MeetsConstraints::Undecided => s.serialize_none(),
        }
    }
}

impl<'de> Deserialize<'de> for MeetsConstraints {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Flag(bool),
            Word(String),
        }
        match Option::<Wire>::deserialize(d)? {
            Some(Wire::Flag(true)) => Ok(MeetsConstraints::Yes),
            Some(Wire::Flag(false)) => Ok(MeetsConstraints::No),
            Some(Wire::Word(w)) if w == ISSUED => Ok(MeetsConstraints::Issued),
            Some(Wire::Word(w)) => Err(serde::de::Error::custom(format!(
                "meets_constraints: expected true, false, {ISSUED:?} or null, got {w:?}"
            ))),
            None => Ok(MeetsConstraints::Undecided),
        }
    }
}

/// Asks the four questions for an entity (a reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explain(pub String);

impl Typed for Explain {
    type Answer = Explanation;
    fn query(&self) -> Query {
        Query::Explain {
            entity: self.0.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meets_constraints_reads_what_it_writes() {
        for m in [
            MeetsConstraints::Yes,
            MeetsConstraints::No,
            MeetsConstraints::Issued,
            MeetsConstraints::Undecided,
        ] {
            let text = serde_json::to_string(&m).expect("JSON");
            let back: MeetsConstraints = serde_json::from_str(&text).expect("read back");
            assert_eq!(back, m, "{text}");
        }
        assert!(serde_json::from_str::<MeetsConstraints>("\"maybe\"").is_err());
    }
}
