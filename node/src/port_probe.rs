//! Whether anything listens at an address: a refused TCP connection means the process that
//! served there is gone (the kernel answers for it), while an accepted or timed-out one says
//! nothing (a paused, overloaded or cut-off process). Used to tell a crashed leader
//! ([`crate::dead_leader`]) and a stopped transfer target ([`crate::node`]) apart from slow ones.

use std::time::Duration;

/// What a connection attempt said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The port refused the connection: nothing listens there.
    Refused,
    /// Accepted, timed out, or failed otherwise: the process may be alive.
    Inconclusive,
}

/// Dials `addr` once, for at most `timeout`.
pub async fn probe(addr: &str, timeout: Duration) -> Probe {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Probe::Refused,
        _ => Probe::Inconclusive,
    }
}

/// Whether `addr` refuses a TCP connection within `timeout`.
pub async fn refuses_connections(addr: &str, timeout: Duration) -> bool {
    probe(addr, timeout).await == Probe::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_refused_and_a_listening_one_is_not() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        assert_eq!(
            probe(&addr, Duration::from_secs(2)).await,
            Probe::Inconclusive
        );
        drop(l);
        assert_eq!(probe(&addr, Duration::from_secs(2)).await, Probe::Refused);
    }
}
