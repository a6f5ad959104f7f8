//! Retention: after a successful readiness, the deployment is recorded as good and what no
//! kept deployment needs is deleted. Kept: the current deployment, the previous one (what a
//! failure restores) and the rollback target (the newest other version that ran), i.e. at most
//! the current and the previous unpacked versions, their configs, secrets and downloads.
//! Leftover temporary files go too.

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::deployment::Deployment;
use super::layout::{self, list_names, remove_path, EntityDir};
use super::runtime::Entity;

/// After a successful readiness: records the deployment as good and deletes what no kept
/// deployment needs (versions, configs, secrets, downloads, leftovers). Returns a note for
/// the output.
pub fn prune(entity: &Entity) -> String {
    let kept: Vec<Deployment> = {
        let mut rt = entity.lock();
        let Some(state) = &mut rt.state else {
            return String::new();
        };
        state.mark_good();
        if let Err(e) = state.save(&entity.dir.state()) {
            warn!(entity = %entity.id, error = %e, "cannot write state.json");
        }
        state.kept().into_iter().cloned().collect()
    };
    let dir = &entity.dir;
    let versions: BTreeSet<String> = kept.iter().map(|d| d.version.clone()).collect();
    let configs: BTreeSet<String> = kept.iter().map(EntityDir::config_name).collect();
    let secrets: BTreeSet<String> = kept.iter().map(EntityDir::secrets_name).collect();
    let mut downloads = BTreeSet::new();
    for v in &versions {
        let marker = dir.version(v).join(layout::UNPACKED_MARKER);
        let shas: Vec<String> = std::fs::read(&marker)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        downloads.extend(shas.into_iter().map(|s| format!("{s}.tar.gz")));
    }
    let mut removed = Vec::new();
    for (parent, keep) in [
        (dir.versions(), &versions),
        (dir.configs(), &configs),
        (dir.secrets_root(), &secrets),
        (dir.downloads(), &downloads),
    ] {
        for name in list_names(&parent).unwrap_or_default() {
            if keep.contains(&name) {
                continue;
            }
            match remove_path(&parent.join(&name)) {
                Ok(()) => {
                    if parent == dir.versions() && !name.starts_with('.') {
                        removed.push(name);
                    }
                }
                Err(e) => warn!(entity = %entity.id, path = %parent.join(&name).display(),
                                error = %e, "cannot prune"),
            }
        }
    }
    if removed.is_empty() {
        String::new()
    } else {
        info!(entity = %entity.id, versions = ?removed, "pruned old versions");
        format!("; pruned versions {}", removed.join(", "))
    }
}
