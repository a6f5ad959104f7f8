//! Waves (issue 20): which entities belong to which wave of a release's rollout, which are
//! done, and the `rollout-wave` constraint built on that.
//!
//! Membership and "done" are read from the replicated state at evaluation time; what depends
//! on time (when a wave was done, until when it soaks, halts, promotions) is read from the
//! committed [`Rollout`] record, which apply writes at entry time. So the constraint is a
//! pure function of the state and `now`, and a new leader decides exactly as the old one.
//!
//! Rules (`docs/FLEET.md` has the long form):
//! - An entity belongs to the rollout of version `V` when its product is in the policy's
//!   group, that product has a release `V` in the entity's channel, and it is not marked for
//!   uninstallation. Its wave is the one whose selector selects its environment (the
//!   first, for a policy from before the one-wave check); an entity in no wave comes after
//!   the last wave.
//! - An entity is done with `V` when it reports `V` or newer, healthy, and its canary (if it
//!   has one) is `Succeeded`.
//! - A wave has passed when it was promoted, or its committed soak end is at or before now.
//!   A wave with no entity of the release has passed at once.
//! - A candidate to `V` (install or version change) passes when the rollout is not halted,
//!   every earlier wave has passed, every entity of an earlier product of the group in the
//!   same wave is done with `V`, and fewer than `maxParallel` entities of the wave are
//!   moving to `V`.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::canary::Phase;
use crate::entity::{Entity, Health};
use crate::plan::PlanKind;
use crate::rollout::{Rollout, RolloutHalt, WaveProgress};
use crate::rollout_policy::RolloutPolicy;
use crate::state::State;
use crate::TimestampMs;

use super::{ConstraintKind, ConstraintResult, Reason};

/// One entity's place in a release's rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutEntity {
    /// The entity id.
    pub entity: String,
    /// Its product.
    pub product: String,
    /// Its environment.
    pub environment: String,
    /// What it reports running.
    pub runs: Option<Version>,
    /// Its reported health.
    pub health: Health,
    /// Its canary's phase, if it has a canary.
    pub canary_phase: Option<Phase>,
    /// Done with the release: running it (or newer), healthy, canary succeeded.
    pub done: bool,
    /// Moving to the release now: an active plan to it, or a canary analysing it.
    pub in_flight: bool,
}

/// One wave of a release's rollout, as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveStatus {
    /// The wave's name; `None` for the entities in no wave (after the last wave).
    pub name: Option<String>,
    /// Its entities, in group order then by id.
    pub entities: Vec<RolloutEntity>,
    /// How many are done.
    pub done: usize,
    /// How many are moving to the release.
    pub in_flight: usize,
    /// What is committed about it.
    pub progress: WaveProgress,
    /// Whether it has passed at the time asked.
    pub passed: bool,
}

/// A release's rollout under a policy, as it stands (`hubctl rollout status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStatus {
    /// The policy's product.
    pub policy: String,
    /// The version.
    pub version: Version,
    /// The policy's waves in order, then the entities in no wave.
    pub waves: Vec<WaveStatus>,
    /// Set while halted.
    pub halt: Option<RolloutHalt>,
}

/// The rollout of `version` under the policy governing `product` (any product of the group)
/// at `now`; `None` when no policy governs `product`.
pub fn rollout_status(
    state: &State,
    product: &str,
    version: &Version,
    now: TimestampMs,
) -> Option<RolloutStatus> {
    let policy = state.rollout_policy_of(product)?;
    let rollout = state.rollout(&policy.product, version);
    let members = members(state, policy, version);
    let mut waves = Vec::new();
    for (j, entities) in members.iter().enumerate() {
        let wave = policy.waves.get(j);
        let progress = match (wave, rollout) {
            (Some(w), Some(r)) => r.wave(&w.name),
            _ => WaveProgress::default(),
        };
        let entities: Vec<RolloutEntity> = entities
            .iter()
            .map(|e| rollout_entity(state, e, version))
            .collect();
        let passed = match wave {
            Some(_) => entities.is_empty() || progress.passed_at(now),
            None => entities.iter().all(|e| e.done),
        };
        waves.push(WaveStatus {
            name: wave.map(|w| w.name.clone()),
            done: entities.iter().filter(|e| e.done).count(),
            in_flight: entities.iter().filter(|e| e.in_flight).count(),
            entities,
            progress,
            passed,
        });
    }
    Some(RolloutStatus {
        policy: policy.product.clone(),
        version: version.clone(),
        waves,
        halt: rollout.and_then(|r| r.halt.clone()),
    })
}

fn rollout_entity(state: &State, e: &Entity, version: &Version) -> RolloutEntity {
    RolloutEntity {
        entity: e.id.0.clone(),
        product: e.product_id.clone(),
        environment: e.environment.clone(),
        runs: e.reported.version.clone(),
        health: e.reported.health,
        canary_phase: state.canary_of_entity(&e.id.0).map(|c| c.status.phase),
        done: is_done(state, e, version),
        in_flight: in_flight(state, e, version),
    }
}

/// The entities of the rollout of `version` under `policy`, by wave: one list per wave of
/// the policy, then one for the entities in no wave. Each list in group order, then by id.
pub(crate) fn members<'a>(
    state: &'a State,
    policy: &RolloutPolicy,
    version: &Version,
) -> Vec<Vec<&'a Entity>> {
    let mut out = vec![Vec::new(); policy.waves.len() + 1];
    for product in policy.group() {
        let Some(release) = state.release(product, version) else {
            continue;
        };
        for e in state.entities_of_product_everywhere(product) {
            if e.marked_for_uninstall || !release.in_channel(&e.release_channel) {
                continue;
            }
            let labels = state.environment_labels(&e.environment);
            let wave = policy
                .wave_of(&e.environment, labels)
                .unwrap_or(policy.waves.len());
            out[wave].push(e);
        }
    }
    out
}

