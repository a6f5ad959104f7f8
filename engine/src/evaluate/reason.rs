//! Why a constraint passed or failed, as data ([`Reason`]). Code matches on the variants;
//! people read the [`fmt::Display`] text, which is what `entity explain` and Activity show.
//!
//! The text is also part of [`super::Evaluation::fingerprint`], which apply stores in
//! Activity (`last_decision`) to note a changed decision once. That makes the rendered text
//! replicated state: every node must render a reason to the same bytes, so a change to a
//! `Display` arm is a change to the state machine and needs the same care as a change to
//! apply.

use std::fmt;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::entity::Health;
use crate::never_healthy::RetryChange;
use crate::release::ProductDependency;
use crate::suppression::{Scope, SuppressionSource};
use crate::window::MaintenanceWindow;
use crate::TimestampMs;

use super::format_time;

/// Why one constraint passed or failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Suppression passes: none is in force.
    NoSuppression,
    /// Suppression passes: a rollback goes through these automatic suppressions (SPEC P10).
    RollbackPassesAutomatic {
        /// Their ids.
        suppressions: Vec<String>,
    },
    /// Suppression fails: these hold the entity.
    Suppressed {
        /// The suppressions in force.
        holds: Vec<SuppressionHold>,
        /// When the last of them ends, if every one has an end.
        until: Option<TimestampMs>,
    },
    /// Window passes: the environment lets recall roll-offs ignore windows.
    RecallRollOffIgnoresWindows,
    /// Window passes: an override is active.
    OverrideActive {
        /// Whose override.
        level: OverrideLevel,
        /// Its id.
        id: String,
        /// When it ends.
        until: TimestampMs,
        /// The operator's reason.
        reason: String,
    },
    /// Window passes: no window applies to the entity.
    NoWindowApplies,
    /// Window passes: the effective window is open.
    WindowOpen {
        /// Whose window it is.
        source: WindowSource,
        /// The window.
        window: MaintenanceWindow,
    },
    /// Window fails: the effective window is closed.
    OutsideWindow {
        /// Whose window it is.
        source: WindowSource,
        /// The window.
        window: MaintenanceWindow,
        /// When it next opens, if ever.
        next_opening: Option<TimestampMs>,
    },
    /// Health passes: this kind of plan is not held back by health (SPEC C10).
    NotHeldBackByHealth {
        /// The plan kind's label.
        kind: String,
    },
    /// Health fails: the entity reported an error.
    ReportedInError {
        /// The agent's message.
        message: String,
    },
    /// Health passes: the entity is in error but has never been healthy on any version
    /// (issue 55), and the candidate differs from the attempt that failed.
    NeverHealthyRetry {
        /// The agent's message.
        message: String,
        /// What differs from the failed attempt.
        change: RetryChange,
    },
    /// Health fails: the entity was never healthy on any version, and the candidate repeats
    /// the attempt that failed (same release, config and secrets).
    FailedAttemptRepeated {
        /// The agent's message.
        message: String,
        /// The plan that failed.
        plan: String,
        /// The release it deployed.
        version: Version,
    },
    /// Health passes: the reported health.
    Reported {
        /// What the agent reported (not `Error`).
        health: Health,
    },
    /// Dependencies pass.
    DependenciesSatisfied {
        /// How many dependencies were checked.
        checked: usize,
        /// Providers not installed yet that carry no ordering promise.
        not_waiting: Vec<UnorderedProvider>,
    },
    /// Dependencies fail.
    DependenciesUnmet {
        /// Every unmet dependency.
        problems: Vec<DependencyProblem>,
    },
    /// Dependents pass: they all accept the target.
    DependentsAccept {
        /// How many dependents were checked.
        checked: usize,
        /// The target version.
        target: Version,
    },
    /// Dependents fail: these do not accept the target.
    DependentsRefuse {
        /// Each dependent that refuses.
        refusals: Vec<DependentNeed>,
    },
    /// Uninstall dependents pass: nothing depends on the entity.
    NoDependents,
    /// Uninstall dependents fail: these need the entity.
    DependentsNeedIt {
        /// Each dependent that needs it.
        needs: Vec<DependentNeed>,
    },
    /// Artifacts fail: some are known to be missing.
    ArtifactsUnavailable {
        /// Each unavailable artifact.
        problems: Vec<ArtifactNote>,
    },
    /// Artifacts fail: some have not been checked yet (the leader's checker wakes the entity
    /// when they are).
    ArtifactsNotCheckedYet {
        /// Their URIs.
        pending: Vec<String>,
    },
    /// Artifacts pass.
    ArtifactsAvailable {
        /// How many were found.
        available: usize,
        /// Those that cannot be checked, with why.
        unchecked: Vec<ArtifactNote>,
    },
    /// Secrets pass.
    SecretsSet {
        /// How many are required (all are set).
        required: usize,
    },
    /// Secrets fail.
    SecretsMissing {
        /// The module that requires them.
        module: Option<String>,
        /// The names of the missing secrets.
        missing: Vec<String>,
    },
    /// Rollout wave passes: the release's rollout has reached the entity's wave.
    RolloutWaveOpen {
        /// The entity's wave; `None`: it is in no wave and every wave has passed.
        wave: Option<String>,
        /// The release.
        version: Version,
    },
    /// Rollout wave fails: the release's rollout is halted.
    RolloutHalted {
        /// The release.
        version: Version,
        /// What halted it.
        cause: String,
        /// Since when.
        since: TimestampMs,
    },
    /// Rollout wave fails: an earlier wave is done but still soaking.
    WaveSoaking {
        /// The earlier wave.
        wave: String,
        /// Its committed soak end.
        until: TimestampMs,
        /// Its entities done with the release.
        done: usize,
        /// Its entities.
        total: usize,
    },
    /// Rollout wave fails: an earlier wave is not done.
    WaveIncomplete {
        /// The earlier wave.
        wave: String,
        /// Its entities done with the release.
        done: usize,
        /// Its entities.
        total: usize,
    },
    /// Rollout wave fails: an earlier product of the group is not done in the entity's wave.
    GroupWaiting {
        /// The earlier product.
        product: String,
        /// The release.
        version: Version,
        /// The entity's wave; `None`: after the last wave.
        wave: Option<String>,
        /// Its entities in the wave done with the release.
        done: usize,
        /// Its entities in the wave.
        total: usize,
    },
    /// Rollout wave fails: the wave already has `maxParallel` entities moving to the release.
    WaveAtMaxParallel {
        /// The entity's wave.
        wave: String,
        /// The release.
        version: Version,
        /// Entities of the wave moving to it.
        in_flight: usize,
        /// The wave's `maxParallel`.
        max: u32,
    },
}

