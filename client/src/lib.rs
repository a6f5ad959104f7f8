//! `hub-client`: the one way a Rust program talks to a hub.
//!
//! - [`failover`]: [`FailoverClient`], which calls the first node that answers and moves on
//!   from one that is down, stopping, cut off or not a member, deciding by the node's typed
//!   [`Refusal`] (never by the words of its message).
//! - [`bearer`]: the operator token sent with every call ([`Bearer`]).
//! - [`channel`]: the hub's transport settings for a gRPC channel (also used between nodes).
//! - [`query`]: the queries a client asks ([`Query`]), as they travel; [`answer`]: their
//!   answers, typed; [`ask`]: asking them through the failover client.
//! - [`request_id`]: the id every write carries, so a retried write applies once.
//! - [`ca_file`]: a CA bundle read from a file and checked before it is sent or used.
//! - [`text`]: text from the cluster shown to people, control characters escaped.
//!
//! The wire types are `hub-proto`'s; [`Refusal`] is re-exported from there.

pub mod answer;
pub mod ask;
pub mod bearer;
pub mod ca_file;
pub mod channel;
pub mod failover;
pub mod query;
pub mod request_id;
pub mod text;

pub use ask::Freshness;
pub use bearer::Bearer;
pub use failover::{ClientError, FailoverClient, HubApi};
pub use hub_proto::refusal::Refusal;
pub use query::Query;
