//! Fuzzing the engine's parsers of operator-written text (SPEC S3, docs/BENCHMARKS.md
//! "Fuzzing"): release manifests, module definitions, canary resources and config overrides
//! (through `State::apply`, as a submitted command is). Seeds are the valid and invalid
//! fixtures plus YAML built to hurt (alias expansion, deep nesting, huge scalars); they are
//! mutated byte-wise (bit flips, truncation, splices, inserts) and mixed with random bytes.
//! Every parse must return an answer (no panic, no stack overflow) within a time bound and
//! allocate a bounded amount.
//!
//! `HUB_FUZZ_CASES=N` runs N cases per target (default 300).

use std::time::Duration;

use hub_engine::canary::parse_canary;
use hub_engine::module::parse_definition;
use hub_engine::release::parse_manifest;
use hub_engine::{Command, EntityKind, Request, State};
use hub_fuzz::{measure, mutated, within, CountingAlloc};
use proptest::prelude::*;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const CASES: u32 = 300;

/// Slowest acceptable parse of a few kilobytes (generous: the machine is shared).
const PARSE_TIME: Duration = Duration::from_secs(5);

/// Most a parse of a few kilobytes may allocate at its peak.
const PARSE_MEMORY: usize = 256 << 20;

fn fixtures(dir: &str) -> Vec<Vec<u8>> {
    let root = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures")
    .join(dir);
    let mut out = Vec::new();
    for sub in ["valid", "invalid", "catalog"] {
        let Ok(entries) = std::fs::read_dir(root.join(sub)) else {
            continue;
        };
        for e in entries {
            let path = e.expect("fixture entry").path();
            out.push(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
        }
    }
    assert!(!out.is_empty(), "no fixtures in {}", root.display());
    out
}

/// YAML that has hurt parsers: alias expansion ("billion laughs"), deep nesting, long
/// scalars, odd tags and directives.
fn hostile_yaml() -> Vec<Vec<u8>> {
    let mut laughs = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let mut prev = 'a';
    for name in 'b'..='i' {
        laughs.push_str(&format!(
            "{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
        prev = name;
    }
    // Found by this fuzzer: the laughs cut short and followed by deep nesting. The extra
    // events raise the library's alias-expansion budget, so a `Value` parse of it allocated
    // 640 MB.
    let cut = laughs.find("g: &g").expect("laughs has g");
    let mut outgrown = laughs[..cut].to_string();
    outgrown.push_str("g: &g [*f,*f,*f,*f,*f,*f,*f,");
    outgrown.push_str(&"[".repeat(20_000));
    vec![
        laughs.into_bytes(),
        outgrown.into_bytes(),
        "[".repeat(20_000).into_bytes(),
        "{a: ".repeat(5_000).into_bytes(),
        "- ".repeat(5_000).into_bytes(),
        format!("name: {}\n", "x".repeat(200_000)).into_bytes(),
        b"%YAML 1.2\n%TAG ! tag:x,2000:\n--- !foo &a *a\n".to_vec(),
        b"? [a, b]\n: c\n<<: *x\n".to_vec(),
    ]
}

fn manifests() -> Vec<Vec<u8>> {
    let sha = "3f7a9c0d5e1b2a4c6d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c";
    vec![
        format!("product-group: com.example\nproduct-name: web\nproduct-version: 1.2.0\nartifacts:\n  - uri: web/web-1.2.0.tgz\n    sha256: {sha}\n").into_bytes(),
        format!("product-group: com.example\nproduct-name: api\nproduct-version: 2.0.0-rc.1+build.5\nartifacts:\n  - uri: https://registry.example/api-2.0.0.tgz\n    sha256: {sha}\nextensions:\n  product-dependencies:\n    - {{product-group: com.example, product-name: db, minimum-version: 1.0.0, maximum-version: 1.x.x, optional: false}}\n").into_bytes(),
    ]
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `parse` on `bytes` as text within the time and memory bounds.
fn check<T>(what: &str, bytes: &[u8], parse: impl FnOnce(&str) -> T) {
    let input = text(bytes);
    let (_, peak) = measure(|| within(PARSE_TIME, what, || parse(&input)));
    assert!(
        peak <= PARSE_MEMORY,
        "{what}: a {}-byte input allocated {peak} bytes",
        input.len()
    );
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

#[test]
fn hostile_seeds_are_answered_within_bounds() {
    for seed in hostile_yaml() {
        check("manifest", &seed, parse_manifest);
        check("module definition", &seed, |t| parse_definition(None, t));
        check("canary", &seed, parse_canary);
    }
}

proptest! {
    #![proptest_config(hub_fuzz::config(CASES))]

    #[test]
    fn release_manifests(bytes in mutated([manifests(), hostile_yaml()].concat())) {
        check("manifest", &bytes, parse_manifest);
    }

    #[test]
    fn module_definitions(bytes in mutated([fixtures("modules"), hostile_yaml()].concat())) {
        check("module definition", &bytes, |t| parse_definition(Some("application-module.yml"), t));
    }

    #[test]
    fn canary_resources(bytes in mutated([fixtures("canary"), hostile_yaml()].concat())) {
        check("canary", &bytes, parse_canary);
    }

    /// Config overrides are YAML checked on apply; a refused one changes nothing.
    #[test]
    fn config_overrides(bytes in mutated([
        vec![b"port: 8080\nreplicas: 2\nnested:\n  list: [1, 2, {a: b}]\n".to_vec()],
        hostile_yaml(),
    ].concat())) {
        let mut s = state();
        let before = s.digest();
        let config = text(&bytes);
        let out = within(PARSE_TIME, "config overrides", || s.apply(&Request {
            command: Command::SetConfigOverrides {
                entity: "eid:prod:helmChart:web".into(),
                version: "0.0.0".into(),
                config: Some(config),
            },
            time_ms: 2,
            request_id: None,
        }, 3));
        if out.result.is_err() {
            prop_assert_eq!(s.digest(), before);
        }
    }
}
