//! The leader's orchestration loop (SPEC P2, P11, R2; docs/ARCHITECTURE.md "The flow of a
//! decision").
//!
//! Only the leader runs it. It is event-driven: every applied command reports its triggers
//! ([`hub_engine::Trigger`]); the loop expands them to the affected entities (the entity and
//! its direct neighbours, SPEC P11), evaluates those with the pure engine at the current time,
//! and proposes `Command::Evaluate` for the entities whose decision would change something
//! (a plan to issue, a new Activity line). Apply re-evaluates at the entry's time, so a stale
//! or duplicate proposal issues nothing, even across leader changes. Timers wake entities when
//! a window opens or a suppression ends, and every 4 hours while blocked; artifact checks
//! (SPEC C9) run in the background and wake the entities waiting for them.
//!
//! What is worth proposing, when an entity wakes and what it watches is the engine's policy
//! ([`hub_engine::leader::next_step`]); this loop holds the queues and timers and does the
//! I/O. Nothing here is authoritative: each term ([`crate::leader`]) rebuilds everything from
//! the replicated state with one full evaluation.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use hub_engine::artifact::{ArtifactLocation, Availability};
use hub_engine::evaluate::{evaluate, Evaluation};
use hub_engine::leader::{next_step, DecisionRecord, LastProposal};
use hub_engine::{Command, State, Trigger};
use raft_store::StateEvent;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;
use tokio::time::Instant;

use crate::artifacts::ArtifactChecker;
use crate::term::{Term, TermEnded};

/// Entities evaluated per read-lock hold, so apply is never held up for long.
const EVAL_CHUNK: usize = 1_000;

/// Entities per `Evaluate` proposal (the engine accepts up to 2,000).
const PROPOSE_CHUNK: usize = 500;

/// Runs the loop for one term of leadership, until a proposal fails (the caller stops it when
/// the term ends).
pub(crate) async fn run(term: &Term, mut events: Receiver<StateEvent>) -> Result<(), TermEnded> {
    let mut lead = Leadership::new(term.clone());
    lead.run(&mut events).await
}

/// One term of leadership: in-memory queues rebuilt from the replicated state.
struct Leadership {
    term: Term,
    checker: ArtifactChecker,
    dirty: BTreeSet<String>,
    /// (wake time, entity); `timer_of` holds each entity's single timer.
    timers: BTreeSet<(i64, String)>,
    timer_of: HashMap<String, i64>,
    /// (environment, product) -> entities blocked on a dependency of that product.
    waiting_on: HashMap<(String, String), HashSet<String>>,
    /// Artifact location -> entities whose check is pending.
    artifact_waiters: HashMap<ArtifactLocation, HashSet<String>>,
    /// Entity -> the last proposal for it, against proposal storms.
    proposed: HashMap<String, LastProposal>,
    /// When to propose `ExpireSuppressions`.
    housekeeping_at: Option<i64>,
    /// Since when `dirty` has been non-empty: the oldest trigger not yet evaluated.
    dirty_since: Option<Instant>,
    /// Entity -> the first constraint that blocked it at its last evaluation (metrics).
    blocked: HashMap<String, &'static str>,
}

impl Leadership {
    fn new(term: Term) -> Self {
        Self {
            checker: term.node.artifacts.clone(),
            term,
            dirty: BTreeSet::new(),
            timers: BTreeSet::new(),
            timer_of: HashMap::new(),
            waiting_on: HashMap::new(),
            artifact_waiters: HashMap::new(),
            proposed: HashMap::new(),
            housekeeping_at: None,
            dirty_since: None,
            blocked: HashMap::new(),
        }
    }

