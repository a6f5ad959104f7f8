//! The agent's outbound HTTP(S), built once per process on [`hub_http`] (reqwest over
//! rustls/ring) and kept, so repeated calls to a host reuse their connections:
//!
//! - [`downloads`]: artifact downloads, one client per registry trust setting (system roots,
//!   the registry's CA bundle, or explicitly no verification), redirects followed up to
//!   [`MAX_REDIRECTS`] hops (never in a loop, never https → http, `Authorization` never
//!   sent to another host), `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` honoured, and the
//!   addresses of `hub-agent --outbound-deny` (the hub's default: loopback, private and
//!   link-local ranges and cloud metadata) refused unless `--outbound-allow` opens them. The
//!   driver builds the pool once and keeps it.
//! - [`probes`]: readiness probes of the agent's own services on `127.0.0.1`: plain HTTP,
//!   always direct (no proxy), redirects not followed, nothing denied (the host is fixed;
//!   only the port and path come from the service).
//!
//! Credentials in a URL (`user:password@`) are sent as Basic authentication and never
//! appear in errors, logs or `Debug`.

use std::sync::OnceLock;

use hub_http::{
    ClientPool, ClientSettings, DenyList, ErrorKind, HttpClient, Proxies, Redirects, Trust,
};

/// `url` with the `user:password@` of its authority removed.
pub use hub_wire::url_credentials::redact_url as redact;

/// `User-Agent` of every request the agent sends.
pub const USER_AGENT: &str = concat!("hub-agent/", env!("CARGO_PKG_VERSION"));

/// Most redirect hops followed by a download.
pub const MAX_REDIRECTS: usize = 5;

fn settings(redirects: Redirects, proxies: Proxies, deny: DenyList) -> ClientSettings {
    ClientSettings {
        user_agent: USER_AGENT.to_string(),
        redirects,
        proxies,
        deny: std::sync::Arc::new(deny),
    }
}

/// The download clients, by trust, refusing the addresses `deny` denies.
pub fn downloads(deny: DenyList) -> ClientPool {
    ClientPool::new(settings(
        Redirects::Follow { max: MAX_REDIRECTS },
        Proxies::FromEnvironment,
        deny,
    ))
}

/// The readiness-probe client.
pub fn probes() -> Result<&'static HttpClient, ErrorKind> {
    static CLIENT: OnceLock<Result<HttpClient, ErrorKind>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            HttpClient::new(
                &settings(Redirects::Refuse, Proxies::None, DenyList::none()),
                &Trust::SystemRoots,
            )
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A short reason for an I/O error ("connection refused").
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "timed out".into(),
        _ => e.to_string(),
    }
}
