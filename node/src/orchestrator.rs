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
//! Nothing here is authoritative: on becoming leader the loop rebuilds everything from the
//! replicated state with one full evaluation.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hub_engine::artifact::{ArtifactLocation, Availability};
use hub_engine::evaluate::{evaluate, ConstraintKind, Evaluation, Outcome, BLOCKED_RECHECK_MS};
use hub_engine::{Command, Request, State, Trigger};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;
use raft_store::StateEvent;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::artifacts::ArtifactChecker;
use crate::node::{now_ms, HubNode};

/// Entities evaluated per read-lock hold, so apply is never held up for long.
const EVAL_CHUNK: usize = 1_000;

/// Entities per `Evaluate` proposal (the engine accepts up to 2,000).
const PROPOSE_CHUNK: usize = 500;

/// The same unchanged decision is not proposed again within this time.
const REPROPOSE_AFTER: Duration = Duration::from_secs(5);

/// Starts the loop; it runs for the life of the process and acts only while leader.
pub fn spawn(node: Arc<HubNode>) -> tokio::task::JoinHandle<()> {
    let events = node.sm.subscribe();
    tokio::spawn(async move {
        let checker = node.artifacts.clone();
        let mut events = events;
        loop {
            wait_for_leadership(&node).await;
            tracing::info!(node = node.id, "leader: orchestrator starting");
            let mut lead = Leadership::new(node.clone(), checker.clone());
            // Drop events from before: the full evaluation below covers them.
            events = events.resubscribe();
            if let Err(reason) = lead.run(&mut events).await {
                tracing::info!(node = node.id, %reason, "orchestrator stopped");
            }
        }
    })
}

/// Returns once this node is the leader.
pub(crate) async fn wait_for_leadership(node: &HubNode) {
    let mut rx = node.raft.metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            if m.state == ServerState::Leader && m.current_leader == Some(node.id) {
                return;
            }
        }
        if rx.changed().await.is_err() {
            // Raft shut down: never leader again.
            std::future::pending::<()>().await;
        }
    }
}

/// Whether this node is the leader now.
pub(crate) fn is_leader(node: &HubNode) -> bool {
    let m = node.raft.metrics();
    let m = m.borrow_watched();
    m.state == ServerState::Leader && m.current_leader == Some(node.id)
}

/// One term of leadership: in-memory queues rebuilt from the replicated state.
struct Leadership {
    node: Arc<HubNode>,
    checker: ArtifactChecker,
    dirty: BTreeSet<String>,
    /// (wake time, entity); `timer_of` holds each entity's single timer.
    timers: BTreeSet<(i64, String)>,
    timer_of: HashMap<String, i64>,
    /// (environment, product) -> entities blocked on a dependency of that product.
    waiting_on: HashMap<(String, String), HashSet<String>>,
    /// Artifact location -> entities whose check is pending.
    artifact_waiters: HashMap<ArtifactLocation, HashSet<String>>,
    /// Entity -> (fingerprint, when) of the last proposal, against proposal storms.
    proposed: HashMap<String, (String, Instant)>,
    /// When to propose `ExpireSuppressions`.
    housekeeping_at: Option<i64>,
}

impl Leadership {
    fn new(node: Arc<HubNode>, checker: ArtifactChecker) -> Self {
        Self {
            node,
            checker,
            dirty: BTreeSet::new(),
            timers: BTreeSet::new(),
            timer_of: HashMap::new(),
            waiting_on: HashMap::new(),
            artifact_waiters: HashMap::new(),
            proposed: HashMap::new(),
            housekeeping_at: None,
        }
    }

    async fn run(
        &mut self,
        events: &mut tokio::sync::broadcast::Receiver<StateEvent>,
    ) -> Result<(), String> {
        // Serve decisions only from a state that includes everything committed before this
        // term (the leader's blank entry is applied once the barrier passes).
        self.node
            .read_barrier(false)
            .await
            .map_err(|e| format!("read barrier: {}", e.message()))?;
        self.mark_all_dirty();
        let mut leader_rx = self.node.raft.metrics();
        let mut artifacts_rx = self.checker.subscribe();
        loop {
            if !self.dirty.is_empty() {
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
                .map(|t| Duration::from_millis((t - now_ms()).clamp(0, 3_600_000) as u64))
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(StateEvent::Applied { triggers, .. }) => self.expand(&triggers),
                    Ok(StateEvent::Replaced) | Err(RecvError::Lagged(_)) => self.mark_all_dirty(),
                    Err(RecvError::Closed) => return Err("state machine closed".into()),
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
                _ = leader_rx.changed() => {
                    if !is_leader(&self.node) {
                        return Err("lost leadership".into());
                    }
                }
            }
        }
    }

