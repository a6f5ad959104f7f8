//! One hub node: the Raft instance, its store, and the operations the APIs are built from
//! (propose a command, wait for a linearizable read, report status, change membership).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hub_client::request_id::new_request_id;
use hub_engine::Command;
use hub_proto::hub_client::HubClient;
use hub_proto::refusal::Refusal;
use hub_proto::{ForwardRequest, ReadIndexRequest, WriteReply};

use crate::committed::Committed;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::{BasicNode, ChangeMembers, Config, ReadPolicy, ServerState, SnapshotPolicy};
use raft_store::codec;
use raft_store::{NodeId, NodeIdentity, Raft, SharedState, StateMachine};
use tokio::time::Instant;
use tonic::Status;

use crate::auth::Caller;
use crate::network::NetworkFactory;
use crate::peers::{PeerPool, MAX_MESSAGE_BYTES};
use crate::propose::{propose, Proposal};
use hub_tls::Identity;

/// Largest encoded command a client may submit (SPEC S3: oversized messages are refused).
pub const MAX_COMMAND_BYTES: usize = raft_store::codec::MAX_COMMAND_BYTES;

/// Longest request id (idempotency key) a caller may send.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// How long `add_node` waits for a new node's catch-up when the request names no bound.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(60);

/// The longest catch-up wait a request may ask of `add_node`.
pub const MAX_CATCH_UP: Duration = Duration::from_secs(3_600);

/// Everything a node needs to start.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Raft node id (never reused).
    pub id: NodeId,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Address other nodes and clients use to reach this node.
    pub advertise: String,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Cluster this node belongs to.
    pub cluster_id: String,
    /// Leader heartbeat period.
    pub heartbeat_ms: u64,
    /// Election timeout range.
    pub election_min_ms: u64,
    /// Election timeout range.
    pub election_max_ms: u64,
    /// How long a write or linearizable read may wait for a leader and a quorum.
    pub request_timeout: Duration,
    /// Build a snapshot after this many new log entries.
    pub snapshot_logs: u64,
    /// Entries kept in the log behind a snapshot (for lagging followers).
    pub keep_logs: u64,
    /// How long an artifact-existence check is trusted.
    pub artifact_ttl: Duration,
    /// Timeout of one artifact-existence check.
    pub artifact_timeout: Duration,
    /// How this node dials its peers (its own certificate over TLS, or plaintext).
    pub connector: hub_tls::client::Connector,
    /// Addresses outbound HTTP calls never connect to (`--outbound-deny`, less the ranges of
    /// `--outbound-allow`).
    pub outbound_deny: hub_http::DenyList,
    /// CA certificates (PEM) webhooks, alerts and Prometheus queries trust besides the
    /// system's roots (`--outbound-ca-file`).
    pub outbound_ca_pem: Option<String>,
}

/// A running node.
pub struct HubNode {
    /// Raft node id.
    pub id: NodeId,
    /// Advertised address.
    pub addr: String,
    /// Cluster id.
    pub cluster_id: Arc<str>,
    /// The Raft handle.
    pub raft: Raft,
    /// The applied state, for reads.
    pub state: SharedState,
    /// The state machine (snapshot metadata).
    pub sm: StateMachine,
    /// Channels to peers.
    pub peers: Arc<PeerPool>,
    /// Deadline for writes and linearizable reads.
    pub request_timeout: Duration,
    /// Artifact-existence checks (used by the leader's orchestrator and `explain`).
    pub artifacts: crate::artifacts::ArtifactChecker,
    /// The outbound HTTP(S) clients: webhooks, alerts, Prometheus, registries.
    pub outbound: Arc<crate::outbound::Outbound>,
    /// Refused calls: by the authorization layer and by role (shared with the listener's
    /// [`crate::auth::Policy`]).
    pub auth_stats: Arc<crate::auth::AuthStats>,
    /// The node's Prometheus metrics.
    pub metrics: Arc<crate::metrics::NodeMetrics>,
    /// When the last shared read barrier started (see [`HubNode::shared_read_barrier`]).
    barrier: tokio::sync::Mutex<Option<Instant>>,
    /// The one backup this node serves at a time (`backup_save.rs`): one permit.
    pub backup_slot: Arc<tokio::sync::Semaphore>,
    /// When a leader last reached this node (see [`crate::leader_contact`]).
    pub leader_contact: Arc<crate::leader_contact::LeaderContact>,
    /// Silence after which this node counts itself cut off: the longest election timeout.
    cut_off_after: Duration,
    /// The peers' clock readings and the cluster time (see [`crate::cluster_clock`]).
    pub clock: Arc<crate::cluster_clock::ClusterClock>,
    /// Raised when the node begins to stop (see [`crate::stopping`]).
    pub stopping: crate::stopping::Stopping,
    /// The peers' reachability as the log shows it (see [`crate::peer_health`]).
    pub health: Arc<crate::peer_health::PeerHealth>,
    /// Leaders that refuse this node as a non-member, as the log shows them: once, then every
    /// 30 s, however many client calls meet the refusal.
    not_a_member_log: hub_log_limit::SharedLogLimiter<NodeId, ()>,
    /// Where reads that cost more than a lookup run (see [`crate::query_pool`]).
    pub queries: crate::query_pool::QueryPool,
}

