//! Property test of module ownership (SPEC M9–M16): random histories of publishes (entities
//! added and removed, a variable without default, marks for uninstallation), installations,
//! approvals, rejections, pauses, resumes, variable changes, user config edits, unlinks and
//! deletes over two modules that compete for one entity, in two environments.
//!
//! After every command (besides the harness checks: determinism, a refused command changes
//! nothing, persisted changes rebuild the state):
//! 1. every entity an installation manages exists and names that installation's module as its
//!    owner, and every owned entity is managed by the installation of its owner (one module
//!    per entity, SPEC M12);
//! 2. an installation has at most one open change request, none while paused (SPEC M15);
//! 3. an installation's version is a published version of its module;
//! 4. unlinking or deleting never removes an entity (SPEC M16).
//!
//! `PROPTEST_CASES=N` changes the number of histories; `HUB_PROP_STATS=1` prints, per
//! history, how many commands of each kind were applied and refused.

mod common;

use std::collections::BTreeMap;

use common::*;
use hub_engine::{Command, State};
use proptest::prelude::*;

const ENVS: [&str; 2] = ["e0", "e1"];
const MODULES: [&str; 2] = ["alpha", "beta"];

/// A definition of `module`: optionally the shared `monitoring` entity, its own entity, a
/// config value, and optionally a required variable or an uninstall mark on its own entity.
fn definition(module: &str, variant: u8) -> String {
    let shared = variant & 1 != 0;
    let required = variant & 2 != 0;
    let mark = variant & 4 != 0;
    let value = variant >> 3;
    let mut y = format!("name: {module}\n");
    if required {
        y.push_str("variables:\n  size:\n    type: string\n    string:\n      description: size\n");
    }
    y.push_str("entities:\n");
    y.push_str(&format!(
        "  - type: helmChart\n    helmChart:\n      productId: com.example:{module}-svc\n      k8sNamespace: ns\n      syncConfigOverrides: MERGE\n      configOverrides: |\n        \"1.0.0\":\n          overrides:\n            v: {value}\n"
    ));
    if required {
        y.push_str("            size: \"{{ moduleVariable.size }}\"\n");
    }
    if mark {
        y.push_str("      markedForUninstallation: {}\n");
    }
    if shared {
        y.push_str(
            "  - type: helmChart\n    helmChart:\n      productId: com.example:monitoring\n      k8sNamespace: ns\n",
        );
    }
    y
}

#[derive(Debug, Clone)]
enum Op {
    Publish(usize, u8),
    Install(usize, usize, bool),
    Approve(usize, usize),
    Reject(usize, usize),
    Pause(usize, usize, bool),
    SetSize(usize, usize, Option<u8>),
    Edit(usize, usize, u8),
    Unlink(usize, usize),
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2usize, any::<u8>()).prop_map(|(m, v)| Op::Publish(m, v % 32)),
        3 => (0..2usize, 0..2usize, any::<bool>()).prop_map(|(e, m, s)| Op::Install(e, m, s)),
        4 => (0..2usize, 0..2usize).prop_map(|(e, m)| Op::Approve(e, m)),
        1 => (0..2usize, 0..2usize).prop_map(|(e, m)| Op::Reject(e, m)),
        2 => (0..2usize, 0..2usize, any::<bool>()).prop_map(|(e, m, p)| Op::Pause(e, m, p)),
        1 => (0..2usize, 0..2usize, prop::option::of(0u8..3)).prop_map(|(e, m, v)| Op::SetSize(e, m, v)),
        2 => (0..2usize, 0..3usize, any::<u8>()).prop_map(|(e, i, v)| Op::Edit(e, i, v)),
        1 => (0..2usize, 0..2usize).prop_map(|(e, m)| Op::Unlink(e, m)),
        1 => (0..4usize).prop_filter_map("rare", |m| (m < 2).then_some(Op::Delete(m))),
    ]
}

fn installation(e: usize, m: usize) -> String {
    format!("{}/{}", ENVS[e], MODULES[m])
}

fn open_cr(state: &State, inst: &str) -> Option<String> {
    state
        .change_requests()
        .find(|c| c.installation == inst && c.status.is_open())
        .map(|c| c.id.clone())
}

