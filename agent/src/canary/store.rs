//! What the canary runner keeps on disk, per canary:
//!
//! ```text
//! DATA/canary/<env>--<name>/
//!   state.json      the runner's state (ports, workload revisions, last applied routing),
//!                   written atomically (temp file, fsync, rename, fsync of the directory)
//!   applied.jsonl   one line per applied step, appended with fsync, never twice for a step
//! ```
//!
//! `state.json` is what an agent restart resumes from (the proxy comes back with the last
//! applied routing). `applied.jsonl` is the record tests and the chaos checker compare with
//! the committed step sequence; it outlives the state (restore forgets the state, not the
//! log). No secret values are written here.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CanaryError;
use crate::driver::process::layout::{create_dir_mode, read_limited, sync_parent, write_atomic};

/// Largest canary `state.json` read (a few KiB in practice).
const MAX_STATE_BYTES: u64 = 16 << 20;
use crate::plan::CanaryHeaderMatchSpec;

/// The state file's name.
pub const STATE_FILE: &str = "state.json";
/// The applied-steps log's name.
pub const APPLIED_FILE: &str = "applied.jsonl";

/// Ports the agent picked for a canary (kept across restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ports {
    /// The `<svc>-primary` proxy listener.
    pub primary_proxy: u16,
    /// The `<svc>-canary` proxy listener.
    pub canary_proxy: u16,
    /// The primary workload's own port.
    pub primary_workload: u16,
    /// The canary workload's own port.
    pub canary_workload: u16,
    /// The fresh baseline's own port (0 in a state saved before baselines existed: picked
    /// when a baseline first runs).
    #[serde(default)]
    pub baseline_workload: u16,
}

impl Ports {
    /// Five distinct free loopback ports (bound at once on `127.0.0.1:0`, then released).
    pub fn pick() -> std::io::Result<Self> {
        let listeners = (0..5)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self {
            primary_proxy: ports[0],
            canary_proxy: ports[1],
            primary_workload: ports[2],
            canary_workload: ports[3],
            baseline_workload: ports[4],
        })
    }

    /// One free loopback port (for a baseline of a state saved without one).
    pub fn pick_one() -> std::io::Result<u16> {
        std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()
            .map(|a| a.port())
    }
}

/// A workload revision that was deployed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployed {
    /// The revision hash.
    pub revision: String,
    /// Its version.
    pub version: String,
    /// SHA-256 (hex) of the hub's config text (before the port was set).
    pub config_sha256: String,
    /// Its secrets revision.
    pub secrets_revision: u64,
}

/// One workload (primary or canary).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Set before a deployment starts, cleared when the workload is stopped: whether a
    /// process may exist.
    pub started: bool,
    /// The revision deployed (`None`: none, or a deployment did not finish).
    pub running: Option<Deployed>,
}

/// The routing last applied to the proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingState {
    /// Percent of `<svc>` traffic sent to the canary.
    pub canary_weight: u32,
    /// Whether the A/B rules apply.
    pub match_routing: bool,
    /// The A/B rules.
    pub match_rules: Vec<Vec<CanaryHeaderMatchSpec>>,
    /// Percent of `<svc>` traffic sent to the fresh baseline (0: none).
    #[serde(default)]
    pub baseline_weight: u32,
}

/// The runner's state of one canary (`state.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryState {
    /// `<environment>/<name>`.
    pub canary: String,
    /// The target entity.
    pub target: String,
    /// The service name.
    pub service: String,
    /// The `<svc>` port (the original workload's).
    pub port: u16,
    /// Ports the agent picked.
    pub ports: Ports,
    /// The primary workload.
    pub primary: Slot,
    /// The canary workload.
    pub canary_workload: Slot,
    /// The fresh baseline (issue 20).
    #[serde(default)]
    pub baseline: Slot,
    /// Set once the original entity was stopped: from then on the primary serves the service
    /// (behind the proxy) and the target is reported as the primary.
    pub taken_over: bool,
    /// The routing of the last applied step.
    pub routing: RoutingState,
    /// The last step applied (0: none yet).
    pub applied_step: u64,
    /// The phase after that step.
    pub phase: String,
    /// Metric windows of that step, in ms.
    pub metric_windows_ms: Vec<i64>,
    /// The built-in load tester's loads of that step, run again after a restart.
    #[serde(default)]
    pub loads: Vec<crate::plan::LoadSpec>,
}

