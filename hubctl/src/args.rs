//! Arguments and values the commands share: `--stale`, `--actor`, value parsers, and reading
//! a file the operator named. A helper module: it uses none of the command modules.

use anyhow::Context;
use clap::Args;
use hub_proto::ReadOptions;
use semver::Version;

/// `--stale`: how a read is served.
#[derive(Args, Debug, Clone, Copy)]
pub(crate) struct ReadArgs {
    /// Read the contacted node's local state (may be behind) instead of a linearizable read.
    #[arg(long)]
    pub(crate) stale: bool,
}

impl ReadArgs {
    /// The read options of a typed `Hub` call.
    pub(crate) fn options(self) -> Option<ReadOptions> {
        Some(ReadOptions { stale: self.stale })
    }
}

/// `--watch`: show the answer again every two seconds, in place on a terminal.
#[derive(Args, Debug, Clone, Copy)]
pub(crate) struct WatchArgs {
    /// Keep watching: redraw every 2 s in place on a terminal (Ctrl-C ends); in a pipe, print
    /// the answer again whenever it changes.
    #[arg(long)]
    pub(crate) watch: bool,
}

/// A linearizable read (what writes resolve their references with).
pub(crate) const FRESH: ReadArgs = ReadArgs { stale: false };

/// Parses a semantic version for a flag or argument (clap names it in the error).
pub(crate) fn parse_version(s: &str) -> Result<Version, String> {
    Version::parse(s.trim()).map_err(|e| format!("{s:?} is not a semantic version: {e}"))
}

/// Parses `true` or `false`.
pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => Ok(true),
        "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{s:?} is not true or false")),
    }
}

/// Who is acting on a hub run with `--insecure`: `--actor`, else `$USER`, else `hubctl`.
/// Over TLS the hub records the certificate's identity instead, whatever this says.
#[derive(Args, Debug, Clone)]
pub struct ActorArg {
    /// Recorded as the actor only by a hub run with --insecure; over TLS the actor is your
    /// certificate's identity (default: $USER, else "hubctl").
    #[arg(long)]
    actor: Option<String>,
}

impl ActorArg {
    /// The actor's name.
    pub fn name(&self) -> String {
        self.actor
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|a| !a.trim().is_empty())
            .unwrap_or_else(|| "hubctl".to_string())
    }
}

/// Reads a file the operator named; the error names the file and what it was for.
pub(crate) fn read_file(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} file {}", path.display()))
}
