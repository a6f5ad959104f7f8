//! Fuzzing `Hub.Submit`'s command parsing (SPEC S3, docs/BENCHMARKS.md "Fuzzing"): the JSON of
//! real commands, mutated (bit flips, truncation, splices, inserts) and random bytes, into
//! `parse_submitted`, which must answer within a time bound without panicking, never accept
//! a command only the leader or an agent may propose, and never echo a secret it refuses.
//!
//! `HUB_FUZZ_CASES=N` runs N cases (default 1000).

use std::time::Duration;

use hub_engine::cluster_key::{SecretKey, CANARY_REVISION_KEY};
use hub_engine::entity::SecretValue;
use hub_engine::{Command, EntityKind};
use hub_fuzz::{mutated, within};
use hub_node::api::parse_submitted;
use proptest::prelude::*;

const SECRET: &str = "s3cret-value-never-echoed";

fn seeds() -> Vec<Vec<u8>> {
    let commands = [
        Command::CreateEnvironment {
            name: "prod".into(),
            description: "production".into(),
        },
        Command::CreateEntity {
            environment: "prod".into(),
            kind: EntityKind::HelmChart,
            name: "web".into(),
            product_id: "com.example:web".into(),
            k8s_namespace: Some("web".into()),
            account_id: None,
            release_channel: Some("STABLE".into()),
        },
        Command::SetSecret {
            entity: "eid:prod:helmChart:web".into(),
            name: "db-password".into(),
            value: Some(SecretValue(SECRET.into())),
        },
        Command::SetConfigOverrides {
            entity: "eid:prod:helmChart:web".into(),
            version: "1.0.0".into(),
            config: Some("port: 8080\n".into()),
        },
        Command::Evaluate {
            entities: vec!["eid:prod:helmChart:web".into()],
            artifacts: Vec::new(),
        },
        Command::SetClusterKey {
            name: CANARY_REVISION_KEY.into(),
            key: SecretKey::from_bytes([1; 32]),
        },
    ];
    commands
        .iter()
        .map(|c| serde_json::to_vec(c).expect("commands serialize"))
        .collect()
}

fn leader_or_agent_only(c: &Command) -> bool {
    matches!(
        c,
        Command::Evaluate { .. }
            | Command::ExpireSuppressions
            | Command::CanaryTick { .. }
            | Command::SetClusterKey { .. }
            | Command::ReportEntityStates { .. }
            | Command::ReportTask { .. }
            | Command::ReportTasks { .. }
            | Command::ReportCanaries { .. }
    )
}

#[test]
fn seeds_parse_or_are_refused_as_documented() {
    for seed in seeds() {
        let json = String::from_utf8(seed).unwrap();
        match parse_submitted(&json) {
            Ok(c) => assert!(!leader_or_agent_only(&c), "{json}"),
            Err(s) => assert_eq!(s.code(), tonic::Code::PermissionDenied, "{json}: {s:?}"),
        }
    }
}

proptest! {
    #![proptest_config(hub_fuzz::config(1000))]

    #[test]
    fn submitted_json(bytes in mutated(seeds())) {
        let json = String::from_utf8_lossy(&bytes).into_owned();
        let parsed = within(Duration::from_secs(2), "parse_submitted", || parse_submitted(&json));
        match parsed {
            Ok(c) => prop_assert!(!leader_or_agent_only(&c), "accepted {}", c.kind()),
            Err(status) => {
                if json.contains("\"SetSecret\"") {
                    prop_assert!(!status.message().contains(SECRET), "{}", status.message());
                }
            }
        }
    }
}
