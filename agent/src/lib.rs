//! The hub agent (`hub-agent`): runs in a spoke environment, fails over between hub nodes,
//! reports what is deployed and executes plans exactly once (SPEC P2, R3, R4).
//!
//! - [`canary`]: runs `canary-step` plans (workloads through the driver, the proxy), observes.
//! - [`driver`]: what executes tasks: [`driver::process`] (real processes) and [`driver::sim`].
//! - [`execlog`]: `DATA/executions.jsonl`, one line per task event, reconciled at start-up.
//! - [`executor`]: the loops: fetch plans, run them task by task, report.
//! - [`hub`]: the hub connection: endpoint failover, back-off, safe retries.
//! - [`journal`]: the local, durable record that makes execution exactly-once across restarts.
//! - [`linger`]: how long a report waits for the ones after it (while a plan runs).
//! - [`metrics`]: Prometheus counters on `/metrics`.
//! - [`plan`]: the plan as the agent sees it (kind, tasks, canary step), and task outcomes.
//! - [`proxy`]: the canary proxy (weighted and A/B routing, per-workload metrics).
//! - [`wire`]: the typed agent contract: fetched plans checked, reports onto the wire.

pub mod canary;
pub mod driver;
pub mod execlog;
pub mod executor;
pub mod hub;
pub mod journal;
pub mod linger;
pub mod metrics;
pub mod plan;
pub mod proxy;
pub mod wire;
