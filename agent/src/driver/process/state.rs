//! `state.json`: what the driver runs for one entity, written atomically at every change so
//! a restarted agent adopts the running process instead of starting it twice. The
//! deployments it names are [`Deployment`]s (module `deployment`, plain data that the
//! layout's paths are built from too).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::deployment::{Deployment, InvalidDeployment};
use super::layout::{read_limited, write_atomic};

/// Why a `state.json` cannot be acted on.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file is not a state's JSON.
    #[error("{}: invalid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
    /// A field is not safe to act on.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        reason: InvalidState,
    },
}

/// What is wrong with a parsed `state.json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidState {
    /// A deployment it names.
    #[error(transparent)]
    Deployment(#[from] InvalidDeployment),
    /// A pid that would signal more than one service (0, 1 or above `i32::MAX`).
    #[error("pid {0} is not a service's pid")]
    Pid(u32),
}

/// Most known-good deployments remembered.
const MAX_GOOD: usize = 4;

/// The content of `state.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The entity id.
    pub entity: String,
    /// The deployment that runs (or should run).
    #[serde(flatten)]
    pub current: Deployment,
    /// Process id (also its process group and session id); `None` when stopped.
    pub pid: Option<u32>,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22):
    /// together with the pid, identifies the process across agent restarts.
    pub start_ticks: Option<u64>,
    /// The program started (absolute path).
    pub command: String,
    /// When it was started (Unix ms).
    pub started_at: u64,
    /// Who started it: a plan id, or `supervisor` for a restart after a crash.
    pub started_by: String,
    /// Why nothing runs, when `pid` is `None`.
    pub down: Option<String>,
    /// The deployment replaced by the last switch: what a failed start or readiness restores.
    pub previous: Option<Deployment>,
    /// Deployments that passed readiness, newest first (at most a few): the previous version
    /// kept on disk for rollbacks is chosen from these.
    #[serde(default)]
    pub good: Vec<Deployment>,
}

/// Largest `state.json` read (a few KiB in practice).
const MAX_STATE_BYTES: u64 = 16 << 20;

impl RunState {
    /// Loads `state.json` from `path`: `Ok(None)` when absent, `Err` when unreadable or
    /// invalid (so that it is never acted on).
    pub fn load(path: &Path) -> Result<Option<Self>, StateError> {
        let bytes = match read_limited(path, MAX_STATE_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let state: RunState =
            serde_json::from_slice(&bytes).map_err(|source| StateError::Json {
                path: path.to_path_buf(),
                source,
            })?;
        state.validate().map_err(|reason| StateError::Invalid {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(Some(state))
    }

    /// Writes it atomically to `path`.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        write_atomic(path, &bytes, 0o600)
    }

    fn validate(&self) -> Result<(), InvalidState> {
        self.current.validate()?;
        for d in self.previous.iter().chain(&self.good) {
            d.validate()?;
        }
        if let Some(pid) = self.pid {
            // kill(0) and kill(-1) would signal far more than one service.
            if pid <= 1 || i32::try_from(pid).is_err() {
                return Err(InvalidState::Pid(pid));
            }
        }
        Ok(())
    }

    /// Records that `current` passed readiness.
    pub fn mark_good(&mut self) {
        let current = self.current.clone();
        self.good.retain(|d| *d != current);
        self.good.insert(0, current);
        self.good.truncate(MAX_GOOD);
    }

    /// The deployment of another version kept on disk for a rollback: the previous
    /// deployment if it has another version, else the newest known-good one of another
    /// version.
    pub fn rollback_target(&self) -> Option<&Deployment> {
        self.previous
            .iter()
            .chain(&self.good)
            .find(|d| d.version != self.current.version)
    }

    /// Deployments whose files must be kept: the current one, the previous one and the
    /// rollback target.
    pub fn kept(&self) -> Vec<&Deployment> {
        let mut kept = vec![&self.current];
        kept.extend(self.previous.iter());
        kept.extend(self.rollback_target());
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(v: &str, c: char) -> Deployment {
        Deployment {
            version: v.into(),
            config_sha256: c.to_string().repeat(64),
            secrets_revision: 1,
        }
    }

    #[test]
    fn rollback_target_and_kept() {
        let mut s = RunState {
            entity: "eid:e:k:n".into(),
            current: dep("1.0.0", 'a'),
            pid: Some(42),
            start_ticks: None,
            command: "/bin/sh".into(),
            started_at: 0,
            started_by: "p".into(),
            down: None,
            previous: None,
            good: vec![],
        };
        s.mark_good();
        assert_eq!(s.rollback_target(), None);
        // Config change on 1.0.0, then an upgrade to 2.0.0.
        s.previous = Some(s.current.clone());
        s.current = dep("1.0.0", 'b');
        s.mark_good();
        assert_eq!(s.rollback_target(), None);
        s.previous = Some(s.current.clone());
        s.current = dep("2.0.0", 'b');
        s.mark_good();
        assert_eq!(s.rollback_target(), Some(&dep("1.0.0", 'b')));
        // A config change on 2.0.0 keeps 1.0.0 as the rollback target.
        s.previous = Some(s.current.clone());
        s.current = dep("2.0.0", 'c');
        assert_eq!(s.rollback_target(), Some(&dep("1.0.0", 'b')));
        assert_eq!(s.kept().len(), 3);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"version\":\"2.0.0\""), "{json}");
        assert!(json.contains("\"pid\":42"), "{json}");
    }

    #[test]
    fn refuses_dangerous_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(
            &path,
            r#"{"entity":"e","version":"../x","config_sha256":"","secrets_revision":0,
               "pid":null,"start_ticks":null,"command":"","started_at":0,"started_by":"",
               "down":null,"previous":null}"#,
        )
        .unwrap();
        assert!(matches!(
            RunState::load(&path),
            Err(StateError::Invalid {
                reason: InvalidState::Deployment(InvalidDeployment::Version(_)),
                ..
            })
        ));
        let good = "a".repeat(64);
        std::fs::write(
            &path,
            format!(
                r#"{{"entity":"e","version":"1","config_sha256":"{good}","secrets_revision":0,
                   "pid":1,"start_ticks":null,"command":"","started_at":0,"started_by":"",
                   "down":null,"previous":null}}"#
            ),
        )
        .unwrap();
        let err = RunState::load(&path).unwrap_err();
        assert!(
            matches!(
                err,
                StateError::Invalid {
                    reason: InvalidState::Pid(1),
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("pid 1"), "{err}");
        assert!(matches!(RunState::load(&dir.path().join("none")), Ok(None)));
    }
}
