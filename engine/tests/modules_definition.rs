//! Module definitions end to end (SPEC M1–M14): every YAML example of the module documentation
//! is a fixture under `fixtures/modules/valid/` that parses, validates against a catalog of the
//! fixtures, and renders; every file under `fixtures/modules/invalid/` is refused with the error
//! its first line announces (`# expect: <path>: <message fragment>`, an empty path meaning the
//! document as a whole).
//!
//! Fixtures are published in the test catalog at version 0.1.0 unless a line
//! `# catalog-version: X` says otherwise; `fixtures/modules/catalog/` holds modules that only
//! the invalid corpus needs.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use hub_engine::entity::EntityKind;
use hub_engine::module::{
    check_user_edit, parse_and_validate, parse_definition, render, sync_config, validate_against,
    ConfigSyncError, ModuleCatalog, ModuleConfig, ModuleDefinition, RenderError, RenderedEntity,
    SyncMode, MAX_DEFINITION_BYTES,
};
use semver::Version;
use serde_yaml_ng::Value;

type Catalog = BTreeMap<(String, Version), ModuleDefinition>;

fn dir(name: &str) -> PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/modules")
    .join(name)
}

/// `(file name, text)` of every `.yml`/`.yaml` file in a fixture folder, sorted by name.
fn fixtures(name: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(dir(name))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yml" | "yaml")))
        .map(|p| {
            let file = p.file_name().unwrap().to_str().unwrap().to_string();
            (file, fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn fixture(file: &str) -> String {
    fs::read_to_string(dir("valid").join(file)).unwrap()
}

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

fn catalog_version(text: &str) -> Version {
    text.lines()
        .find_map(|l| l.strip_prefix("# catalog-version: "))
        .map_or_else(|| v("0.1.0"), v)
}

/// The valid fixtures (`.yml`) and the catalog-only modules, each at its catalog version.
fn catalog() -> Catalog {
    let mut out = Catalog::new();
    let files = fixtures("valid")
        .into_iter()
        .filter(|(f, _)| f.ends_with(".yml"))
        .chain(fixtures("catalog"));
    for (file, text) in files {
        let def = parse_definition(Some(&file), &text).unwrap_or_else(|e| panic!("{file}:\n{e}"));
        out.insert((def.name.clone(), catalog_version(&text)), def);
    }
    out
}

fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Installer values the valid fixtures need: their variables without default.
fn required_values(module: &str) -> BTreeMap<String, String> {
    match module {
        "infrastructure-module" => values(&[
            ("targetAccountId", "123456789012"),
            ("exampleValue", "hello"),
        ]),
        "database-module" => values(&[("postgresMaxConnections", "100")]),
        "application-composite-module" => {
            values(&[("database-module.postgresMaxConnections", "100")])
        }
        _ => BTreeMap::new(),
    }
}

fn module(cat: &Catalog, name: &str) -> ModuleDefinition {
    cat.definition(name, &v("0.1.0")).unwrap().clone()
}

/// The overrides mapping under `version` of a rendered entity's config, parsed.
fn overrides(e: &RenderedEntity, version: &str) -> Value {
    serde_yaml_ng::from_str(&e.config_overrides[&v(version)].overrides).unwrap()
}

fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(value, |cur, key| {
        cur.get(key).unwrap_or_else(|| panic!("no {path}"))
    })
}

fn entity<'a>(entities: &'a [RenderedEntity], product_id: &str) -> &'a RenderedEntity {
    entities
        .iter()
        .find(|e| e.product_id == product_id)
        .unwrap_or_else(|| panic!("no entity {product_id}"))
}

#[test]
fn every_seed_example_is_a_fixture() {
    let names: Vec<String> = fixtures("valid").into_iter().map(|(f, _)| f).collect();
    for want in [
        "control-plane-module.yaml",
        "string-variables-module.yml",
        "preset-variables-module.yml",
        "helm-chart-entity-module.yml",
        "infrastructure-module.yml",
        "submodule-reference-module.yml",
        "new-installations-restricted-module.yml",
        "entity-overrides-restricted-module.yml",
        "database-module.yml",
        "application-composite-module.yml",
        "control-plane-module.yml",
        "uninstall-marked-module.yml",
        "uninstall-min-version-module.yml",
        "sync-example-before-module.yml",
        "sync-example-module.yml",
        "install-config-module.yml",
        // Not seed examples: the submodules the seed names without defining.
        "application-module.yml",
        "backend-module.yml",
    ] {
        assert!(names.iter().any(|n| n == want), "missing fixture {want}");
    }
    // Wrapped fragments say so at the top.
    for (file, text) in fixtures("valid") {
        assert!(text.starts_with('#'), "{file} has no header comment");
    }
}

#[test]
fn valid_fixtures_parse_validate_and_render() {
    let cat = catalog();
    for (file, text) in fixtures("valid") {
        let def =
            parse_and_validate(Some(&file), &text, &cat).unwrap_or_else(|e| panic!("{file}:\n{e}"));
        assert_eq!(
            file.rsplit_once('.').unwrap().0,
            def.name,
            "{file}: file name and module name"
        );
        validate_against(&def, &cat).unwrap();
        let rendered = render(&def, &cat, &required_values(&def.name))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let own_and_sub_entities: usize = def.entities.len()
            + def
                .submodules
                .iter()
                .map(|s| cat.definition(&s.name, &s.version).unwrap().entities.len())
                .sum::<usize>();
        assert_eq!(rendered.len(), own_and_sub_entities, "{file}");
        for e in &rendered {
            assert!(
                !e.entity_name.is_empty() && !e.product_id.contains("{{"),
                "{file}"
            );
            for cfg in e.config_overrides.values() {
                assert!(!cfg.overrides.contains("{{"), "{file}: {}", cfg.overrides);
            }
        }
        // Domain types are exposed as JSON too.
        let json = serde_json::to_string(&def).unwrap();
        assert_eq!(
            serde_json::from_str::<ModuleDefinition>(&json).unwrap(),
            def
        );
        let json = serde_json::to_string(&rendered).unwrap();
        assert_eq!(
            serde_json::from_str::<Vec<RenderedEntity>>(&json).unwrap(),
            rendered
        );
    }
}

#[test]
fn control_plane_module_renders_presets_secrets_and_uninstall() {
    let cat = catalog();
    let def = module(&cat, "control-plane-module");
    let out = render(&def, &cat, &BTreeMap::new()).unwrap();
    assert_eq!(out.len(), 3);
    let backend = entity(&out, "com.example:backend-service");
    assert_eq!(backend.entity_name, "backend-service");
    assert_eq!(backend.k8s_namespace.as_deref(), Some("default"));
    assert_eq!(backend.sync_mode, SyncMode::Enabled);
    assert_eq!(backend.source_module, "control-plane-module");
    let o = overrides(backend, "2.0.0");
    assert_eq!(at(&o, "resources.requests.cpu"), &Value::from("1000m"));
    assert_eq!(at(&o, "resources.limits.memory"), &Value::from("2Gi"));
    assert_eq!(at(&o, "num-threads"), &Value::from(100));
    let controlled: Vec<String> = backend.config_overrides[&v("2.0.0")]
        .controlled
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        controlled,
        [
            "num-threads",
            "resources.limits.memory",
            "resources.requests.cpu",
            "resources.requests.memory"
        ]
    );

    let large = render(&def, &cat, &values(&[("resourceProfile", "large")])).unwrap();
    let db = entity(&large, "com.example:database-service");
    assert_eq!(
        at(&overrides(db, "2.0.0"), "resources.requests.cpu"),
        &Value::from("1000m")
    );
    assert_eq!(db.secret_requirements["service-secret"].keys, ["api-key"]);

    let retired = entity(&out, "com.example:retired-application");
    let u = retired.marked_for_uninstallation.as_ref().unwrap();
    assert_eq!(u.min_version, Some(v("1.0.0")));
    assert_eq!(u.unmanage_after_uninstall.as_deref(), Some("MANUAL"));
    assert!(retired.config_overrides.is_empty());

    // Installers choose the options value, never a preset; constraints apply to values.
    assert_eq!(
        render(&def, &cat, &values(&[("backendCpu", "4000m")])).unwrap_err(),
        RenderError::PresetNotSettable {
            variable: "backendCpu".into(),
            options: "resourceProfile".into()
        }
    );
    let err = render(&def, &cat, &values(&[("resourceProfile", "huge")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "variable resourceProfile: \"huge\" is not one of `small`, `medium`, `large`"
    );
    assert_eq!(
        render(&def, &cat, &values(&[("nope", "1")])).unwrap_err(),
        RenderError::UnknownVariable("nope".into())
    );
}

#[test]
fn string_constraints_apply_to_installer_values() {
    // SPEC M2: the regex must match the whole value.
    let cat = catalog();
    let def = module(&cat, "string-variables-module");
    render(&def, &cat, &values(&[("heapSize", "3g")])).unwrap();
    let err = render(&def, &cat, &values(&[("heapSize", "heap-3g")])).unwrap_err();
    assert!(
        matches!(&err, RenderError::InvalidValue { variable, reason }
            if variable == "heapSize" && reason.contains("does not match")),
        "{err}"
    );
    render(&def, &cat, &values(&[("myNamespace", "namespace2")])).unwrap();
    assert!(render(&def, &cat, &values(&[("myNamespace", "staging")])).is_err());
}

#[test]
fn preset_mapping_change_reaches_installations_that_update() {
    // SPEC M2: small's memory changes from 1Gi to 1.5Gi in a new module version.
    let v1_text = fixture("preset-variables-module.yml");
    let v2_text = v1_text.replace("small: 1Gi", "small: 1.5Gi");
    assert_ne!(v1_text, v2_text);
    let mut cat = Catalog::new();
    for (version, text) in [("0.1.0", &v1_text), ("0.2.0", &v2_text)] {
        let def = parse_definition(Some("preset-variables-module.yml"), text).unwrap();
        cat.insert((def.name.clone(), v(version)), def);
    }
    let small = values(&[("resourceProfile", "small")]);
    let memory = |version: &str| {
        let def = cat
            .definition("preset-variables-module", &v(version))
            .unwrap();
        let out = render(def, &cat, &small).unwrap();
        at(&overrides(&out[0], "1.0.0"), "resources.requests.memory").clone()
    };
    assert_eq!(memory("0.1.0"), Value::from("1Gi"));
    assert_eq!(memory("0.2.0"), Value::from("1.5Gi"));
    let def = cat
        .definition("preset-variables-module", &v("0.2.0"))
        .unwrap();
    let medium = render(def, &cat, &BTreeMap::new()).unwrap();
    let o = overrides(&medium[0], "1.0.0");
    assert_eq!(at(&o, "resources.requests.memory"), &Value::from("2Gi"));
    assert_eq!(at(&o, "resources.requests.cpu"), &Value::from("1000m"));
    assert!(matches!(
        render(def, &cat, &values(&[("serviceMemory", "3Gi")])),
        Err(RenderError::PresetNotSettable { .. })
    ));
}

#[test]
fn database_module_needs_max_connections_and_renders_it_as_a_number() {
    let cat = catalog();
    let def = module(&cat, "database-module");
    assert!(!def.restrictions.allow_entity_overrides);
    assert_eq!(
        render(&def, &cat, &BTreeMap::new()).unwrap_err(),
        RenderError::MissingVariables(vec!["postgresMaxConnections".into()])
    );
    let out = render(&def, &cat, &values(&[("postgresMaxConnections", "100")])).unwrap();
    let o = overrides(&out[0], "1.0.0");
    assert_eq!(
        at(&o, "postgresql.postgresql-conf.max_connections"),
        &Value::from(100)
    );
    assert_eq!(
        at(&o, "postgresql.postgresql-conf.wal_keep_size"),
        &Value::from(800)
    );
    assert_eq!(at(&o, "postgresql.replicated"), &Value::from("false"));
    assert_eq!(at(&o, "postgresql.postgresql-version"), &Value::from("17"));
    assert_eq!(
        at(&o, "postgresql.env.BACKUP_TUNING_PARAMETER"),
        &Value::from("3")
    );
    assert_eq!(at(&o, "postgresql.feature-flag-1"), &Value::from(true));

    // A value that makes the substituted text invalid YAML names the entity and variable.
    let err = render(&def, &cat, &values(&[("postgresMaxConnections", "a: b")])).unwrap_err();
    match &err {
        RenderError::InvalidConfig {
            module,
            product_id,
            variable,
            ..
        } => {
            assert_eq!(module, "database-module");
            assert_eq!(product_id, "com.example:database");
            assert_eq!(variable.as_deref(), Some("postgresMaxConnections"));
        }
        other => panic!("{other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.starts_with(
            "module database-module, entity com.example:database: configOverrides: the value \
             of variable postgresMaxConnections makes it invalid: with \"a: b\" substituted: \
             invalid YAML"
        ),
        "{shown}"
    );
}

#[test]
fn composite_module_overrides_variables_of_a_restricted_submodule() {
    // SPEC M6, M7: variableOverrides pass on a module that forbids entityOverrides.
    let cat = catalog();
    let def = module(&cat, "application-composite-module");
    validate_against(&def, &cat).unwrap();
    assert_eq!(
        render(&def, &cat, &BTreeMap::new()).unwrap_err(),
        RenderError::MissingVariables(vec!["database-module.postgresMaxConnections".into()])
    );
    let out = render(&def, &cat, &required_values(&def.name)).unwrap();
    let sources: Vec<(&str, &str)> = out
        .iter()
        .map(|e| (e.product_id.as_str(), e.source_module.as_str()))
        .collect();
    assert_eq!(
        sources,
        [
            (
                "com.example:application-service",
                "application-composite-module/application-module"
            ),
            (
                "com.example:database",
                "application-composite-module/database-module"
            ),
        ]
    );
    let db = entity(&out, "com.example:database");
    let o = overrides(db, "1.0.0");
    assert_eq!(at(&o, "postgresql.replicated"), &Value::from("true"));
    assert_eq!(
        at(&o, "postgresql.env.BACKUP_TUNING_PARAMETER"),
        &Value::from("10")
    );
    assert_eq!(
        at(&o, "postgresql.postgresql-conf.max_connections"),
        &Value::from(100)
    );
    assert_eq!(db.config_overrides[&v("1.0.0")].module, db.source_module);
    // The application submodule's own variables are given with its name.
    let debug = values(&[
        ("database-module.postgresMaxConnections", "100"),
        ("application-module.logLevel", "debug"),
    ]);
    let out = render(&def, &cat, &debug).unwrap();
    let app = entity(&out, "com.example:application-service");
    assert_eq!(
        at(&overrides(app, "1.0.0"), "logging.level"),
        &Value::from("debug")
    );
    // A value the parent overrides cannot be given at installation.
    let err = render(
        &def,
        &cat,
        &values(&[
            ("database-module.postgresMaxConnections", "100"),
            ("database-module.postgresReplicated", "false"),
        ]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, RenderError::InvalidValue { variable, .. }
            if variable == "database-module.postgresReplicated"),
        "{err}"
    );

    // entityOverrides on the database module: refused with a clear error.
    let text = fixture("application-composite-module.yml").replace(
        "      backupTuningParameter: '10'\n",
        "      backupTuningParameter: '10'\n    entityOverrides:\n      \"com.example:database\":\n        ignoredDependencies: [com.example:application-service]\n",
    );
    let errs =
        parse_and_validate(Some("application-composite-module.yml"), &text, &cat).unwrap_err();
    let e = errs.first();
    assert_eq!(e.path, "submodules[1].entityOverrides");
    assert_eq!(
        e.message,
        "module database-module does not allow entityOverrides \
         (restrictions.submoduleUsage.allowEntityOverrides: false); only variableOverrides may \
         be used"
    );
    assert_eq!(e.line, Some(12));
}

#[test]
fn entity_overrides_apply_to_an_unrestricted_submodule() {
    let cat = catalog();
    let text = "\
name: app-with-overrides
variables:
  level:
    type: options
    options:
      values: [info, warn]
      defaultValue: warn
submodules:
  - name: application-module
    version: 0.1.0
    variableOverrides:
      appNamespace: apps-{{ moduleVariable.level }}
    entityOverrides:
      \"com.example:application-service\":
        configOverrides: |
          \"1.0.0\":
            overrides:
              logging:
                level: \"{{ moduleVariable.level }}\"
                format: \"{{ unset }}\"
              replicas: 3
        ignoredDependencies: [com.example:database]
        dependencyGroups: [apps]
        secretRequirements:
          app-token:
            type: multikey
            multikey:
              keys: [token]
";
    let def = parse_and_validate(Some("app-with-overrides.yml"), text, &cat).unwrap();
    let out = render(&def, &cat, &BTreeMap::new()).unwrap();
    let app = entity(&out, "com.example:application-service");
    assert_eq!(app.k8s_namespace.as_deref(), Some("apps-warn"));
    assert_eq!(app.ignored_dependencies, ["com.example:database"]);
    assert_eq!(app.dependency_groups, ["apps"]);
    assert!(app.secret_requirements.contains_key("app-token"));
    let cfg = &app.config_overrides[&v("1.0.0")];
    assert_eq!(cfg.overrides, "logging:\n  level: warn\nreplicas: 3\n");
    let unset: Vec<String> = cfg.unset.iter().map(ToString::to_string).collect();
    assert_eq!(unset, ["logging.format"]);
}

#[test]
fn infrastructure_module_substitutes_every_field() {
    let cat = catalog();
    let def = module(&cat, "infrastructure-module");
    assert_eq!(
        render(&def, &cat, &BTreeMap::new()).unwrap_err(),
        RenderError::MissingVariables(vec!["exampleValue".into(), "targetAccountId".into()])
    );
    let out = render(&def, &cat, &required_values(&def.name)).unwrap();
    let e = &out[0];
    assert_eq!(e.kind, EntityKind::TerraformModule);
    assert_eq!(e.entity_name, "application-infrastructure");
    assert_eq!(e.account_id.as_deref(), Some("123456789012"));
    assert_eq!(e.k8s_namespace, None);
    assert_eq!(e.dependency_groups, ["application"]);
    assert_eq!(
        e.dependency_group_overrides["com.example:networking-module"],
        ["networking"]
    );
    let o = overrides(e, "1.0.0");
    assert_eq!(at(&o, "variables.exampleVariable"), &Value::from("hello"));
    assert_eq!(at(&o, "subpath"), &Value::from("infrastructure"));
}

#[test]
fn restrictions_and_uninstall_marks() {
    let cat = catalog();
    assert!(
        !module(&cat, "new-installations-restricted-module")
            .restrictions
            .new_installations_allowed
    );
    assert!(
        !module(&cat, "entity-overrides-restricted-module")
            .restrictions
            .allow_entity_overrides
    );
    let marked = module(&cat, "uninstall-marked-module");
    let u = marked.entities[0]
        .marked_for_uninstallation
        .as_ref()
        .unwrap();
    assert_eq!(
        (u.min_version.as_ref(), u.unmanage_after_uninstall.as_ref()),
        (None, None)
    );
    let min = module(&cat, "uninstall-min-version-module");
    let u = min.entities[0].marked_for_uninstallation.as_ref().unwrap();
    assert_eq!(u.min_version, Some(v("1.45.0")));
}

fn rendered_config(
    cat: &Catalog,
    name: &str,
    text: Option<&str>,
) -> BTreeMap<Version, ModuleConfig> {
    let def = match text {
        Some(t) => parse_definition(None, t).unwrap(),
        None => module(cat, name),
    };
    let out = render(&def, cat, &BTreeMap::new()).unwrap();
    out[0].config_overrides.clone()
}

#[test]
fn spec_m13_worked_example_from_the_fixtures() {
    let cat = catalog();
    let none = BTreeMap::new();
    // The entity's config as the earlier module created it.
    let before = rendered_config(&cat, "sync-example-before-module", None);
    let entity = sync_config(SyncMode::Merge, None, &before, &none).unwrap();
    let three = v("3.0.0");
    assert_eq!(entity[&three], "conf:\n  key1: a\n  key2: b\n  key3: c\n");

    let module_cfg = rendered_config(&cat, "sync-example-module", None);
    let sync = |mode, existing: &BTreeMap<Version, String>, m: &BTreeMap<Version, ModuleConfig>| {
        sync_config(mode, Some(existing), m, &none).unwrap()[&three].clone()
    };
    let merge = sync(SyncMode::Merge, &entity, &module_cfg);
    assert_eq!(merge, "conf:\n  key1: x\n  key2: b\n  key4: d\n");
    let enabled = sync(SyncMode::Enabled, &entity, &module_cfg);
    assert_eq!(enabled, "conf:\n  key1: x\n  key4: d\n");
    let disabled = sync(SyncMode::Disabled, &entity, &module_cfg);
    assert_eq!(disabled, "conf:\n  key1: a\n  key2: b\n  key3: c\n");
    // A new entity gets the module's overrides in every mode.
    for mode in [SyncMode::Enabled, SyncMode::Merge, SyncMode::Disabled] {
        let created = sync_config(mode, None, &module_cfg, &none).unwrap();
        assert_eq!(created[&three], "conf:\n  key1: x\n  key4: d\n");
    }

    // Users cannot override module keys, nor set unset ones.
    let edit = |text: &str| BTreeMap::from([(three.clone(), text.to_string())]);
    check_user_edit(&module_cfg, &edit("conf: {key1: x, key2: mine, key4: d}")).unwrap();
    let err = check_user_edit(&module_cfg, &edit("conf: {key1: y, key2: b, key4: d}")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "3.0.0: conf.key1 is controlled by module sync-example-module"
    );
    assert!(matches!(
        check_user_edit(&module_cfg, &edit("conf: {key1: x, key3: c, key4: d}")),
        Err(ConfigSyncError::Unset { .. })
    ));

    // Then key1 is dropped from the module.
    let text: String = fixture("sync-example-module.yml")
        .lines()
        .filter(|l| l.trim() != "key1: x")
        .map(|l| format!("{l}\n"))
        .collect();
    let dropped = rendered_config(&cat, "sync-example-module", Some(&text));
    let as_map = |s: &str| BTreeMap::from([(three.clone(), s.to_string())]);
    assert_eq!(sync(SyncMode::Merge, &as_map(&merge), &dropped), merge);
    assert_eq!(
        sync(SyncMode::Enabled, &as_map(&enabled), &dropped),
        "conf:\n  key4: d\n"
    );
    assert_eq!(
        sync(SyncMode::Disabled, &as_map(&disabled), &dropped),
        disabled
    );
    // ... and key1 becomes the user's.
    check_user_edit(&dropped, &edit("conf: {key1: mine, key2: b, key4: d}")).unwrap();
}

#[test]
fn install_config_overrides_apply_only_at_creation() {
    // SPEC M14.
    let cat = catalog();
    let def = module(&cat, "install-config-module");
    let out = render(&def, &cat, &BTreeMap::new()).unwrap();
    let e = &out[0];
    assert_eq!(e.sync_mode, SyncMode::Merge);
    let created = sync_config(
        e.sync_mode,
        None,
        &e.config_overrides,
        &e.install_config_overrides,
    )
    .unwrap();
    assert_eq!(
        created[&v("2.0.0")],
        "feature-flag: enabled\nresources:\n  requests:\n    cpu: 8\n    memory: 4Gi\n"
    );
    // Afterwards the entity owns the install keys: edits to them are allowed, and a sync
    // keeps them.
    let edited = BTreeMap::from([(
        v("2.0.0"),
        "feature-flag: enabled\nresources:\n  requests:\n    cpu: 2\n".to_string(),
    )]);
    check_user_edit(&e.config_overrides, &edited).unwrap();
    let later = sync_config(
        e.sync_mode,
        Some(&edited),
        &e.config_overrides,
        &e.install_config_overrides,
    )
    .unwrap();
    assert_eq!(later, edited);
}

/// `(path, fragment)` of a fixture's `# expect:` line.
fn expectation(file: &str, text: &str) -> (String, String) {
    let first = text.lines().next().unwrap_or_default();
    let rest = first
        .strip_prefix("# expect: ")
        .unwrap_or_else(|| panic!("{file}: first line is not `# expect: <path>: <fragment>`"));
    let (path, fragment) = rest
        .split_once(": ")
        .unwrap_or_else(|| panic!("{file}: expectation has no `: `"));
    (path.to_string(), fragment.to_string())
}

#[test]
fn invalid_corpus_is_refused_with_the_expected_error() {
    let cat = catalog();
    let corpus = fixtures("invalid");
    assert!(corpus.len() >= 25, "only {} invalid fixtures", corpus.len());
    for (file, text) in &corpus {
        let (path, fragment) = expectation(file, text);
        let errs = match parse_and_validate(Some(file), text, &cat) {
            Ok(_) => panic!("{file}: accepted"),
            Err(e) => e,
        };
        let found = errs
            .iter()
            .find(|e| e.path == path && e.message.contains(&fragment))
            .unwrap_or_else(|| panic!("{file}: want `{path}: ...{fragment}...`, got:\n{errs}"));
        assert!(found.line.is_some(), "{file}: no line in {found}");
        // The line is where the path is (or its nearest enclosing field; the end of the
        // text for a syntax error found there).
        let line = found.line.unwrap() as usize;
        assert!(
            line >= 1 && line <= text.lines().count() + 1,
            "{file}: {found}"
        );
    }
}

#[test]
fn error_display_names_path_line_and_column() {
    let text = fs::read_to_string(dir("invalid").join("helm-missing-namespace.yml")).unwrap();
    let errs = parse_definition(Some("helm-missing-namespace.yml"), &text).unwrap_err();
    assert_eq!(
        errs.to_string(),
        "entities[1].helmChart.k8sNamespace: required (line 9, column 5)"
    );
    // Several problems: all reported, one per line.
    let text = "\
name: two-problems
entities:
  - type: helmChart
    helmChart:
      productId: com.example:a
  - type: terraformModule
    terraformModule:
      productId: com.example:b
      k8sNamespace: default
";
    let errs = parse_definition(None, text).unwrap_err();
    assert_eq!(
        errs.to_string(),
        "entities[0].helmChart.k8sNamespace: required (line 4, column 5)\n\
         entities[1].terraformModule.k8sNamespace: not allowed for terraformModule entities: \
         only helm charts have a namespace (line 9, column 7)"
    );
}

#[test]
fn oversized_definition_is_refused_before_parsing() {
    let base = fixture("control-plane-module.yml");
    let padding = MAX_DEFINITION_BYTES - base.len();
    let at_limit = format!("{base}#{}", "x".repeat(padding - 1));
    assert_eq!(at_limit.len(), MAX_DEFINITION_BYTES);
    parse_definition(Some("control-plane-module.yml"), &at_limit).unwrap();
    let over = format!("{at_limit}x");
    let errs = parse_definition(None, &over).unwrap_err();
    assert_eq!(
        errs.first().message,
        format!(
            "definition is {} bytes, at most 262144 bytes allowed",
            MAX_DEFINITION_BYTES + 1
        )
    );
    assert_eq!(errs.first().path, "");
    // Even when the excess is broken YAML: it is not read.
    let broken = format!("{}: [", "k".repeat(MAX_DEFINITION_BYTES));
    assert!(errs_contain(&broken, "at most 262144 bytes allowed"));
}

fn errs_contain(text: &str, fragment: &str) -> bool {
    parse_definition(None, text)
        .unwrap_err()
        .iter()
        .any(|e| e.message.contains(fragment))
}
