//! The client API (`hub.v1.Hub`): any node serves it. Writes go through
//! [`HubNode::propose`], reads wait on [`HubNode::read_barrier`] unless `stale` is set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hub_engine::{Command, CommandError, EntityKind};
use hub_proto::hub_client::HubClient;
use hub_proto::hub_server::Hub;
use hub_proto::*;
use tonic::{Request, Response, Status};

use crate::auth::Caller;
use crate::node::HubNode;
use crate::peers::MAX_MESSAGE_BYTES;
use crate::status::command_status;
use hub_tls::Identity;
use openraft::async_runtime::watch::WatchReceiver;
use raft_store::DigestFreshness;

/// Largest `query_json` accepted: a dry run of the largest module definition (256 KiB) with
/// room for JSON's escapes; a longer one is refused before it is parsed.
pub const MAX_QUERY_BYTES: usize = 1 << 20;

/// Longest query answered without a place in the query pool (see [`crate::query_pool`]):
/// lookups are short; a longer query is counted against its caller before it is parsed.
const MAX_LOOKUP_QUERY_BYTES: usize = 4 << 10;

/// How long `TransferLeader` waits for the target to lead: a few rounds of votes.
pub const TRANSFER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The gRPC service.
pub struct HubService {
    /// The node it serves from.
    pub node: Arc<HubNode>,
}

/// Longest command JSON parsed (docs/SECURITY.md "Budgets"): four times the longest command
/// ([`crate::node::MAX_COMMAND_BYTES`], checked on its encoding after parsing), room for JSON's
/// escapes. serde_json allocates up to about twelve times its input (a list of empty strings),
/// so a message of 32 MiB is refused before it is read.
pub const MAX_COMMAND_JSON_BYTES: usize = 4 * crate::node::MAX_COMMAND_BYTES;

/// Parses a submitted command. Agent reports and leader-only decisions are refused here:
/// they have their own API ([`crate::agent_api`]) or are the leader's alone.
pub fn parse_submitted(json: &str) -> Result<Command, Status> {
    if json.len() > MAX_COMMAND_JSON_BYTES {
        return Err(Status::invalid_argument(format!(
            "command: {} bytes of JSON, at most {MAX_COMMAND_JSON_BYTES} allowed",
            json.len()
        )));
    }
    let command: Command = serde_json::from_str(json).map_err(|e| {
        // serde quotes offending values; a malformed secret must not be echoed back.
        if json.contains("\"SetSecret\"") || json.contains("\"PutSecret\"") {
            Status::invalid_argument(format!(
                "bad SetSecret command at line {} column {} (details withheld: they may contain the secret)",
                e.line(),
                e.column()
            ))
        } else {
            Status::invalid_argument(format!("bad command: {e}"))
        }
    })?;
    crate::command_origin::check_submitted(&command)?;
    Ok(command)
}

fn stale(read: &Option<ReadOptions>) -> bool {
    read.as_ref().map(|r| r.stale).unwrap_or(false)
}

