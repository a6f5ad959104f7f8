//! The agent's main loops: long-poll the hub for plans, run each plan task by task through the
//! driver (journaling every step before reporting it), send reports until the hub
//! acknowledges them, and report observed entity state (SPEC P2, R4).
//!
//! Exactly once: a task recorded as finished in the journal never runs again; a task that was
//! running when the agent died runs again with the next attempt number (drivers make tasks
//! idempotent); reports carry `task:<plan>:<task>:<attempt>:<state>` as idempotency key, so a
//! report re-sent after a hub failover counts once. One plan per entity runs at a time.
//!
//! Every journaled task state is also appended to the execution log (`DATA/executions.jsonl`,
//! [`crate::execlog`]) right after the journal write, under the journal's lock, when the agent
//! has one: `started` before the task runs, `succeeded`/`failed` before the plan is marked
//! finished.
//!
//! `canary-step` plans run their `apply` task through the [`CanaryRunner`] (same journaling);
//! entity states are reported through [`CanaryRunner::overlay`] (a canary's target as its
//! primary workload, its workloads' pseudo-entities left out), and the canaries' observations
//! are sent every second with `Agent.ReportCanaries`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hub_log_limit::{Change, Limits, LogLimiter};
use hub_proto::EntityState;
use hub_wire::entity_state::ReportedState;
use tokio::sync::{Mutex, Notify, Semaphore};

use crate::canary::CanaryRunner;
use crate::driver::Driver;
use crate::execlog::{monotonic_ns, ExecLine, ExecLog, ExecState};
use crate::hub::{backoff, CallError, HubConnection};
use crate::journal::{JournalFile, TaskRecord};
use crate::metrics::Metrics;
use crate::plan::{Observed, PlanKind, PlanSpec, TaskFailure};
use crate::wire;

/// Most reports sent in one write.
pub const REPORT_BATCH: usize = 64;

/// Longest a state sample waits for the task reports in the outbox to be acknowledged.
pub const STATE_DEFER_LIMIT: Duration = Duration::from_secs(5);

/// How often the canaries' observations are sent.
pub const CANARY_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Tunables.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The environment it serves.
    pub environment: String,
    /// How long one plan fetch waits for a change at most (each waits a random 15/16 to all
    /// of it: [`poll_wait`]).
    pub poll_wait: Duration,
    /// How often observed state is compared and, when changed, reported.
    pub state_interval: Duration,
    /// Unchanged state is reported again this long (and up to half as long again, at random)
    /// after the hub last confirmed it.
    pub state_refresh: Duration,
    /// Plans run at once (for different entities).
    pub parallel_plans: usize,
    /// How long a report that finds the outbox idle waits, while a plan is running, for the
    /// reports that follow it (zero: at once; [`crate::linger`]). The wait ends when no plan
    /// runs any more, so a plan that ends within it costs one write, sent at its end; each
    /// report reaches the hub at most this much later.
    pub report_linger: Duration,
}

/// The agent's default [`AgentConfig::report_linger`].
pub const DEFAULT_REPORT_LINGER: Duration = Duration::from_millis(500);

/// One poll's wait: `longest` less a random part of up to a sixteenth of it (as Nomad
/// jitters its blocking queries). The replies of a rollout's burst start thousands of
/// agents' polls together; equal waits would keep their timeouts in step for good, each
/// round of them landing at once. A small share keeps the polls nearly as long, so idle
/// agents cost the hub hardly more polls.
pub fn poll_wait(longest: Duration) -> Duration {
    longest.saturating_sub((longest / 16).mul_f64(rand::random::<f64>()))
}

/// The ids a poll names as known after `reply` (what its fingerprint covers), or none when
/// the hub would refuse them as too many or too long (the poll is then answered by every
/// change of the set, as before the ids existed).
fn known_plan_ids(reply: &hub_proto::FetchPlansReply) -> Vec<String> {
    let fits = reply.plans.len() <= hub_proto::MAX_KNOWN_PLAN_IDS
        && reply
            .plans
            .iter()
            .all(|p| p.id.len() <= hub_proto::MAX_KNOWN_PLAN_ID_BYTES);
    if !fits {
        return Vec::new();
    }
    reply.plans.iter().map(|p| p.id.clone()).collect()
}

/// A running agent.
pub struct Agent {
    cfg: AgentConfig,
    hub: Arc<HubConnection>,
    driver: Arc<dyn Driver>,
    canary: Arc<CanaryRunner>,
    journal: Mutex<JournalFile>,
    /// The execution log; written under the `journal` lock, after the journal.
    exec_log: Option<std::sync::Mutex<ExecLog>>,
    metrics: Arc<Metrics>,
    outbox: Notify,
    /// entity -> (plan id, cancel flag) of the plan running for it.
    running: std::sync::Mutex<HashMap<String, (String, Arc<AtomicBool>)>>,
    /// Notified (all waiters) after a plan's entry left `running`.
    plan_ended: Notify,
    permits: Arc<Semaphore>,
    /// What the latest plan fetch listed; `None` before the first reply.
    listed: std::sync::Mutex<Option<Listed>>,
    /// The last state report sent, and what the hub records since.
    sent: std::sync::Mutex<SentStates>,
}

/// What one plan fetch listed: the hub's applied index at that reply, and per entity the
/// plan it listed (id, issued index). A state sample says from it which plans it reflects.
#[derive(Debug, Clone)]
struct Listed {
    applied_index: u64,
    plans: HashMap<String, (String, u64)>,
}

/// Which plans a state sample taken now reflects, per entity: every plan issued at or below
/// the latest reply's applied index (each one listed there has finished here, or the rest
/// had ended before it), except that an entity whose listed plan has not finished here
/// reflects only the plans issued before that one.
#[derive(Debug)]
struct Reflected {
    applied_index: u64,
    unfinished: HashMap<String, u64>,
}

impl Reflected {
    /// What a sample reflects after the fetch that listed `listed`, with `finished` saying
    /// which plans have finished here.
    fn of(listed: Listed, finished: impl Fn(&str) -> bool) -> Self {
        let unfinished = listed
            .plans
            .into_iter()
            .filter(|(_, (id, _))| !finished(id))
            .map(|(entity, (_, issued))| (entity, issued.saturating_sub(1)))
            .collect();
        Reflected {
            applied_index: listed.applied_index,
            unfinished,
        }
    }