    async fn run(&mut self, events: &mut Receiver<StateEvent>) -> Result<(), TermEnded> {
        // The term passed its read barrier (crate::leader): the state includes everything
        // committed before it.
        self.mark_all_dirty();
        let mut artifacts_rx = self.checker.subscribe();
        loop {
            if !self.dirty.is_empty() {
                self.dirty_since.get_or_insert_with(Instant::now);
                self.process().await?;
                continue;
            }
            let next_timer = self
                .timers
                .first()
                .map(|(t, _)| *t)
                .into_iter()
                .chain(self.housekeeping_at)
                .min();
            let sleep_for = next_timer
                .map(|t| {
                    Duration::from_millis(
                        (t - self.term.node.cluster_now_ms()).clamp(0, 3_600_000) as u64
                    )
                })
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(StateEvent::Applied { triggers, .. }) => self.expand(&triggers),
                    Ok(StateEvent::Replaced) | Err(RecvError::Lagged(_)) => self.mark_all_dirty(),
                    Err(RecvError::Closed) => return Err(TermEnded::StateMachineClosed),
                },
                _ = tokio::time::sleep(sleep_for) => self.fire_timers().await?,
                changed = artifacts_rx.changed() => {
                    if changed.is_ok() {
                        let waiters = std::mem::take(&mut self.artifact_waiters);
                        for (_, ids) in waiters {
                            self.dirty.extend(ids);
                        }
                    }
                }
            }
        }
    }

    fn mark_all_dirty(&mut self) {
        let s = self.term.node.state.read();
        self.dirty
            .extend(s.state.entities().map(|e| e.id.0.clone()));
        self.housekeeping_at = next_suppression_end(&s.state);
    }

    /// SPEC P11: the changed entity and its direct neighbours, plus entities waiting on its
    /// product.
    fn expand(&mut self, triggers: &[Trigger]) {
        if triggers.is_empty() {
            return;
        }
        let s = self.term.node.state.read();
        for t in triggers {
            self.dirty.extend(s.state.affected_entities(t));
            if let Trigger::Entity(id) = t {
                if let Some(e) = s.state.entity(id) {
                    let key = (e.environment.clone(), e.product_id.clone());
                    if let Some(waiters) = self.waiting_on.get(&key) {
                        self.dirty.extend(waiters.iter().cloned());
                    }
                }
            }
        }
        self.housekeeping_at = next_suppression_end(&s.state);
    }

    async fn fire_timers(&mut self) -> Result<(), TermEnded> {
        let now = self.term.node.cluster_now_ms();
        while let Some((t, id)) = self.timers.first().cloned() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            self.timer_of.remove(&id);
            self.dirty.insert(id);
        }
        if self.housekeeping_at.is_some_and(|t| t <= now) {
            self.housekeeping_at = None;
            self.propose(Command::ExpireSuppressions).await?;
        }
        Ok(())
    }

    fn set_timer(&mut self, id: &str, at: Option<i64>) {
        if let Some(old) = self.timer_of.remove(id) {
            self.timers.remove(&(old, id.to_string()));
        }
        if let Some(at) = at {
            self.timers.insert((at, id.to_string()));
            self.timer_of.insert(id.to_string(), at);
        }
    }

    /// Evaluates the dirty entities and proposes the decisions that change something.
    async fn process(&mut self) -> Result<(), TermEnded> {
        let started = Instant::now();
        let triggered = self.dirty_since.take().unwrap_or(started);
        let batch: Vec<String> = std::mem::take(&mut self.dirty).into_iter().collect();
        let mut to_propose: Vec<(String, Vec<(ArtifactLocation, Availability)>)> = Vec::new();
        let checker = self.checker.clone();
        let lookup = move |l: &ArtifactLocation| checker.status(l);
        for chunk in batch.chunks(EVAL_CHUNK) {
            let now = self.term.node.cluster_now_ms();
            let evals: Vec<(Evaluation, DecisionRecord)> = {
                let s = self.term.node.state.read();
                chunk
                    .iter()
                    .filter_map(|id| {
                        let Some(eval) = evaluate(&s.state, id, now, &lookup) else {
                            self.blocked.remove(id);
                            return None;
                        };
                        let recorded = s.state.activity(id).map(DecisionRecord::of);
                        Some((eval, recorded.unwrap_or_default()))
                    })
                    .collect()
            };
            for (eval, _) in &evals {
                match eval.blocking().next() {
                    Some(c) => self
                        .blocked
                        .insert(eval.entity.clone(), c.constraint.label()),
                    None => self.blocked.remove(&eval.entity),
                };
            }
            for (eval, recorded) in evals {
                if let Some(p) = self.consider(&eval, &recorded, now, &lookup) {
                    to_propose.push(p);
                }
            }
        }
        let evaluated = batch.len();
        let proposals = to_propose.len();
        // The chunks are proposed together, not one after another's commit: under a flood of
        // agent reports a later chunk would otherwise queue behind them, and its plans would
        // reach agents seconds later than the first chunk's.
        let mut commands = Vec::new();
        for chunk in to_propose.chunks(PROPOSE_CHUNK) {
            let mut entities = Vec::with_capacity(chunk.len());
            let mut artifacts: Vec<(ArtifactLocation, Availability)> = Vec::new();
            for (id, obs) in chunk {
                entities.push(id.clone());
                for o in obs {
                    if !artifacts.iter().any(|(l, _)| *l == o.0) {
                        artifacts.push(o.clone());
                    }
                }
            }
            commands.push(Command::Evaluate {
                entities,
                artifacts,
            });
        }
        futures::future::try_join_all(commands.into_iter().map(|c| self.propose(c))).await?;
        let metrics = &self.term.node.metrics;
        crate::metrics::observe(&metrics.evaluation_seconds, started.elapsed());
        metrics.evaluations.inc_by(evaluated as u64);
        if proposals > 0 {
            crate::metrics::observe(&metrics.trigger_to_issue_seconds, triggered.elapsed());
        }
        let mut blocked = std::collections::BTreeMap::new();
        for constraint in self.blocked.values() {
            *blocked.entry(*constraint).or_default() += 1;
        }
        metrics.set_blocked(blocked);
        if proposals > 0 || evaluated > 100 {
            tracing::debug!(
                evaluated,
                proposals,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "orchestrator pass"
            );
        }
        Ok(())
    }

    /// Asks the engine's policy what to do about one evaluation, schedules the entity's
    /// wake-ups, and returns the proposal to make, if any.
    fn consider(
        &mut self,
        eval: &Evaluation,
        recorded: &DecisionRecord,
        now: i64,
        lookup: &dyn Fn(&ArtifactLocation) -> Option<Availability>,
    ) -> Option<(String, Vec<(ArtifactLocation, Availability)>)> {
        let id = &eval.entity;
        // One look at the checker per location (a lookup may schedule a probe).
        let statuses: Vec<(ArtifactLocation, Option<Availability>)> = eval
            .artifact_locations
            .iter()
            .map(|l| (l.clone(), lookup(l)))
            .collect();
        let step = next_step(
            eval,
            recorded,
            self.proposed.get(id),
            &statuses,
            self.checker.ttl().as_millis() as i64,
            now,
        );
        // Dependency waits: re-evaluate when an entity of that product changes.
        if let Some(env) = id.split(':').nth(1) {
            for product in step.watch_products {
                self.waiting_on
                    .entry((env.to_string(), product))
                    .or_default()
                    .insert(id.clone());
            }
        }
        for l in step.watch_artifacts {
            self.artifact_waiters
                .entry(l)
                .or_default()
                .insert(id.clone());
        }
        self.set_timer(id, step.wake_at);
        let observed = step.propose?;
        self.proposed.insert(
            id.clone(),
            LastProposal {
                fingerprint: step.fingerprint,
                at_ms: now,
            },
        );
        Some((id.clone(), observed))
    }

    async fn propose(&self, command: Command) -> Result<(), TermEnded> {
        if let Err(e) = self.term.propose(command).await? {
            tracing::warn!(error = %e, "orchestrator proposal refused");
        }
        Ok(())
    }
}

/// The earliest end of any suppression, when `ExpireSuppressions` is due.
fn next_suppression_end(state: &State) -> Option<i64> {
    state.suppressions().filter_map(|s| s.end_ms).min()
}
