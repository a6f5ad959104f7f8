//! The leader's canary controller (SPEC K3–K9; docs/CANARY.md "How the hub runs it",
//! docs/ARCHITECTURE.md "Leader-only work").
//!
//! Only the leader runs it, one term at a time ([`crate::leader`]). It looks at the canaries
//! whenever a change commits, when an in-flight tick ends, and at its own timers: the
//! earliest committed `next_tick_ms` and the end of an observation wait. For each canary the
//! pure engine says what to do ([`canary_step`], beside [`hub_engine::canary::plan_tick`]:
//! the time comes from the committed `next_tick_ms`, so a new leader fires at the same moment
//! the old one would have, never earlier). For a due tick it
//!
//! 1. waits until the agent has applied the canary's last step plan and reported an
//!    observation since (bounded by one analysis interval; after that the tick goes ahead
//!    with the workloads counted as not ready and no metric data, which fails the checks);
//! 2. calls the webhooks and queries the metrics the plan lists (proxy metrics from the
//!    agent's observation, Prometheus queries over HTTP);
//! 3. proposes `CanaryTick { id, step, input }` (for a canary with judged metrics,
//!    `CanaryJudgedTick`, which also carries the binned samples of the agent's last report
//!    that the judges compare). The entry applies only while the canary is still at `step`,
//!    so a deposed leader's or a duplicate proposal changes nothing.
//!
//! The committed tick's workload and routing actions reach the agent as a step plan (the
//! engine issues it). Alerts and notification webhooks of committed ticks are sent by the
//! leader that sees them committed; a leader change may drop those of the last steps before
//! it (at most once: they notify, they decide nothing).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hub_engine::canary::{
    Action, MetricQuery, MetricSamples, TickInput, TickPlan, WebhookCall, WebhookResult, MILLI,
};
use hub_engine::canary_record::Canary;
use hub_engine::leader::{canary_step, CanaryStep};
use hub_engine::state::State;
use hub_engine::Command;
use hub_http::HttpClient;
use hub_log_limit::SharedLogLimiter;
use raft_store::StateEvent;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::broadcast::Receiver;
use tokio::sync::Notify;

use crate::alerts::{self, AlertLog};
use crate::metrics::{NodeMetrics, OutcomeLabel};
use crate::outbound::Outbound;
use crate::term::{Term, TermEnded};
use crate::{prometheus, webhooks};

/// The longest the controller sleeps without a commit or a timer (a safety net: every wake
/// that matters is a commit, an ended tick or a timer).
const MAX_SLEEP: Duration = Duration::from_secs(5);

/// How long a canary waits after a tick that was not applied (refused, or not committed)
/// before the next: the same tick would meet the same answer at once, and the loop would spin
/// (a chaos run saw 39,685 "not committed" ticks in 1.4 s from a leader whose term had ended
/// before the runtime stopped the loop).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Timeout of one Prometheus query.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(10);

/// A canary's conditions that repeat at every tick (a metric query failing, an agent not
/// reporting, a tick refused), by (canary, what): logged once, then every 30 s.
type Quiet = SharedLogLimiter<(String, String), &'static str>;

/// Tells `quiet` how a tick's `what` went for `canary`; returns the line to log, if any.
fn observe(
    quiet: &Quiet,
    canary: &str,
    what: &str,
    failure: Option<&'static str>,
) -> Option<hub_log_limit::Notice<&'static str>> {
    let key = (canary.to_string(), what.to_string());
    let now = std::time::Instant::now();
    match failure {
        Some(kind) => quiet.failed(&key, kind, now),
        None => quiet.succeeded(&key, now),
    }
}

/// Runs the controller for one term of leadership (the caller stops it when the term ends).
pub(crate) async fn run(term: &Term, events: Receiver<StateEvent>) -> Result<(), TermEnded> {
    Controller::new(term.clone()).run(events).await
}

/// What one term of leadership remembers (nothing authoritative).
struct Controller {
    term: Term,
    /// Canaries with a tick being prepared or proposed.
    in_flight: Arc<Mutex<HashSet<String>>>,
    /// Notified when an in-flight tick ends (committed or not).
    tick_ended: Arc<Notify>,
    /// Canary → step up to which its alerts and notifications were sent (or skipped).
    notified: HashMap<String, u64>,
    /// Canary → (step, since when) a due tick has waited for a fresh observation.
    waiting: HashMap<String, (u64, i64)>,
    /// What the log has said of the canaries' repeated conditions.
    quiet: Arc<Quiet>,
    /// What the log has said of each alert destination's failures.
    alert_log: Arc<AlertLog>,
}

/// A tick to prepare.
struct Due {
    id: String,
    plan: TickPlan,
    input: TickInput,
    samples: Option<BTreeMap<String, MetricSamples>>,
}

impl Controller {
    fn new(term: Term) -> Self {
        Controller {
            term,
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            tick_ended: Arc::new(Notify::new()),
            notified: HashMap::new(),
            waiting: HashMap::new(),
            quiet: Arc::default(),
            alert_log: Arc::default(),
        }
    }