/// The CA bundles of the replicated registries, by SHA-256, for the artifact checker.
fn ca_source(state: SharedState) -> crate::artifacts::CaSource {
    Arc::new(move |sha256: &str| {
        let applied = state.read();
        let pem = applied
            .state
            .environments()
            .flat_map(|e| e.settings.registries.iter())
            .find_map(|r| match &r.tls {
                hub_engine::artifact::RegistryTls::ExtraCa(bundle) if bundle.sha256() == sha256 => {
                    Some(bundle.pem().to_string())
                }
                _ => None,
            });
        pem
    })
}

/// How often a call in flight checks whether this node became cut off.
const CUT_OFF_CHECK: Duration = Duration::from_millis(100);

/// A cut-off refusal of a write this node already sent to a leader: it may still commit.
fn sent_before(refusal: &Status) -> Status {
    Refusal::CutOff.status(format!(
        "{}; the write was sent before and may still commit: retrying with the same request id \
         applies it at most once",
        refusal.message()
    ))
}

/// The error a client sees when no leader can be found in time.
fn no_leader(timeout: Duration) -> Status {
    Refusal::NoLeader.status(format!(
        "no leader: no hub node was elected leader within {timeout:?} (is a majority of nodes up and connected?)"
    ))
}

/// A write that could not be committed in time; it may still commit later.
fn no_quorum(timeout: Duration) -> Status {
    Refusal::NoQuorum.status(format!(
        "no quorum: the write was not committed within {timeout:?} because the leader cannot reach a majority; \
         it may still commit later, and retrying with the same request id applies it at most once"
    ))
}

/// Outcome of one attempt, inside the retry loops.
enum Attempt<T> {
    Done(Result<T, Status>),
    /// Leadership moved or the leader could not be reached: look again.
    Retry,
}