/// One suppression in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuppressionHold {
    /// Manual or automatic.
    pub source: SuppressionSource,
    /// Its id.
    pub id: String,
    /// What it covers.
    pub scope: Scope,
    /// Why it exists.
    pub reason: String,
}

/// Whose window override is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OverrideLevel {
    /// The entity's own.
    Entity,
    /// The environment's.
    Environment,
}

/// Whose maintenance window is the effective one (SPEC C3–C6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WindowSource {
    /// The product's.
    Product,
    /// The entity's.
    Entity,
    /// The environment's.
    Environment,
}

/// A provider that is not installed yet but carries no ordering promise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnorderedProvider {
    /// The dependency is optional.
    Optional {
        /// The provider entity.
        provider: String,
    },
    /// Installing it would wait for this entity (a cycle).
    Circular {
        /// The provider entity.
        provider: String,
    },
}

/// One unmet dependency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyProblem {
    /// No entity of the product shares a dependency group.
    NoProvider {
        /// The dependency.
        dependency: ProductDependency,
    },
    /// A provider is not installed.
    NotInstalled {
        /// The dependency.
        dependency: ProductDependency,
        /// The provider entity.
        provider: String,
    },
    /// A provider runs a version the dependency does not admit.
    Runs {
        /// The dependency.
        dependency: ProductDependency,
        /// The provider entity.
        provider: String,
        /// What it runs.
        version: Version,
    },
}

