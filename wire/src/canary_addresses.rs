//! Where a canary's proxy listens (issue 52 item 2): fixed addresses, so load tests, gates
//! and operators have somewhere to point, shared by the hub (which shows them and resolves
//! load tests' hosts) and the agent (which binds them).

use std::net::{Ipv4Addr, SocketAddrV4};

/// Where a canary's proxy listens, for a service port: `<svc>` on 127.0.0.1, `<svc>-primary`
/// on 127.0.0.2 and `<svc>-canary` on 127.0.0.3, all on the service's port (as Flagger's
/// three Kubernetes services share it). Fixed, so load tests, gates and operators have
/// somewhere to point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StableAddresses {
    /// `<svc>`.
    pub main: SocketAddrV4,
    /// `<svc>-primary`.
    pub primary: SocketAddrV4,
    /// `<svc>-canary`.
    pub canary: SocketAddrV4,
}

impl StableAddresses {
    /// The addresses of a canary whose `spec.service.port` is `port`.
    pub fn of(port: u16) -> Self {
        StableAddresses {
            main: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), port),
            primary: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), port),
            canary: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), port),
        }
    }

    /// The address a load test's host names, if it is one of the service's three: `<svc>`,
    /// `<svc>-primary` or `<svc>-canary`, bare or followed by `.<namespace>` and more labels
    /// (`podinfo-canary.test`, `podinfo-canary.test.svc.cluster.local`).
    pub fn resolve(service: &str, port: u16, host: &str) -> Option<Ipv4Addr> {
        let first = host.split('.').next().unwrap_or("");
        let addrs = Self::of(port);
        if first == service {
            Some(*addrs.main.ip())
        } else if first.strip_prefix(service) == Some("-primary") {
            Some(*addrs.primary.ip())
        } else if first.strip_prefix(service) == Some("-canary") {
            Some(*addrs.canary.ip())
        } else {
            None
        }
    }
}