fn command(state: &State, op: &Op) -> Option<Command> {
    Some(match op {
        Op::Publish(m, v) => Command::PublishModule {
            file_name: Some(format!("{}.yml", MODULES[*m])),
            yaml: definition(MODULES[*m], *v),
        },
        Op::Install(e, m, with_size) => Command::InstallModule {
            environment: ENVS[*e].into(),
            module: MODULES[*m].into(),
            version: None,
            variables: if *with_size {
                BTreeMap::from([("size".to_string(), "1".to_string())])
            } else {
                BTreeMap::new()
            },
            actor: "p".into(),
        },
        Op::Approve(e, m) => Command::ApproveChangeRequest {
            id: open_cr(state, &installation(*e, *m))?,
            actor: "p".into(),
        },
        Op::Reject(e, m) => Command::RejectChangeRequest {
            id: open_cr(state, &installation(*e, *m))?,
            actor: "p".into(),
            reason: "no".into(),
        },
        Op::Pause(e, m, paused) => Command::SetModuleUpdatesPaused {
            installation: installation(*e, *m),
            paused: *paused,
            actor: "p".into(),
        },
        Op::SetSize(e, m, v) => Command::SetModuleVariables {
            installation: installation(*e, *m),
            variables: BTreeMap::from([("size".to_string(), v.map(|v| v.to_string()))]),
        },
        Op::Edit(e, i, v) => {
            let name = ["alpha-svc", "beta-svc", "monitoring"][*i];
            Command::SetConfigOverrides {
                entity: helm_id(ENVS[*e], name),
                version: "1.0.0".into(),
                config: Some(format!("v: {v}\nmine: {v}\n")),
            }
        }
        Op::Unlink(e, m) => Command::UnlinkModule {
            installation: installation(*e, *m),
            actor: "p".into(),
        },
        Op::Delete(m) => Command::DeleteModule {
            name: MODULES[*m].into(),
        },
    })
}

fn check(state: &State, entities_before: usize) -> Result<(), TestCaseError> {
    for inst in state.installations() {
        for id in inst.entities.keys() {
            let e = state.entity(id);
            prop_assert!(e.is_some(), "{} manages missing {id}", inst.id);
            prop_assert_eq!(
                e.and_then(|e| e.owner_module.as_deref()),
                Some(inst.module.as_str()),
                "{} manages {} owned by another",
                inst.id,
                id
            );
        }
        let open = state
            .change_requests()
            .filter(|c| c.installation == inst.id && c.status.is_open())
            .count();
        prop_assert!(open <= 1, "{} has {open} open change requests", inst.id);
        prop_assert!(
            !(inst.paused && open > 0),
            "{} paused with an open request",
            inst.id
        );
        prop_assert!(
            state.module(&inst.module, &inst.version).is_some(),
            "{} at an unpublished version",
            inst.id
        );
    }
    for env in ENVS {
        for e in state.entities_of(env) {
            if let Some(owner) = &e.owner_module {
                let inst = state.installation(&format!("{env}/{owner}"));
                prop_assert!(
                    inst.is_some_and(|i| i.entities.contains_key(&e.id.0)),
                    "{} owned by {owner} without being managed",
                    e.id
                );
            }
        }
    }
    let entities: usize = ENVS.iter().map(|e| state.entities_of(e).count()).sum();
    prop_assert!(entities >= entities_before, "an entity disappeared");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn module_ownership_stays_consistent(ops in prop::collection::vec(op(), 1..60)) {
        let mut stats: BTreeMap<(&str, bool), usize> = BTreeMap::new();
        let mut hub = Hub::new();
        for env in ENVS {
            hub.env(env);
        }
        for op in &ops {
            let Some(command) = command(&hub.state, op) else {
                continue;
            };
            let before: usize = ENVS.iter().map(|e| hub.state.entities_of(e).count()).sum();
            let kind = command.kind();
            let ok = hub.apply(command).result.is_ok();
            if std::env::var_os("HUB_PROP_STATS").is_some() {
                *stats.entry((kind, ok)).or_insert(0usize) += 1;
            }
            check(&hub.state, before)?;
        }
        if std::env::var_os("HUB_PROP_STATS").is_some() {
            eprintln!("{stats:?}");
        }
    }
}