    fn mark_all_dirty(&mut self) {
        let s = self.node.state.read();
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
        let s = self.node.state.read();
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

    async fn fire_timers(&mut self) -> Result<(), String> {
        let now = now_ms();
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
    async fn process(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let batch: Vec<String> = std::mem::take(&mut self.dirty).into_iter().collect();
        let mut to_propose: Vec<(String, Vec<(ArtifactLocation, Availability)>)> = Vec::new();
        let checker = self.checker.clone();
        let lookup = move |l: &ArtifactLocation| checker.status(l);
        for chunk in batch.chunks(EVAL_CHUNK) {
            let now = now_ms();
            let evals: Vec<(Evaluation, Option<String>, Option<i64>)> = {
                let s = self.node.state.read();
                chunk
                    .iter()
                    .filter_map(|id| {
                        let eval = evaluate(&s.state, id, now, &lookup)?;
                        let act = s.state.activity(id);
                        Some((
                            eval,
                            act.and_then(|a| a.last_decision.clone()),
                            act.and_then(|a| a.blocked_since_ms),
                        ))
                    })
                    .collect()
            };
            for (eval, last, blocked_since) in evals {
                if let Some(p) = self.consider(eval, last, blocked_since, now, &lookup) {
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

    /// Decides whether an evaluation is worth a proposal, and schedules its wake-ups.
    fn consider(
        &mut self,
        eval: Evaluation,
        last_decision: Option<String>,
        blocked_since: Option<i64>,
        now: i64,
        lookup: &dyn Fn(&ArtifactLocation) -> Option<Availability>,
    ) -> Option<(String, Vec<(ArtifactLocation, Availability)>)> {
        let id = eval.entity.clone();
        // Dependency waits: re-evaluate when an entity of that product changes.
        if let Some(env) = id.split(':').nth(1) {
            for product in &eval.waits_on_products {
                self.waiting_on
                    .entry((env.to_string(), product.clone()))
                    .or_default()
                    .insert(id.clone());
            }
        }
        // One look at the checker per location (a lookup may schedule a probe).
        let statuses: Vec<(&ArtifactLocation, Option<Availability>)> = eval
            .artifact_locations
            .iter()
            .map(|l| (l, lookup(l)))
            .collect();
        let pending_artifacts: Vec<&ArtifactLocation> = statuses
            .iter()
            .filter(|(_, a)| a.is_none())
            .map(|(l, _)| *l)
            .collect();
        for l in &pending_artifacts {
            self.artifact_waiters
                .entry((*l).clone())
                .or_default()
                .insert(id.clone());
        }
        // An unavailable artifact is checked again once its result expires: wake then, and
        // again when the fresh probe completes.
        let unavailable: Vec<&ArtifactLocation> = statuses
            .iter()
            .filter(|(_, a)| matches!(a, Some(Availability::Unavailable { .. })))
            .map(|(l, _)| *l)
            .collect();
        for l in &unavailable {
            self.artifact_waiters
                .entry((*l).clone())
                .or_default()
                .insert(id.clone());
        }
        let artifact_recheck =
            (!unavailable.is_empty()).then(|| now + self.checker.ttl().as_millis() as i64 + 10);
        let mut wake = match &eval.outcome {
            Outcome::Blocked { may_clear_at_ms } => {
                let recheck = blocked_since.unwrap_or(now)
                    + BLOCKED_RECHECK_MS
                        * (1 + (now - blocked_since.unwrap_or(now)) / BLOCKED_RECHECK_MS);
                Some(may_clear_at_ms.map_or(recheck, |t| t.min(recheck)))
            }
            _ => None,
        };
        // Skip-ahead for a pure "artifacts not checked yet" block: the checker wakes us.
        let only_pending = eval.is_blocked()
            && !pending_artifacts.is_empty()
            && eval.blocking().all(|c| {
                c.constraint == ConstraintKind::Artifacts && c.reason.contains("not checked yet")
            });
        let fingerprint = eval.fingerprint();
        let worth = match &eval.outcome {
            Outcome::PlanActive { .. } => false,
            Outcome::Issue | Outcome::CanaryTarget { .. } => true,
            _ if only_pending => false,
            _ => {
                let recheck_due = eval.is_blocked()
                    && blocked_since.is_some_and(|since| now - since >= BLOCKED_RECHECK_MS);
                last_decision.as_deref() != Some(fingerprint.as_str()) || recheck_due
            }
        };
        if let Some(t) = artifact_recheck {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        if let Some(w) = wake.as_mut() {
            *w = (*w).max(now + 1);
        }
        self.set_timer(&id, wake);
        if !worth {
            return None;
        }
        if let Some((fp, at)) = self.proposed.get(&id) {
            if *fp == fingerprint
                && at.elapsed() < REPROPOSE_AFTER
                && !matches!(eval.outcome, Outcome::Issue | Outcome::CanaryTarget { .. })
            {
                return None;
            }
        }
        self.proposed
            .insert(id.clone(), (fingerprint, Instant::now()));
        let observed = statuses
            .into_iter()
            .filter_map(|(l, a)| a.map(|a| (l.clone(), a)))
            .collect();
        Some((id, observed))
    }

    async fn propose(&self, command: Command) -> Result<(), String> {
        if !is_leader(&self.node) {
            return Err("lost leadership".into());
        }
        let req = Request {
            command,
            time_ms: now_ms(),
            request_id: None,
        };
        match tokio::time::timeout(self.node.request_timeout, self.node.raft.client_write(req))
            .await
        {
            Ok(Ok(resp)) => {
                if let Err(e) = resp.data.result {
                    tracing::warn!(error = %e, "orchestrator proposal refused");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(format!("proposal failed: {e}")),
            Err(_) => Err("proposal timed out (no quorum?)".into()),
        }
    }
}

/// The earliest end of any suppression, when `ExpireSuppressions` is due.
fn next_suppression_end(state: &State) -> Option<i64> {
    state.suppressions().filter_map(|s| s.end_ms).min()
}
