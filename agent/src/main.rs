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
use hub_agent::execlog::ExecLog;
use hub_agent::executor::{Agent, AgentConfig, DEFAULT_REPORT_LINGER};
use hub_agent::hub::HubConnection;
use hub_agent::journal::JournalFile;
use hub_agent::metrics::{self, Metrics};
use serde::Deserialize;

/// jemalloc, as hub-node: an agent allocates and frees many small buffers per call (TLS,
/// HTTP/2, protobuf) and per journal write.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The agent of one environment. Every setting can also come from `--config agent.toml`
/// (the same names, kebab-case); a flag given on the command line wins over the file.
#[derive(Parser, Debug, Default)]
#[command(name = "hub-agent", version)]
struct Args {
    /// A TOML file with the settings below (for example `environment = "prod"`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The environment this agent serves (a data directory belongs to one environment).
    #[arg(long)]
    environment: Option<String>,
    /// Hub endpoints, host:port,... (any nodes; the list is refreshed from the hub).
    #[arg(long, value_delimiter = ',')]
    endpoints: Option<Vec<String>>,
    /// Data directory: the journal, the execution log (`executions.jsonl`) and the process
    /// driver's services.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// How plans are executed: `process` (default) or `sim`.
    #[arg(long, value_parser = ["process", "sim"])]
    driver: Option<String>,
    /// Serve Prometheus metrics on this address (`/metrics`).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Longest wait of one plan fetch for a change (default 10000).
    #[arg(long)]
    poll_wait_ms: Option<u64>,
    /// How often observed state is compared and reported when changed (default 1000).
    #[arg(long)]
    state_interval_ms: Option<u64>,
    /// Plans run at once, for different entities (default 8).
    #[arg(long)]
    parallel_plans: Option<usize>,
    /// How long a task report waits, while a plan runs, for the ones that follow it before
    /// they are sent in one write; a plan's end sends them at once. 0–1000 (default 500).
    #[arg(long)]
    report_linger_ms: Option<u64>,
    /// sim driver: time each task takes (default 50).
    #[arg(long)]
    sim_task_ms: Option<u64>,
    /// sim driver: fraction of plans that fail, 0–1 (default 0).
    #[arg(long)]
    sim_failure_rate: Option<f64>,
    /// sim driver: seed of the failures (default 1).
    #[arg(long)]
    sim_seed: Option<u64>,
    /// Log format: `text` (default) or `json`.
    #[arg(long, value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// The cluster CA's certificate (PEM): hub nodes are verified against it.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// This agent's certificate (PEM), naming `hub://<cluster>/agent/<environment>`
    /// (`hubctl pki issue agent`).
    #[arg(long)]
    cert_file: Option<PathBuf>,
    /// This agent's private key (PEM).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Plaintext to a hub run with --insecure (development only).
    #[arg(long)]
    insecure: bool,
    /// Address ranges (CIDR, comma-separated) artifact downloads never connect to, as
    /// `hub-node --outbound-deny`; the default is the hub's: loopback, private, shared and
    /// link-local ranges, their IPv6 equivalents and the cloud metadata addresses. `''`
    /// denies nothing.
    #[arg(long)]
    outbound_deny: Option<String>,
    /// An address range (CIDR) opened inside the `--outbound-deny` ranges, e.g. a registry's
    /// network; repeat the flag or separate ranges with commas. The most specific range
    /// decides. In the file: `outbound-allow = ["10.20.0.0/16"]`; flags replace the file's.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    outbound_allow: Option<Vec<String>>,
}

/// The settings file: the flags' names in kebab-case; unknown keys are refused.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ConfigFile {
    environment: Option<String>,
    endpoints: Option<Vec<String>>,
    data_dir: Option<PathBuf>,
    driver: Option<String>,
    metrics_listen: Option<SocketAddr>,
    poll_wait_ms: Option<u64>,
    state_interval_ms: Option<u64>,
    parallel_plans: Option<usize>,
    report_linger_ms: Option<u64>,
    sim_task_ms: Option<u64>,
    sim_failure_rate: Option<f64>,
    sim_seed: Option<u64>,
    log_format: Option<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    insecure: Option<bool>,
    outbound_deny: Option<String>,
    outbound_allow: Option<Vec<String>>,
}

/// Longest `report-linger-ms`: a report held longer would only be late.
const MAX_REPORT_LINGER_MS: u64 = 1_000;

