//! Evaluation: for one entity at time `t`, the candidate plan (SPEC P4), every constraint's
//! result (SPEC C1–C10) and the decision (SPEC P3, P5). A pure function of the replicated
//! state, the time and the artifact checks the leader observed.

use std::fmt;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::artifact::{resolve, ArtifactLocation, Availability, Resolution};
use crate::canary::{names_target, CanaryRevision};
use crate::entity::{Entity, Health};
use crate::environment::Environment;
use crate::never_healthy::RetryChange;
use crate::plan::{Plan, PlanKind, PlanStatus};
use crate::product::Release;
use crate::state::State;
use crate::suppression::Scope;
use crate::TimestampMs;

mod reason;
mod waves;

pub(crate) use waves::{is_done, members, wave_index};
pub use waves::{rollout_status, RolloutEntity, RolloutStatus, WaveStatus};

pub use reason::{
    ArtifactNote, DependencyProblem, DependentNeed, OverrideLevel, Reason, SuppressionHold,
    UnorderedProvider, WindowSource,
};

/// A plan blocked this long is re-checked even without another trigger (SPEC P11).
pub const BLOCKED_RECHECK_MS: TimestampMs = 4 * 60 * 60 * 1000;

/// At most this many newer releases are tried, newest first, when the newest is blocked.
pub const MAX_VERSIONS_TRIED: usize = 16;

/// How the leader's artifact observations are looked up; `None` means not checked yet.
pub type ArtifactLookup<'a> = &'a dyn Fn(&ArtifactLocation) -> Option<Availability>;

/// The constraints a plan must meet before it is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConstraintKind {
    /// No suppression window in force (SPEC C8, P10).
    Suppression,
    /// Inside the effective maintenance window or an override (SPEC C3–C6).
    MaintenanceWindow,
    /// Not reported in error (SPEC C10).
    Health,
    /// The target release's dependencies are satisfied (SPEC C7).
    ProductDependencies,
    /// Every entity depending on this product accepts the target (SPEC C7).
    Dependents,
    /// The target release's artifacts exist (SPEC C9).
    Artifacts,
    /// Every secret its module requires is set (SPEC M4 `secretRequirements`).
    Secrets,
    /// The release's rollout has reached the entity's wave (issue 20; listed only for
    /// products under a rollout policy).
    RolloutWave,
}

impl ConstraintKind {
    /// Kebab-case name, as shown in Activity and `entity explain`.
    pub fn label(self) -> &'static str {
        match self {
            ConstraintKind::Suppression => "suppression",
            ConstraintKind::MaintenanceWindow => "maintenance-window",
            ConstraintKind::Health => "health",
            ConstraintKind::ProductDependencies => "product-dependencies",
            ConstraintKind::Dependents => "dependents",
            ConstraintKind::Artifacts => "artifacts",
            ConstraintKind::Secrets => "secrets",
            ConstraintKind::RolloutWave => "rollout-wave",
        }
    }
}

impl fmt::Display for ConstraintKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One constraint's verdict on a candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConstraintResult {
    /// Which constraint.
    pub constraint: ConstraintKind,
    /// Whether it passed.
    pub passed: bool,
    /// Why (passed or not).
    pub reason: Reason,
    /// When a failed constraint may clear by itself (a window opening, a suppression ending).
    pub may_clear_at_ms: Option<TimestampMs>,
}

impl ConstraintResult {
    fn pass(constraint: ConstraintKind, reason: Reason) -> Self {
        Self {
            constraint,
            passed: true,
            reason,
            may_clear_at_ms: None,
        }
    }

    fn fail(constraint: ConstraintKind, reason: Reason, clear: Option<TimestampMs>) -> Self {
        Self {
            constraint,
            passed: false,
            reason,
            may_clear_at_ms: clear,
        }
    }
}

/// The plan the entity would get now if every constraint passed (SPEC P3 question 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// What it does.
    pub kind: PlanKind,
    /// Reported version.
    pub from_version: Option<Version>,
    /// Target version (`None` for uninstall).
    pub to_version: Option<Version>,
    /// Config overrides for the target.
    pub to_config: Option<String>,
    /// Secrets revision to apply.
    pub secrets_revision: u64,
    /// Why this candidate.
    pub reason: String,
}

impl Candidate {
    /// `version-change 1.0.0 -> 1.1.0`.
    pub fn describe(&self) -> String {
        let v = |v: &Option<Version>| v.as_ref().map_or("-".to_string(), |v| v.to_string());
        format!(
            "{} {} -> {}",
            self.kind.label(),
            v(&self.from_version),
            v(&self.to_version)
        )
    }
}

