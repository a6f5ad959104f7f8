//! Request ids: every write carries one, so a write retried on another node (after a
//! failover, a timeout or a lost reply) is applied once and answered with its first outcome.

/// A fresh random request id: 128 random bits as 32 hex digits.
pub fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