/// Largest settings file read (a few hundred bytes in practice).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads the settings file, refusing one larger than [`MAX_CONFIG_BYTES`] before buffering it.
fn read_config(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_CONFIG_BYTES} bytes"),
        ));
    }
    Ok(text)
}

/// The agent's settings after the file and the flags are combined and checked.
#[derive(Debug)]
struct Settings {
    environment: String,
    endpoints: Vec<String>,
    data_dir: PathBuf,
    driver: String,
    metrics_listen: Option<SocketAddr>,
    poll_wait_ms: u64,
    state_interval_ms: u64,
    parallel_plans: usize,
    report_linger_ms: u64,
    sim_task_ms: u64,
    sim_failure_rate: f64,
    sim_seed: u64,
    log_format: String,
    /// `None`: plaintext (`insecure`).
    tls: Option<hub_tls::TlsFiles>,
    /// Addresses artifact downloads never connect to.
    outbound: hub_http::DenyList,
}

impl Settings {
    /// Combines `args` with the file it names (flags win) and checks every value; errors name
    /// the flag or the file and key.
    // Long: every setting resolved from flag, then file, then default, each with its own error.
    fn resolve(args: Args) -> anyhow::Result<Settings> {
        let file = match &args.config {
            Some(path) => {
                let text = read_config(path)
                    .with_context(|| format!("--config {}: cannot read", path.display()))?;
                toml::from_str::<ConfigFile>(&text)
                    .map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))?
            }
            None => ConfigFile::default(),
        };
        let origin = |key: &str, from_flag: bool| match (&args.config, from_flag) {
            (Some(path), false) => format!("{}: {key}", path.display()),
            _ => format!("--{key}"),
        };
        let environment = args
            .environment
            .clone()
            .or(file.environment.clone())
            .context("--environment (or `environment` in --config) is required")?;
        if environment.is_empty() {
            anyhow::bail!(
                "{}: must not be empty",
                origin("environment", args.environment.is_some())
            );
        }
        let endpoints = args
            .endpoints
            .clone()
            .or(file.endpoints.clone())
            .context("--endpoints (or `endpoints` in --config) is required")?;
        let endpoints_origin = origin("endpoints", args.endpoints.is_some());
        if endpoints.is_empty() {
            anyhow::bail!("{endpoints_origin}: at least one host:port is required");
        }
        for e in &endpoints {
            if !e.contains(':') {
                anyhow::bail!("{endpoints_origin}: {e:?} is not host:port");
            }
        }
        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .context("--data-dir (or `data-dir` in --config) is required")?;
        let driver = args
            .driver
            .clone()
            .or(file.driver.clone())
            .unwrap_or_else(|| "process".into());
        if driver != "process" && driver != "sim" {
            anyhow::bail!(
                "{}: {driver:?} is not `process` or `sim`",
                origin("driver", args.driver.is_some())
            );
        }
        let log_format = args
            .log_format
            .clone()
            .or(file.log_format.clone())
            .unwrap_or_else(|| "text".into());
        if log_format != "text" && log_format != "json" {
            anyhow::bail!(
                "{}: {log_format:?} is not `text` or `json`",
                origin("log-format", args.log_format.is_some())
            );
        }
        let sim_failure_rate = args
            .sim_failure_rate
            .or(file.sim_failure_rate)
            .unwrap_or(0.0);
        if !(0.0..=1.0).contains(&sim_failure_rate) {
            anyhow::bail!(
                "{}: must be between 0 and 1",
                origin("sim-failure-rate", args.sim_failure_rate.is_some())
            );
        }
        let parallel_plans = args.parallel_plans.or(file.parallel_plans).unwrap_or(8);
        if parallel_plans == 0 {
            anyhow::bail!(
                "{}: must be at least 1",
                origin("parallel-plans", args.parallel_plans.is_some())
            );
        }
        let report_linger_ms = args
            .report_linger_ms
            .or(file.report_linger_ms)
            .unwrap_or(DEFAULT_REPORT_LINGER.as_millis() as u64);
        if report_linger_ms > MAX_REPORT_LINGER_MS {
            anyhow::bail!(
                "{}: {report_linger_ms} is more than {MAX_REPORT_LINGER_MS}",
                origin("report-linger-ms", args.report_linger_ms.is_some())
            );
        }
        let insecure = args.insecure || file.insecure.unwrap_or(false);
        let ca = args.ca_file.clone().or(file.ca_file.clone());
        let cert = args.cert_file.clone().or(file.cert_file.clone());
        let key = args.key_file.clone().or(file.key_file.clone());
        let tls = match (insecure, ca, cert, key) {
            (true, None, None, None) => None,
            (true, ..) => anyhow::bail!(
                "--insecure: plaintext takes no --ca-file, --cert-file or --key-file"
            ),
            (false, Some(ca), Some(cert), Some(key)) => Some(hub_tls::TlsFiles { ca, cert, key }),
            (false, ..) => anyhow::bail!(
                "--ca-file, --cert-file and --key-file (or `ca-file`, `cert-file`, `key-file` in --config) are required; --insecure only for a hub run with --insecure"
            ),
        };
        let outbound = outbound_of(&args, &file, &origin)?;
        Ok(Settings {
            tls,
            outbound,
            environment,
            endpoints,
            data_dir,
            driver,
            metrics_listen: args.metrics_listen.or(file.metrics_listen),
            poll_wait_ms: args.poll_wait_ms.or(file.poll_wait_ms).unwrap_or(10_000),
            state_interval_ms: args
                .state_interval_ms
                .or(file.state_interval_ms)
                .unwrap_or(1_000),
            parallel_plans,
            report_linger_ms,
            sim_task_ms: args.sim_task_ms.or(file.sim_task_ms).unwrap_or(50),
            sim_failure_rate,
            sim_seed: args.sim_seed.or(file.sim_seed).unwrap_or(1),
            log_format,
        })
    }
}

