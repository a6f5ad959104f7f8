//! The fixed-point units of canary measurements, shared by the agent that samples them and
//! the hub that judges them.

/// Fixed-point scale of metric values and thresholds: a value `v` is stored as `v * 1000`.
pub const MILLI: i64 = 1_000;
/// The value of a successful request in a success histogram (100 %, in thousandths).
pub const SUCCESS_VALUE: i64 = 100_000;
/// The value of a failed (5xx) request in a success histogram.
pub const FAILURE_VALUE: i64 = 0;
