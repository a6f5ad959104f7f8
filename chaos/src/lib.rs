//! Load generation and (later) fault injection against real hub clusters.
//!
//! Today this crate holds the `hub-bench` load generator: concurrent writers with latency
//! percentiles, and leader-kill failover timing on a `hubctl dev` cluster. The chaos runner
//! with checked histories (SPEC R6) is a later issue.

pub mod stats;
