//! Fleet waves (issue 20): environment labels, rollout policies, the operator's promote,
//! halt and resume, and the bookkeeping every entry runs after its command
//! ([`State::track_rollouts`]): committing when a wave became done (its soak end) and
//! halting a rollout on a failure, recalling the release when the wave says so.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;

use crate::canary::Phase;
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::evaluate::{format_time, is_done, members, wave_index};
use crate::labels::{validate_label_key, validate_label_value, EnvironmentLabels, MAX_LABELS};
use crate::plan::PlanStatus;
use crate::plan_outcome::OutcomeKind;
use crate::product::Recall;
use crate::record::RecordKey;
use crate::rollout::{HaltCause, Promotion, Rollout, RolloutHalt, WaveProgress};
use crate::rollout_policy::{
    parse_rollout_policy, OnFailure, RolloutPolicy, RolloutPolicySpec, Wave,
};
use crate::state::{State, Trigger};

use super::{changed, check_text, not_found, parse_version, Tx};

/// A failure seen in an entry, to halt its rollout with.
struct Failure {
    policy: String,
    version: Version,
    cause: HaltCause,
    on_failure: OnFailure,
}

impl State {
    /// `SetEnvironmentLabels`: sets and removes labels; an environment left without labels
    /// has no labels record.
    pub(super) fn set_environment_labels(
        &mut self,
        environment: &str,
        labels: &BTreeMap<String, Option<String>>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if !self.environments.contains_key(environment) {
            return Err(not_found("environment", environment));
        }
        if labels.is_empty() {
            return Err(CommandError::invalid("labels", "name at least one label"));
        }
        if labels.len() > MAX_LABELS {
            return Err(CommandError::invalid(
                "labels",
                format!("{} labels, at most {MAX_LABELS} allowed", labels.len()),
            ));
        }
        let mut next = self.environment_labels(environment).clone();
        for (key, value) in labels {
            let field = format!("labels.{key}");
            validate_label_key(&field, key)?;
            match value {
                Some(value) => {
                    validate_label_value(&field, value)?;
                    next.insert(key.clone(), value.clone());
                }
                None => {
                    next.remove(key);
                }
            }
        }
        if next.len() > MAX_LABELS {
            return Err(CommandError::invalid(
                "labels",
                format!(
                    "the environment would have {} labels, at most {MAX_LABELS} allowed",
                    next.len()
                ),
            ));
        }
        // An environment belongs to one wave of a policy: a change that would put it in two
        // is refused (one that leaves a wave empty is not: that wave is passed over).
        for policy in self.rollout_policies.values() {
            let waves: Vec<&str> = policy
                .waves
                .iter()
                .filter(|w| w.selector.selects(environment, &next))
                .map(|w| w.name.as_str())
                .collect();
            if waves.len() > 1 {
                return Err(CommandError::invalid(
                    "labels",
                    format!(
                        "{environment} would be in waves `{}` of the rollout policy of {}: an \
                         environment belongs to one wave of a policy",
                        waves.join("`, `"),
                        policy.product
                    ),
                ));
            }
        }
        let text = labels_text(&next);
        if next == *self.environment_labels(environment) {
            return Ok(changed(
                environment,
                format!("labels of {environment} unchanged: {text}"),
            ));
        }
        if next.is_empty() {
            self.environment_labels.remove(environment, &mut tx.changed);
        } else {
            self.environment_labels.put(
                EnvironmentLabels {
                    environment: environment.to_string(),
                    labels: next,
                },
                &mut tx.changed,
            );
        }
        // Wave membership may have moved: every governed product is looked at again.
        tx.triggers
            .push(Trigger::Environment(environment.to_string()));
        let all: Vec<String> = self.rollout_policies.keys().cloned().collect();
        for policy in all {
            self.trigger_group(&policy, tx);
        }
        Ok(changed(
            environment,
            format!("labels of {environment}: {text}"),
        ))
    }

