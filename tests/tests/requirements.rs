//! Requirement ids (docs/REQUIREMENTS.md) stay true to the code.
//!
//! - Every citation of the form `SPEC P6`, `SPEC C7, M5`, `SPEC M8–M16`, `SPEC K` (a family)
//!   or `SPEC "Vocabulary"` (a section) in the repository's sources and docs names something
//!   docs/REQUIREMENTS.md defines; a failure names each citation that does not, with its file
//!   and line.
//! - The help of every binary, every subcommand included, cites no requirement id, and
//!   neither does any string literal outside the engine (SPEC O4): ids are for people reading
//!   the code, operators read what they mean.
//!
//! The scan reads the files on disk, so it needs no git; the help test runs the built
//! binaries (`cargo build --workspace --bins` first, as for every test here).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use hub_tests::{bin_dir, run_with_limit};

/// The word that starts a citation. Kept in one place so that this file's own examples
/// below are built from it and are not citations themselves.
const WORD: &str = "SPEC";

/// Files whose text is scanned for citations.
const EXTENSIONS: &[&str] = &["rs", "proto", "md", "sh", "toml", "yml", "yaml"];

/// Directories never scanned (build output, VCS data, editor and tool caches).
const SKIP_DIRS: &[&str] = &["target", "node_modules"];

/// Sources whose string literals may still cite ids (none: every user-facing message is
/// checked).
const STRINGS_NOT_YET_CHECKED: &[&str] = &[];

fn repo_root() -> PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .parent()
    .expect("tests/ has a parent")
    .to_path_buf()
}

// ---------------------------------------------------------------------------------------------
// Citations

/// One thing a citation names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Cited {
    /// A requirement, e.g. `P6`.
    Id(char, u32),
    /// An inclusive range, e.g. `M8–M16`.
    Range(char, u32, char, u32),
    /// A whole family, e.g. `K`.
    Family(char),
    /// A quoted section, e.g. `"Vocabulary"`.
    Section(String),
}

impl std::fmt::Display for Cited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cited::Id(l, n) => write!(f, "{l}{n}"),
            Cited::Range(a, m, b, n) => write!(f, "{a}{m}–{b}{n}"),
            Cited::Family(l) => write!(f, "{l}"),
            Cited::Section(s) => write!(f, "\"{s}\""),
        }
    }
}

/// A citation found in a file: its 1-based line and what it names (empty: `SPEC` followed
/// by something that is not an id).
#[derive(Debug)]
struct Citation {
    line: usize,
    items: Vec<Cited>,
}

/// Skips spaces; across a line break also the next line's indentation and comment leader
/// (`//`, `///`, `//!`, `#`, `*`), so a list may wrap inside a comment.
fn skip_gap(s: &[char], mut i: usize) -> usize {
    loop {
        while i < s.len() && (s[i] == ' ' || s[i] == '\t') {
            i += 1;
        }
        if i < s.len() && (s[i] == '\n' || s[i] == '\r') {
            while i < s.len() && s[i].is_whitespace() {
                i += 1;
            }
            for leader in ["//!", "///", "//", "#", "*"] {
                let l: Vec<char> = leader.chars().collect();
                if s[i..].starts_with(&l) {
                    i += l.len();
                    break;
                }
            }
            continue;
        }
        return i;
    }
}

/// `P6` at `i`: the letter, the number and the index after it.
fn id_at(s: &[char], i: usize) -> Option<(char, u32, usize)> {
    let letter = *s.get(i)?;
    if !letter.is_ascii_uppercase() {
        return None;
    }
    let mut j = i + 1;
    while j < s.len() && s[j].is_ascii_digit() {
        j += 1;
    }
    if j == i + 1 || s.get(j).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
        return None;
    }
    let n = s[i + 1..j].iter().collect::<String>().parse().ok()?;
    Some((letter, n, j))
}

