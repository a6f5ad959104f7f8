//! Feature levels (issue 56 item 4): which commands a cluster applies, so a cluster whose
//! nodes run different releases never commits an entry one of them cannot apply.
//!
//! Every [`Command`] variant has the level at which it was introduced ([`Command::level`],
//! one exhaustive `match` in `command.rs`; a wrapper such as [`Command::As`] takes the higher
//! of its own level and its command's). A binary applies commands up to [`SUPPORTED_LEVEL`].
//! The cluster's level is replicated: a [`ClusterLevel`] record, raised only by
//! [`Command::SetClusterLevel`] and read with `State::cluster_level` ([`BASELINE_LEVEL`] in a
//! state that never set one: every log and snapshot written before levels existed). Apply
//! refuses a command whose level is above the cluster's (`feature_gate::check_level`, the
//! same check a node makes before proposing), so every node refuses it alike and nothing
//! changes: "the cluster runs feature level 1; set_cluster_level needs 2: upgrade every node
//! first".
//!
//! A node proposes `SetClusterLevel { level }` only when every member advertises at least
//! `level` as its supported level. Apply refuses a level above the applying binary's
//! [`SUPPORTED_LEVEL`]: a binary that cannot apply the commands of a level never runs at it.
//! (So a node whose binary is older than a level its cluster reached cannot follow the log:
//! it must not be a member, and it should stop rather than apply on.)
//!
//! # Adding a command after a release
//!
//! Level 1 is the first tagged release (v0.3.0): every command that existed then is level 1.
//! Level 2 ([`LEVEL_2`]) adds `RevokeCertificates` and `ApplyAlertProvider` /
//! `DeleteAlertProvider` (with the check of a canary's `alerts[].providerRef` they make
//! possible), and records a verified caller's actor
//! once, in the `Command::As` wrapper (`Command::as_verified`; issue 54).
//! A command added after a release is given `SUPPORTED_LEVEL + 1` in [`Command::level`], and
//! `SUPPORTED_LEVEL` is bumped to it, once per release (every command new in a release shares
//! its level). Until every node runs the new release and the leader has raised the cluster's
//! level, the new command is refused at submit and at apply; an older node never sees it.
//!
//! # Changing how an existing command applies
//!
//! A change to what an existing command does on apply is a change of the log's meaning: an
//! entry replayed by a newer binary would give another state than the one the cluster
//! committed, and a mixed cluster would diverge. Such a change is keyed on the cluster's level
//! in the state when the entry applies (`State::cluster_level()`, i.e. the level at which the
//! entry was proposed), never on the binary (`SUPPORTED_LEVEL`, a version constant, a flag):
//! give the new behaviour the next level as above and apply it only when
//! `state.cluster_level()` is at least that level. Entries before the `SetClusterLevel` entry
//! then apply the old way on every binary, replay included. (A new command that replaces the
//! old one, as `PutSecret` replaced `SetSecret`, is the other way; it too needs a level.)
//!
//! [`Command`]: crate::Command
//! [`Command::level`]: crate::Command::level
//! [`Command::As`]: crate::Command::As
//! [`Command::SetClusterLevel`]: crate::Command::SetClusterLevel

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// A feature level: a release's set of commands and apply rules, counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FeatureLevel(pub u32);

impl fmt::Display for FeatureLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The level of a cluster that never set one, and of every command of the first tagged
/// release.
pub const BASELINE_LEVEL: FeatureLevel = FeatureLevel(1);

/// The level of the release after v0.3.0: `RevokeCertificates` (a CRL in one entry), and
/// the actor of a verified write recorded once, in its `Command::As` wrapper.
pub const LEVEL_2: FeatureLevel = FeatureLevel(2);

/// The highest level this binary applies (and advertises).
pub const SUPPORTED_LEVEL: FeatureLevel = LEVEL_2;

/// The name of the one [`ClusterLevel`] record.
pub const CLUSTER_LEVEL_KEY: &str = "cluster";

/// The cluster's feature level, replicated: one record, written only when
/// `SetClusterLevel` raises the level (so a stored level is always above
/// [`BASELINE_LEVEL`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterLevel {
    /// The level.
    pub level: FeatureLevel,
    /// The time of the entry that raised it to this level.
    pub set_at_ms: TimestampMs,
    /// The log index of that entry.
    pub set_index: u64,
}

