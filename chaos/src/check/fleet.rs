//! Fleet waves held under faults: from the fleet workload's releases (each with its committed
//! wave progress after healing) and the product's plans.
//!
//! Rules:
//!
//! 1. **No early wave.** An install or version-change plan to release `V` of an entity in wave
//!    `k` was issued no earlier than the committed soak end of every earlier wave of `V` (a
//!    wave that has passed is never touched again, so the soak end read after healing is the
//!    one the leader judged by). A promoted wave, or one without entities, is not a bound.
//! 2. **No wave opens twice.** No entity has two succeeded install or version-change plans
//!    to the same version (rollbacks move back to a version already run, and are not counted).
//! 3. **Nothing stuck.** After healing (and the runner's bounded wait), every release is
//!    either rolled out (every wave passed) or halted with a recorded cause.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::history::{FleetHistory, FleetPlan, FleetRelease};

/// The result of [`fleet_waves`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FleetReport {
    /// True without violations.
    pub ok: bool,
    /// Releases recorded.
    pub releases: usize,
    /// Of those, rolled out through every wave.
    pub rolled_out: usize,
    /// Of those, halted with a cause.
    pub halted: usize,
    /// Of the halted ones, those whose later waves got no plan to the release (the halt
    /// struck before the second wave opened, and held).
    pub halted_before_later_waves: usize,
    /// Waves passed, over all releases.
    pub waves_passed: usize,
    /// Plans of the fleet product recorded.
    pub plans: usize,
    /// Plans checked against an earlier wave's soak end (rule 1).
    pub plans_checked: usize,
    /// The smallest `issued_ms - soak_until_ms` among those (ms; negative is a violation).
    pub min_margin_ms: Option<i64>,
    /// Succeeded upgrade plans checked for a second one (rule 2).
    pub succeeded_upgrades: usize,
    /// Waves with a soak that passed by soaking (not promoted).
    pub soaks: usize,
    /// Of those, soaks during which a fault struck the leader.
    pub soaks_crossed_by_leader_fault: usize,
    /// What is wrong.
    pub violations: Vec<FleetViolation>,
}

/// A fleet-wave violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FleetViolation {
    /// A plan of a later wave was issued before an earlier wave passed.
    #[error(
        "plan {plan} of {entity} to {version} (wave {wave}) was issued at {} ms, before wave {earlier_wave} passed (soak until {})",
        opt(.issued_ms), opt(.soak_until_ms)
    )]
    BeforeSoakEnd {
        /// The plan.
        plan: String,
        /// Its entity.
        entity: String,
        /// The release.
        version: String,
        /// The entity's wave.
        wave: String,
        /// The earlier wave that had not passed.
        earlier_wave: String,
        /// When the plan was issued.
        issued_ms: Option<i64>,
        /// The earlier wave's committed soak end (`None`: it never completed).
        soak_until_ms: Option<i64>,
    },
    /// An entity got two succeeded upgrades to the same version: its wave opened twice.
    #[error("entity {entity} has {} succeeded plans to {version}: {}", .plans.len(), .plans.join(", "))]
    OpenedTwice {
        /// The entity.
        entity: String,
        /// The version.
        version: String,
        /// The plans.
        plans: Vec<String>,
    },
    /// A release neither rolled out nor halted with a cause after healing.
    #[error("release {version} is stuck: {detail}")]
    Stuck {
        /// The release.
        version: String,
        /// Its waves, or why there is no status.
        detail: String,
    },
}

fn opt(v: &Option<i64>) -> String {
    v.map_or_else(|| "never".to_string(), |v| v.to_string())
}

/// Whether a plan moves its entity up to a release (what waves hold back).
fn is_upgrade(p: &FleetPlan) -> bool {
    p.kind == "install" || p.kind == "version-change"
}

/// Checks the fleet workload's history (see the module's rules).
pub fn fleet_waves(f: &FleetHistory) -> FleetReport {
    let mut r = FleetReport {
        releases: f.releases.len(),
        plans: f.plans.len(),
        ..FleetReport::default()
    };
    for release in &f.releases {
        early_waves(release, &f.plans, &mut r);
        if release.halted.is_some() && !later_wave_plans(release, &f.plans) {
            r.halted_before_later_waves += 1;
        }
        settled(release, &mut r);
        soaks(release, &f.leader_faults_ms, &mut r);
    }
    opened_twice(&f.plans, &mut r);
    r.ok = r.violations.is_empty();
    r
}

/// Whether an entity of a wave after the first got an upgrade plan to the release.
fn later_wave_plans(release: &FleetRelease, plans: &[FleetPlan]) -> bool {
    release.waves.iter().skip(1).any(|w| {
        plans.iter().any(|p| {
            is_upgrade(p)
                && p.to_version.as_deref() == Some(release.version.as_str())
                && w.entities.contains(&p.entity)
        })
    })
}

