//! What the hub and its agents share besides the gRPC messages: the types an agent reports in
//! and the hub records, and the checks both sides run on the same input. A leaf crate, so an
//! agent does not carry the hub's engine (`hub-engine` re-exports each item at its old path).
//!
//! - [`plan_state`]: a plan's and a task's state.
//! - [`entity_state`]: an entity's health, its reported state and an agent's report of it.
//! - [`canary_units`]: the fixed-point units of canary measurements.
//! - [`canary_addresses`]: the fixed addresses of a canary's proxy.
//! - [`url_credentials`]: credentials in registry URLs, redacted and sent as Basic auth.
//! - [`yaml_budget`] and [`yaml_error`]: YAML from operators, bounded before it is parsed,
//!   and its errors by path and line.

pub mod canary_addresses;
pub mod canary_units;
pub mod entity_state;
pub mod plan_state;
pub mod url_credentials;
pub mod yaml_budget;
pub mod yaml_error;

/// Milliseconds since the Unix epoch (the hub's entry times).
pub type TimestampMs = i64;
