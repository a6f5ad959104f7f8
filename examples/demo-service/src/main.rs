//! `demo-service`: the demo product the hub deploys in tests and demos.
//!
//! A small HTTP/1.1 service with no dependencies beyond std. It claims a release version
//! (`--version`), reads a tiny YAML config (`--config`, see [`config`]) and answers:
//!
//! - `GET /` → 200 `demo-service <version>\n` (plus the config's `message` line), or 500
//!   for a fraction `error_rate` of requests, after `latency_ms`;
//! - `GET /version` → `<version>\n`;
//! - `GET /healthz` → 200 `ok\n`, or 503 with `--never-ready` (the "broken" release);
//! - anything else → 404 (405 for other methods on those paths, 400 for bad requests).
//!
//! On every start it appends `<version> <pid>\n` to the config's `starts_file`, if set, and
//! logs one line (version, address, port, pid) to stderr.
//!
//! Exit codes: 2 for a bad command line or config (the message names the flag or key), 3
//! when the port cannot be bound (the message names the port), 1 when `starts_file` cannot
//! be written. SIGTERM and SIGINT exit at once with code 0 (see [`signals`]): the service
//! is stateless, so there is nothing to drain.

mod config;
mod http;
mod signals;

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Exit code for a bad command line or config file.
const EXIT_USAGE: u8 = 2;
/// Exit code when the listening socket cannot be bound.
const EXIT_BIND: u8 = 3;
/// Exit code when `starts_file` cannot be written.
const EXIT_STARTS_FILE: u8 = 1;

const USAGE: &str = "\
usage: demo-service --config FILE --version VERSION [--never-ready]

  --config FILE      config file (one `key: value` per line): port (required), bind,
                     error_rate, latency_ms, ready_after_ms, starts_file, message; other keys are ignored
  --version VERSION  the release version this process claims
  --never-ready      GET /healthz always answers 503 (a release that never becomes ready)
";

/// The parsed command line.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    config: PathBuf,
    version: String,
    never_ready: bool,
}

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run(Args),
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config: Option<PathBuf> = None;
    let mut version: Option<String> = None;
    let mut never_ready = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value)),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline {
                Some(v) => Ok(v.to_string()),
                None => args.next().ok_or_else(|| format!("{name} needs a value")),
            }
        };
        match flag.as_str() {
            "--config" => {
                let v = value("--config")?;
                if v.is_empty() {
                    return Err("--config must not be empty".into());
                }
                if config.replace(PathBuf::from(v)).is_some() {
                    return Err("--config given twice".into());
                }
            }
            "--version" => {
                let v = value("--version")?;
                if v.is_empty()
                    || v.len() > 128
                    || v.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(format!(
                        "--version must be 1-128 characters without whitespace, got {v:?}"
                    ));
                }
                if version.replace(v).is_some() {
                    return Err("--version given twice".into());
                }
            }
            "--never-ready" if inline.is_none() => never_ready = true,
            "-h" | "--help" => return Ok(Command::Help),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(Command::Run(Args {
        config: config.ok_or("--config FILE is required")?,
        version: version.ok_or("--version VERSION is required")?,
        never_ready,
    }))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(args)) => args,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprint!("demo-service: {e}\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    signals::install();
    let config = match config::load(&args.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!(
                "demo-service: invalid config {}: {e}",
                args.config.display()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let app = http::App {
        version: args.version.clone(),
        never_ready: args.never_ready,
        ready_at: std::time::Instant::now() + Duration::from_millis(config.ready_after_ms),
        error_rate: config.error_rate,
        latency: Duration::from_millis(config.latency_ms),
        message: config.message.clone(),
    };
    let addr = SocketAddr::new(config.bind, config.port);
    let server = match http::Server::bind(addr, app) {
        Ok(server) => server,
        Err(e) => {
            eprintln!(
                "demo-service: cannot listen on {addr} (port {}): {e}",
                config.port
            );
            return ExitCode::from(EXIT_BIND);
        }
    };
    let bound = server.local_addr().unwrap_or(addr);
    let pid = std::process::id();
    if let Some(path) = &config.starts_file {
        let line = format!("{} {pid}\n", args.version);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "demo-service: cannot append to starts_file {}: {e}",
                path.display()
            );
            return ExitCode::from(EXIT_STARTS_FILE);
        }
    }
    let mut log = format!(
        "demo-service {} started: listening on {bound} (port {}), pid {pid}",
        args.version,
        bound.port()
    );
    if args.never_ready {
        log.push_str(", never ready (--never-ready)");
    }
    if config.error_rate > 0.0 || config.latency_ms > 0 {
        let _ = write!(
            log,
            ", error_rate {}, latency_ms {}",
            config.error_rate, config.latency_ms
        );
    }
    eprintln!("{log}");
    server.serve()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn command_line() {
        assert_eq!(
            parse(&["--config", "/c.yml", "--version", "1.0.0"]),
            Ok(Command::Run(Args {
                config: "/c.yml".into(),
                version: "1.0.0".into(),
                never_ready: false
            }))
        );
        assert_eq!(
            parse(&["--never-ready", "--version=2.0.0", "--config=c=1.yml"]),
            Ok(Command::Run(Args {
                config: "c=1.yml".into(),
                version: "2.0.0".into(),
                never_ready: true
            }))
        );
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
        for (args, needle) in [
            (&["--version", "1"][..], "--config"),
            (&["--config", "c"][..], "--version"),
            (&["--config"][..], "--config needs a value"),
            (&["--config", "c", "--version", "1 2"][..], "--version"),
            (&["--config", "c", "--version", ""][..], "--version"),
            (
                &["--config", "c", "--config", "d", "--version", "1"][..],
                "twice",
            ),
            (
                &["--config", "c", "--version", "1", "--port", "1"][..],
                "--port",
            ),
            (&["--never-ready=yes"][..], "--never-ready=yes"),
            (&["stray"][..], "stray"),
        ] {
            let e = parse(args).expect_err("should be refused");
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
