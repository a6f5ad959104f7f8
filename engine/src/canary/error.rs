//! Errors of canary resources (SPEC K1, S3): the shared YAML error types
//! ([`crate::yaml_error`]) under the canary's names.

pub(super) use crate::yaml_error::{from_serde, quote};
pub use crate::yaml_error::{YamlError as CanaryError, YamlErrors as CanaryErrors};

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
