//! The crates' module graphs have no cycles: data types apart from the code that changes
//! state, each layer importing only from the ones above it (docs/ARCHITECTURE.md).
//!
//! A module is a source file (`a/b.rs` or `a/b/mod.rs` is `a/b`); it depends on every module
//! it names through `crate::…` (the longest prefix that is a file) or, inside a directory
//! module, `super::…`. Comments, test modules and test-only files do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .parent()
    .expect("tests/ sits in the repository")
    .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("readable source dir")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b` for `a/b.rs` and `a/b/mod.rs`; `None` for the crate root and test-only files.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut name = rel.to_string_lossy().replace('\\', "/");
    if let Some(dir) = name.strip_suffix("/mod") {
        name = dir.to_string();
    }
    let test_only = name == "tests" || name.ends_with("/tests") || name.contains("/tests/");
    if matches!(name.as_str(), "lib" | "main") || name.starts_with("bin/") || test_only {
        return None;
    }
    Some(name)
}

/// The identifier that starts `text`.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The modules `module` (whose source is `text`) depends on, among `known`.
fn dependencies(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let code: String = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let parent = module.rsplit_once('/').map(|(p, _)| p);
    let mut deps = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let first = ident(&code[i + 7..]);
        let rest = &code[i + 7 + first.len()..];
        let nested = rest
            .strip_prefix("::")
            .map(|r| format!("{first}/{}", ident(r)));
        match nested.filter(|n| known.contains(n)) {
            Some(n) => deps.insert(n),
            None => deps.insert(first.to_string()),
        };
    }
    if let Some(parent) = parent {
        for (i, _) in code.match_indices("super::") {
            let sibling = format!("{parent}/{}", ident(&code[i + 7..]));
            if known.contains(&sibling) {
                deps.insert(sibling);
            } else {
                deps.insert(parent.to_string());
            }
        }
    }
    deps.retain(|d| d != module && known.contains(d));
    deps
}

/// A cycle in `graph`, as the list of modules on it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            return Some(path[at..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The module graph of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: Vec<(String, String)> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).expect("readable source");
            Some((module_of(src, f)?, text))
        })
        .collect();
    let known: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    modules
        .iter()
        .map(|(m, text)| (m.clone(), dependencies(m, text, &known)))
        .collect()
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = repo_root();
    for krate in [
        "engine",
        "wire",
        "node",
        "agent",
        "raft-store",
        "tls",
        "http",
        "client",
        "hubctl",
        "chaos",
    ] {
        let graph = module_graph(&root.join(krate).join("src"));
        assert!(graph.len() > 1, "{krate}: no modules found");
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{krate}/src has a module cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_engine_state_is_changed_only_by_apply() {
    // The tables module and the data modules never import the transitions.
    let graph = module_graph(&repo_root().join("engine/src"));
    for (module, deps) in &graph {
        if !module.starts_with("apply") {
            let into_apply: Vec<_> = deps.iter().filter(|d| d.starts_with("apply")).collect();
            assert!(into_apply.is_empty(), "{module} imports {into_apply:?}");
        }
    }
}

#[test]
fn a_cycle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).map(|c| c.len()), Some(3));
    let known: BTreeSet<String> = ["state", "apply", "apply/plans"].map(String::from).into();
    assert_eq!(
        dependencies("state", "use crate::apply::plans::Tx;\n// crate::x", &known),
        ["apply/plans".to_string()].into()
    );
}

/// Functions of `text` longer than `limit` lines, by (name, first line, length). A function
/// runs from its `fn` line to the closing brace at the same indentation (the code is
/// rustfmt-formatted). Test functions (`#[test]`, `#[tokio::test]` or a proptest body within
/// the three lines above) and those with a `// Long:` reason right above them are left out.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let signature = ["pub(crate) ", "pub(super) ", "pub ", ""]
            .iter()
            .filter_map(|vis| trimmed.strip_prefix(vis))
            .map(|rest| rest.strip_prefix("async ").unwrap_or(rest))
            .find_map(|rest| rest.strip_prefix("fn "));
        let Some(signature) = signature else { continue };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        let Some(len) = lines[i + 1..]
            .iter()
            .position(|l| l.trim_end() == close)
            .map(|p| p + 2)
        else {
            continue;
        };
        let above = &lines[i.saturating_sub(3)..i];
        let is_test = above
            .iter()
            .any(|l| l.contains("#[test]") || l.contains("::test"));
        let reasoned = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("#[")
            })
            .any(|l| l.trim_start().starts_with("// Long:"));
        if len > limit && !is_test && !reasoned {
            out.push((ident(signature).to_string(), i + 1, len));
        }
    }
    out
}