    /// `ApplyRolloutPolicy`: creates or replaces the policy of the product the document
    /// names. The rollouts' committed progress is kept (waves are matched by name).
    // Long: the checks against the state, each naming its YAML path, then the write.
    pub(super) fn apply_rollout_policy(
        &mut self,
        yaml: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let spec = parse_rollout_policy(yaml)
            .map_err(|errors| CommandError::invalid("rollout-policy", format!("\n{errors}")))?;
        let members = std::iter::once(("product".to_string(), &spec.product)).chain(
            spec.products
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("products[{i}]"), p)),
        );
        for (path, product) in members {
            if !self.products.contains_key(product) {
                return Err(CommandError::invalid(
                    &path,
                    format!("product {product} does not exist"),
                ));
            }
            if let Some(other) = self
                .rollout_policy_of(product)
                .filter(|o| o.product != spec.product)
            {
                return Err(CommandError::invalid(
                    &path,
                    format!(
                        "{product} already moves under the rollout policy of {}",
                        other.product
                    ),
                ));
            }
        }
        for (i, wave) in spec.waves.iter().enumerate() {
            if let Some(missing) = wave
                .selector
                .environments
                .iter()
                .find(|e| !self.environments.contains_key(*e))
            {
                return Err(CommandError::invalid(
                    &format!("waves[{i}].selector.environments"),
                    format!("environment {missing} does not exist"),
                ));
            }
        }
        self.check_wave_selection(&spec.waves)?;
        if !spec.products.is_empty() {
            self.check_group_entities(&spec)?;
        }
        let old = self.rollout_policies.get(&spec.product).cloned();
        if old.as_ref().is_some_and(|o| o.yaml == yaml) {
            return Ok(changed(
                spec.product.clone(),
                format!("rollout policy of {} unchanged", spec.product),
            ));
        }
        let policy = RolloutPolicy {
            product: spec.product.clone(),
            products: spec.products,
            waves: spec.waves,
            yaml: yaml.to_string(),
            created_ms: old.as_ref().map_or(tx.now, |o| o.created_ms),
            updated_ms: tx.now,
        };
        let summary = format!(
            "rollout policy of {} {} ({} waves)",
            policy.product,
            if old.is_some() { "replaced" } else { "created" },
            policy.waves.len()
        );
        if let Some(old) = &old {
            for p in old.group() {
                tx.triggers.push(Trigger::Product(p.to_string()));
            }
        }
        let product = policy.product.clone();
        self.rollout_policies.put(policy, &mut tx.changed);
        self.trigger_group(&product, tx);
        Ok(changed(product, summary))
    }

    /// Every wave selects at least one environment, and no environment is selected by two
    /// waves (named ones were checked by the parser; here labels are matched as they are now).
    fn check_wave_selection(&self, waves: &[Wave]) -> Result<(), CommandError> {
        let mut selected = vec![false; waves.len()];
        for name in self.environments.keys() {
            let labels = self.environment_labels(name);
            let mut first: Option<usize> = None;
            for (i, wave) in waves.iter().enumerate() {
                if !wave.selector.selects(name, labels) {
                    continue;
                }
                if let Some(f) = first {
                    return Err(CommandError::invalid(
                        &format!("waves[{i}].selector"),
                        format!(
                            "selects environment {name}, which waves[{f}] (`{}`) selects too: \
                             an environment belongs to one wave of a policy",
                            waves[f].name
                        ),
                    ));
                }
                first = Some(i);
                selected[i] = true;
            }
        }
        if let Some(i) = selected.iter().position(|s| !s) {
            return Err(CommandError::invalid(
                &format!("waves[{i}].selector"),
                format!(
                    "selects no environment: none carries {}",
                    labels_text(&waves[i].selector.labels)
                ),
            ));
        }
        Ok(())
    }

    /// A grouped policy: every product of the group has an entity (not being uninstalled) in
    /// every wave, or the group could not move together there.
    fn check_group_entities(&self, spec: &RolloutPolicySpec) -> Result<(), CommandError> {
        let group = spec
            .products
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("products[{i}]"), p))
            .chain(std::iter::once(("product".to_string(), &spec.product)));
        for (path, product) in group {
            let mut has_entity = vec![false; spec.waves.len()];
            for e in self.entities_of_product_everywhere(product) {
                if e.marked_for_uninstall {
                    continue;
                }
                let labels = self.environment_labels(&e.environment);
                if let Some(i) = spec
                    .waves
                    .iter()
                    .position(|w| w.selector.selects(&e.environment, labels))
                {
                    has_entity[i] = true;
                }
            }
            if let Some(i) = has_entity.iter().position(|h| !h) {
                return Err(CommandError::invalid(
                    &path,
                    format!(
                        "{product} has no entity in wave `{}` (waves[{i}]): every product of \
                         a group needs one in every wave",
                        spec.waves[i].name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `DeleteRolloutPolicy`: the policy and its rollouts' progress go; its products roll
    /// out without waves from now on.
    pub(super) fn delete_rollout_policy(
        &mut self,
        product: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if !self.rollout_policies.contains_key(product) {
            return Err(not_found("rollout policy", product));
        }
        self.trigger_group(product, tx);
        let keys: Vec<(String, Version)> = self
            .rollouts_of(product)
            .map(|r| (r.product.clone(), r.version.clone()))
            .collect();
        for key in &keys {
            self.rollouts.remove(key, &mut tx.changed);
        }
        self.rollout_policies.remove(product, &mut tx.changed);
        Ok(changed(
            product,
            format!(
                "rollout policy of {product} deleted ({} rollouts forgotten)",
                keys.len()
            ),
        ))
    }

    /// The policy governing `product` and the parsed `version`, or the refusal.
    fn rollout_target(
        &self,
        product: &str,
        version: &str,
    ) -> Result<(RolloutPolicy, Version), CommandError> {
        let policy = self
            .rollout_policy_of(product)
            .ok_or_else(|| not_found("rollout policy", product))?
            .clone();
        let version = parse_version("version", version)?;
        if !policy.group().any(|p| self.release(p, &version).is_some()) {
            return Err(not_found(
                "release",
                &format!("{}@{version}", policy.product),
            ));
        }
        Ok((policy, version))
    }

    /// `PromoteWave`: the current wave (the first that has entities and has not passed)
    /// passes now, soak or not.
    pub(super) fn promote_wave(
        &mut self,
        product: &str,
        version: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let (policy, version) = self.rollout_target(product, version)?;
        let key = (policy.product.clone(), version.clone());
        let mut rollout = self
            .rollouts
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Rollout::new(&policy.product, &version));
        let target = Rollout::key_name(&policy.product, &version);
        if rollout.halt.is_some() {
            return Err(CommandError::FailedPrecondition(format!(
                "the rollout of {target} is halted: resume it first"
            )));
        }
        let members = members(self, &policy, &version);
        let current = policy
            .waves
            .iter()
            .zip(&members)
            .find(|(w, m)| !m.is_empty() && !rollout.wave(&w.name).passed_at(tx.now))
            .map(|(w, _)| w.name.clone());
        let Some(wave) = current else {
            return Err(CommandError::FailedPrecondition(format!(
                "every wave of {target} has passed"
            )));
        };
        let progress = rollout.waves.entry(wave.clone()).or_default();
        let skipped = match progress.soak_until_ms {
            Some(t) => format!(" (soak until {} skipped)", format_time(t)),
            None => " (not done yet)".to_string(),
        };
        progress.promoted = Some(Promotion {
            at_ms: tx.now,
            actor: actor.to_string(),
        });
        self.rollouts.put(rollout, &mut tx.changed);
        let reason = format!("wave `{wave}` promoted{skipped}");
        self.audit_entry(actor, "promote-wave", target.clone(), &reason, tx);
        self.trigger_group(&policy.product, tx);
        Ok(changed(target.clone(), format!("{target}: {reason}")))
    }

    /// `HaltRollout`: no new plan to the release is issued until it is resumed.
    pub(super) fn halt_rollout(
        &mut self,
        product: &str,
        version: &str,
        reason: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_text("reason", reason, true)?;
        let (policy, version) = self.rollout_target(product, version)?;
        let target = Rollout::key_name(&policy.product, &version);
        let key = (policy.product.clone(), version.clone());
        let mut rollout = self
            .rollouts
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Rollout::new(&policy.product, &version));
        if let Some(h) = &rollout.halt {
            return Err(CommandError::FailedPrecondition(format!(
                "the rollout of {target} is already halted: {}",
                h.cause
            )));
        }
        rollout.halt = Some(RolloutHalt {
            at_ms: tx.now,
            cause: HaltCause::Operator {
                actor: actor.to_string(),
                reason: reason.to_string(),
            },
            recalls: Vec::new(),
        });
        self.rollouts.put(rollout, &mut tx.changed);
        self.audit_entry(actor, "halt-rollout", target.clone(), reason, tx);
        self.trigger_group(&policy.product, tx);
        Ok(changed(
            target.clone(),
            format!("rollout of {target} halted"),
        ))
    }

    /// `ResumeRollout`: lifts the halt; the failures of the release seen so far (the one
    /// that halted it included) do not halt it again. A recall a `recall` wave made stays:
    /// withdraw it with `DeleteRecall`.
    pub(super) fn resume_rollout(
        &mut self,
        product: &str,
        version: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let (policy, version) = self.rollout_target(product, version)?;
        let target = Rollout::key_name(&policy.product, &version);
        let key = (policy.product.clone(), version.clone());
        let Some(mut rollout) = self.rollouts.get(&key).cloned() else {
            return Err(CommandError::FailedPrecondition(format!(
                "the rollout of {target} is not halted"
            )));
        };
        let Some(halt) = rollout.halt.take() else {
            return Err(CommandError::FailedPrecondition(format!(
                "the rollout of {target} is not halted"
            )));
        };
        rollout.forgiven.extend(halt.cause.failure_key());
        rollout
            .forgiven
            .extend(self.failure_keys(&policy, &version));
        self.rollouts.put(rollout, &mut tx.changed);
        let reason = format!("resumed after: {}", halt.cause);
        self.audit_entry(actor, "resume-rollout", target.clone(), &reason, tx);
        self.trigger_group(&policy.product, tx);
        Ok(changed(
            target.clone(),
            format!("rollout of {target} resumed"),
        ))
    }

    /// The keys of every failure of `version` under `policy` the state shows now: failed
    /// plans to it and failed canaries analysing it.
    fn failure_keys(&self, policy: &RolloutPolicy, version: &Version) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for product in policy.group() {
            for e in self.entities_of_product_everywhere(product) {
                for o in self.outcomes_of(&e.id.0) {
                    if let Some(cause) = self.plan_failure(policy, &o.id) {
                        if cause.0 == *version {
                            out.extend(cause.1.failure_key());
                        }
                    }
                }
                if let Some(c) = self.canaries.index().of_entity.get(&e.id.0) {
                    if let Some((v, cause)) = self.canary_failure(policy, c) {
                        if v == *version {
                            out.extend(cause.failure_key());
                        }
                    }
                }
            }
        }
        out
    }

    /// Plan `id` as a failure of a rollout under `policy`: a failed install or version
    /// change of an entity of the group, with its version.
    fn plan_failure(&self, policy: &RolloutPolicy, id: &str) -> Option<(Version, HaltCause)> {
        let plan = self.plan_outcomes.get(id)?;
        if plan.status != PlanStatus::Failed
            || !matches!(plan.kind, OutcomeKind::Install | OutcomeKind::VersionChange)
        {
            return None;
        }
        let version = plan.to_version.clone()?;
        let entity = self.entities.get(&plan.entity)?;
        if !policy.governs(&entity.product_id) {
            return None;
        }
        let k = wave_index(self, policy, entity);
        Some((
            version,
            HaltCause::PlanFailed {
                plan: plan.id.clone(),
                entity: entity.id.0.clone(),
                wave: policy.waves.get(k).map(|w| w.name.clone()),
            },
        ))
    }

    /// Canary `id` as a failure of a rollout under `policy`: failed while analysing a
    /// version of an entity of the group.
    fn canary_failure(&self, policy: &RolloutPolicy, id: &str) -> Option<(Version, HaltCause)> {
        let canary = self.canaries.get(id)?;
        if canary.status.phase != Phase::Failed {
            return None;
        }
        let version = canary.target.as_ref()?.version.clone();
        let entity = self.entities.get(&canary.entity)?;
        if !policy.governs(&entity.product_id) {
            return None;
        }
        let k = wave_index(self, policy, entity);
        Some((
            version,
            HaltCause::CanaryFailed {
                canary: canary.id.clone(),
                entity: entity.id.0.clone(),
                wave: policy.waves.get(k).map(|w| w.name.clone()),
                since_ms: canary.status.phase_started_ms,
            },
        ))
    }

    /// Asks the leader to re-evaluate every product of `policy`'s group.
    fn trigger_group(&self, policy: &str, tx: &mut Tx) {
        if let Some(p) = self.rollout_policies.get(policy) {
            for product in p.group() {
                tx.triggers.push(Trigger::Product(product.to_string()));
            }
        }
    }

    /// Runs after every command that succeeded: for each rollout policy the entry touched
    /// (an entity, plan or canary of its group, labels, environments, its releases or the
    /// policy itself), halts rollouts on new failures and commits which waves became done
    /// (their soak end) or undone before their soak ended. Deterministic: it reads only the
    /// state and the entry's time.
    // Long: sorting the changed keys by policy, then the two passes over each policy.
    pub(super) fn track_rollouts(&mut self, tx: &mut Tx) {
        if self.rollout_policies.is_empty() {
            return;
        }
        let all: BTreeSet<String> = self.rollout_policies.keys().cloned().collect();
        let mut touched: BTreeSet<String> = BTreeSet::new();
        let mut wake: BTreeSet<String> = BTreeSet::new();
        let mut failures: Vec<Failure> = Vec::new();
        let mut keys = tx.changed.clone();
        keys.sort();
        keys.dedup();
        let policy_of = |state: &State, entity: &str| -> Option<RolloutPolicy> {
            let e = state.entities.get(entity)?;
            state.rollout_policy_of(&e.product_id).cloned()
        };
        for key in &keys {
            match key {
                RecordKey::Entity(id) => match self.entities.get(id) {
                    Some(e) => {
                        if let Some(p) = self.rollout_policy_of(&e.product_id) {
                            touched.insert(p.product.clone());
                            // A later product of a group may wait for this one.
                            if !p.products.is_empty() {
                                wake.insert(p.product.clone());
                            }
                        }
                    }
                    // A removed entity may leave a wave done.
                    None => touched.extend(all.iter().cloned()),
                },
                // A plan issued or running: it takes a place under `maxParallel`. One that
                // finished in this entry has left the plan table and is its outcome below.
                RecordKey::Plan(id) => {
                    let Some(plan) = self.plans.get(id) else {
                        continue;
                    };
                    if let Some(policy) = policy_of(self, &plan.entity) {
                        touched.insert(policy.product.clone());
                    }
                }
                // A plan that finished in this entry (or an outcome forgotten, which is gone).
                RecordKey::PlanOutcome(id) => {
                    let Some(outcome) = self.plan_outcomes.get(id) else {
                        continue;
                    };
                    let Some(policy) = policy_of(self, &outcome.entity) else {
                        continue;
                    };
                    touched.insert(policy.product.clone());
                    // A finished plan frees a place under `maxParallel`.
                    wake.insert(policy.product.clone());
                    if let Some((version, cause)) = self.plan_failure(&policy, id) {
                        failures.push(self.failure(&policy, version, cause));
                    }
                }
                RecordKey::Canary(id) => {
                    let Some(canary) = self.canaries.get(id) else {
                        continue;
                    };
                    let Some(policy) = policy_of(self, &canary.entity) else {
                        continue;
                    };
                    touched.insert(policy.product.clone());
                    wake.insert(policy.product.clone());
                    if let Some((version, cause)) = self.canary_failure(&policy, id) {
                        failures.push(self.failure(&policy, version, cause));
                    }
                }
                RecordKey::Environment(_) | RecordKey::EnvironmentLabels(_) => {
                    touched.extend(all.iter().cloned());
                }
                RecordKey::Release(name) => {
                    if let Some(p) = name
                        .rsplit_once('@')
                        .and_then(|(product, _)| self.rollout_policy_of(product))
                    {
                        touched.insert(p.product.clone());
                    }
                }
                RecordKey::RolloutPolicy(product) if all.contains(product) => {
                    touched.insert(product.clone());
                }
                _ => {}
            }
        }
        let mut recalls = 0;
        for failure in failures {
            self.halt_on_failure(failure, &mut recalls, tx);
        }
        for policy in &touched {
            if self.commit_wave_progress(policy, tx) {
                wake.insert(policy.clone());
            }
        }
        // Failures halted rollouts: their groups are woken too.
        for key in &tx.changed {
            if let RecordKey::Rollout(name) = key {
                if let Some((product, _)) = name.rsplit_once('@') {
                    wake.insert(product.to_string());
                }
            }
        }
        for policy in &wake {
            self.trigger_group(policy, tx);
        }
    }

    /// A failure of `version` under `policy`, with what the entity's wave says to do.
    fn failure(&self, policy: &RolloutPolicy, version: Version, cause: HaltCause) -> Failure {
        let wave = match &cause {
            HaltCause::PlanFailed { wave, .. } | HaltCause::CanaryFailed { wave, .. } => {
                wave.as_deref()
            }
            HaltCause::Operator { .. } => None,
        };
        Failure {
            policy: policy.product.clone(),
            on_failure: wave
                .and_then(|w| policy.wave(w))
                .map_or(OnFailure::Halt, |w| w.on_failure),
            version,
            cause,
        }
    }

    /// Halts the failure's rollout unless it is halted already or the failure was forgiven;
    /// with `recall`, recalls the release of every product of the group that has it (and
    /// no recall covering it yet). Returns whether it halted.
    fn halt_on_failure(&mut self, failure: Failure, recalls: &mut usize, tx: &mut Tx) -> bool {
        let Failure {
            policy,
            version,
            cause,
            on_failure,
        } = failure;
        let key = (policy.clone(), version.clone());
        let mut rollout = self
            .rollouts
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Rollout::new(&policy, &version));
        let forgiven = cause
            .failure_key()
            .is_some_and(|k| rollout.forgiven.contains(&k));
        if rollout.halt.is_some() || forgiven {
            return false;
        }
        let mut ids = Vec::new();
        if on_failure == OnFailure::Recall {
            let group: Vec<String> = self
                .rollout_policies
                .get(&policy)
                .map(|p| p.group().map(str::to_string).collect())
                .unwrap_or_default();
            for product in group {
                if self.release(&product, &version).is_none()
                    || self.recall_covering(&product, &version).is_some()
                {
                    continue;
                }
                let id = loop {
                    let id = format!("r-{}-{}", tx.index, *recalls);
                    *recalls += 1;
                    if !self.recalls.contains_key(&id) {
                        break id;
                    }
                };
                self.put_recall(
                    Recall {
                        id: id.clone(),
                        product_id: product.clone(),
                        from: version.clone(),
                        to: version.clone(),
                        reason: format!("rollout of {policy}@{version} failed: {cause}"),
                        created_at_ms: tx.now,
                    },
                    tx,
                );
                ids.push(id);
            }
        }
        rollout.halt = Some(RolloutHalt {
            at_ms: tx.now,
            cause,
            recalls: ids,
        });
        self.rollouts.put(rollout, &mut tx.changed);
        true
    }

    /// Commits, for every version of `policy`'s group that its entities run or that has a
    /// rollout record, which waves became done at this entry (soak end = now + soak) and
    /// which were undone before their soak ended (cleared; the soak starts again when the
    /// wave is done again). A wave that has passed is never touched again. Returns whether
    /// a record changed.
    fn commit_wave_progress(&mut self, policy: &str, tx: &mut Tx) -> bool {
        let Some(policy) = self.rollout_policies.get(policy).cloned() else {
            return false;
        };
        let now = tx.now;
        let mut versions: BTreeSet<Version> = self
            .rollouts_of(&policy.product)
            .map(|r| r.version.clone())
            .collect();
        for product in policy.group() {
            for e in self.entities_of_product_everywhere(product) {
                if let Some(v) = &e.reported.version {
                    if self.release(product, v).is_some() {
                        versions.insert(v.clone());
                    }
                }
            }
        }
        let mut any = false;
        for version in versions {
            let key = (policy.product.clone(), version.clone());
            let old = self.rollouts.get(&key).cloned();
            let mut next = old
                .clone()
                .unwrap_or_else(|| Rollout::new(&policy.product, &version));
            let members = members(self, &policy, &version);
            for (wave, entities) in policy.waves.iter().zip(&members) {
                let progress = next.wave(&wave.name);
                if progress.passed_at(now) {
                    continue;
                }
                let done =
                    !entities.is_empty() && entities.iter().all(|e| is_done(self, e, &version));
                let updated = match (done, progress.completed_at_ms) {
                    (true, None) => WaveProgress {
                        completed_at_ms: Some(now),
                        soak_until_ms: Some(now.saturating_add(wave.soak_ms)),
                        promoted: None,
                    },
                    (false, Some(_)) => WaveProgress::default(),
                    _ => continue,
                };
                if updated == WaveProgress::default() {
                    next.waves.remove(&wave.name);
                } else {
                    next.waves.insert(wave.name.clone(), updated);
                }
            }
            let unchanged = match &old {
                Some(old) => *old == next,
                None => next == Rollout::new(&policy.product, &version),
            };
            if !unchanged {
                self.rollouts.put(next, &mut tx.changed);
                any = true;
            }
        }
        any
    }
}

/// `region=eu, tier=prod` (or `none`).
fn labels_text(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "none".to_string();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
