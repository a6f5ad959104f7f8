//! Errors of module definitions (SPEC M1–M7, S3): the shared YAML error types
//! ([`crate::yaml_error`]) under the module's names.

pub(crate) use crate::yaml_error::quote;
pub use crate::yaml_error::{YamlError as DefinitionError, YamlErrors as DefinitionErrors};

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