    /// The highest issued index of `entity`'s plans the sample reflects.
    fn through(&self, entity: &str) -> u64 {
        self.unfinished
            .get(entity)
            .copied()
            .unwrap_or(self.applied_index)
    }
}

/// The last state report sent, and whether a new sample is due.
///
/// A sample is due when it differs from what the hub records, when `state_refresh` (and up to
/// half of it again, at random) has passed since the hub last confirmed what it records of
/// some entity, or when an entity that was sent while a plan of its had not finished here now
/// reflects more: the hub skips a sample older than a plan end it recorded, so without this an
/// unchanged entity whose sample was skipped would wait for the refresh.
///
/// What the hub records of an entity is the last sample sent, unless a `ReportTasks` reply
/// said more recently what it records ([`SentStates::recorded`]): a plan's success sets its
/// target as the entity's state, so the sample after it usually changes nothing there and is
/// not sent. Such a reply confirms the entity's record as a sent sample does: the refresh is
/// counted from the later of the two, per entity.
#[derive(Debug)]
struct SentStates {
    last: Vec<Observed>,
    at: Instant,
    /// Entities last sent below the fetched index (a plan of theirs unfinished), with what
    /// their samples said they reflect.
    held: HashMap<String, u64>,
    /// The hub's log index the last sample was applied (or read) at.
    acked_index: u64,
    /// The share of half the refresh period the next refresh comes late by (drawn at every
    /// send and every record): a rollout confirms a whole fleet's entities at once, and the
    /// refreshes after it spread over half a period instead of landing together.
    late: f64,
    /// Per entity, what the hub records as of a log index at or after `acked_index`, and when
    /// the reply said so.
    recorded: HashMap<String, (ReportedState, u64, Instant)>,
}

impl SentStates {
    fn new(now: Instant) -> Self {
        SentStates {
            last: Vec::new(),
            at: now,
            held: HashMap::new(),
            acked_index: 0,
            late: rand::random::<f64>(),
            recorded: HashMap::new(),
        }
    }

    /// Whether `observed`, reflecting `reflected`, is to be sent at `now`.
    fn due(
        &self,
        observed: &[Observed],
        reflected: &Reflected,
        now: Instant,
        refresh: Duration,
    ) -> bool {
        if observed.is_empty() {
            return false;
        }
        !self.hub_has(observed)
            || now.duration_since(self.confirmed(observed))
                >= refresh + (refresh / 2).mul_f64(self.late)
            || self
                .held
                .iter()
                .any(|(entity, through)| reflected.through(entity) != *through)
    }

    /// Whether sending `observed` would change nothing the hub records: each entity changes
    /// nothing of what a reply said the hub records since the last sample, or else is as it
    /// was sent (without such a reply: the whole sample is the one sent).
    fn hub_has(&self, observed: &[Observed]) -> bool {
        if self.recorded.is_empty() {
            return observed == self.last.as_slice();
        }
        // An entity no longer observed is not reported either way: the hub keeps its record.
        observed.iter().all(|o| match self.recorded.get(&o.entity) {
            Some((recorded, _, _)) => !wire::changes_recorded(o, recorded),
            None => self.last.contains(o),
        })
    }

    /// Records `observed`, reflecting `reflected`, as sent at `now` and applied (or read) at
    /// the hub's log index `index`.
    fn sent(&mut self, observed: Vec<Observed>, reflected: &Reflected, now: Instant, index: u64) {
        self.held = observed
            .iter()
            .filter_map(|o| {
                let through = *reflected.unfinished.get(&o.entity)?;
                Some((o.entity.clone(), through))
            })
            .collect();
        self.last = observed;
        self.at = now;
        self.late = rand::random::<f64>();
        self.acked_index = self.acked_index.max(index);
        // A record read before the sample applied is older than it.
        self.recorded.retain(|_, (_, at, _)| *at >= index);
    }

    /// Records `observed` as refused at `now`: not sent again before it changes or the
    /// refresh.
    fn refused(&mut self, observed: Vec<Observed>, now: Instant) {
        self.held.clear();
        self.last = observed;
        self.at = now;
        self.recorded.clear();
    }

    /// Takes what the hub records of some entities as of log index `index` (a `ReportTasks`
    /// reply). A record older than the last sample's application is ignored: that sample may
    /// have changed it. A newer one also settles a held entity: the hub has applied (or
    /// skipped) its sample and recorded the plan's end since.
    fn recorded(&mut self, states: Vec<(String, ReportedState)>, index: u64, now: Instant) {
        if index < self.acked_index {
            return;
        }
        if states.is_empty() {
            return;
        }
        for (entity, state) in states {
            self.held.remove(&entity);
            self.recorded.insert(entity, (state, index, now));
        }
        self.late = rand::random::<f64>();
    }

    /// When the hub's record of every entity of `observed` was last confirmed: by the last
    /// sample sent, or later by a reply that said what it records.
    fn confirmed(&self, observed: &[Observed]) -> Instant {
        observed
            .iter()
            .map(|o| match self.recorded.get(&o.entity) {
                Some((_, _, when)) => (*when).max(self.at),
                None => self.at,
            })
            .min()
            .unwrap_or(self.at)
    }
}

impl Agent {
    /// An agent over an opened journal, without an execution log; its canaries' state lives
    /// beside the journal (`DATA/canary/`).
    pub fn new(
        cfg: AgentConfig,
        hub: Arc<HubConnection>,
        driver: Arc<dyn Driver>,
        journal: JournalFile,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Self::with_exec_log(cfg, hub, driver, journal, None, metrics)
    }

