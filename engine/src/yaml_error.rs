//! Errors of YAML documents operators write (canary resources, module definitions; SPEC S3):
//! each names the YAML path of the offending field (`spec.analysis.stepWeights[2]`) and, when
//! known, its line and column. Shared by [`crate::canary`] and [`crate::module`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem with a YAML document (a canary resource, a module definition).
///
/// Display: `spec.analysis.stepWeights[2]: must be greater than 10`, followed by
/// ` (line 12, column 7)` when the location is known; a document-level problem has an empty
/// path and prints only the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct YamlError {
    /// YAML path of the field at fault; empty for the document as a whole.
    pub path: String,
    /// 1-based line, when known (syntax and shape errors).
    pub line: Option<u32>,
    /// 1-based column, with `line`.
    pub column: Option<u32>,
    /// What is wrong.
    pub message: String,
}

impl YamlError {
    /// An error at `path` with no location.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        YamlError {
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

impl fmt::Display for YamlError {
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

impl std::error::Error for YamlError {}

/// Every problem found with a document, in the order found: never empty. Display
/// prints one error per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct YamlErrors(Vec<YamlError>);

impl YamlErrors {
    /// The list, or `None` when `errors` is empty.
    pub fn from_vec(errors: Vec<YamlError>) -> Option<Self> {
        if errors.is_empty() {
            None
        } else {
            Some(YamlErrors(errors))
        }
    }

    /// A list of one error.
    pub fn single(error: YamlError) -> Self {
        YamlErrors(vec![error])
    }

    /// The first error.
    pub fn first(&self) -> &YamlError {
        // Invariant: the list is never empty (`from_vec` and `single` are the only builders).
        &self.0[0]
    }

    /// The errors, in order.
    pub fn as_slice(&self) -> &[YamlError] {
        &self.0
    }

    /// The errors, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, YamlError> {
        self.0.iter()
    }

    /// The errors, by value.
    pub fn into_vec(self) -> Vec<YamlError> {
        self.0
    }

    /// Mutable access for locating errors after the fact.
    pub(crate) fn iter_mut(&mut self) -> std::slice::IterMut<'_, YamlError> {
        self.0.iter_mut()
    }
}

impl<'a> IntoIterator for &'a YamlErrors {
    type Item = &'a YamlError;
    type IntoIter = std::slice::Iter<'a, YamlError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Display for YamlErrors {
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

impl std::error::Error for YamlErrors {}

/// A serde_yaml_ng error as a [`YamlError`]: the location kept, the path serde prefixes
/// its message with moved to `path`, and the field of "unknown field `x`" / "missing field
/// `x`" / "duplicate field `x`" appended to it.
pub(crate) fn from_serde(err: &serde_yaml_ng::Error) -> YamlError {
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
    let mut out = YamlError::new(path, body);
    if let Some(l) = location {
        out = out.at(
            u32::try_from(l.line()).unwrap_or(u32::MAX),
            u32::try_from(l.column()).unwrap_or(u32::MAX),
        );
    }
    out
}

/// Debug-quotes operator input for a message, cut short when long.
pub(crate) fn quote(s: &str) -> String {
    const MAX: usize = 64;
    let count = s.chars().count();
    if count <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}... ({count} characters)")
    }
}