/// The decision for an entity (SPEC P3, P5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A plan is already issued or running (SPEC P3 question 3).
    PlanActive {
        /// Its id.
        plan_id: String,
        /// Issued or running.
        status: PlanStatus,
    },
    /// Nothing to do: the entity is where it should be.
    AtTarget {
        /// E.g. `1.2.0, config and secrets applied`.
        detail: String,
    },
    /// There is a wish but no plan that could execute it.
    NothingExecutable {
        /// Why.
        reason: String,
    },
    /// A candidate exists but constraints block it (SPEC C1).
    Blocked {
        /// The earliest time every blocking constraint may clear by itself, if known.
        may_clear_at_ms: Option<TimestampMs>,
    },
    /// Every constraint passes: issue the candidate.
    Issue,
    /// The entity is under a canary (SPEC K3): instead of a plan, the candidate (or, at
    /// target, what runs) becomes the canary's new target revision, which the leader's ticks
    /// analyse.
    CanaryTarget {
        /// The canary's id.
        canary: String,
        /// The new target.
        revision: crate::canary::CanaryRevision,
    },
}

/// The full answer for one entity at one time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The entity id.
    pub entity: String,
    /// The time evaluated at.
    pub time_ms: TimestampMs,
    /// The candidate, if any.
    pub candidate: Option<Candidate>,
    /// Every constraint checked for the candidate.
    pub constraints: Vec<ConstraintResult>,
    /// The decision.
    pub outcome: Outcome,
    /// Newer releases passed over, with why.
    pub skipped: Vec<String>,
    /// Artifact locations this evaluation looked up (the leader checks them).
    pub artifact_locations: Vec<ArtifactLocation>,
    /// Products whose entities' changes may unblock this entity (dependency waits).
    pub waits_on_products: Vec<String>,
}

impl Evaluation {
    /// The failed constraints.
    pub fn blocking(&self) -> impl Iterator<Item = &ConstraintResult> {
        self.constraints.iter().filter(|c| !c.passed)
    }

    /// A stable text that changes exactly when the decision changes; an unchanged decision is
    /// not recorded in Activity twice.
    pub fn fingerprint(&self) -> String {
        let mut out = match &self.outcome {
            Outcome::PlanActive { plan_id, .. } => format!("active:{plan_id}"),
            Outcome::AtTarget { detail } => format!("at-target:{detail}"),
            Outcome::NothingExecutable { reason } => format!("nothing:{reason}"),
            Outcome::Blocked { .. } => "blocked".to_string(),
            Outcome::Issue => "issue".to_string(),
            Outcome::CanaryTarget { revision, .. } => format!("canary:{}", revision.revision),
        };
        if let Some(c) = &self.candidate {
            out.push('|');
            out.push_str(&c.describe());
        }
        for c in self.blocking() {
            out.push('|');
            out.push_str(c.constraint.label());
            out.push(':');
            out.push_str(&c.reason.to_string());
        }
        out
    }

    /// One line for Activity (SPEC P5, C1).
    pub fn summary(&self) -> String {
        match &self.outcome {
            Outcome::PlanActive { plan_id, status } => format!("plan {plan_id} is {status}"),
            Outcome::AtTarget { detail } => format!("already at target: {detail}"),
            Outcome::NothingExecutable { reason } => format!("nothing executable: {reason}"),
            Outcome::Issue => match &self.candidate {
                Some(c) => format!("issuing {}: {}", c.describe(), c.reason),
                None => "issuing".to_string(),
            },
            Outcome::CanaryTarget { canary, revision } => format!(
                "canary {canary} targets revision {} ({} with its config)",
                revision.revision, revision.version
            ),
            Outcome::Blocked { may_clear_at_ms } => {
                let what = self
                    .candidate
                    .as_ref()
                    .map_or(String::new(), |c| c.describe());
                let reasons: Vec<String> = self
                    .blocking()
                    .map(|c| format!("{} ({})", c.constraint, c.reason))
                    .collect();
                let clear = may_clear_at_ms
                    .map(|t| format!("; may clear at {}", format_time(t)))
                    .unwrap_or_default();
                format!("{what} blocked by {}{clear}", reasons.join(", "))
            }
        }
    }

    /// Whether the outcome is [`Outcome::Blocked`].
    pub fn is_blocked(&self) -> bool {
        matches!(self.outcome, Outcome::Blocked { .. })
    }
}

/// RFC 3339 in UTC, for reasons and tables.
pub fn format_time(t: TimestampMs) -> String {
    chrono::DateTime::from_timestamp_millis(t)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{t}ms"))
}