impl CanaryState {
    /// A fresh state: nothing deployed yet.
    pub fn new(canary: &str, target: &str, service: &str, port: u16, ports: Ports) -> Self {
        Self {
            canary: canary.to_string(),
            target: target.to_string(),
            service: service.to_string(),
            port,
            ports,
            primary: Slot::default(),
            canary_workload: Slot::default(),
            baseline: Slot::default(),
            taken_over: false,
            routing: RoutingState::default(),
            applied_step: 0,
            phase: String::new(),
            metric_windows_ms: Vec::new(),
            loads: Vec::new(),
        }
    }
}

/// One line of `applied.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedLine {
    /// The step.
    pub step: u64,
    /// The phase after it.
    pub phase: String,
    /// Canary weight applied.
    pub canary_weight: u32,
    /// Whether A/B rules applied.
    pub match_routing: bool,
    /// Primary revision (`""`: none).
    pub primary_revision: String,
    /// Canary revision (`""`: scaled to zero).
    pub canary_revision: String,
    /// When it was applied (ms since the epoch).
    pub time_ms: i64,
}

/// One canary's directory.
#[derive(Debug, Clone)]
pub struct CanaryDir {
    root: PathBuf,
}

impl CanaryDir {
    /// The directory at `root` (`DATA/canary/<env>--<name>`).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `state.json`.
    pub fn state(&self) -> PathBuf {
        self.root.join(STATE_FILE)
    }

    /// `applied.jsonl`.
    pub fn applied(&self) -> PathBuf {
        self.root.join(APPLIED_FILE)
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CanaryError + '_ {
        move |source| CanaryError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn ensure(&self) -> Result<(), CanaryError> {
        if self.root.is_dir() {
            return Ok(());
        }
        create_dir_mode(&self.root, 0o700).map_err(Self::io(&self.root))?;
        // The new directory's entry in `DATA/canary/` must survive a crash too.
        sync_parent(&self.root).map_err(Self::io(&self.root))
    }

    /// The saved state (`None`: none saved).
    pub fn load(&self) -> Result<Option<CanaryState>, CanaryError> {
        let path = self.state();
        match read_limited(&path, MAX_STATE_BYTES) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| CanaryError::Corrupt {
                        path,
                        reason: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CanaryError::Io { path, source: e }),
        }
    }

    /// Saves `state` atomically.
    pub fn save(&self, state: &CanaryState) -> Result<(), CanaryError> {
        self.ensure()?;
        let path = self.state();
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| CanaryError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomic(&path, &bytes, 0o600).map_err(Self::io(&path))
    }

