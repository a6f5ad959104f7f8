//! Scripting the hub from Rust: why is (or isn't) an entity being deployed?
//!
//! ```sh
//! cargo run -p hub-client --example explain -- 127.0.0.1:7401,127.0.0.1:7402 prod/web \
//!     CA.pem OPERATOR.pem OPERATOR-key.pem
//! ```
//!
//! The endpoints are tried in order (a node that is down, stopping or cut off is skipped);
//! the certificate is an operator's, as `hubctl` uses it (`hubctl pki issue-operator`). With
//! only the endpoints and the entity, it talks plaintext to a `--insecure` development hub
//! (`hubctl dev up --insecure`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hub_client::answer::{Explain, ListPlans, MeetsConstraints};
use hub_client::{FailoverClient, Freshness};
use hub_tls::client::{ClientMode, ClientTls, Connector};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoints, entity, tls @ ..] = args.as_slice() else {
        return Err("usage: explain ENDPOINTS ENTITY [CA CERT KEY]".into());
    };
    let mode = match tls {
        [] => ClientMode::Plaintext,
        [ca, cert, key] => {
            let files = hub_tls::TlsFiles {
                ca: ca.into(),
                cert: cert.into(),
                key: key.into(),
            };
            ClientMode::Tls(Arc::new(ClientTls::load(files, None, SystemTime::now())?))
        }
        _ => return Err("give the CA, the certificate and its key, or none of them".into()),
    };
    let timeout = Duration::from_secs(10);
    let client = FailoverClient::new(
        endpoints.split(',').map(str::to_string).collect(),
        timeout,
        Connector::new(mode, timeout),
    );

    // A linearizable read (served by the leader's state); `stale: true` answers from the
    // asked node.
    let why = client
        .ask(&Explain(entity.clone()), Freshness::default())
        .await?;
    println!("{}: {}", why.entity, why.summary);
    match why.meets_constraints {
        MeetsConstraints::No => {
            for c in why.constraints.iter().filter(|c| !c.passed) {
                println!("  held by {}: {}", c.constraint, c.reason);
            }
        }
        MeetsConstraints::Yes | MeetsConstraints::Issued | MeetsConstraints::Undecided => {}
    }
    let plans = client
        .ask(
            &ListPlans {
                entity: Some(entity.clone()),
                limit: Some(5),
                ..ListPlans::default()
            },
            Freshness::default(),
        )
        .await?;
    for p in plans.plans {
        println!(
            "  {} {} {} -> {}",
            p.id,
            p.status,
            p.from_version.as_deref().unwrap_or("-"),
            p.to_version.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}