/// The wave (index) of `entity` under `policy`; the number of waves for "in no wave".
pub(crate) fn wave_index(state: &State, policy: &RolloutPolicy, entity: &Entity) -> usize {
    policy
        .wave_of(
            &entity.environment,
            state.environment_labels(&entity.environment),
        )
        .unwrap_or(policy.waves.len())
}

/// Whether `entity` is done with `version`: it reports `version` or newer, healthy, and its
/// canary, if it has one, has succeeded.
pub(crate) fn is_done(state: &State, entity: &Entity, version: &Version) -> bool {
    entity
        .reported
        .version
        .as_ref()
        .is_some_and(|v| v >= version)
        && entity.reported.health == Health::Healthy
        && state
            .canary_of_entity(&entity.id.0)
            .is_none_or(|c| c.status.phase == Phase::Succeeded)
}

/// Whether `entity` is moving to `version`: an active install or version change to it, or
/// its canary analysing it.
pub(crate) fn in_flight(state: &State, entity: &Entity, version: &Version) -> bool {
    let plan = state.active_plan_of(&entity.id.0).is_some_and(|p| {
        matches!(p.kind, PlanKind::Install | PlanKind::VersionChange)
            && p.to_version.as_ref() == Some(version)
    });
    let canary = state.canary_of_entity(&entity.id.0).is_some_and(|c| {
        c.target.as_ref().is_some_and(|t| t.version == *version)
            && matches!(
                c.status.phase,
                Phase::Waiting
                    | Phase::Progressing
                    | Phase::WaitingPromotion
                    | Phase::Promoting
                    | Phase::Finalising
            )
    });
    plan || canary
}

/// The `rollout-wave` constraint for `entity` moving to `version` at `now`; `None` when no
/// policy governs its product (the constraint is not listed then).
pub(super) fn rollout_wave_constraint(
    state: &State,
    entity: &Entity,
    version: &Version,
    now: TimestampMs,
) -> Option<ConstraintResult> {
    let c = ConstraintKind::RolloutWave;
    let policy = state.rollout_policy_of(&entity.product_id)?;
    let rollout: Option<&Rollout> = state.rollout(&policy.product, version);
    if let Some(halt) = rollout.and_then(|r| r.halt.as_ref()) {
        return Some(ConstraintResult::fail(
            c,
            Reason::RolloutHalted {
                version: version.clone(),
                cause: halt.cause.to_string(),
                since: halt.at_ms,
            },
            None,
        ));
    }
    let members = members(state, policy, version);
    let k = wave_index(state, policy, entity);
    if let Some(blocked) = earlier_wave_unpassed(state, policy, rollout, &members, k, version, now)
    {
        return Some(blocked);
    }
    let wave_name = policy.waves.get(k).map(|w| w.name.clone());
    let own = &members[k];
    // Grouped products: within the wave, the earlier products of the group go first.
    let position = policy.position(&entity.product_id).unwrap_or(0);
    for earlier in policy.group().take(position) {
        let theirs: Vec<&&Entity> = own.iter().filter(|e| e.product_id == earlier).collect();
        let done = theirs.iter().filter(|e| is_done(state, e, version)).count();
        if done < theirs.len() {
            return Some(ConstraintResult::fail(
                c,
                Reason::GroupWaiting {
                    product: earlier.to_string(),
                    version: version.clone(),
                    wave: wave_name,
                    done,
                    total: theirs.len(),
                },
                None,
            ));
        }
    }
    if let Some(max) = policy.waves.get(k).and_then(|w| w.max_parallel) {
        let moving = own
            .iter()
            .filter(|e| e.id != entity.id && in_flight(state, e, version))
            .count();
        if moving >= max as usize {
            return Some(ConstraintResult::fail(
                c,
                Reason::WaveAtMaxParallel {
                    wave: wave_name.unwrap_or_default(),
                    version: version.clone(),
                    in_flight: moving,
                    max,
                },
                None,
            ));
        }
    }
    Some(ConstraintResult::pass(
        c,
        Reason::RolloutWaveOpen {
            wave: wave_name,
            version: version.clone(),
        },
    ))
}

/// The failing `rollout-wave` result of the first of the `k` waves before an entity's own that
/// has not yet passed (incomplete, or complete and soaking); `None` when all have passed.
fn earlier_wave_unpassed(
    state: &State,
    policy: &RolloutPolicy,
    rollout: Option<&Rollout>,
    members: &[Vec<&Entity>],
    k: usize,
    version: &Version,
    now: TimestampMs,
) -> Option<ConstraintResult> {
    let c = ConstraintKind::RolloutWave;
    for (wave, entities) in policy.waves.iter().zip(members).take(k) {
        let progress = rollout.map(|r| r.wave(&wave.name)).unwrap_or_default();
        if entities.is_empty() || progress.passed_at(now) {
            continue;
        }
        let done = entities
            .iter()
            .filter(|e| is_done(state, e, version))
            .count();
        let total = entities.len();
        let result = match progress.soak_until_ms {
            Some(until) => ConstraintResult::fail(
                c,
                Reason::WaveSoaking {
                    wave: wave.name.clone(),
                    until,
                    done,
                    total,
                },
                Some(until),
            ),
            None => ConstraintResult::fail(
                c,
                Reason::WaveIncomplete {
                    wave: wave.name.clone(),
                    done,
                    total,
                },
                None,
            ),
        };
        return Some(result);
    }
    None
}
