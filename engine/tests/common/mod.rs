//! Shared helpers for the orchestration and property tests: a [`Hub`] that applies commands
//! through the public API (checking determinism and persistence on every apply), builders for
//! environments, products, releases and entities, a leader step and an agent; in [`actors`],
//! commands as verified operators propose them.
#![allow(dead_code)]

pub mod actors;

use std::collections::BTreeMap;

use hub_engine::activity::{ActivityLine, ACTIVITY_KEPT};
use hub_engine::artifact::{ArtifactLocation, Availability};
use hub_engine::command::{
    EntityReport, EntitySettingsPatch, EnvironmentSettingsPatch, WindowSpec,
};
use hub_engine::entity::Health;
use hub_engine::evaluate::{evaluate, Evaluation};
use hub_engine::plan::{FailureMetadata, Plan, PlanStatus, TaskReport, TaskState};
use hub_engine::suppression::Scope;
use hub_engine::HistoryWrite;
use hub_engine::{
    Applied, Command, CommandError, CommandOutput, EntityId, EntityKind, Record, RecordKey,
    Request, State, TimestampMs,
};
use semver::Version;

/// Monday 2026-11-30T00:00:00Z.
pub const T0: TimestampMs = 1_795_996_800_000;
pub const MINUTE: TimestampMs = 60_000;
pub const HOUR: TimestampMs = 3_600_000;
pub const DAY: TimestampMs = 24 * HOUR;

pub const SHA: &str = "3f7a9c0d5e1b2a4c6d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c";

pub fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

/// `eid:<env>:helmChart:<name>`.
pub fn helm_id(env: &str, name: &str) -> String {
    EntityId::new(env, EntityKind::HelmChart, name).0
}

/// A product dependency for [`manifest`]: `(product id, minimum, maximum, optional)`.
pub type Dep<'a> = (&'a str, &'a str, &'a str, bool);

