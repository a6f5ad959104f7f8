//! `hub-agent`: the agent of one spoke environment. It long-polls any hub node for its
//! environment's plans, executes them exactly once through a driver (`process` runs real
//! services from release artifacts, `sim` simulates entities), reports progress and
//! deployed state, and fails over between hub nodes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hub_agent::driver::process::ProcessDriver;
use hub_agent::driver::sim::{SimConfig, SimDriver};
use hub_agent::driver::Driver;
use hub_agent::executor::{Agent, AgentConfig};
use hub_agent::hub::HubConnection;
use hub_agent::journal::JournalFile;
use hub_agent::metrics::{self, Metrics};

/// The agent of one environment.
#[derive(Parser, Debug)]
#[command(name = "hub-agent", version)]
struct Args {
    /// The environment this agent serves (a data directory belongs to one environment).
    #[arg(long)]
    environment: String,
    /// Hub endpoints, host:port,... (any nodes; the list is refreshed from the hub).
    #[arg(long, value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    /// Data directory: the journal and the process driver's services.
    #[arg(long)]
    data_dir: PathBuf,
    /// How plans are executed.
    #[arg(long, default_value = "process", value_parser = ["process", "sim"])]
    driver: String,
    /// Serve Prometheus metrics on this address (`/metrics`).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Longest wait of one plan fetch for a change.
    #[arg(long, default_value_t = 10_000)]
    poll_wait_ms: u64,
    /// How often observed state is compared and reported when changed.
    #[arg(long, default_value_t = 1_000)]
    state_interval_ms: u64,
    /// Plans run at once (for different entities).
    #[arg(long, default_value_t = 8)]
    parallel_plans: usize,
    /// sim driver: time each task takes.
    #[arg(long, default_value_t = 50)]
    sim_task_ms: u64,
    /// sim driver: fraction of plans that fail (0–1).
    #[arg(long, default_value_t = 0.0)]
    sim_failure_rate: f64,
    /// sim driver: seed of the failures.
    #[arg(long, default_value_t = 1)]
    sim_seed: u64,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,h2=warn,tower=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(&args.log_format);
    if args.environment.is_empty() {
        anyhow::bail!("--environment: must not be empty");
    }
    for e in &args.endpoints {
        if !e.contains(':') {
            anyhow::bail!("--endpoints: {e:?} is not host:port");
        }
    }
    if !(0.0..=1.0).contains(&args.sim_failure_rate) {
        anyhow::bail!("--sim-failure-rate: must be between 0 and 1");
    }
    // The journal first: a data directory of another environment is refused before anything
    // else is touched.
    let journal = JournalFile::open(&args.data_dir, &args.environment)
        .with_context(|| format!("--data-dir {}", args.data_dir.display()))?;
    let metrics = Arc::new(Metrics::default());
    let driver: Arc<dyn Driver> = match args.driver.as_str() {
        "sim" => Arc::new(SimDriver::new(SimConfig {
            task_latency: Duration::from_millis(args.sim_task_ms),
            failure_rate: args.sim_failure_rate,
            seed: args.sim_seed,
        })),
        _ => Arc::new(
            ProcessDriver::new(args.data_dir.clone(), args.environment.clone())
                .with_context(|| format!("--data-dir {}", args.data_dir.display()))?,
        ),
    };
    if let Some(addr) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics-listen {addr}: cannot bind"))?;
        tracing::info!(addr = %listener.local_addr()?, "metrics on /metrics");
        tokio::spawn(metrics::serve(
            listener,
            metrics.clone(),
            args.environment.clone(),
        ));
    }
    let hub = Arc::new(HubConnection::new(args.endpoints.clone(), metrics.clone()));
    let agent = Agent::new(
        AgentConfig {
            environment: args.environment.clone(),
            poll_wait: Duration::from_millis(args.poll_wait_ms.clamp(100, 30_000)),
            state_interval: Duration::from_millis(args.state_interval_ms.max(100)),
            state_refresh: Duration::from_secs(30),
            parallel_plans: args.parallel_plans,
        },
        hub,
        driver,
        journal,
        metrics,
    );
    tracing::info!(environment = %args.environment, driver = %args.driver, "hub-agent started");
    tokio::select! {
        _ = agent.run() => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
    }
    Ok(())
}