fn opt(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn entity_proto(e: &hub_engine::Entity) -> Entity {
    Entity {
        id: e.id.0.clone(),
        environment: e.environment.clone(),
        kind: e.kind.to_string(),
        name: e.name.clone(),
        product_id: e.product_id.clone(),
        k8s_namespace: e.k8s_namespace.clone().unwrap_or_default(),
        account_id: e.account_id.clone().unwrap_or_default(),
        release_channel: e.release_channel.clone(),
        created_at_ms: e.created_at_ms,
    }
}

impl HubService {
    fn check_cluster(&self, cluster_id: &str) -> Result<(), Status> {
        if cluster_id != &*self.node.cluster_id {
            return Err(Status::permission_denied(format!(
                "this node belongs to cluster {:?}, not {cluster_id:?}",
                self.node.cluster_id
            )));
        }
        Ok(())
    }

    /// Runs a membership change on the leader, proxying the call if this node is not it.
    /// While no leader is known it waits for one (up to the request timeout).
    async fn on_leader<T, F, Fut, P, PFut>(&self, local: F, proxy: P) -> Result<T, Status>
    where
        F: FnOnce(Arc<HubNode>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
        P: FnOnce(HubClient<tonic::transport::Channel>) -> PFut,
        PFut: std::future::Future<Output = Result<T, Status>>,
    {
        match self.node.leader_within_request_timeout().await? {
            (id, _) if id == self.node.id => local(self.node.clone()).await,
            (_, addr) => {
                let channel = self
                    .node
                    .peers
                    .channel(&addr)
                    .map_err(|e| Status::internal(format!("bad leader address {addr}: {e}")))?;
                proxy(HubClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)).await
            }
        }
    }

    /// A read that walks the state (see [`crate::query_pool`]): admitted for `caller`, after
    /// the read barrier (none when `stale`), answered by `read` on the query pool under the
    /// state's lock once the caller is found to hold a role.
    async fn scan<T, F>(&self, caller: &Caller, stale: bool, read: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&raft_store::AppliedState) -> Result<T, Status> + Send + 'static,
    {
        let slot = self.node.queries.admit(caller)?;
        self.node.read_barrier(stale).await?;
        let node = self.node.clone();
        let caller = caller.clone();
        self.node
            .queries
            .run(slot, move || {
                let s = node.state.read();
                caller.may_read(&s.state)?;
                read(&s)
            })
            .await?
    }

    fn membership_reply(&self, index: u64) -> MembershipReply {
        MembershipReply {
            members: self
                .node
                .members()
                .into_iter()
                .map(|(id, addr, voter)| Member { id, addr, voter })
                .collect(),
            index,
        }
    }
}

#[tonic::async_trait]
impl Hub for HubService {
    async fn create_environment(
        &self,
        req: Request<CreateEnvironmentRequest>,
    ) -> Result<Response<WriteReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let cmd = Command::CreateEnvironment {
            name: r.name,
            description: r.description,
        };
        self.node
            .propose(cmd, opt(r.request_id), &caller)
            .await
            .map(|c| Response::new(c.reply()))
    }

    async fn delete_environment(
        &self,
        req: Request<DeleteEnvironmentRequest>,
    ) -> Result<Response<WriteReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let cmd = Command::DeleteEnvironment { name: r.name };
        self.node
            .propose(cmd, opt(r.request_id), &caller)
            .await
            .map(|c| Response::new(c.reply()))
    }

    async fn create_entity(
        &self,
        req: Request<CreateEntityRequest>,
    ) -> Result<Response<WriteReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let kind: EntityKind = r
            .kind
            .parse()
            .map_err(|e: CommandError| command_status(&e))?;
        let cmd = Command::CreateEntity {
            environment: r.environment,
            kind,
            name: r.name,
            product_id: r.product_id,
            k8s_namespace: opt(r.k8s_namespace),
            account_id: opt(r.account_id),
            release_channel: opt(r.release_channel),
        };
        self.node
            .propose(cmd, opt(r.request_id), &caller)
            .await
            .map(|c| Response::new(c.reply()))
    }

    async fn get_environment(
        &self,
        req: Request<GetEnvironmentRequest>,
    ) -> Result<Response<Environment>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let name = r.name;
        // A scan: it counts the environment's entities.
        let environment = self
            .scan(&caller, stale(&r.read), move |s| {
                let env = s
                    .state
                    .environment(&name)
                    .ok_or_else(|| Status::not_found(format!("environment {name:?} not found")))?;
                Ok(Environment {
                    name: env.name.clone(),
                    description: env.description.clone(),
                    entity_count: s.state.entities_of(&env.name).count() as u64,
                    created_at_ms: env.created_at_ms,
                })
            })
            .await?;
        Ok(Response::new(environment))
    }

    async fn list_environments(
        &self,
        req: Request<ListRequest>,
    ) -> Result<Response<EnvironmentList>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let environments = self
            .scan(&caller, stale(&r.read), |s| {
                let environments = s
                    .state
                    .environments()
                    .map(|env| Environment {
                        name: env.name.clone(),
                        description: env.description.clone(),
                        entity_count: s.state.entities_of(&env.name).count() as u64,
                        created_at_ms: env.created_at_ms,
                    })
                    .collect();
                Ok(environments)
            })
            .await?;
        Ok(Response::new(EnvironmentList { environments }))
    }

    async fn list_entities(
        &self,
        req: Request<ListEntitiesRequest>,
    ) -> Result<Response<EntityList>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let environment = r.environment;
        let entities = self
            .scan(&caller, stale(&r.read), move |s| {
                if environment.is_empty() {
                    return Ok(s.state.entities().map(entity_proto).collect());
                }
                if s.state.environment(&environment).is_none() {
                    return Err(Status::not_found(format!(
                        "environment {environment:?} not found"
                    )));
                }
                Ok(s.state
                    .entities_of(&environment)
                    .map(entity_proto)
                    .collect())
            })
            .await?;
        Ok(Response::new(EntityList { entities }))
    }

    async fn state_digest(&self, req: Request<ReadOptions>) -> Result<Response<Digest>, Status> {
        // Health, like NodeStatus and ClusterStatus: any authenticated caller (a node that
        // is joining holds no bindings yet, and the digest says nothing about the state).
        self.node.read_barrier(req.into_inner().stale).await?;
        // At least what the barrier saw applied: a digest that began earlier is not this read's.
        let barrier = self.node.state.read().applied_index();
        let (applied_index, digest) = self
            .node
            .state_digest(DigestFreshness::AtLeast(barrier))
            .await?;
        Ok(Response::new(Digest {
            applied_index,
            digest,
        }))
    }

    async fn node_status(
        &self,
        req: Request<NodeStatusRequest>,
    ) -> Result<Response<NodeStatusReply>, Status> {
        let node = &self.node;
        let with_digest = req.into_inner().with_digest;
        let metrics = node.raft.metrics();
        let (term, leader, last_log_index, snapshot_index, purged_index) = {
            let m = metrics.borrow_watched();
            (
                m.current_term,
                m.current_leader,
                m.last_log_index.unwrap_or(0),
                m.snapshot.as_ref().map(|l| l.index).unwrap_or(0),
                m.purged.as_ref().map(|l| l.index).unwrap_or(0),
            )
        };
        // The digest hashes the whole state: only on request (a health probe polled under
        // load must not cost a core).
        let (last_applied, digest) = if with_digest {
            node.state_digest(DigestFreshness::Probe).await?
        } else {
            (node.state.read().applied_index(), String::new())
        };
        Ok(Response::new(NodeStatusReply {
            id: node.id,
            addr: node.addr.clone(),
            role: node.role().to_string(),
            term,
            leader_id: leader.unwrap_or(0),
            has_leader: leader.is_some(),
            last_log_index,
            last_applied,
            digest,
            snapshot_index,
            purged_index,
            cluster_id: node.cluster_id.to_string(),
            members: node
                .members()
                .into_iter()
                .map(|(id, addr, voter)| Member { id, addr, voter })
                .collect(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            feature_level: hub_engine::feature_level::SUPPORTED_LEVEL.0,
            cluster_feature_level: node.state.read().state.cluster_level().0,
        }))
    }

    async fn cluster_status(
        &self,
        _req: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusReply>, Status> {
        let node = self.node.clone();
        let mine = self
            .node_status(Request::new(NodeStatusRequest { with_digest: false }))
            .await?
            .into_inner();
        let probes = mine.members.iter().map(|m| {
            let node = node.clone();
            let m = m.clone();
            let mine = mine.clone();
            async move {
                if m.id == node.id {
                    // The own digest under the same bound as a peer's: a large state takes
                    // seconds to hash (the computation goes on and is cached for the next
                    // call at the same index).
                    let digest = tokio::time::timeout(
                        MEMBER_PROBE_TIMEOUT,
                        node.state_digest(DigestFreshness::Probe),
                    )
                    .await;
                    let mut row = member_row(&m, Ok(mine));
                    match digest {
                        Ok(Ok((applied, digest))) => {
                            row.last_applied = applied;
                            row.digest = digest;
                        }
                        Ok(Err(e)) => row.error = format!("digest: {}", e.message()),
                        Err(_) => row.error = DIGEST_NOT_READY.to_string(),
                    }
                    return row;
                }
                // Asked twice at once: a member that answers but cannot hash its state within
                // the bound is shown with its role and index, not as unreachable.
                let (plain, hashed) = futures::join!(
                    probe_member(&node, &m.addr, false),
                    probe_member(&node, &m.addr, true)
                );
                match (plain, hashed) {
                    (_, Ok(s)) => member_row(&m, Ok(s)),
                    (Ok(s), Err(e)) => {
                        let mut row = member_row(&m, Ok(s));
                        row.error = match e {
                            ProbeError::TimedOut => DIGEST_NOT_READY.to_string(),
                            ProbeError::Connect(_) | ProbeError::Refused(_) => {
                                format!("digest: {e}")
                            }
                        };
                        row
                    }
                    (Err(e), Err(_)) => member_row(&m, Err(e)),
                }
            }
        });
        let members = futures::future::join_all(probes).await;
        Ok(Response::new(ClusterStatusReply {
            leader: mine.leader_id,
            has_leader: mine.has_leader,
            term: mine.term,
            members,
            cluster_feature_level: mine.cluster_feature_level,
        }))
    }

    async fn init_cluster(
        &self,
        req: Request<InitClusterRequest>,
    ) -> Result<Response<InitClusterReply>, Status> {
        // Only an admin, and never another node: a node that holds no cluster has no admin,
        // so no caller can make it a cluster of its own (and then bind itself its admin). A
        // new cluster's founding nodes initialise it at start (`crate::founding`).
        let caller = crate::auth::caller(&req)?;
        let refused = || {
            Status::permission_denied(format!(
                "{} may not initialize the cluster: needs admin. A new cluster is initialised \
                 by its founding nodes at start (hub-node --initial-members \
                 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT)",
                caller.actor().unwrap_or_default()
            ))
        };
        if matches!(caller, Caller::Verified(Identity::Node(_))) {
            return Err(refused());
        }
        caller
            .require_admin(&self.node.state.read().state, "initialize the cluster")
            .map_err(|_| refused())?;
        let r = req.into_inner();
        let mut members = BTreeMap::new();
        for m in r.members {
            if m.id == 0 {
                return Err(Status::invalid_argument(
                    "members[].id: node ids start at 1",
                ));
            }
            if members.insert(m.id, m.addr).is_some() {
                return Err(Status::invalid_argument(format!(
                    "members[].id: node {} listed twice",
                    m.id
                )));
            }
        }
        self.node.initialize(members).await?;
        Ok(Response::new(InitClusterReply {}))
    }

    async fn add_node(
        &self,
        req: Request<AddNodeRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        caller.require_admin(&self.node.state.read().state, "add a node")?;
        let r = req.into_inner();
        if r.id == 0 {
            return Err(Status::invalid_argument("id: node ids start at 1"));
        }
        if r.addr.parse::<std::net::SocketAddr>().is_err() && !r.addr.contains(':') {
            return Err(Status::invalid_argument(format!(
                "addr: {:?} is not host:port",
                r.addr
            )));
        }
        let catch_up = match r.catch_up_timeout_ms {
            0 => crate::node::DEFAULT_CATCH_UP,
            ms if ms > crate::node::MAX_CATCH_UP.as_millis() as u64 => {
                return Err(Status::invalid_argument(format!(
                    "catch_up_timeout_ms: {ms} ms, at most {} (one hour)",
                    crate::node::MAX_CATCH_UP.as_millis()
                )))
            }
            ms => Duration::from_millis(ms),
        };
        let proxied = r.clone();
        let index = self
            .on_leader(
                |node| async move { node.add_node(r.id, r.addr, r.learner_only, catch_up).await },
                |mut c| async move { c.add_node(proxied).await.map(|r| r.into_inner().index) },
            )
            .await?;
        Ok(Response::new(self.membership_reply(index)))
    }

    async fn remove_node(
        &self,
        req: Request<RemoveNodeRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        caller.require_admin(&self.node.state.read().state, "remove a node")?;
        let r = req.into_inner();
        let id = r.id;
        let proxied = r;
        let peers = self.node.peers.clone();
        let index = self
            .on_leader(
                |node| async move {
                    // A leader that commits its own removal leaves the cluster without a
                    // leader for an election timeout (the members refuse its hand-over
                    // once they applied the removal): it hands over first, and the new
                    // leader removes it. If the hand-over fails it removes itself.
                    let others = node.members().iter().any(|(m, _, v)| *v && *m != id);
                    if id == node.id && others {
                        match node.transfer_leader(None, TRANSFER_TIMEOUT).await {
                            Ok((leader, _)) => {
                                let addr = node
                                    .members()
                                    .into_iter()
                                    .find(|(m, _, _)| *m == leader)
                                    .map(|(_, addr, _)| addr)
                                    .unwrap_or_default();
                                let channel = peers.channel(&addr).map_err(|e| {
                                    Status::internal(format!("bad leader address {addr}: {e}"))
                                })?;
                                return HubClient::new(channel)
                                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                                    .remove_node(proxied)
                                    .await
                                    .map(|r| r.into_inner().index);
                            }
                            Err(e) => tracing::warn!(error = %e,
                                "could not hand the leadership over before removing this node; removing it as leader"),
                        }
                    }
                    node.remove_node(id).await
                },
                |mut c| async move { c.remove_node(r).await.map(|r| r.into_inner().index) },
            )
            .await?;
        Ok(Response::new(self.membership_reply(index)))
    }

    type SnapshotSaveStream = crate::backup_save::BackupStream;

    async fn snapshot_save(
        &self,
        req: Request<SnapshotSaveRequest>,
    ) -> Result<Response<Self::SnapshotSaveStream>, Status> {
        let caller = crate::auth::caller(&req)?;
        crate::backup_save::start(self.node.clone(), &caller)
            .await
            .map(Response::new)
    }

    async fn transfer_leader(
        &self,
        req: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        caller.require_admin(&self.node.state.read().state, "transfer the leadership")?;
        let r = req.into_inner();
        let to = (r.to != 0).then_some(r.to);
        let from = self.node.leader().map(|(id, _)| id).unwrap_or(0);
        let (leader, term) = self
            .on_leader(
                |node| async move { node.transfer_leader(to, TRANSFER_TIMEOUT).await },
                |mut c| async move {
                    c.transfer_leader(r)
                        .await
                        .map(|r| r.into_inner())
                        .map(|r| (r.leader, r.term))
                },
            )
            .await?;
        Ok(Response::new(TransferLeaderReply { from, leader, term }))
    }

    async fn forward(&self, req: Request<ForwardRequest>) -> Result<Response<WriteReply>, Status> {
        #[cfg(feature = "chaos-faults")]
        let reply_lost = crate::fault_layer::reply_lost(&req);
        let r = req.into_inner();
        self.check_cluster(&r.cluster_id)?;
        let reply = self.node.propose_as_leader(&r.command).await;
        #[cfg(feature = "chaos-faults")]
        if reply_lost {
            return Err(crate::fault_layer::lose(std::time::Duration::MAX).await);
        }
        reply.map(Response::new)
    }

    async fn submit(&self, req: Request<SubmitRequest>) -> Result<Response<WriteReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        let command = parse_submitted(&r.command_json)?;
        let reply = self
            .node
            .propose(command, opt(r.request_id), &caller)
            .await?;
        Ok(Response::new(reply.reply()))
    }

    async fn query(&self, req: Request<QueryRequest>) -> Result<Response<QueryReply>, Status> {
        use crate::query::{Cost, Parsed, Query};
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        if r.query_json.len() > MAX_QUERY_BYTES {
            return Err(Status::invalid_argument(format!(
                "query_json: {} bytes, at most {MAX_QUERY_BYTES}",
                r.query_json.len()
            )));
        }
        let pool = &self.node.queries;
        let bad = |e: serde_json::Error| Status::invalid_argument(format!("bad query: {e}"));
        // Counted before it costs anything: a caller over its budget is refused at once, and
        // a long query (a dry run's text) before it is even parsed, which it is on the query
        // pool's parse threads.
        let (query, slot): (Query, _) = if r.query_json.len() > MAX_LOOKUP_QUERY_BYTES {
            let json = r.query_json.clone();
            let parse = move || serde_json::from_str(&json);
            let (query, slot) = pool.parse(pool.admit(&caller)?, parse).await?;
            (query.map_err(bad)?, Some(slot))
        } else {
            let query: Query = serde_json::from_str(&r.query_json).map_err(bad)?;
            let slot = match crate::query::cost(&query) {
                Cost::Lookup => None,
                Cost::Scan | Cost::Parse => Some(pool.admit(&caller)?),
            };
            (query, slot)
        };
        // `explain` shows the leader's view: only the leader checks artifacts (SPEC C9).
        if matches!(query, Query::Explain { .. }) && !stale(&r.read) {
            if let Some((leader, addr)) = self.node.leader() {
                if leader != self.node.id {
                    // The leader sees this node as the caller: check the operator here.
                    caller.may(&self.node.state.read().state, &crate::query::need(&query))?;
                    let channel =
                        self.node.peers.channel(&addr).map_err(|e| {
                            Status::internal(format!("bad leader address {addr}: {e}"))
                        })?;
                    let mut client = HubClient::new(channel)
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES);
                    return client
                        .query(QueryRequest {
                            query_json: r.query_json,
                            read: r.read,
                        })
                        .await;
                }
            }
        }
        self.node.read_barrier(stale(&r.read)).await?;
        caller.may(&self.node.state.read().state, &crate::query::need(&query))?;
        // The cluster's time where this node has read its voters' clocks (the leader), else
        // its own.
        let now = self.node.cluster_now_ms();
        let node = self.node.clone();
        // Serialised where it was built, after the lock is released.
        let answer = move |(query, parsed): (Query, Parsed)| {
            crate::query::answer_shared(
                &node.state,
                &node.sm.history(),
                &query,
                parsed,
                now,
                Some(&node.artifacts),
            )
            .map(|(value, index)| (value.to_string(), index))
        };
        let (json, applied_index) = match slot {
            None => answer((query, Parsed::Nothing)),
            Some(slot) if crate::query::cost(&query) == Cost::Parse => {
                let parse = move || {
                    let parsed = crate::query::parse(&query);
                    (query, parsed)
                };
                let (parsed, slot) = pool.parse(slot, parse).await?;
                pool.run(slot, move || answer(parsed)).await?
            }
            Some(slot) => {
                pool.run(slot, move || answer((query, Parsed::Nothing)))
                    .await?
            }
        }
        .map_err(|e| match e {
            crate::query::QueryError::Bad(m) => Status::invalid_argument(m),
            crate::query::QueryError::NotFound(m) => Status::not_found(m),
            crate::query::QueryError::Internal(m) => Status::internal(m),
        })?;
        Ok(Response::new(QueryReply {
            json,
            applied_index,
        }))
    }

    async fn read_index(
        &self,
        req: Request<ReadIndexRequest>,
    ) -> Result<Response<ReadIndexReply>, Status> {
        #[cfg(feature = "chaos-faults")]
        let reply_lost = crate::fault_layer::reply_lost(&req);
        self.check_cluster(&req.into_inner().cluster_id)?;
        let index = self.node.read_index().await;
        #[cfg(feature = "chaos-faults")]
        if reply_lost {
            return Err(crate::fault_layer::lose(std::time::Duration::MAX).await);
        }
        Ok(Response::new(ReadIndexReply { index: index? }))
    }
}