/// A release manifest with one relative artifact `<name>/<name>-<version>.tgz`.
pub fn manifest(product: &str, version: &str, deps: &[Dep<'_>]) -> String {
    let (group, name) = product.split_once(':').unwrap();
    let mut m = format!(
        "product-group: {group}\nproduct-name: {name}\nproduct-version: {version}\nartifacts:\n  - uri: {name}/{name}-{version}.tgz\n    sha256: {SHA}\n"
    );
    if !deps.is_empty() {
        m.push_str("extensions:\n  product-dependencies:\n");
        for (id, min, max, optional) in deps {
            let (g, n) = id.split_once(':').unwrap();
            m.push_str(&format!(
                "    - {{product-group: {g}, product-name: {n}, minimum-version: {min}, maximum-version: {max}, optional: {optional}}}\n"
            ));
        }
    }
    m
}

pub fn window(spec: &str) -> WindowSpec {
    WindowSpec {
        spec: spec.into(),
        time_zone: "UTC".into(),
    }
}

/// The commands applied to a hub, and every check that runs after each one.
pub struct Hub {
    pub state: State,
    /// The same log applied to a second state: every apply must give the same result.
    twin: State,
    /// What storage would hold if it persisted exactly `Applied.changed` and
    /// `Applied.history`.
    store: BTreeMap<RecordKey, Record>,
    pub index: u64,
    pub now: TimestampMs,
    /// What the leader's artifact checker has observed.
    pub artifacts: BTreeMap<ArtifactLocation, Availability>,
    /// Every request applied, in order, with its index.
    pub log: Vec<(Request, u64)>,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    pub fn new() -> Self {
        Hub {
            state: State::new(),
            twin: State::new(),
            store: BTreeMap::new(),
            index: 0,
            now: T0,
            artifacts: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    /// Applies `command` at the hub's time and checks: the twin state gives the same result;
    /// a refused command changes nothing; storage that persists exactly the changed keys
    /// rebuilds a state equal to this one (derived indexes included).
    pub fn apply(&mut self, command: Command) -> Applied {
        self.index += 1;
        let req = Request {
            command,
            time_ms: self.now,
            request_id: None,
        };
        let before = self.state.digest();
        let before_rows = audit_free_records(&self.state);
        let applied = self.state.apply(&req, self.index);
        let twin = self.twin.apply(&req, self.index);
        assert_eq!(applied, twin, "determinism: {req}");
        // A refused command of a verified actor is itself audited (a write-audit row, and
        // the entry clock that moves with it); nothing else changes.
        if applied.result.is_err() && matches!(req.command, Command::As { .. }) {
            assert!(
                applied.changed.iter().all(is_audit_key),
                "refused {req} changed {:?}",
                applied.changed
            );
            assert!(
                before_rows == audit_free_records(&self.state),
                "refused {req} changed the state beyond its audit row"
            );
        } else if applied.result.is_err() {
            assert!(
                applied.history.is_empty(),
                "refused {req} wrote history {:?}",
                applied.history
            );
            assert!(
                applied.changed.is_empty(),
                "refused {req} changed {:?}",
                applied.changed
            );
            assert_eq!(
                before,
                self.state.digest(),
                "refused {req} changed the state"
            );
        }
        for key in &applied.changed {
            match self.state.record(key) {
                Some(r) => self.store.insert(key.clone(), r),
                None => self.store.remove(key),
            };
        }
        for write in &applied.history {
            match write {
                HistoryWrite::Put(r) => self.store.insert(r.key(), (**r).clone()),
                HistoryWrite::Delete(key) => self.store.remove(key),
            };
        }
        for (entity, head) in self.state.activity_heads() {
            let kept = self.activity_lines(entity);
            let first = head.lines.saturating_sub(ACTIVITY_KEPT as u64);
            let seqs: Vec<u64> = kept.iter().map(|l| l.seq).collect();
            assert_eq!(
                seqs,
                (first..head.lines).collect::<Vec<_>>(),
                "stored Activity lines of {entity} after {req}"
            );
        }
        // Every kept outcome has its finished plan in history, and nothing else is kept.
        let finished: Vec<&str> = self
            .store
            .values()
            .filter_map(|r| match r {
                Record::FinishedPlan(p) => Some(p.id.as_str()),
                _ => None,
            })
            .collect();
        let mut outcomes: Vec<&str> = self.state.plan_outcomes().map(|o| o.id.as_str()).collect();
        outcomes.sort_unstable();
        let mut finished_sorted = finished.clone();
        finished_sorted.sort_unstable();
        assert_eq!(
            finished_sorted, outcomes,
            "finished plans in history after {req}"
        );
        for id in finished {
            let plan = self.finished_plan(id).expect("listed");
            assert_eq!(
                Some(&hub_engine::plan_outcome::PlanOutcome::of(&plan)),
                self.state.plan_outcome(id),
                "outcome of {id} after {req}"
            );
        }
        let rebuilt = State::from_records(self.store.values().cloned());
        assert!(
            rebuilt == self.state,
            "persisted changed keys do not rebuild the state after {req}"
        );
        let from_all = State::from_records(self.state.records());
        assert!(
            from_all == self.state,
            "from_records(records()) differs after {req}"
        );
        assert_eq!(self.state.digest(), self.twin.digest());
        self.log.push((req, self.index));
        applied
    }

    /// Applies a command that must succeed.
    pub fn ok(&mut self, command: Command) -> CommandOutput {
        let kind = command.kind();
        match self.apply(command).result {
            Ok(out) => out,
            Err(e) => panic!("{kind} refused: {e}"),
        }
    }

    /// Applies a command that must be refused, and checks it changed nothing (for a
    /// verified actor's command: nothing but its audit row, checked by [`Hub::apply`]).
    pub fn err(&mut self, command: Command) -> CommandError {
        if matches!(command, Command::As { .. }) {
            let kind = command.kind();
            let applied = self.apply(command);
            return match applied.result {
                Ok(out) => panic!("{kind} accepted: {out:?}"),
                Err(e) => e,
            };
        }
        let digest = self.state.digest();
        let snapshot = self.state.clone();
        let kind = command.kind();
        let applied = self.apply(command);
        assert!(applied.changed.is_empty());
        assert_eq!(self.state.digest(), digest);
        assert!(self.state == snapshot);
        match applied.result {
            Ok(out) => panic!("{kind} accepted: {out:?}"),
            Err(e) => e,
        }
    }

    pub fn advance(&mut self, ms: TimestampMs) {
        self.now += ms;
    }

    /// Sets the cluster's canary revision key, as a new leader does (fixed bytes here).
    pub fn set_revision_key(&mut self) -> Applied {
        let applied = self.apply(Command::SetClusterKey {
            name: hub_engine::cluster_key::CANARY_REVISION_KEY.into(),
            key: hub_engine::cluster_key::SecretKey::from_bytes([42; 32]),
        });
        assert!(applied.result.is_ok(), "{:?}", applied.result);
        applied
    }

    /// Replaces the state with one rebuilt from `records` (as a node that loads its store or
    /// a snapshot does), keeping the harness's twin and store consistent.
    /// Every record storage holds: the state's rows and history.
    pub fn stored_records(&self) -> impl Iterator<Item = &Record> {
        self.store.values()
    }

    pub fn load_records(&mut self, records: Vec<Record>) {
        self.state = State::from_records(records.iter().cloned());
        self.twin = State::from_records(records.iter().cloned());
        self.store = records.into_iter().map(|r| (r.key(), r)).collect();
    }

    pub fn set_time(&mut self, t: TimestampMs) {
        self.now = t;
    }

    // ---- builders ----

    pub fn env(&mut self, name: &str) {
        self.ok(Command::CreateEnvironment {
            name: name.into(),
            description: String::new(),
        });
    }

    pub fn env_settings(&mut self, env: &str, patch: EnvironmentSettingsPatch) {
        self.ok(Command::SetEnvironmentSettings {
            environment: env.into(),
            patch,
        });
    }

    pub fn entity_settings(&mut self, entity: &str, patch: EntitySettingsPatch) {
        self.ok(Command::SetEntitySettings {
            entity: entity.into(),
            patch,
        });
    }

    pub fn product(&mut self, id: &str) {
        self.ok(Command::CreateProduct {
            product_id: id.into(),
            description: String::new(),
        });
    }

    pub fn publish(&mut self, product: &str, version: &str, deps: &[Dep<'_>]) {
        self.ok(Command::PublishRelease {
            manifest: manifest(product, version, deps),
        });
    }

    /// A helm chart entity (namespace = name) on the default channel.
    pub fn helm(&mut self, env: &str, name: &str, product: &str) -> String {
        self.helm_on(env, name, product, None)
    }

    pub fn helm_on(
        &mut self,
        env: &str,
        name: &str,
        product: &str,
        channel: Option<&str>,
    ) -> String {
        match self.ok(Command::CreateEntity {
            environment: env.into(),
            kind: EntityKind::HelmChart,
            name: name.into(),
            product_id: product.into(),
            k8s_namespace: Some(name.into()),
            account_id: None,
            release_channel: channel.map(str::to_string),
        }) {
            CommandOutput::EntityCreated(id) => id,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// The agent reports what `entity` runs.
    pub fn report(&mut self, entity: &str, version: Option<&str>, health: Health) -> Applied {
        let env = self.state.entity(entity).unwrap().environment.clone();
        let config = version.map(|ver| {
            let e = self.state.entity(entity).unwrap();
            hub_engine::entity::config_sha256(e.config_for(&v(ver)))
        });
        let applied = self.apply(Command::ReportEntityStates {
            environment: env,
            states: vec![EntityReport {
                entity: entity.into(),
                version: version.map(v),
                health,
                config_sha256: config,
                secrets_revision: None,
                message: if health == Health::Error {
                    "crash loop".into()
                } else {
                    String::new()
                },
            }],
        });
        applied.result.as_ref().expect("report refused");
        applied
    }

    pub fn installed(&mut self, entity: &str, version: &str) {
        self.report(entity, Some(version), Health::Healthy);
    }

    pub fn suppress(&mut self, scope: Scope, until: TimestampMs) -> String {
        match self.ok(Command::CreateSuppression {
            scope,
            start_ms: None,
            end_ms: until,
            reason: "manual change".into(),
            cancel_active_plans: false,
            actor: "alice".into(),
        }) {
            CommandOutput::Changed { id, .. } => id,
            other => panic!("unexpected {other:?}"),
        }
    }

    // ---- the leader ----

    fn lookup(&self) -> impl Fn(&ArtifactLocation) -> Option<Availability> + '_ {
        |l: &ArtifactLocation| self.artifacts.get(l).cloned()
    }

    /// What the leader sees for `entity` now.
    pub fn eval(&self, entity: &str) -> Evaluation {
        self.eval_at(entity, self.now)
    }

    pub fn eval_at(&self, entity: &str, t: TimestampMs) -> Evaluation {
        let lookup = self.lookup();
        let e = evaluate(&self.state, entity, t, &lookup).expect("entity exists");
        let again = evaluate(&self.state, entity, t, &lookup).expect("entity exists");
        assert_eq!(e, again, "evaluate is a pure function");
        e
    }

    /// A leader step: evaluates every entity and proposes one `Evaluate` with the artifact
    /// statuses it observed. Returns the issued plan ids.
    pub fn step(&mut self) -> Vec<String> {
        let ids: Vec<String> = self.state.entities().map(|e| e.id.0.clone()).collect();
        self.step_entities(&ids)
    }

    pub fn step_entities(&mut self, ids: &[String]) -> Vec<String> {
        let mut observed: Vec<(ArtifactLocation, Availability)> = Vec::new();
        for id in ids {
            for l in self.eval(id).artifact_locations {
                if let Some(a) = self.artifacts.get(&l) {
                    if !observed.iter().any(|(o, _)| *o == l) {
                        observed.push((l, a.clone()));
                    }
                }
            }
        }
        match self.ok(Command::Evaluate {
            entities: ids.to_vec(),
            artifacts: observed,
        }) {
            CommandOutput::Evaluated { issued } => issued,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// A leader step for one entity; its issued plan, if any.
    pub fn step_one(&mut self, id: &str) -> Option<Plan> {
        let issued = self.step_entities(&[id.to_string()]);
        assert!(issued.len() <= 1);
        issued.first().map(|p| self.plan(p))
    }

    // ---- the agent ----

    /// A plan by id: active from the state, finished from history.
    pub fn plan(&self, id: &str) -> Plan {
        self.state
            .plan(id)
            .cloned()
            .or_else(|| self.finished_plan(id))
            .unwrap_or_else(|| panic!("no plan {id}"))
    }

    /// A kept finished plan from history (the store), by id.
    pub fn finished_plan(&self, id: &str) -> Option<Plan> {
        match self.store.get(&RecordKey::FinishedPlan(id.to_string())) {
            Some(Record::FinishedPlan(p)) => Some(p.clone()),
            Some(other) => panic!("{id}: history holds {:?}", other.key()),
            None => None,
        }
    }

    /// An entity's plans, the kept finished ones (oldest first) then the active one.
    pub fn plans_of(&self, entity: &str) -> Vec<Plan> {
        self.state
            .outcomes_of(entity)
            .map(|o| self.finished_plan(&o.id).expect("a kept outcome's plan"))
            .chain(self.state.active_plan_of(entity).cloned())
            .collect()
    }

    pub fn active(&self, entity: &str) -> Option<Plan> {
        self.state.active_plan_of(entity).cloned()
    }

    pub fn task(
        &mut self,
        plan_id: &str,
        task: &str,
        attempt: u32,
        state: TaskState,
        output: &str,
    ) -> Applied {
        let env = self.plan(plan_id).environment;
        self.apply(Command::ReportTask {
            environment: env,
            report: TaskReport {
                plan_id: plan_id.into(),
                task: task.into(),
                attempt,
                state,
                output: output.into(),
                failure: None,
            },
        })
    }

    /// The agent runs every task of the plan: attempt 1, succeeded.
    pub fn succeed(&mut self, plan_id: &str) {
        let names = self.plan(plan_id).kind.task_names();
        for name in names {
            let a = self.task(plan_id, name, 1, TaskState::Succeeded, "");
            a.result.expect("report refused");
        }
        assert_eq!(self.plan(plan_id).status, PlanStatus::Succeeded);
    }

    /// The agent fails task `stage` of the plan (earlier tasks succeed).
    pub fn fail(&mut self, plan_id: &str, stage: &str) {
        let names = self.plan(plan_id).kind.task_names();
        let env = self.plan(plan_id).environment;
        for name in names {
            if *name == stage {
                self.ok(Command::ReportTask {
                    environment: env.clone(),
                    report: TaskReport {
                        plan_id: plan_id.into(),
                        task: stage.into(),
                        attempt: 1,
                        state: TaskState::Failed,
                        output: format!("{stage} failed\n"),
                        failure: Some(FailureMetadata {
                            stage: stage.into(),
                            message: format!("{stage} went wrong"),
                            not_ready: vec!["deployment/web".into()],
                            validation_errors: Vec::new(),
                        }),
                    },
                });
                assert_eq!(self.plan(plan_id).status, PlanStatus::Failed);
                return;
            }
            self.task(plan_id, name, 1, TaskState::Succeeded, "")
                .result
                .expect("report refused");
        }
        panic!("plan {plan_id} has no task {stage}");
    }

    /// Issues the entity's plan (one leader step) and lets the agent succeed it.
    pub fn converge(&mut self, entity: &str) -> Plan {
        let p = self
            .step_one(entity)
            .unwrap_or_else(|| panic!("no plan for {entity}: {}", self.eval(entity).summary()));
        self.succeed(&p.id);
        self.plan(&p.id)
    }

    // ---- reading ----

    /// The stored Activity lines of an entity, oldest first.
    pub fn activity_lines(&self, entity: &str) -> Vec<ActivityLine> {
        let start = RecordKey::ActivityLine(ActivityLine::entity_prefix(entity));
        self.store
            .range(start..)
            .map_while(|(_, r)| match r {
                Record::ActivityLine(l) if l.entity == entity => Some(l.clone()),
                _ => None,
            })
            .collect()
    }

    /// The activity messages of an entity, oldest first, as `kind: message`.
    pub fn activity(&self, entity: &str) -> Vec<String> {
        self.activity_lines(entity)
            .into_iter()
            .map(|e| format!("{}: {}", e.kind, e.message))
            .collect()
    }

    pub fn activity_of_kind(&self, entity: &str, kind: &str) -> Vec<String> {
        self.activity_lines(entity)
            .into_iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.message)
            .collect()
    }

    /// Replays the whole log into a fresh state: the same digest.
    pub fn replay_digest(&self) -> String {
        let mut s = State::new();
        for (req, index) in &self.log {
            s.apply(req, *index);
        }
        s.digest()
    }
}

/// What the leader observes for a due tick of canary `c` (planned as `plan`, for `revision`)
/// when everything is healthy: the agent runs what the status says, every webhook answers
/// 200 and every metric is 99.5 (in range for the test canaries).
pub fn healthy_tick_input(
    c: &hub_engine::canary_record::Canary,
    plan: &hub_engine::canary::TickPlan,
    revision: &str,
) -> hub_engine::canary::TickInput {
    use hub_engine::canary::{TickInput, WebhookResult};
    let mut input = TickInput::new(revision);
    input.primary_revision = c.status.primary_revision.clone();
    input.canary_revision = c.status.canary_revision.clone();
    for w in &plan.webhooks {
        input
            .webhooks
            .insert(w.name.clone(), WebhookResult::from_status(200, "ok"));
    }
    for m in &plan.metrics {
        input.metrics.insert(m.name.clone(), Some(99_500));
    }
    input
}

/// Whether `key` is one a refused command of a verified actor writes: its write-audit row, the
/// audit's drop count, and the entry clock.
fn is_audit_key(key: &RecordKey) -> bool {
    matches!(
        key,
        RecordKey::WriteAudit(_) | RecordKey::AuditLog(_) | RecordKey::EntryClock(_)
    )
}

/// Every record of `state` but those [`is_audit_key`] names.
fn audit_free_records(state: &State) -> Vec<Record> {
    state
        .records()
        .filter(|r| !is_audit_key(&r.key()))
        .collect()
}