    async fn run(&mut self, mut events: Receiver<StateEvent>) -> Result<(), TermEnded> {
        // Notifications committed before this term are not sent again.
        {
            let node = self.term.node.clone();
            let s = node.state.read();
            for c in s.state.canaries() {
                self.notified.insert(c.id.clone(), c.status.step);
            }
        }
        loop {
            let wake_at = self.pass();
            let sleep_for = wake_at
                .map(|t| Duration::from_millis((t - self.term.node.cluster_now_ms()).max(0) as u64))
                .map_or(MAX_SLEEP, |d| d.min(MAX_SLEEP));
            tokio::select! {
                ev = events.recv() => match ev {
                    // Look once for a burst of commits.
                    Ok(_) | Err(RecvError::Lagged(_)) => loop {
                        match events.try_recv() {
                            Ok(_) | Err(TryRecvError::Lagged(_)) => continue,
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Closed) => return Err(TermEnded::StateMachineClosed),
                        }
                    },
                    Err(RecvError::Closed) => return Err(TermEnded::StateMachineClosed),
                },
                _ = self.tick_ended.notified() => {}
                _ = tokio::time::sleep(sleep_for) => {}
            }
        }
    }

    /// Looks at every canary once: sends the notifications of newly committed steps and
    /// starts the ticks that are due. Returns when to look again without a commit.
    fn pass(&mut self) -> Option<i64> {
        let now = self.term.node.cluster_now_ms();
        let node = self.term.node.clone();
        let (due, notes, wake_at) = {
            let s = node.state.read();
            let mut due = Vec::new();
            let mut notes = Vec::new();
            let mut wake_at: Option<i64> = None;
            let mut wake = |t: i64| wake_at = Some(wake_at.map_or(t, |w| w.min(t)));
            for c in s.state.canaries() {
                notes.extend(self.notifications(&s.state, c));
                if let Some(t) = c.status.next_tick_ms.filter(|t| *t > now) {
                    wake(t);
                }
                if self.lock_in_flight().contains(&c.id) {
                    continue;
                }
                match canary_step(&s.state, c, self.waiting.get(&c.id).copied(), now) {
                    CanaryStep::Idle => {
                        self.waiting.remove(&c.id);
                    }
                    CanaryStep::WaitForPlan => {}
                    CanaryStep::WaitForObservation { step, since, until } => {
                        self.waiting.insert(c.id.clone(), (step, since));
                        wake(until);
                    }
                    CanaryStep::Tick {
                        plan,
                        input,
                        samples,
                        stale,
                    } => {
                        let seen =
                            observe(&self.quiet, &c.id, "observation", stale.then_some("stale"));
                        if let Some(n) = seen.filter(|n| n.change != hub_log_limit::Change::Ended) {
                            tracing::warn!(canary = %c.id, step = plan.step, ticks = n.repeats,
                                "no fresh observation from the agent; ticking with workloads not ready");
                        }
                        if !stale {
                            self.waiting.remove(&c.id);
                        }
                        due.push(Due {
                            id: c.id.clone(),
                            plan,
                            input,
                            samples,
                        });
                    }
                }
            }
            (due, notes, wake_at)
        };
        for note in notes {
            tokio::spawn(notify(
                node.outbound.calls().clone(),
                node.metrics.clone(),
                self.alert_log.clone(),
                note,
            ));
        }
        for d in due {
            self.lock_in_flight().insert(d.id.clone());
            let term = self.term.clone();
            let in_flight = self.in_flight.clone();
            let ended = self.tick_ended.clone();
            let quiet = self.quiet.clone();
            tokio::spawn(async move {
                let id = d.id.clone();
                if !run_tick(&term, d, &quiet).await {
                    // Not applied: the same tick would be refused or fail again at once (a
                    // term that ended before the runtime stopped this loop, a refusal).
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                in_flight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                ended.notify_one();
            });
        }
        wake_at
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The alerts and notification webhooks of steps committed since the last look.
    fn notifications(&mut self, state: &State, c: &Canary) -> Vec<Note> {
        let from = self.notified.get(&c.id).copied().unwrap_or(0);
        self.notified.insert(c.id.clone(), c.status.step);
        let mut notes = Vec::new();
        for (_, action) in c.actions.iter().filter(|(step, _)| *step >= from) {
            match action {
                Action::NotifyWebhook { call } => notes.push(Note::Webhook(call.clone())),
                Action::Alert { severity, message } => notes.extend(
                    alerts::alerts_of(state, c, *severity, message)
                        .into_iter()
                        .map(Note::Alert),
                ),
                _ => {}
            }
        }
        notes
    }
}

/// Calls the webhooks and queries the metrics of a due tick, then proposes it; whether it was
/// applied.
async fn run_tick(term: &Term, mut d: Due, quiet: &Quiet) -> bool {
    let client = term.node.outbound.calls();
    let metrics = &term.node.metrics;
    let calls = d
        .plan
        .webhooks
        .iter()
        .map(|call| call_webhook(client, metrics, call));
    let answers = futures::future::join_all(calls).await;
    for (call, answer) in d.plan.webhooks.iter().zip(answers) {
        d.input.webhooks.insert(call.name.clone(), answer);
    }
    for m in &d.plan.metrics {
        if let Some(v) = query_prometheus(&term.node.outbound, metrics, m, (quiet, &d.id)).await {
            d.input.metrics.insert(m.name.clone(), v);
        }
    }
    let command = match d.samples {
        Some(samples) => Command::CanaryJudgedTick {
            id: d.id.clone(),
            step: d.plan.step,
            input: d.input,
            samples,
        },
        None => Command::CanaryTick {
            id: d.id.clone(),
            step: d.plan.step,
            input: d.input,
        },
    };
    metrics.canary_ticks.inc();
    match term.propose(command).await {
        Ok(Ok(out)) => {
            observe(quiet, &d.id, "tick", None);
            tracing::info!(canary = %d.id, step = d.plan.step, summary = %out.summary(), "canary tick");
            true
        }
        Ok(Err(e)) => {
            if let Some(n) = observe(quiet, &d.id, "tick", Some("refused")) {
                tracing::warn!(canary = %d.id, error = %e, ticks = n.repeats, "canary tick refused")
            }
            false
        }
        Err(e) => {
            if let Some(n) = observe(quiet, &d.id, "tick", Some("not committed")) {
                tracing::info!(canary = %d.id, error = %e, ticks = n.repeats, "canary tick not committed")
            }
            false
        }
    }
}

/// One webhook call, as the tick records it.
async fn call_webhook(
    client: &HttpClient,
    metrics: &NodeMetrics,
    call: &WebhookCall,
) -> WebhookResult {
    if let Some(answer) = hub_engine::canary::built_in_answer(call) {
        // The built-in load tester (issue 52 item 4): nothing to call.
        metrics.webhooks.get_or_create(&outcome(answer.ok)).inc();
        tracing::debug!(webhook = %call.name, ok = answer.ok, "canary webhook answered by the built-in load tester");
        return answer;
    }
    let timeout = Duration::from_millis(u64::try_from(call.timeout_ms).unwrap_or(0));
    let started = std::time::Instant::now();
    let out = webhooks::call(client, &call.url, &call.payload, timeout, call.retries).await;
    crate::metrics::observe(&metrics.webhook_seconds, started.elapsed());
    metrics.webhooks.get_or_create(&outcome(out.ok)).inc();
    tracing::debug!(webhook = %call.name, ok = out.ok, status = ?out.status, "canary webhook");
    WebhookResult {
        ok: out.ok,
        status: out.status,
        message: out.message,
    }
}

/// The value of a Prometheus metric in thousandths (`Some(None)`: no data or the query
/// failed, which fails the check); `None` for proxy metrics. A failure is logged through
/// `quiet` as the canary's.
async fn query_prometheus(
    outbound: &Outbound,
    metrics: &NodeMetrics,
    m: &MetricQuery,
    (quiet, canary): (&Quiet, &str),
) -> Option<Option<i64>> {
    let check = m.source.prometheus()?;
    let started = std::time::Instant::now();
    let answer = prometheus::run_check(outbound, &check, PROMETHEUS_TIMEOUT).await;
    crate::metrics::observe(&metrics.metric_query_seconds, started.elapsed());
    metrics
        .metric_queries
        .get_or_create(&outcome(answer.is_ok()))
        .inc();
    let what = format!("metric {}", m.name);
    Some(match answer {
        Ok(Some(v)) if v.is_finite() => {
            observe(quiet, canary, &what, None);
            Some((v * MILLI as f64).round() as i64)
        }
        Ok(_) => {
            observe(quiet, canary, &what, None);
            None
        }
        Err(e) => {
            if let Some(n) = observe(quiet, canary, &what, Some("failed")) {
                tracing::warn!(%canary, metric = %m.name, error = %e, queries = n.repeats, "prometheus query failed");
            }
            None
        }
    })
}

/// The outcome label of a call.
fn outcome(ok: bool) -> OutcomeLabel {
    OutcomeLabel {
        outcome: if ok { "ok" } else { "error" }.to_string(),
    }
}

/// An alert or notification of a committed tick, to send.
enum Note {
    /// A post-rollout or event webhook.
    Webhook(WebhookCall),
    /// An alert to one destination.
    Alert(alerts::Alert),
}

/// Sends one alert or notification through `client`; its answer changes nothing.
async fn notify(
    client: HttpClient,
    metrics: std::sync::Arc<NodeMetrics>,
    alert_log: Arc<AlertLog>,
    note: Note,
) {
    match note {
        Note::Webhook(call) => {
            let r = call_webhook(&client, &metrics, &call).await;
            tracing::info!(webhook = %call.name, ok = r.ok, status = ?r.status, "canary notification sent");
        }
        Note::Alert(alert) => alerts::send(&client, &alert_log, alert).await,
    }
}
