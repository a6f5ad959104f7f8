//! openraft's WARN line per failed call to a peer, kept out of the node's log.
//!
//! openraft logs every failed replication session, the progress error it then hands its core,
//! every failed heartbeat and every failed vote request, each at WARN: with a follower dead,
//! its leader wrote one line per reconnection attempt (25,000 a second before the transport
//! backed off; ten a second for the heartbeats alone after). The transport reports the same
//! failures to [`crate::peer_health`], which logs a peer's trouble once per change of state and
//! then a reminder, so these lines are dropped. Every other line of openraft passes.
//!
//! The lines are recognised by their target (openraft's module) and the start of their text;
//! openraft is pinned to one release, and `tests/abuse/dead_follower.rs` counts a leader's
//! lines with a follower dead, so a release that words them differently is noticed.

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// openraft's per-call failure lines: the module that logs each (a prefix of its target) and
/// what its text contains.
const PER_CALL_FAILURES: [(&str, &str); 5] = [
    ("openraft::replication", "ReplicationCore recv RPCError"),
    (
        "openraft::engine::handler::replication_handler",
        "update progress error",
    ),
    ("openraft::core::heartbeat", "failed to send a heartbeat"),
    (
        "openraft::core::heartbeat",
        "heartbeat stream returned no response",
    ),
    ("openraft::core::raft_core", "while requesting "),
];

/// A layer that drops openraft's per-call failure lines ([`PER_CALL_FAILURES`]) for the
/// whole subscriber.
#[derive(Debug, Default, Clone, Copy)]
pub struct RaftLogFilter;

impl<S: Subscriber> Layer<S> for RaftLogFilter {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        !is_per_call_failure(event)
    }
}

/// Whether `event` is one of openraft's per-call failure lines.
fn is_per_call_failure(event: &Event<'_>) -> bool {
    let meta = event.metadata();
    if *meta.level() != Level::WARN || !meta.target().starts_with("openraft") {
        return false;
    }
    let mut candidates = PER_CALL_FAILURES
        .iter()
        .filter(|(module, _)| meta.target().starts_with(module))
        .peekable();
    if candidates.peek().is_none() {
        return false;
    }
    let mut message = Message(String::new());
    event.record(&mut message);
    candidates.any(|(_, text)| message.0.contains(text))
}

/// An event's message, as text.
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            use std::fmt::Write;
            let _ = write!(self.0, "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The node's subscriber (the filter over a fmt layer) around `f`; returns what it wrote.
    fn logged(f: impl FnOnce()) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
            .with(RaftLogFilter);
        tracing::subscriber::with_default(subscriber, f);
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Each per-call failure line as openraft words it is dropped; openraft's other warnings,
    /// the same words from another module, and the node's own lines pass.
    #[test]
    fn only_openraft_per_call_failure_lines_are_dropped() {
        let err = "Unreachable node 2: status: Unavailable, message: \"Connection refused\"";
        let text = logged(|| {
            tracing::warn!(target: "openraft::replication", "ReplicationCore recv RPCError: {}, when:({}); sending error to RaftCore", err, "initiate-stream-replication");
            tracing::warn!(target: "openraft::engine::handler::replication_handler", "update progress error: {}", err);
            tracing::warn!(target: "openraft::core::heartbeat::worker", "{} failed to send a heartbeat: {:?}", "HeartbeatWorker(id=1, target=2)", err);
            tracing::warn!(target: "openraft::core::heartbeat::worker", "{} heartbeat stream returned no response", "HeartbeatWorker(id=1, target=2)");
            tracing::warn!(target: "openraft::core::raft_core", "timeout while requesting {}: {}", "pre-vote", err);
            tracing::warn!(target: "openraft::core::raft_core", "while requesting {}, error: {}, target: {}", "vote", err, 2);
            tracing::warn!(target: "openraft::core::raft_core", "A message will be ignored because this node is no longer Leader");
            tracing::error!(target: "openraft::replication", "ReplicationCore recv RPCError: kept at ERROR");
            tracing::warn!(target: "hub_node::network", "ReplicationCore recv RPCError: the node's own");
            tracing::warn!(peer = 2, "peer unreachable");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].contains("no longer Leader"), "{text}");
        assert!(lines[1].contains("kept at ERROR"), "{text}");
        assert!(lines[2].contains("the node's own"), "{text}");
        assert!(lines[3].contains("peer unreachable"), "{text}");
    }
}
