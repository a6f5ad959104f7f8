//! Why a node refused a call for a reason that is not about the request: typed, on the wire
//! in one metadata key ([`KEY`]), so that what a caller does next (try another node, wait,
//! or give the answer to its user) never depends on the words of a message.
//!
//! A node makes these refusals in one place ([`Refusal::status`]); a client reads them with
//! [`Refusal::of`] and decides with one exhaustive `match`. The message stays for people and
//! may be reworded freely. A status without the key (a transport error, or a node of a release
//! before the key) is judged by its code alone.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// The gRPC metadata key (sent in the trailers) that names a [`Refusal`].
pub const KEY: &str = "hub-refusal";

/// A refusal that says nothing about the request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No leader was found in time: any other node would answer the same.
    NoLeader,
    /// The leader could not commit the write in time; it may still commit later, and the same
    /// request id applies it at most once. Any other node would answer the same.
    NoQuorum,
    /// The answering node is cut off from the cluster's majority (a leader no majority has
    /// acknowledged, or a follower that has not heard from a leader): another node may not be.
    CutOff,
    /// The answering node did not catch up with the leader's read index in time.
    NotCaughtUp,
    /// The answering node is stopping: try another node.
    Stopping,
    /// The calling node is not a member of the cluster (a node's call to a node refused).
    CallerNotAMember,
    /// The answering node is not a member of the cluster: the leader refuses its calls, so it
    /// cannot serve them; another node can.
    NodeNotAMember,
    /// The cluster does not run the feature level the call needs yet: a command of a newer
    /// release before every member runs it, or a node of an older release asking to join a
    /// cluster at a level it lacks. Every node answers the same until the upgrade is done.
    FeatureLevelTooLow,
}

impl Refusal {
    /// Every refusal, for tests and tables.
    pub const ALL: [Refusal; 8] = [
        Refusal::NoLeader,
        Refusal::NoQuorum,
        Refusal::CutOff,
        Refusal::NotCaughtUp,
        Refusal::Stopping,
        Refusal::CallerNotAMember,
        Refusal::NodeNotAMember,
        Refusal::FeatureLevelTooLow,
    ];

    /// Its value of [`KEY`] (stable across releases: `not-a-member` is what nodes sent before
    /// the other refusals were typed).
    pub const fn wire(self) -> &'static str {
        match self {
            Refusal::NoLeader => "no-leader",
            Refusal::NoQuorum => "no-quorum",
            Refusal::CutOff => "cut-off",
            Refusal::NotCaughtUp => "not-caught-up",
            Refusal::Stopping => "stopping",
            Refusal::CallerNotAMember => "not-a-member",
            Refusal::NodeNotAMember => "node-not-a-member",
            Refusal::FeatureLevelTooLow => "feature-level-too-low",
        }
    }

    /// The gRPC code it is answered with.
    pub const fn code(self) -> Code {
        match self {
            Refusal::CallerNotAMember => Code::PermissionDenied,
            Refusal::FeatureLevelTooLow => Code::FailedPrecondition,
            Refusal::NoLeader
            | Refusal::NoQuorum
            | Refusal::CutOff
            | Refusal::NotCaughtUp
            | Refusal::Stopping
            | Refusal::NodeNotAMember => Code::Unavailable,
        }
    }

    /// The status a node answers with: its code, `message` for people, and the key.
    pub fn status(self, message: impl Into<String>) -> Status {
        let mut status = Status::new(self.code(), message);
        status
            .metadata_mut()
            .insert(KEY, MetadataValue::from_static(self.wire()));
        status
    }

    /// The refusal `status` carries, if any. A key with a value this release does not know
    /// (a newer node's) is none: the status is judged by its code.
    pub fn of(status: &Status) -> Option<Refusal> {
        let value = status.metadata().get(KEY)?.as_bytes();
        Refusal::ALL
            .into_iter()
            .find(|r| r.wire().as_bytes() == value && r.code() == status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_reads_back_whatever_its_message() {
        for r in Refusal::ALL {
            for message in ["", "reworded entirely", "no leader", "cut off: x"] {
                let status = r.status(message);
                assert_eq!(status.code(), r.code());
                assert_eq!(Refusal::of(&status), Some(r), "{r:?} {message:?}");
            }
        }
        let wires: std::collections::HashSet<_> = Refusal::ALL.iter().map(|r| r.wire()).collect();
        assert_eq!(wires.len(), Refusal::ALL.len(), "wire values are distinct");
    }

    #[test]
    fn a_message_alone_or_an_unknown_key_is_no_refusal() {
        assert_eq!(Refusal::of(&Status::unavailable("no leader: x")), None);
        assert_eq!(Refusal::of(&Status::unavailable("cut off: x")), None);
        let mut unknown = Status::unavailable("x");
        unknown
            .metadata_mut()
            .insert(KEY, MetadataValue::from_static("from-a-newer-release"));
        assert_eq!(Refusal::of(&unknown), None);
        // The key with another code than its own is not that refusal.
        let mut wrong_code = Status::internal("x");
        wrong_code
            .metadata_mut()
            .insert(KEY, MetadataValue::from_static("cut-off"));
        assert_eq!(Refusal::of(&wrong_code), None);
    }
}
