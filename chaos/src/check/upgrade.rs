//! A rolling upgrade across releases (`chaos run --faults upgrade --upgrade-from DIR`, issue
//! 56 item 5): every node that started on the previous release was restarted once on this
//! build, the feature-level gate refused the new release's command while any node still ran
//! the previous one, and once the last node was upgraded the leader raised the cluster's level
//! and the command applied.
//!
//! Lost writes, rollouts left unfinished and diverged nodes are the other checkers' to find:
//! an upgrade is judged by all of them, as any fault is.

use serde::{Deserialize, Serialize};

/// What a command of the new release's level got when submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum GateProbe {
    /// Refused, with the node's message.
    Refused {
        /// The status message (for people: the checker never reads it).
        message: String,
        /// Whether the refusal was the typed "the cluster's feature level is too low"
        /// (`hub_proto::refusal::Refusal::FeatureLevelTooLow`, or `hubctl`'s exit status 75).
        #[serde(default)]
        feature_level_too_low: bool,
    },
    /// Applied.
    Accepted,
    /// No answer (the node was down or the call timed out).
    NoAnswer {
        /// The error.
        error: String,
    },
}

impl std::fmt::Display for GateProbe {
    /// One short line: an old node's refusal lists every command it knows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |m: &str| m.chars().take(100).collect::<String>();
        match self {
            GateProbe::Refused { message, .. } => write!(f, "refused: {}", short(message)),
            GateProbe::Accepted => f.write_str("accepted"),
            GateProbe::NoAnswer { error } => write!(f, "no answer: {}", short(error)),
        }
    }
}

/// One node restarted on this build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeStep {
    /// The node.
    pub node: u64,
    /// Whether it led when it was stopped.
    pub was_leader: bool,
    /// When it was stopped, from the run's epoch.
    pub at_ns: u64,
    /// The new release's command, submitted just before this node was stopped, and to which
    /// node: one already upgraded if there was one (its gate speaks), else one of the
    /// previous release (which does not know the command).
    pub gate: GateProbe,
    /// Whether the probe went to an upgraded node.
    pub probed_upgraded: bool,
}

/// After the last node was upgraded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfterUpgrade {
    /// How long after the last restart the cluster ran the new level (`None`: never, within
    /// the runner's limit).
    pub level_raised_ms: Option<u64>,
    /// The new release's command, submitted once the level was raised.
    pub command: GateProbe,
    /// A node of the previous release asked to join the cluster at the new level
    /// (`hubctl dev add-node`): it must be refused, since it could not apply the log.
    pub previous_release_join: GateProbe,
}

/// The upgrade of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeHistory {
    /// The previous release's `hub-node --version`.
    pub from: String,
    /// The members that started on it.
    pub nodes: Vec<u64>,
    /// Each node's upgrade, in order.
    pub steps: Vec<UpgradeStep>,
    /// Once every node ran this build.
    pub after: Option<AfterUpgrade>,
}

/// The result of [`upgrade_gated`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeReport {
    /// True without violations (and true for a run without an upgrade).
    pub ok: bool,
    /// Nodes upgraded.
    pub upgraded: usize,
    /// How long the level took to rise after the last restart.
    pub level_raised_ms: Option<u64>,
    /// What is wrong.
    pub violations: Vec<String>,
}

