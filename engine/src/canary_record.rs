//! The replicated record of one canary: its resource, where its analysis stands, the
//! revisions it refers to, what the agent last observed and the step plans waiting to be
//! issued. The transitions are in `apply/canaries.rs`; the phase machine in [`crate::canary`].

use serde::{Deserialize, Serialize};

use crate::canary::{
    parse_canary_reporting, Action, CanaryObservation, CanaryRevision, CanarySpec, CanaryStatus,
    IgnoredField,
};
use crate::plan::Plan;
use crate::TimestampMs;

/// Most actions remembered on a canary record (the newest).
pub const MAX_RECORDED_ACTIONS: usize = 64;

/// A canary attached to an entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    /// `<environment>/<name>`.
    pub id: String,
    /// The environment (the resource's namespace).
    pub environment: String,
    /// The resource's name.
    pub name: String,
    /// The entity it controls.
    pub entity: String,
    /// The validated resource.
    pub spec: CanarySpec,
    /// The resource as applied.
    pub yaml: String,
    /// Where the analysis stands.
    pub status: CanaryStatus,
    /// The newest actions decided, oldest first, with the step that decided them.
    pub actions: Vec<(u64, Action)>,
    /// The revision the analysis is about: the entity's newest candidate that passed every
    /// constraint (or what it runs), set by evaluations. `None` until the first one.
    pub target: Option<CanaryRevision>,
    /// Revisions the status and queued steps may refer to (target, primary, canary, ...).
    pub revisions: Vec<CanaryRevision>,
    /// What the agent last observed.
    pub observation: Option<CanaryObservation>,
    /// Step plans decided while another plan of the entity was active, oldest first.
    pub queued: Vec<Plan>,
    /// Entry time of the first apply.
    pub created_ms: TimestampMs,
    /// Entry time of the last apply of the resource.
    pub updated_ms: TimestampMs,
}

impl Canary {
    /// The id of canary `name` in `environment`.
    pub fn id_of(environment: &str, name: &str) -> String {
        format!("{environment}/{name}")
    }

    /// The revision the analysis is about (for manual commands): the last one applied, else
    /// the primary's.
    pub(crate) fn current_revision(&self) -> String {
        self.status
            .last_applied_spec
            .clone()
            .or_else(|| self.status.primary_revision.clone())
            .unwrap_or_default()
    }

    /// The fields of the applied resource the hub accepts but does not act on, with why
    /// (`status.ignoredFields` of `canary get -o yaml`). They are read again from the committed
    /// resource text, as the analysis policy is, so the record's encoding stays as it was and
    /// every node reports the same list for the same bytes. A resource this release's parser
    /// refuses (accepted by an older one) reports none.
    pub fn ignored_fields(&self) -> Vec<IgnoredField> {
        parse_canary_reporting(&self.yaml)
            .map(|(_, ignored)| ignored)
            .unwrap_or_default()
    }

    /// The revision named `revision` among the target and the remembered revisions.
    fn find_revision(&self, revision: &str) -> Option<&CanaryRevision> {
        self.target
            .iter()
            .chain(&self.revisions)
            .find(|r| r.revision == revision)
    }

    /// Whether `revision` differs from the revision the primary runs only in config or
    /// secrets: same version, same artifacts (what config tracking is about, issue 55).
    /// `false` when either is unknown or they are the same revision.
    pub fn differs_from_primary_only_in_config(&self, revision: &str) -> bool {
        let primary = self.status.primary_revision.as_deref();
        match (
            self.find_revision(revision),
            primary.and_then(|p| self.find_revision(p)),
        ) {
            (Some(new), Some(primary)) => {
                new.revision != primary.revision
                    && new.version == primary.version
                    && new.artifacts == primary.artifacts
            }
            _ => false,
        }
    }

    /// Appends `actions` decided at `step`, keeping the newest [`MAX_RECORDED_ACTIONS`].
    pub(crate) fn record_actions(&mut self, step: u64, actions: Vec<Action>) {
        self.actions.extend(actions.into_iter().map(|a| (step, a)));
        let excess = self.actions.len().saturating_sub(MAX_RECORDED_ACTIONS);
        self.actions.drain(..excess);
    }
}

/// A short name for an action, for summaries.
pub fn action_label(a: &Action) -> String {
    match a {
        Action::Initialize { .. } => "initialize".into(),
        Action::DeployCanary { .. } => "deploy canary".into(),
        Action::SetWeights { primary, canary } => format!("weights {primary}/{canary}"),
        Action::SetRouting { canary_weight, .. } => format!("routing {canary_weight}"),
        Action::RouteAllToPrimary => "all traffic to primary".into(),
        Action::PromoteCanary { .. } => "promote".into(),
        Action::ScaleCanaryToZero => "canary to zero".into(),
        Action::Alert { .. } => "alert".into(),
        Action::NotifyWebhook { call } => format!("notify {}", call.name),
        Action::RestoreOriginal => "restore original routing".into(),
        Action::DeployBaseline { .. } => "deploy baseline".into(),
        Action::ScaleBaselineToZero => "baseline to zero".into(),
    }
}
