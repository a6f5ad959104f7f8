//! The hub's outbound HTTP(S): every call `hub-node` makes that is not Raft or gRPC goes
//! through one [`Outbound`], built once per process ([`hub_http`]: reqwest over rustls/ring).
//!
//! - [`Outbound::calls`]: canary webhooks, alerts and Prometheus queries — the system's
//!   roots plus `hub-node --outbound-ca-file`, redirects not followed (a 3xx is the
//!   answer), one connection pool, so the leader's calls every analysis interval reuse their
//!   connections.
//! - [`Outbound::calls_unverified`]: the same, but accepting any server certificate — only
//!   for the Prometheus queries of a MetricTemplate with `insecureSkipVerify: true`.
//! - [`Outbound::registry`]: artifact existence checks — one client per registry trust
//!   setting (system roots, a registry's CA bundle, or explicitly no verification), redirects
//!   followed up to [`MAX_REDIRECTS`] hops.
//!
//! Both honour `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` and refuse the addresses of
//! `hub-node --outbound-deny` (default [`DenyList::DEFAULT`]: loopback, private and
//! link-local ranges and cloud metadata) less those `--outbound-allow` opens, checked on the
//! resolved address of every connection and on the IP literal of every URL and redirect hop.
//! Addresses the hub appends a path to (Prometheus) are built with the `url` crate
//! ([`endpoint`]), never by appending text.
//! The add-node check is gRPC (`NodeStatus`), not HTTP: it is not covered here.

use std::sync::Arc;

use hub_engine::artifact::TlsTrust;
use hub_http::{
    ClientPool, ClientSettings, DenyList, ErrorKind, HttpClient, Proxies, Redirects, Trust,
};

/// `User-Agent` of every request the hub sends.
pub const USER_AGENT: &str = concat!("hub-node/", env!("CARGO_PKG_VERSION"));

/// Most redirect hops followed by an artifact check.
pub const MAX_REDIRECTS: usize = 5;

/// Most bytes of an answer read (a Prometheus answer, a webhook's reply).
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The hub's outbound clients. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Outbound {
    calls: HttpClient,
    calls_unverified: HttpClient,
    registries: ClientPool,
    deny: Arc<DenyList>,
}

impl Outbound {
    /// Builds the clients; `deny` applies to every call; webhooks, alerts and Prometheus
    /// also trust the certificates of `calls_ca_pem`.
    pub fn new(deny: DenyList, calls_ca_pem: Option<String>) -> Result<Self, ErrorKind> {
        let deny = Arc::new(deny);
        let settings = |redirects| ClientSettings {
            user_agent: USER_AGENT.to_string(),
            redirects,
            proxies: Proxies::FromEnvironment,
            deny: deny.clone(),
        };
        let calls_trust = match calls_ca_pem {
            Some(ca_pem) => Trust::SystemRootsAnd { ca_pem },
            None => Trust::SystemRoots,
        };
        Ok(Self {
            calls: HttpClient::new(&settings(Redirects::Refuse), &calls_trust)?,
            calls_unverified: HttpClient::new(
                &settings(Redirects::Refuse),
                &Trust::SkipVerification,
            )?,
            registries: ClientPool::new(settings(Redirects::Follow { max: MAX_REDIRECTS })),
            deny,
        })
    }

    /// The client of webhooks, alerts and Prometheus queries.
    pub fn calls(&self) -> &HttpClient {
        &self.calls
    }

    /// [`Outbound::calls`] without TLS verification (the deny list, proxies and refused
    /// redirects the same): only for a MetricTemplate that says `insecureSkipVerify: true`.
    pub fn calls_unverified(&self) -> &HttpClient {
        &self.calls_unverified
    }

    /// The client for a registry with `trust`; `ca_pem` is the bundle's text when `trust`
    /// names one.
    pub fn registry(
        &self,
        trust: &TlsTrust,
        ca_pem: Option<&str>,
    ) -> Result<HttpClient, ErrorKind> {
        let trust = match (trust, ca_pem) {
            (TlsTrust::SystemRoots, _) => Trust::SystemRoots,
            (TlsTrust::InsecureSkipVerify, _) => Trust::SkipVerification,
            (TlsTrust::ExtraCa { .. }, Some(pem)) => Trust::SystemRootsAnd {
                ca_pem: pem.to_string(),
            },
            (TlsTrust::ExtraCa { sha256 }, None) => {
                return Err(ErrorKind::InvalidCaBundle(format!(
                    "no registry has the CA bundle sha256:{} any more",
                    &sha256[..sha256.len().min(16)]
                )))
            }
        };
        self.registries.client(&trust)
    }

    /// The addresses refused.
    pub fn deny(&self) -> &DenyList {
        &self.deny
    }
}

/// A calls-like client (redirects refused, no proxy, nothing denied) that also trusts
/// `ca_pem`: for tests against servers with a generated CA.
#[cfg(test)]
pub(crate) fn test_client_trusting(ca_pem: &str) -> HttpClient {
    let settings = ClientSettings {
        user_agent: USER_AGENT.to_string(),
        redirects: Redirects::Refuse,
        proxies: Proxies::None,
        deny: Arc::new(DenyList::none()),
    };
    let trust = Trust::SystemRootsAnd {
        ca_pem: ca_pem.to_string(),
    };
    HttpClient::new(&settings, &trust).expect("a test client")
}
