//! [`ClientPool`]: one long-lived client per trust setting (e.g. per registry CA bundle).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use crate::client::{ClientSettings, HttpClient};
use crate::error::ErrorKind;
use crate::tls::Trust;

/// Most distinct trust settings kept; beyond it the least recently built client is dropped
/// (its idle connections close). Registries with their own CA bundle are few.
const MAX_CLIENTS: usize = 64;

/// Clients by trust setting, each built on first use and kept, so calls to a registry reuse
/// its connections.
pub struct ClientPool {
    settings: ClientSettings,
    clients: Mutex<Clients>,
}

struct Clients {
    by_trust: HashMap<Trust, (HttpClient, u64)>,
    built: u64,
}

impl fmt::Debug for ClientPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientPool")
            .field("settings", &self.settings)
            .field("clients", &self.lock().by_trust.len())
            .finish()
    }
}

impl ClientPool {
    /// An empty pool whose clients all get `settings`.
    pub fn new(settings: ClientSettings) -> Self {
        Self {
            settings,
            clients: Mutex::new(Clients {
                by_trust: HashMap::new(),
                built: 0,
            }),
        }
    }

    /// The client for `trust`, built now if there is none yet. A CA bundle that cannot be
    /// used is an error (and nothing is kept).
    pub fn client(&self, trust: &Trust) -> Result<HttpClient, ErrorKind> {
        if let Some((client, _)) = self.lock().by_trust.get(trust) {
            return Ok(client.clone());
        }
        // Built outside the lock: loading a CA bundle parses certificates.
        let client = HttpClient::new(&self.settings, trust)?;
        let mut clients = self.lock();
        clients.built += 1;
        let built = clients.built;
        if clients.by_trust.len() >= MAX_CLIENTS && !clients.by_trust.contains_key(trust) {
            let oldest = clients
                .by_trust
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(t, _)| t.clone());
            if let Some(oldest) = oldest {
                clients.by_trust.remove(&oldest);
            }
        }
        let entry = clients
            .by_trust
            .entry(trust.clone())
            .or_insert((client, built));
        Ok(entry.0.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clients> {
        // Every update is a single insert or remove: the map stays consistent.
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
