//! `--watch` on `cluster status`, `entity explain`, `plan list` and `canary get`, kubectl
//! style: the same command runs again every two seconds (this program, without `--watch`),
//! and its answer is redrawn in place on a terminal, under the time it was read; in a pipe,
//! the answer is printed again whenever it changes. Ctrl-C ends it. A failing run shows its
//! error and keeps watching, unless the hub refused the caller's credentials (a revoked
//! certificate, a revoked token): no later run would be let in, so the watch ends with
//! [`super::EXIT_CREDENTIALS_REFUSED`].

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::Context;

/// The watch ended: the hub refused the caller's credentials.
#[derive(Debug, thiserror::Error)]
#[error("the hub refused this caller's credentials: --watch ends")]
pub(crate) struct CredentialsRefused;

/// Time between two runs.
const INTERVAL: Duration = Duration::from_secs(2);

/// Watches the command line this process was started with, until interrupted.
pub(crate) async fn run() -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("find the hubctl binary")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--watch")
        .collect();
    let terminal = std::io::stdout().is_terminal();
    let mut last: Option<Vec<u8>> = None;
    loop {
        let out = tokio::process::Command::new(&exe)
            .args(&args)
            .output()
            .await
            .context("run hubctl")?;
        let mut shown = out.stdout.clone();
        shown.extend_from_slice(&out.stderr);
        if terminal || last.as_ref() != Some(&shown) {
            let mut stdout = std::io::stdout().lock();
            if terminal {
                // Home and clear, then the answer and when it was read.
                write!(stdout, "\x1b[H\x1b[2J")?;
                writeln!(
                    stdout,
                    "Every {}s: hubctl {}    {}\n",
                    INTERVAL.as_secs(),
                    args.iter()
                        .map(|a| a.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" "),
                    hub_engine::evaluate::format_time(crate::timeparse::now_ms())
                )?;
            } else if last.is_some() {
                writeln!(stdout)?;
            }
            stdout.write_all(&shown)?;
            stdout.flush()?;
            last = Some(shown);
        }
        if out.status.code() == Some(super::EXIT_CREDENTIALS_REFUSED) {
            return Err(CredentialsRefused.into());
        }
        tokio::select! {
            _ = tokio::time::sleep(INTERVAL) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