/// Evaluates entity `entity_id` at `now`. `None` if the entity does not exist.
pub fn evaluate(
    state: &State,
    entity_id: &str,
    now: TimestampMs,
    artifacts: ArtifactLookup<'_>,
) -> Option<Evaluation> {
    let entity = state.entity(entity_id)?;
    // Every entity's environment exists (checked by State::check_invariants).
    let env = state.environment(&entity.environment)?;
    let mut eval = Evaluation {
        entity: entity_id.to_string(),
        time_ms: now,
        candidate: None,
        constraints: Vec::new(),
        outcome: Outcome::Issue,
        skipped: Vec::new(),
        artifact_locations: Vec::new(),
        waits_on_products: Vec::new(),
    };
    if let Some(plan) = state.active_plan_of(entity_id) {
        eval.outcome = Outcome::PlanActive {
            plan_id: plan.id.clone(),
            status: plan.status,
        };
        eval.candidate = Some(candidate_of_plan(plan));
        return Some(eval);
    }
    let ctx = Ctx {
        state,
        env,
        entity,
        now,
        artifacts,
    };
    match choose(&ctx, &mut eval) {
        Choice::Candidate(candidate, version_checks) => {
            let mut constraints = general_constraints(&ctx, &candidate);
            constraints.extend(version_checks);
            let blocked = constraints.iter().any(|c| !c.passed);
            eval.outcome = if blocked {
                let clear = constraints
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| c.may_clear_at_ms)
                    .try_fold(i64::MIN, |acc, t| t.map(|t| acc.max(t)));
                Outcome::Blocked {
                    may_clear_at_ms: clear,
                }
            } else {
                Outcome::Issue
            };
            eval.constraints = constraints;
            eval.candidate = Some(candidate);
        }
        Choice::AtTarget(detail) => eval.outcome = Outcome::AtTarget { detail },
        Choice::Nothing(reason) => eval.outcome = Outcome::NothingExecutable { reason },
    }
    divert_to_canary(&ctx, &mut eval);
    Some(eval)
}

/// SPEC K3: an installed entity under a canary gets no version, config or secrets plan. A
/// candidate that passed every constraint becomes the canary's target revision instead (at
/// target, what runs is the target); the outcome says so only when the target changes.
/// Uninstalls, rollbacks of failed plans and break-glass commands are issued as usual.
///
/// Until the canary is initialised (its primary set up and ready once), its target is what
/// the entity runs, whatever the candidate: initialisation copies the target to the primary
/// without analysis, so a release published meanwhile waits and is analysed as the canary
/// workload once the canary is initialised (issue 52; the tick that initialises it
/// re-evaluates the entity).
fn divert_to_canary(ctx: &Ctx<'_>, eval: &mut Evaluation) {
    let entity = ctx.entity;
    let Some(canary) = ctx.state.canary_of_entity(&entity.id.0) else {
        return;
    };
    let Some(current) = entity.reported.version.as_ref() else {
        return;
    };
    let diverted = eval.candidate.as_ref().filter(|c| {
        matches!(
            c.kind,
            PlanKind::VersionChange
                | PlanKind::ConfigChange
                | PlanKind::SecretsChange
                | PlanKind::RecallRollOff
        )
    });
    let initialised = canary.status.last_promoted_spec.is_some();
    let (version, config) = match (&eval.outcome, diverted) {
        (Outcome::Issue | Outcome::Blocked { .. }, Some(_)) | (Outcome::AtTarget { .. }, _)
            if !initialised =>
        {
            (current, entity.config_for(current).to_string())
        }
        (Outcome::Issue, Some(c)) => {
            let Some(version) = c.to_version.as_ref() else {
                return;
            };
            (version, c.to_config.clone().unwrap_or_default())
        }
        (Outcome::AtTarget { .. }, _) => (current, entity.config_for(current).to_string()),
        _ => return,
    };
    let key = ctx.state.revision_key();
    // Unchanged, in the stored revision's own hash version: a canary analysed before the
    // cluster had a revision key is not analysed again for the same target. Before
    // initialisation any revision of the version that runs stays: the hub keeps no older
    // config text, so a config change waits for the analysis too.
    if let Some(t) = canary.target.as_ref().filter(|t| {
        t.version == *version
            && (!initialised || names_target(&t.revision, key, entity, version, &config))
    }) {
        if matches!(eval.outcome, Outcome::Issue) {
            let detail = match diverted {
                Some(c) if !initialised => format!(
                    "canary {} initialises its primary at revision {} ({}); the {} to {} is \
                     analysed once it is initialised",
                    canary.id,
                    t.revision,
                    t.version,
                    c.kind.label(),
                    c.to_version
                        .as_ref()
                        .map_or_else(String::new, ToString::to_string)
                ),
                _ => format!(
                    "canary {} analyses revision {} ({})",
                    canary.id, t.revision, t.version
                ),
            };
            eval.outcome = Outcome::AtTarget { detail };
        }
        return;
    }
    let Some(key) = key else {
        // The leader sets the key right after it is elected; setting it re-evaluates this.
        eval.outcome = Outcome::NothingExecutable {
            reason: format!(
                "canary {} waits for the cluster's revision key (the leader sets it)",
                canary.id
            ),
        };
        return;
    };
    let artifacts = ctx
        .state
        .release(&entity.product_id, version)
        .map(|r| r.artifacts.clone())
        .unwrap_or_default();
    let target = CanaryRevision::of(entity, version, &config, artifacts, key);
    eval.outcome = Outcome::CanaryTarget {
        canary: canary.id.clone(),
        revision: target,
    };
}