/// Checks the upgrade of a run, if it had one.
pub fn upgrade_gated(history: Option<&UpgradeHistory>) -> UpgradeReport {
    let Some(h) = history else {
        return UpgradeReport {
            ok: true,
            ..UpgradeReport::default()
        };
    };
    let mut violations = Vec::new();
    for node in &h.nodes {
        let times = h.steps.iter().filter(|s| s.node == *node).count();
        if times != 1 {
            violations.push(format!(
                "node {node} was upgraded {times} times; every node of {} is upgraded once",
                h.from
            ));
        }
    }
    for s in &h.steps {
        match &s.gate {
            GateProbe::Refused {
                message,
                feature_level_too_low: false,
            } if s.probed_upgraded => {
                violations.push(format!(
                    "before node {} was upgraded, an upgraded node refused the new command \
                     for another reason than the gate: {message}",
                    s.node
                ));
            }
            GateProbe::Refused { .. } => {}
            GateProbe::Accepted => violations.push(format!(
                "before node {} was upgraded, a node still ran {}, and the new release's \
                 command was accepted: the gate did not hold",
                s.node, h.from
            )),
            GateProbe::NoAnswer { error } => violations.push(format!(
                "before node {} was upgraded, the gate probe got no answer: {error}",
                s.node
            )),
        }
    }
    match &h.after {
        None => violations.push("the last node was never upgraded".to_string()),
        Some(a) => {
            if a.level_raised_ms.is_none() {
                violations.push(
                    "every node ran this build, and the leader never raised the cluster's level"
                        .to_string(),
                );
            }
            if a.command != GateProbe::Accepted {
                violations.push(format!(
                    "every node ran this build, and the new release's command was not accepted: {}",
                    a.command
                ));
            }
            match &a.previous_release_join {
                GateProbe::Refused {
                    feature_level_too_low: true,
                    ..
                } => {}
                other => violations.push(format!(
                    "a node of {} asked to join the cluster at the new level: {other} (it must \
                     be refused: it could not apply the log)",
                    h.from
                )),
            }
        }
    }
    UpgradeReport {
        ok: violations.is_empty(),
        upgraded: h.steps.len(),
        level_raised_ms: h.after.as_ref().and_then(|a| a.level_raised_ms),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(message: &str) -> GateProbe {
        GateProbe::Refused {
            message: message.into(),
            feature_level_too_low: false,
        }
    }

    /// The typed refusal; its words do not matter.
    fn too_low() -> GateProbe {
        GateProbe::Refused {
            message: "reworded: any words at all".into(),
            feature_level_too_low: true,
        }
    }

    fn step(node: u64, gate: GateProbe, probed_upgraded: bool) -> UpgradeStep {
        UpgradeStep {
            node,
            was_leader: node == 3,
            at_ns: node * 1_000_000_000,
            gate,
            probed_upgraded,
        }
    }

    fn good() -> UpgradeHistory {
        UpgradeHistory {
            from: "hub-node 0.3.0".into(),
            nodes: vec![1, 2, 3],
            steps: vec![
                step(1, refused("invalid command: unknown variant"), false),
                step(2, too_low(), true),
                step(3, too_low(), true),
            ],
            after: Some(AfterUpgrade {
                level_raised_ms: Some(900),
                command: GateProbe::Accepted,
                previous_release_join: too_low(),
            }),
        }
    }

    #[test]
    fn a_gated_upgrade_of_every_node_passes_and_a_run_without_one_too() {
        let r = upgrade_gated(Some(&good()));
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!((r.upgraded, r.level_raised_ms), (3, Some(900)));
        assert!(upgrade_gated(None).ok);
    }

    #[test]
    fn each_way_the_upgrade_can_go_wrong_is_named() {
        let mut h = good();
        h.steps[1].gate = GateProbe::Accepted;
        h.steps[2].gate = refused("permission denied");
        h.steps.remove(0);
        h.after = Some(AfterUpgrade {
            level_raised_ms: None,
            command: refused("the cluster runs feature level 1"),
            previous_release_join: GateProbe::Accepted,
        });
        let r = upgrade_gated(Some(&h));
        assert!(!r.ok);
        let all = r.violations.join("\n");
        for want in [
            "node 1 was upgraded 0 times",
            "the gate did not hold",
            "for another reason than the gate: permission denied",
            "never raised the cluster's level",
            "command was not accepted",
            "asked to join the cluster at the new level: accepted",
        ] {
            assert!(all.contains(want), "{want:?} not in:\n{all}");
        }
        h.after = None;
        let r = upgrade_gated(Some(&h));
        assert!(r.violations.iter().any(|v| v.contains("never upgraded")));
    }

    /// The checker judges the typed refusal, never the words: the gate's or the join's
    /// words without the typed refusal are another reason.
    #[test]
    fn the_words_of_a_refusal_are_not_the_gate() {
        let mut h = good();
        h.steps[1].gate = refused("upgrade every node first");
        if let Some(a) = h.after.as_mut() {
            a.previous_release_join = refused("upgrade its hub-node first");
        }
        let r = upgrade_gated(Some(&h));
        let all = r.violations.join("\n");
        assert!(all.contains("for another reason than the gate"), "{all}");
        assert!(
            all.contains("asked to join the cluster at the new level"),
            "{all}"
        );
    }
}
