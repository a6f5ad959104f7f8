//! Modules end to end on a 3-node hub with `hub-agent` (sim driver): the seed's
//! control-plane module published and installed with `hubctl`, its entities installed by the
//! agent, updated through an approved change request, an entity moved between modules without
//! a plan, and a publish retried across a leader kill creating one version (SPEC M8–M12).

use std::path::{Path, PathBuf};

use hub_client::answer::{
    ChangeRequestView, Explain, GetEntity, GetPlan, ListModules, ListPlans, ModuleDryRunAnswer,
    ModuleInstallationDetail, ModuleSummaryView, ModuleView, PlanView,
};
use hub_tests::{poll_until, Cluster, CmdOutput, CONVERGE_TIMEOUT};
use serde_json::json;

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn fixture(file: &str) -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("../engine/tests/fixtures/modules/valid")
    .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

#[track_caller]
fn ok(cluster: &Cluster, args: &[&str]) -> CmdOutput {
    cluster.hubctl(args).expect_ok(&args.join(" "))
}

/// `hubctl ARGS -o json` read as `A`: the hub's answer (or its list of rows) unchanged.
#[track_caller]
fn ok_answer<A: serde::de::DeserializeOwned>(cluster: &Cluster, args: &[&str]) -> A {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    ok(cluster, &all).answer()
}

fn release(cluster: &Cluster, product: &str, version: &str) {
    let (group, name) = product.split_once(':').expect("group:name");
    let manifest = format!(
        "product-group: {group}\nproduct-name: {name}\nproduct-version: {version}\n\
         artifacts:\n  - uri: charts/{name}-{version}.tgz\n    sha256: {SHA}\n"
    );
    let _ = cluster.submit(json!({"CreateProduct": {"product_id": product, "description": ""}}));
    cluster
        .submit(json!({"PublishRelease": {"manifest": manifest}}))
        .expect("release");
}

/// The entity's plans, once `pred` holds for them.
fn wait_plans(
    cluster: &Cluster,
    entity: &str,
    what: &str,
    pred: impl Fn(&[PlanView]) -> bool,
) -> Vec<PlanView> {
    let query = ListPlans {
        entity: Some(entity.to_string()),
        ..ListPlans::default()
    };
    poll_until(CONVERGE_TIMEOUT, || {
        let plans = cluster.ask(&query).ok()?.plans;
        pred(&plans).then_some(plans)
    })
    .unwrap_or_else(|| panic!("{what}: {:?}", cluster.ask(&query)))
}

/// The config a plan of `kind` carried (the full plan view).
fn plan_config(cluster: &Cluster, plans: &[PlanView], kind: &str) -> String {
    let id = plans
        .iter()
        .find(|p| p.kind == kind)
        .map(|p| p.id.clone())
        .unwrap_or_else(|| panic!("no {kind} plan: {plans:?}"));
    let plan = cluster.ask(&GetPlan(id)).expect("plan");
    plan.to_config.flatten().unwrap_or_default()
}

fn succeeded(plans: &[PlanView], kind: &str) -> usize {
    plans
        .iter()
        .filter(|p| p.kind == kind && p.status == "succeeded")
        .count()
}