struct Ctx<'a> {
    state: &'a State,
    env: &'a Environment,
    entity: &'a Entity,
    now: TimestampMs,
    artifacts: ArtifactLookup<'a>,
}

// Short-lived (one per evaluation): boxing the candidate would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Choice {
    Candidate(Candidate, Vec<ConstraintResult>),
    AtTarget(String),
    Nothing(String),
}

fn candidate_of_plan(plan: &Plan) -> Candidate {
    Candidate {
        kind: plan.kind.clone(),
        from_version: plan.from_version.clone(),
        to_version: plan.to_version.clone(),
        to_config: plan.to_config.clone(),
        secrets_revision: plan.secrets_revision,
        reason: plan.reason.clone(),
    }
}

/// SPEC P4: recall roll-offs first, then rollback after a failure, then the newest passing
/// release of the channel with its config, then config, then secrets.
// Long: the candidate rules in the order SPEC P4 ranks them (uninstall, recall roll-off,
// rollback, release, config, secrets); the first that applies wins, so they read best in one
// place.
fn choose(ctx: &Ctx<'_>, eval: &mut Evaluation) -> Choice {
    let entity = ctx.entity;
    let state = ctx.state;
    let current = entity.reported.version.clone();
    let make = |kind: PlanKind, to: Option<Version>, reason: String| Candidate {
        to_config: to.as_ref().map(|v| entity.config_for(v).to_string()),
        kind,
        from_version: current.clone(),
        to_version: to,
        secrets_revision: entity.secrets_revision,
        reason,
    };

    // With a minimum version, an entity below it is first upgraded like any other.
    let uninstall_now = entity.marked_for_uninstall
        && match (&entity.uninstall_min_version, &current) {
            (Some(min), Some(v)) => v >= min,
            _ => true,
        };
    if uninstall_now {
        return match &current {
            None => Choice::AtTarget("not installed (marked for uninstallation)".into()),
            Some(_) => {
                let checks = vec![uninstall_dependents(ctx)];
                Choice::Candidate(
                    make(
                        PlanKind::Uninstall,
                        None,
                        "marked for uninstallation".into(),
                    ),
                    checks,
                )
            }
        };
    }

    let channel = &entity.release_channel;
    if let Some(cur) = &current {
        if let Some(recall) = state.recall_covering(&entity.product_id, cur) {
            // A roll-off leaves a recalled release: waves do not hold it back.
            let pick = pick_release(ctx, eval, false, |_| true);
            return match pick {
                Some((release, checks)) => Choice::Candidate(
                    make(
                        PlanKind::RecallRollOff,
                        Some(release.version.clone()),
                        with_skipped(
                            format!(
                                "{cur} is recalled ({}: {}); newest non-recalled {channel} release is {}",
                                recall.id, recall.reason, release.version
                            ),
                            eval,
                        ),
                    ),
                    checks,
                ),
                None => Choice::Nothing(format!(
                    "{cur} is recalled ({}) but channel {channel} has no release to roll off to",
                    recall.id
                )),
            };
        }
    }

    // Never roll back onto a recalled release (a failed roll-off would otherwise go straight
    // back to what it rolled off): such an entity is left to the ordinary logic below.
    let rollback = state.rollback_needed(entity).filter(|failed| {
        failed
            .from_version
            .as_ref()
            .is_none_or(|v| state.recall_covering(&entity.product_id, v).is_none())
    });
    if let Some(failed) = rollback {
        let to = failed.from_version.clone();
        let target = to.as_ref().map_or("-".to_string(), |v| v.to_string());
        // The agent may have restored the old version itself before it reported the
        // failure: the rollback then confirms what runs, and the reason says so.
        let restored =
            current.is_some() && current == to && entity.reported.health == Health::Healthy;
        let reason = if restored {
            format!(
                "plan {} failed; back to {target} (the agent reports {target} running and healthy again: the rollback confirms it)",
                failed.id
            )
        } else {
            format!("plan {} failed; back to {target}", failed.id)
        };
        return Choice::Candidate(
            make(
                PlanKind::Rollback {
                    failed_plan: failed.id.clone(),
                },
                to,
                reason,
            ),
            Vec::new(),
        );
    }

    let newest_any = state
        .channel_releases_desc(&entity.product_id, channel)
        .next()
        .map(|r| r.version.clone());
    match &current {
        None => {
            if newest_any.is_none() {
                return Choice::Nothing(format!(
                    "no release of {} in channel {channel}",
                    entity.product_id
                ));
            }
            if let Some((release, checks)) = pick_release(ctx, eval, true, |_| true) {
                let reason = with_skipped(
                    format!("newest {channel} release is {}", release.version),
                    eval,
                );
                return Choice::Candidate(
                    make(PlanKind::Install, Some(release.version.clone()), reason),
                    checks,
                );
            }
            Choice::Nothing(format!("no installable release of {}", entity.product_id))
        }
        Some(cur) => {
            let newer = newest_any.as_ref().is_some_and(|n| n > cur);
            if newer {
                if let Some((release, checks)) = pick_release(ctx, eval, true, |v| v > cur) {
                    let reason = with_skipped(
                        format!("newest passing {channel} release is {}", release.version),
                        eval,
                    );
                    return Choice::Candidate(
                        make(
                            PlanKind::VersionChange,
                            Some(release.version.clone()),
                            reason,
                        ),
                        checks,
                    );
                }
            }
            let desired = entity.config_for(cur);
            let desired_sha = crate::entity::config_sha256(desired);
            if entity.reported.config_sha256.as_deref() != Some(desired_sha.as_str()) {
                return Choice::Candidate(
                    make(
                        PlanKind::ConfigChange,
                        Some(cur.clone()),
                        "config overrides changed".into(),
                    ),
                    Vec::new(),
                );
            }
            if entity.secrets_revision > entity.reported.secrets_revision {
                return Choice::Candidate(
                    make(
                        PlanKind::SecretsChange,
                        Some(cur.clone()),
                        format!(
                            "secrets revision {} > applied {}",
                            entity.secrets_revision, entity.reported.secrets_revision
                        ),
                    ),
                    Vec::new(),
                );
            }
            Choice::AtTarget(format!("{cur}, config and secrets applied"))
        }
    }
}

