//! The agents the rollout workload starts: `hub-agent` processes (sim or process driver),
//! each with its own data directory, optionally behind a command prefix (`ip netns exec …`,
//! which execs the agent, so the child's pid is the agent's). Everything is SIGKILLed on drop,
//! including the services a process-driver agent started in their own sessions.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;

use super::AgentHost;
use crate::runner::process::is_alive;

/// How an agent executes plans.
#[derive(Debug, Clone, PartialEq)]
pub enum Driver {
    /// Simulated entities (`--driver sim`) with this failure rate and seed.
    Sim {
        /// Fraction of plans that fail.
        failure_rate: f64,
        /// Seed of the failures.
        seed: u64,
        /// How long each task takes (ms).
        task_ms: u64,
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
    /// How it was started, to start it again after a kill.
    launch: Launch,
    child: Option<Child>,
    /// Stopped with SIGSTOP.
    paused: bool,
}

/// The command line and log of an agent: the same on every (re)start.
struct Launch {
    program: OsString,
    args: Vec<OsString>,
    log_path: PathBuf,
}

impl Launch {
    /// Spawns the agent, its stderr appended to the log (a restart continues the log).
    fn spawn(&self) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| self.log_path.display().to_string())?;
        Command::new(&self.program)
            .args(&self.args)
            .env("RUST_LOG", "info,h2=warn,tower=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", self.program.to_string_lossy()))
    }
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
        let agent = bin_dir.join("hub-agent");
        if !agent.exists() {
            anyhow::bail!(
                "{} not found (cargo build --workspace --bins)",
                agent.display()
            );
        }
        let mut args: Vec<OsString> = Vec::new();
        let program = match host.prefix.split_first() {
            Some((first, rest)) => {
                args.extend(rest.iter().map(OsString::from));
                args.push(agent.clone().into());
                OsString::from(first)
            }
            None => agent.clone().into(),
        };
        args.push("--environment".into());
        args.push(environment.into());
        args.extend(crate::runner::cluster::agent_tls_args(environment)?);
        args.push("--endpoints".into());
        args.push(endpoints.join(",").into());
        args.push("--data-dir".into());
        args.push(data_dir.clone().into());
        for a in ["--poll-wait-ms", "2000", "--state-interval-ms", "300"] {
            args.push(a.into());
        }
        match driver {
            Driver::Sim {
                failure_rate,
                seed,
                task_ms,
            } => {
                for a in ["--driver", "sim", "--sim-task-ms"] {
                    args.push(a.into());
                }
                args.push(task_ms.to_string().into());
                args.push("--sim-failure-rate".into());
                args.push(failure_rate.to_string().into());
                args.push("--sim-seed".into());
                args.push(seed.to_string().into());
            }
            Driver::Process => {
                args.push("--driver".into());
                args.push("process".into());
            }
        }
        let launch = Launch {
            program,
            args,
            log_path,
        };
        let child = launch
            .spawn()
            .with_context(|| format!("agent for {environment}"))?;
        Ok(AgentProcess {
            name: host.name.clone(),
            environment: environment.to_string(),
            data_dir,
            launch,
            child: Some(child),
            paused: false,
        })
    }

    /// SIGKILLs the agent alone (the services it started keep running, as they would when
    /// an agent host's agent crashes) and waits for it.
    pub fn kill(&mut self) {
        self.resume();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the agent again after [`AgentProcess::kill`], with the same data directory.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.child = Some(
            self.launch
                .spawn()
                .with_context(|| format!("restart agent {}", self.name))?,
        );
        Ok(())
    }

    /// SIGSTOPs the agent.
    pub fn pause(&mut self) {
        if let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) {
            // SAFETY: kill(2) on the pid of our own child, which we have not reaped.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            self.paused = true;
        }
    }

    /// SIGCONTs a paused agent.
    pub fn resume(&mut self) {
        if !self.paused {
            return;
        }
        if let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) {
            // SAFETY: as in `pause`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        self.paused = false;
    }

    /// The task the agent is running now, as its execution log says: the last line, when
    /// it is a `started` one (`plan/task attempt N`).
    pub fn running_task(&self) -> Option<String> {
        let path = self.data_dir.join(hub_agent::execlog::EXEC_LOG_FILE);
        let lines = hub_agent::execlog::read_lines(&path).ok()?;
        let last = lines.last()?;
        (last.state == hub_agent::execlog::ExecState::Started)
            .then(|| format!("{} {} attempt {}", last.plan, last.task, last.attempt))
    }

    /// Whether the agent still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILLs the agent (by its pid), then every service it recorded and every process
    /// working under its data directory: an agent killed between spawning a
    /// service and recording its pid leaves that service unrecorded.
    pub fn stop(&mut self) {
        self.kill();
        let mut pids = hub_agent::driver::process::recorded_service_pids(&self.data_dir);
        pids.extend(hub_agent::driver::process::processes_working_in(
            &self.data_dir,
        ));
        for pid in pids {
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
