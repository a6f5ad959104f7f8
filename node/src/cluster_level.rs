//! The leader raises the cluster's feature level (`hub_engine::feature_level`) once every
//! member runs a release that has it: it asks each member for the level its binary applies
//! (`NodeStatus.feature_level`) and proposes `SetClusterLevel` with the lowest, never above
//! its own. Commands of a higher level are refused until then (`feature_gate`), so a newer
//! leader never proposes an entry an older member cannot apply; an upgrade is done node by
//! node, and the new commands are allowed once the last node runs the new release.
//!
//! Started by [`crate::leader`] only while the state's level is below this binary's; ends
//! once the cluster runs at this binary's level. A member that does not answer holds the
//! level where it is (it may run an older release). The loop asks again after
//! [`PROBE_EVERY`], doubling up to [`PROBE_AT_MOST_EVERY`] while the answers stay the same
//! (a member left on an old release for days costs a probe every 30 s, not every second),
//! and logs each outcome (waiting, or the raise refused) once per change ([`ProbeRounds`]).

use std::time::Duration;

use hub_engine::feature_level::{FeatureLevel, BASELINE_LEVEL, SUPPORTED_LEVEL};
use hub_engine::Command;

use crate::term::{Term, TermEnded};

/// How soon the members are asked again after their answers changed.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The longest wait between two probes, reached by doubling [`PROBE_EVERY`] while the
/// members' answers stay the same.
pub const PROBE_AT_MOST_EVERY: Duration = Duration::from_secs(30);

/// What the probe loop remembers between rounds: the members' last answers (for the
/// back-off) and the last outcome it logged (so each is logged once per change).
#[derive(Debug)]
pub struct ProbeRounds {
    answers: Option<Vec<Option<u32>>>,
    logged: Option<String>,
    delay: Duration,
}

impl Default for ProbeRounds {
    fn default() -> Self {
        ProbeRounds {
            answers: None,
            logged: None,
            delay: PROBE_EVERY,
        }
    }
}

impl ProbeRounds {
    /// Records one round: the members' `answers` and the text of its `outcome`. Returns
    /// whether to log the outcome (it differs from the last one logged) and how long to wait
    /// before the next round: [`PROBE_EVERY`] after a change of answers, else twice the last
    /// wait, at most [`PROBE_AT_MOST_EVERY`].
    pub fn round(&mut self, answers: &[Option<u32>], outcome: &str) -> (bool, Duration) {
        let log = self.logged.as_deref() != Some(outcome);
        if log {
            self.logged = Some(outcome.to_string());
        }
        self.delay = if self.answers.as_deref() == Some(answers) {
            (self.delay * 2).min(PROBE_AT_MOST_EVERY)
        } else {
            self.answers = Some(answers.to_vec());
            PROBE_EVERY
        };
        debug_assert!(PROBE_EVERY <= self.delay && self.delay <= PROBE_AT_MOST_EVERY);
        (log, self.delay)
    }
}

/// The level to raise the cluster to, from the levels its members advertise (`None`: a
/// member did not answer), if it is above `current`. A member of a release before feature
/// levels advertises 0, which is the baseline. Never above this binary's own level.
pub fn level_to_raise(current: FeatureLevel, advertised: &[Option<u32>]) -> Option<FeatureLevel> {
    let lowest = advertised
        .iter()
        .map(|a| a.map(|level| FeatureLevel(level.max(BASELINE_LEVEL.0))))
        .min()?;
    // A member that did not answer holds the level (`None` sorts first).
    let target = lowest?.min(SUPPORTED_LEVEL);
    (target > current).then_some(target)
}

/// Raises the level during one term of leadership; returns once the cluster runs at this
/// binary's level.
pub(crate) async fn run(term: &Term) -> Result<(), TermEnded> {
    let node = &term.node;
    let mut rounds = ProbeRounds::default();
    loop {
        let current = node.state.read().state.cluster_level();
        if current >= SUPPORTED_LEVEL {
            return Ok(());
        }
        let members = node.members();
        let probes = members.iter().map(|(id, addr, _)| async move {
            if *id == node.id {
                return Some(SUPPORTED_LEVEL.0);
            }
            crate::api::probe_member(node, addr, false)
                .await
                .ok()
                .map(|s| s.feature_level)
        });
        let advertised = futures::future::join_all(probes).await;
        let delay = match level_to_raise(current, &advertised) {
            Some(level) => match term.propose(Command::SetClusterLevel { level }).await? {
                Ok(_) => {
                    tracing::info!(%level, "raised the cluster's feature level");
                    rounds.round(&advertised, &format!("raised to {level}")).1
                }
                Err(e) => {
                    let why = format!("raising the level to {level} was refused: {e}");
                    let (log, delay) = rounds.round(&advertised, &why);
                    if log {
                        tracing::warn!(%level, error = %e, retry_in = ?delay, "raising the feature level was refused; logged again when the error changes");
                    }
                    delay
                }
            },
            None => {
                let why = format!("members advertise {advertised:?}; the cluster runs {current}");
                let (log, delay) = rounds.round(&advertised, &why);
                if log {
                    tracing::info!(%why, "feature level: waiting for every member to run level {SUPPORTED_LEVEL}");
                }
                delay
            }
        };
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal that repeats is logged once, and the probe backs off from 1 s to 30 s
    /// while the answers stay the same; a change of answers probes again after 1 s, and a
    /// new outcome is logged once.
    #[test]
    fn a_repeated_outcome_is_logged_once_and_the_probe_backs_off() {
        let mut rounds = ProbeRounds::default();
        let answers = [Some(2), Some(2), None];
        let refused = "raising the level to 2 was refused: not the leader";
        let mut logged = 0;
        let mut delays = Vec::new();
        for _ in 0..100 {
            let (log, delay) = rounds.round(&answers, refused);
            logged += usize::from(log);
            delays.push(delay.as_secs());
        }
        assert_eq!(logged, 1, "one line for a hundred identical refusals");
        assert_eq!(&delays[..7], &[1, 2, 4, 8, 16, 30, 30]);
        assert!(delays.iter().all(|&d| d <= 30), "{delays:?}");
        // A member answers: probed again after a second; the same refusal is not logged again.
        let answered = [Some(2), Some(2), Some(2)];
        assert_eq!(rounds.round(&answered, refused), (false, PROBE_EVERY));
        // A different outcome is logged, once.
        let waiting = "members advertise [Some(2), Some(2), Some(1)]";
        assert!(rounds.round(&answered, waiting).0);
        assert!(!rounds.round(&answered, waiting).0);
    }

    #[test]
    fn the_lowest_answering_level_wins_and_a_silent_member_holds_it() {
        let one = FeatureLevel(1);
        // Every member at this binary's level (1 today): nothing to raise from 1.
        assert_eq!(level_to_raise(one, &[Some(1), Some(1), Some(1)]), None);
        // A member of a release before feature levels counts as the baseline.
        assert_eq!(
            level_to_raise(FeatureLevel(0), &[Some(0), Some(1)]),
            Some(one)
        );
        // A member that did not answer holds the level.
        assert_eq!(level_to_raise(FeatureLevel(0), &[Some(1), None]), None);
        // No member at all: nothing.
        assert_eq!(level_to_raise(FeatureLevel(0), &[]), None);
        // Members newer than this binary: never above its own level.
        assert_eq!(
            level_to_raise(FeatureLevel(0), &[Some(SUPPORTED_LEVEL.0 + 5)]),
            Some(SUPPORTED_LEVEL)
        );
    }
}