/// One item at `i` (`first`: a bare family letter is accepted only as the first item, so a
/// capitalised word after a comma is not read as one).
fn item_at(s: &[char], i: usize, first: bool) -> Option<(Cited, usize)> {
    if s.get(i) == Some(&'"') {
        let end = s[i + 1..].iter().position(|&c| c == '"' || c == '\n')? + i + 1;
        if s[end] != '"' {
            return None;
        }
        return Some((Cited::Section(s[i + 1..end].iter().collect()), end + 1));
    }
    if let Some((l, n, j)) = id_at(s, i) {
        // A range: `M8–M16` or `M8-M16`, spaces around the dash allowed.
        let mut k = j;
        while s.get(k) == Some(&' ') {
            k += 1;
        }
        if matches!(s.get(k), Some('–') | Some('-')) {
            let mut k = k + 1;
            while s.get(k) == Some(&' ') {
                k += 1;
            }
            if let Some((l2, n2, end)) = id_at(s, k) {
                return Some((Cited::Range(l, n, l2, n2), end));
            }
        }
        return Some((Cited::Id(l, n), j));
    }
    let letter = *s.get(i)?;
    let next = s.get(i + 1);
    if first && letter.is_ascii_uppercase() && !next.is_some_and(|c| c.is_alphanumeric()) {
        return Some((Cited::Family(letter), i + 1));
    }
    None
}