#[test]
fn control_plane_module_installed_updated_and_an_entity_moved() {
    let cluster = Cluster::up(3, "");
    let dir = cluster.dir().to_path_buf();
    ok(&cluster, &["env", "create", "prod"]);
    release(&cluster, "com.example:backend-service", "2.0.0");
    release(&cluster, "com.example:database-service", "2.0.0");
    release(&cluster, "com.example:monitoring", "1.0.0");
    let _agent = cluster.start_hub_agent("prod", &["--driver", "sim", "--sim-task-ms", "1"]);

    // SPEC M8: a dry run validates and names the version, publishing nothing.
    let file = write(
        &dir,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml"),
    );
    let file = file.to_str().expect("utf-8 path");
    let dry: ModuleDryRunAnswer =
        ok_answer(&cluster, &["module", "create", "-f", file, "--dry-run"]);
    assert_eq!(dry.version, "0.1.0", "{dry:?}");
    let list: Vec<ModuleSummaryView> = ok_answer(&cluster, &["module", "list"]);
    assert!(list.is_empty(), "{list:?}");
    // Bad input: the error names the file, the path and the line; nothing is published.
    let bad = write(
        &dir,
        "control-plane-module.yaml",
        &fixture("control-plane-module.yml").replace("      k8sNamespace: app-namespace\n", ""),
    );
    let out = cluster.hubctl(&["module", "create", "-f", bad.to_str().expect("path")]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("entities[2].helmChart.k8sNamespace") && out.stderr.contains("line"),
        "{}",
        out.describe()
    );
    ok(&cluster, &["module", "create", "-f", file]);
    let got: ModuleView = ok_answer(&cluster, &["module", "get", "control-plane-module"]);
    assert_eq!(got.version, "0.1.0", "{got:?}");
    let download = dir.join("downloaded.yml");
    ok(
        &cluster,
        &[
            "module",
            "get",
            "control-plane-module",
            "--download",
            download.to_str().expect("path"),
        ],
    );
    assert_eq!(
        std::fs::read_to_string(&download).expect("downloaded"),
        fixture("control-plane-module.yml")
    );

    // SPEC M9: install; the agent installs the entities with the rendered config.
    ok(
        &cluster,
        &[
            "module",
            "install",
            "control-plane-module",
            "-e",
            "prod",
            "--variable",
            "resourceProfile=small",
        ],
    );
    let backend = "eid:prod:helmChart:backend-service";
    let plans = wait_plans(&cluster, backend, "backend installed", |p| {
        succeeded(p, "install") == 1
    });
    let config = plan_config(&cluster, &plans, "install");
    assert!(config.contains("memory: 1Gi"), "{config}");
    // The database's required secret (SPEC M4) holds its install until it is set.
    let db = "eid:prod:helmChart:database-service";
    let explain = poll_until(CONVERGE_TIMEOUT, || {
        let x = cluster.ask(&Explain(db.to_string())).ok()?;
        serde_json::to_string(&x)
            .expect("JSON")
            .contains("service-secret.api-key")
            .then_some(x)
    });
    assert!(explain.is_some(), "explain names the missing secret");
    let secret = write(&dir, "api-key", "s3cr3t");
    ok(
        &cluster,
        &[
            "entity",
            "secret",
            "set",
            "prod/database-service",
            "service-secret.api-key",
            "--value-file",
            secret.to_str().expect("path"),
        ],
    );
    wait_plans(
        &cluster,
        "eid:prod:helmChart:database-service",
        "database installed",
        |p| succeeded(p, "install") == 1,
    );

    // The preset mapping changes (1Gi → 1.5Gi): a change request, applied once approved.
    write(
        &dir,
        "control-plane-module.yml",
        &fixture("control-plane-module.yml").replacen("small: 1Gi", "small: 1.5Gi", 1),
    );
    ok(&cluster, &["module", "create", "-f", file]);
    let crs: Vec<ChangeRequestView> = ok_answer(
        &cluster,
        &[
            "changerequest",
            "list",
            "--installation",
            "prod/control-plane-module",
            "--open",
        ],
    );
    assert_eq!(crs.len(), 1, "{crs:?}");
    assert_eq!(crs[0].to_version, "0.2.0");
    let cr = crs[0].id.clone();
    let inst: ModuleInstallationDetail = ok_answer(
        &cluster,
        &[
            "module",
            "installation",
            "control-plane-module",
            "-e",
            "prod",
        ],
    );
    assert_eq!(inst.status, "Update Pending", "{inst:?}");
    ok(&cluster, &["changerequest", "approve", &cr]);
    let plans = wait_plans(&cluster, backend, "config plan", |p| {
        succeeded(p, "config-change") == 1
    });
    let config = plan_config(&cluster, &plans, "config-change");
    assert!(config.contains("memory: 1.5Gi"), "{config}");
    let inst: ModuleInstallationDetail = ok_answer(
        &cluster,
        &[
            "module",
            "installation",
            "control-plane-module",
            "-e",
            "prod",
        ],
    );
    assert_eq!(
        (inst.version.as_str(), inst.status.as_str()),
        ("0.2.0", "Up To Date")
    );

    // SPEC M12: move the monitoring entity from core-services to observability.
    let module = |name: &str, with_entity: bool| {
        let mut y = format!("name: {name}\n");
        if with_entity {
            y.push_str(
                "entities:\n  - type: helmChart\n    helmChart:\n      productId: com.example:monitoring\n      k8sNamespace: observability\n      configOverrides: |\n        \"1.0.0\":\n          overrides:\n            retention: 30d\n",
            );
        }
        y
    };
    let core = write(&dir, "core-services.yml", &module("core-services", true));
    let core = core.to_str().expect("path");
    ok(&cluster, &["module", "create", "-f", core]);
    ok(
        &cluster,
        &["module", "install", "core-services", "-e", "prod"],
    );
    let monitoring = "eid:prod:helmChart:monitoring";
    wait_plans(&cluster, monitoring, "monitoring installed", |p| {
        succeeded(p, "install") == 1
    });
    let obs = write(&dir, "observability.yml", &module("observability", true));
    let obs = obs.to_str().expect("path");
    ok(&cluster, &["module", "create", "-f", obs]);
    let out = cluster.hubctl(&["module", "install", "observability", "-e", "prod"]);
    assert!(
        !out.success() && out.stderr.contains("managed by module core-services"),
        "{}",
        out.describe()
    );
    write(&dir, "core-services.yml", &module("core-services", false));
    ok(&cluster, &["module", "create", "-f", core]);
    let crs: Vec<ChangeRequestView> = ok_answer(
        &cluster,
        &[
            "changerequest",
            "list",
            "--installation",
            "prod/core-services",
            "--open",
        ],
    );
    let cr = crs.first().expect("cr").id.clone();
    ok(&cluster, &["changerequest", "approve", &cr]);
    ok(
        &cluster,
        &["module", "install", "observability", "-e", "prod"],
    );
    let e = cluster
        .ask(&GetEntity(monitoring.to_string()))
        .expect("entity");
    assert_eq!(e.owner_module.as_deref(), Some("observability"), "{e:?}");
    // No plan follows the move: explain says it is at its target.
    let explain = poll_until(CONVERGE_TIMEOUT, || {
        let x = cluster.ask(&Explain(monitoring.to_string())).ok()?;
        (!x.has_candidate).then_some(x)
    });
    let plans = cluster
        .ask(&ListPlans {
            entity: Some(monitoring.to_string()),
            ..ListPlans::default()
        })
        .expect("plans");
    assert_eq!(
        plans.plans.len(),
        1,
        "only the install: {plans:?} {explain:?}"
    );
}

#[test]
fn a_publish_retried_across_a_leader_kill_creates_one_version() {
    // SPEC M8: the client's retry carries the same request id.
    let cluster = Cluster::up(3, "");
    let yaml = fixture("infrastructure-module.yml");
    let command =
        json!({"PublishModule": {"file_name": "infrastructure-module.yml", "yaml": yaml}});
    let first = cluster
        .submit_with_id(command.clone(), "publish-once")
        .expect("publish");
    let leader = cluster.leader_id();
    cluster.kill9(leader);
    cluster.wait_leader(CONVERGE_TIMEOUT, |id| id != leader);
    let retry = cluster
        .submit_with_id(command, "publish-once")
        .expect("retry");
    assert_eq!(first, retry);
    let modules = cluster.ask(&ListModules).expect("modules");
    assert_eq!(modules.modules[0].versions, ["0.1.0"], "{modules:?}");
}
