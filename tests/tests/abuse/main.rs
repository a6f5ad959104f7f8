//! Issue 51's hostile-party cases, black-box: a stranger without a certificate, a viewer's
//! query, a product editor's document, a dead follower, an outbound address that points
//! inward. Each module is one weakness; every case ends with all nodes alive, a write
//! committing and the nodes' digests equal.

mod connections;
mod dead_follower;
mod parse;
mod queries;
mod small;
mod ssrf;
