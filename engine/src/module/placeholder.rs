//! Placeholders in module templates (SPEC M3, M13): `{{ moduleVariable.NAME }}` is replaced by
//! a variable's value, textually; `{{ unset }}` (config overrides only) removes a key. Any
//! other `{{ … }}` is an error, so a typo never reaches an entity as literal text.

use std::collections::BTreeSet;

use super::error::quote;
use super::variable::is_variable_name;

/// The namespace of variable placeholders.
pub const VARIABLE_NAMESPACE: &str = "moduleVariable";

/// What one placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind<'a> {
    /// `{{ moduleVariable.NAME }}`.
    Variable(&'a str),
    /// `{{ unset }}`.
    Unset,
}

/// One well-formed placeholder: the byte range of `{{ … }}` in the text and its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placeholder<'a> {
    pub start: usize,
    pub end: usize,
    pub kind: Kind<'a>,
}

/// The placeholders of `text`, and a message for each malformed one.
pub(crate) fn scan(text: &str) -> (Vec<Placeholder<'_>>, Vec<String>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find("{{") {
        let start = from + rel;
        let Some(close) = text[start + 2..].find("}}") else {
            errors.push(format!(
                "unclosed placeholder {}: expected `}}}}`",
                quote(&text[start..])
            ));
            break;
        };
        let end = start + 2 + close + 2;
        let whole = &text[start..end];
        let inner = text[start + 2..end - 2].trim();
        match inner.split_once('.') {
            _ if inner == "unset" => found.push(Placeholder {
                start,
                end,
                kind: Kind::Unset,
            }),
            Some((VARIABLE_NAMESPACE, name)) if is_variable_name(name) => found.push(Placeholder {
                start,
                end,
                kind: Kind::Variable(name),
            }),
            Some((VARIABLE_NAMESPACE, "")) => errors.push(format!(
                "malformed placeholder {}: the variable name is missing",
                quote(whole)
            )),
            Some((VARIABLE_NAMESPACE, name)) => errors.push(format!(
                "malformed placeholder {}: {} is not a variable name",
                quote(whole),
                quote(name)
            )),
            Some((namespace, _)) => errors.push(format!(
                "unknown placeholder namespace {} in {}: only `{{{{ {VARIABLE_NAMESPACE}.NAME }}}}` \
                 and `{{{{ unset }}}}` are supported",
                quote(namespace),
                quote(whole)
            )),
            None => errors.push(format!(
                "unknown placeholder {}: only `{{{{ {VARIABLE_NAMESPACE}.NAME }}}}` and \
                 `{{{{ unset }}}}` are supported",
                quote(whole)
            )),
        }
        from = end;
    }
    (found, errors)
}

/// The distinct variable names `placeholders` reference, sorted.
pub(crate) fn variables<'a>(placeholders: &[Placeholder<'a>]) -> BTreeSet<&'a str> {
    placeholders
        .iter()
        .filter_map(|p| match p.kind {
            Kind::Variable(name) => Some(name),
            Kind::Unset => None,
        })
        .collect()
}

/// The longest text a substitution may produce: no longer than the largest document a party
/// may send ([`super::MAX_DEFINITION_BYTES`]). Values repeat at every placeholder that names
/// them, so without it a short template and a long value multiply.
pub const MAX_SUBSTITUTED_BYTES: usize = 256 * 1024;

/// A substitution refused because its text would be longer than [`MAX_SUBSTITUTED_BYTES`];
/// nothing was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "with its placeholders filled in, the text would be {bytes} bytes, at most \
     {MAX_SUBSTITUTED_BYTES} bytes allowed"
)]
pub(crate) struct TooLong {
    /// How long it would have been.
    pub bytes: usize,
}

/// `text` with each variable placeholder replaced by `value(name)`; `{{ unset }}` and text
/// outside placeholders are kept as they are. Its length is known before it is built: a
/// result over [`MAX_SUBSTITUTED_BYTES`] is refused.
pub(crate) fn substitute<'v>(
    text: &str,
    placeholders: &[Placeholder<'_>],
    mut value: impl FnMut(&str) -> &'v str,
) -> Result<String, TooLong> {
    let mut bytes = text.len();
    for p in placeholders {
        if let Kind::Variable(name) = p.kind {
            bytes = bytes
                .saturating_sub(p.end - p.start)
                .saturating_add(value(name).len());
        }
    }
    if bytes > MAX_SUBSTITUTED_BYTES {
        return Err(TooLong { bytes });
    }
    let mut out = String::with_capacity(bytes);
    let mut at = 0;
    for p in placeholders {
        if let Kind::Variable(name) = p.kind {
            out.push_str(&text[at..p.start]);
            out.push_str(value(name));
            at = p.end;
        }
    }
    out.push_str(&text[at..]);
    Ok(out)
}

/// Whether `value` is exactly one `{{ unset }}` (spaces inside the braces allowed).
pub(crate) fn is_unset(value: &str) -> bool {
    value
        .strip_prefix("{{")
        .and_then(|v| v.strip_suffix("}}"))
        .is_some_and(|inner| inner.trim() == "unset")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_substitutes() {
        let text = "ns: {{ moduleVariable.ns }}-{{moduleVariable.suffix}} k: \"{{ unset }}\"";
        let (found, errors) = scan(text);
        assert!(errors.is_empty(), "{errors:?}");
        let kinds: Vec<Kind> = found.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [Kind::Variable("ns"), Kind::Variable("suffix"), Kind::Unset]
        );
        assert_eq!(
            variables(&found).into_iter().collect::<Vec<_>>(),
            ["ns", "suffix"]
        );
        let out = substitute(text, &found, |name| if name == "ns" { "prod" } else { "a" });
        assert_eq!(out.unwrap(), "ns: prod-a k: \"{{ unset }}\"");
        // A value repeated at many placeholders: refused before it is built.
        let many = "{{ moduleVariable.v }}".repeat(1_000);
        let (found, _) = scan(&many);
        let long = "x".repeat(1_000);
        let err = substitute(&many, &found, |_| &long).unwrap_err();
        assert_eq!(err.bytes, 1_000_000);
        assert!(err.to_string().contains("at most 262144 bytes"), "{err}");
        assert!(is_unset("{{ unset }}") && is_unset("{{unset}}"));
        assert!(!is_unset("x {{ unset }}") && !is_unset("{{ unset }} "));
    }

    #[test]
    fn malformed_placeholders_are_errors() {
        for (text, want) in [
            ("{{ moduleVariable. }}", "the variable name is missing"),
            ("{{ moduleVariable.a.b }}", "\"a.b\" is not a variable name"),
            ("{{ foo.x }}", "unknown placeholder namespace \"foo\""),
            ("{{ bar }}", "unknown placeholder \"{{ bar }}\""),
            ("a {{ moduleVariable.x", "unclosed placeholder"),
        ] {
            let (found, errors) = scan(text);
            assert!(found.is_empty(), "{text}");
            assert_eq!(errors.len(), 1, "{text}");
            assert!(errors[0].contains(want), "{text}: {}", errors[0]);
        }
        // Single braces are plain text (regexes, JSON).
        assert_eq!(scan("a{1} {x}"), (vec![], vec![]));
    }
}
