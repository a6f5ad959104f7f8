//! The agents the rollout workload starts: `hub-agent` processes (sim or process driver),
//! each with its own data directory, optionally behind a command prefix (`ip netns exec …`,
//! which execs the agent, so the child's pid is the agent's). Everything is SIGKILLed on drop,
//! including the services a process-driver agent started in their own sessions.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;

use super::AgentHost;
use crate::runner::cluster::is_alive;

/// How an agent executes plans.
#[derive(Debug, Clone, PartialEq)]
pub enum Driver {
    /// Simulated entities (`--driver sim`) with this failure rate and seed.
    Sim {
        /// Fraction of plans that fail.
        failure_rate: f64,
        /// Seed of the failures.
        seed: u64,
    },
    /// Real services from release artifacts (`--driver process`).
    Process,
}

/// One running agent.
pub struct AgentProcess {
    /// Its name (the host's).
    pub name: String,
    /// Its environment.
    pub environment: String,
    /// Its data directory (`executions.jsonl`, `canary/`, `process/`).
    pub data_dir: PathBuf,
    child: Option<Child>,
}

impl AgentProcess {
    /// Starts `hub-agent` from `bin_dir` on `host` for `environment` against `endpoints`,
    /// with its data and log under `dir`.
    pub fn start(
        bin_dir: &Path,
        host: &AgentHost,
        environment: &str,
        endpoints: &[String],
        dir: &Path,
        driver: &Driver,
    ) -> anyhow::Result<AgentProcess> {
        let data_dir = dir.join(format!("agent-{}", host.name));
        std::fs::create_dir_all(&data_dir).with_context(|| data_dir.display().to_string())?;
        let log_path = dir.join(format!("agent-{}.log", host.name));
        let log =
            std::fs::File::create(&log_path).with_context(|| log_path.display().to_string())?;
        let agent = bin_dir.join("hub-agent");
        if !agent.exists() {
            anyhow::bail!(
                "{} not found (cargo build --workspace --bins)",
                agent.display()
            );
        }
        let mut cmd = match host.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&agent);
                c
            }
            None => Command::new(&agent),
        };
        cmd.args(["--environment", environment])
            .args(crate::runner::cluster::agent_tls_args(environment)?)
            .arg("--endpoints")
            .arg(endpoints.join(","))
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--poll-wait-ms", "2000", "--state-interval-ms", "300"]);
        match driver {
            Driver::Sim { failure_rate, seed } => {
                cmd.args(["--driver", "sim", "--sim-task-ms", "40"])
                    .arg("--sim-failure-rate")
                    .arg(failure_rate.to_string())
                    .arg("--sim-seed")
                    .arg(seed.to_string());
            }
            Driver::Process => {
                cmd.args(["--driver", "process"]);
            }
        }
        let child = cmd
            .env("RUST_LOG", "info,h2=warn,tower=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {} for {environment}", agent.display()))?;
        Ok(AgentProcess {
            name: host.name.clone(),
            environment: environment.to_string(),
            data_dir,
            child: Some(child),
        })
    }

    /// Whether the agent still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILLs the agent (by its pid) and then every service it recorded.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in hub_agent::driver::process::recorded_service_pids(&self.data_dir) {
            let Ok(id) = i32::try_from(pid) else {
                continue;
            };
            if is_alive(pid) {
                // SAFETY: kill(2) on the process group and the pid of a service this run's
                // agent started in its own session (its pid is the group's id).
                unsafe {
                    libc::kill(-id, libc::SIGKILL);
                    libc::kill(id, libc::SIGKILL);
                }
            }
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
