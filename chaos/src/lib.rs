//! Fault injection and load generation against real hub clusters (SPEC R6).
//!
//! - [`runner`]: `chaos run`: a hub of real `hub-node` processes under a register workload,
//!   killed, paused and restarted on a seeded schedule, then healed and checked.
//! - [`catch_up`]: `hub-bench catch-up`, a new follower's catch-up by snapshot when every
//!   entity carries its history, in real processes.
//! - [`check`]: the pure checkers of a recorded history (linearizability, durability, plans at
//!   most once, canary weights, rollouts terminal, convergence).
//! - [`compare`]: `hub-bench compare-etcd`, the hub and etcd 3.4 side by side in one run.
//! - [`history`]: `hub-bench history`, memory, store and snapshot sizes and times when every
//!   entity carries its history.
//! - [`journal_bench`]: `hub-bench journal`, what journaling a task step costs an agent.
//! - [`rolling_restart`]: `hub-bench rolling-restart`, the longest write stall while every node
//!   is restarted in turn.
//! - [`sim_agents`]: many real agents with the `sim` driver in one process, for `hub-bench`.
//! - [`stats`]: latency percentiles for `hub-bench`, the load generator (concurrent writers,
//!   leader-kill failover timing, agents at scale).

pub mod catch_up;
pub mod check;
pub mod compare;
pub mod history;
pub mod journal_bench;
pub mod rolling_restart;
pub mod runner;
pub mod sim_agents;
pub mod stats;
