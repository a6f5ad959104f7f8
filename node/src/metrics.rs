//! The node's Prometheus metrics (`hub-node --metrics-listen`), in the OpenMetrics text
//! format (`hub_` prefix, base units, counters ending in `_total`).
//!
//! Two kinds of values:
//! - **Events** are counted where they happen: proposals and their latency
//!   ([`crate::propose`]), API calls ([`ApiMetricsLayer`]), orchestrator passes, canary
//!   ticks and their webhooks and metric queries, agent polls and plan deliveries.
//! - **Levels** are read at scrape time ([`NodeMetrics::render`]): Raft's term, leader and
//!   indexes from its metrics channel, plans and canaries from the applied state, refusal
//!   counts from the authorization layer and the listener.
//!
//! Every node serves its own view; the orchestrator's (blocked entities, evaluation time,
//! trigger-to-issue latency) only exists on the leader.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use openraft::async_runtime::watch::WatchReceiver;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Latency buckets in seconds: 1 ms to 30 s.
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// `service` and `method` of a gRPC call, and its status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `hub.v1.Hub`.
    pub service: String,
    /// `Submit`.
    pub method: String,
    /// `OK`, `PermissionDenied`, …
    pub code: String,
}

/// `service` and `method` of a gRPC call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// `hub.v1.Hub`.
    pub service: String,
    /// `Submit`.
    pub method: String,
}

/// One label: `reason`, `outcome`, `environment`, ….
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why a call was refused.
    pub reason: String,
}

/// A peer node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabel {
    /// Its Raft id.
    pub peer: String,
}

/// The outcome of a proposal, webhook or query.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok` or `error`.
    pub outcome: String,
}

/// An environment.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnvironmentLabel {
    /// Its name.
    pub environment: String,
}

/// A constraint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConstraintLabel {
    /// `maintenance-window`, `suppression`, …
    pub constraint: String,
}

/// A plan kind and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanLabels {
    /// `version-change`, `rollback`, …
    pub kind: String,
    /// `issued`, `running`, `succeeded`, `failed`, `cancelled`.
    pub status: String,
}

/// A canary.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CanaryLabel {
    /// `<environment>/<name>`.
    pub canary: String,
}

/// A canary and one of its phases.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CanaryPhaseLabels {
    /// `<environment>/<name>`.
    pub canary: String,
    /// `Progressing`, `Succeeded`, ….
    pub phase: String,
}

/// Counts read at scrape time from elsewhere (the authorization layer, the listeners, Raft
/// storage).
pub struct Sources {
    /// The authorization layer's refusals.
    pub auth: Arc<crate::auth::AuthStats>,
    /// The gRPC listener's refusals, when it speaks TLS.
    pub listener: Option<Arc<hub_tls::server::ListenerStats>>,
    /// Snapshots built and installed since the last scrape.
    pub snapshots: Arc<raft_store::SnapshotStats>,
    /// The peers' clock readings.
    pub clock: Arc<crate::cluster_clock::ClusterClock>,
}

