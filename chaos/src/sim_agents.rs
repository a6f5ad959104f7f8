//! Simulated agents for `hub-bench`: the real agent ([`hub_agent::executor::Agent`]) with the
//! `sim` driver, many in this one process, each speaking as its own environment's agent
//! (a certificate `hubctl dev` issues, unless the cluster is plaintext).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hub_agent::driver::sim::{SimConfig, SimDriver};
use hub_agent::executor::{Agent, AgentConfig};
use hub_agent::hub::HubConnection;
use hub_agent::journal::JournalFile;
use hub_agent::metrics::Metrics;

/// How the agents of one [`spawn`] behave.
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// Longest wait of one plan fetch for a change (the agent's `--poll-wait-ms`).
    pub poll_wait: Duration,
    /// How often observed state is compared and reported when changed.
    pub state_interval: Duration,
    /// How long a task report waits for the ones that follow it (the agent's
    /// `--report-linger-ms`).
    pub report_linger: Duration,
    /// How long each simulated task takes (the `sim` driver's latency).
    pub task_latency: Duration,
}

/// The running agents' journals: they live as long as this value (drop it after the run).
pub struct SimAgents {
    _journals: tempfile::TempDir,
}

/// Starts one agent per environment of `environments` on this process's runtime, each
/// dialling `endpoints` starting at a different one (as agents spread over a real hub), all
/// counting into `metrics`. `cluster_dir` is the `hubctl dev up` directory the agents'
/// certificates are issued from.
pub fn spawn(
    cluster_dir: &Path,
    endpoints: &[String],
    environments: &[String],
    settings: &SimSettings,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<SimAgents> {
    // Each simulated agent's journal is fsynced on every step; on a real deployment every
    // agent has its own disk, here a thousand share one, so the journals live in tmpfs.
    let journals = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")?
    } else {
        tempfile::tempdir()?
    };
    let file = hubctl::read_cluster_file(cluster_dir)?;
    for (i, env) in environments.iter().enumerate() {
        let journal = JournalFile::open(&journals.path().join(i.to_string()), env)?;
        let mut eps = endpoints.to_vec();
        let shift = i % eps.len().max(1);
        eps.rotate_left(shift);
        let mode = if file.insecure {
            hub_tls::client::ClientMode::Plaintext
        } else {
            let files =
                hubctl::dev::dev_issue(cluster_dir, &hub_tls::Identity::Agent(env.clone()), &[])?;
            hub_tls::client::ClientMode::Tls(Arc::new(hub_tls::client::ClientTls::load(
                files,
                None,
                std::time::SystemTime::now(),
            )?))
        };
        let hub = Arc::new(HubConnection::new(
            eps,
            metrics.clone(),
            hub_tls::client::Connector::new(mode, Duration::from_millis(500)),
        ));
        let driver = Arc::new(SimDriver::new(SimConfig {
            task_latency: settings.task_latency,
            failure_rate: 0.0,
            seed: 1,
        }));
        let agent = Agent::new(
            AgentConfig {
                environment: env.clone(),
                poll_wait: settings.poll_wait,
                state_interval: settings.state_interval,
                state_refresh: Duration::from_secs(30),
                parallel_plans: 1,
                report_linger: settings.report_linger,
            },
            hub,
            driver,
            journal,
            metrics.clone(),
        );
        tokio::spawn(agent.run());
    }
    Ok(SimAgents {
        _journals: journals,
    })
}