/// `reason`, followed by the newer releases passed over and why (SPEC P4: the skipped release
/// and its blocking constraint are recorded with the plan and in Activity).
fn with_skipped(reason: String, eval: &Evaluation) -> String {
    if eval.skipped.is_empty() {
        reason
    } else {
        format!("{reason}; {}", eval.skipped.join("; "))
    }
}

/// Picks the newest release of the entity's channel (not recalled, admitted by `filter`) that
/// passes every version-specific constraint (with `waves`, the `rollout-wave` constraint
/// too). If none passes, returns the newest with its failed checks. `None` when no release
/// is admitted at all.
fn pick_release<'a>(
    ctx: &Ctx<'a>,
    eval: &mut Evaluation,
    waves: bool,
    filter: impl Fn(&Version) -> bool,
) -> Option<(&'a Release, Vec<ConstraintResult>)> {
    let entity = ctx.entity;
    let mut first: Option<(&'a Release, Vec<ConstraintResult>)> = None;
    let mut skipped = Vec::new();
    for release in ctx
        .state
        .channel_releases_desc(&entity.product_id, &entity.release_channel)
        .filter(|r| {
            ctx.state
                .recall_covering(&r.product_id, &r.version)
                .is_none()
        })
        .filter(|r| filter(&r.version))
        .take(MAX_VERSIONS_TRIED)
    {
        let mut checks = version_constraints(ctx, eval, release);
        if waves {
            checks.extend(waves::rollout_wave_constraint(
                ctx.state,
                entity,
                &release.version,
                ctx.now,
            ));
        }
        if checks.iter().all(|c| c.passed) {
            eval.skipped.append(&mut skipped);
            return Some((release, checks));
        }
        let why: Vec<String> = checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| format!("{}: {}", c.constraint, c.reason))
            .collect();
        skipped.push(format!("{} skipped ({})", release.version, why.join("; ")));
        if first.is_none() {
            first = Some((release, checks));
        }
    }
    first
}

/// Suppression, maintenance window and health: the constraints that do not depend on the
/// target version.
fn general_constraints(ctx: &Ctx<'_>, candidate: &Candidate) -> Vec<ConstraintResult> {
    let kind = &candidate.kind;
    vec![
        suppression_constraint(ctx, kind),
        window_constraint(ctx, kind),
        health_constraint(ctx, candidate),
    ]
}

