//! The fleet workload: a product rolled out in waves across three environments while the
//! faults strike, and what the fleet checker needs from the healed hub.
//!
//! Set-up ([`setup`]): environments `chaos-fleet-0..2`, labelled `chaos-wave=first` (0) and
//! `chaos-wave=second` (1, 2), one helm-chart entity `fleet` of [`FLEET_PRODUCT`] in each,
//! executed by its own sim agent ([`FLEET_TASK_MS`] per task, no scripted failures), and the
//! rollout policy [`policy_yaml`]: wave `first` soaks [`FLEET_SOAK_MS`], wave `second` moves
//! one entity at a time. Then release 1.0.0.
//!
//! Driving ([`FleetDriver::step`]): a new release every [`FLEET_RELEASE_EVERY`]; every
//! [`FLEET_HALT_EVERY`]th release is halted by the driver, as an operator would, once its
//! first wave has a committed soak end (so the halt lands during the soak or the second wave).

use std::time::{Duration, Instant};

use hub_client::answer::{GetRolloutStatus, ListPlans, PlansAnswer, RolloutStatusView};
use serde_json::json;

use super::hub::{CallError, Hub};
use super::{entity_id, lock, setup as setup_command, Shared};
use crate::check::{FleetPlan, FleetRelease, FleetWave};

/// The fleet product.
pub const FLEET_PRODUCT: &str = "com.example:chaos-fleet";
/// Environments (and sim agents) of the fleet.
pub const FLEET_ENVS: usize = 3;
/// The first wave's soak.
pub const FLEET_SOAK_MS: u64 = 4_000;
/// A new fleet release this often.
pub const FLEET_RELEASE_EVERY: Duration = Duration::from_secs(12);
/// Every this many fleet releases, one is halted by the driver.
pub const FLEET_HALT_EVERY: u64 = 4;
/// How long each task of a fleet plan takes on the sim agents, so that plans are in flight
/// long enough for faults to strike them.
pub const FLEET_TASK_MS: u64 = 300;
/// The entity's name in every fleet environment.
const FLEET_ENTITY: &str = "fleet";

/// The name of fleet environment `k`.
pub fn fleet_env(k: usize) -> String {
    format!("chaos-fleet-{k}")
}

/// The fleet entity of environment `k`.
pub fn fleet_entity(k: usize) -> String {
    entity_id(&fleet_env(k), FLEET_ENTITY)
}

fn manifest(version: &str) -> String {
    format!("product-group: com.example\nproduct-name: chaos-fleet\nproduct-version: {version}\n")
}

/// The rollout policy of the fleet product.
pub fn policy_yaml() -> String {
    format!(
        "product: {FLEET_PRODUCT}\nwaves:\n\
         - name: first\n  selector: {{labels: {{chaos-wave: first}}}}\n  soak: {FLEET_SOAK_MS}ms\n  onFailure: halt\n\
         - name: second\n  selector: {{labels: {{chaos-wave: second}}}}\n  maxParallel: 1\n  onFailure: halt\n"
    )
}

/// Creates the product, environments, labels, entities and policy, then publishes 1.0.0
/// (recorded in `progress`).
pub(super) async fn setup(hub: &Hub, progress: &Shared) -> anyhow::Result<()> {
    setup_command(
        hub,
        "fleet-product",
        json!({"CreateProduct": {"product_id": FLEET_PRODUCT, "description": "chaos fleet"}}),
    )
    .await?;
    for k in 0..FLEET_ENVS {
        let env = fleet_env(k);
        setup_command(
            hub,
            &format!("env-{env}"),
            json!({"CreateEnvironment": {"name": env, "description": "chaos fleet"}}),
        )
        .await?;
        let wave = if k == 0 { "first" } else { "second" };
        setup_command(
            hub,
            &format!("labels-{env}"),
            json!({"SetEnvironmentLabels": {"environment": env, "labels": {"chaos-wave": wave}}}),
        )
        .await?;
        setup_command(
            hub,
            &format!("entity-{env}"),
            json!({"CreateEntity": {"environment": env, "kind": "HelmChart",
                "name": FLEET_ENTITY, "product_id": FLEET_PRODUCT,
                "k8s_namespace": "chaos", "account_id": null, "release_channel": null}}),
        )
        .await?;
    }
    setup_command(
        hub,
        "fleet-policy",
        json!({"ApplyRolloutPolicy": {"yaml": policy_yaml()}}),
    )
    .await?;
    setup_command(
        hub,
        "fleet-release-1.0.0",
        json!({"PublishRelease": {"manifest": manifest("1.0.0")}}),
    )
    .await?;
    lock(progress).fleet_releases.push("1.0.0".into());
    Ok(())
}

