//! A canary's events (issue 52 item 5): the newest [`CANARY_EVENTS_KEPT`] outcomes of its
//! ticks in Flagger's wording ([`CanaryEvent`]), what `kubectl describe canary` shows a
//! Flagger user. Replicated like every record, written in the same apply as the tick, and
//! deleted with the canary.
//!
//! As Kubernetes does, an event that repeats the newest one (same type, reason and message)
//! counts up instead of taking a place of its own, so a canary that waits for an approval for
//! hours keeps the events from before the wait.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::canary::{CanaryEvent, MAX_EVENT_MESSAGE_BYTES};

/// Events kept per canary; older ones are dropped.
pub const CANARY_EVENTS_KEPT: usize = 100;

/// The events of one canary, keyed like the canary (`<environment>/<name>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryEvents {
    /// The canary's id.
    pub canary: String,
    /// The newest [`CANARY_EVENTS_KEPT`] events, oldest first.
    pub events: VecDeque<CanaryEvent>,
}

impl CanaryEvents {
    /// Appends `event`, or counts it on the newest event if it repeats it; drops the oldest
    /// beyond [`CANARY_EVENTS_KEPT`].
    pub fn push(&mut self, event: CanaryEvent) {
        if let Some(last) = self.events.back_mut().filter(|last| last.repeats(&event)) {
            last.count = last.count.saturating_add(event.count);
            last.time_ms = event.time_ms;
            return;
        }
        self.events.push_back(event);
        while self.events.len() > CANARY_EVENTS_KEPT {
            self.events.pop_front();
        }
    }

    /// Whether the record keeps its bounds: at most [`CANARY_EVENTS_KEPT`] events, each
    /// message at most [`MAX_EVENT_MESSAGE_BYTES`].
    pub fn within_bounds(&self) -> bool {
        self.events.len() <= CANARY_EVENTS_KEPT
            && self
                .events
                .iter()
                .all(|e| e.message.len() <= MAX_EVENT_MESSAGE_BYTES && e.count >= 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::EventKind;

    fn event(time_ms: i64, message: &str) -> CanaryEvent {
        CanaryEvent::new(time_ms, EventKind::Warning, message.to_string())
    }

    #[test]
    fn a_repeated_event_counts_up_and_keeps_its_first_time() {
        let mut e = CanaryEvents::default();
        e.push(event(1, "a"));
        e.push(event(2, "b"));
        e.push(event(3, "b"));
        e.push(event(4, "b"));
        e.push(event(5, "a"));
        let shown: Vec<_> = e
            .events
            .iter()
            .map(|e| (e.message.as_str(), e.count, e.first_time_ms, e.time_ms))
            .collect();
        assert_eq!(shown, [("a", 1, 1, 1), ("b", 3, 2, 4), ("a", 1, 5, 5)]);
        // The same message of another type is another event.
        e.push(CanaryEvent::new(6, EventKind::Normal, "a".into()));
        assert_eq!(e.events.len(), 4);
        assert!(e.within_bounds());
    }
}
