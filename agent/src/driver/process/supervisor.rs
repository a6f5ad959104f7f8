//! Supervision: every 500 ms, for each entity not busy with a task, check that its recorded
//! process is alive (reaping this agent's children; polling adopted processes by pid and
//! `/proc`), probe its readiness (the result `observe` reports), and restart a crashed
//! service with backoff (1 s, 2 s, 4 s, … at most 30 s; back to 1 s after 60 s ready).
//!
//! A process stopped by a plan is never restarted: a plan's `stop` clears the recorded pid
//! while holding the entity's lock, which the supervisor only `try_lock`s.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::deployment::Deployment;
use super::os;
use super::probe;
use super::runtime::{
    now_ms, Crash, Entity, LaunchMode, Liveness, Probe, BACKOFF_RESET, INITIAL_BACKOFF,
    MAX_BACKOFF, PROBE_TIMEOUT,
};

/// Interval between two checks of every entity.
pub const TICK: Duration = Duration::from_millis(500);

/// Runs until the driver (`entities`' owner) is dropped.
pub async fn run<F>(owner: Weak<F>, entities: impl Fn(&F) -> Vec<Arc<Entity>>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(owner) = owner.upgrade() else {
            return;
        };
        let list = entities(&owner);
        drop(owner);
        futures::future::join_all(list.iter().map(|e| supervise(e))).await;
    }
}

enum Step {
    Nothing,
    Restart(Deployment),
    Probe(super::runtime::Running, Duration),
}

/// One check of one entity (skipped while a task runs on it).
// Long: one supervision step: decide under the lock, then restart or probe, reporting each
// outcome.
pub async fn supervise(entity: &Entity) {
    let Ok(_op) = entity.op.try_lock() else {
        return;
    };
    let now = Instant::now();
    let step = {
        let mut rt = entity.lock();
        let (pid, current, started_at) = match &rt.state {
            Some(s) => match s.pid {
                Some(pid) => (pid, s.current.clone(), s.started_at),
                None => return,
            },
            None => return,
        };
        match rt.crash.as_ref().map(|c| c.restart_at) {
            Some(Some(at)) if now >= at => Step::Restart(current),
            Some(Some(_)) => Step::Nothing,
            _ => {
                let was_child = rt.child.is_some();
                match rt.liveness(&entity.dir) {
                    Liveness::NotRunning => Step::Nothing,
                    Liveness::Exited(how) => {
                        if was_child {
                            // Whatever the service left in its process group (its exit
                            // status is known, so the group is still ours).
                            os::signal_group(pid, libc::SIGKILL);
                        }
                        warn!(entity = %entity.id, version = %current.version, pid,
                              status = %how, restarts = rt.restarts,
                              backoff_ms = rt.backoff.as_millis() as u64, "service crashed");
                        rt.ready_since = None;
                        rt.crash = Some(Crash {
                            status: how,
                            restart_at: Some(now + rt.backoff),
                        });
                        Step::Nothing
                    }
                    Liveness::Alive => match rt.running.clone() {
                        Some(running) => Step::Probe(
                            running,
                            Duration::from_millis(now_ms().saturating_sub(started_at)),
                        ),
                        None => Step::Nothing,
                    },
                }
            }
        }
    };
    match step {
        Step::Nothing => {}
        Step::Restart(current) => {
            let result = entity
                .prepare(&current)
                .and_then(|p| entity.launch(&p, LaunchMode::Supervisor));
            let mut rt = entity.lock();
            let backoff = rt.backoff;
            rt.backoff = (backoff * 2).min(MAX_BACKOFF);
            match result {
                Ok(pid) => {
                    rt.restarts += 1;
                    info!(entity = %entity.id, version = %current.version, pid,
                          restarts = rt.restarts, "restarted crashed service");
                    if let Some(c) = &mut rt.crash {
                        c.restart_at = None;
                    }
                }
                Err(e) => {
                    warn!(entity = %entity.id, version = %current.version, error = %e,
                          "cannot restart crashed service");
                    rt.crash = Some(Crash {
                        status: format!("restart failed: {e}"),
                        restart_at: Some(Instant::now() + rt.backoff),
                    });
                }
            }
        }
        Step::Probe(running, alive_for) => {
            let result = probe::probe_once(
                running.spec.readiness.as_ref(),
                running.port,
                alive_for,
                PROBE_TIMEOUT,
            )
            .await;
            let mut rt = entity.lock();
            match result {
                Ok(()) => {
                    if rt.crash.take().is_some() {
                        info!(entity = %entity.id, restarts = rt.restarts,
                              "service ready again after a crash");
                    }
                    rt.probe = Probe::Ready;
                    let since = *rt.ready_since.get_or_insert(now);
                    if now.duration_since(since) >= BACKOFF_RESET {
                        rt.backoff = INITIAL_BACKOFF;
                    }
                }
                Err(last) => {
                    rt.ready_since = None;
                    rt.probe = Probe::NotReady(format!("{} (last: {last})", running.describe()));
                }
            }
        }
    }
}
