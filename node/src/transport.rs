//! How a node speaks to the world: its TLS material from flags, checked before anything
//! starts, the listener mode for its gRPC port, and the connector its peer channels use.
//! Plaintext only with `--insecure`, and only on loopback.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use hub_tls::client::{ClientMode, ClientTls, Connector};
use hub_tls::reload::Reloadable;
use hub_tls::server::{ListenerMode, Protocols, ServerTls};
use hub_tls::{Identity, TlsFiles};

use hub_client::channel::CONNECT_TIMEOUT;

/// The TLS flags of `hub-node`.
#[derive(Debug, Clone, Default)]
pub struct TlsFlags {
    /// `--ca-file`.
    pub ca: Option<PathBuf>,
    /// `--cert-file`.
    pub cert: Option<PathBuf>,
    /// `--key-file`.
    pub key: Option<PathBuf>,
    /// `--insecure`.
    pub insecure: bool,
}

/// Why the transport could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Some TLS flags missing.
    #[error("--ca-file, --cert-file and --key-file are required (or --insecure, on loopback only); missing: {0}")]
    Missing(String),
    /// `--insecure` on an address other hosts can reach.
    #[error("--insecure: refused because {what} {addr} is not a loopback address (plaintext would let anyone who reaches it do anything)")]
    NotLoopback {
        /// Which flag.
        what: &'static str,
        /// Its value.
        addr: String,
    },
    /// The TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] hub_tls::TlsError),
}

/// A node's transport.
#[derive(Debug, Clone)]
pub struct Transport {
    /// Plaintext (`--insecure`).
    pub insecure: bool,
    /// How the gRPC listener handshakes.
    pub listener: ListenerMode,
    /// How the HTTP listeners (metrics, dashboard) handshake: the same certificate and CA,
    /// speaking HTTP/2 or HTTP/1.1.
    pub http_listener: ListenerMode,
    /// How this node dials peers.
    pub connector: Connector,
    /// What SIGHUP reloads.
    pub reloadable: Vec<Reloadable>,
}

/// Whether a `host[:port]` names a loopback address (`localhost` counts).
pub fn is_loopback_host(addr: &str) -> bool {
    let host = match addr.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Transport {
    /// The transport the flags ask for, checked: TLS material that loads, names this node of
    /// this cluster and is valid now; or `--insecure` on loopback addresses.
    pub fn from_flags(
        flags: TlsFlags,
        id: u64,
        cluster: &str,
        listen: SocketAddr,
        advertise: Option<&str>,
    ) -> Result<Transport, TransportError> {
        if flags.insecure {
            if !listen.ip().is_loopback() {
                return Err(TransportError::NotLoopback {
                    what: "--listen",
                    addr: listen.to_string(),
                });
            }
            if let Some(a) = advertise.filter(|a| !is_loopback_host(a)) {
                return Err(TransportError::NotLoopback {
                    what: "--advertise",
                    addr: a.to_string(),
                });
            }
            tracing::warn!(
                "--insecure: plaintext gRPC with no authentication; anyone who can reach {listen} may do anything"
            );
            return Ok(Transport {
                insecure: true,
                listener: ListenerMode::Plaintext,
                http_listener: ListenerMode::Plaintext,
                connector: Connector::new(ClientMode::Plaintext, CONNECT_TIMEOUT),
                reloadable: Vec::new(),
            });
        }
        let missing: Vec<&str> = [
            ("--ca-file", flags.ca.is_none()),
            ("--cert-file", flags.cert.is_none()),
            ("--key-file", flags.key.is_none()),
        ]
        .into_iter()
        .filter_map(|(f, m)| m.then_some(f))
        .collect();
        let (Some(ca), Some(cert), Some(key)) = (flags.ca, flags.cert, flags.key) else {
            return Err(TransportError::Missing(missing.join(", ")));
        };
        let files = TlsFiles { ca, cert, key };
        let now = SystemTime::now();
        let server = Arc::new(ServerTls::load(
            files.clone(),
            Identity::Node(id),
            cluster,
            now,
        )?);
        let http = Arc::new(ServerTls::load_for(
            files.clone(),
            Identity::Node(id),
            cluster,
            now,
            Protocols::Http,
        )?);
        let client = Arc::new(ClientTls::load(files, Some(Identity::Node(id)), now)?);
        let m = server.material();
        tracing::info!(
            identity = %m.identity,
            not_after = %hub_tls::material::format_time(m.validity.not_after),
            "TLS 1.3 with client certificates"
        );
        Ok(Transport {
            insecure: false,
            listener: ListenerMode::Tls {
                tls: server.clone(),
                cluster: cluster.to_string(),
            },
            http_listener: ListenerMode::Tls {
                tls: http.clone(),
                cluster: cluster.to_string(),
            },
            connector: Connector::new(ClientMode::Tls(client.clone()), CONNECT_TIMEOUT),
            reloadable: vec![
                Reloadable::Server(server),
                Reloadable::Server(http),
                Reloadable::Client(client),
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for a in [
            "127.0.0.1:7401",
            "localhost:1",
            "[::1]:7401",
            "127.0.0.2",
            "localhost",
        ] {
            assert!(is_loopback_host(a), "{a}");
        }
        for a in ["10.0.0.1:7401", "example.com:1", "0.0.0.0:7401", "[::]:1"] {
            assert!(!is_loopback_host(a), "{a}");
        }
    }
}
