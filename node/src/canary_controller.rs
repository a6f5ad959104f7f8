//! The leader's canary controller (SPEC K3–K9; docs/CANARY.md "How the hub runs it",
//! docs/ARCHITECTURE.md "Leader-only work").
//!
//! Only the leader runs it. Every [`POLL`] it reads each canary from the replicated state and
//! asks the pure engine whether a tick is due ([`plan_tick`]: the time comes from the
//! committed `next_tick_ms`, so a new leader fires at the same moment the old one would have,
//! never earlier and at most one poll later). For a due tick it
//!
//! 1. waits until the agent has applied the canary's last step plan and reported an
//!    observation since (bounded by one analysis interval; after that the tick goes ahead
//!    with the workloads counted as not ready and no metric data, which fails the checks);
//! 2. calls the webhooks and queries the metrics the plan lists (proxy metrics from the
//!    agent's observation, Prometheus queries over HTTP);
//! 3. proposes `CanaryTick { id, step, input }`. The entry applies only while the canary is
//!    still at `step`, so a deposed leader's or a duplicate proposal changes nothing.
//!
//! The committed tick's workload and routing actions reach the agent as a step plan (the
//! engine issues it). Alerts and notification webhooks of committed ticks are sent by the
//! leader that sees them committed; a leader change may drop those of the last steps before
//! it (at most once: they notify, they decide nothing).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hub_engine::canary::{
    plan_tick, Action, AlertTarget, MetricQuery, MetricSource, TickInput, TickPlan, WebhookCall,
    WebhookResult, MILLI,
};
use hub_engine::canary_record::Canary;
use hub_engine::{Command, Request, State};
use hub_http::{Body, HttpClient, Method};

use crate::node::{now_ms, HubNode};
use crate::orchestrator::{is_leader, wait_for_leadership};
use crate::outbound::MAX_ANSWER_BYTES;
use crate::{prometheus, webhooks};

/// How often the controller looks for due ticks.
pub const POLL: Duration = Duration::from_millis(200);

/// An observation older than this does not describe the workloads now.
pub const OBSERVATION_MAX_AGE_MS: i64 = 5_000;

/// Timeout of one Prometheus query.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Timeout of one alert POST.
const ALERT_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the controller; it runs for the life of the process and acts only while leader.
pub fn spawn(node: Arc<HubNode>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            wait_for_leadership(&node).await;
            // Decide only on a state that includes everything committed before this term.
            if let Err(e) = node.read_barrier(false).await {
                tracing::info!(node = node.id, error = %e.message(), "canary controller: no barrier");
                tokio::time::sleep(POLL).await;
                continue;
            }
            tracing::info!(node = node.id, "leader: canary controller starting");
            Term::new(node.clone()).run().await;
            tracing::info!(node = node.id, "canary controller stopped");
        }
    })
}

/// What one term of leadership remembers (nothing authoritative).
struct Term {
    node: Arc<HubNode>,
    /// Canaries with a tick being prepared or proposed.
    in_flight: Arc<Mutex<HashSet<String>>>,
    /// Canary → step up to which its alerts and notifications were sent (or skipped).
    notified: HashMap<String, u64>,
    /// Canary → (step, since when) a due tick has waited for a fresh observation.
    waiting: HashMap<String, (u64, i64)>,
}

/// A tick to prepare.
struct Due {
    id: String,
    plan: TickPlan,
    input: TickInput,
}

impl Term {
    fn new(node: Arc<HubNode>) -> Self {
        Term {
            node,
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            notified: HashMap::new(),
            waiting: HashMap::new(),
        }
    }