    /// [`Agent::new`] that also appends every task event to `exec_log` (reconcile it with the
    /// journal first: [`ExecLog::reconcile`]).
    pub fn with_exec_log(
        cfg: AgentConfig,
        hub: Arc<HubConnection>,
        driver: Arc<dyn Driver>,
        journal: JournalFile,
        exec_log: Option<ExecLog>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let permits = Arc::new(Semaphore::new(cfg.parallel_plans.max(1)));
        let canary = Arc::new(CanaryRunner::new(
            journal.data_dir(),
            &cfg.environment,
            driver.clone(),
        ));
        metrics.serve_canaries(&canary);
        metrics
            .outbox
            .store(journal.journal().outbox.len() as u64, Ordering::Relaxed);
        Arc::new(Self {
            cfg,
            hub,
            driver,
            canary,
            journal: Mutex::new(journal),
            exec_log: exec_log.map(std::sync::Mutex::new),
            metrics,
            outbox: Notify::new(),
            running: std::sync::Mutex::new(HashMap::new()),
            plan_ended: Notify::new(),
            permits,
            listed: std::sync::Mutex::new(None),
            sent: std::sync::Mutex::new(SentStates::new(Instant::now())),
        })
    }

    /// The canary runner.
    pub fn canaries(&self) -> &Arc<CanaryRunner> {
        &self.canary
    }

    /// Runs every loop until the process ends.
    pub async fn run(self: Arc<Self>) {
        let canary = self.canary.clone();
        tokio::spawn(async move { canary.resume().await });
        tokio::spawn(self.clone().send_reports());
        tokio::spawn(self.clone().report_states());
        tokio::spawn(self.clone().report_canaries());
        self.fetch_loop().await;
    }

    /// Folds the journal's log into its checkpoint ([`JournalFile::save`]): a clean stop
    /// leaves the whole journal in `journal.json`.
    pub async fn fold_journal(&self) -> Result<(), crate::journal::JournalError> {
        self.journal.lock().await.save()
    }