/// The source files of `krates` (their `src/`) with the text before their test module, each
/// with its path; test-only files are left out.
fn non_test_code(krates: &[&str]) -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    for krate in krates {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        for file in files {
            let name = file.to_string_lossy().into_owned();
            if name.ends_with("/tests.rs") || name.contains("/tests/") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("readable source");
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default()
                .to_string();
            out.push((name, code));
        }
    }
    out
}

#[test]
fn no_long_function_without_a_reason() {
    let mut found = Vec::new();
    for (name, code) in non_test_code(&[
        "engine",
        "wire",
        "node",
        "agent",
        "raft-store",
        "tls",
        "http",
        "client",
        "hubctl",
        "chaos",
    ]) {
        for (f, line, len) in long_functions(&code, 100) {
            found.push(format!("{name}:{line}: fn {f} is {len} lines"));
        }
    }
    assert!(
        found.is_empty(),
        "functions over 100 lines need a `// Long:` reason right above them (or a split):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_long_function_is_found_unless_reasoned() {
    let body = |n: usize| "    x();\n".repeat(n);
    let plain = format!("fn big() {{\n{}}}\n", body(120));
    assert_eq!(long_functions(&plain, 100), [("big".to_string(), 1, 122)]);
    let reasoned = format!(
        "/// Doc.\n// Long: a flat match.\n#[inline]\nfn big() {{\n{}}}\n",
        body(120)
    );
    assert!(long_functions(&reasoned, 100).is_empty());
    let test = format!("#[test]\nfn big() {{\n{}}}\n", body(120));
    assert!(long_functions(&test, 100).is_empty());
    let short = format!("    pub async fn small() {{\n{}    }}\n", body(10));
    assert!(long_functions(&short, 100).is_empty());
}

/// Lines of `code` that decide by the words of an error (a status's or error's message tested
/// with `starts_with`, `contains` or `==`): what a caller does next must come from a typed
/// refusal (`hub_proto::refusal`), not from a message a person may reword.
fn message_decisions(code: &str) -> Vec<(usize, String)> {
    const READS: [&str; 5] = [
        "message().starts_with(",
        "message().contains(",
        "message() ==",
        "message.starts_with(",
        "message.contains(",
    ];
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| READS.iter().any(|r| l.contains(r)))
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

#[test]
fn no_decision_reads_the_words_of_an_error() {
    let mut found = Vec::new();
    for (name, code) in
        non_test_code(&["node", "agent", "chaos", "tls", "http", "client", "hubctl"])
    {
        for (line, text) in message_decisions(&code) {
            found.push(format!("{name}:{line}: {text}"));
        }
    }
    assert!(
        found.is_empty(),
        "decisions read the words of an error; use a typed refusal instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_decision_on_words_is_found() {
    let code = "if s.message().starts_with(\"cut off\") {}\n// s.message().contains(\"x\")\n\
                let ok = status.message() == \"no leader\";\n\
                Refused { message, .. } if message.contains(\"already exists\") => {}\n";
    let found = message_decisions(code);
    assert_eq!(
        found.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        vec![1, 3, 4],
        "{found:?}"
    );
}

/// The agent carries none of the hub's engine (issue 54 item 5): what both sides share lives
/// in `hub-wire`, so neither the agent nor the HTTP client it uses depends on `hub-engine`.
#[test]
fn the_agent_does_not_depend_on_the_engine() {
    let root = repo_root();
    for krate in ["agent", "http", "wire"] {
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml"))
            .expect("readable manifest");
        let dependencies = manifest
            .split("[dependencies]")
            .nth(1)
            .and_then(|rest| rest.split("\n[").next())
            .expect("a [dependencies] table");
        assert!(
            !dependencies.contains("hub-engine"),
            "{krate}/Cargo.toml depends on hub-engine"
        );
    }
}

/// Lines of `code` that index a JSON value by a field name (`v["plans"]`, `x["a"]["b"]`): a
/// hub answer is read as its `hub-client` struct, whose fields the compiler checks, so a
/// renamed field fails the build instead of reading `null` at run time.
fn field_lookups(code: &str) -> Vec<(usize, String)> {
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| {
            l.match_indices("[\"").any(|(at, _)| {
                l[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ']' || c == ')')
            })
        })
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

/// Lines of `code` that write a query as JSON (a `json!` literal or a JSON string): a query
/// is a typed `hub_client::answer` query (`GetPlan`, `ListPlans`, …) paired with its
/// answer's type.
fn query_literals(code: &str) -> Vec<(usize, String)> {
    code.lines()
        .enumerate()
        .filter(|(_, l)| {
            let l: String = l.chars().filter(|c| !c.is_whitespace()).collect();
            l.contains("{\"query\":") || l.contains("{\\\"query\\\":")
        })
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

/// `hubctl` and the chaos runner read the hub's answers as `hub-client`'s structs (issue 54
/// items 2 and 7): no module indexes a JSON value by a field name, except hubctl's
/// `output.rs`, the printer of the rows the commands build, and no query is a JSON literal.
#[test]
fn hubctl_and_chaos_read_answers_as_structs() {
    let mut found = Vec::new();
    for (name, code) in non_test_code(&["hubctl", "chaos"]) {
        let lookups = if name.ends_with("/output.rs") {
            Vec::new()
        } else {
            field_lookups(&code)
        };
        for (line, text) in lookups.into_iter().chain(query_literals(&code)) {
            found.push(format!("{name}:{line}: {text}"));
        }
    }
    assert!(
        found.is_empty(),
        "a hub answer read as JSON; ask a typed query (hub_client::answer) instead:\n{}",
        found.join("\n")
    );
}

/// The black-box tests ask typed queries too (issue 54 item 7): no query is written as JSON
/// anywhere under `tests/` (the wire's own bytes are pinned by `node/tests/query_wire.rs`),
/// except in `tests/tests/abuse/`, where malformed and oversized bytes are the point.
#[test]
fn the_tests_ask_typed_queries() {
    let mut files = Vec::new();
    rust_files(&repo_root().join("tests"), &mut files);
    let abuse = repo_root().join("tests/tests/abuse");
    let mut found = Vec::new();
    for file in files
        .iter()
        .filter(|f| !f.ends_with("tests/layout.rs") && !f.starts_with(&abuse))
    {
        let code = std::fs::read_to_string(file).expect("readable source");
        for (line, text) in query_literals(&code) {
            found.push(format!("{}:{line}: {text}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "a query written as JSON; ask a typed query (hub_client::answer) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_field_lookup_and_a_query_literal_are_found() {
    let code = "let v = x[\"plans\"];\nlet cols = &[\"id\", \"name\"];\n\
                // v[\"a\"]\nlet y = f()[\"a\"][\"b\"];\n\
                let q = json!({\"query\": \"plans\"});\nlet q = json!({ \"query\" : \"x\" });\n\
                let q = r#\"{\"query\":\"products\"}\"#;\nlet q = \"{\\\"query\\\":\\\"x\\\"}\";\n";
    let lines = |found: Vec<(usize, String)>| found.iter().map(|(l, _)| *l).collect::<Vec<_>>();
    assert_eq!(lines(field_lookups(code)), vec![1, 4]);
    assert_eq!(lines(query_literals(code)), vec![5, 6, 7, 8]);
}

/// `hubctl` talks to a hub only through `hub-client`: it never links the daemon.
#[test]
fn hubctl_does_not_depend_on_the_node() {
    let manifest =
        std::fs::read_to_string(repo_root().join("hubctl/Cargo.toml")).expect("readable manifest");
    assert!(
        !manifest.contains("hub-node"),
        "hubctl/Cargo.toml depends on hub-node"
    );
}