/// SPEC C8, P10: manual suppressions always block; automatic ones let rollbacks through.
fn suppression_constraint(ctx: &Ctx<'_>, kind: &PlanKind) -> ConstraintResult {
    let rollback = matches!(kind, PlanKind::Rollback { .. });
    let scopes = [
        Scope::Entity(ctx.entity.id.0.clone()),
        Scope::Environment(ctx.env.name.clone()),
    ];
    let mut blocking = Vec::new();
    let mut passed_over = Vec::new();
    let mut clear: Option<TimestampMs> = Some(i64::MIN);
    for s in scopes
        .iter()
        .flat_map(|scope| ctx.state.suppressions_in(scope))
        .filter(|s| s.active_at(ctx.now))
    {
        if rollback && s.source.is_automatic() {
            passed_over.push(s.id.clone());
            continue;
        }
        blocking.push(SuppressionHold {
            source: s.source.clone(),
            id: s.id.clone(),
            scope: s.scope.clone(),
            reason: s.reason.clone(),
        });
        clear = match (clear, s.end_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    if blocking.is_empty() {
        let reason = if passed_over.is_empty() {
            Reason::NoSuppression
        } else {
            Reason::RollbackPassesAutomatic {
                suppressions: passed_over,
            }
        };
        return ConstraintResult::pass(ConstraintKind::Suppression, reason);
    }
    ConstraintResult::fail(
        ConstraintKind::Suppression,
        Reason::Suppressed {
            holds: blocking,
            until: clear,
        },
        clear,
    )
}

/// SPEC C3–C6.
fn window_constraint(ctx: &Ctx<'_>, kind: &PlanKind) -> ConstraintResult {
    let c = ConstraintKind::MaintenanceWindow;
    let settings = &ctx.env.settings;
    if matches!(kind, PlanKind::RecallRollOff) && !settings.require_windows_for_recall_roll_offs {
        return ConstraintResult::pass(c, Reason::RecallRollOffIgnoresWindows);
    }
    let overrides = ctx
        .entity
        .window_overrides
        .iter()
        .map(|o| (OverrideLevel::Entity, o))
        .chain(
            ctx.env
                .window_overrides
                .iter()
                .map(|o| (OverrideLevel::Environment, o)),
        );
    let mut next_override: Option<TimestampMs> = None;
    for (level, o) in overrides {
        if o.active_at(ctx.now) {
            return ConstraintResult::pass(
                c,
                Reason::OverrideActive {
                    level,
                    id: o.id.clone(),
                    until: o.end_ms,
                    reason: o.reason.clone(),
                },
            );
        }
        if o.start_ms > ctx.now {
            next_override = Some(next_override.map_or(o.start_ms, |t| t.min(o.start_ms)));
        }
    }
    let product_window = ctx
        .state
        .product(&ctx.entity.product_id)
        .and_then(|p| p.maintenance_window.as_ref())
        .filter(|_| !settings.override_product_maintenance_windows);
    let (source, window) = if let Some(w) = product_window {
        (WindowSource::Product, w)
    } else if let Some(w) = &ctx.entity.maintenance_window {
        (WindowSource::Entity, w)
    } else if let Some(w) = &settings.maintenance_window {
        (WindowSource::Environment, w)
    } else {
        return ConstraintResult::pass(c, Reason::NoWindowApplies);
    };
    if window.is_open(ctx.now) {
        return ConstraintResult::pass(
            c,
            Reason::WindowOpen {
                source,
                window: window.clone(),
            },
        );
    }
    let opens = window.next_open(ctx.now);
    let clear = match (opens, next_override) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    ConstraintResult::fail(
        c,
        Reason::OutsideWindow {
            source,
            window: window.clone(),
            next_opening: opens,
        },
        clear,
    )
}

/// SPEC C10: an entity in error is not changed by ordinary plans, unless it has never been
/// healthy on any version (issue 55: nothing running to protect) and the candidate is not the
/// attempt that already failed ([`crate::never_healthy`]).
fn health_constraint(ctx: &Ctx<'_>, candidate: &Candidate) -> ConstraintResult {
    let c = ConstraintKind::Health;
    let kind = &candidate.kind;
    if matches!(
        kind,
        PlanKind::Rollback { .. } | PlanKind::RecallRollOff | PlanKind::Uninstall
    ) {
        return ConstraintResult::pass(
            c,
            Reason::NotHeldBackByHealth {
                kind: kind.label().to_string(),
            },
        );
    }
    let message = || ctx.entity.reported.message.clone();
    match ctx.entity.reported.health {
        Health::Error => match ctx.state.never_healthy(&ctx.entity.id.0) {
            None => ConstraintResult::fail(c, Reason::ReportedInError { message: message() }, None),
            Some(row) => never_healthy_retry(row, candidate, message()),
        },
        health => ConstraintResult::pass(c, Reason::Reported { health }),
    }
}

/// The health constraint for an entity in error that was never healthy on any version: it
/// passes unless the candidate repeats the attempt that failed.
fn never_healthy_retry(
    row: &crate::never_healthy::NeverHealthy,
    candidate: &Candidate,
    message: String,
) -> ConstraintResult {
    let c = ConstraintKind::Health;
    let Some(attempt) = &row.failed_attempt else {
        return ConstraintResult::pass(
            c,
            Reason::NeverHealthyRetry {
                message,
                change: RetryChange::NoFailedAttempt,
            },
        );
    };
    let config = candidate.to_config.as_deref().unwrap_or("");
    let change = candidate.to_version.as_ref().and_then(|v| {
        attempt.change_to(
            v,
            &crate::entity::config_sha256(config),
            candidate.secrets_revision,
        )
    });
    match change {
        Some(change) => ConstraintResult::pass(c, Reason::NeverHealthyRetry { message, change }),
        None => ConstraintResult::fail(
            c,
            Reason::FailedAttemptRepeated {
                message,
                plan: attempt.plan.clone(),
                version: attempt.version.clone(),
            },
            None,
        ),
    }
}

/// Product dependencies (both directions) and artifacts of one target release.
fn version_constraints(
    ctx: &Ctx<'_>,
    eval: &mut Evaluation,
    release: &Release,
) -> Vec<ConstraintResult> {
    vec![
        dependencies_constraint(ctx, eval, release),
        dependents_constraint(ctx, &release.version),
        artifacts_constraint(ctx, eval, release),
        secrets_constraint(ctx),
    ]
}

/// SPEC M4: the secrets a module requires (`secret.key`) are set before a release is
/// deployed; an operator sets them with `hubctl entity secret set`.
fn secrets_constraint(ctx: &Ctx<'_>) -> ConstraintResult {
    let c = ConstraintKind::Secrets;
    let entity = ctx.entity;
    let missing: Vec<String> = entity
        .required_secrets
        .iter()
        .filter(|name| !entity.secrets.contains_key(*name))
        .cloned()
        .collect();
    if missing.is_empty() {
        ConstraintResult::pass(
            c,
            Reason::SecretsSet {
                required: entity.required_secrets.len(),
            },
        )
    } else {
        ConstraintResult::fail(
            c,
            Reason::SecretsMissing {
                module: entity.owner_module.clone(),
                missing,
            },
            None,
        )
    }
}

/// SPEC C7: the target's dependencies, as satisfied by entities sharing a dependency group.
fn dependencies_constraint(
    ctx: &Ctx<'_>,
    eval: &mut Evaluation,
    release: &Release,
) -> ConstraintResult {
    let c = ConstraintKind::ProductDependencies;
    let entity = ctx.entity;
    let mut problems = Vec::new();
    let mut unordered = Vec::new();
    let mut checked = 0;
    for dep in &release.dependencies {
        if entity.ignored_dependencies.contains(&dep.product_id) {
            continue;
        }
        checked += 1;
        let providers: Vec<&Entity> = ctx.state.providers_for(entity, &dep.product_id).collect();
        if providers.is_empty() {
            if !dep.optional {
                problems.push(DependencyProblem::NoProvider {
                    dependency: dep.clone(),
                });
                eval.waits_on_products.push(dep.product_id.clone());
            }
            continue;
        }
        for p in providers {
            match &p.reported.version {
                // Optional and circular dependencies carry no ordering promise: waiting for
                // them could deadlock (a needs b, b needs a, neither installed).
                None if dep.optional => unordered.push(UnorderedProvider::Optional {
                    provider: p.id.0.clone(),
                }),
                None if install_waits_on(ctx.state, p, entity) => {
                    unordered.push(UnorderedProvider::Circular {
                        provider: p.id.0.clone(),
                    })
                }
                None => {
                    problems.push(DependencyProblem::NotInstalled {
                        dependency: dep.clone(),
                        provider: p.id.0.clone(),
                    });
                    eval.waits_on_products.push(dep.product_id.clone());
                }
                Some(v) if !dep.admits(v) => {
                    problems.push(DependencyProblem::Runs {
                        dependency: dep.clone(),
                        provider: p.id.0.clone(),
                        version: v.clone(),
                    });
                    eval.waits_on_products.push(dep.product_id.clone());
                }
                Some(_) => {}
            }
        }
    }
    if problems.is_empty() {
        ConstraintResult::pass(
            c,
            Reason::DependenciesSatisfied {
                checked,
                not_waiting: unordered,
            },
        )
    } else {
        ConstraintResult::fail(c, Reason::DependenciesUnmet { problems }, None)
    }
}

/// Whether installing `from` (not installed) would itself wait, through not-installed
/// entities of its environment, for `target` to be installed: a dependency cycle, which
/// carries no ordering promise (SPEC C7). `from`'s would-be release is the newest
/// non-recalled release of its channel.
fn install_waits_on(state: &State, from: &Entity, target: &Entity) -> bool {
    let mut stack = vec![from];
    let mut seen = std::collections::BTreeSet::from([from.id.0.as_str()]);
    while let Some(e) = stack.pop() {
        let Some(release) = state
            .channel_releases_desc(&e.product_id, &e.release_channel)
            .find(|r| state.recall_covering(&r.product_id, &r.version).is_none())
        else {
            continue;
        };
        for dep in &release.dependencies {
            if dep.optional || e.ignored_dependencies.contains(&dep.product_id) {
                continue;
            }
            for p in state.providers_for(e, &dep.product_id) {
                if p.reported.version.is_some() {
                    continue;
                }
                if p.id == target.id {
                    return true;
                }
                if seen.insert(p.id.0.as_str()) {
                    stack.push(p);
                }
            }
        }
    }
    false
}

/// SPEC C7: every entity whose deployed release depends on this product accepts `target`.
fn dependents_constraint(ctx: &Ctx<'_>, target: &Version) -> ConstraintResult {
    let c = ConstraintKind::Dependents;
    let entity = ctx.entity;
    let mut problems = Vec::new();
    let mut checked = 0;
    for (dependent, dep) in ctx.state.dependents_of(entity) {
        checked += 1;
        if !dep.admits(target) {
            problems.push(DependentNeed {
                dependent: dependent.id.0.clone(),
                runs: dependent.reported.version.clone(),
                dependency: dep.clone(),
            });
        }
    }
    if problems.is_empty() {
        ConstraintResult::pass(
            c,
            Reason::DependentsAccept {
                checked,
                target: target.clone(),
            },
        )
    } else {
        ConstraintResult::fail(c, Reason::DependentsRefuse { refusals: problems }, None)
    }
}

/// SPEC M11: an uninstall must not leave a dependent without its (non-optional) dependency.
fn uninstall_dependents(ctx: &Ctx<'_>) -> ConstraintResult {
    let c = ConstraintKind::Dependents;
    let needs: Vec<DependentNeed> = ctx
        .state
        .dependents_of(ctx.entity)
        .filter(|(_, dep)| !dep.optional)
        .map(|(d, dep)| DependentNeed {
            dependent: d.id.0.clone(),
            runs: d.reported.version.clone(),
            dependency: dep.clone(),
        })
        .collect();
    if needs.is_empty() {
        ConstraintResult::pass(c, Reason::NoDependents)
    } else {
        ConstraintResult::fail(c, Reason::DependentsNeedIt { needs }, None)
    }
}

/// SPEC C9.
fn artifacts_constraint(
    ctx: &Ctx<'_>,
    eval: &mut Evaluation,
    release: &Release,
) -> ConstraintResult {
    let c = ConstraintKind::Artifacts;
    let mut available = 0;
    let mut unchecked = Vec::new();
    let mut problems = Vec::new();
    let mut pending = Vec::new();
    for artifact in &release.artifacts {
        match resolve(&artifact.uri, &ctx.env.settings.registries) {
            Resolution::Unchecked { reason } => unchecked.push(ArtifactNote {
                uri: artifact.uri.clone(),
                reason,
            }),
            Resolution::Check { location, .. } => {
                let status = (ctx.artifacts)(&location);
                if !eval.artifact_locations.contains(&location) {
                    eval.artifact_locations.push(location);
                }
                match status {
                    Some(Availability::Available) => available += 1,
                    Some(Availability::Unchecked { reason }) => unchecked.push(ArtifactNote {
                        uri: artifact.uri.clone(),
                        reason,
                    }),
                    Some(Availability::Unavailable { reason }) => problems.push(ArtifactNote {
                        uri: artifact.uri.clone(),
                        reason,
                    }),
                    None => pending.push(artifact.uri.clone()),
                }
            }
        }
    }
    if !problems.is_empty() {
        return ConstraintResult::fail(c, Reason::ArtifactsUnavailable { problems }, None);
    }
    if !pending.is_empty() {
        return ConstraintResult::fail(c, Reason::ArtifactsNotCheckedYet { pending }, None);
    }
    ConstraintResult::pass(
        c,
        Reason::ArtifactsAvailable {
            available,
            unchecked,
        },
    )
}
