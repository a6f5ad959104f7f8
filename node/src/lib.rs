//! The hub node (`hub-node`) and the operator CLI (`hubctl`).
//!
//! - [`node`]: one node — Raft on the RocksDB store, propose / read / membership operations.
//! - [`network`] and [`raft_service`]: the Raft transport over tonic, client and server.
//! - [`api`]: the client API any node serves; followers forward writes to the leader.
//! - [`peers`]: reusable gRPC channels to other nodes.
//! - [`client`]: the failover client `hubctl` and tools use.
//! - [`cli`]: `hubctl`'s commands.

pub mod api;
pub mod cli;
pub mod client;
pub mod network;
pub mod node;
pub mod peers;
pub mod raft_service;
