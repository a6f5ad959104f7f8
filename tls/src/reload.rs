//! Rotation without a restart: on SIGHUP every registered TLS configuration re-reads its
//! certificate, key and CA files. A file that fails its checks (expired, wrong key, another
//! CA) is refused with the reason logged, and the configuration in use stays. Open
//! connections keep the session they have; new handshakes use the new files.

use std::sync::Arc;
use std::time::SystemTime;

use tracing::{error, info};

use crate::client::ClientTls;
use crate::material::{format_time, Material};
use crate::server::ServerTls;
use crate::TlsError;

/// A configuration that can re-read its files.
#[derive(Debug, Clone)]
pub enum Reloadable {
    /// A listener's.
    Server(Arc<ServerTls>),
    /// A client's.
    Client(Arc<ClientTls>),
}

impl Reloadable {
    /// Re-reads the files at `now`.
    pub fn reload(&self, now: SystemTime) -> Result<Material, TlsError> {
        match self {
            Reloadable::Server(s) => s.reload(now),
            Reloadable::Client(c) => c.reload(now),
        }
    }
}

/// Reloads every one of `targets` now, logging each outcome; true if all succeeded.
pub fn reload_all(targets: &[Reloadable]) -> bool {
    let mut ok = true;
    for t in targets {
        match t.reload(SystemTime::now()) {
            Ok(m) => info!(
                identity = %m.identity,
                not_after = %format_time(m.validity.not_after),
                "TLS certificate reloaded"
            ),
            Err(e) => {
                ok = false;
                error!(error = %e, "TLS reload refused; the current certificate stays in use");
            }
        }
    }
    ok
}

/// Spawns a task that reloads `targets` on every SIGHUP.
pub fn reload_on_sighup(targets: Vec<Reloadable>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            reload_all(&targets);
        }
    }))
}