/// Rule 1 for one release.
fn early_waves(release: &FleetRelease, plans: &[FleetPlan], r: &mut FleetReport) {
    for (k, wave) in release.waves.iter().enumerate() {
        let bounds: Vec<_> = release.waves[..k]
            .iter()
            .filter(|w| !w.promoted && !w.entities.is_empty())
            .collect();
        if bounds.is_empty() {
            continue;
        }
        let to_it = plans.iter().filter(|p| {
            is_upgrade(p)
                && p.to_version.as_deref() == Some(release.version.as_str())
                && wave.entities.contains(&p.entity)
        });
        for p in to_it {
            let Some(issued) = p.issued_ms else { continue };
            r.plans_checked += 1;
            for earlier in &bounds {
                if let Some(s) = earlier.soak_until_ms {
                    let margin = issued - s;
                    r.min_margin_ms = Some(r.min_margin_ms.map_or(margin, |m| m.min(margin)));
                }
                if earlier.soak_until_ms.is_none_or(|s| issued < s) {
                    r.violations.push(FleetViolation::BeforeSoakEnd {
                        plan: p.id.clone(),
                        entity: p.entity.clone(),
                        version: release.version.clone(),
                        wave: wave.name.clone(),
                        earlier_wave: earlier.name.clone(),
                        issued_ms: Some(issued),
                        soak_until_ms: earlier.soak_until_ms,
                    });
                }
            }
        }
    }
}

