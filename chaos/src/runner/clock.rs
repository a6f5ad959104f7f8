//! Clock faults: one node's wall clock jumped forward or back, or drifting, through the fault
//! layer of a chaos build of hub-node (`DATA/chaos-clock.json`, `node/src/fault_layer.rs`).
//! The runner's own clock, the true one, is never touched: the checkers judge the hub's
//! recorded times against it (`check::entry_times`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The control file in a node's data directory.
const FILE: &str = "chaos-clock.json";
/// What the node writes once it took the file up.
const APPLIED: &str = "chaos-clock.applied";
/// How long a node may take to take a file up (it polls every 50 ms).
const TAKE_UP: Duration = Duration::from_secs(5);

/// A skew of one node's wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// Jumped by this many milliseconds (negative: back).
    Jump(i64),
    /// Drifting by this many milliseconds per second.
    Drift(i64),
}

impl Skew {
    /// The skew a schedule's random number picks: a jump forward or back by 5 minutes to
    /// 2 hours, or a drift of 100–500 ms per second either way.
    pub fn pick(pick: u64) -> Skew {
        let sign = if (pick >> 8).is_multiple_of(2) { 1 } else { -1 };
        match pick % 3 {
            0 | 1 => Skew::Jump(sign * (5 + (pick >> 16) as i64 % 116) * 60_000),
            _ => Skew::Drift(sign * (100 + (pick >> 16) as i64 % 401)),
        }
    }

    fn json(self) -> String {
        let (offset, drift) = match self {
            Skew::Jump(ms) => (ms, 0),
            Skew::Drift(ms) => (0, ms),
        };
        serde_json::json!({ "offset_ms": offset, "drift_ms_per_s": drift }).to_string()
    }
}

impl std::fmt::Display for Skew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skew::Jump(ms) => write!(f, "clock jumped {:+} min", ms / 60_000),
            Skew::Drift(ms) => write!(f, "clock drifting {ms:+} ms per second"),
        }
    }
}

/// Skews the clock of the node whose data directory is `dir`, once it took the file up.
pub fn skew(dir: &Path, skew: Skew) -> anyhow::Result<()> {
    let text = skew.json();
    super::net::write_atomic(&dir.join(FILE), &text)?;
    wait_for_ack(dir, text.as_bytes())
}

/// Puts the clock of the node in `dir` back (the file removed, the node's acknowledgement
/// empty).
pub fn restore(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    }
    wait_for_ack(dir, b"")
}

fn wait_for_ack(dir: &Path, want: &[u8]) -> anyhow::Result<()> {
    let ack = dir.join(APPLIED);
    let deadline = Instant::now() + TAKE_UP;
    while std::fs::read(&ack).ok().as_deref() != Some(want) {
        if Instant::now() > deadline {
            bail!(
                "the node in {} did not take up its clock file within {TAKE_UP:?} (is it a chaos build started with --chaos-faults?)",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_cover_jumps_both_ways_and_drifts_within_their_ranges() {
        let mut seen = std::collections::BTreeSet::new();
        let mut rng = crate::runner::faults::Rng::new(3);
        for _ in 0..200 {
            let s = Skew::pick(rng.next_u64());
            match s {
                Skew::Jump(ms) => {
                    assert!((5 * 60_000..=120 * 60_000).contains(&ms.abs()), "{s}");
                    seen.insert(if ms > 0 { "forward" } else { "back" });
                }
                Skew::Drift(ms) => {
                    assert!((100..=500).contains(&ms.abs()), "{s}");
                    seen.insert("drift");
                }
            }
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(
            Skew::Jump(-3_600_000).json(),
            r#"{"drift_ms_per_s":0,"offset_ms":-3600000}"#
        );
    }
}
