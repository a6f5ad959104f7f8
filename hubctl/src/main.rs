//! `hubctl`: operator CLI for the hub.

#[tokio::main]
async fn main() {
    let cli = hubctl::Cli::parse_with_global_options_once();
    if let Err(e) = hubctl::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(hubctl::exit_code(&e));
    }
}
