//! `hubctl`: operator CLI for the hub.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = hub_node::cli::Cli::parse();
    if let Err(e) = hub_node::cli::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