/// Rule 3 for one release.
fn settled(release: &FleetRelease, r: &mut FleetReport) {
    r.waves_passed += release.waves.iter().filter(|w| w.passed).count();
    let stuck = |detail: String| FleetViolation::Stuck {
        version: release.version.clone(),
        detail,
    };
    if !release.status_read {
        r.violations
            .push(stuck("the healed hub gave no rollout status".into()));
        return;
    }
    match &release.halted {
        Some(cause) if !cause.trim().is_empty() => r.halted += 1,
        Some(_) => r
            .violations
            .push(stuck("halted without a recorded cause".into())),
        None if !release.waves.is_empty() && release.waves.iter().all(|w| w.passed) => {
            r.rolled_out += 1
        }
        None => r.violations.push(stuck(
            release
                .waves
                .iter()
                .map(|w| {
                    format!(
                        "wave {} {}/{} done, {}",
                        w.name,
                        w.done,
                        w.entities.len(),
                        if w.passed { "passed" } else { "not passed" }
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

/// Counts soaks, and those a leader fault struck during.
fn soaks(release: &FleetRelease, leader_faults_ms: &[i64], r: &mut FleetReport) {
    for w in &release.waves {
        let (Some(from), Some(to)) = (w.completed_ms, w.soak_until_ms) else {
            continue;
        };
        if to <= from || w.promoted || !w.passed {
            continue;
        }
        r.soaks += 1;
        if leader_faults_ms.iter().any(|t| *t > from && *t < to) {
            r.soaks_crossed_by_leader_fault += 1;
        }
    }
}

/// Rule 2 over all plans.
fn opened_twice(plans: &[FleetPlan], r: &mut FleetReport) {
    let mut by: BTreeMap<(&str, &str), Vec<&FleetPlan>> = BTreeMap::new();
    for p in plans
        .iter()
        .filter(|p| is_upgrade(p) && p.status == "succeeded")
    {
        if let Some(v) = p.to_version.as_deref() {
            by.entry((p.entity.as_str(), v)).or_default().push(p);
        }
    }
    for ((entity, version), mut ps) in by {
        r.succeeded_upgrades += ps.len();
        if ps.len() > 1 {
            ps.sort_by_key(|p| (p.issued_index, p.id.clone()));
            r.violations.push(FleetViolation::OpenedTwice {
                entity: entity.to_string(),
                version: version.to_string(),
                plans: ps.iter().map(|p| p.id.clone()).collect(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::history::FleetWave;
    use super::*;

    fn wave(name: &str, entities: &[&str], completed: i64, soak: i64) -> FleetWave {
        FleetWave {
            name: name.into(),
            entities: entities.iter().map(|e| e.to_string()).collect(),
            done: entities.len(),
            passed: true,
            promoted: false,
            completed_ms: Some(completed),
            soak_until_ms: Some(completed + soak),
        }
    }

    fn plan(id: &str, entity: &str, version: &str, issued: i64, status: &str) -> FleetPlan {
        FleetPlan {
            id: id.into(),
            entity: entity.into(),
            kind: "version-change".into(),
            to_version: Some(version.into()),
            status: status.into(),
            issued_ms: Some(issued),
            issued_index: Some(issued as u64),
        }
    }

    /// Release 1.0.1: wave `first` (a) done at 1000, soaking 4 s; wave `second` (b, c)
    /// issued at 5000 and 5100, done at 5200.
    fn good() -> FleetHistory {
        FleetHistory {
            product: "com.example:chaos-fleet".into(),
            releases: vec![FleetRelease {
                version: "1.0.1".into(),
                status_read: true,
                halted: None,
                waves: vec![
                    wave("first", &["a"], 1000, 4000),
                    wave("second", &["b", "c"], 5200, 0),
                ],
            }],
            plans: vec![
                plan("p-1-0", "a", "1.0.1", 900, "succeeded"),
                plan("p-2-0", "b", "1.0.1", 5000, "succeeded"),
                plan("p-3-0", "c", "1.0.1", 5100, "succeeded"),
                // A rollback to a version already run is not a second opening.
                FleetPlan {
                    kind: "rollback".into(),
                    ..plan("p-4-0", "a", "1.0.1", 6000, "succeeded")
                },
            ],
            leader_faults_ms: vec![2500, 9000],
            operator_halts: Vec::new(),
        }
    }

    #[test]
    fn a_rollout_through_its_waves_passes_with_its_counts() {
        let r = fleet_waves(&good());
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(
            (r.releases, r.rolled_out, r.halted, r.waves_passed),
            (1, 1, 0, 2)
        );
        assert_eq!((r.plans, r.plans_checked, r.min_margin_ms), (4, 2, Some(0)));
        assert_eq!(r.succeeded_upgrades, 3);
        // One soak (the second wave has none), and the leader fault at 2500 fell in it.
        assert_eq!((r.soaks, r.soaks_crossed_by_leader_fault), (1, 1));
        assert!(fleet_waves(&FleetHistory::default()).ok);
    }

    #[test]
    fn a_plan_of_wave_two_before_the_soak_end_is_caught() {
        let mut h = good();
        h.plans[2].issued_ms = Some(4999);
        let r = fleet_waves(&h);
        assert!(!r.ok);
        assert_eq!(r.min_margin_ms, Some(-1));
        assert_eq!(
            r.violations[0].to_string(),
            "plan p-3-0 of c to 1.0.1 (wave second) was issued at 4999 ms, before wave first passed (soak until 5000)"
        );
        // A wave that never completed bounds every later plan.
        let mut h = good();
        h.releases[0].waves[0].completed_ms = None;
        h.releases[0].waves[0].soak_until_ms = None;
        let r = fleet_waves(&h);
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
        assert!(r.violations[0].to_string().contains("(soak until never)"));
        // A promoted wave is no bound.
        h.releases[0].waves[0].promoted = true;
        assert!(fleet_waves(&h).ok);
    }

    #[test]
    fn a_wave_opened_twice_is_caught() {
        let mut h = good();
        h.plans.push(plan("p-9-0", "b", "1.0.1", 7000, "succeeded"));
        let r = fleet_waves(&h);
        assert!(!r.ok);
        assert_eq!(
            r.violations,
            vec![FleetViolation::OpenedTwice {
                entity: "b".into(),
                version: "1.0.1".into(),
                plans: vec!["p-2-0".into(), "p-9-0".into()]
            }]
        );
        // A failed second plan is not a second opening.
        h.plans[4].status = "failed".into();
        assert!(fleet_waves(&h).ok);
    }

    #[test]
    fn a_release_left_without_progress_or_cause_is_caught() {
        let mut h = good();
        h.releases[0].waves[1].passed = false;
        h.releases[0].waves[1].done = 1;
        let r = fleet_waves(&h);
        assert_eq!(
            r.violations[0].to_string(),
            "release 1.0.1 is stuck: wave first 1/1 done, passed; wave second 1/2 done, not passed"
        );
        // Halted with a cause: settled.
        h.releases[0].halted = Some("operator: chaos halt".into());
        let r = fleet_waves(&h);
        assert!(r.ok && r.halted == 1, "{:?}", r.violations);
        // The second wave had plans to it: the halt came after it opened.
        assert_eq!(r.halted_before_later_waves, 0);
        let mut early = h.clone();
        early.plans.retain(|p| p.entity == "a");
        assert_eq!(fleet_waves(&early).halted_before_later_waves, 1);
        // Halted without one, or no status at all: stuck.
        h.releases[0].halted = Some(" ".into());
        assert!(!fleet_waves(&h).ok);
        h.releases[0].halted = None;
        h.releases[0].status_read = false;
        h.releases[0].waves.clear();
        let r = fleet_waves(&h);
        assert!(r.violations[0].to_string().contains("no rollout status"));
    }
}