/// Publishes fleet releases and halts some, one step per call of [`FleetDriver::step`].
pub(super) struct FleetDriver {
    release: u64,
    next_at: Instant,
    /// A release to halt once its first wave has a soak end.
    to_halt: Option<String>,
}

impl Default for FleetDriver {
    /// The first release (1.0.1) after [`FLEET_RELEASE_EVERY`].
    fn default() -> FleetDriver {
        FleetDriver {
            release: 1,
            next_at: Instant::now() + FLEET_RELEASE_EVERY,
            to_halt: None,
        }
    }
}

impl FleetDriver {
    /// Publishes the next release when it is due; halts the release to halt when its first
    /// wave has a committed soak end.
    pub(super) async fn step(&mut self, hub: &Hub, progress: &Shared) {
        if Instant::now() >= self.next_at {
            let version = format!("1.0.{}", self.release);
            let r = hub
                .submit(
                    &json!({"PublishRelease": {"manifest": manifest(&version)}}),
                    &format!("chaos-fleet-release-{}", self.release),
                )
                .await;
            let published = match r {
                Ok(_) => true,
                Err(e) if e.already_exists() => true,
                Err(CallError::Refused { message, .. }) => {
                    lock(progress)
                        .notes
                        .push(format!("fleet release {version} refused: {message}"));
                    self.release += 1;
                    false
                }
                // Unknown outcome: the same request id at the next step.
                Err(CallError::Unavailable(_)) => false,
            };
            if published {
                lock(progress).fleet_releases.push(version.clone());
                if self.release.is_multiple_of(FLEET_HALT_EVERY) {
                    self.to_halt = Some(version);
                }
                self.release += 1;
                self.next_at = Instant::now() + FLEET_RELEASE_EVERY;
            }
        }
        if let Some(version) = self.to_halt.clone() {
            self.halt_when_soaking(hub, progress, &version).await;
        }
    }

    async fn halt_when_soaking(&mut self, hub: &Hub, progress: &Shared, version: &str) {
        let Ok(status) = hub.ask(&rollout_status(version)).await else {
            return;
        };
        if status.waves.first().and_then(|w| w.soak_until_ms).is_none() {
            return;
        }
        let r = hub
            .submit(
                &json!({"HaltRollout": {"product": FLEET_PRODUCT, "version": version,
                    "reason": "chaos: an operator halts every 4th fleet release", "actor": "chaos"}}),
                &format!("chaos-fleet-halt-{version}"),
            )
            .await;
        match r {
            Ok(_) => {
                lock(progress).fleet_halts.push(version.to_string());
                self.to_halt = None;
            }
            Err(CallError::Refused { message, .. }) => {
                lock(progress)
                    .notes
                    .push(format!("fleet halt of {version} refused: {message}"));
                self.to_halt = None;
            }
            Err(CallError::Unavailable(_)) => {}
        }
    }
}

/// The fleet product's rollout status of release `version`.
fn rollout_status(version: &str) -> GetRolloutStatus {
    GetRolloutStatus {
        product: FLEET_PRODUCT.to_string(),
        version: version.to_string(),
    }
}

/// A release's rollout status (the answer to `GetRolloutStatus`) as the history's
/// [`FleetRelease`]; the entities in no wave are left out.
pub fn release_from_status(version: &str, status: &RolloutStatusView) -> FleetRelease {
    let waves = status
        .waves
        .iter()
        .filter(|w| w.wave != "(no wave)")
        .map(|w| FleetWave {
            name: w.wave.clone(),
            entities: w.entities.iter().map(|e| e.entity.clone()).collect(),
            done: w.done,
            passed: w.state == "passed" || w.state == "promoted",
            promoted: w.state == "promoted",
            completed_ms: w.completed_ms,
            soak_until_ms: w.soak_until_ms,
        })
        .collect();
    FleetRelease {
        version: version.to_string(),
        status_read: true,
        halted: status.halted.as_ref().map(|h| h.cause.clone()),
        waves,
    }
}

/// Whether a release is settled: halted, or every wave passed.
pub fn settled(r: &FleetRelease) -> bool {
    r.halted.is_some() || (!r.waves.is_empty() && r.waves.iter().all(|w| w.passed))
}

/// Every fleet release's status as the hub answers now (unanswered: `status_read: false`).
pub async fn releases(hub: &Hub, versions: &[String]) -> Vec<FleetRelease> {
    let mut out = Vec::new();
    for v in versions {
        out.push(match hub.ask(&rollout_status(v)).await {
            Ok(status) => release_from_status(v, &status),
            Err(_) => FleetRelease {
                version: v.clone(),
                status_read: false,
                halted: None,
                waves: Vec::new(),
            },
        });
    }
    out
}

