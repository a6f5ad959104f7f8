//! Benchmark of the orchestration engine (docs/BENCHMARKS.md): a full evaluation of 1k, 10k
//! and 100k entities, and the cost of one change (which re-evaluates only its neighbours).
//!
//! Run: `cargo run --release -p hub-engine --example evaluate_bench [-- 1000 10000 100000]`.
//!
//! Each environment holds groups of three entities (web -> api -> db, all in the group's own
//! dependency group), installed at 1.0.0 with 1.1.0 published, so every entity has a
//! candidate upgrade with dependency, dependents, window, suppression, health and artifact
//! checks to run.

use std::time::Instant;

use hub_engine::artifact::{ArtifactLocation, Availability};
use hub_engine::command::{
    EntityReport, EntitySettingsPatch, EnvironmentSettingsPatch, WindowSpec,
};
use hub_engine::entity::Health;
use hub_engine::evaluate::evaluate;
use hub_engine::{Command, EntityKind, Request, State, Trigger};
use semver::Version;

const T0: i64 = 1_795_996_800_000;
const ENTITIES_PER_ENV: usize = 10_000;

struct Builder {
    state: State,
    index: u64,
}

impl Builder {
    fn apply(&mut self, command: Command) {
        self.index += 1;
        let req = Request {
            command,
            time_ms: T0 + self.index as i64,
            request_id: None,
        };
        let applied = self.state.apply(&req, self.index);
        if let Err(e) = applied.result {
            panic!("setup command failed: {e}");
        }
    }
}

fn manifest(name: &str, version: &str, dep: Option<&str>) -> String {
    let mut m = format!(
        "product-group: com.bench\nproduct-name: {name}\nproduct-version: {version}\nartifacts:\n  - uri: {name}/{name}-{version}.tgz\n    sha256: {}\n",
        "a".repeat(64)
    );
    if let Some(d) = dep {
        m.push_str(&format!(
            "extensions:\n  product-dependencies:\n    - {{product-group: com.bench, product-name: {d}, minimum-version: 1.0.0, maximum-version: 1.x.x}}\n"
        ));
    }
    m
}

fn build(entities: usize) -> (State, Vec<String>) {
    let mut b = Builder {
        state: State::new(),
        index: 0,
    };
    for (name, dep) in [("db", None), ("api", Some("db")), ("web", Some("api"))] {
        b.apply(Command::CreateProduct {
            product_id: format!("com.bench:{name}"),
            description: String::new(),
        });
        for v in ["1.0.0", "1.1.0"] {
            b.apply(Command::PublishRelease {
                manifest: manifest(name, v, dep),
            });
        }
    }
    let envs = entities.div_ceil(ENTITIES_PER_ENV);
    let mut ids = Vec::with_capacity(entities);
    for e in 0..envs {
        let env = format!("env{e}");
        b.apply(Command::CreateEnvironment {
            name: env.clone(),
            description: String::new(),
        });
        b.apply(Command::SetEnvironmentSettings {
            environment: env.clone(),
            patch: EnvironmentSettingsPatch {
                maintenance_window: Some(hub_engine::command::WindowChange::Set(WindowSpec {
                    spec: "all-time".into(),
                    time_zone: "UTC".into(),
                })),
                ..Default::default()
            },
        });
        b.apply(Command::SetRegistry {
            environment: env.clone(),
            name: "reg".into(),
            url: "http://registry.example/artifacts".into(),
            hub_access: "expected".into(),
            ca_pem: None,
            insecure_skip_verify: false,
        });
        let mut reports = Vec::new();
        let here = ENTITIES_PER_ENV.min(entities - e * ENTITIES_PER_ENV);
        for i in 0..here {
            let product = ["db", "api", "web"][i % 3];
            let name = format!("{product}{i}");
            b.apply(Command::CreateEntity {
                environment: env.clone(),
                kind: EntityKind::HelmChart,
                name: name.clone(),
                product_id: format!("com.bench:{product}"),
                k8s_namespace: Some("bench".into()),
                account_id: None,
                release_channel: None,
            });
            let id = format!("eid:{env}:helmChart:{name}");
            b.apply(Command::SetEntitySettings {
                entity: id.clone(),
                patch: EntitySettingsPatch {
                    dependency_groups: Some(vec![format!("g{}", i / 3)]),
                    ..Default::default()
                },
            });
            reports.push(EntityReport {
                entity: id.clone(),
                version: Some(Version::new(1, 0, 0)),
                health: Health::Healthy,
                config_sha256: Some(hub_engine::entity::config_sha256("")),
                secrets_revision: Some(0),
                message: String::new(),
            });
            ids.push(id);
        }
        for chunk in reports.chunks(5_000) {
            b.apply(Command::ReportEntityStates {
                environment: env.clone(),
                states: chunk.to_vec(),
            });
        }
    }
    (b.state, ids)
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    let available = |_: &ArtifactLocation| Some(Availability::Available);
    let now = T0 + 3_600_000;
    println!("| entities | full evaluation | per entity | issue decisions | one change: entities re-evaluated | one change: time |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        let (state, ids) = build(n);
        // Warm-up pass, then the measured one (best of 3).
        let mut best = f64::MAX;
        let mut issues = 0;
        for _ in 0..3 {
            let started = Instant::now();
            issues = 0;
            for id in &ids {
                let e = evaluate(&state, id, now, &available).expect("entity exists");
                if matches!(e.outcome, hub_engine::evaluate::Outcome::Issue) {
                    issues += 1;
                }
            }
            best = best.min(started.elapsed().as_secs_f64());
        }
        // One change: db0 of env0 reports a new state; the leader re-evaluates what the
        // trigger names (the entity and its direct neighbours).
        let started = Instant::now();
        let affected = state.affected_entities(&Trigger::Entity(ids[0].clone()));
        for id in &affected {
            let _ = evaluate(&state, id, now, &available);
        }
        let one = started.elapsed().as_secs_f64();
        println!(
            "| {n} | {:.1} ms | {:.2} µs | {issues} | {} | {:.1} µs |",
            best * 1e3,
            best * 1e6 / n as f64,
            affected.len(),
            one * 1e6
        );
    }
}
