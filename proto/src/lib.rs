//! Generated gRPC types and services of the hub (`proto/hub.proto`).
//!
//! `Raft` carries node-to-node consensus traffic; `Hub` is the client API that `hubctl` and the
//! agents use. See the `.proto` file for the contract of each call.

#![allow(clippy::all, missing_docs)]

pub mod codec;
pub mod refusal;

/// Version 1 of the hub protocol.
pub mod v1 {
    tonic::include_proto!("hub.v1");
}

pub use v1::*;

/// Largest gRPC message a hub node or client accepts or sends (one Raft message, one API
/// call).
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// Most plan ids a plan poll may list in `FetchPlansRequest.known_plan_ids`: an agent whose
/// last reply held more sends none (and is woken by every change of its plan set).
pub const MAX_KNOWN_PLAN_IDS: usize = 1024;

/// Longest id `FetchPlansRequest.known_plan_ids` may hold (the hub's plan ids are far shorter).
pub const MAX_KNOWN_PLAN_ID_BYTES: usize = 128;