/// A dependent and the dependency it has on the entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependentNeed {
    /// The dependent entity.
    pub dependent: String,
    /// What it runs.
    pub runs: Option<Version>,
    /// Its dependency.
    pub dependency: ProductDependency,
}

/// An artifact and what is known of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactNote {
    /// Its URI.
    pub uri: String,
    /// Why it is unavailable or cannot be checked.
    pub reason: String,
}

/// Writes `items` separated by `sep`.
fn join<T>(
    f: &mut fmt::Formatter<'_>,
    items: &[T],
    sep: &str,
    each: impl Fn(&mut fmt::Formatter<'_>, &T) -> fmt::Result,
) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        each(f, item)?;
    }
    Ok(())
}

impl fmt::Display for Reason {
    // Long: one arm per `Reason` variant.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoSuppression => f.write_str("no suppression in force"),
            Reason::RollbackPassesAutomatic { suppressions } => write!(
                f,
                "rollback passes automatic suppression {}",
                suppressions.join(", ")
            ),
            Reason::Suppressed { holds, until } => {
                join(f, holds, "; ", |f, h| {
                    write!(
                        f,
                        "{} {} on {}: {}",
                        h.source.label(),
                        h.id,
                        h.scope,
                        h.reason
                    )
                })?;
                match until {
                    Some(t) => write!(f, " until {}", format_time(*t)),
                    None => Ok(()),
                }
            }
            Reason::RecallRollOffIgnoresWindows => {
                f.write_str("recall roll-offs ignore maintenance windows")
            }
            Reason::OverrideActive {
                level,
                id,
                until,
                reason,
            } => write!(
                f,
                "{} override {id} until {} ({reason})",
                level.label(),
                format_time(*until)
            ),
            Reason::NoWindowApplies => f.write_str("no maintenance window applies"),
            Reason::WindowOpen { source, window } => {
                write!(f, "{} window {window} is open", source.label())
            }
            Reason::OutsideWindow {
                source,
                window,
                next_opening,
            } => {
                write!(f, "outside {} window {window}", source.label())?;
                match next_opening {
                    Some(t) => write!(f, "; next opening {}", format_time(*t)),
                    None => Ok(()),
                }
            }
            Reason::NotHeldBackByHealth { kind } => {
                write!(f, "{kind} is not held back by health")
            }
            Reason::ReportedInError { message } => {
                write!(f, "entity reported in error: {message}")
            }
            Reason::NeverHealthyRetry { message, change } => {
                write!(
                    f,
                    "entity reported in error ({message}) but never healthy on any version: \
                     nothing running to protect; "
                )?;
                match change {
                    RetryChange::NoFailedAttempt => f.write_str("no attempt of the hub failed"),
                    RetryChange::Release { failed } => {
                        write!(
                            f,
                            "retrying with a new release (the attempt with {failed} failed)"
                        )
                    }
                    RetryChange::Config => {
                        f.write_str("retrying with changed config (the failed attempt's release)")
                    }
                    RetryChange::Secrets => f.write_str(
                        "retrying with changed secrets (the failed attempt's release and config)",
                    ),
                }
            }
            Reason::FailedAttemptRepeated {
                message,
                plan,
                version,
            } => write!(
                f,
                "entity reported in error ({message}) and never healthy on any version: plan \
                 {plan} failed with {version} and this config and secrets; fix the config or a \
                 secret, or publish a new release"
            ),
            Reason::Reported { health } => write!(f, "reported {}", health.as_str()),
            Reason::DependenciesSatisfied {
                checked,
                not_waiting,
            } => {
                write!(f, "{checked} dependencies satisfied")?;
                if not_waiting.is_empty() {
                    return Ok(());
                }
                f.write_str(" (not waiting: ")?;
                join(f, not_waiting, "; ", |f, u| match u {
                    UnorderedProvider::Optional { provider } => {
                        write!(f, "{provider} (optional) is not installed yet")
                    }
                    UnorderedProvider::Circular { provider } => {
                        write!(f, "{provider} is not installed yet (circular dependency)")
                    }
                })?;
                f.write_str(")")
            }
            Reason::DependenciesUnmet { problems } => join(f, problems, "; ", |f, p| match p {
                DependencyProblem::NoProvider { dependency } => write!(
                    f,
                    "requires {dependency}: no entity of it shares a dependency group"
                ),
                DependencyProblem::NotInstalled {
                    dependency,
                    provider,
                } => write!(f, "requires {dependency}: {provider} is not installed"),
                DependencyProblem::Runs {
                    dependency,
                    provider,
                    version,
                } => write!(f, "requires {dependency}: {provider} runs {version}"),
            }),
            Reason::DependentsAccept { checked, target } => {
                write!(f, "{checked} dependents accept {target}")
            }
            Reason::DependentsRefuse { refusals } => join(f, refusals, "; ", |f, n| {
                let runs = n.runs.as_ref().map_or("-".to_string(), |v| v.to_string());
                write!(f, "{} at {runs} requires {}", n.dependent, n.dependency)
            }),
            Reason::NoDependents => f.write_str("no entity depends on it"),
            Reason::DependentsNeedIt { needs } => join(f, needs, "; ", |f, n| {
                write!(f, "{} requires {}", n.dependent, n.dependency)
            }),
            Reason::ArtifactsUnavailable { problems } => join(f, problems, "; ", |f, a| {
                write!(f, "{} unavailable: {}", a.uri, a.reason)
            }),
            Reason::ArtifactsNotCheckedYet { pending } => {
                write!(f, "availability not checked yet: {}", pending.join(", "))
            }
            Reason::ArtifactsAvailable {
                available,
                unchecked,
            } => {
                write!(f, "{available} available")?;
                if unchecked.is_empty() {
                    return Ok(());
                }
                write!(f, ", {} unchecked (", unchecked.len())?;
                join(f, unchecked, "; ", |f, a| {
                    write!(f, "{}: {}", a.uri, a.reason)
                })?;
                f.write_str(")")
            }
            Reason::SecretsSet { required } => write!(f, "{required} required secrets set"),
            Reason::SecretsMissing { module, missing } => write!(
                f,
                "missing secrets required by module {}: {}",
                module.as_deref().unwrap_or("-"),
                missing.join(", ")
            ),
            Reason::RolloutWaveOpen { wave, version } => match wave {
                Some(w) => write!(f, "wave `{w}` is open for {version}"),
                None => write!(f, "in no wave: every wave of {version} has passed"),
            },
            Reason::RolloutHalted { version, cause, .. } => {
                write!(f, "rollout of {version} halted: {cause}")
            }
            Reason::WaveSoaking {
                wave,
                until,
                done,
                total,
            } => write!(
                f,
                "waiting for wave `{wave}` to soak until {} ({done} of {total} entities done)",
                format_time(*until)
            ),
            Reason::WaveIncomplete { wave, done, total } => write!(
                f,
                "waiting for wave `{wave}` to complete ({done} of {total} entities done)"
            ),
            Reason::GroupWaiting {
                product,
                version,
                wave,
                done,
                total,
            } => {
                write!(f, "waiting for {product} {version} ")?;
                match wave {
                    Some(w) => write!(f, "in wave `{w}`")?,
                    None => f.write_str("after the last wave")?,
                }
                write!(f, " ({done} of {total} entities done)")
            }
            Reason::WaveAtMaxParallel {
                wave,
                version,
                in_flight,
                max,
            } => write!(
                f,
                "wave `{wave}` has {in_flight} entities moving to {version} (maxParallel {max})"
            ),
        }
    }
}

impl OverrideLevel {
    /// Lower-case name, as in the reason text.
    pub fn label(self) -> &'static str {
        match self {
            OverrideLevel::Entity => "entity",
            OverrideLevel::Environment => "environment",
        }
    }
}

impl WindowSource {
    /// Lower-case name, as in the reason text.
    pub fn label(self) -> &'static str {
        match self {
            WindowSource::Product => "product",
            WindowSource::Entity => "entity",
            WindowSource::Environment => "environment",
        }
    }
}
