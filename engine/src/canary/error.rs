//! Errors of canary resources (SPEC K1, S3): each names the YAML path of the offending field
//! (`spec.analysis.stepWeights[2]`) and, when serde reported one, its line and column.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem with a canary resource.
///
/// Display: `spec.analysis.stepWeights[2]: must be greater than 10`, followed by
/// ` (line 12, column 7)` when the location is known; a document-level problem has an empty
/// path and prints only the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryError {
    /// YAML path of the field at fault; empty for the document as a whole.
    pub path: String,
    /// 1-based line, when known (syntax and shape errors).
    pub line: Option<u32>,
    /// 1-based column, with `line`.
    pub column: Option<u32>,
    /// What is wrong.
    pub message: String,
}

impl CanaryError {
    /// An error at `path` with no location.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        CanaryError {
            path: path.into(),
            line: None,
            column: None,
            message: message.into(),
        }
    }

    /// The same error located at `line`, `column` (both 1-based).
    pub fn at(mut self, line: u32, column: u32) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }
}

impl fmt::Display for CanaryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " (line {line}, column {column})"),
            (Some(line), None) => write!(f, " (line {line})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for CanaryError {}

/// Every problem found with a canary resource, in document order: never empty. Display
/// prints one error per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct CanaryErrors(Vec<CanaryError>);

impl CanaryErrors {
    /// The list, or `None` when `errors` is empty.
    pub fn from_vec(errors: Vec<CanaryError>) -> Option<Self> {
        if errors.is_empty() {
            None
        } else {
            Some(CanaryErrors(errors))
        }
    }

    /// A list of one error.
    pub fn single(error: CanaryError) -> Self {
        CanaryErrors(vec![error])
    }

    /// The first error.
    pub fn first(&self) -> &CanaryError {
        // Invariant: the list is never empty (`from_vec` and `single` are the only builders).
        &self.0[0]
    }

    /// The errors, in order.
    pub fn as_slice(&self) -> &[CanaryError] {
        &self.0
    }

    /// The errors, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, CanaryError> {
        self.0.iter()
    }

    /// The errors, by value.
    pub fn into_vec(self) -> Vec<CanaryError> {
        self.0
    }
}

impl<'a> IntoIterator for &'a CanaryErrors {
    type Item = &'a CanaryError;
    type IntoIter = std::slice::Iter<'a, CanaryError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Display for CanaryErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CanaryErrors {}

/// A serde_yaml_ng error as a [`CanaryError`]: the location kept, the path serde prefixes
/// its message with moved to `path`, and the field of "unknown field `x`" / "missing field
/// `x`" / "duplicate field `x`" appended to it.
pub(super) fn from_serde(err: &serde_yaml_ng::Error) -> CanaryError {
    let mut message = err.to_string();
    let location = err.location();
    if let Some(l) = &location {
        let suffix = format!(" at line {} column {}", l.line(), l.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    let (prefix, body) = match message.split_once(": ") {
        Some((p, b)) if !p.is_empty() && !p.contains(char::is_whitespace) && !p.contains('`') => {
            (Some(p.to_string()), b.to_string())
        }
        _ => (None, message.clone()),
    };
    let field = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .find_map(|lead| body.strip_prefix(lead))
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_string());
    let path = match (prefix, field) {
        (Some(p), Some(f)) => format!("{p}.{f}"),
        (Some(p), None) => p,
        (None, Some(f)) => f,
        (None, None) => String::new(),
    };
    let mut out = CanaryError::new(path, body);
    if let Some(l) = location {
        out = out.at(
            u32::try_from(l.line()).unwrap_or(u32::MAX),
            u32::try_from(l.column()).unwrap_or(u32::MAX),
        );
    }
    out
}

/// Debug-quotes operator input for a message, cut short when long.
pub(super) fn quote(s: &str) -> String {
    const MAX: usize = 64;
    let count = s.chars().count();
    if count <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}... ({count} characters)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_one_and_many() {
        let e =
            CanaryError::new("spec.analysis.stepWeights[2]", "must be greater than 10").at(9, 7);
        assert_eq!(
            e.to_string(),
            "spec.analysis.stepWeights[2]: must be greater than 10 (line 9, column 7)"
        );
        let doc = CanaryError::new("", "resource is empty");
        let all = CanaryErrors::from_vec(vec![e.clone(), doc]).unwrap();
        assert_eq!(
            all.to_string(),
            "spec.analysis.stepWeights[2]: must be greater than 10 (line 9, column 7)\nresource is empty"
        );
        assert_eq!(all.first(), &e);
        assert!(CanaryErrors::from_vec(Vec::new()).is_none());
    }

    #[test]
    fn serde_errors_keep_path_and_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            a: u8,
        }
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Outer {
            inner: Vec<Inner>,
        }
        let err = serde_yaml_ng::from_str::<Outer>("inner:\n  - a: 1\n    b: 2\n").unwrap_err();
        let e = from_serde(&err);
        assert_eq!(e.path, "inner[0].b");
        assert!(e.message.starts_with("unknown field `b`"), "{e}");
        assert_eq!(e.line, Some(3));
    }

    #[test]
    fn quote_cuts_long_input() {
        assert_eq!(quote("a"), "\"a\"");
        assert!(quote(&"x".repeat(100)).ends_with("(100 characters)"));
    }
}