    async fn run(&mut self) {
        // Notifications committed before this term are not sent again.
        {
            let node = self.node.clone();
            let s = node.state.read();
            for c in s.state.canaries() {
                self.notified.insert(c.id.clone(), c.status.step);
            }
        }
        while is_leader(&self.node) {
            let now = now_ms();
            let node = self.node.clone();
            let (due, notes) = {
                let s = node.state.read();
                let mut due = Vec::new();
                let mut notes = Vec::new();
                for c in s.state.canaries() {
                    notes.extend(self.notifications(c));
                    if self.lock_in_flight().contains(&c.id) {
                        continue;
                    }
                    if let Some(d) = self.due(&s.state, c, now) {
                        due.push(d);
                    }
                }
                (due, notes)
            };
            for note in notes {
                tokio::spawn(notify(self.node.outbound.calls().clone(), note));
            }
            for d in due {
                self.lock_in_flight().insert(d.id.clone());
                let node = self.node.clone();
                let in_flight = self.in_flight.clone();
                tokio::spawn(async move {
                    let id = d.id.clone();
                    run_tick(&node, d).await;
                    in_flight
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&id);
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The alerts and notification webhooks of steps committed since the last look.
    fn notifications(&mut self, c: &Canary) -> Vec<Note> {
        let from = self.notified.get(&c.id).copied().unwrap_or(0);
        self.notified.insert(c.id.clone(), c.status.step);
        let mut notes = Vec::new();
        for (_, action) in c.actions.iter().filter(|(step, _)| *step >= from) {
            match action {
                Action::NotifyWebhook { call } => notes.push(Note::Webhook(call.clone())),
                Action::Alert { severity, message } => {
                    for dest in c
                        .spec
                        .analysis
                        .alerts
                        .iter()
                        .filter(|d| d.receives(*severity))
                    {
                        notes.push(Note::Alert {
                            canary: c.id.clone(),
                            destination: dest.name.clone(),
                            target: dest.target.clone(),
                            body: serde_json::json!({
                                "canary": c.name,
                                "namespace": c.environment,
                                "severity": severity.as_str(),
                                "message": message,
                                "phase": c.status.phase.as_str(),
                            }),
                        });
                    }
                }
                _ => {}
            }
        }
        notes
    }

    /// The tick of `c` to prepare now, if one is due and the agent has caught up.
    fn due(&mut self, state: &State, c: &Canary, now: i64) -> Option<Due> {
        let entity = state.entity(&c.entity)?;
        entity.reported.version.as_ref()?;
        let target = c.target.as_ref()?;
        let plan = plan_tick(&c.spec, &c.status, &target.revision, now);
        if !plan.due {
            self.waiting.remove(&c.id);
            return None;
        }
        // The agent applies step plans one at a time; the next tick waits for the last one.
        if state.active_plan_of(&c.entity).is_some() {
            return None;
        }
        let last_step = state
            .plans_of(&c.entity)
            .filter_map(|p| match &p.kind {
                hub_engine::plan::PlanKind::CanaryStep(s) if s.canary == c.id => Some(s.step),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let fresh = c.observation.as_ref().filter(|o| {
            o.applied_step >= last_step && now - o.observed_ms <= OBSERVATION_MAX_AGE_MS
        });
        let mut input = TickInput::new(target.revision.clone());
        match fresh {
            Some(o) => {
                self.waiting.remove(&c.id);
                input.primary_ready_percent = o.primary_ready_percent;
                input.canary_ready_percent = o.canary_ready_percent;
                input.primary_revision = o.primary_revision.clone();
                input.canary_revision = o.canary_revision.clone();
                for m in &plan.metrics {
                    if !matches!(m.source, MetricSource::Prometheus { .. }) {
                        input
                            .metrics
                            .insert(m.name.clone(), o.metric(&m.source, m.interval_ms));
                    }
                }
            }
            None => {
                // Wait up to one interval for the agent; then decide on what is known: no
                // readiness, no data.
                let since = match self.waiting.get(&c.id) {
                    Some((step, since)) if *step == plan.step => *since,
                    _ => {
                        self.waiting.insert(c.id.clone(), (plan.step, now));
                        now
                    }
                };
                if now - since < c.spec.analysis.interval_ms {
                    return None;
                }
                tracing::warn!(canary = %c.id, step = plan.step,
                    "no fresh observation from the agent; ticking with workloads not ready");
                input.primary_ready_percent = 0;
                input.canary_ready_percent = 0;
                for m in &plan.metrics {
                    if !matches!(m.source, MetricSource::Prometheus { .. }) {
                        input.metrics.insert(m.name.clone(), None);
                    }
                }
            }
        }
        Some(Due {
            id: c.id.clone(),
            plan,
            input,
        })
    }
}

/// Calls the webhooks and queries the metrics of a due tick, then proposes it.
async fn run_tick(node: &HubNode, mut d: Due) {
    let client = node.outbound.calls();
    let calls = d
        .plan
        .webhooks
        .iter()
        .map(|call| call_webhook(client, call));
    let answers = futures::future::join_all(calls).await;
    for (call, answer) in d.plan.webhooks.iter().zip(answers) {
        d.input.webhooks.insert(call.name.clone(), answer);
    }
    for m in &d.plan.metrics {
        if let Some(v) = query_prometheus(client, m).await {
            d.input.metrics.insert(m.name.clone(), v);
        }
    }
    if !is_leader(node) {
        return;
    }
    let req = Request {
        command: Command::CanaryTick {
            id: d.id.clone(),
            step: d.plan.step,
            input: d.input,
        },
        time_ms: now_ms(),
        request_id: None,
    };
    match tokio::time::timeout(node.request_timeout, node.raft.client_write(req)).await {
        Ok(Ok(resp)) => match resp.data.result {
            Ok(out) => {
                tracing::info!(canary = %d.id, step = d.plan.step, summary = %out.summary(), "canary tick")
            }
            Err(e) => tracing::warn!(canary = %d.id, error = %e, "canary tick refused"),
        },
        Ok(Err(e)) => tracing::info!(canary = %d.id, error = %e, "canary tick not committed"),
        Err(_) => tracing::info!(canary = %d.id, "canary tick timed out (no quorum?)"),
    }
}

/// One webhook call, as the tick records it.
async fn call_webhook(client: &HttpClient, call: &WebhookCall) -> WebhookResult {
    let timeout = Duration::from_millis(u64::try_from(call.timeout_ms).unwrap_or(0));
    let out = webhooks::call(client, &call.url, &call.payload, timeout, call.retries).await;
    tracing::debug!(webhook = %call.name, ok = out.ok, status = ?out.status, "canary webhook");
    WebhookResult {
        ok: out.ok,
        status: out.status,
        message: out.message,
    }
}

/// The value of a Prometheus metric in thousandths (`Some(None)`: no data or the query
/// failed, which fails the check); `None` for proxy metrics.
async fn query_prometheus(client: &HttpClient, m: &MetricQuery) -> Option<Option<i64>> {
    let MetricSource::Prometheus { address, query } = &m.source else {
        return None;
    };
    Some(
        match prometheus::query(client, address, query, PROMETHEUS_TIMEOUT).await {
            Ok(Some(v)) if v.is_finite() => Some((v * MILLI as f64).round() as i64),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(metric = %m.name, error = %e, "prometheus query failed");
                None
            }
        },
    )
}

/// An alert or notification of a committed tick, to send.
enum Note {
    /// A post-rollout or event webhook.
    Webhook(WebhookCall),
    /// An alert to one destination.
    Alert {
        canary: String,
        destination: String,
        target: AlertTarget,
        body: serde_json::Value,
    },
}

/// Sends one alert or notification through `client`; its answer changes nothing.
async fn notify(client: HttpClient, note: Note) {
    match note {
        Note::Webhook(call) => {
            let r = call_webhook(&client, &call).await;
            tracing::info!(webhook = %call.name, ok = r.ok, status = ?r.status, "canary notification sent");
        }
        Note::Alert {
            canary,
            destination,
            target: AlertTarget::Url(url),
            body,
        } => {
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let r = client
                .call(
                    Method::POST,
                    &url,
                    Some(Body::json(body)),
                    ALERT_TIMEOUT,
                    MAX_ANSWER_BYTES,
                )
                .await;
            match r {
                Ok(answer) => {
                    tracing::info!(%canary, %destination, status = answer.status.as_u16(), "canary alert sent")
                }
                Err(e) => {
                    tracing::warn!(%canary, %destination, error = %e, "canary alert not delivered")
                }
            }
        }
        Note::Alert {
            canary,
            destination,
            target: AlertTarget::Provider { name, .. },
            body,
        } => {
            // The hub has no provider registry: the alert is logged for the operator.
            tracing::warn!(%canary, %destination, provider = %name, alert = %body,
                "canary alert for a provider the hub does not know; logged only");
        }
    }
}
