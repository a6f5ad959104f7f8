//! Drivers execute a plan's tasks and observe what is deployed.
//!
//! The executor calls [`Driver::run_task`] once per task, in order, and persists each outcome
//! before reporting it. A task may run again after the agent was killed in the middle of it,
//! so every task must be idempotent: running it twice has the effect of running it once
//! (e.g. `start` adopts a process of the right version that is already running).

pub mod process;
pub mod sim;

use futures::future::BoxFuture;

use crate::plan::{Observed, PlanSpec, TaskFailure, TaskOutcome};

/// Executes tasks and observes entities.
pub trait Driver: Send + Sync + 'static {
    /// Runs task `task` of `plan`.
    fn run_task<'a>(
        &'a self,
        plan: &'a PlanSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<TaskOutcome, TaskFailure>>;

    /// What is deployed now, for every entity the driver knows of.
    fn observe(&self) -> BoxFuture<'_, Vec<Observed>>;

    /// Whether entities are simulated (no processes, no ports): the canary runner then
    /// starts no proxy and reports synthetic metrics.
    fn simulated(&self) -> bool {
        false
    }
}