    /// Deletes the state (the log stays).
    pub fn forget(&self) -> Result<(), CanaryError> {
        let path = self.state();
        match std::fs::remove_file(&path) {
            Ok(()) => sync_parent(&path).map_err(Self::io(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CanaryError::Io { path, source: e }),
        }
    }

    /// The highest step in `applied.jsonl` (`None`: no line). A torn last line (a crash in
    /// the middle of an append) is ignored.
    pub fn last_logged_step(&self) -> Result<Option<u64>, CanaryError> {
        let path = self.applied();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CanaryError::Io { path, source: e }),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<AppliedLine>(l).ok())
            .map(|l| l.step)
            .max())
    }

    /// Appends `line` (with fsync) unless a step at least as high is logged already; returns
    /// whether it was written.
    pub fn log_applied(&self, line: &AppliedLine) -> Result<bool, CanaryError> {
        if self
            .last_logged_step()?
            .is_some_and(|last| line.step <= last)
        {
            return Ok(false);
        }
        self.ensure()?;
        let path = self.applied();
        let existed = path.exists();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(Self::io(&path))?;
        // After a torn append the file does not end with a newline: start a fresh line.
        let torn = {
            use std::io::{Read, Seek, SeekFrom};
            let len = f.metadata().map_err(Self::io(&path))?.len();
            if len == 0 {
                false
            } else {
                let mut last = [0u8; 1];
                f.seek(SeekFrom::Start(len - 1))
                    .and_then(|_| f.read_exact(&mut last))
                    .map_err(Self::io(&path))?;
                last[0] != b'\n'
            }
        };
        let mut text = if torn {
            "\n".to_string()
        } else {
            String::new()
        };
        let json = serde_json::to_string(line).map_err(|e| CanaryError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        text.push_str(&json);
        text.push('\n');
        f.write_all(text.as_bytes()).map_err(Self::io(&path))?;
        f.sync_data().map_err(Self::io(&path))?;
        if !existed {
            sync_parent(&path).map_err(Self::io(&path))?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: u64, weight: u32) -> AppliedLine {
        AppliedLine {
            step,
            phase: "Progressing".into(),
            canary_weight: weight,
            match_routing: false,
            primary_revision: "p1".into(),
            canary_revision: "c1".into(),
            time_ms: 1_000 + step as i64,
        }
    }

    #[test]
    fn state_round_trips_and_is_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CanaryDir::new(tmp.path().join("canary").join("prod--web"));
        assert_eq!(dir.load().unwrap(), None);
        let mut st = CanaryState::new(
            "prod/web",
            "eid:prod:helmChart:web",
            "web",
            8080,
            Ports::pick().unwrap(),
        );
        st.primary = Slot {
            started: true,
            running: Some(Deployed {
                revision: "r1".into(),
                version: "1.0.0".into(),
                config_sha256: "ab".repeat(32),
                secrets_revision: 2,
            }),
        };
        st.canary_workload.started = true;
        st.taken_over = true;
        st.routing = RoutingState {
            canary_weight: 20,
            match_routing: true,
            match_rules: vec![vec![CanaryHeaderMatchSpec {
                name: "x-canary".into(),
                op: "exact".into(),
                value: "insider".into(),
            }]],
            baseline_weight: 20,
        };
        st.baseline.started = true;
        st.applied_step = 7;
        st.phase = "Progressing".into();
        st.metric_windows_ms = vec![60_000, 30_000];
        dir.save(&st).unwrap();
        assert_eq!(dir.load().unwrap(), Some(st.clone()));
        // Saving again replaces it; no temporary files are left behind.
        st.applied_step = 8;
        dir.save(&st).unwrap();
        assert_eq!(dir.load().unwrap().unwrap().applied_step, 8);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![STATE_FILE.to_string()]);
        dir.forget().unwrap();
        assert_eq!(dir.load().unwrap(), None);
        dir.forget().unwrap();

        std::fs::write(dir.state(), "{not json").unwrap();
        assert!(matches!(dir.load(), Err(CanaryError::Corrupt { .. })));

        // A state saved before fresh baselines existed loads: no baseline, no port yet.
        let mut old = serde_json::to_value(&st).unwrap();
        old.as_object_mut().unwrap().remove("baseline");
        old["ports"]
            .as_object_mut()
            .unwrap()
            .remove("baseline_workload");
        old["routing"]
            .as_object_mut()
            .unwrap()
            .remove("baseline_weight");
        std::fs::write(dir.state(), old.to_string()).unwrap();
        let loaded = dir.load().unwrap().unwrap();
        assert_eq!(loaded.baseline, Slot::default());
        assert_eq!(loaded.ports.baseline_workload, 0);
        assert_eq!(loaded.routing.baseline_weight, 0);
    }

    #[test]
    fn applied_log_never_repeats_or_lowers_a_step() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = CanaryDir::new(tmp.path().join("prod--web"));
        assert_eq!(dir.last_logged_step().unwrap(), None);
        assert!(dir.log_applied(&line(1, 0)).unwrap());
        assert!(dir.log_applied(&line(2, 10)).unwrap());
        // Re-applying step 2 (after a crash) logs nothing; a lower step neither.
        assert!(!dir.log_applied(&line(2, 10)).unwrap());
        assert!(!dir.log_applied(&line(1, 0)).unwrap());
        assert!(dir.log_applied(&line(3, 20)).unwrap());
        let text = std::fs::read_to_string(dir.applied()).unwrap();
        let lines: Vec<AppliedLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![line(1, 0), line(2, 10), line(3, 20)]);
        // The exact field names readers rely on.
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for key in [
            "step",
            "phase",
            "canary_weight",
            "match_routing",
            "primary_revision",
            "canary_revision",
            "time_ms",
        ] {
            assert!(first.get(key).is_some(), "{key} in {first}");
        }

        // A torn append is ignored and the next line starts on a line of its own.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.applied())
            .unwrap();
        f.write_all(b"{\"step\":9,\"pha").unwrap();
        drop(f);
        assert_eq!(dir.last_logged_step().unwrap(), Some(3));
        assert!(dir.log_applied(&line(4, 30)).unwrap());
        let text = std::fs::read_to_string(dir.applied()).unwrap();
        assert!(text.ends_with(&format!(
            "\n{}\n",
            serde_json::to_string(&line(4, 30)).unwrap()
        )));
        assert_eq!(dir.last_logged_step().unwrap(), Some(4));
    }
}
