//! Parse budgets (issue 51, docs/SECURITY.md "Budgets"): every parser of a document a party
//! sends — release manifests, canary resources, rollout policies, module definitions, the
//! config-override texts inside them (publishing and the `module_dry_run` query), an
//! entity's config overrides — is fed the alias bomb, a quadratic alias ladder and 100k-deep
//! nesting (as deep as its size limit allows), each as large as that parser accepts. Each is
//! refused with the limit it passed, within a time bound and an allocation bound; a valid
//! document of the largest size stays within the same bounds.

use std::time::{Duration, Instant};

use hub_engine::canary::{parse_canary, MAX_CANARY_BYTES};
use hub_engine::module::{parse_definition, MAX_DEFINITION_BYTES};
use hub_engine::release::{parse_manifest, MAX_MANIFEST_BYTES};
use hub_engine::rollout_policy::{parse_rollout_policy, MAX_POLICY_BYTES};
use hub_engine::{Command, EntityKind, Request, State};
use hub_fuzz::{measure, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Slowest acceptable answer (debug build, a loaded 2-core machine; the parses take tens of
/// milliseconds at most).
const TIME: Duration = Duration::from_secs(3);

/// Most any one parse may allocate at its peak: a few MiB per document, linear in its size.
const MEMORY: usize = 16 << 20;

/// The size limit of `SetConfigOverrides`' text (the engine's `MAX_CONFIG_BYTES`).
const MAX_CONFIG_BYTES: usize = 64 << 10;

/// Nine anchors, each nine aliases of the one before: 9^9 nodes from 400 bytes.
fn alias_bomb() -> String {
    let mut s = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
    let mut prev = 'a';
    for name in 'b'..='i' {
        let item = format!("*{prev}");
        s.push_str(&format!("{name}: &{name} [{}]\n", vec![item; 9].join(",")));
        prev = name;
    }
    s
}

/// The quadratic ladder within `len` bytes: each anchor one step longer than the one before
/// (`[*a(i-1), x]`), so the last expands to as many nodes as there are lines and all of them
/// together to the square. Each rung also nests one deeper, so depth refuses it first.
fn ladder(len: usize) -> String {
    let mut s = String::from("a0: &a0 [x]\n");
    for i in 1.. {
        let line = format!("a{i}: &a{i} [*a{}, x]\n", i - 1);
        if s.len() + line.len() > len {
            break;
        }
        s.push_str(&line);
    }
    s
}

/// One anchor of n items, repeated n times, within `len` bytes.
fn square(len: usize) -> String {
    let n = len / 6;
    format!(
        "a: &a [{}]\nb: [{}]\n",
        vec!["x"; n].join(","),
        vec!["*a"; n].join(",")
    )
}

/// A flat ladder within `len` bytes: an anchor of 1,000 items, then rungs of ten aliases of
/// it, each rung 10,000 nodes.
fn flat_ladder(len: usize) -> String {
    let mut s = format!("w: &w [{}]\n", vec!["x"; 1_000].join(","));
    let rung = ["*w"; 10].join(",");
    for i in 0.. {
        let line = format!("r{i}: [{rung}]\n");
        if s.len() + line.len() > len {
            break;
        }
        s.push_str(&line);
    }
    s
}

/// Nesting as deep as 100,000 or as `len` bytes allow, in flow and in block style.
fn deep(len: usize) -> Vec<String> {
    let n = 100_000.min(len - 16);
    vec![
        format!("a: {}", "[".repeat(n)),
        "{a: ".repeat(n / 4),
        format!("a:\n{}", "- ".repeat(n / 2)),
    ]
}

/// The hostile documents within `len` bytes, each with the words its refusal must have.
fn hostile(len: usize) -> Vec<(String, &'static str)> {
    let aliases = "values once aliases are expanded";
    let nesting = "nesting deeper than 128";
    let mut out = vec![(alias_bomb(), aliases)];
    out.extend(deep(len).into_iter().map(|d| (d, nesting)));
    out.extend([
        (ladder(len), nesting),
        (flat_ladder(len), aliases),
        (square(len), aliases),
    ]);
    for (text, _) in &out {
        assert!(text.len() <= len, "{} > {len}", text.len());
    }
    out
}

/// What one parse cost and answered.
struct Cost {
    took: Duration,
    peak: usize,
    error: Option<String>,
}

fn cost(text: &str, parse: impl FnOnce(&str) -> Result<(), String>) -> Cost {
    let started = Instant::now();
    let (out, peak) = measure(|| parse(text));
    Cost {
        took: started.elapsed(),
        peak,
        error: out.err(),
    }
}

/// What is wrong with `cost` of a `len`-byte document (nothing when within bounds).
fn over_bounds(what: &str, len: usize, cost: &Cost) -> Option<String> {
    (cost.took > TIME || cost.peak > MEMORY).then(|| {
        format!(
            "{what}: a {len}-byte document took {:?} and allocated {} MiB",
            cost.took,
            cost.peak >> 20
        )
    })
}

/// Runs `parse` on `text`, asserting the time and memory bounds; its error, if any.
fn bounded(
    what: &str,
    text: &str,
    parse: impl FnOnce(&str) -> Result<(), String>,
) -> Option<String> {
    let cost = cost(text, parse);
    if let Some(over) = over_bounds(what, text.len(), &cost) {
        panic!("{over}");
    }
    cost.error
}

/// Feeds every hostile document of up to `len` bytes to `parse`: each refused, naming the
/// limit, within bounds. Every document is tried before any failure is reported.
fn refuses_hostile(what: &str, len: usize, mut parse: impl FnMut(&str) -> Result<(), String>) {
    let mut failures = Vec::new();
    for (text, want) in hostile(len) {
        let cost = cost(&text, &mut parse);
        let mut failed = Vec::from_iter(over_bounds(what, text.len(), &cost));
        match cost.error {
            Some(e) if e.contains(want) => {}
            Some(e) => failed.push(format!("{what}: {text:.40?}: {e:.200} (wanted {want:?})")),
            None => failed.push(format!("{what}: accepted {text:.40?}")),
        }
        // Printed as found: a parse without a budget may not come back.
        for f in &failed {
            eprintln!("{f}");
        }
        failures.extend(failed);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A module definition with one entity whose `configOverrides` is `config`.
fn definition_with_config(config: &str) -> String {
    let mut def = String::from(
        "name: budget-module\nentities:\n  - type: helmChart\n    helmChart:\n      \
         productId: com.example:web\n      k8sNamespace: web\n      configOverrides: |\n",
    );
    for line in config.lines() {
        def.push_str("        ");
        def.push_str(line);
        def.push('\n');
    }
    def
}

/// A state with one entity, for config overrides.
fn state() -> State {
    let mut s = State::new();
    let commands = [
        Command::CreateEnvironment {
            name: "prod".into(),
            description: String::new(),
        },
        Command::CreateEntity {
            environment: "prod".into(),
            kind: EntityKind::HelmChart,
            name: "web".into(),
            product_id: "com.example:web".into(),
            k8s_namespace: Some("web".into()),
            account_id: None,
            release_channel: None,
        },
    ];
    for (i, command) in commands.into_iter().enumerate() {
        let out = s.apply(
            &Request {
                command,
                time_ms: 1,
                request_id: None,
            },
            i as u64 + 1,
        );
        assert!(out.result.is_ok(), "{:?}", out.result);
    }
    s
}

fn set_config(s: &mut State, config: &str) -> Result<(), String> {
    let before = s.digest();
    let out = s.apply(
        &Request {
            command: Command::SetConfigOverrides {
                entity: "eid:prod:helmChart:web".into(),
                version: "1.0.0".into(),
                config: Some(config.to_string()),
            },
            time_ms: 2,
            request_id: None,
        },
        3,
    );
    match out.result {
        Ok(_) => Ok(()),
        Err(e) => {
            assert_eq!(s.digest(), before, "a refused config changed the state");
            Err(e.to_string())
        }
    }
}

#[test]
fn release_manifests() {
    refuses_hostile("release manifest", MAX_MANIFEST_BYTES, |t| {
        parse_manifest(t).map(drop).map_err(|e| e.to_string())
    });
}

#[test]
fn canary_resources() {
    refuses_hostile("canary resource", MAX_CANARY_BYTES, |t| {
        parse_canary(t).map(drop).map_err(|e| e.to_string())
    });
}

#[test]
fn rollout_policies() {
    refuses_hostile("rollout policy", MAX_POLICY_BYTES, |t| {
        parse_rollout_policy(t).map(drop).map_err(|e| e.to_string())
    });
}

#[test]
fn module_definitions() {
    let parse = |t: &str| {
        parse_definition(None, t)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    refuses_hostile("module definition", MAX_DEFINITION_BYTES, parse);
    // The position index repeats parents' keys in every path.
    let long = long_paths(MAX_DEFINITION_BYTES);
    let err = bounded("module definition", &long, parse).expect("refused");
    assert!(
        err.contains("the paths of its nodes take more than"),
        "{err}"
    );
}

/// Long keys over many nodes, within `len` bytes: twelve levels of 1,000-character keys, then
/// short keys under them, each indexed with a 12 KB path.
fn long_paths(len: usize) -> String {
    let mut s = String::from("name: m\nvariables:\n");
    for level in 1..=12 {
        s.push_str(&format!("{}{}:\n", "  ".repeat(level), "k".repeat(1_000)));
    }
    let indent = "  ".repeat(13);
    for i in 0.. {
        let line = format!("{indent}c{i}: v\n");
        if s.len() + line.len() > len {
            break;
        }
        s.push_str(&line);
    }
    s
}

/// The config overrides text inside a definition, as `PublishModule` and the
/// `module_dry_run` query read it (half the definition's limit: its lines are indented).
#[test]
fn module_config_texts() {
    let state = State::new();
    refuses_hostile("module config text", MAX_DEFINITION_BYTES / 2, |t| {
        let def = definition_with_config(t);
        assert!(def.len() <= MAX_DEFINITION_BYTES, "{}", def.len());
        state
            .prepare_module_publish(None, &def)
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

#[test]
fn entity_config_overrides() {
    let mut s = state();
    refuses_hostile("entity config", MAX_CONFIG_BYTES, |t| set_config(&mut s, t));
}

/// Valid documents of the largest size each parser takes stay within the same bounds.
#[test]
fn large_valid_documents_are_cheap() {
    let keys = |len: usize| -> String {
        let mut s = String::new();
        for i in 0.. {
            let line = format!("key{i}: value{i}\n");
            if s.len() + line.len() > len {
                break;
            }
            s.push_str(&line);
        }
        s
    };
    let mut s = state();
    let config = keys(MAX_CONFIG_BYTES);
    assert_eq!(
        bounded("entity config", &config, |t| set_config(&mut s, t)),
        None
    );
    let overrides: String = keys(MAX_DEFINITION_BYTES / 2)
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let def = definition_with_config(&format!("\"1.0.0\":\n  overrides:\n{overrides}"));
    let state = State::new();
    let out = bounded("module definition", &def, |t| {
        state
            .prepare_module_publish(None, t)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    assert_eq!(out, None);
}

/// Apply `command` at index `index`; its error, if refused (the state unchanged then).
fn apply(s: &mut State, command: Command, index: u64) -> Result<(), String> {
    let before = s.digest();
    let out = s.apply(
        &Request {
            command,
            time_ms: 2,
            request_id: None,
        },
        index,
    );
    out.result.map(drop).map_err(|e| {
        assert_eq!(s.digest(), before, "a refused command changed the state");
        e.to_string()
    })
}

/// A definition `m` whose variable `v` is `variable` (YAML of its block, indented 4), then as
/// many entities as fit, each with a small config text naming `v`.
fn many_texts(variable: &str) -> String {
    let mut def = format!("name: m\nvariables:\n  v:\n{variable}entities:\n");
    for n in 0.. {
        let entity = format!(
            "  - type: helmChart\n    helmChart:\n      productId: g:p{n}\n      \
             k8sNamespace: ns\n      configOverrides: '\"1.0.0\": {{overrides: \
             {{a: \"{{{{ moduleVariable.v }}}}\"}}}}'\n"
        );
        if def.len() + entity.len() > MAX_DEFINITION_BYTES {
            break;
        }
        def.push_str(&entity);
    }
    def
}

/// Module variables repeat wherever a placeholder names them: what validation and rendering
/// fill in is budgeted, not what the definition holds.
#[test]
fn module_variables() {
    let publish = |s: &State, t: &str| {
        s.prepare_module_publish(None, t)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let state = State::new();
    // A 100 KB default named by a thousand small texts: 100 MB with sample values in.
    let long_default = format!(
        "    type: string\n    string:\n      defaultValue: {}\n",
        "x".repeat(100_000)
    );
    let err = bounded("long default", &many_texts(&long_default), |t| {
        publish(&state, t)
    })
    .expect("refused");
    assert!(
        err.contains("config texts with sample values in come to more than 1048576 bytes"),
        "{err:.300}"
    );
    // A short default and 63 other values of 2 KB: the trials of each text stop at the budget.
    let values: Vec<String> = std::iter::once("a".to_string())
        .chain((1..64).map(|i| format!("v{i}{}", "y".repeat(2_000))))
        .collect();
    let options = format!(
        "    type: options\n    options:\n      values: [{}]\n      defaultValue: a\n",
        values.join(", ")
    );
    let out = bounded("many values", &many_texts(&options), |t| publish(&state, t));
    assert!(out.is_none(), "{:.300}", out.unwrap_or_default());
    // Installed with a 4 KiB value, placeholders repeated in many texts: the render stops.
    let placeholders = "{{ moduleVariable.v }}".repeat(60);
    let mut def = String::from(
        "name: m\nvariables:\n  v:\n    type: string\n    string:\n      description: v\n\
         entities:\n",
    );
    for n in 0.. {
        let entity = format!(
            "  - type: helmChart\n    helmChart:\n      productId: g:p{n}\n      \
             k8sNamespace: ns\n      configOverrides: '\"1.0.0\": {{overrides: \
             {{a: \"{placeholders}\"}}}}'\n"
        );
        if def.len() + entity.len() > MAX_DEFINITION_BYTES {
            break;
        }
        def.push_str(&entity);
    }
    let mut s = State::new();
    let env = Command::CreateEnvironment {
        name: "prod".into(),
        description: String::new(),
    };
    apply(&mut s, env, 1).unwrap();
    let publish_module = Command::PublishModule {
        file_name: None,
        yaml: def.clone(),
    };
    assert_eq!(
        bounded("publish", &def, |_| apply(&mut s, publish_module, 2)),
        None
    );
    let install = Command::InstallModule {
        environment: "prod".into(),
        module: "m".into(),
        version: None,
        variables: [("v".to_string(), "z".repeat(4_096))].into(),
        actor: "operator/admin".into(),
    };
    let err = bounded("install", &def, |_| apply(&mut s, install, 3)).expect("refused");
    assert!(
        err.contains("config texts of this installation, filled in, come to more than"),
        "{err:.300}"
    );
}
