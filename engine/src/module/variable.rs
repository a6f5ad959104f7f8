//! Module variables (SPEC M2, M3): `string` with an optional `oneOf` or whole-value `regex`
//! constraint, `options`, and `stringPreset` (a value chosen through an options variable).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::quote;

/// Longest variable name, in characters.
pub const MAX_VARIABLE_NAME_LEN: usize = 64;

/// Largest compiled size of a `regex` constraint, in bytes; a larger one is refused.
const MAX_REGEX_SIZE: usize = 1 << 20;

/// A validated module variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variable {
    /// Free text, optionally constrained.
    String {
        /// Used when the installer gives no value; without one the value is required.
        default: Option<String>,
        /// For people.
        description: Option<String>,
        /// What values are acceptable.
        constraint: Constraint,
    },
    /// One of a fixed list of values.
    Options {
        /// The choices, in definition order; never empty, no duplicates.
        values: Vec<String>,
        /// One of `values`; without one the value is required.
        default: Option<String>,
        /// For people.
        description: Option<String>,
    },
    /// A value looked up by the value of an options variable; installers cannot set it.
    StringPreset {
        /// Name of the options variable it follows.
        options: String,
        /// Options value → this variable's value; covers every value of `options` exactly.
        mapping: BTreeMap<String, String>,
        /// For people.
        description: Option<String>,
    },
}

/// What values a `string` variable accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Constraint {
    /// Any value.
    None,
    /// One of these (never empty).
    OneOf(Vec<String>),
    /// A regular expression (as written) that must match the **whole** value.
    Regex(String),
}

/// Why a variable's value is refused ([`Constraint::check`], [`Variable::check_value`]).
/// Values and patterns are quoted (and cut short when long) as the messages show them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not one of the listed values.
    #[error("{value} is not one of {allowed}")]
    NotOneOf {
        /// The value, quoted.
        value: String,
        /// The values allowed, backquoted and comma-separated.
        allowed: String,
    },
    /// The regex does not match the whole value.
    #[error(
        "{value} does not match the regular expression {pattern} (the whole value must match)"
    )]
    NoMatch {
        /// The value, quoted.
        value: String,
        /// The pattern, quoted.
        pattern: String,
    },
    /// The constraint's regex does not compile.
    #[error(transparent)]
    Regex(#[from] InvalidRegex),
    /// A `stringPreset` is set directly.
    #[error("a stringPreset cannot be set directly; choose a value of `{options}`")]
    Preset {
        /// Its options variable.
        options: String,
    },
}

/// A regex constraint that does not compile ([`anchored_regex`]): the pattern, quoted, and
/// the last line of the regex library's message (kept as text: the error is `Clone` and
/// `Eq`, the library's is not `Eq`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid regular expression {pattern}: {why}")]
pub struct InvalidRegex {
    /// The pattern, quoted.
    pub pattern: String,
    /// What is wrong with it.
    pub why: String,
}

impl Constraint {
    /// Whether `value` is acceptable.
    pub fn check(&self, value: &str) -> Result<(), ValueError> {
        match self {
            Constraint::None => Ok(()),
            Constraint::OneOf(values) => one_of(values, value),
            Constraint::Regex(pattern) => {
                let re = anchored_regex(pattern)?;
                if re.is_match(value) {
                    Ok(())
                } else {
                    Err(ValueError::NoMatch {
                        value: quote(value),
                        pattern: quote(pattern),
                    })
                }
            }
        }
    }
}

/// Whether `value` is one of `values`.
fn one_of(values: &[String], value: &str) -> Result<(), ValueError> {
    if values.iter().any(|v| v == value) {
        Ok(())
    } else {
        Err(ValueError::NotOneOf {
            value: quote(value),
            allowed: list(values.iter().map(String::as_str)),
        })
    }
}

/// Compiles `pattern` so that it matches only the whole value: `^(?:pattern)$`. The pattern
/// is first compiled alone, so that errors describe it as written and a pattern such as
/// `a)|(b` cannot escape the anchors.
pub(crate) fn anchored_regex(pattern: &str) -> Result<regex::Regex, InvalidRegex> {
    let build = |p: &str| {
        regex::RegexBuilder::new(p)
            .size_limit(MAX_REGEX_SIZE)
            .build()
    };
    build(pattern)
        .and_then(|_| build(&format!("^(?:{pattern})$")))
        .map_err(|e| {
            // Syntax errors print the (wrapped) pattern with a caret over several lines;
            // their last line is the reason.
            let shown = e.to_string();
            let why = shown
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default()
                .trim();
            let why = why.strip_prefix("error: ").unwrap_or(why);
            InvalidRegex {
                pattern: quote(pattern),
                why: why.to_string(),
            }
        })
}