/// The fleet product's plans of a `ListPlans` answer.
pub fn plans_of(answer: &PlansAnswer) -> Vec<FleetPlan> {
    let fleet: Vec<String> = (0..FLEET_ENVS).map(fleet_entity).collect();
    answer
        .plans
        .iter()
        .filter(|p| fleet.contains(&p.entity))
        .map(|p| FleetPlan {
            id: p.id.clone(),
            entity: p.entity.clone(),
            kind: p.kind.clone(),
            to_version: p.to_version.clone(),
            status: p.status.clone(),
            issued_ms: Some(p.issued_ms),
            issued_index: Some(p.issued_index),
        })
        .collect()
}

/// Every plan of the fleet environments.
pub async fn plans(hub: &Hub, timeout: Duration) -> Result<Vec<FleetPlan>, CallError> {
    let mut out = Vec::new();
    for k in 0..FLEET_ENVS {
        let list = ListPlans {
            environment: Some(fleet_env(k)),
            limit: Some(10000),
            ..ListPlans::default()
        };
        let answer = hub.ask_until(&list, timeout).await?;
        out.extend(plans_of(&answer));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::gather::views;
    use super::*;
    use hub_client::answer::{HaltView, RolloutEntityView, WaveStatusView};

    #[test]
    fn the_policy_has_a_soaking_wave_then_one_entity_at_a_time() {
        // The hub validates it at set-up (a refusal fails the run); here its shape.
        let y = policy_yaml();
        assert!(
            y.starts_with("product: com.example:chaos-fleet\nwaves:\n"),
            "{y}"
        );
        assert!(
            y.contains(
                "- name: first\n  selector: {labels: {chaos-wave: first}}\n  soak: 4000ms\n"
            ),
            "{y}"
        );
        assert!(
            y.contains(
                "- name: second\n  selector: {labels: {chaos-wave: second}}\n  maxParallel: 1\n"
            ),
            "{y}"
        );
    }

    fn wave(
        name: &str,
        state: &str,
        completed_ms: Option<i64>,
        soak_until_ms: Option<i64>,
        entities: &[String],
    ) -> WaveStatusView {
        WaveStatusView {
            completed: None,
            completed_ms,
            done: 1,
            entities: entities
                .iter()
                .map(|e| RolloutEntityView {
                    canary: None,
                    entity: e.clone(),
                    environment: "env".into(),
                    health: "healthy".into(),
                    product: FLEET_PRODUCT.into(),
                    runs: None,
                    state: "done".into(),
                })
                .collect(),
            entities_total: entities.len(),
            in_flight: 0,
            promoted_by: None,
            soak_until: None,
            soak_until_ms,
            state: state.into(),
            wave: name.into(),
        }
    }

    #[test]
    fn rollout_status_and_plans_convert() {
        let mut status = RolloutStatusView {
            halted: None,
            policy: FLEET_PRODUCT.into(),
            version: "1.0.3".into(),
            waves: vec![
                wave("first", "passed", Some(10), Some(4010), &[fleet_entity(0)]),
                wave(
                    "second",
                    "rolling out",
                    None,
                    None,
                    &[fleet_entity(1), fleet_entity(2)],
                ),
            ],
        };
        let r = release_from_status("1.0.3", &status);
        assert_eq!(r.waves.len(), 2);
        assert_eq!(r.waves[0].soak_until_ms, Some(4010));
        assert!(r.waves[0].passed && !r.waves[1].passed && !settled(&r));
        assert_eq!(r.waves[1].entities.len(), 2);
        status.halted = Some(HaltView {
            at: "…".into(),
            cause: "halted by chaos: why".into(),
            recalls: Vec::new(),
        });
        assert!(settled(&release_from_status("1.0.3", &status)));

        let plan = |id: &str, entity: &str, kind: &str, issued_ms, issued_index| {
            let mut p = views::plan(id, entity, "succeeded", Some("1.0.3"));
            (p.kind, p.issued_ms, p.issued_index) = (kind.into(), issued_ms, issued_index);
            p
        };
        let answer = views::plans(vec![
            plan("p-5-0", &fleet_entity(1), "version-change", 4100, 5),
            plan("p-6-0", "eid:other:helmChart:x", "install", 1, 6),
        ]);
        let ps = plans_of(&answer);
        assert_eq!(ps.len(), 1);
        assert_eq!(
            (ps[0].issued_ms, ps[0].to_version.as_deref()),
            (Some(4100), Some("1.0.3"))
        );
    }
}