impl HubNode {
    /// Opens the store and starts Raft. Refuses a data directory of another node or cluster.
    pub async fn start(cfg: &NodeConfig) -> anyhow::Result<Arc<Self>> {
        let identity = NodeIdentity {
            node_id: cfg.id,
            cluster_id: cfg.cluster_id.clone(),
        };
        let config = Config {
            cluster_name: cfg.cluster_id.clone(),
            heartbeat_interval: cfg.heartbeat_ms,
            election_timeout_min: cfg.election_min_ms,
            election_timeout_max: cfg.election_max_ms,
            install_snapshot_timeout: 30_000,
            max_payload_entries: 64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_logs),
            max_in_snapshot_log_to_keep: cfg.keep_logs,
            enable_pre_vote: Some(true),
            // A leader that lost its quorum alternates silent and probing phases, so a partial
            // partition of a 5-node cluster cannot stall elections (openraft #2080). Must be at
            // least leader lease (= election max) + election max.
            quorum_loss_probe_interval: Some(2 * cfg.election_max_ms),
            ..Default::default()
        }
        .validate()?;
        // Opened only after the configuration is known to be valid: bad flags touch no file.
        let (_store, log, sm) = raft_store::open(&cfg.data_dir, &identity)?;
        let cluster_id: Arc<str> = cfg.cluster_id.clone().into();
        let peers = Arc::new(PeerPool::new(cfg.connector.clone()));
        // Readings older than two election timeouts are not used: the leader's are at most
        // a heartbeat old, and a node silent for that long is cut off.
        let clock = Arc::new(crate::cluster_clock::ClusterClock::new(
            cfg.id,
            Duration::from_millis(2 * cfg.election_max_ms),
        ));
        let health = Arc::new(crate::peer_health::PeerHealth::default());
        let network = NetworkFactory {
            self_id: cfg.id,
            cluster_id: cluster_id.clone(),
            peers: peers.clone(),
            clock: clock.clone(),
            // An append may take as long as followers wait for a heartbeat before they stand
            // for election: later than that, the peer is lagging whatever the transport says.
            append_ttl_floor: Duration::from_millis(cfg.election_min_ms),
            health: health.clone(),
        };
        let state = sm.shared();
        let outbound = Arc::new(
            crate::outbound::Outbound::new(cfg.outbound_deny.clone(), cfg.outbound_ca_pem.clone())
                .map_err(|e| anyhow::anyhow!("outbound HTTP client: {e}"))?,
        );
        let artifacts = crate::artifacts::ArtifactChecker::new(
            cfg.artifact_ttl,
            cfg.artifact_timeout,
            16,
            outbound.clone(),
            ca_source(state.clone()),
        );
        let raft = Raft::new(cfg.id, Arc::new(config), network, log, sm.clone()).await?;
        Ok(Arc::new(HubNode {
            id: cfg.id,
            addr: cfg.advertise.clone(),
            cluster_id,
            raft,
            state,
            sm,
            peers,
            request_timeout: cfg.request_timeout,
            artifacts,
            outbound,
            auth_stats: Arc::default(),
            metrics: Arc::default(),
            barrier: tokio::sync::Mutex::new(None),
            backup_slot: Arc::new(tokio::sync::Semaphore::new(1)),
            leader_contact: Arc::default(),
            cut_off_after: Duration::from_millis(cfg.election_max_ms),
            clock,
            stopping: Default::default(),
            health,
            not_a_member_log: Default::default(),
            queries: crate::query_pool::QueryPool::new(
                crate::query_pool::query_threads(),
                crate::query_pool::PER_CALLER_QUERIES,
            )
            .map_err(|e| anyhow::anyhow!("the query pool's threads: {e}"))?,
        }))
    }

    /// The cluster's time now, as this node estimates it from its voters' clocks: what a
    /// proposal from this node is stamped with, and the time its leader loops evaluate at.
    pub fn cluster_now_ms(&self) -> i64 {
        self.clock.now_ms(crate::propose::voters(&self.raft))
    }

    /// Why this node answers writes and linearizable reads with UNAVAILABLE now, if it
    /// does: as a follower (or candidate, or learner) it has not heard from a leader, as the
    /// leader no majority has acknowledged it, for longer than the longest election timeout.
    /// A one-voter cluster is never cut off. See [`crate::leader_contact`].
    pub fn cut_off(&self) -> Option<Status> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        if m.membership_config.membership().voter_ids().count() <= 1 {
            return None;
        }
        let (silence, what) = match m.state {
            ServerState::Shutdown => return None,
            // Not yet acknowledged by a majority (just elected): not cut off.
            ServerState::Leader => (
                openraft::Instant::elapsed(&**m.last_quorum_acked.as_ref()?),
                "no majority has acknowledged this leader",
            ),
            ServerState::Follower | ServerState::Candidate | ServerState::Learner => (
                self.leader_contact.silence(),
                "this node has not heard from a leader",
            ),
        };
        if silence <= self.cut_off_after {
            return None;
        }
        let members: Vec<String> = m
            .membership_config
            .membership()
            .nodes()
            .map(|(id, n)| format!("{id}={}", n.addr))
            .collect();
        Some(Refusal::CutOff.status(format!(
            "cut off: {what} for {} ms; try another member: {}",
            silence.as_millis(),
            members.join(", ")
        )))
    }

    /// Resolves once this node is cut off (checked every heartbeat's worth of time, at most
    /// every 100 ms), with the refusal to answer.
    async fn until_cut_off(&self) -> Status {
        loop {
            if let Some(refusal) = self.cut_off() {
                return refusal;
            }
            tokio::time::sleep(CUT_OFF_CHECK).await;
        }
    }

    /// The leader this node currently knows, with its address.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        let id = m.current_leader?;
        let addr = m
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
            .unwrap_or_default();
        Some((id, addr))
    }

    /// The leader this node knows; when it knows none (an election is under way), waits up
    /// to the request timeout for one, as a write does, so a membership call made in the
    /// middle of an election waits for its outcome instead of failing at once.
    /// A node cut off from the leader says so at once (its refusal names the other members).
    pub async fn leader_within_request_timeout(&self) -> Result<(NodeId, String), Status> {
        let deadline = Instant::now() + self.request_timeout;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if let Some(refusal) = self.cut_off() {
                return Err(refusal);
            }
            if Instant::now() >= deadline {
                return Err(no_leader(self.request_timeout));
            }
            self.wait_for_leader_change(None, deadline).await;
        }
    }

    /// An applied index and the state digest at it, as recent as `freshness` asks (computed
    /// off the state lock, so apply never waits for it, and at most one at a time; see
    /// [`raft_store::StateMachine::digest`]).
    pub async fn state_digest(
        &self,
        freshness: raft_store::DigestFreshness,
    ) -> Result<(u64, String), Status> {
        self.sm
            .digest(freshness)
            .await
            .map_err(|e| Status::internal(format!("state digest: {e}")))
    }

    /// Before a failed attempt is retried: returns at once when the leader this node knows is
    /// no longer `tried`, the one the attempt went to; otherwise waits (at most until
    /// `deadline`, and at most 200 ms) for the Raft metrics to change, for example for a
    /// leader to be elected.
    ///
    /// Without the first check, the writes in flight at a handover, which all fail at about
    /// the same moment, each waited for a change that had already happened, and with no
    /// write committing meanwhile, the next one took up to the full 200 ms.
    async fn wait_for_leader_change(&self, tried: Option<NodeId>, deadline: Instant) {
        let mut rx = self.raft.metrics();
        // Marked seen before the check, so a change after it wakes `changed` (and a fresh
        // receiver does not count the current value as a change, which would spin).
        if rx.borrow_and_update().current_leader != tried {
            return;
        }
        let until = deadline.min(Instant::now() + Duration::from_millis(200));
        let _ = tokio::time::timeout_at(until, rx.changed()).await;
    }

    fn hub_client(&self, addr: &str) -> Result<HubClient<tonic::transport::Channel>, Status> {
        let channel = self
            .peers
            .channel(addr)
            .map_err(|e| Status::internal(format!("bad leader address {addr}: {e}")))?;
        Ok(HubClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Commits `command` through Raft from any node: the leader proposes it, a follower
    /// forwards it to the leader, and while there is no leader the call waits up to the request
    /// timeout. Every write carries a request id (one is made up if the client gave none), so a
    /// forwarded write retried after a failover is applied at most once.
    ///
    /// The caller's verified identity becomes the entry's actor (`Command::as_verified`: the
    /// `As` wrapper, never what the client wrote), and its request id is scoped to that
    /// identity (`<identity>:<id>`), so no caller can claim or replay another's idempotency
    /// key.
    pub async fn propose(
        self: &Arc<Self>,
        command: Command,
        request_id: Option<String>,
        caller: &Caller,
    ) -> Result<Committed, Status> {
        let request_id = request_id.filter(|r| !r.is_empty());
        if let Some(r) = &request_id {
            if r.len() > MAX_REQUEST_ID_BYTES {
                return Err(Status::invalid_argument(format!(
                    "request_id: {} bytes, at most {MAX_REQUEST_ID_BYTES}",
                    r.len()
                )));
            }
        }
        let request_id = request_id.unwrap_or_else(new_request_id);
        // Checked against this node's state; apply checks again against the state the entry
        // applies to, so a binding revoked in between still refuses it.
        let authorized = caller.authorize(&self.state.read().state, &command);
        if let Err(refusal) = authorized {
            self.auth_stats.refused_by_role(refusal.message());
            if let Caller::Verified(actor) = caller {
                self.record_refusal(actor, &command, refusal.message());
            }
            return Err(refusal);
        }
        // A command the cluster's feature level does not have yet is refused before it is
        // proposed (apply refuses it too, on every node alike). The level only rises, so a
        // lagging node can only refuse too early, never let one through too late.
        if let Err(e) = hub_engine::feature_gate::check_level(&self.state.read().state, &command) {
            return Err(crate::status::command_status(&e));
        }
        let (command, request_id) = match caller {
            Caller::Verified(identity) => {
                let level = self.state.read().state.cluster_level();
                (
                    command.as_verified(identity, level),
                    format!("{identity}:{request_id}"),
                )
            }
            Caller::Insecure => (command, request_id),
        };
        self.commit(command, Some(request_id)).await
    }

    /// Records a refused write in the write audit, in the background and at a bounded rate
    /// (see [`crate::auth::AuthStats::may_audit`]); past the rate a refusal is only counted,
    /// and the next recorded one says how many were not.
    fn record_refusal(self: &Arc<Self>, actor: &Identity, command: &Command, error: &str) {
        let Some(unrecorded) = self.auth_stats.may_audit() else {
            return;
        };
        let mut error: String = error.chars().take(1024).collect();
        if unrecorded > 0 {
            error.push_str(&format!(" (and {unrecorded} more refusals not recorded)"));
        }
        let record = Command::RecordRefusal {
            actor: actor.clone(),
            command: command.variant_name().to_string(),
            target: hub_engine::access::target_text(&hub_engine::access::need(
                &self.state.read().state,
                command,
            ))
            .chars()
            .take(256)
            .collect(),
            error,
        };
        let node = self.clone();
        tokio::spawn(async move {
            if let Err(e) = node.commit(record, Some(new_request_id())).await {
                tracing::warn!(error = %e.message(), "could not record a refused write in the audit");
            }
        });
    }

    /// Commits `command` (already checked and stamped) through Raft from any node; see
    /// [`HubNode::propose`].
    async fn commit(
        &self,
        command: Command,
        request_id: Option<String>,
    ) -> Result<Committed, Status> {
        let encoded = codec::encode(&(&command, &request_id));
        if encoded.len() > MAX_COMMAND_BYTES {
            return Err(Status::invalid_argument(format!(
                "command is {} bytes, at most {MAX_COMMAND_BYTES} allowed",
                encoded.len()
            )));
        }
        let deadline = Instant::now() + self.request_timeout;
        let mut sent = false;
        loop {
            if let Some(refusal) = self.cut_off() {
                return Err(if sent { sent_before(&refusal) } else { refusal });
            }
            let leader = self.leader();
            let tried = leader.as_ref().map(|(id, _)| *id);
            sent |= leader.is_some();
            let attempt = async {
                match leader {
                    Some((leader, _)) if leader == self.id => {
                        self.propose_local(command.clone(), request_id.clone(), deadline)
                            .await
                    }
                    Some((leader, addr)) => {
                        self.forward(leader, &addr, encoded.clone(), deadline).await
                    }
                    None => Attempt::Retry,
                }
            };
            // An attempt in flight when this node becomes cut off is given up (it may still
            // commit): the caller hears at once and can move on.
            let attempt = tokio::select! {
                attempt = attempt => attempt,
                refusal = self.until_cut_off() => return Err(sent_before(&refusal)),
            };
            match attempt {
                Attempt::Done(r) => return r,
                Attempt::Retry if Instant::now() >= deadline => {
                    return Err(if self.leader().is_some() {
                        no_quorum(self.request_timeout)
                    } else {
                        no_leader(self.request_timeout)
                    })
                }
                Attempt::Retry => self.wait_for_leader_change(tried, deadline).await,
            }
        }
    }

    /// Proposes on this node, which believes it is the leader. Used for forwarded writes too.
    ///
    /// Only nodes call it (the authorization layer admits nothing else to `Forward`); the
    /// forwarding node already checked and stamped the command. Leader-only decisions are
    /// never forwarded, so one arriving here is refused.
    pub async fn propose_as_leader(&self, encoded: &[u8]) -> Result<WriteReply, Status> {
        if encoded.len() > MAX_COMMAND_BYTES + MAX_REQUEST_ID_BYTES + 64 {
            return Err(Status::invalid_argument(format!(
                "forwarded command is {} bytes, at most {MAX_COMMAND_BYTES} allowed",
                encoded.len()
            )));
        }
        let (command, request_id): (Command, Option<String>) =
            codec::decode_bounded(encoded, codec::Limit::Command)
                .map_err(|e| Status::invalid_argument(format!("bad forwarded command: {e}")))?;
        crate::command_origin::check_forwarded(&command)?;
        // A leader no majority acknowledges would only wait out the timeout: the forwarding
        // node hears so at once (nothing was proposed) and tells its caller.
        if let Some(refusal) = self.cut_off() {
            return Err(refusal);
        }
        let deadline = Instant::now() + self.request_timeout;
        match self.propose_local(command, request_id, deadline).await {
            Attempt::Done(r) => r.map(Committed::reply),
            Attempt::Retry => Err(Status::unavailable("not leader")),
        }
    }

    async fn propose_local(
        &self,
        command: Command,
        request_id: Option<String>,
        deadline: Instant,
    ) -> Attempt<Committed> {
        match propose(
            &self.raft,
            &self.metrics,
            &self.clock,
            command,
            request_id,
            deadline,
        )
        .await
        {
            Proposal::TimedOut => Attempt::Done(Err(no_quorum(self.request_timeout))),
            Proposal::Applied { result, index } => Attempt::Done(match result {
                Ok(output) => Ok(Committed::applied(output, index, self.id)),
                Err(e) => Err(crate::status::command_status(&e)),
            }),
            Proposal::NotLeader => Attempt::Retry,
            Proposal::Failed(e) => Attempt::Done(Err(Status::internal(e))),
        }
    }

    /// What this node answers its client when the leader refused to serve this node as a
    /// non-member (it was removed, or never joined): UNAVAILABLE, so the client moves on to
    /// another node, since the refusal is about this node and not the client's request.
    fn not_a_member(&self, leader: NodeId) -> Status {
        if let Some(n) = self
            .not_a_member_log
            .failed(&leader, (), std::time::Instant::now())
        {
            tracing::warn!(
                leader,
                calls = n.repeats,
                "the leader refuses this node's calls: it is not a member of the cluster"
            );
        }
        Refusal::NodeNotAMember.status(format!(
            "node {} is not a member of the cluster (the leader, node {leader}, refuses its \
             calls): use another node",
            self.id
        ))
    }

    async fn forward(
        &self,
        leader: NodeId,
        addr: &str,
        encoded: Vec<u8>,
        deadline: Instant,
    ) -> Attempt<Committed> {
        let mut client = match self.hub_client(addr) {
            Ok(c) => c,
            Err(e) => return Attempt::Done(Err(e)),
        };
        let mut req = tonic::Request::new(ForwardRequest {
            cluster_id: self.cluster_id.to_string(),
            command: encoded,
        });
        req.set_timeout(deadline.saturating_duration_since(Instant::now()));
        #[cfg(feature = "chaos-faults")]
        {
            crate::fault_layer::stamp(&mut req);
            if crate::fault_layer::is_cut(leader) {
                crate::fault_layer::lose(deadline.saturating_duration_since(Instant::now())).await;
                return Attempt::Retry;
            }
        }
        match tokio::time::timeout_at(deadline, client.forward(req)).await {
            Err(_) => Attempt::Retry,
            Ok(Ok(reply)) => Attempt::Done(Ok(Committed::forwarded(reply.into_inner()))),
            // The leader refused before proposing: this node's callers are cut off with it.
            Ok(Err(status)) if Refusal::of(&status) == Some(Refusal::CutOff) => {
                Attempt::Done(Err(Refusal::CutOff.status(format!(
                    "cut off: the leader, node {leader}, answered: {}",
                    status.message()
                ))))
            }
            Ok(Err(status)) if crate::auth::refuses_a_non_member(&status) => {
                Attempt::Done(Err(self.not_a_member(leader)))
            }
            Ok(Err(status)) if is_transient(&status) => {
                tracing::debug!(leader, error = %status.message(), "forward failed; retrying");
                Attempt::Retry
            }
            Ok(Err(status)) => Attempt::Done(Err(status)),
        }
    }

    /// Returns once this node's applied state reflects every write committed before the call
    /// (linearizable read), unless `stale` is set.
    pub async fn read_barrier(&self, stale: bool) -> Result<(), Status> {
        if stale {
            return Ok(());
        }
        let deadline = Instant::now() + self.request_timeout;
        loop {
            if let Some(refusal) = self.cut_off() {
                return Err(refusal);
            }
            let leader = self.leader();
            let tried = leader.as_ref().map(|(id, _)| *id);
            let attempt = async {
                match leader {
                    Some((leader, _)) if leader == self.id => {
                        self.leader_read_barrier(deadline).await
                    }
                    Some((leader, addr)) => {
                        self.follower_read_barrier(leader, &addr, deadline).await
                    }
                    None => Attempt::Retry,
                }
            };
            // A read has no effect: given up as soon as this node is cut off.
            let attempt = tokio::select! {
                attempt = attempt => attempt,
                refusal = self.until_cut_off() => return Err(refusal),
            };
            match attempt {
                Attempt::Done(r) => return r,
                Attempt::Retry if Instant::now() >= deadline => {
                    return Err(no_leader(self.request_timeout))
                }
                Attempt::Retry => self.wait_for_leader_change(tried, deadline).await,
            }
        }
    }

    /// The read index of this node as leader, confirmed by a majority.
    async fn leader_read_barrier(&self, deadline: Instant) -> Attempt<()> {
        match tokio::time::timeout_at(
            deadline,
            self.raft.ensure_linearizable(ReadPolicy::ReadIndex),
        )
        .await
        {
            Err(_) => Attempt::Done(Err(no_quorum(self.request_timeout))),
            Ok(Ok(_)) => Attempt::Done(Ok(())),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(_)))) => {
                Attempt::Retry
            }
            Ok(Err(e)) => Attempt::Done(Err(Status::unavailable(e.to_string()))),
        }
    }

    /// A read barrier shared by many concurrent callers: if one started less than `max_age`
    /// ago and succeeded, it is reused; otherwise one is run while the others wait for it.
    /// Thousands of agents' plan polls thus cost a few barriers per second, and a node cut off
    /// from the leader still fails them (so agents move to another node). The state served
    /// may miss writes committed in the last `max_age`; plan polls then see them on the next
    /// change notification.
    pub async fn shared_read_barrier(&self, max_age: Duration) -> Result<(), Status> {
        let mut last = self.barrier.lock().await;
        if last.is_some_and(|t| t.elapsed() < max_age) {
            return Ok(());
        }
        let started = Instant::now();
        self.read_barrier(false).await?;
        *last = Some(started);
        Ok(())
    }

    /// A linearizable read barrier for a request that arrived at `arrived`, shared with
    /// concurrent callers: a barrier that *started* after `arrived` covers every write
    /// committed before the request, so it is reused; otherwise one is run. Unlike
    /// [`HubNode::shared_read_barrier`] nothing committed before the call can be missed.
    pub async fn read_barrier_since(&self, arrived: Instant) -> Result<(), Status> {
        let mut last = self.barrier.lock().await;
        if last.is_some_and(|started| started >= arrived) {
            return Ok(());
        }
        let started = Instant::now();
        self.read_barrier(false).await?;
        *last = Some(started);
        Ok(())
    }

    async fn follower_read_barrier(
        &self,
        leader: NodeId,
        leader_addr: &str,
        deadline: Instant,
    ) -> Attempt<()> {
        let mut client = match self.hub_client(leader_addr) {
            Ok(c) => c,
            Err(e) => return Attempt::Done(Err(e)),
        };
        #[allow(unused_mut)] // stamped in chaos builds only
        let mut req = tonic::Request::new(ReadIndexRequest {
            cluster_id: self.cluster_id.to_string(),
        });
        #[cfg(feature = "chaos-faults")]
        {
            crate::fault_layer::stamp(&mut req);
            if crate::fault_layer::is_cut(leader) {
                crate::fault_layer::lose(deadline.saturating_duration_since(Instant::now())).await;
                return Attempt::Retry;
            }
        }
        let index = match tokio::time::timeout_at(deadline, client.read_index(req)).await {
            Err(_) => return Attempt::Retry,
            Ok(Ok(r)) => r.into_inner().index,
            Ok(Err(s)) if crate::auth::refuses_a_non_member(&s) => {
                return Attempt::Done(Err(self.not_a_member(leader)));
            }
            Ok(Err(s)) if is_transient(&s) => {
                tracing::debug!(leader, error = %s.message(), "read index failed; retrying");
                return Attempt::Retry;
            }
            Ok(Err(s)) => return Attempt::Done(Err(s)),
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        match self
            .raft
            .wait(Some(wait))
            .applied_index_at_least(Some(index), "linearizable read")
            .await
        {
            Ok(_) => Attempt::Done(Ok(())),
            Err(_) => Attempt::Done(Err(Refusal::NotCaughtUp.status(format!(
                "this node did not catch up to the leader's read index {index} within {:?}",
                self.request_timeout
            )))),
        }
    }

    /// Whether this node has applied `index`, waiting at most `timeout` for it.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "a write's reply")
            .await
            .is_ok()
    }

    /// On the leader: the index a follower must have applied to serve a linearizable read.
    pub async fn read_index(&self) -> Result<u64, Status> {
        let timeout = self.request_timeout;
        match tokio::time::timeout(
            timeout,
            self.raft.get_read_linearizer(ReadPolicy::ReadIndex),
        )
        .await
        {
            Err(_) => Err(no_quorum(timeout)),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(_)))) => {
                Err(Status::unavailable("not leader"))
            }
            Ok(Err(e)) => Err(Status::unavailable(e.to_string())),
            Ok(Ok(linearizer)) => Ok(linearizer.read_log_id().index()),
        }
    }

    /// Role of this node as the API reports it.
    pub fn role(&self) -> &'static str {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        match m.state {
            ServerState::Leader => "leader",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Follower => {
                if m.membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == self.id)
                {
                    "follower"
                } else {
                    "learner"
                }
            }
            ServerState::Shutdown => "shutdown",
        }
    }

    /// Initializes a new cluster with `members` (on one pristine node only).
    pub async fn initialize(&self, members: BTreeMap<NodeId, String>) -> Result<(), Status> {
        if !members.contains_key(&self.id) {
            return Err(Status::invalid_argument(format!(
                "members must include this node ({})",
                self.id
            )));
        }
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        self.raft
            .initialize(nodes)
            .await
            .map_err(|e| Status::failed_precondition(format!("initialize: {e}")))
    }

    /// Whether node `id` (a node of this cluster: its certificate says so) may act as a
    /// peer: a member (voter or learner) of the membership this node knows, or any node that
    /// the applied log has not recorded as removed (`hub_engine::cluster_members`).
    ///
    /// Admitting ids the membership does not name yet is what lets a node catch up from a
    /// leader it has not heard of: a node being added replays the log from the start, so it
    /// first holds the initial membership, and a member that was down while a node was added
    /// lags behind that addition; either would otherwise refuse a leader added later, for
    /// good. A removed node is refused once this node has applied its removal, whatever it
    /// claims later: ids are never reused. The common case, a named member, is decided from
    /// the Raft metrics alone, without the state's lock that apply holds.
    pub fn is_member(&self, id: NodeId) -> bool {
        let named = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            let named = m
                .membership_config
                .membership()
                .nodes()
                .any(|(n, _)| *n == id);
            named
        };
        named || !self.state.read().state.cluster_members().is_removed(id)
    }

    /// Current voters and learners.
    pub fn members(&self) -> Vec<(NodeId, String, bool)> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone(), voters.contains(id)))
            .collect()
    }

    /// On the leader: adds node `id` at `addr`, first as a learner that catches up (by
    /// snapshot if the log was purged), then as a voter unless `learner_only`.
    ///
    /// The new node must answer as node `id` of this cluster before it is added, and it is
    /// promoted only after it has acknowledged the log up to the commit index seen when it was
    /// added: an unreachable address never becomes a voter (which would cost the cluster its
    /// fault tolerance, or its quorum). The wait for that is at most `catch_up`; a node still
    /// catching up then stays a learner and keeps catching up. Idempotent: re-adding a member
    /// with the same address finishes a promotion that was interrupted and otherwise changes
    /// nothing.
    pub async fn add_node(
        &self,
        id: NodeId,
        addr: String,
        learner_only: bool,
        catch_up: Duration,
    ) -> Result<u64, Status> {
        assert!(
            catch_up <= MAX_CATCH_UP,
            "catch-up bound checked by the caller"
        );
        if let Some((_, known_addr, voter)) = self.members().into_iter().find(|(m, _, _)| *m == id)
        {
            if known_addr != addr {
                return Err(Status::already_exists(format!(
                    "node {id} is already a member at {known_addr}; node ids are never reused"
                )));
            }
            if voter || learner_only {
                return Ok(self
                    .raft
                    .metrics()
                    .borrow_watched()
                    .last_applied
                    .map(|l| l.index)
                    .unwrap_or(0));
            }
        } else {
            self.probe_new_node(id, &addr).await?;
            self.raft
                .add_learner(id, BasicNode::new(addr.clone()), false)
                .await
                .map_err(membership_status)?;
        }
        let target = self
            .raft
            .metrics()
            .borrow_watched()
            .cluster_committed
            .map(|l| l.index)
            .unwrap_or(0);
        self.wait_replicated(id, target, catch_up).await?;
        if learner_only {
            return Ok(target);
        }
        let resp = self
            .raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(membership_status)?;
        Ok(resp.log_id.index)
    }

    /// Checks that `addr` answers as node `id` of this cluster.
    async fn probe_new_node(&self, id: NodeId, addr: &str) -> Result<(), Status> {
        let mut client = self.hub_client(addr)?;
        let mut req = tonic::Request::new(hub_proto::NodeStatusRequest::default());
        req.set_timeout(Duration::from_secs(2));
        let status =
            match tokio::time::timeout(Duration::from_secs(2), client.node_status(req)).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(e)) => {
                    return Err(Status::failed_precondition(format!(
                        "node {id} at {addr} is not reachable ({}); start its hub-node first",
                        e.message()
                    )))
                }
                Err(_) => {
                    return Err(Status::failed_precondition(format!(
                        "node {id} at {addr} did not answer within 2s; start its hub-node first"
                    )))
                }
            };
        if status.id != id || status.cluster_id != *self.cluster_id {
            return Err(Status::failed_precondition(format!(
                "{addr} answers as node {} of cluster {:?}, not node {id} of {:?}",
                status.id, status.cluster_id, self.cluster_id
            )));
        }
        let cluster_level = self.state.read().state.cluster_level();
        hub_engine::feature_level::check_joining(
            cluster_level,
            status.feature_level,
            &status.version,
        )
        .map_err(|why| {
            hub_proto::refusal::Refusal::FeatureLevelTooLow
                .status(format!("node {id} at {addr} {why}"))
        })?;
        Ok(())
    }

    /// Waits until the leader's replication to `id` has reached `index`.
    async fn wait_replicated(
        &self,
        id: NodeId,
        index: u64,
        timeout: Duration,
    ) -> Result<(), Status> {
        let reached = |m: &openraft::RaftMetrics<raft_store::TypeConfig>| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(&id).cloned().flatten())
                .map(|l| l.index >= index)
                .unwrap_or(false)
        };
        self.raft
            .wait(Some(timeout))
            .metrics(reached, format!("node {id} replicated to {index}"))
            .await
            .map(|_| ())
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "node {id} did not catch up to index {index} within {timeout:?}; it stays a learner \
                     (retry add-node, or remove it with remove-node)"
                ))
            })
    }

    /// On the leader: hands the leadership to voter `to`, or with `None` to the voter whose
    /// replicated log is furthest along, and waits (at most `timeout`) until it leads.
    /// Returns the new leader and its term.
    ///
    /// The leader stops proposing at once and tells every member to drop its leader lease; the
    /// target campaigns as soon as its log holds the leader's last entry, so the cluster is
    /// without a leader for about one round of votes instead of an election timeout. Should
    /// the target not win, the other members elect someone as after a leader's loss.
    pub async fn transfer_leader(
        &self,
        to: Option<NodeId>,
        timeout: Duration,
    ) -> Result<(NodeId, u64), Status> {
        let (target, target_addr) = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            if m.current_leader != Some(self.id) {
                return Err(Status::unavailable("not leader"));
            }
            let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
            let target = match to {
                Some(id) if id == self.id => {
                    return Err(Status::invalid_argument(format!(
                        "to: node {id} already leads"
                    )))
                }
                Some(id) if !voters.contains(&id) => {
                    return Err(Status::invalid_argument(format!(
                        "to: node {id} is not a voter (voters: {voters:?})"
                    )))
                }
                Some(id) => id,
                None => {
                    let matched = |id: &NodeId| {
                        m.replication
                            .as_ref()
                            .and_then(|r| r.get(id).cloned().flatten())
                            .map(|l| l.index)
                    };
                    voters
                        .iter()
                        .filter(|v| **v != self.id)
                        .max_by_key(|v| (matched(v), std::cmp::Reverse(**v)))
                        .copied()
                        .ok_or_else(|| {
                            Status::failed_precondition(
                                "this node is the only voter: there is nobody to hand the leadership to",
                            )
                        })?
                }
            };
            let addr = m
                .membership_config
                .membership()
                .get_node(&target)
                .map(|n| n.addr.clone())
                .unwrap_or_default();
            (target, addr)
        };
        self.raft
            .trigger()
            .transfer_leader(target)
            .await
            .map_err(|e| Status::unavailable(format!("transfer leader: {e}")))?;
        // Waits for the target to lead, giving up early when its port refuses connections
        // (it stopped: every node of a cluster being shut down gets SIGTERM at once).
        let deadline = Instant::now() + timeout;
        loop {
            let step = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            let led = self
                .raft
                .wait(Some(step))
                .metrics(
                    |m| m.current_leader == Some(target),
                    format!("node {target} leads"),
                )
                .await;
            if let Ok(m) = led {
                return Ok((target, m.current_term));
            }
            if crate::port_probe::refuses_connections(&target_addr, step).await {
                return Err(Status::unavailable(format!(
                    "node {target} stopped before it took the leadership"
                )));
            }
            if Instant::now() >= deadline {
                let now = self.leader().map(|(id, _)| id.to_string());
                return Err(Status::deadline_exceeded(format!(
                    "node {target} did not take the leadership within {timeout:?} (leader now: {})",
                    now.as_deref().unwrap_or("none")
                )));
            }
        }
    }

    /// On the leader: removes node `id` (voter or learner) from the cluster.
    pub async fn remove_node(&self, id: NodeId) -> Result<u64, Status> {
        let members = self.members();
        let Some((_, _, voter)) = members.iter().find(|(m, _, _)| *m == id) else {
            return Err(Status::not_found(format!("node {id} is not a member")));
        };
        if *voter && members.iter().filter(|(_, _, v)| *v).count() == 1 {
            return Err(Status::failed_precondition("cannot remove the last voter"));
        }
        let change = if *voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        let resp = self
            .raft
            .change_membership(change, false)
            .await
            .map_err(membership_status)?;
        Ok(resp.log_id.index)
    }
}

fn membership_status(
    e: RaftError<raft_store::TypeConfig, ClientWriteError<raft_store::TypeConfig>>,
) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => {
            Status::unavailable("not leader")
        }
        other => Status::failed_precondition(other.to_string()),
    }
}

/// Errors after which a forwarded call may be tried again (idempotent thanks to request ids).
pub fn is_transient(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Unknown
    )
}