/// How long `ClusterStatus` waits for each member's answer, and for each digest.
const MEMBER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a member's `NodeStatus` gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProbeError {
    /// No channel to its address.
    #[error("{0}")]
    Connect(String),
    /// No answer within [`MEMBER_PROBE_TIMEOUT`].
    #[error("timed out after 1s")]
    TimedOut,
    /// It refused the call (the refusal's message).
    #[error("{0}")]
    Refused(String),
}

/// A member that answered but whose digest was not ready in time.
const DIGEST_NOT_READY: &str =
    "digest not ready within 1s (a large state takes seconds to hash; ask again)";

/// One member's `NodeStatus`, bounded by [`MEMBER_PROBE_TIMEOUT`].
pub(crate) async fn probe_member(
    node: &HubNode,
    addr: &str,
    with_digest: bool,
) -> Result<NodeStatusReply, ProbeError> {
    let channel = node
        .peers
        .channel(addr)
        .map_err(|e| ProbeError::Connect(e.to_string()))?;
    let mut client = HubClient::new(channel);
    let mut req = Request::new(NodeStatusRequest { with_digest });
    req.set_timeout(MEMBER_PROBE_TIMEOUT);
    tokio::time::timeout(MEMBER_PROBE_TIMEOUT, client.node_status(req))
        .await
        .map_err(|_| ProbeError::TimedOut)?
        .map(|r| r.into_inner())
        .map_err(|s| ProbeError::Refused(s.message().to_string()))
}

/// Member `m`'s row from its status, or unreachable with why.
fn member_row(m: &Member, status: Result<NodeStatusReply, ProbeError>) -> MemberStatus {
    match status {
        Ok(s) => MemberStatus {
            id: m.id,
            addr: m.addr.clone(),
            role: s.role,
            last_applied: s.last_applied,
            digest: s.digest,
            term: s.term,
            error: String::new(),
            version: s.version,
            feature_level: s.feature_level,
        },
        Err(error) => MemberStatus {
            id: m.id,
            addr: m.addr.clone(),
            role: "unreachable".into(),
            last_applied: 0,
            digest: String::new(),
            term: 0,
            error: error.to_string(),
            version: String::new(),
            feature_level: 0,
        },
    }
}