/// Every metric of the node.
pub struct NodeMetrics {
    registry: Registry,
    /// One scrape at a time: a render clears and refills the level families, which a
    /// concurrent render must not see half done.
    rendering: Mutex<()>,
    sources: Mutex<Option<Sources>>,
    // Raft
    term: Gauge,
    leader: Gauge,
    is_leader: Gauge,
    last_log_index: Gauge,
    committed_index: Gauge,
    applied_index: Gauge,
    apply_lag: Gauge,
    snapshot_index: Gauge,
    peer_clock_offset: Family<PeerLabel, Gauge>,
    entry_clock_raised: Gauge,
    /// Proposals by outcome.
    pub proposals: Family<OutcomeLabel, Counter>,
    /// Time from proposing to the entry's commit and apply on this (leader) node.
    pub proposal_seconds: Histogram,
    /// Leader changes this node saw.
    pub leader_changes: Counter,
    snapshot_builds: Counter,
    snapshot_build_seconds: Histogram,
    snapshot_installs: Counter,
    snapshot_install_seconds: Histogram,
    /// Backups this node served (`hubctl snapshot save`), by outcome.
    pub backups: Family<OutcomeLabel, Counter>,
    /// When this node last served a whole backup, in seconds since the Unix epoch.
    pub backup_last_success: Gauge,
    // API
    /// Calls by service, method and code.
    pub requests: Family<CallLabels, Counter>,
    /// Call latency by service and method.
    pub request_seconds: Family<MethodLabels, Histogram>,
    refused: Family<ReasonLabel, Counter>,
    // Orchestration
    plans: Family<PlanLabels, Gauge>,
    blocked: Family<ConstraintLabel, Gauge>,
    /// The leader's entities blocked per constraint, from its latest evaluations.
    blocked_now: Mutex<BTreeMap<&'static str, i64>>,
    /// Orchestrator passes' duration.
    pub evaluation_seconds: Histogram,
    /// Entities evaluated by the orchestrator.
    pub evaluations: Counter,
    /// From an entity becoming dirty (a trigger) to its `Evaluate` proposal's commit.
    pub trigger_to_issue_seconds: Histogram,
    // Canaries
    canary_phase: Family<CanaryPhaseLabels, Gauge>,
    canary_weight: Family<CanaryLabel, Gauge>,
    canary_failed_checks: Family<CanaryLabel, Gauge>,
    /// Canary ticks the leader proposed.
    pub canary_ticks: Counter,
    /// Webhook calls by outcome and their latency.
    pub webhooks: Family<OutcomeLabel, Counter>,
    /// Webhook latency.
    pub webhook_seconds: Histogram,
    /// Metric queries by outcome.
    pub metric_queries: Family<OutcomeLabel, Counter>,
    /// Metric query latency.
    pub metric_query_seconds: Histogram,
    // Agents
    polls_in_flight: Family<EnvironmentLabel, Gauge>,
    last_seen_age: Family<EnvironmentLabel, Gauge<f64, AtomicU64>>,
    agents: Mutex<HashMap<String, AgentSeen>>,
    /// From a plan's commit (`issued_ms`) to its first delivery to an agent by this node.
    pub plan_delivery_seconds: Histogram,
}

/// What a node knows of one environment's agent.
#[derive(Debug, Default)]
struct AgentSeen {
    /// Its long polls open now.
    polls: i64,
    /// Its last call.
    last: Option<Instant>,
    /// The newest plan delivered to it: (issued at, id).
    delivered: Option<(i64, String)>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// Every metric at zero, registered.
    pub fn new() -> Self {
        let mut m = NodeMetrics {
            registry: Registry::with_prefix("hub"),
            rendering: Mutex::new(()),
            sources: Mutex::new(None),
            term: Gauge::default(),
            leader: Gauge::default(),
            is_leader: Gauge::default(),
            last_log_index: Gauge::default(),
            committed_index: Gauge::default(),
            applied_index: Gauge::default(),
            apply_lag: Gauge::default(),
            peer_clock_offset: Family::default(),
            entry_clock_raised: Gauge::default(),
            snapshot_index: Gauge::default(),
            proposals: Family::default(),
            proposal_seconds: latency_histogram(),
            leader_changes: Counter::default(),
            snapshot_builds: Counter::default(),
            snapshot_build_seconds: latency_histogram(),
            snapshot_installs: Counter::default(),
            snapshot_install_seconds: latency_histogram(),
            backups: Family::default(),
            backup_last_success: Gauge::default(),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(latency_histogram),
            refused: Family::default(),
            plans: Family::default(),
            blocked: Family::default(),
            blocked_now: Mutex::new(BTreeMap::new()),
            evaluation_seconds: latency_histogram(),
            evaluations: Counter::default(),
            trigger_to_issue_seconds: latency_histogram(),
            canary_phase: Family::default(),
            canary_weight: Family::default(),
            canary_failed_checks: Family::default(),
            canary_ticks: Counter::default(),
            webhooks: Family::default(),
            webhook_seconds: latency_histogram(),
            metric_queries: Family::default(),
            metric_query_seconds: latency_histogram(),
            polls_in_flight: Family::default(),
            last_seen_age: Family::default(),
            agents: Mutex::new(HashMap::new()),
            plan_delivery_seconds: latency_histogram(),
        };
        m.register();
        m
    }

    fn register(&mut self) {
        let mut registry = Registry::with_prefix("hub");
        self.register_raft(registry.sub_registry_with_prefix("raft"));
        self.register_api(registry.sub_registry_with_prefix("api"));
        self.register_orchestration(&mut registry);
        self.register_canary(registry.sub_registry_with_prefix("canary"));
        self.register_agent(registry.sub_registry_with_prefix("agent"));
        self.registry = registry;
    }

