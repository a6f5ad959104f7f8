//! Config overrides documents (SPEC M4, M13, M14): the YAML text of `configOverrides` and
//! `installConfigOverrides`, a mapping of versions to `{overrides: <mapping>}`, and the
//! per-version [`ModuleConfig`] a rendered module holds: the overrides it sets, the key paths
//! it controls and the key paths it `{{ unset }}`s.
//!
//! YAML emitted here is canonical: mapping keys sorted at every level, so the same config
//! always gives the same text.

use std::collections::BTreeMap;
use std::fmt;

use semver::Version;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

use super::error::quote;
use super::placeholder::is_unset;
use crate::yaml_budget::{self, Document, YamlRefusal};

/// A path of mapping keys inside an overrides mapping, displayed joined by `.`
/// (`conf.key1`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeyPath(pub Vec<String>);

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

impl KeyPath {
    /// Parses `a.b.c` (keys without dots only; for tests and messages).
    pub fn dotted(path: &str) -> Self {
        KeyPath(path.split('.').map(str::to_string).collect())
    }
}

/// What a module sets under one version key of an entity's config overrides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleConfig {
    /// The overrides, placeholders substituted and `{{ unset }}` keys removed, as canonical
    /// YAML mapping text.
    pub overrides: String,
    /// Leaf key paths of `overrides`: the keys the module controls (under MERGE users may
    /// not change them).
    pub controlled: Vec<KeyPath>,
    /// Key paths the module removes with `{{ unset }}` (under MERGE users may not set them).
    pub unset: Vec<KeyPath>,
    /// The module that sets them (`control-plane-module`, or `parent/sub`), for messages.
    pub module: String,
}

/// A problem with a config overrides document: the message and, when known, the 1-based
/// line inside the document's own text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DocError {
    pub message: String,
    /// 1-based line in the document's text.
    pub line: Option<u32>,
    /// 1-based column in the document's text, with `line`.
    pub column: Option<u32>,
}

