//! The hub agent (`hub-agent`): runs in a spoke environment, fails over between hub nodes,
//! reports what is deployed and executes plans exactly once (SPEC P2, R3, R4).
//!
//! - [`plan`]: the plan as the agent sees it, and task outcomes.
//! - [`canary`]: executes `canary-step` plans (the canary's workloads through the driver,
//!   the proxy) and observes canaries.
//! - [`driver`]: what executes tasks: [`driver::process`] (real processes from artifacts) and
//!   [`driver::sim`] (simulated entities for scale and chaos runs).
//! - [`execlog`]: `DATA/executions.jsonl`, one line per task event, reconciled with the
//!   journal at start-up.
//! - [`executor`]: the loops: fetch plans, run them task by task, report.
//! - [`journal`]: the local, durable record that makes execution exactly-once across restarts.
//! - [`hub`]: the hub connection: endpoint failover, back-off, safe retries.
//! - [`metrics`]: Prometheus counters on `/metrics`.
//! - [`proxy`]: the canary proxy (weighted and A/B routing, per-workload metrics).
//! - [`wire`]: the typed agent contract: fetched plans checked (every enum mapped, unknown
//!   values refused), reports and states onto the wire, refused reports read back.

pub mod canary;
pub mod driver;
pub mod execlog;
pub mod executor;
pub mod hub;
pub mod journal;
pub mod metrics;
pub mod plan;
pub mod proxy;
pub mod wire;