    fn register_raft(&self, raft: &mut Registry) {
        raft.register("term", "The current Raft term", self.term.clone());
        raft.register(
            "leader",
            "The leader's node id as this node knows it (0: none)",
            self.leader.clone(),
        );
        raft.register(
            "is_leader",
            "1 if this node is the leader",
            self.is_leader.clone(),
        );
        raft.register(
            "last_log_index",
            "The index of this node's last log entry",
            self.last_log_index.clone(),
        );
        raft.register(
            "commit_index",
            "The newest index this node knows committed",
            self.committed_index.clone(),
        );
        raft.register(
            "applied_index",
            "The newest index applied to this node's state",
            self.applied_index.clone(),
        );
        raft.register(
            "apply_lag",
            "Entries in this node's log not yet applied",
            self.apply_lag.clone(),
        );
        raft.register(
            "snapshot_index",
            "The index of this node's newest snapshot",
            self.snapshot_index.clone(),
        );
        raft.register(
            "peer_clock_offset_milliseconds",
            "Each peer's wall clock minus this node's, from the last Raft reply it sent this node",
            self.peer_clock_offset.clone(),
        );
        raft.register(
            "entry_clock_raised",
            "Entries whose stamp was behind the last state-changing entry's time and ran at it",
            self.entry_clock_raised.clone(),
        );
        raft.register(
            "proposals",
            "Writes this node proposed as leader, by outcome",
            self.proposals.clone(),
        );
        raft.register_with_unit(
            "proposal_duration",
            "From proposing a write to its commit and apply on the leader",
            Unit::Seconds,
            self.proposal_seconds.clone(),
        );
        raft.register(
            "leader_changes",
            "Times the leader this node knows changed",
            self.leader_changes.clone(),
        );
        raft.register(
            "backups",
            "Backups this node served (hubctl snapshot save), by outcome",
            self.backups.clone(),
        );
        raft.register(
            "backup_last_success_timestamp_seconds",
            "When this node last served a whole backup (Unix seconds; 0: never since start)",
            self.backup_last_success.clone(),
        );
        raft.register(
            "snapshot_builds",
            "Snapshots this node built",
            self.snapshot_builds.clone(),
        );
        raft.register_with_unit(
            "snapshot_build_duration",
            "Time to build a snapshot",
            Unit::Seconds,
            self.snapshot_build_seconds.clone(),
        );
        raft.register(
            "snapshot_installs",
            "Snapshots installed from the leader",
            self.snapshot_installs.clone(),
        );
        raft.register_with_unit(
            "snapshot_install_duration",
            "Time to install a snapshot",
            Unit::Seconds,
            self.snapshot_install_seconds.clone(),
        );
    }

    fn register_api(&self, api: &mut Registry) {
        api.register(
            "requests",
            "gRPC calls by service, method and status code",
            self.requests.clone(),
        );
        api.register_with_unit(
            "request_duration",
            "gRPC call latency by service and method (to the response's headers)",
            Unit::Seconds,
            self.request_seconds.clone(),
        );
        api.register(
            "refused",
            "Calls and connections refused, by reason (authentication, authorization, role, connection_limit, peer_connection_limit, evicted_unadmitted, admission_timeout, handshake, handshake_timeout, certificate)",
            self.refused.clone(),
        );
    }

    fn register_orchestration(&self, r: &mut Registry) {
        let orch = r.sub_registry_with_prefix("orchestrator");
        orch.register(
            "entities_blocked",
            "Entities the leader found blocked, by the first constraint that failed (leader only)",
            self.blocked.clone(),
        );
        orch.register_with_unit(
            "pass_duration",
            "Time of one orchestrator pass: evaluating the dirty entities and proposing",
            Unit::Seconds,
            self.evaluation_seconds.clone(),
        );
        orch.register(
            "evaluations",
            "Entities the orchestrator evaluated",
            self.evaluations.clone(),
        );
        orch.register_with_unit(
            "trigger_to_issue",
            "From a change that makes entities dirty to the commit of their Evaluate proposal",
            Unit::Seconds,
            self.trigger_to_issue_seconds.clone(),
        );
        r.register(
            "plans",
            "Plans in the replicated state, by kind and status",
            self.plans.clone(),
        );
    }

