//! Module publishing, installations and change requests through `State::apply` (SPEC M8–M16),
//! with the seed's examples (`fixtures/modules/valid/`). Every apply runs the harness checks:
//! determinism, refused commands change nothing, persisted changes rebuild the state.

mod common;

use std::collections::BTreeMap;

use common::*;
use hub_engine::entity::Health;
use hub_engine::installation::ChangeRequestStatus;
use hub_engine::{Command, CommandError, CommandOutput};

const ACTOR: &str = "alice";

/// A user-created helm entity in namespace `ns`.
fn create_helm(hub: &mut Hub, env: &str, name: &str, product: &str, ns: &str) -> String {
    match hub.ok(Command::CreateEntity {
        environment: env.into(),
        kind: hub_engine::EntityKind::HelmChart,
        name: name.into(),
        product_id: product.into(),
        k8s_namespace: Some(ns.into()),
        account_id: None,
        release_channel: None,
    }) {
        CommandOutput::EntityCreated(id) => id,
        other => panic!("unexpected {other:?}"),
    }
}

fn fixture(file: &str) -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/modules/valid")
    .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn publish(hub: &mut Hub, file: &str, yaml: &str) -> CommandOutput {
    hub.ok(Command::PublishModule {
        file_name: Some(file.to_string()),
        yaml: yaml.to_string(),
    })
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn install(hub: &mut Hub, env: &str, module: &str, pairs: &[(&str, &str)]) -> CommandOutput {
    hub.ok(Command::InstallModule {
        environment: env.into(),
        module: module.into(),
        version: None,
        variables: vars(pairs),
        actor: ACTOR.into(),
    })
}

fn config(hub: &Hub, entity: &str, version: &str) -> serde_json::Value {
    let e = hub.state.entity(entity).expect("entity");
    let text = e.config_overrides.get(&v(version)).expect("config version");
    serde_yaml_ng::from_str(text).expect("yaml")
}

/// The open change request of an installation.
fn open_cr(hub: &Hub, installation: &str) -> String {
    let open: Vec<_> = hub
        .state
        .change_requests()
        .filter(|c| c.installation == installation && c.status.is_open())
        .collect();
    assert_eq!(open.len(), 1, "{open:?}");
    open[0].id.clone()
}

fn approve(hub: &mut Hub, id: &str) -> CommandOutput {
    hub.ok(Command::ApproveChangeRequest {
        id: id.into(),
        actor: ACTOR.into(),
    })
}

/// The control-plane module with one preset mapping changed.
fn control_plane(small_backend_memory: &str) -> String {
    fixture("control-plane-module.yml").replace(
        "        small: 1Gi\n        medium: 2Gi\n        large: 4Gi",
        &format!("        small: {small_backend_memory}\n        medium: 2Gi\n        large: 4Gi"),
    )
}

#[test]
fn publishing_numbers_versions_and_refuses_bad_definitions() {
    // SPEC M8: 0.1.0 first, each publish bumps the minor version; versions are immutable and
    // downloadable as published.
    let mut hub = Hub::new();
    let yaml = fixture("control-plane-module.yml");
    let out = publish(&mut hub, "control-plane-module.yml", &yaml);
    assert!(
        format!("{out:?}").contains("control-plane-module@0.1.0"),
        "{out:?}"
    );
    publish(
        &mut hub,
        "control-plane-module.yml",
        &control_plane("1.5Gi"),
    );
    let versions: Vec<String> = hub
        .state
        .module_versions("control-plane-module")
        .map(|m| m.version.to_string())
        .collect();
    assert_eq!(versions, ["0.1.0", "0.2.0"]);
    assert_eq!(
        hub.state
            .module("control-plane-module", &v("0.1.0"))
            .unwrap()
            .yaml,
        yaml
    );
    // Bad input names the file, the path and the line, and creates no version.
    let bad = yaml.replace("      k8sNamespace: app-namespace\n", "");
    let err = hub.err(Command::PublishModule {
        file_name: Some("control-plane-module.yml".into()),
        yaml: bad,
    });
    let msg = err.to_string();
    assert!(msg.contains("control-plane-module.yml"), "{msg}");
    assert!(msg.contains("entities[2].helmChart.k8sNamespace"), "{msg}");
    assert!(msg.contains("line "), "{msg}");
    let err = hub.err(Command::PublishModule {
        file_name: Some("other.yml".into()),
        yaml: yaml.clone(),
    });
    assert!(err.to_string().contains("other.yml"), "{err}");
    assert_eq!(hub.state.module_versions("control-plane-module").count(), 2);
    // A dry run computes the version without publishing.
    let (def, version) = hub
        .state
        .prepare_module_publish(Some("control-plane-module.yml"), &yaml)
        .unwrap();
    assert_eq!(
        (def.name.as_str(), version),
        ("control-plane-module", v("0.3.0"))
    );
}

#[test]
fn installing_creates_entities_with_rendered_config_and_plans_follow() {
    // SPEC M9, M4, M11: the control-plane module's entities are created with the preset
    // values; the retired application (marked for uninstallation) is not created; plans are
    // then issued for the new entities like for any other.
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:backend-service");
    hub.publish("com.example:backend-service", "2.0.0", &[]);
    publish(
        &mut hub,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml"),
    );
    install(
        &mut hub,
        "prod",
        "control-plane-module",
        &[("resourceProfile", "large")],
    );
    let backend = helm_id("prod", "backend-service");
    let e = hub.state.entity(&backend).expect("backend entity");
    assert_eq!(e.owner_module.as_deref(), Some("control-plane-module"));
    assert_eq!(e.k8s_namespace.as_deref(), Some("default"));
    let c = config(&hub, &backend, "2.0.0");
    assert_eq!(c["resources"]["requests"]["cpu"], "2000m", "{c}");
    assert_eq!(c["resources"]["limits"]["memory"], "4Gi", "{c}");
    assert_eq!(c["num-threads"], 100, "{c}");
    assert!(hub
        .state
        .entity(&helm_id("prod", "database-service"))
        .is_some());
    assert!(hub
        .state
        .entity(&helm_id("app-namespace", "retired-application"))
        .is_none());
    assert!(hub
        .state
        .entity(&helm_id("prod", "retired-application"))
        .is_none());
    let inst = hub.state.installation("prod/control-plane-module").unwrap();
    assert_eq!(inst.entities.len(), 2);
    let issued = hub.step();
    let plan = hub.active(&backend).expect("install plan");
    assert!(issued.contains(&plan.id));
    assert_eq!(plan.to_version, Some(v("2.0.0")));
    assert!(plan.to_config.unwrap().contains("2000m"));
    // Installing twice, a missing environment or an unknown module: refused.
    let err = hub.err(Command::InstallModule {
        environment: "prod".into(),
        module: "control-plane-module".into(),
        version: None,
        variables: BTreeMap::new(),
        actor: ACTOR.into(),
    });
    assert!(matches!(err, CommandError::AlreadyExists { .. }), "{err}");
    let err = hub.err(Command::InstallModule {
        environment: "nope".into(),
        module: "control-plane-module".into(),
        version: None,
        variables: BTreeMap::new(),
        actor: ACTOR.into(),
    });
    assert!(err.to_string().contains("environment"), "{err}");
    // A constraint-violating value is refused naming the variable.
    hub.env("staging");
    let err = hub.err(Command::InstallModule {
        environment: "staging".into(),
        module: "control-plane-module".into(),
        version: None,
        variables: vars(&[("resourceProfile", "huge")]),
        actor: ACTOR.into(),
    });
    assert!(err.to_string().contains("resourceProfile"), "{err}");
    assert!(hub
        .state
        .installation("staging/control-plane-module")
        .is_none());
}

#[test]
fn a_changed_preset_mapping_reaches_an_installation_through_an_approved_change_request() {
    // SPEC M2, M9: small's memory 1Gi → 1.5Gi in a new version; the installation that chose
    // small gets a change request, and the new value once it is approved.
    let mut hub = Hub::new();
    hub.env("prod");
    publish(&mut hub, "control-plane-module.yml", &control_plane("1Gi"));
    install(
        &mut hub,
        "prod",
        "control-plane-module",
        &[("resourceProfile", "small")],
    );
    let backend = helm_id("prod", "backend-service");
    assert_eq!(
        config(&hub, &backend, "2.0.0")["resources"]["limits"]["memory"],
        "1Gi"
    );
    publish(
        &mut hub,
        "control-plane-module.yml",
        &control_plane("1.5Gi"),
    );
    let cr = open_cr(&hub, "prod/control-plane-module");
    let c = hub.state.change_request(&cr).unwrap();
    assert_eq!(
        (c.from_version.clone(), c.to_version.clone()),
        (v("0.1.0"), v("0.2.0"))
    );
    // Not applied before approval.
    assert_eq!(
        config(&hub, &backend, "2.0.0")["resources"]["limits"]["memory"],
        "1Gi"
    );
    approve(&mut hub, &cr);
    assert_eq!(
        config(&hub, &backend, "2.0.0")["resources"]["limits"]["memory"],
        "1.5Gi"
    );
    let inst = hub.state.installation("prod/control-plane-module").unwrap();
    assert_eq!(inst.version, v("0.2.0"));
    assert_eq!(
        hub.state.change_request(&cr).unwrap().status,
        ChangeRequestStatus::Merged
    );
    // A merged request cannot be approved or rejected again.
    let err = hub.err(Command::RejectChangeRequest {
        id: cr.clone(),
        actor: ACTOR.into(),
        reason: "late".into(),
    });
    assert!(err.to_string().contains("merged"), "{err}");
    // A newer version supersedes an open request.
    publish(
        &mut hub,
        "control-plane-module.yml",
        &control_plane("1.25Gi"),
    );
    let first = open_cr(&hub, "prod/control-plane-module");
    publish(
        &mut hub,
        "control-plane-module.yml",
        &control_plane("1.75Gi"),
    );
    let second = open_cr(&hub, "prod/control-plane-module");
    assert_ne!(first, second);
    assert_eq!(
        hub.state.change_request(&first).unwrap().status,
        ChangeRequestStatus::Cancelled
    );
    hub.ok(Command::RejectChangeRequest {
        id: second.clone(),
        actor: ACTOR.into(),
        reason: "not now".into(),
    });
    assert_eq!(
        config(&hub, &backend, "2.0.0")["resources"]["limits"]["memory"],
        "1.5Gi"
    );
}

#[test]
fn a_new_variable_without_a_default_blocks_the_update_until_it_has_a_value() {
    // SPEC M9.
    let mut hub = Hub::new();
    hub.env("prod");
    let v1 = fixture("control-plane-module.yml");
    publish(&mut hub, "control-plane-module.yml", &v1);
    install(&mut hub, "prod", "control-plane-module", &[]);
    let v2 = v1
        .replace(
            "variables:\n  myNamespace:",
            "variables:\n  threads:\n    type: string\n    string:\n      description: threads\n  myNamespace:",
        )
        .replace("num-threads: 100", "num-threads: \"{{ moduleVariable.threads }}\"");
    publish(&mut hub, "control-plane-module.yml", &v2);
    let cr = open_cr(&hub, "prod/control-plane-module");
    let blocked = hub.state.change_request(&cr).unwrap().blocked.clone();
    assert!(
        blocked.as_deref().unwrap_or("").contains("threads"),
        "{blocked:?}"
    );
    let err = hub.err(Command::ApproveChangeRequest {
        id: cr.clone(),
        actor: ACTOR.into(),
    });
    assert!(err.to_string().contains("threads"), "{err}");
    hub.ok(Command::SetModuleVariables {
        installation: "prod/control-plane-module".into(),
        variables: BTreeMap::from([("threads".to_string(), Some("64".to_string()))]),
    });
    assert_eq!(hub.state.change_request(&cr).unwrap().blocked, None);
    approve(&mut hub, &cr);
    assert_eq!(
        config(&hub, &helm_id("prod", "backend-service"), "2.0.0")["num-threads"],
        "64"
    );
}

/// An environment with a user-created `sync-example` entity holding the seed's existing
/// config (`conf: key1 a, key2 b, key3 c` under 3.0.0), and the seed's module in `mode`.
fn sync_example(mode: &str) -> (Hub, String) {
    let mut hub = Hub::new();
    hub.env("prod");
    let id = create_helm(
        &mut hub,
        "prod",
        "sync-example",
        "com.example:sync-example",
        "default",
    );
    hub.ok(Command::SetConfigOverrides {
        entity: id.clone(),
        version: "3.0.0".into(),
        config: Some("conf:\n  key1: a\n  key2: b\n  key3: c\n".into()),
    });
    let yaml = fixture("sync-example-module.yml").replace("MERGE", mode);
    publish(&mut hub, "sync-example-module.yml", &yaml);
    let out = install(&mut hub, "prod", "sync-example-module", &[]);
    assert!(
        format!("{out:?}").contains("1 adopted"),
        "SPEC M10: {out:?}"
    );
    (hub, id)
}

#[test]
fn the_worked_sync_example_in_all_three_modes() {
    // SPEC M13, M10: adopting the existing entity, then key1 dropped from the module.
    for (mode, adopted, after_drop) in [
        (
            "MERGE",
            "{key1: x, key2: b, key4: d}",
            "{key1: x, key2: b, key4: d}",
        ),
        ("ENABLED", "{key1: x, key4: d}", "{key4: d}"),
        (
            "DISABLED",
            "{key1: a, key2: b, key3: c}",
            "{key1: a, key2: b, key3: c}",
        ),
    ] {
        let (mut hub, id) = sync_example(mode);
        let expect = |s: &str| -> serde_json::Value { serde_yaml_ng::from_str(s).unwrap() };
        assert_eq!(
            config(&hub, &id, "3.0.0")["conf"],
            expect(adopted),
            "{mode}"
        );
        let dropped = fixture("sync-example-module.yml")
            .replace("MERGE", mode)
            .replace("              key1: x\n", "");
        publish(&mut hub, "sync-example-module.yml", &dropped);
        let cr = open_cr(&hub, "prod/sync-example-module");
        approve(&mut hub, &cr);
        assert_eq!(
            config(&hub, &id, "3.0.0")["conf"],
            expect(after_drop),
            "{mode}"
        );
        assert_eq!(
            hub.state.entity(&id).unwrap().owner_module.as_deref(),
            Some("sync-example-module")
        );
    }
}

#[test]
fn under_merge_users_cannot_override_module_keys_unless_updates_are_paused() {
    // SPEC M13, M15.
    let (mut hub, id) = sync_example("MERGE");
    let set = |config: &str| Command::SetConfigOverrides {
        entity: id.clone(),
        version: "3.0.0".into(),
        config: Some(config.into()),
    };
    let err = hub.err(set("conf:\n  key1: mine\n  key2: b\n  key4: d\n"));
    let msg = err.to_string();
    assert!(
        msg.contains("conf.key1") && msg.contains("sync-example-module"),
        "{msg}"
    );
    // Setting a key the module unsets is refused too; a free key is fine.
    let err = hub.err(set(
        "conf:\n  key1: x\n  key2: b\n  key3: back\n  key4: d\n",
    ));
    assert!(err.to_string().contains("conf.key3"), "{err}");
    hub.ok(set("conf:\n  key1: x\n  key2: changed\n  key4: d\n"));
    // Paused: module keys unlock; open change requests are cancelled.
    publish(
        &mut hub,
        "sync-example-module.yml",
        &fixture("sync-example-module.yml").replace("key4: d", "key4: e"),
    );
    let cr = open_cr(&hub, "prod/sync-example-module");
    hub.ok(Command::SetModuleUpdatesPaused {
        installation: "prod/sync-example-module".into(),
        paused: true,
        actor: ACTOR.into(),
    });
    assert_eq!(
        hub.state.change_request(&cr).unwrap().status,
        ChangeRequestStatus::Cancelled
    );
    hub.ok(set(
        "conf:\n  key1: emergency\n  key2: changed\n  key4: d\n",
    ));
    // No change request while paused.
    publish(
        &mut hub,
        "sync-example-module.yml",
        &fixture("sync-example-module.yml").replace("key4: d", "key4: f"),
    );
    assert!(hub
        .state
        .change_requests()
        .all(|c| !(c.installation == "prod/sync-example-module" && c.status.is_open())));
    // Resume: one change request to the latest version, "resuming" until merged, which
    // reconciles the drift.
    hub.ok(Command::SetModuleUpdatesPaused {
        installation: "prod/sync-example-module".into(),
        paused: false,
        actor: ACTOR.into(),
    });
    assert!(
        hub.state
            .installation("prod/sync-example-module")
            .unwrap()
            .resuming
    );
    let cr = open_cr(&hub, "prod/sync-example-module");
    assert_eq!(
        hub.state.change_request(&cr).unwrap().reason,
        "resuming updates"
    );
    approve(&mut hub, &cr);
    let inst = hub.state.installation("prod/sync-example-module").unwrap();
    assert!(!inst.resuming);
    let c = config(&hub, &id, "3.0.0");
    assert_eq!(c["conf"]["key1"], "x", "{c}");
    assert_eq!(c["conf"]["key4"], "f", "{c}");
    assert_eq!(c["conf"]["key2"], "changed", "{c}");
}

#[test]
fn an_existing_entity_is_never_moved_to_another_namespace() {
    // SPEC M4: a variable-driven namespace that changes is refused on update.
    let mut hub = Hub::new();
    hub.env("prod");
    publish(
        &mut hub,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml"),
    );
    install(
        &mut hub,
        "prod",
        "control-plane-module",
        &[("myNamespace", "default")],
    );
    let before = hub.state.digest();
    hub.ok(Command::SetModuleVariables {
        installation: "prod/control-plane-module".into(),
        variables: BTreeMap::from([("myNamespace".to_string(), Some("namespace1".to_string()))]),
    });
    assert_ne!(before, hub.state.digest());
    publish(
        &mut hub,
        "control-plane-module.yml",
        &control_plane("1.5Gi"),
    );
    let cr = open_cr(&hub, "prod/control-plane-module");
    let err = hub.err(Command::ApproveChangeRequest {
        id: cr.clone(),
        actor: ACTOR.into(),
    });
    let msg = err.to_string();
    assert!(
        msg.contains("namespace") && msg.contains("never moved"),
        "{msg}"
    );
    assert!(hub.state.change_request(&cr).unwrap().status.is_open());
}

#[test]
fn uninstall_marks_wait_for_the_minimum_version() {
    // SPEC M11: `markedForUninstallation` uninstalls an installed entity on update, once it
    // runs at least `minVersion`; removing an entity from the definition only unmanages it.
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:retired-application");
    hub.publish("com.example:retired-application", "0.9.0", &[]);
    let retired = create_helm(
        &mut hub,
        "prod",
        "retired-application",
        "com.example:retired-application",
        "app-namespace",
    );
    hub.installed(&retired, "0.9.0");
    publish(
        &mut hub,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml"),
    );
    install(&mut hub, "prod", "control-plane-module", &[]);
    let e = hub.state.entity(&retired).unwrap();
    assert!(e.marked_for_uninstall);
    assert_eq!(e.uninstall_min_version, Some(v("1.0.0")));
    // Below the minimum and no newer release: nothing to do yet.
    hub.step();
    assert!(hub.active(&retired).is_none(), "{:?}", hub.eval(&retired));
    // A release at the minimum: upgraded first, then uninstalled.
    hub.publish("com.example:retired-application", "1.0.0", &[]);
    let upgrade = hub.converge(&retired);
    assert_eq!(upgrade.to_version, Some(v("1.0.0")));
    let uninstall = hub.converge(&retired);
    assert_eq!(uninstall.kind.label(), "uninstall");
    assert_eq!(hub.state.entity(&retired).unwrap().reported.version, None);
    // Dropping the backend from the definition unmanages it; it stays installed.
    let backend = helm_id("prod", "backend-service");
    let without_backend = {
        let y = fixture("control-plane-module.yml");
        let start = y
            .find(
                "  - type: helmChart\n    helmChart:\n      productId: com.example:backend-service",
            )
            .unwrap();
        let end = y.find("  - type: helmChart\n    helmChart:\n      productId: com.example:database-service").unwrap();
        format!("{}{}", &y[..start], &y[end..])
    };
    publish(&mut hub, "control-plane-module.yml", &without_backend);
    let cr = open_cr(&hub, "prod/control-plane-module");
    approve(&mut hub, &cr);
    let e = hub.state.entity(&backend).expect("still there");
    assert_eq!(e.owner_module, None);
    assert!(!e.marked_for_uninstall);
}

#[test]
fn moving_an_entity_between_modules_issues_no_plan_when_nothing_changes() {
    // SPEC M12: one module at a time; the four-step move.
    let module = |name: &str| {
        format!(
            "name: {name}\nentities:\n  - type: helmChart\n    helmChart:\n      productId: com.example:monitoring\n      k8sNamespace: observability\n      configOverrides: |\n        \"1.0.0\":\n          overrides:\n            retention: 30d\n"
        )
    };
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:monitoring");
    hub.publish("com.example:monitoring", "1.0.0", &[]);
    publish(&mut hub, "core-services.yml", &module("core-services"));
    install(&mut hub, "prod", "core-services", &[]);
    let id = helm_id("prod", "monitoring");
    let plan = hub.converge(&id);
    assert_eq!(plan.to_version, Some(v("1.0.0")));
    // The new module cannot take it while the old one manages it.
    publish(&mut hub, "observability.yml", &module("observability"));
    let err = hub.err(Command::InstallModule {
        environment: "prod".into(),
        module: "observability".into(),
        version: None,
        variables: BTreeMap::new(),
        actor: ACTOR.into(),
    });
    assert!(
        err.to_string().contains("managed by module core-services"),
        "{err}"
    );
    // 1. Remove it from the old definition (no uninstall mark).
    publish(&mut hub, "core-services.yml", "name: core-services\n");
    // 3. Update the old installation first: management ends, nothing is uninstalled.
    let cr = open_cr(&hub, "prod/core-services");
    approve(&mut hub, &cr);
    assert_eq!(hub.state.entity(&id).unwrap().owner_module, None);
    // 4. Then the new one (here: installed) adopts it with the same config.
    let out = install(&mut hub, "prod", "observability", &[]);
    assert!(format!("{out:?}").contains("1 adopted"), "{out:?}");
    assert_eq!(
        hub.state.entity(&id).unwrap().owner_module.as_deref(),
        Some("observability")
    );
    assert!(hub.step().is_empty(), "no plan: {:?}", hub.eval(&id));
    assert!(hub.active(&id).is_none());
}

#[test]
fn restrictions_unlinking_and_deleting() {
    // SPEC M7, M16.
    let mut hub = Hub::new();
    hub.env("prod");
    let restricted = fixture("new-installations-restricted-module.yml");
    let name = restricted
        .lines()
        .find_map(|l| l.strip_prefix("name: "))
        .unwrap()
        .trim()
        .to_string();
    publish(&mut hub, &format!("{name}.yml"), &restricted);
    let err = hub.err(Command::InstallModule {
        environment: "prod".into(),
        module: name.clone(),
        version: None,
        variables: BTreeMap::new(),
        actor: ACTOR.into(),
    });
    assert!(err.to_string().contains("newInstallations"), "{err}");

    publish(
        &mut hub,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml"),
    );
    install(&mut hub, "prod", "control-plane-module", &[]);
    let err = hub.err(Command::DeleteModule {
        name: "control-plane-module".into(),
    });
    assert!(err.to_string().contains("unlink"), "{err}");
    hub.ok(Command::UnlinkModule {
        installation: "prod/control-plane-module".into(),
        actor: ACTOR.into(),
    });
    let backend = hub
        .state
        .entity(&helm_id("prod", "backend-service"))
        .unwrap();
    assert_eq!(backend.owner_module, None, "unlinking never uninstalls");
    assert!(!backend.marked_for_uninstall);
    hub.ok(Command::DeleteModule {
        name: "control-plane-module".into(),
    });
    assert_eq!(hub.state.module_versions("control-plane-module").count(), 0);
    assert!(hub
        .state
        .entity(&helm_id("prod", "backend-service"))
        .is_some());
    // Reported state is untouched by module bookkeeping.
    assert_eq!(
        hub.state
            .entity(&helm_id("prod", "backend-service"))
            .unwrap()
            .reported
            .health,
        Health::Unknown
    );
}

#[test]
fn required_secrets_block_the_install_until_they_are_set() {
    // SPEC M4: the database's `service-secret` (multikey, key `api-key`) must be set before a
    // release is deployed; `explain` names what is missing.
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:database-service");
    hub.publish("com.example:database-service", "2.0.0", &[]);
    publish(
        &mut hub,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml"),
    );
    install(&mut hub, "prod", "control-plane-module", &[]);
    let db = helm_id("prod", "database-service");
    assert!(hub.step().is_empty());
    let eval = hub.eval(&db);
    assert!(
        eval.summary().contains("service-secret.api-key"),
        "{}",
        eval.summary()
    );
    hub.ok(Command::SetSecret {
        entity: db.clone(),
        name: "service-secret.api-key".into(),
        value: Some(hub_engine::entity::SecretValue("s3cr3t".into())),
    });
    let plan = hub.converge(&db);
    assert_eq!(plan.to_version, Some(v("2.0.0")));
}

#[test]
fn dependency_group_overrides_choose_where_a_dependency_is_looked_for() {
    // SPEC M5: the infrastructure module's entity is in group `application`, but looks for
    // its networking dependency in group `networking` (dependencyGroupOverrides).
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:networking-module");
    hub.publish("com.example:networking-module", "1.0.0", &[]);
    hub.product("com.example:infrastructure-module");
    hub.publish(
        "com.example:infrastructure-module",
        "1.0.0",
        &[("com.example:networking-module", "1.0.0", "1.x.x", false)],
    );
    let net = create_helm(
        &mut hub,
        "prod",
        "networking",
        "com.example:networking-module",
        "net",
    );
    hub.entity_settings(
        &net,
        hub_engine::command::EntitySettingsPatch {
            dependency_groups: Some(vec!["networking".into()]),
            ..Default::default()
        },
    );
    hub.installed(&net, "1.0.0");
    publish(
        &mut hub,
        "infrastructure-module.yml",
        &fixture("infrastructure-module.yml"),
    );
    install(
        &mut hub,
        "prod",
        "infrastructure-module",
        &[("targetAccountId", "acct-1"), ("exampleValue", "v")],
    );
    let infra = hub_engine::EntityId::new(
        "prod",
        hub_engine::EntityKind::TerraformModule,
        "application-infrastructure",
    )
    .0;
    let e = hub.state.entity(&infra).expect("infra entity");
    assert_eq!(e.account_id.as_deref(), Some("acct-1"));
    assert!(e.dependency_groups.contains("application"));
    let plan = hub.converge(&infra);
    assert_eq!(
        plan.to_version,
        Some(v("1.0.0")),
        "the provider in `networking` counts"
    );
    // Without the override the same entity finds no provider.
    let mut other = Hub::new();
    other.env("prod");
    other.product("com.example:networking-module");
    other.publish("com.example:networking-module", "1.0.0", &[]);
    other.product("com.example:infrastructure-module");
    other.publish(
        "com.example:infrastructure-module",
        "1.0.0",
        &[("com.example:networking-module", "1.0.0", "1.x.x", false)],
    );
    let net = create_helm(
        &mut other,
        "prod",
        "networking",
        "com.example:networking-module",
        "net",
    );
    other.entity_settings(
        &net,
        hub_engine::command::EntitySettingsPatch {
            dependency_groups: Some(vec!["networking".into()]),
            ..Default::default()
        },
    );
    other.installed(&net, "1.0.0");
    let without = fixture("infrastructure-module.yml").replace(
        "      dependencyGroupOverrides:\n        \"com.example:networking-module\":\n          - \"{{ moduleVariable.networkDependencyGroupId }}\"\n",
        "",
    );
    publish(&mut other, "infrastructure-module.yml", &without);
    install(
        &mut other,
        "prod",
        "infrastructure-module",
        &[("targetAccountId", "acct-1"), ("exampleValue", "v")],
    );
    assert!(other.step().is_empty());
    assert!(other.eval(&infra).summary().contains("networking-module"));
}

#[test]
fn a_removed_variable_s_value_is_not_carried_into_the_update() {
    // SPEC M3: removing (or renaming) a variable drops the installation's value for it at
    // the next update; the update is not refused because of it.
    let mut hub = Hub::new();
    hub.env("prod");
    let v1 = fixture("control-plane-module.yml");
    publish(&mut hub, "control-plane-module.yml", &v1);
    install(
        &mut hub,
        "prod",
        "control-plane-module",
        &[("myNamespace", "default")],
    );
    let v2 = v1
        .replace(
            "  myNamespace:\n    type: string\n    string:\n      defaultValue: default\n      description: 배포 개체의 기본 네임스페이스\n",
            "",
        )
        .replace("\"{{ moduleVariable.myNamespace }}\"", "default");
    assert!(!v2.contains("myNamespace"), "the fixture changed: {v2}");
    publish(&mut hub, "control-plane-module.yml", &v2);
    let cr = open_cr(&hub, "prod/control-plane-module");
    assert_eq!(hub.state.change_request(&cr).unwrap().blocked, None);
    approve(&mut hub, &cr);
    let inst = hub.state.installation("prod/control-plane-module").unwrap();
    assert_eq!(inst.version, v("0.2.0"));
    assert!(
        !inst.variables.contains_key("myNamespace"),
        "{:?}",
        inst.variables
    );
    // A direct installation still refuses a value for an unknown variable.
    hub.env("staging");
    let err = hub.err(Command::InstallModule {
        environment: "staging".into(),
        module: "control-plane-module".into(),
        version: None,
        variables: vars(&[("myNamespace", "default")]),
        actor: ACTOR.into(),
    });
    assert!(err.to_string().contains("myNamespace"), "{err}");
}

#[test]
fn install_config_overrides_apply_at_creation_and_then_belong_to_the_entity() {
    // SPEC M14: applied with configOverrides when the entity is created; afterwards the entity
    // owns those keys (users may edit them under MERGE), and keys added later are not
    // retroactive.
    let mut hub = Hub::new();
    hub.env("prod");
    let v1 = fixture("install-config-module.yml");
    publish(&mut hub, "install-config-module.yml", &v1);
    install(&mut hub, "prod", "install-config-module", &[]);
    let db = helm_id("prod", "database-service");
    let c = config(&hub, &db, "2.0.0");
    assert_eq!(c["feature-flag"], "enabled", "{c}");
    assert_eq!(c["resources"]["requests"]["cpu"], 8, "{c}");
    assert_eq!(c["resources"]["requests"]["memory"], "4Gi", "{c}");
    // The entity owns the install keys; the module keeps feature-flag.
    hub.ok(Command::SetConfigOverrides {
        entity: db.clone(),
        version: "2.0.0".into(),
        config: Some(
            "feature-flag: enabled\nresources:\n  requests:\n    cpu: 16\n    memory: 4Gi\n".into(),
        ),
    });
    let err = hub.err(Command::SetConfigOverrides {
        entity: db.clone(),
        version: "2.0.0".into(),
        config: Some("feature-flag: disabled\n".into()),
    });
    assert!(err.to_string().contains("feature-flag"), "{err}");
    // A later version adds an install key: not applied to the existing entity.
    let v2 = v1.replace(
        "                memory: 4Gi",
        "                memory: 4Gi\n            disk: 100Gi",
    );
    publish(&mut hub, "install-config-module.yml", &v2);
    let cr = open_cr(&hub, "prod/install-config-module");
    approve(&mut hub, &cr);
    let c = config(&hub, &db, "2.0.0");
    assert_eq!(
        c["resources"]["requests"]["cpu"], 16,
        "the user's value stays: {c}"
    );
    assert!(c.get("disk").is_none(), "not retroactive: {c}");
    // A new installation elsewhere gets it.
    hub.env("staging");
    install(&mut hub, "staging", "install-config-module", &[]);
    let c = config(&hub, &helm_id("staging", "database-service"), "2.0.0");
    assert_eq!(c["disk"], "100Gi", "{c}");
}

#[test]
fn variables_past_the_limit_are_refused_and_change_nothing() {
    // Before the tables recorded their own changes, the handler added the values to the live
    // installation and then refused: the live state kept them, storage did not.
    let mut hub = Hub::new();
    hub.env("prod");
    let v1 = fixture("control-plane-module.yml");
    publish(&mut hub, "control-plane-module.yml", &v1);
    install(&mut hub, "prod", "control-plane-module", &[]);
    let values = |from: usize, to: usize| -> BTreeMap<String, Option<String>> {
        (from..to)
            .map(|i| (format!("v{i}"), Some("1".to_string())))
            .collect()
    };
    hub.ok(Command::SetModuleVariables {
        installation: "prod/control-plane-module".into(),
        variables: values(0, 200),
    });
    // `Hub::err` checks that the refused command left the state and its digest as they were.
    let err = hub.err(Command::SetModuleVariables {
        installation: "prod/control-plane-module".into(),
        variables: values(200, 300),
    });
    assert!(err.to_string().contains("at most"), "{err}");
}

/// `prod` with `retired-application` installed at 1.0.0 (its minimum for uninstallation) and
/// the control-plane module, its entity marked with `unmanage` (`None`: the line left out),
/// installed; then the uninstall runs.
fn uninstalled_by_the_module(unmanage: Option<&str>) -> (Hub, String) {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:retired-application");
    hub.publish("com.example:retired-application", "1.0.0", &[]);
    let retired = create_helm(
        &mut hub,
        "prod",
        "retired-application",
        "com.example:retired-application",
        "app-namespace",
    );
    hub.installed(&retired, "1.0.0");
    let line = "        unmanageAfterUninstall: MANUAL\n";
    let yaml = fixture("control-plane-module.yml");
    assert!(yaml.contains(line));
    let yaml = match unmanage {
        Some(value) => yaml.replace(line, &format!("        unmanageAfterUninstall: {value}\n")),
        None => yaml.replace(line, ""),
    };
    publish(&mut hub, "control-plane-module.yml", &yaml);
    install(&mut hub, "prod", "control-plane-module", &[]);
    let uninstall = hub.converge(&retired);
    assert_eq!(uninstall.kind.label(), "uninstall");
    assert_eq!(hub.state.entity(&retired).unwrap().reported.version, None);
    (hub, retired)
}

fn managed_by_module(hub: &Hub, entity: &str) -> (Option<String>, bool) {
    let owner = hub.state.entity(entity).unwrap().owner_module.clone();
    let listed = hub
        .state
        .installation("prod/control-plane-module")
        .unwrap()
        .entities
        .contains_key(entity);
    (owner, listed)
}

#[test]
fn unmanage_after_uninstall_manual_keeps_the_module_s_management() {
    // SPEC M11, seed 001: `unmanageAfterUninstall: MANUAL` (the seed's example) keeps the
    // uninstalled entity under its module until an operator lets it go.
    let (mut hub, retired) = uninstalled_by_the_module(Some("MANUAL"));
    assert_eq!(
        managed_by_module(&hub, &retired),
        (Some("control-plane-module".to_string()), true)
    );
    let notes = hub.activity_of_kind(&retired, "module");
    assert!(
        notes
            .last()
            .unwrap()
            .contains("unmanageAfterUninstall: MANUAL"),
        "{notes:?}"
    );
    // The operator ends it: the entity dropped from the definition, the installation updated.
    let yaml = fixture("control-plane-module.yml");
    let start = yaml
        .find(
            "  - type: helmChart\n    helmChart:\n      productId: com.example:retired-application",
        )
        .unwrap();
    publish(&mut hub, "control-plane-module.yml", &yaml[..start]);
    let cr = open_cr(&hub, "prod/control-plane-module");
    approve(&mut hub, &cr);
    assert_eq!(managed_by_module(&hub, &retired), (None, false));
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

#[test]
fn unmanage_after_uninstall_automatic_ends_the_management_by_itself() {
    // Without the field (AUTOMATIC) and with AUTOMATIC written out: the uninstall's success
    // ends the module's management; the entity stays, not installed and still marked.
    for unmanage in [None, Some("AUTOMATIC")] {
        let (mut hub, retired) = uninstalled_by_the_module(unmanage);
        assert_eq!(
            managed_by_module(&hub, &retired),
            (None, false),
            "{unmanage:?}"
        );
        let e = hub.state.entity(&retired).unwrap();
        assert!(e.marked_for_uninstall, "nothing reinstalls it");
        let notes = hub.activity_of_kind(&retired, "module");
        assert!(
            notes
                .last()
                .unwrap()
                .contains("no longer managed by module control-plane-module"),
            "{notes:?}"
        );
        assert!(hub.step().iter().all(|p| hub.plan(p).entity != retired));
        // A later version that still marks it does not take it back.
        publish(
            &mut hub,
            "control-plane-module.yml",
            &control_plane("1536Mi"),
        );
        let cr = open_cr(&hub, "prod/control-plane-module");
        approve(&mut hub, &cr);
        assert_eq!(managed_by_module(&hub, &retired), (None, false));
        assert!(hub.step().iter().all(|p| hub.plan(p).entity != retired));
        assert_eq!(hub.replay_digest(), hub.state.digest());
    }
}

#[test]
fn unmanage_after_uninstall_accepts_only_manual_or_automatic() {
    let mut hub = Hub::new();
    hub.env("prod");
    let yaml = fixture("control-plane-module.yml").replace(
        "unmanageAfterUninstall: MANUAL",
        "unmanageAfterUninstall: SOMETIMES",
    );
    let err = hub.err(Command::PublishModule {
        file_name: Some("control-plane-module.yml".into()),
        yaml,
    });
    let msg = err.to_string();
    assert!(
        msg.contains("entities[2].helmChart.markedForUninstallation.unmanageAfterUninstall"),
        "{msg}"
    );
    assert!(
        msg.contains("must be AUTOMATIC or MANUAL, got \"SOMETIMES\""),
        "{msg}"
    );
    // A templated value is checked once rendered, naming the field too.
    let yaml = fixture("control-plane-module.yml").replace(
        "unmanageAfterUninstall: MANUAL",
        "unmanageAfterUninstall: \"{{ moduleVariable.myNamespace }}\"",
    );
    publish(&mut hub, "control-plane-module.yml", &yaml);
    let err = hub.err(Command::InstallModule {
        environment: "prod".into(),
        module: "control-plane-module".into(),
        version: None,
        variables: BTreeMap::new(),
        actor: ACTOR.into(),
    });
    let msg = err.to_string();
    assert!(
        msg.contains("markedForUninstallation.unmanageAfterUninstall")
            && msg.contains("got \"default\""),
        "{msg}"
    );
}