/// The level this binary applies: [`SUPPORTED_LEVEL`], or in a unit test the one of a
/// simulated newer binary ([`simulated`]).
pub(crate) fn supported_level() -> FeatureLevel {
    #[cfg(test)]
    if let Some(level) = simulated::supported() {
        return level;
    }
    SUPPORTED_LEVEL
}

/// Whether a node whose binary advertises `advertised` (0 from a release before levels) may
/// join a cluster at `cluster`: a binary below the cluster's level could not apply the log it
/// would be sent, and would stop at the first entry it does not know.
pub fn check_joining(
    cluster: FeatureLevel,
    advertised: u32,
    version: &str,
) -> Result<(), JoinRefused> {
    let advertised = FeatureLevel(advertised.max(BASELINE_LEVEL.0));
    if advertised < cluster {
        return Err(JoinRefused {
            version: version.to_string(),
            advertised,
            cluster,
        });
    }
    Ok(())
}

/// Why a node may not join ([`check_joining`]): its binary is below the cluster's level. The
/// message follows the node's name (`node 4 at host:port runs release …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "runs release {version:?} (feature level {advertised}); the cluster runs feature level \
     {cluster}: upgrade its hub-node first"
)]
pub struct JoinRefused {
    /// The node's release.
    pub version: String,
    /// The level its binary applies (at least the baseline).
    pub advertised: FeatureLevel,
    /// The cluster's level.
    pub cluster: FeatureLevel,
}

/// A newer binary, simulated in one test thread, so the refusal of a command above this
/// binary's level, and the raise of the level beyond it, can be exercised:
/// [`simulated::next_release`] gives named variants a higher level and
/// this binary a higher supported level, as the next release would, until the guard drops.
/// Only [`Command::level`](crate::Command::level) and [`supported_level`] read it; the gate
/// and apply run unchanged.
#[cfg(test)]
pub(crate) mod simulated {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::FeatureLevel;

    /// A simulated release: its supported level and the levels of the variants it adds.
    struct Release {
        supported: FeatureLevel,
        levels: BTreeMap<&'static str, FeatureLevel>,
    }

    thread_local! {
        static RELEASE: RefCell<Option<Release>> = const { RefCell::new(None) };
    }

    /// Ends the simulation when dropped.
    pub(crate) struct NextRelease(());

    impl Drop for NextRelease {
        fn drop(&mut self) {
            RELEASE.with(|r| r.borrow_mut().take());
        }
    }

    /// Simulates, on this thread, a binary supporting `supported` in which the variants named
    /// in `levels` (`"CreateEnvironment"`, as `Command::variant_name` spells them) have the
    /// given levels.
    pub(crate) fn next_release(supported: u32, levels: &[(&'static str, u32)]) -> NextRelease {
        let release = Release {
            supported: FeatureLevel(supported),
            levels: levels
                .iter()
                .map(|&(name, level)| (name, FeatureLevel(level)))
                .collect(),
        };
        RELEASE.with(|r| *r.borrow_mut() = Some(release));
        NextRelease(())
    }

    /// The simulated supported level, if a release is simulated.
    pub(crate) fn supported() -> Option<FeatureLevel> {
        RELEASE.with(|r| r.borrow().as_ref().map(|r| r.supported))
    }

    /// The simulated level of variant `name`, if a release is simulated and gives it one.
    pub(crate) fn level_of(name: &str) -> Option<FeatureLevel> {
        RELEASE.with(|r| r.borrow().as_ref()?.levels.get(name).copied())
    }
}

#[cfg(test)]
mod joining_tests {
    use super::*;

    #[test]
    fn a_node_below_the_clusters_level_may_not_join() {
        assert_eq!(check_joining(FeatureLevel(1), 0, "0.2.0"), Ok(()));
        assert_eq!(check_joining(FeatureLevel(2), 2, "0.4.0"), Ok(()));
        assert_eq!(check_joining(FeatureLevel(1), 2, "0.4.0"), Ok(()));
        let refused = check_joining(FeatureLevel(2), 1, "0.3.0").unwrap_err();
        assert_eq!(
            refused,
            JoinRefused {
                version: "0.3.0".into(),
                advertised: FeatureLevel(1),
                cluster: FeatureLevel(2),
            }
        );
        assert_eq!(
            refused.to_string(),
            "runs release \"0.3.0\" (feature level 1); the cluster runs feature level 2: \
             upgrade its hub-node first"
        );
        assert!(check_joining(FeatureLevel(2), 0, "").is_err());
    }
}
