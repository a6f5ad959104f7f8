//! How long a task report that finds the outbox idle waits for the ones after it.
//!
//! While a plan runs, each of its tasks queues two reports (`running`, then the outcome).
//! Sent as they come, a plan costs the hub a write per report; a write is a Raft entry on
//! every node. So the first report waits while a plan is still running, for at most the
//! agent's `report_linger`, and the wait ends as soon as no plan is running: a plan that
//! ends within the linger is reported in one write, at once at its end, and a longer plan's
//! progress reaches the hub at most `report_linger` late.

use std::time::Duration;

use tokio::sync::Notify;

/// Waits while `running()` says a plan is running, until `ended` is notified with none
/// running any more, or `limit` has passed. Returns at once when none is running.
/// `ended` must be notified (with [`Notify::notify_waiters`]) after every plan's end is
/// visible to `running`.
pub async fn while_plans_run(running: impl Fn() -> bool, ended: &Notify, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        // Registered before `running` is read, so an end between the two is not missed.
        let notified = ended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !running() {
            return;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    /// Far longer than any of these waits should take, even on a loaded machine.
    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn returns_at_once_when_no_plan_runs() {
        let ended = Notify::new();
        let began = Instant::now();
        while_plans_run(|| false, &ended, LONG).await;
        assert!(began.elapsed() < LONG / 2, "waited {:?}", began.elapsed());
    }

    #[tokio::test]
    async fn returns_when_the_last_plan_ends_not_after_the_linger() {
        let running = Arc::new(AtomicBool::new(true));
        let ended = Arc::new(Notify::new());
        let began = Instant::now();
        let wait = tokio::spawn({
            let (running, ended) = (running.clone(), ended.clone());
            async move { while_plans_run(|| running.load(Ordering::SeqCst), &ended, LONG).await }
        });
        // A wake while a plan still runs does not end the wait.
        ended.notify_waiters();
        tokio::task::yield_now().await;
        assert!(!wait.is_finished(), "returned while a plan runs");
        running.store(false, Ordering::SeqCst);
        ended.notify_waiters();
        wait.await.expect("the wait");
        assert!(began.elapsed() < LONG / 2, "waited {:?}", began.elapsed());
    }

    #[tokio::test]
    async fn a_plan_longer_than_the_linger_waits_the_linger_only() {
        let ended = Notify::new();
        let limit = Duration::from_millis(50);
        let began = Instant::now();
        while_plans_run(|| true, &ended, limit).await;
        let took = began.elapsed();
        assert!(took >= limit && took < LONG, "waited {took:?}");
    }
}
