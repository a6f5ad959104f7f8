//! `hubctl`: operator CLI for the hub.

#[tokio::main]
async fn main() {
    // Rust ignores SIGPIPE, so a write to a closed pipe (`hubctl … | head`) makes `println!`
    // panic (exit 101). Like every Unix tool, end quietly instead: the signal's default.
    // SAFETY: called first in main, before any thread or handler exists; SIG_DFL is a valid
    // disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = hubctl::Cli::parse_with_global_options_once();
    if let Err(e) = hubctl::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(hubctl::exit_code(&e));
    }
}
