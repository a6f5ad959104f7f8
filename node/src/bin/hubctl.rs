//! `hubctl`: operator CLI for the hub.

#[tokio::main]
async fn main() {
    let cli = hub_node::cli::Cli::parse_with_global_options_once();
    if let Err(e) = hub_node::cli::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(hub_node::cli::exit_code(&e));
    }
}
