//! The simulated driver: entities that exist only in memory, with scripted task latency and a
//! failure rate, for scale and chaos runs. Deterministic for a seed: whether a plan fails
//! depends only on the seed and the plan id.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use sha2::{Digest, Sha256};

use crate::driver::Driver;
use crate::plan::{Health, Observed, PlanSpec, TaskFailure, TaskOutcome};

/// Scripted behaviour.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How long each task takes.
    pub task_latency: Duration,
    /// Fraction (0–1) of plans that fail their last task.
    pub failure_rate: f64,
    /// Seed of the failure decisions.
    pub seed: u64,
}

#[derive(Debug, Clone)]
struct SimEntity {
    version: Option<String>,
    config_sha256: Option<String>,
    secrets_revision: u64,
    health: Health,
    message: String,
}

/// Simulated entities.
pub struct SimDriver {
    cfg: SimConfig,
    entities: Mutex<BTreeMap<String, SimEntity>>,
}

impl SimDriver {
    /// A driver with no entities yet.
    pub fn new(cfg: SimConfig) -> Self {
        Self {
            cfg,
            entities: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether `plan` is scripted to fail.
    pub fn fails(&self, plan: &str) -> bool {
        let h = Sha256::digest(format!("{}:{plan}", self.cfg.seed).as_bytes());
        let x = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
        (x as f64 / u64::MAX as f64) < self.cfg.failure_rate
    }
}

impl Driver for SimDriver {
    fn run_task<'a>(
        &'a self,
        plan: &'a PlanSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<TaskOutcome, TaskFailure>> {
        async move {
            tokio::time::sleep(self.cfg.task_latency).await;
            let last = plan.tasks.last().map(String::as_str) == Some(task);
            if !last {
                return Ok(TaskOutcome {
                    output: format!("sim: {task} done\n"),
                });
            }
            let mut entities = self.entities.lock().unwrap_or_else(|p| p.into_inner());
            if self.fails(&plan.id) {
                let e = entities.entry(plan.entity.clone()).or_insert(SimEntity {
                    version: None,
                    config_sha256: None,
                    secrets_revision: 0,
                    health: Health::Unknown,
                    message: String::new(),
                });
                e.health = Health::Error;
                e.message = format!("sim: plan {} failed at {task}", plan.id);
                let mut f = TaskFailure::new(task, "sim: scripted failure");
                f.not_ready = vec![format!("{} sim", plan.entity)];
                return Err(f);
            }
            if plan.is_uninstall() {
                entities.remove(&plan.entity);
            } else {
                let sha = hex::encode(Sha256::digest(plan.config.as_bytes()));
                entities.insert(
                    plan.entity.clone(),
                    SimEntity {
                        version: (!plan.to_version.is_empty()).then(|| plan.to_version.clone()),
                        config_sha256: Some(sha),
                        secrets_revision: plan.secrets_revision,
                        health: Health::Healthy,
                        message: String::new(),
                    },
                );
            }
            Ok(TaskOutcome {
                output: format!("sim: {task} done\n"),
            })
        }
        .boxed()
    }

    fn observe(&self) -> BoxFuture<'_, Vec<Observed>> {
        async move {
            let entities = self.entities.lock().unwrap_or_else(|p| p.into_inner());
            entities
                .iter()
                .map(|(id, e)| Observed {
                    entity: id.clone(),
                    version: e.version.clone(),
                    health: e.health,
                    config_sha256: e.config_sha256.clone(),
                    secrets_revision: Some(e.secrets_revision),
                    message: e.message.clone(),
                })
                .collect()
        }
        .boxed()
    }

    fn simulated(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_deterministic_and_near_the_rate() {
        let d = SimDriver::new(SimConfig {
            task_latency: Duration::ZERO,
            failure_rate: 0.2,
            seed: 7,
        });
        let n = (0..10_000).filter(|i| d.fails(&format!("p-{i}-0"))).count();
        assert!((1_700..2_300).contains(&n), "{n}");
        assert_eq!(d.fails("p-1-0"), d.fails("p-1-0"));
    }
}
