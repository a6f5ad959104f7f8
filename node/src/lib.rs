//! The hub node (`hub-node`) and the operator CLI (`hubctl`).
//!
//! - [`node`]: one node — Raft on the RocksDB store, propose / read / membership operations.
//! - [`network`] and [`raft_service`]: the Raft transport over tonic, client and server;
//!   [`peer_health`]: what the node logs of its peers' reachability (once per change of
//!   state, then a reminder), and [`raft_log_filter`]: openraft's line per failed call, which
//!   that replaces, kept out of the log.
//! - [`api`]: the client API any node serves; followers forward writes to the leader.
//! - [`agent_api`]: the API agents use: reports, and long-polled plan fetches.
//! - [`agent_wire`]: the agent API's typed contract: engine enums to proto enums and back,
//!   refused reports as data.
//! - [`founding`]: a new cluster's founding nodes initialise it at start
//!   (`--initial-members`).
//! - [`propose`]: the one way into the log: stamps the time and calls `client_write`.
//! - [`committed`]: a write's outcome inside the node, typed until it leaves as a reply.
//! - [`leader_contact`]: whether this node is cut off from the leader (or, as leader, from a
//!   majority), so it refuses writes and linearizable reads at once.
//! - [`dead_leader`]: a follower whose leader's port refuses connections drops its leader
//!   lease, so the first candidate wins (failover in one election timeout, not two).
//! - [`leader`]: starts and stops the leader-only loops once per [`term`]:
//!   - [`orchestrator`]: evaluates entities and proposes the decisions (plans);
//!   - [`canary_controller`]: prepares and proposes canary ticks;
//!   - [`cluster_keys`]: sets the cluster's keys (the canary revision key) once;
//!   - [`cluster_level`]: raises the cluster's feature level once every member runs it.
//! - [`artifacts`]: the leader's background artifact-existence checks (SPEC C9).
//! - [`outbound`]: the hub's outbound HTTP(S) clients (webhooks, alerts, Prometheus,
//!   registries) and their deny list.
//! - [`webhooks`], [`prometheus`] and [`alerts`]: the canary controller's webhook calls,
//!   metric queries and alerts (Flagger's alert provider payloads) over those clients.
//! - [`query`]: read-only JSON views of the orchestration state; [`query_pool`]: where the
//!   costly ones run (off the runtime's workers, bounded, and per caller).
//! - [`crash_stop`]: the node exits when its store fails, rather than serve on after a
//!   failed sync.
//! - [`stopping`]: the node's stop on SIGTERM, which ends its long-lived calls so the
//!   listener's drain is bounded.
//! - [`peers`]: reusable gRPC channels to other nodes.
//! - [`port_probe`]: whether anything listens at a peer's address (a crashed process's port
//!   refuses connections).
//! - [`auth`]: who may call which method, from the TLS-verified identity.
//! - [`transport`]: the node's TLS material from flags (or `--insecure` on loopback).
//! - [`status`]: the gRPC status of a refused command.
//! - [`backup_save`]: `SnapshotSave`, a backup of the replicated state streamed from a live
//!   node.
//! - [`metrics`], [`metrics_server`] and [`dashboard`]: the node's Prometheus metrics and its
//!   web dashboard, on HTTPS listeners sharing [`http_serve`]'s connection loop.
//! - `fault_layer` (chaos builds and tests only): transport faults the chaos runner switches.

pub mod agent_api;
pub mod agent_wire;
pub mod alerts;
pub mod api;
pub mod artifacts;
pub mod auth;
pub mod backup_save;
pub mod canary_controller;
pub mod cluster_clock;
pub mod cluster_keys;
pub mod cluster_level;
pub mod command_origin;
pub mod committed;
pub mod crash_stop;
pub mod dashboard;
pub mod dead_leader;
#[cfg(any(test, feature = "chaos-faults"))]
pub mod fault_layer;
pub mod founding;
pub mod http_serve;
pub mod leader;
pub mod leader_contact;
pub mod metrics;
pub mod metrics_server;
pub mod network;
pub mod node;
pub mod orchestrator;
pub mod outbound;
pub mod peer_health;
pub mod peers;
pub mod port_probe;
pub mod prometheus;
pub mod propose;
pub mod query;
pub mod query_approval;
pub mod query_pool;
pub mod raft_log_filter;
pub mod raft_service;
pub mod status;
pub mod stopping;
pub mod term;
pub mod transport;
pub mod webhooks;
