//! Errors of module definitions (SPEC M1–M7, S3): each names the YAML path of the offending
//! field and, when the definition text is at hand, its line and column.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem with a module definition.
///
/// Display: `entities[1].helmChart.k8sNamespace: required (line 12, column 5)`; a
/// document-level problem has an empty path and prints only the message and location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefinitionError {
    /// YAML path of the field at fault (`variables.heapSize.string.defaultValue`); empty for
    /// the document as a whole.
    pub path: String,
    /// 1-based line of the field (or of its nearest enclosing field present in the text).
    pub line: Option<u32>,
    /// 1-based column, with `line`.
    pub column: Option<u32>,
    /// What is wrong.
    pub message: String,
}

impl DefinitionError {
    /// An error at `path` with no location yet.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        DefinitionError {
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

impl fmt::Display for DefinitionError {
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

impl std::error::Error for DefinitionError {}

/// Every problem found with a definition: never empty. Display prints one error per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct DefinitionErrors(Vec<DefinitionError>);

impl DefinitionErrors {
    /// The list, or `None` when `errors` is empty.
    pub fn from_vec(errors: Vec<DefinitionError>) -> Option<Self> {
        if errors.is_empty() {
            None
        } else {
            Some(DefinitionErrors(errors))
        }
    }

    /// A list of one error.
    pub fn single(error: DefinitionError) -> Self {
        DefinitionErrors(vec![error])
    }

    /// The errors, in the order found (document order for most checks).
    pub fn as_slice(&self) -> &[DefinitionError] {
        &self.0
    }

    /// The first error.
    pub fn first(&self) -> &DefinitionError {
        // Invariant: the list is never empty (`from_vec` and `single` are the only builders).
        &self.0[0]
    }

    /// The errors, by value.
    pub fn into_vec(self) -> Vec<DefinitionError> {
        self.0
    }

    /// The errors, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, DefinitionError> {
        self.0.iter()
    }

    /// Mutable access for locating errors after the fact.
    pub(crate) fn iter_mut(&mut self) -> std::slice::IterMut<'_, DefinitionError> {
        self.0.iter_mut()
    }
}

impl<'a> IntoIterator for &'a DefinitionErrors {
    type Item = &'a DefinitionError;
    type IntoIter = std::slice::Iter<'a, DefinitionError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Display for DefinitionErrors {
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

impl std::error::Error for DefinitionErrors {}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_one_and_many() {
        let e = DefinitionError::new("entities[1].helmChart.k8sNamespace", "required").at(12, 5);
        assert_eq!(
            e.to_string(),
            "entities[1].helmChart.k8sNamespace: required (line 12, column 5)"
        );
        let doc = DefinitionError::new("", "definition is empty");
        assert_eq!(doc.to_string(), "definition is empty");
        let all = DefinitionErrors::from_vec(vec![e.clone(), doc]).unwrap();
        assert_eq!(
            all.to_string(),
            "entities[1].helmChart.k8sNamespace: required (line 12, column 5)\ndefinition is empty"
        );
        assert_eq!(all.first(), &e);
        assert!(DefinitionErrors::from_vec(Vec::new()).is_none());
    }

    #[test]
    fn quote_cuts_long_input() {
        assert_eq!(quote("a"), "\"a\"");
        assert!(quote(&"x".repeat(100)).ends_with("(100 characters)"));
    }
}