    fn register_canary(&self, canary: &mut Registry) {
        canary.register(
            "phase",
            "1 for each canary's current phase",
            self.canary_phase.clone(),
        );
        canary.register(
            "weight",
            "Each canary's traffic weight, in percent",
            self.canary_weight.clone(),
        );
        canary.register(
            "failed_checks",
            "Each canary's failed checks in its current analysis",
            self.canary_failed_checks.clone(),
        );
        canary.register(
            "ticks",
            "Canary ticks the leader proposed",
            self.canary_ticks.clone(),
        );
        canary.register(
            "webhooks",
            "Canary webhook calls by outcome",
            self.webhooks.clone(),
        );
        canary.register_with_unit(
            "webhook_duration",
            "Canary webhook call latency",
            Unit::Seconds,
            self.webhook_seconds.clone(),
        );
        canary.register(
            "metric_queries",
            "Canary metric queries by outcome",
            self.metric_queries.clone(),
        );
        canary.register_with_unit(
            "metric_query_duration",
            "Canary metric query latency",
            Unit::Seconds,
            self.metric_query_seconds.clone(),
        );
    }

    fn register_agent(&self, agent: &mut Registry) {
        agent.register(
            "polls_in_flight",
            "Agents' plan long-polls open on this node, by environment (connected agents)",
            self.polls_in_flight.clone(),
        );
        agent.register_with_unit(
            "last_seen_age",
            "Time since an environment's agent last called this node",
            Unit::Seconds,
            self.last_seen_age.clone(),
        );
        agent.register_with_unit(
            "plan_delivery",
            "From a plan's commit to its first delivery to an agent by this node",
            Unit::Seconds,
            self.plan_delivery_seconds.clone(),
        );
    }

    /// Connects the counts kept elsewhere, read at every scrape.
    pub fn attach(&self, sources: Sources) {
        *self.sources.lock().unwrap_or_else(|p| p.into_inner()) = Some(sources);
    }

    /// Records the leader's blocked entities per constraint.
    pub fn set_blocked(&self, counts: BTreeMap<&'static str, i64>) {
        *self.blocked_now.lock().unwrap_or_else(|p| p.into_inner()) = counts;
    }

    /// An agent of `environment` called.
    pub fn agent_seen(&self, environment: &str) {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents.entry(environment.to_string()).or_default().last = Some(Instant::now());
    }

    /// An agent of `environment` opened a long poll; the guard closes it.
    pub fn poll_opened(self: &Arc<Self>, environment: &str) -> PollGuard {
        {
            let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            let seen = agents.entry(environment.to_string()).or_default();
            seen.polls += 1;
            seen.last = Some(Instant::now());
        }
        PollGuard {
            metrics: self.clone(),
            environment: environment.to_string(),
        }
    }

    /// Plans `(issued_ms, id)` were delivered to `environment`'s agent at `now_ms`: the ones
    /// newer than any delivered to it before are observed (plans commit in issue order).
    pub fn delivered(&self, environment: &str, plans: &[(i64, &str)], now_ms: i64) {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let seen = agents.entry(environment.to_string()).or_default();
        let mut newest = seen.delivered.clone();
        for &(issued_ms, id) in plans {
            let key = (issued_ms, id);
            let is_new = seen
                .delivered
                .as_ref()
                .is_none_or(|(t, i)| key > (*t, i.as_str()));
            if is_new {
                let ms = (now_ms - issued_ms).max(0) as f64;
                self.plan_delivery_seconds.observe(ms / 1_000.0);
                if newest.as_ref().is_none_or(|(t, i)| key > (*t, i.as_str())) {
                    newest = Some((issued_ms, id.to_string()));
                }
            }
        }
        seen.delivered = newest;
    }