/// Every citation in `text`. `SPEC` counts as a citation where it is a word of its own
/// followed by white space; `SPEC.md`, `SPEC_X` or `"SPEC"` are not citations.
fn citations(text: &str) -> Vec<Citation> {
    let s: Vec<char> = text.chars().collect();
    let word: Vec<char> = WORD.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < s.len() {
        if s[i] == '\n' {
            line += 1;
        }
        let is_word = s[i..].starts_with(&word)
            && (i == 0 || !(s[i - 1].is_alphanumeric() || s[i - 1] == '_'))
            && s.get(i + word.len()).is_some_and(|c| c.is_whitespace());
        if !is_word {
            i += 1;
            continue;
        }
        let mut items = Vec::new();
        let mut j = skip_gap(&s, i + word.len());
        if let Some((item, end)) = item_at(&s, j, true) {
            items.push(item);
            j = end;
            // More items after `,` or `and`.
            loop {
                let mut k = j;
                while s.get(k) == Some(&' ') {
                    k += 1;
                }
                let sep_end = if s.get(k) == Some(&',') {
                    k + 1
                } else if s[k..].starts_with(&['a', 'n', 'd', ' ']) {
                    k + 3
                } else {
                    break;
                };
                match item_at(&s, skip_gap(&s, sep_end), false) {
                    Some((item, end)) => {
                        items.push(item);
                        j = end;
                    }
                    None => break,
                }
            }
        }
        out.push(Citation { line, items });
        i += word.len();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Definitions

/// What docs/REQUIREMENTS.md defines: `## P — …` family headings, `### P6 — …` requirement
/// headings, and other `## …` headings as sections.
#[derive(Debug, Default)]
struct Defined {
    ids: BTreeSet<(char, u32)>,
    families: BTreeSet<char>,
    sections: BTreeSet<String>,
}

impl Defined {
    fn parse(text: &str) -> (Defined, Vec<String>) {
        let mut d = Defined::default();
        let mut problems = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if let Some(h) = line.strip_prefix("### ") {
                let s: Vec<char> = h.chars().collect();
                match id_at(&s, 0) {
                    Some((l, id, _)) => {
                        if !d.families.contains(&l) {
                            problems.push(format!("line {}: {l}{id} outside family {l}", n + 1));
                        }
                        if !d.ids.insert((l, id)) {
                            problems.push(format!("line {}: {l}{id} defined twice", n + 1));
                        }
                    }
                    None => problems.push(format!("line {}: a ### heading without an id", n + 1)),
                }
            } else if let Some(h) = line.strip_prefix("## ") {
                let mut chars = h.chars();
                match (chars.next(), chars.as_str().strip_prefix(" — ")) {
                    (Some(l), Some(_)) if l.is_ascii_uppercase() => {
                        d.families.insert(l);
                    }
                    _ => {
                        d.sections.insert(h.trim().to_string());
                    }
                }
            }
        }
        (d, problems)
    }

    /// Why `c` is not defined, if it is not.
    fn missing(&self, c: &Cited) -> Option<String> {
        match c {
            Cited::Id(l, n) if !self.ids.contains(&(*l, *n)) => {
                Some(format!("{l}{n} is not defined"))
            }
            Cited::Id(..) => None,
            Cited::Range(a, m, b, n) => {
                if a != b || m >= n {
                    return Some(format!("{c} is not a range of one family"));
                }
                let gaps: Vec<String> = (*m..=*n)
                    .filter(|i| !self.ids.contains(&(*a, *i)))
                    .map(|i| format!("{a}{i}"))
                    .collect();
                (!gaps.is_empty()).then(|| format!("{} not defined", gaps.join(", ")))
            }
            Cited::Family(l) if !self.families.contains(l) => {
                Some(format!("family {l} is not defined"))
            }
            Cited::Family(_) => None,
            Cited::Section(s) if !self.sections.contains(s) => {
                Some(format!("section \"{s}\" is not defined"))
            }
            Cited::Section(_) => None,
        }
    }
}

fn requirements() -> Defined {
    let path = repo_root().join("docs/REQUIREMENTS.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (defined, problems) = Defined::parse(&text);
    assert!(
        problems.is_empty(),
        "docs/REQUIREMENTS.md:\n  {}",
        problems.join("\n  ")
    );
    defined
}

/// Every file under the repository root with one of [`EXTENSIONS`], as (relative path, text).
fn sources() -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                let hidden = name.starts_with('.') && name != ".ci";
                if !hidden && !SKIP_DIRS.contains(&name.as_ref()) {
                    dirs.push(path);
                }
                continue;
            }
            let ext = path.extension().unwrap_or_default().to_string_lossy();
            if !EXTENSIONS.contains(&ext.as_ref()) {
                continue;
            }
            // Not UTF-8: no citations to read.
            if let Ok(text) = std::fs::read_to_string(&path) {
                let rel = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, text));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_cited_requirement_is_defined() {
    let defined = requirements();
    let mut problems = Vec::new();
    let mut cited = 0;
    for (file, text) in sources() {
        for c in citations(&text) {
            if c.items.is_empty() {
                problems.push(format!(
                    "{file}:{}: `{WORD}` without a requirement id after it",
                    c.line
                ));
            }
            for item in &c.items {
                cited += 1;
                if let Some(why) = defined.missing(item) {
                    problems.push(format!("{file}:{}: {WORD} {item}: {why}", c.line));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} citation(s) name no requirement of docs/REQUIREMENTS.md (define it there, or fix the \
         citation):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    // The scan found the repository's citations at all (hundreds of them).
    assert!(
        cited > 100,
        "only {cited} citations found: is the scan reading the sources?"
    );
}

#[test]
fn citations_are_read_in_every_form() {
    let w = WORD;
    let read = |text: String| -> Vec<String> {
        citations(&text)
            .into_iter()
            .flat_map(|c| c.items)
            .map(|i| i.to_string())
            .collect()
    };
    assert_eq!(read(format!("// ({w} P6).")), ["P6"]);
    assert_eq!(read(format!("({w} C7, M5; more)")), ["C7", "M5"]);
    assert_eq!(read(format!("{w} M8–M16 and K3-K4")), ["M8–M16", "K3–K4"]);
    assert_eq!(read(format!("({w} K; the canary)")), ["K"]);
    assert_eq!(
        read(format!("({w} \"Vocabulary\", P4, C6)")),
        ["\"Vocabulary\"", "P4", "C6"]
    );
    // A list wrapped across comment lines, and a citation split after the word.
    assert_eq!(
        read(format!("/// ({w} P2, P6,\n    /// P8)")),
        ["P2", "P6", "P8"]
    );
    assert_eq!(read(format!("//! the ({w}\n//! K10) case")), ["K10"]);
    // Words after a list are not families; other uses of the word are no citations.
    assert_eq!(read(format!("({w} S3, A test)")), ["S3"]);
    assert!(read(format!("{w}.md, {w}_ID, \"{w}\"")).is_empty());
    // Malformed: the word alone is reported as a citation without items.
    let c = citations(&format!("see the {w} text"));
    assert!(c.len() == 1 && c[0].items.is_empty(), "{c:?}");

    // Undefined things are named.
    let (d, problems) = Defined::parse("## P — Plans\n### P1 — One\n### P2 — Two\n## Vocabulary\n");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(d.missing(&Cited::Id('P', 3)).unwrap(), "P3 is not defined");
    assert_eq!(
        d.missing(&Cited::Range('P', 1, 'P', 3)).unwrap(),
        "P3 not defined"
    );
    assert!(d.missing(&Cited::Range('P', 1, 'P', 2)).is_none());
    assert!(d.missing(&Cited::Family('Q')).is_some());
    assert!(d.missing(&Cited::Section("Vocabulary".into())).is_none());
    let (_, problems) = Defined::parse("## P — Plans\n### P1 — One\n### P1 — Again\n### Q2 — X\n");
    assert_eq!(problems.len(), 2, "{problems:?}");
}

// ---------------------------------------------------------------------------------------------
// What operators see

/// The `--help` output of `bin ARGS` and of every subcommand below it, as (command, text).
fn help_tree(bin: &str, args: &mut Vec<String>, out: &mut Vec<(String, String)>) {
    let result = run_with_limit(
        Command::new(bin_dir().join(bin))
            .args(args.iter())
            .arg("--help")
            .env_remove("HUBCTL_ENDPOINTS"),
        Duration::from_secs(30),
    );
    let name = format!("{bin} {}", args.join(" ")).trim_end().to_string();
    assert!(result.success(), "{name} --help: {}", result.describe());
    let text = result.stdout.clone();
    let subcommands: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect();
    out.push((name, text));
    for sub in subcommands {
        args.push(sub);
        help_tree(bin, args, out);
        args.pop();
    }
}

#[test]
fn help_cites_no_requirement_ids() {
    let mut helps = Vec::new();
    for bin in ["hubctl", "hub-node", "hub-agent", "chaos", "hub-bench"] {
        help_tree(bin, &mut Vec::new(), &mut helps);
    }
    let hubctl = helps
        .iter()
        .filter(|(n, _)| n.starts_with("hubctl"))
        .count();
    assert!(
        hubctl > 50,
        "only {hubctl} hubctl help pages: is the walk reading them?"
    );
    let bad: Vec<String> = helps
        .iter()
        .flat_map(|(name, text)| {
            text.lines()
                .filter(|l| l.contains(WORD))
                .map(move |l| format!("{name} --help: {}", l.trim()))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "help text cites requirement ids (say what they mean; keep the id in a // comment):\n  {}",
        bad.join("\n  ")
    );
}

/// String literals outside the engine that cite an id (a line that is not a comment with a
/// citation before any `//`): error messages, log lines, help. A heuristic, not a lexer.
#[test]
fn messages_cite_no_requirement_ids() {
    let mut bad = Vec::new();
    for (file, text) in sources() {
        let in_tests = file.starts_with("tests/") || file.contains("/tests/");
        let exempt = STRINGS_NOT_YET_CHECKED.iter().any(|p| file.starts_with(p));
        if !file.ends_with(".rs") || in_tests || exempt {
            continue;
        }
        for c in citations(&text) {
            let line = text.lines().nth(c.line - 1).unwrap_or_default();
            let code = line.trim_start();
            if ["//", "/*", "*"].iter().any(|p| code.starts_with(p)) {
                continue;
            }
            let at = line.find(WORD).unwrap_or(0);
            if line.find("//").is_none_or(|comment| comment > at) {
                bad.push(format!("{file}:{}: {}", c.line, code));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "strings cite requirement ids (operators read these; keep the id in a comment):\n  {}",
        bad.join("\n  ")
    );
}