    /// Polls for plans and starts each new one. Each poll names the plans it knows, so the
    /// end of one this agent ran does not answer it (the agent knows; the hub would only send
    /// the smaller set).
    async fn fetch_loop(self: Arc<Self>) {
        let mut fingerprint = String::new();
        let mut known_ids: Vec<String> = Vec::new();
        let mut failures = 0u32;
        // A hub that stays away is logged once, then every 30 s, and once when it is back.
        let mut quiet: LogLimiter<(), &'static str> = LogLimiter::new(Limits::DEFAULT);
        // A plan this agent cannot read is logged once, not at every fetch that lists it.
        let mut unreadable: LogLimiter<String, ()> = LogLimiter::new(Limits::DEFAULT);
        loop {
            let fetched = self
                .hub
                .fetch(
                    &self.cfg.environment,
                    &fingerprint,
                    &known_ids,
                    poll_wait(self.cfg.poll_wait),
                )
                .await;
            log_fetch(&mut quiet, &fetched);
            let Ok(reply) = fetched else {
                tokio::time::sleep(backoff(failures)).await;
                failures = failures.saturating_add(1);
                continue;
            };
            failures = 0;
            fingerprint = reply.fingerprint.clone();
            known_ids = known_plan_ids(&reply);
            // Before any listed plan starts, so a state sample never counts a plan as ended
            // that it cannot reflect.
            *self.listed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Listed {
                applied_index: reply.applied_index,
                plans: reply
                    .plans
                    .iter()
                    .map(|p| (p.entity.clone(), (p.id.clone(), p.issued_index)))
                    .collect(),
            });
            let registries = wire::registries(&reply);
            // Every plan listed counts as listed, even one this agent cannot read (so a
            // running plan is not taken for cancelled); an unreadable one is not run.
            let listed: BTreeMap<&str, &hub_proto::AgentPlan> =
                reply.plans.iter().map(|p| (p.id.as_str(), p)).collect();
            // Plans no longer listed were cancelled (or finished): stop before their next task.
            {
                let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                for (plan, cancel) in running.values() {
                    if !listed.contains_key(plan.as_str()) {
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
            }
            unreadable.retain(|id| listed.contains_key(id.as_str()));
            for (i, plan) in reply.plans.iter().enumerate() {
                let plan = match wire::plan(plan, &registries, &format!("plans[{i}]")) {
                    Ok(p) => p,
                    Err(e) => {
                        if let Some(n) = unreadable.failed(&plan.id, (), Instant::now()) {
                            tracing::warn!(plan = %plan.id, error = %e, listed = n.repeats, "plan refused: not run");
                        }
                        continue;
                    }
                };
                if self.journal.lock().await.is_finished(&plan.spec.id) {
                    continue;
                }
                let cancel = {
                    let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                    if running.contains_key(&plan.spec.entity) {
                        continue;
                    }
                    let cancel = Arc::new(AtomicBool::new(false));
                    running.insert(
                        plan.spec.entity.clone(),
                        (plan.spec.id.clone(), cancel.clone()),
                    );
                    cancel
                };
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0);
                self.metrics
                    .delivery
                    .observe(now_ms.saturating_sub(plan.issued_ms).max(0) as u64);
                let wire::FetchedPlan { spec, hub_done, .. } = plan;
                let agent = self.clone();
                tokio::spawn(async move {
                    let entity = spec.entity.clone();
                    agent.run_plan(spec, hub_done, cancel).await;
                    agent
                        .running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&entity);
                    // The plan's last reports are journaled: a report lingering for them goes.
                    agent.plan_ended.notify_waiters();
                });
            }
        }
    }

    /// Journals a task state, then logs it in the execution log (under the journal lock, so
    /// the log's order is the journal's). `false`: neither could be written durably.
    async fn record(
        &self,
        spec: &PlanSpec,
        task: &str,
        record: TaskRecord,
        output: String,
    ) -> bool {
        let plan = spec.id.as_str();
        let mut journal = self.journal.lock().await;
        let line = ExecLine {
            plan: plan.to_string(),
            entity: spec.entity.clone(),
            task: task.to_string(),
            attempt: record.attempt(),
            state: match record {
                TaskRecord::Running { .. } => ExecState::Started,
                TaskRecord::Succeeded { .. } => ExecState::Succeeded,
                TaskRecord::Failed { .. } => ExecState::Failed,
            },
            at_ns: 0,
        };
        if let Err(e) = journal.record(plan, task, record, output) {
            // Without a durable journal the agent cannot promise exactly-once: stop here.
            tracing::error!(error = %e, plan, task, "cannot write the journal; not running the plan");
            return false;
        }
        self.metrics.outbox.fetch_add(1, Ordering::Relaxed);
        self.outbox.notify_one();
        let Some(log) = &self.exec_log else {
            return true;
        };
        let line = ExecLine {
            at_ns: monotonic_ns(),
            ..line
        };
        match log.lock().unwrap_or_else(|p| p.into_inner()).append(&line) {
            Ok(()) => true,
            Err(e) => {
                // The log must show every journaled state: go no further than it does.
                tracing::error!(error = %e, plan, task, "cannot write the execution log; not running the plan");
                false
            }
        }
    }

    async fn run_plan(&self, spec: PlanSpec, hub_done: Vec<String>, cancel: Arc<AtomicBool>) {
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return;
        };
        self.metrics.inc(&self.metrics.plans_started);
        tracing::info!(plan = %spec.id, entity = %spec.entity, kind = %spec.kind, to = %spec.to_version, "running plan");
        for task in spec.tasks.clone() {
            if cancel.load(Ordering::Relaxed) {
                tracing::info!(plan = %spec.id, "plan cancelled by the hub; stopping");
                let _ = self.journal.lock().await.abandon(&spec.id);
                return;
            }
            let attempt = {
                let j = self.journal.lock().await;
                match j.task(&spec.id, &task) {
                    Some(TaskRecord::Succeeded { .. }) => continue,
                    Some(TaskRecord::Failed { .. }) => {
                        drop(j);
                        let _ = self.journal.lock().await.finish(&spec.id);
                        return;
                    }
                    Some(TaskRecord::Running { attempt }) => attempt + 1,
                    None if hub_done.contains(&task) => continue,
                    None => 1,
                }
            };
            if !self
                .record(
                    &spec,
                    &task,
                    TaskRecord::Running { attempt },
                    format!("{task} started (attempt {attempt})\n"),
                )
                .await
            {
                return;
            }
            self.metrics.inc(&self.metrics.tasks_run);
            let started = Instant::now();
            let result = if spec.kind == PlanKind::CanaryStep {
                self.canary.run_task(&spec, &task).await
            } else {
                // A deleted canary's proxy and workloads make way for the entity's plan.
                match self.canary.hand_over(&spec, &task).await {
                    Ok(handed) => self.driver.run_task(&spec, &task).await.map(|mut o| {
                        o.output.insert_str(0, &handed);
                        o
                    }),
                    Err(f) => Err(f),
                }
            };
            let ms = started.elapsed().as_millis();
            match result {
                Ok(outcome) => {
                    let mut output = outcome.output;
                    output.push_str(&format!("{task} succeeded in {ms} ms\n"));
                    if !self
                        .record(&spec, &task, TaskRecord::Succeeded { attempt }, output)
                        .await
                    {
                        return;
                    }
                }
                Err(failure) => {
                    tracing::warn!(plan = %spec.id, task, stage = %failure.stage, error = %failure.message, "task failed");
                    let output = format!(
                        "{}{task} failed after {ms} ms: {}\n",
                        failure.output, failure.message
                    );
                    let failure = TaskFailure {
                        output: String::new(),
                        ..failure
                    };
                    if self
                        .record(
                            &spec,
                            &task,
                            TaskRecord::Failed { attempt, failure },
                            output,
                        )
                        .await
                    {
                        let _ = self.journal.lock().await.finish(&spec.id);
                    }
                    self.metrics.inc(&self.metrics.plans_failed);
                    return;
                }
            }
        }
        if self.journal.lock().await.finish(&spec.id).is_ok() {
            self.metrics.inc(&self.metrics.plans_succeeded);
            tracing::info!(plan = %spec.id, "plan succeeded");
        }
    }

    /// Sends queued reports in order, as many as are queued (up to [`REPORT_BATCH`]) in one
    /// write, until the hub acknowledges them. A report that finds the outbox idle waits,
    /// while a plan runs, up to [`AgentConfig::report_linger`] for the ones that follow it
    /// ([`crate::linger`]); while writes are in flight the reports queued meanwhile go out
    /// together anyway.
    async fn send_reports(self: Arc<Self>) {
        let mut failures = 0u32;
        let mut refusals: LogLimiter<(), ()> = LogLimiter::new(Limits::DEFAULT);
        loop {
            let batch = self.journal.lock().await.next_reports(REPORT_BATCH);
            if batch.is_empty() {
                self.outbox.notified().await;
                let running = || {
                    !self
                        .running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_empty()
                };
                crate::linger::while_plans_run(running, &self.plan_ended, self.cfg.report_linger)
                    .await;
                continue;
            }
            match self.hub.report_tasks(&self.cfg.environment, &batch).await {
                Ok(ack) => {
                    refusals.succeeded(&(), Instant::now());
                    let refused = ack.refused;
                    self.sent
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .recorded(ack.recorded, ack.recorded_index, Instant::now());
                    failures = 0;
                    self.metrics
                        .reports_sent
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    self.metrics.inc(&self.metrics.report_writes);
                    if !refused.is_empty() {
                        // A plan gone (cancelled and forgotten) or an invalid report:
                        // retrying cannot help; the hub applied the others.
                        for r in &refused {
                            match r {
                                Ok(r) => tracing::warn!(
                                    plan = %r.plan_id,
                                    task = %r.task,
                                    reason = r.reason.label(),
                                    message = %r.message,
                                    "report refused"
                                ),
                                Err(e) => tracing::warn!(error = %e, "report refused"),
                            }
                        }
                        self.metrics.inc(&self.metrics.reports_refused);
                    }
                }
                Err(CallError::Refused(reason)) => {
                    // Each batch is refused once, but a hub that refuses this agent refuses
                    // every batch: said once, then every 30 s.
                    if let Some(n) = refusals.failed(&(), (), Instant::now()) {
                        tracing::warn!(%reason, reports = batch.len(), batches = n.repeats, "reports refused");
                    }
                    self.metrics.inc(&self.metrics.reports_refused);
                }
                Err(CallError::Retry(reason)) => {
                    tracing::debug!(%reason, "reports not delivered; retrying");
                    self.metrics.inc(&self.metrics.report_retries);
                    tokio::time::sleep(backoff(failures)).await;
                    failures = failures.saturating_add(1);
                    continue;
                }
            }
            if let Err(e) = self.journal.lock().await.acknowledge_many(&batch) {
                tracing::error!(error = %e, "cannot write the journal");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            self.metrics
                .outbox
                .fetch_sub(batch.len() as u64, Ordering::Relaxed);
        }
    }

    /// Which plans a state sample taken now reflects ([`Reflected`]); `None` before the
    /// first plan fetch.
    async fn reflected(&self) -> Option<Reflected> {
        let listed = self
            .listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let journal = self.journal.lock().await;
        Some(Reflected::of(listed, |id| journal.is_finished(id)))
    }

    /// Reports what the driver observes when it changes (and every `state_refresh`), once
    /// the first plan fetch has answered: a sample always says which plans it reflects, so
    /// the hub can skip a stale one ([`SentStates`]).
    async fn report_states(self: Arc<Self>) {
        let mut seq = 0u64;
        let boot = format!("{}-{}", std::process::id(), rand::random::<u32>());
        let mut deferred_since: Option<Instant> = None;
        let mut refusals: LogLimiter<(), ()> = LogLimiter::new(Limits::DEFAULT);
        loop {
            tokio::time::sleep(self.cfg.state_interval).await;
            // What the sample reflects is read before the sample: a plan that ends in between
            // counts as not reflected (its end, once recorded, makes the hub skip the sample).
            let Some(reflected) = self.reflected().await else {
                continue;
            };
            // Task reports not yet acknowledged may end a plan, and their acknowledgement says
            // what the hub then records: a sample now would mostly tell it what the plan's
            // success will. It waits for a later tick, for at most STATE_DEFER_LIMIT (a hub that
            // keeps failing the reports does not silence the samples).
            if self.journal.lock().await.journal().outbox.is_empty() {
                deferred_since = None;
            } else {
                let since = *deferred_since.get_or_insert_with(Instant::now);
                if since.elapsed() < STATE_DEFER_LIMIT {
                    continue;
                }
            }
            let observed = self.canary.overlay(self.driver.observe().await);
            self.metrics.inc(&self.metrics.state_samples);
            let due = self.sent.lock().unwrap_or_else(|p| p.into_inner()).due(
                &observed,
                &reflected,
                Instant::now(),
                self.cfg.state_refresh,
            );
            if !due {
                continue;
            }
            seq += 1;
            let request_id = format!("states:{}:{boot}:{seq}", self.cfg.environment);
            let states: Vec<EntityState> = observed
                .iter()
                .map(|o| wire::entity_state(o, Some(reflected.through(&o.entity))))
                .collect();
            let mut failures = 0u32;
            loop {
                match self
                    .hub
                    .report_states(&self.cfg.environment, states.clone(), &request_id)
                    .await
                {
                    Ok(index) => {
                        refusals.succeeded(&(), Instant::now());
                        self.metrics.inc(&self.metrics.state_reports);
                        self.sent.lock().unwrap_or_else(|p| p.into_inner()).sent(
                            observed,
                            &reflected,
                            Instant::now(),
                            index,
                        );
                        break;
                    }
                    Err(CallError::Refused(reason)) => {
                        if let Some(n) = refusals.failed(&(), (), Instant::now()) {
                            tracing::warn!(%reason, reports = n.repeats, "state report refused");
                        }
                        self.sent
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .refused(observed, Instant::now());
                        break;
                    }
                    Err(CallError::Retry(_)) => {
                        tokio::time::sleep(backoff(failures)).await;
                        failures = failures.saturating_add(1);
                    }
                }
            }
        }
    }

    /// Sends the canaries' observations every [`CANARY_REPORT_INTERVAL`] (nothing while no
    /// canary is managed). A report the hub does not take within a few intervals is dropped
    /// for a fresh one.
    async fn report_canaries(self: Arc<Self>) {
        let mut seq = 0u64;
        let boot = format!("{}-{}", std::process::id(), rand::random::<u32>());
        let mut refusals: LogLimiter<(), ()> = LogLimiter::new(Limits::DEFAULT);
        loop {
            tokio::time::sleep(CANARY_REPORT_INTERVAL).await;
            let observations = self.canary.observations().await;
            if observations.is_empty() {
                continue;
            }
            seq += 1;
            let request_id = format!("canaries:{}:{boot}:{seq}", self.cfg.environment);
            let started = Instant::now();
            let mut failures = 0u32;
            loop {
                match self
                    .hub
                    .report_canaries(&self.cfg.environment, observations.clone(), &request_id)
                    .await
                {
                    Ok(()) => {
                        refusals.succeeded(&(), Instant::now());
                        break;
                    }
                    Err(CallError::Refused(reason)) => {
                        if let Some(n) = refusals.failed(&(), (), Instant::now()) {
                            tracing::warn!(%reason, canaries = observations.len(), reports = n.repeats, "canary report refused");
                        }
                        break;
                    }
                    Err(CallError::Retry(reason)) => {
                        if started.elapsed() >= CANARY_REPORT_INTERVAL * 5 {
                            tracing::debug!(%reason, "canary report not delivered; sending a fresh one");
                            break;
                        }
                        tokio::time::sleep(backoff(failures)).await;
                        failures = failures.saturating_add(1);
                    }
                }
            }
        }
    }
}

