//! Agents as chaos targets: SIGKILL (then a restart on the same data directory) or SIGSTOP
//! (then SIGCONT) of one agent of the rollout workload, aimed at a moment when it runs a
//! task, so the kill lands mid-plan or mid-canary-step. What must hold afterwards is checked
//! from the history like every other fault: each task attempt ran at most once
//! (`plans_at_most_once`), the canary weights applied equal the committed steps
//! (`canary_weights`) and every rollout ends terminal (`rollouts_terminal`).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{lock, Rollouts};

/// How long a fault waits for its agent to be running a task before it strikes anyway.
const MID_TASK_WAIT: Duration = Duration::from_secs(2);
/// How often the agent's execution log is read while waiting.
const MID_TASK_POLL: Duration = Duration::from_millis(10);

/// What happens to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentFault {
    /// SIGKILL, restarted when the fault heals.
    Kill,
    /// SIGSTOP, SIGCONT when the fault heals.
    Pause,
}

/// The agent faults of a run, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFaultCounts {
    /// Agents killed (and restarted).
    pub kills: usize,
    /// Of those, killed while their execution log showed a task running.
    pub kills_mid_task: usize,
    /// Agents paused (and resumed).
    pub pauses: usize,
    /// Of those, paused while a task was running.
    pub pauses_mid_task: usize,
}

/// An agent fault in effect, to heal with [`Rollouts::heal_agent`].
#[derive(Debug)]
pub struct AgentStrike {
    index: usize,
    fault: AgentFault,
}

impl Rollouts {
    /// Strikes agent `pick % agents` with `fault` once it runs a task (or after
    /// [`MID_TASK_WAIT`]); returns the strike and what it hit, for the log.
    pub async fn strike_agent(
        &mut self,
        fault: AgentFault,
        pick: u64,
    ) -> anyhow::Result<(AgentStrike, String)> {
        anyhow::ensure!(!self.agents.is_empty(), "agent fault without agents");
        let index = (pick % self.agents.len() as u64) as usize;
        let deadline = Instant::now() + MID_TASK_WAIT;
        let running = loop {
            match self.agents[index].running_task() {
                Some(task) => break Some(task),
                None if Instant::now() >= deadline => break None,
                None => tokio::time::sleep(MID_TASK_POLL).await,
            }
        };
        let agent = &mut self.agents[index];
        match fault {
            AgentFault::Kill => agent.kill(),
            AgentFault::Pause => agent.pause(),
        }
        let mut progress = lock(&self.progress);
        let counts = &mut progress.agent_faults;
        let (total, mid) = match fault {
            AgentFault::Kill => (&mut counts.kills, &mut counts.kills_mid_task),
            AgentFault::Pause => (&mut counts.pauses, &mut counts.pauses_mid_task),
        };
        *total += 1;
        *mid += usize::from(running.is_some());
        let detail = format!(
            "agent {} {}",
            agent.name,
            running.map_or("between tasks".to_string(), |t| format!("mid-task ({t})"))
        );
        Ok((AgentStrike { index, fault }, detail))
    }

    /// Ends a strike: the killed agent starts again on its data directory, the paused one
    /// continues.
    pub fn heal_agent(&mut self, strike: AgentStrike) -> anyhow::Result<()> {
        let agent = &mut self.agents[strike.index];
        match strike.fault {
            AgentFault::Kill => agent.restart(),
            AgentFault::Pause => {
                agent.resume();
                Ok(())
            }
        }
    }
}