/// The download deny list: `outbound-deny` (default [`hub_http::DenyList::DEFAULT`]) less the
/// ranges of `outbound-allow`, each from the flag or else the file; errors name where the
/// value came from.
fn outbound_of(
    args: &Args,
    file: &ConfigFile,
    origin: &dyn Fn(&str, bool) -> String,
) -> anyhow::Result<hub_http::DenyList> {
    let deny = args
        .outbound_deny
        .as_deref()
        .or(file.outbound_deny.as_deref())
        .unwrap_or(hub_http::DenyList::DEFAULT);
    let deny = hub_http::DenyList::parse(deny).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}",
            origin("outbound-deny", args.outbound_deny.is_some())
        )
    })?;
    let allow = args
        .outbound_allow
        .as_ref()
        .or(file.outbound_allow.as_ref())
        .map(|ranges| ranges.join(","))
        .unwrap_or_default();
    let allow = hub_http::parse_ranges(&allow).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}",
            origin("outbound-allow", args.outbound_allow.is_some())
        )
    })?;
    Ok(deny.allowing(allow))
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,h2=warn,tower=warn"));
    // Colour only on a terminal: a redirected log gets no escape codes (as hub-node).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
// Long: the agent's start-up sequence, step by step.
async fn main() -> anyhow::Result<()> {
    // Owner-only files (SECURITY "At rest"): the journal, the execution log, rendered configs
    // and secrets, and whatever a library creates, whatever umask the agent was started with.
    // The agent's services inherit it; the process driver sets the modes they need itself.
    // SAFETY: umask(2) cannot fail and only swaps the process's file-creation mask.
    unsafe { libc::umask(0o077) };
    let args = Settings::resolve(Args::parse())?;
    init_tracing(&args.log_format);
    // The TLS material before anything else: a bad certificate changes nothing on disk.
    let (mode, reloadable) = match &args.tls {
        None => {
            tracing::warn!(
                "--insecure: plaintext to the hub; plans and secrets travel unencrypted"
            );
            (hub_tls::client::ClientMode::Plaintext, Vec::new())
        }
        Some(files) => {
            let tls = Arc::new(hub_tls::client::ClientTls::load(
                files.clone(),
                Some(hub_tls::Identity::Agent(args.environment.clone())),
                std::time::SystemTime::now(),
            )?);
            let m = tls.material();
            tracing::info!(
                identity = %m.identity,
                not_after = %hub_tls::material::format_time(m.validity.not_after),
                "TLS 1.3 to the hub"
            );
            (
                hub_tls::client::ClientMode::Tls(tls.clone()),
                vec![hub_tls::reload::Reloadable::Client(tls)],
            )
        }
    };
    let _reload =
        hub_tls::reload::reload_on_sighup(reloadable).context("install the SIGHUP handler")?;
    let connector = hub_tls::client::Connector::new(mode, Duration::from_millis(500));
    // The journal first: a data directory of another environment is refused before anything
    // else is touched.
    let journal = JournalFile::open(&args.data_dir, &args.environment)
        .with_context(|| format!("--data-dir {}", args.data_dir.display()))?;
    // The execution log next: it gets the finish lines an earlier run journaled but did not
    // log (killed between the two writes) before any task runs.
    let mut exec_log = ExecLog::open(&args.data_dir)
        .with_context(|| format!("--data-dir {}", args.data_dir.display()))?;
    let reconciled = exec_log
        .reconcile(journal.journal())
        .with_context(|| format!("--data-dir {}", args.data_dir.display()))?;
    if reconciled > 0 {
        tracing::info!(
            lines = reconciled,
            "execution log: appended finishes the journal recorded"
        );
    }
    let metrics = Arc::new(Metrics::default());
    let driver: Arc<dyn Driver> = match args.driver.as_str() {
        "sim" => Arc::new(SimDriver::new(SimConfig {
            task_latency: Duration::from_millis(args.sim_task_ms),
            failure_rate: args.sim_failure_rate,
            seed: args.sim_seed,
        })),
        _ => Arc::new(
            ProcessDriver::new(
                args.data_dir.clone(),
                args.environment.clone(),
                args.outbound.clone(),
            )
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
    let hub = Arc::new(HubConnection::new(
        args.endpoints.clone(),
        metrics.clone(),
        connector,
    ));
    let agent = Agent::with_exec_log(
        AgentConfig {
            environment: args.environment.clone(),
            poll_wait: Duration::from_millis(args.poll_wait_ms.clamp(100, 30_000)),
            state_interval: Duration::from_millis(args.state_interval_ms.max(100)),
            state_refresh: Duration::from_secs(30),
            parallel_plans: args.parallel_plans,
            report_linger: Duration::from_millis(args.report_linger_ms),
        },
        hub,
        driver,
        journal,
        Some(exec_log),
        metrics,
    );
    tracing::info!(environment = %args.environment, driver = %args.driver,
        outbound_deny = %args.outbound, "hub-agent started");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = agent.clone().run() => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
        _ = terminate.recv() => tracing::info!("terminated"),
    }
    // A clean stop leaves the whole journal in its checkpoint (what a release from before
    // the journal's log reads).
    if let Err(e) = agent.fold_journal().await {
        tracing::warn!(error = %e, "journal: cannot fold the log into the checkpoint");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn the_file_supplies_settings_and_flags_win() {
        let (_dir, path) = write(
            "environment = \"prod\"\nendpoints = [\"a:1\", \"b:2\"]\ndata-dir = \"/var/lib/hub-agent\"\ndriver = \"sim\"\nparallel-plans = 3\nca-file = \"/etc/hub/ca.pem\"\ncert-file = \"/etc/hub/agent.pem\"\nkey-file = \"/etc/hub/agent-key.pem\"\n",
        );
        let settings = Settings::resolve(Args {
            config: Some(path),
            driver: Some("process".into()),
            key_file: Some("/run/agent-key.pem".into()),
            ..Args::default()
        })
        .unwrap();
        let tls = settings.tls.as_ref().expect("TLS files");
        assert_eq!(tls.ca, PathBuf::from("/etc/hub/ca.pem"));
        assert_eq!(
            tls.key,
            PathBuf::from("/run/agent-key.pem"),
            "the flag wins"
        );
        assert_eq!(settings.environment, "prod");
        assert_eq!(settings.endpoints, vec!["a:1", "b:2"]);
        assert_eq!(settings.data_dir, PathBuf::from("/var/lib/hub-agent"));
        assert_eq!(settings.driver, "process", "the flag wins over the file");
        assert_eq!(settings.parallel_plans, 3);
        assert_eq!(settings.poll_wait_ms, 10_000, "defaults fill the rest");
        assert_eq!(
            settings.report_linger_ms,
            DEFAULT_REPORT_LINGER.as_millis() as u64
        );
    }

    #[test]
    fn downloads_deny_the_hubs_default_unless_a_range_is_opened() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let base =
            "environment = \"prod\"\nendpoints = [\"a:1\"]\ndata-dir = \"d\"\ninsecure = true\n";
        let (_dir, path) = write(base);
        let settings = Settings::resolve(Args {
            config: Some(path),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(settings.outbound.to_string(), hub_http::DenyList::DEFAULT);
        assert!(settings.outbound.denies(ip("127.0.0.1")).is_some());
        let (_dir, path) = write(&format!("{base}outbound-allow = [\"10.20.0.0/16\"]\n"));
        let from_file = Settings::resolve(Args {
            config: Some(path.clone()),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(from_file.outbound.denies(ip("10.20.1.1")), None);
        assert!(from_file.outbound.denies(ip("127.0.0.1")).is_some());
        let flags = Settings::resolve(Args {
            config: Some(path.clone()),
            outbound_allow: Some(vec!["127.0.0.0/8".into()]),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(flags.outbound.denies(ip("127.0.0.1")), None);
        assert!(
            flags.outbound.denies(ip("10.20.1.1")).is_some(),
            "the flag wins"
        );
        let err = Settings::resolve(Args {
            config: Some(path),
            outbound_allow: Some(vec!["10.0.0.1/8".into()]),
            ..Args::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("--outbound-allow: \"10.0.0.1/8\""), "{err}");
    }

    #[test]
    fn a_report_linger_past_its_bound_is_refused_naming_it() {
        let (_dir, path) = write(
            "environment = \"prod\"\nendpoints = [\"a:1\"]\ndata-dir = \"d\"\ninsecure = true\nreport-linger-ms = 1001\n",
        );
        let err = Settings::resolve(Args {
            config: Some(path.clone()),
            ..Args::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("report-linger-ms"), "{err}");
        assert!(err.contains("1001"), "{err}");
        let settings = Settings::resolve(Args {
            config: Some(path),
            report_linger_ms: Some(0),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(settings.report_linger_ms, 0, "the flag wins");
    }

    #[test]
    fn bad_files_name_the_file_and_the_key() {
        let (_dir, path) = write("environment = \"prod\"\nendpionts = [\"a:1\"]\n");
        let err = Settings::resolve(Args {
            config: Some(path.clone()),
            ..Args::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("endpionts"), "{err}");

        let (_dir, path) =
            write("environment = \"prod\"\nendpoints = [\"nohostport\"]\ndata-dir = \"d\"\n");
        let err = Settings::resolve(Args {
            config: Some(path.clone()),
            ..Args::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("agent.toml: endpoints"), "{err}");

        let err = Settings::resolve(Args {
            config: Some(PathBuf::from("/nonexistent/agent.toml")),
            ..Args::default()
        })
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/agent.toml"),
            "{err:#}"
        );

        let err = Settings::resolve(Args::default()).unwrap_err().to_string();
        assert!(err.contains("--environment"), "{err}");
    }

    /// Settings files (SPEC S3, docs/BENCHMARKS.md "Fuzzing"): valid `agent.toml`s and TOML
    /// built to hurt (deep nesting, long keys), mutated and random, through
    /// `Settings::resolve` as `--config` reads them. Every one is accepted or refused with an
    /// error naming the file; none panics; each within a time bound.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn seeds() -> Vec<Vec<u8>> {
            vec![
                b"environment = \"prod\"\nendpoints = [\"10.0.0.1:7401\", \"10.0.0.2:7401\"]\ndata-dir = \"/var/lib/hub-agent\"\ndriver = \"process\"\nmetrics-listen = \"0.0.0.0:9464\"\npoll-wait-ms = 10000\nsim-failure-rate = 0.5\n".to_vec(),
                b"environment = 'dev'\nendpoints = ['a:1']\ndata-dir = 'd'\nparallel-plans = 0\n[extra]\nx = 1\n".to_vec(),
                format!("environment = {}1{}\n", "[".repeat(5_000), "]".repeat(5_000)).into_bytes(),
                format!("{} = 1\n", "a.".repeat(3_000) + "b").into_bytes(),
                format!("environment = \"{}\"\n", "x".repeat(100_000)).into_bytes(),
            ]
        }

        proptest! {
            #![proptest_config(hub_fuzz::config(500))]

            #[test]
            fn settings_files(bytes in hub_fuzz::mutated(seeds())) {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("agent.toml");
                std::fs::write(&path, &bytes).unwrap();
                let resolved = hub_fuzz::within(std::time::Duration::from_secs(2), "agent.toml", || {
                    Settings::resolve(Args {
                        config: Some(path.clone()),
                        ..Args::default()
                    })
                });
                if let Err(e) = resolved {
                    let shown = format!("{e:#}");
                    prop_assert!(shown.contains("agent.toml") || shown.contains("--"), "{}", shown);
                }
            }
        }
    }
}