/// Logs how a plan fetch went through `quiet`: a failure when it begins or changes kind
/// (failing or refused), then at most every 30 s; the first success after.
fn log_fetch<T>(quiet: &mut LogLimiter<(), &'static str>, fetched: &Result<T, CallError>) {
    let now = Instant::now();
    let e = match fetched {
        Ok(_) => {
            if let Some(n) = quiet.succeeded(&(), now) {
                let after_ms = n.lasted.as_millis() as u64;
                tracing::info!(after_ms, "plan fetches work again");
            }
            return;
        }
        Err(e) => e,
    };
    let kind = match e {
        CallError::Retry(_) => "failed",
        CallError::Refused(_) => "refused",
    };
    let Some(n) = quiet.failed(&(), kind, now) else {
        return;
    };
    let for_ms = n.lasted.as_millis() as u64;
    match n.change {
        Change::Began => tracing::warn!(error = %e, "plan fetch {kind}; retrying with back-off"),
        _ => tracing::warn!(error = %e, for_ms, attempts = n.repeats, "plan fetches still {kind}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_proto::{
        AgentPlan, CanaryHeaderMatch, CanaryMatchRule, CanaryStep, CanaryWorkload, PlanArtifact,
        PlanSecret,
    };

    /// What the fetch loop runs of a fetched plan.
    fn to_spec(p: &AgentPlan, registries: &[crate::plan::Registry]) -> PlanSpec {
        wire::plan(p, registries, "plans[0]").unwrap().spec
    }

    #[test]
    fn poll_waits_are_spread_over_the_last_sixteenth() {
        let longest = Duration::from_secs(10);
        let waits: std::collections::BTreeSet<Duration> =
            (0..100).map(|_| poll_wait(longest)).collect();
        assert!(
            waits
                .iter()
                .all(|w| (Duration::from_millis(9_375)..=longest).contains(w)),
            "{waits:?}"
        );
        assert!(waits.len() > 50, "{} distinct waits of 100", waits.len());
        assert_eq!(poll_wait(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_poll_names_the_last_replys_plans_unless_the_hub_would_refuse_them() {
        let plan = |id: String| AgentPlan {
            id,
            ..Default::default()
        };
        let mut reply = hub_proto::FetchPlansReply {
            plans: vec![plan("p-7-0".into()), plan("p-9-1".into())],
            ..Default::default()
        };
        assert_eq!(known_plan_ids(&reply), ["p-7-0", "p-9-1"]);
        reply
            .plans
            .push(plan("p".repeat(hub_proto::MAX_KNOWN_PLAN_ID_BYTES + 1)));
        assert!(known_plan_ids(&reply).is_empty());
        reply.plans = (0..=hub_proto::MAX_KNOWN_PLAN_IDS)
            .map(|i| plan(format!("p-{i}-0")))
            .collect();
        assert!(known_plan_ids(&reply).is_empty());
        reply.plans.pop();
        assert_eq!(known_plan_ids(&reply).len(), hub_proto::MAX_KNOWN_PLAN_IDS);
    }

    /// A canary-step plan as `FetchPlans` sends it.
    fn canary_plan() -> AgentPlan {
        AgentPlan {
            id: "p-1".into(),
            entity: "eid:prod:helmChart:web".into(),
            kind: hub_proto::PlanKind::CanaryStep as i32,
            status: hub_proto::PlanStatus::Issued as i32,
            secrets: vec![PlanSecret {
                name: "token".into(),
                value: "v".into(),
            }],
            canary: Some(CanaryStep {
                canary: "prod/web".into(),
                service: "web".into(),
                port: 8080,
                step: 3,
                phase: "Progressing".into(),
                primary: Some(CanaryWorkload {
                    revision: "r1".into(),
                    version: "1.0.0".into(),
                    config: "port: 8080\n".into(),
                    artifacts: vec![PlanArtifact {
                        uri: "demo/a.tar.gz".into(),
                        sha256: "ab".repeat(32),
                    }],
                    secrets_revision: 2,
                }),
                canary_workload: None,
                canary_weight: 10,
                match_routing: true,
                r#match: vec![CanaryMatchRule {
                    headers: vec![CanaryHeaderMatch {
                        name: "x-canary".into(),
                        op: "exact".into(),
                        value: "insider".into(),
                    }],
                }],
                restore_original: false,
                metric_windows_ms: vec![60_000],
                baseline: None,
                loads: Vec::new(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_sample_reflects_the_fetched_index_except_below_an_unfinished_plan() {
        let listed = Listed {
            applied_index: 50,
            plans: HashMap::from([
                ("done".to_string(), ("p-40-0".to_string(), 40)),
                ("running".to_string(), ("p-45-0".to_string(), 45)),
            ]),
        };
        let r = Reflected::of(listed, |id| id == "p-40-0");
        assert_eq!(r.through("done"), 50, "its listed plan finished here");
        assert_eq!(r.through("running"), 44, "not the plan still running");
        assert_eq!(r.through("idle"), 50, "no plan listed");
    }

    /// The entity `web` at `version`, healthy, nothing else known.
    fn web(version: &str) -> Observed {
        Observed {
            entity: "web".into(),
            version: Some(version.into()),
            health: crate::plan::Health::Healthy,
            config_sha256: None,
            secrets_revision: None,
            message: String::new(),
        }
    }

    /// What a sample reflects when the latest fetch (at index 50) listed no plan.
    fn idle() -> Reflected {
        Reflected::of(
            Listed {
                applied_index: 50,
                plans: HashMap::new(),
            },
            |_| true,
        )
    }

    #[test]
    fn a_sample_sent_below_an_unfinished_plan_is_sent_again_once_the_plan_finished() {
        let observed = |version: &str| vec![web(version)];
        let listed = || Listed {
            applied_index: 50,
            plans: HashMap::from([("web".to_string(), ("p-45-0".to_string(), 45))]),
        };
        let refresh = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut sent = SentStates::new(t0);
        let running = Reflected::of(listed(), |_| false);
        assert!(
            sent.due(&observed("2"), &running, t0, refresh),
            "first sample"
        );
        sent.sent(observed("2"), &running, t0, 51);
        // The same sample while the plan runs: not due.
        assert!(!sent.due(&observed("2"), &running, t0, refresh));
        // The plan finished here: the same sample now reflects it, and is due once.
        let finished = Reflected::of(listed(), |_| true);
        assert!(sent.due(&observed("2"), &finished, t0, refresh));
        sent.sent(observed("2"), &finished, t0, 52);
        assert!(!sent.due(&observed("2"), &finished, t0, refresh));
        // A change, and the refresh, are due as before; an empty sample never is.
        assert!(sent.due(&observed("3"), &finished, t0, refresh));
        assert!(sent.due(&observed("2"), &finished, t0 + refresh * 3 / 2, refresh));
        assert!(!sent.due(&[], &finished, t0 + refresh * 3 / 2, refresh));
        // A refused report is not sent again for the plan's end.
        sent.refused(observed("2"), t0);
        assert!(!sent.due(&observed("2"), &finished, t0, refresh));
        let mut refused = SentStates::new(t0);
        refused.refused(observed("2"), t0);
        assert!(!refused.due(&observed("2"), &finished, t0, refresh));
    }

    #[test]
    fn a_sample_the_hub_already_records_after_a_plan_is_not_sent() {
        let observed = |version: &str, health: crate::plan::Health| {
            vec![Observed {
                health,
                config_sha256: Some("c2".into()),
                ..web(version)
            }]
        };
        let healthy = crate::plan::Health::Healthy;
        let recorded = |version: &str| {
            vec![(
                "web".to_string(),
                ReportedState {
                    version: Some(semver::Version::parse(version).unwrap()),
                    health: healthy,
                    config_sha256: Some("c2".into()),
                    secrets_revision: 3,
                    message: String::new(),
                    reported_at_ms: None,
                },
            )]
        };
        let idle = idle();
        let refresh = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut sent = SentStates::new(t0);
        sent.sent(observed("1.0.0", healthy), &idle, t0, 40);
        // The upgrade's success: the hub records 2.0.0 as of index 60.
        assert!(sent.due(&observed("2.0.0", healthy), &idle, t0, refresh));
        sent.recorded(recorded("2.0.0"), 60, t0);
        assert!(
            !sent.due(&observed("2.0.0", healthy), &idle, t0, refresh),
            "the hub records it already"
        );
        assert!(
            sent.due(
                &observed("2.0.0", crate::plan::Health::Error),
                &idle,
                t0,
                refresh
            ),
            "what the hub does not record is sent"
        );
        assert!(
            sent.due(&observed("1.0.0", healthy), &idle, t0, refresh),
            "the last sample sent is no longer what the hub records"
        );
        assert!(
            sent.due(
                &observed("2.0.0", healthy),
                &idle,
                t0 + refresh * 3 / 2,
                refresh
            ),
            "the refresh still goes"
        );
        // A sample applied after the record replaces it; an older record then changes nothing.
        sent.sent(observed("2.0.0", crate::plan::Health::Error), &idle, t0, 70);
        assert!(sent.due(&observed("2.0.0", healthy), &idle, t0, refresh));
        sent.recorded(recorded("2.0.0"), 65, t0);
        assert!(
            sent.due(&observed("2.0.0", healthy), &idle, t0, refresh),
            "a record read before the last sample applied is ignored"
        );
        sent.recorded(recorded("2.0.0"), 75, t0);
        assert!(!sent.due(&observed("2.0.0", healthy), &idle, t0, refresh));
        // An agent that had sent nothing yet (its first plan installed the entity).
        let mut fresh = SentStates::new(t0);
        assert!(fresh.due(&observed("2.0.0", healthy), &idle, t0, refresh));
        fresh.recorded(recorded("2.0.0"), 10, t0);
        assert!(!fresh.due(&observed("2.0.0", healthy), &idle, t0, refresh));
        // A record confirms like a sample: the refresh counts from it.
        let later = t0 + refresh / 2;
        fresh.recorded(recorded("2.0.0"), 11, later);
        assert!(!fresh.due(&observed("2.0.0", healthy), &idle, t0 + refresh, refresh));
        assert!(fresh.due(
            &observed("2.0.0", healthy),
            &idle,
            later + refresh * 3 / 2,
            refresh
        ));
        // Per entity: one whose record is older still brings the refresh.
        let two = [
            observed("2.0.0", healthy),
            vec![Observed {
                entity: "db".into(),
                ..observed("2.0.0", healthy)[0].clone()
            }],
        ]
        .concat();
        let mut db = recorded("2.0.0");
        db[0].0 = "db".into();
        fresh.recorded(db, 12, t0);
        assert!(fresh.due(&two, &idle, t0 + refresh * 3 / 2, refresh));
        assert!(!fresh.due(&two, &idle, t0 + refresh / 4, refresh));
    }

    #[test]
    fn refreshes_are_spread_over_half_a_period_after_the_hubs_confirmation() {
        let observed = vec![web("1.0.0")];
        let idle = idle();
        let refresh = Duration::from_secs(32);
        let t0 = Instant::now();
        // The first moment a refresh is due, to the 10 ms (never before the period, always by
        // half of it again).
        let due_at = |sent: &SentStates, from: Instant| {
            assert!(!sent.due(
                &observed,
                &idle,
                from + refresh - Duration::from_millis(1),
                refresh
            ));
            assert!(sent.due(&observed, &idle, from + refresh * 3 / 2, refresh));
            (0..=1_600)
                .map(|k| refresh + Duration::from_millis(10 * k))
                .find(|d| sent.due(&observed, &idle, from + *d, refresh))
                .expect("due by half a period late")
        };
        let mut sent = SentStates::new(t0);
        let (mut earliest, mut latest) = (refresh * 2, Duration::ZERO);
        for i in 0..200 {
            sent.sent(observed.clone(), &idle, t0, i);
            let at = due_at(&sent, t0);
            (earliest, latest) = (earliest.min(at), latest.max(at));
        }
        assert!(
            earliest < refresh * 9 / 8 && latest > refresh * 11 / 8,
            "spread over the half period: {earliest:?} to {latest:?}"
        );
        // A record confirms the entity, and draws its own spread.
        let later = t0 + Duration::from_secs(20);
        let (mut earliest, mut latest) = (refresh * 2, Duration::ZERO);
        for i in 0..200 {
            sent.recorded(
                vec![(
                    "web".to_string(),
                    ReportedState {
                        version: Some(semver::Version::new(1, 0, 0)),
                        health: crate::plan::Health::Healthy,
                        ..ReportedState::default()
                    },
                )],
                1_000 + i,
                later,
            );
            let at = due_at(&sent, later);
            (earliest, latest) = (earliest.min(at), latest.max(at));
        }
        assert!(
            earliest < refresh * 9 / 8 && latest > refresh * 11 / 8,
            "records spread too: {earliest:?} to {latest:?}"
        );
    }

    #[test]
    fn a_record_settles_an_entity_held_below_its_plan() {
        let observed = vec![web("2.0.0")];
        let listed = || Listed {
            applied_index: 50,
            plans: HashMap::from([("web".to_string(), ("p-45-0".to_string(), 45))]),
        };
        let refresh = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut sent = SentStates::new(t0);
        // Sampled while the plan ran here: held below it.
        sent.sent(
            observed.clone(),
            &Reflected::of(listed(), |_| false),
            t0,
            51,
        );
        let finished = Reflected::of(listed(), |_| true);
        assert!(
            sent.due(&observed, &finished, t0, refresh),
            "held: sent again"
        );
        // The plan's end, recorded after that sample: nothing is due.
        sent.recorded(
            vec![(
                "web".to_string(),
                ReportedState {
                    version: Some(semver::Version::new(2, 0, 0)),
                    health: crate::plan::Health::Healthy,
                    config_sha256: None,
                    secrets_revision: 0,
                    message: String::new(),
                    reported_at_ms: None,
                },
            )],
            53,
            t0,
        );
        assert!(!sent.due(&observed, &finished, t0, refresh));
    }

    #[test]
    fn canary_steps_are_carried_into_the_plan_spec() {
        let plan = canary_plan();
        let spec = to_spec(&plan, &[]);
        let c = spec.canary.clone().unwrap();
        assert_eq!((c.canary.as_str(), c.port, c.step), ("prod/web", 8080, 3));
        let p = c.primary.unwrap();
        assert_eq!((p.revision.as_str(), p.secrets_revision), ("r1", 2));
        assert_eq!(p.artifacts[0].uri, "demo/a.tar.gz");
        assert!(c.canary_workload.is_none());
        assert_eq!(c.match_rules[0][0].value, "insider");
        assert_eq!(c.metric_windows_ms, vec![60_000]);
        // Secrets stay out of anything serialised.
        assert_eq!(spec.secrets.len(), 1);
        let json = serde_json::to_string(&spec).unwrap();
        assert!(!json.contains("\"v\""), "{json}");
        assert!(!format!("{spec:?}").contains("\"v\""));
    }

    /// Plan fetches from the wire (SPEC S3, docs/BENCHMARKS.md "Fuzzing"): a `FetchPlansReply`
    /// with an install and a canary-step plan, encoded, mutated (bit flips, truncation,
    /// splices, huge length prefixes) or random, goes through prost's decoding, `to_spec` and
    /// the checks the driver and the canary runner make of names, versions, ports, match
    /// rules and configs before they act. No panic, within a time bound.
    mod fuzz {
        use super::*;
        use crate::canary::names::{config_with_port, CanaryId, WorkloadIds};
        use crate::driver::process::names;
        use hub_proto::FetchPlansReply;
        use proptest::prelude::*;
        use prost::Message;

        fn seeds() -> Vec<Vec<u8>> {
            let install = AgentPlan {
                id: "p-7-0".into(),
                entity: "eid:prod:helmChart:api".into(),
                kind: hub_proto::PlanKind::Install as i32,
                status: hub_proto::PlanStatus::Issued as i32,
                to_version: "1.2.0".into(),
                config: "port: 9000\nnested: {a: [1, 2]}\n".into(),
                artifacts: vec![PlanArtifact {
                    uri: "https://registry.example/api-1.2.0.tgz".into(),
                    sha256: "cd".repeat(32),
                }],
                tasks: ["fetch", "verify", "configure", "start", "readiness"]
                    .iter()
                    .map(|t| hub_proto::PlanTask {
                        name: t.to_string(),
                        state: hub_proto::TaskState::Pending as i32,
                        attempt: 0,
                    })
                    .collect(),
                ..Default::default()
            };
            let reply = FetchPlansReply {
                plans: vec![install, canary_plan()],
                fingerprint: "0123456789abcdef".into(),
                registries: vec![hub_proto::Registry {
                    name: "local".into(),
                    url: "file:///srv/registry".into(),
                    ..Default::default()
                }],
                endpoints: vec!["10.0.0.1:7401".into()],
                leader: "10.0.0.1:7401".into(),
                applied_index: 42,
            };
            vec![reply.encode_to_vec(), canary_plan().encode_to_vec()]
        }

        /// What the agent does with a fetched plan before it acts on it.
        fn examine(bytes: &[u8]) {
            let Ok(reply) = FetchPlansReply::decode(bytes) else {
                return;
            };
            let registries = wire::registries(&reply);
            for (i, p) in reply.plans.iter().enumerate() {
                let Ok(plan) = wire::plan(p, &registries, &format!("plans[{i}]")) else {
                    continue;
                };
                let spec = plan.spec;
                let _ = format!("{spec:?}");
                let _ = names::entity_dir_name(&spec.entity, "prod");
                let _ = names::check_version(&spec.to_version);
                for (name, _) in &spec.secrets {
                    let _ = names::check_secret_name(name);
                }
                for a in &spec.artifacts {
                    let _ = names::is_sha256(&a.sha256);
                }
                let Some(step) = &spec.canary else {
                    continue;
                };
                let _ = CanaryId::parse(&step.canary);
                let _ = WorkloadIds::of(&spec.entity, "prod");
                for rule in &step.match_rules {
                    for h in rule {
                        let _ = crate::proxy::HeaderMatch::new(&h.name, &h.op, &h.value);
                    }
                }
                let port = u16::try_from(step.port).unwrap_or(8080).max(1);
                for w in step.primary.iter().chain(&step.canary_workload) {
                    let _ = config_with_port("workload", &w.config, port);
                    let _ = names::check_version(&w.version);
                }
            }
        }

        #[test]
        fn seeds_decode() {
            // The first is a whole reply; the second a plan alone, for splices.
            let seeds = seeds();
            let reply = FetchPlansReply::decode(seeds[0].as_slice()).unwrap();
            assert_eq!(reply.plans.len(), 2);
            for s in &seeds {
                examine(s);
            }
        }

        proptest! {
            #![proptest_config(hub_fuzz::config(500))]

            #[test]
            fn fetched_plans(bytes in hub_fuzz::mutated(seeds())) {
                hub_fuzz::within(std::time::Duration::from_secs(2), "plan decoding", || {
                    examine(&bytes)
                });
            }
        }
    }
}