    /// The metrics as OpenMetrics text, with the levels read now from node `id`'s `raft` and
    /// applied `state`.
    pub fn render(
        &self,
        id: u64,
        raft: &raft_store::Raft,
        state: &raft_store::SharedState,
    ) -> String {
        let _one_at_a_time = self.rendering.lock().unwrap_or_else(|p| p.into_inner());
        let leader = self.read_raft(id, raft);
        self.read_state(&state.read().state, leader);
        self.read_sources();
        self.read_agents();
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Reads Raft's levels; whether this node is the leader.
    fn read_raft(&self, id: u64, raft: &raft_store::Raft) -> bool {
        let m = raft.metrics().borrow_watched().clone();
        let index = |l: Option<&raft_store::LogId>| l.map_or(0, |l| l.index) as i64;
        self.term.set(m.current_term as i64);
        self.leader.set(m.current_leader.unwrap_or(0) as i64);
        self.is_leader.set(i64::from(m.current_leader == Some(id)));
        let last = m.last_log_index.unwrap_or(0) as i64;
        let applied = index(m.last_applied.as_ref());
        self.last_log_index.set(last);
        self.committed_index.set(index(m.local_committed.as_ref()));
        self.applied_index.set(applied);
        self.apply_lag.set((last - applied).max(0));
        self.snapshot_index.set(index(m.snapshot.as_ref()));
        m.current_leader == Some(id)
    }

    fn read_state(&self, state: &hub_engine::State, leader: bool) {
        self.entry_clock_raised
            .set(i64::try_from(state.entry_clock().raised).unwrap_or(i64::MAX));
        // Counts kept by the plan table as plans change: a scrape under the state's read
        // lock costs the number of (kind, status) pairs, not of plans.
        self.plans.clear();
        for ((kind, status), n) in state.plan_counts() {
            self.plans
                .get_or_create(&PlanLabels {
                    kind: kind.to_string(),
                    status: status.to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.canary_phase.clear();
        self.canary_weight.clear();
        self.canary_failed_checks.clear();
        for c in state.canaries() {
            let canary = CanaryLabel {
                canary: c.id.clone(),
            };
            self.canary_phase
                .get_or_create(&CanaryPhaseLabels {
                    canary: c.id.clone(),
                    phase: c.status.phase.as_str().to_string(),
                })
                .set(1);
            self.canary_weight
                .get_or_create(&canary)
                .set(i64::from(c.status.canary_weight));
            self.canary_failed_checks
                .get_or_create(&canary)
                .set(i64::from(c.status.failed_checks));
        }
        self.blocked.clear();
        if leader {
            let blocked = self.blocked_now.lock().unwrap_or_else(|p| p.into_inner());
            for (constraint, n) in blocked.iter() {
                self.blocked
                    .get_or_create(&ConstraintLabel {
                        constraint: constraint.to_string(),
                    })
                    .set(*n);
            }
        }
    }

    fn read_sources(&self) {
        let sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = sources.as_ref() else {
            return;
        };
        for (op, took) in s.snapshots.drain() {
            let (count, seconds) = match op {
                raft_store::SnapshotOp::Build => {
                    (&self.snapshot_builds, &self.snapshot_build_seconds)
                }
                raft_store::SnapshotOp::Install => {
                    (&self.snapshot_installs, &self.snapshot_install_seconds)
                }
            };
            count.inc();
            observe(seconds, took);
        }
        self.peer_clock_offset.clear();
        for p in s.clock.peers() {
            self.peer_clock_offset
                .get_or_create(&PeerLabel {
                    peer: p.id.to_string(),
                })
                .set(p.offset_ms);
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut rows = vec![
            ("authentication", load(&s.auth.unauthenticated)),
            ("authorization", load(&s.auth.denied)),
            ("role", load(&s.auth.by_role)),
        ];
        if let Some(l) = &s.listener {
            rows.extend([
                ("connection_limit", load(&l.budget.over_cap)),
                ("peer_connection_limit", load(&l.budget.peers_over_cap)),
                ("evicted_unadmitted", load(&l.budget.evicted)),
                ("admission_timeout", load(&l.budget.admission_timeouts)),
                ("handshake", load(&l.handshakes_refused)),
                ("handshake_timeout", load(&l.handshakes_timed_out)),
                ("certificate", load(&l.certificates_refused)),
            ]);
        }
        for (reason, n) in rows {
            self.refused
                .get_or_create(&ReasonLabel {
                    reason: reason.to_string(),
                })
                .inner()
                .store(n, Ordering::Relaxed);
        }
    }

    fn read_agents(&self) {
        let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        self.polls_in_flight.clear();
        self.last_seen_age.clear();
        for (env, seen) in agents.iter() {
            let label = EnvironmentLabel {
                environment: env.clone(),
            };
            self.polls_in_flight.get_or_create(&label).set(seen.polls);
            if let Some(last) = seen.last {
                self.last_seen_age
                    .get_or_create(&label)
                    .set(last.elapsed().as_secs_f64());
            }
        }
    }
}

/// An agent's open long poll; dropping it closes the poll.
pub struct PollGuard {
    metrics: Arc<NodeMetrics>,
    environment: String,
}

impl Drop for PollGuard {
    fn drop(&mut self) {
        let mut agents = self
            .metrics
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(seen) = agents.get_mut(&self.environment) {
            seen.polls -= 1;
            seen.last = Some(Instant::now());
        }
    }
}

/// Counts the leader changes `raft` sees into `metrics`, for as long as it runs.
pub fn watch_leader(raft: &raft_store::Raft, metrics: Arc<NodeMetrics>) {
    let mut rx = raft.metrics();
    tokio::spawn(async move {
        let mut leader = rx.borrow_watched().current_leader;
        while rx.changed().await.is_ok() {
            let now = rx.borrow_watched().current_leader;
            if now != leader {
                if now.is_some() {
                    metrics.leader_changes.inc();
                }
                leader = now;
            }
        }
    });
}

/// Observes `elapsed` into `h` in seconds.
pub fn observe(h: &Histogram, elapsed: Duration) {
    h.observe(elapsed.as_secs_f64());
}

/// The tower layer that counts every gRPC call by service, method and status code, and
/// times it to its response headers. It sits outside the authorization layer, so refused
/// calls are counted too. The code is the `grpc-status` header of a trailers-only answer
/// (every error a handler or a layer returns), else `OK`: an error a stream ends with in its
/// trailers counts as `OK`.
#[derive(Clone)]
pub struct ApiMetricsLayer {
    metrics: Arc<NodeMetrics>,
}

impl ApiMetricsLayer {
    /// A layer counting into `metrics`.
    pub fn new(metrics: Arc<NodeMetrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for ApiMetricsLayer {
    type Service = ApiMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// See [`ApiMetricsLayer`].
#[derive(Clone)]
pub struct ApiMetricsService<S> {
    inner: S,
    metrics: Arc<NodeMetrics>,
}

/// `(service, method)` of a gRPC path, with unknown paths folded into one label so a caller
/// cannot grow the label set.
fn method_of(path: &str) -> (String, String) {
    if crate::auth::rule(path).is_none() {
        return ("unknown".into(), "unknown".into());
    }
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or("unknown").to_string();
    let method = parts.next().unwrap_or("unknown").to_string();
    (service, method)
}

impl<S, B> tower::Service<http::Request<B>> for ApiMetricsService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (service, method) = method_of(req.uri().path());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            let code = match &res {
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or_else(
                        || "OK".to_string(),
                        |c| format!("{:?}", tonic::Code::from_i32(c)),
                    ),
                Err(_) => "transport_error".to_string(),
            };
            let labels = MethodLabels { service, method };
            observe(
                &metrics.request_seconds.get_or_create(&labels),
                started.elapsed(),
            );
            metrics
                .requests
                .get_or_create(&CallLabels {
                    service: labels.service,
                    method: labels.method,
                    code,
                })
                .inc();
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_share_one_label() {
        assert_eq!(
            method_of("/hub.v1.Hub/Submit"),
            ("hub.v1.Hub".to_string(), "Submit".to_string())
        );
        assert_eq!(
            method_of("/evil/x"),
            ("unknown".to_string(), "unknown".to_string())
        );
    }

    #[test]
    fn deliveries_are_observed_once_per_plan() {
        let m = NodeMetrics::new();
        m.delivered("prod", &[(1_000, "p-5-0"), (1_500, "p-7-0")], 2_000);
        m.delivered("prod", &[(1_000, "p-5-0"), (1_500, "p-7-0")], 3_000);
        m.delivered(
            "prod",
            &[(1_000, "p-5-0"), (1_500, "p-7-0"), (2_500, "p-9-0")],
            3_000,
        );
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry).unwrap();
        assert!(
            out.contains("hub_agent_plan_delivery_seconds_count 3"),
            "{out}"
        );
        assert!(
            out.contains("hub_agent_plan_delivery_seconds_sum 2.0"),
            "{out}"
        );
    }
}