/// `a, b, c` with each item backquoted.
pub(crate) fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `name` can name a variable: a letter, then letters, digits, `_` or `-`, at most
/// [`MAX_VARIABLE_NAME_LEN`] characters. No `.`: installers address a submodule's variable
/// as `<submodule>.<variable>`.
pub fn is_variable_name(name: &str) -> bool {
    name.len() <= MAX_VARIABLE_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Variable {
    /// `string`, `options` or `stringPreset`, as spelled in YAML.
    pub fn type_name(&self) -> &'static str {
        match self {
            Variable::String { .. } => "string",
            Variable::Options { .. } => "options",
            Variable::StringPreset { .. } => "stringPreset",
        }
    }

    /// The default value, for `string` and `options`.
    pub fn default_value(&self) -> Option<&str> {
        match self {
            Variable::String { default, .. } | Variable::Options { default, .. } => {
                default.as_deref()
            }
            Variable::StringPreset { .. } => None,
        }
    }

    /// Whether `value` is acceptable for this `string` or `options` variable; a preset
    /// accepts nothing directly.
    pub fn check_value(&self, value: &str) -> Result<(), ValueError> {
        match self {
            Variable::String { constraint, .. } => constraint.check(value),
            Variable::Options { values, .. } => one_of(values, value),
            Variable::StringPreset { options, .. } => Err(ValueError::Preset {
                options: options.clone(),
            }),
        }
    }

    /// The values this variable is known to take, for checking that each of them gives valid
    /// YAML where it is substituted: `oneOf` values and the default, options values, preset
    /// mapping values. A free or regex-constrained string without default gives none.
    pub(crate) fn known_values(&self) -> Vec<&str> {
        let mut out: Vec<&str> = match self {
            Variable::String {
                default,
                constraint,
                ..
            } => {
                let mut v: Vec<&str> = default.as_deref().into_iter().collect();
                if let Constraint::OneOf(values) = constraint {
                    v.extend(values.iter().map(String::as_str));
                }
                v
            }
            Variable::Options { values, .. } => values.iter().map(String::as_str).collect(),
            Variable::StringPreset { mapping, .. } => {
                mapping.values().map(String::as_str).collect()
            }
        };
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// A type-neutral sample value per variable, for checking templates before any installer
/// value exists: the default; for a preset its value for the options default (else its
/// first mapping value); otherwise `x`.
pub(crate) fn sample_values(variables: &BTreeMap<String, Variable>) -> BTreeMap<String, String> {
    let plain = |v: &Variable| -> String {
        match v {
            Variable::String { default, .. } => default.clone(),
            Variable::Options {
                default, values, ..
            } => default.clone().or_else(|| values.first().cloned()),
            Variable::StringPreset { .. } => None,
        }
        .unwrap_or_else(|| "x".to_string())
    };
    variables
        .iter()
        .map(|(name, var)| {
            let sample = match var {
                Variable::StringPreset {
                    options, mapping, ..
                } => variables
                    .get(options)
                    .map(plain)
                    .and_then(|chosen| mapping.get(&chosen).cloned())
                    .or_else(|| mapping.values().next().cloned())
                    .unwrap_or_else(|| "x".to_string()),
                other => plain(other),
            };
            (name.clone(), sample)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_matches_the_whole_value() {
        // SPEC M2: `heap-3g` fails `\d+[kmg]`, `3g` passes.
        let c = Constraint::Regex(r"\d+[kmg]".to_string());
        assert!(c.check("3g").is_ok());
        let err = c.check("heap-3g").unwrap_err();
        assert!(matches!(err, ValueError::NoMatch { .. }), "{err}");
        assert!(err.to_string().contains("does not match"), "{err}");
        assert!(c.check("3gb").is_err());
        // Alternation stays inside the anchors.
        let c = Constraint::Regex("a|b".to_string());
        assert!(c.check("a").is_ok() && c.check("b").is_ok());
        assert!(c.check("ab").is_err() && c.check("xa").is_err());
        assert!(anchored_regex("a)|(b").is_err());
        assert_eq!(
            anchored_regex("[a-").unwrap_err().to_string(),
            "invalid regular expression \"[a-\": unclosed character class"
        );
    }

    #[test]
    fn one_of_and_options() {
        let c = Constraint::OneOf(vec!["default".into(), "ns1".into()]);
        assert!(c.check("ns1").is_ok());
        let err = c.check("ns2").unwrap_err();
        assert!(matches!(err, ValueError::NotOneOf { .. }), "{err}");
        assert_eq!(err.to_string(), "\"ns2\" is not one of `default`, `ns1`");
        let v = Variable::Options {
            values: vec!["small".into(), "large".into()],
            default: None,
            description: None,
        };
        assert!(v.check_value("small").is_ok() && v.check_value("medium").is_err());
    }

    #[test]
    fn variable_names() {
        for ok in ["a", "myNamespace", "heap_size", "x-1"] {
            assert!(is_variable_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a.b", "a b", "_a", &"a".repeat(65)] {
            assert!(!is_variable_name(bad), "{bad}");
        }
    }

    #[test]
    fn samples_follow_defaults() {
        let mut vars = BTreeMap::new();
        vars.insert(
            "profile".to_string(),
            Variable::Options {
                values: vec!["small".into(), "medium".into()],
                default: Some("medium".into()),
                description: None,
            },
        );
        vars.insert(
            "memory".to_string(),
            Variable::StringPreset {
                options: "profile".into(),
                mapping: [("small", "1Gi"), ("medium", "2Gi")]
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
                description: None,
            },
        );
        vars.insert(
            "free".to_string(),
            Variable::String {
                default: None,
                description: None,
                constraint: Constraint::None,
            },
        );
        let s = sample_values(&vars);
        assert_eq!(s["profile"], "medium");
        assert_eq!(s["memory"], "2Gi");
        assert_eq!(s["free"], "x");
    }
}