impl DocError {
    fn new(message: impl Into<String>) -> Self {
        DocError {
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

/// What a value is, for messages.
pub(crate) fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a sequence",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The text of a scalar mapping key; `None` for a collection or tagged key.
pub(crate) fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".to_string()),
        _ => None,
    }
}

/// A YAML library error as a [`DocError`], its own location moved out of the message.
fn yaml_error(err: &serde_yaml_ng::Error) -> DocError {
    let mut message = err.to_string();
    let location = err.location();
    if let Some(l) = &location {
        let suffix = format!(" at line {} column {}", l.line(), l.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    DocError {
        message: format!("invalid YAML: {message}"),
        line: location.as_ref().map(|l| n(l.line())),
        column: location.as_ref().map(|l| n(l.column())),
    }
}

/// A refusal of [`yaml_budget::check`] as a [`DocError`].
fn refusal_error(refusal: &YamlRefusal) -> DocError {
    match refusal {
        YamlRefusal::Syntax(e) => yaml_error(e),
        YamlRefusal::Budget(e) => DocError {
            message: e.reason(),
            line: Some(e.line),
            column: Some(e.column),
        },
    }
}

/// Parses a config overrides document into version → overrides mapping (with any
/// `{{ unset }}` values still in). Every structural problem is reported.
pub(crate) fn parse_document(text: &str) -> Result<BTreeMap<Version, Mapping>, Vec<DocError>> {
    let checked =
        yaml_budget::check(Document::ConfigOverrides, text).map_err(|e| vec![refusal_error(&e)])?;
    let doc: Value = checked.parse().map_err(|e| vec![yaml_error(&e)])?;
    let top = match doc {
        Value::Mapping(m) if !m.is_empty() => m,
        Value::Mapping(_) | Value::Null => {
            return Err(vec![DocError::new(
                "is empty: expected a mapping of versions, e.g. \"2.0.0\": {overrides: {...}}",
            )])
        }
        other => {
            return Err(vec![DocError::new(format!(
                "must be a mapping of versions, e.g. \"2.0.0\": {{overrides: {{...}}}}, got {}",
                describe(&other)
            ))])
        }
    };
    let mut out = BTreeMap::new();
    let mut errors = Vec::new();
    for (key, value) in top {
        let Value::String(key_str) = &key else {
            let shown = key_text(&key).unwrap_or_else(|| describe(&key).to_string());
            errors.push(DocError::new(format!(
                "key {} is not a version: write versions as quoted strings, e.g. \"2.0.0\"",
                quote(&shown)
            )));
            continue;
        };
        let version = match Version::parse(key_str) {
            Ok(v) => v,
            Err(e) => {
                errors.push(DocError::new(format!(
                    "key {} is not a semantic version: {e}",
                    quote(key_str)
                )));
                continue;
            }
        };
        let want = "expected `overrides:` holding a mapping";
        let Value::Mapping(mut block) = value else {
            errors.push(DocError::new(format!(
                "\"{version}\": {want}, got {}",
                describe(&value)
            )));
            continue;
        };
        let overrides = block.shift_remove("overrides");
        for (extra, _) in block {
            let shown = key_text(&extra).unwrap_or_else(|| describe(&extra).to_string());
            errors.push(DocError::new(format!(
                "\"{version}\": unknown key {} ({want} only)",
                quote(&shown)
            )));
        }
        match overrides {
            Some(Value::Mapping(m)) => {
                if let Some(bad) = first_collection_key(&m) {
                    errors.push(DocError::new(format!(
                        "\"{version}\".overrides: keys must be scalars, found {bad} as a key"
                    )));
                } else {
                    out.insert(version, m);
                }
            }
            Some(other) => errors.push(DocError::new(format!(
                "\"{version}\".overrides: must be a mapping, got {}",
                describe(&other)
            ))),
            None => errors.push(DocError::new(format!(
                "\"{version}\": {want}; `overrides` is missing"
            ))),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The first non-scalar key anywhere in `m`, described.
fn first_collection_key(m: &Mapping) -> Option<&'static str> {
    for (k, v) in m {
        if key_text(k).is_none() {
            return Some(describe(k));
        }
        if let Value::Mapping(inner) = v {
            if let Some(bad) = first_collection_key(inner) {
                return Some(bad);
            }
        }
    }
    None
}

/// How many mapping values (at any depth) are exactly `{{ unset }}`.
pub(crate) fn count_unset(m: &Mapping) -> usize {
    m.values()
        .map(|v| match v {
            Value::String(s) if is_unset(s) => 1,
            Value::Mapping(inner) => count_unset(inner),
            _ => 0,
        })
        .sum()
}

/// Splits `{{ unset }}` values out of `m`: returns `m` without them (mappings emptied by the
/// removal are removed too) and their key paths.
fn split_unset(m: Mapping, prefix: &[String], unset: &mut Vec<KeyPath>) -> Mapping {
    let mut out = Mapping::new();
    for (k, v) in m {
        let mut path = prefix.to_vec();
        path.push(key_text(&k).unwrap_or_default());
        match v {
            Value::String(s) if is_unset(&s) => unset.push(KeyPath(path)),
            Value::Mapping(inner) if !inner.is_empty() => {
                let kept = split_unset(inner, &path, unset);
                if !kept.is_empty() {
                    out.insert(k, Value::Mapping(kept));
                }
            }
            other => {
                out.insert(k, other);
            }
        }
    }
    out
}

/// Leaf key paths of `m`: keys whose value is not a non-empty mapping.
pub(crate) fn leaf_paths(m: &Mapping, prefix: &[String], out: &mut Vec<KeyPath>) {
    for (k, v) in m {
        let mut path = prefix.to_vec();
        path.push(key_text(k).unwrap_or_default());
        match v {
            Value::Mapping(inner) if !inner.is_empty() => leaf_paths(inner, &path, out),
            _ => out.push(KeyPath(path)),
        }
    }
}

/// Why an overrides text is not a mapping, or a mapping cannot be written as YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverridesError {
    /// Not YAML, past a limit, or not writable: the YAML library's message (kept as text:
    /// the errors that carry this one are `Clone` and `Eq`, the library's error is not).
    #[error("{0}")]
    Yaml(String),
    /// YAML, but not a mapping: what it is (`a sequence`).
    #[error("expected a mapping, got {0}")]
    NotAMapping(&'static str),
}

/// The [`ModuleConfig`] of one version's overrides mapping (unset values still in).
pub(crate) fn finalize(module: &str, raw: Mapping) -> Result<ModuleConfig, OverridesError> {
    let mut unset = Vec::new();
    let kept = split_unset(raw, &[], &mut unset);
    let mut controlled = Vec::new();
    leaf_paths(&kept, &[], &mut controlled);
    controlled.sort();
    unset.sort();
    Ok(ModuleConfig {
        overrides: emit(&kept)?,
        controlled,
        unset,
        module: module.to_string(),
    })
}

/// Parses an entity's overrides text (one version's mapping): empty text or null is an
/// empty mapping.
pub(crate) fn parse_mapping(text: &str) -> Result<Mapping, OverridesError> {
    let checked = yaml_budget::check(Document::ConfigOverrides, text)
        .map_err(|e| OverridesError::Yaml(e.to_string()))?;
    match checked.parse::<Value>() {
        Ok(Value::Mapping(m)) => Ok(m),
        Ok(Value::Null) => Ok(Mapping::new()),
        Ok(other) => Err(OverridesError::NotAMapping(describe(&other))),
        Err(e) => Err(OverridesError::Yaml(e.to_string())),
    }
}

/// `v` with every mapping's keys sorted, recursively.
fn sorted(v: Value) -> Value {
    match v {
        Value::Mapping(m) => Value::Mapping(sorted_mapping(m)),
        Value::Sequence(items) => Value::Sequence(items.into_iter().map(sorted).collect()),
        Value::Tagged(mut t) => {
            t.value = sorted(std::mem::take(&mut t.value));
            Value::Tagged(t)
        }
        other => other,
    }
}

fn sorted_mapping(m: Mapping) -> Mapping {
    let mut entries: Vec<(String, Value, Value)> = m
        .into_iter()
        .map(|(k, v)| {
            let order = key_text(&k).unwrap_or_else(|| format!("{k:?}"));
            (order, k, sorted(v))
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.into_iter().map(|(_, k, v)| (k, v)).collect()
}

/// Canonical YAML text of `m` (keys sorted at every level).
pub(crate) fn emit(m: &Mapping) -> Result<String, OverridesError> {
    serde_yaml_ng::to_string(&Value::Mapping(sorted_mapping(m.clone())))
        .map_err(|e| OverridesError::Yaml(e.to_string()))
}

/// Deep-merges `top` into `base`: mappings merge key by key, anything else in `top`
/// replaces what `base` has.
pub(crate) fn merge(base: &mut Mapping, top: &Mapping) {
    for (k, v) in top {
        match (base.get_mut(k), v) {
            (Some(Value::Mapping(b)), Value::Mapping(t)) => merge(b, t),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The key of `m` whose text is `segment`.
fn find_key(m: &Mapping, segment: &str) -> Option<Value> {
    m.keys()
        .find(|k| key_text(k).as_deref() == Some(segment))
        .cloned()
}

/// The value at `path` in `m`.
pub(crate) fn get_path<'a>(m: &'a Mapping, path: &KeyPath) -> Option<&'a Value> {
    let (last, parents) = path.0.split_last()?;
    let mut cur = m;
    for seg in parents {
        match cur.get(find_key(cur, seg)?) {
            Some(Value::Mapping(inner)) => cur = inner,
            _ => return None,
        }
    }
    cur.get(find_key(cur, last)?)
}

/// Removes the value at `path` from `m`, if there is one.
pub(crate) fn remove_path(m: &mut Mapping, path: &KeyPath) {
    let Some((first, rest)) = path.0.split_first() else {
        return;
    };
    let Some(key) = find_key(m, first) else {
        return;
    };
    if rest.is_empty() {
        m.shift_remove(&key);
    } else if let Some(Value::Mapping(inner)) = m.get_mut(&key) {
        remove_path(inner, &KeyPath(rest.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> Mapping {
        parse_mapping(text).unwrap()
    }

    #[test]
    fn document_structure() {
        let ok = parse_document("\"2.0.0\":\n  overrides:\n    a: 1\n\"1.0.0\": {overrides: {}}\n")
            .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[&Version::new(2, 0, 0)], map("a: 1"));
        for (text, want) in [
            ("", "is empty"),
            ("[]", "got a sequence"),
            ("a: {overrides: {}}", "key \"a\" is not a semantic version"),
            ("1.0: {overrides: {}}", "key \"1.0\" is not a version"),
            (
                "\"1.0.0\": 3",
                "expected `overrides:` holding a mapping, got a number",
            ),
            ("\"1.0.0\": {overrides: {}, x: 1}", "unknown key \"x\""),
            (
                "\"1.0.0\": {overrides: [1]}",
                "overrides: must be a mapping, got a sequence",
            ),
            ("\"1.0.0\": {other: 1}", "`overrides` is missing"),
            ("\"1.0.0\": {overrides: {[a]: 1}}", "keys must be scalars"),
            ("a: b: c", "invalid YAML"),
            ("\"1.0.0\": {overrides: {a: 1, a: 2}}", "duplicate entry"),
        ] {
            let errs = parse_document(text).unwrap_err();
            assert!(
                errs.iter().any(|e| e.message.contains(want)),
                "{text:?}: {errs:?}"
            );
        }
        let errs = parse_document("x: 1\n\"1.0.0\":\n  overrides: {a: b: c}\n").unwrap_err();
        assert_eq!(errs[0].line, Some(3), "{errs:?}");
    }

    #[test]
    fn finalize_splits_unset_and_sorts() {
        let raw =
            map("conf:\n  key3: \"{{ unset }}\"\n  key1: x\n  key4: d\nb: {c: \"{{unset}}\"}\n");
        assert_eq!(count_unset(&raw), 2);
        let cfg = finalize("m", raw).unwrap();
        assert_eq!(cfg.overrides, "conf:\n  key1: x\n  key4: d\n");
        let shown = |v: &[KeyPath]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(shown(&cfg.controlled), ["conf.key1", "conf.key4"]);
        assert_eq!(shown(&cfg.unset), ["b.c", "conf.key3"]);
    }

    #[test]
    fn merge_get_remove() {
        let mut base = map("conf: {key1: a, key2: b}\nlist: [1]\n");
        merge(&mut base, &map("conf: {key1: x, key9: z}\nlist: [2]\n"));
        assert_eq!(base, map("conf: {key1: x, key2: b, key9: z}\nlist: [2]\n"));
        let p = KeyPath::dotted("conf.key2");
        assert_eq!(get_path(&base, &p), Some(&Value::String("b".into())));
        remove_path(&mut base, &p);
        assert_eq!(get_path(&base, &p), None);
        assert_eq!(get_path(&base, &KeyPath::dotted("list.x")), None);
        assert_eq!(
            emit(&base).unwrap(),
            "conf:\n  key1: x\n  key9: z\nlist:\n- 2\n"
        );
    }
}
