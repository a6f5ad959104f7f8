//! Errors of YAML documents operators write (canary resources, module definitions; SPEC S3):
//! each names the YAML path of the offending field (`spec.analysis.stepWeights[2]`) and, when
//! known, its line and column. Shared by `hub-engine`'s parsers (canary resources, module
//! definitions, rollout policies) and the agent's (process specs, canary names).

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
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, YamlError> {
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
pub fn from_serde(err: &serde_yaml_ng::Error) -> YamlError {
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
pub fn quote(s: &str) -> String {
    const MAX: usize = 64;
    let count = s.chars().count();
    if count <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}... ({count} characters)")
    }
}

/// The top-level kind of a YAML document, found without building its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YamlShape {
    /// Empty, or `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number.
    Number,
    /// A string.
    String,
    /// A sequence.
    Sequence,
    /// A mapping.
    Mapping,
    /// A tagged value.
    Tagged,
}

impl YamlShape {
    /// What an error message calls it ("a mapping", ...).
    pub fn describe(self) -> &'static str {
        match self {
            YamlShape::Null => "null",
            YamlShape::Bool => "a boolean",
            YamlShape::Number => "a number",
            YamlShape::String => "a string",
            YamlShape::Sequence => "a sequence",
            YamlShape::Mapping => "a mapping",
            YamlShape::Tagged => "a tagged value",
        }
    }
}

/// The top-level kind of `text`, or the document-level error (syntax, nesting or alias
/// limits, several documents, a mapping with a duplicate key). Nested values are checked
/// and skipped, not built, so aliases that expand to millions of nodes cost no memory (a
/// `serde_yaml_ng::Value` parse of the same text can allocate hundreds of megabytes).
///
/// Aliases still cost time as the library replays them, so the walk stops after
/// [`MAX_NODES_PER_BYTE`] nodes per input byte (plus a small allowance): a document that
/// expands further is refused as an alias bomb. Texts reach it only through
/// [`crate::yaml_budget::CheckedYaml::shape`], after their budget was checked.
pub fn yaml_shape(text: &str) -> Result<YamlShape, serde_yaml_ng::Error> {
    use serde::de::Deserializer;
    let budget = (text.len() as u64)
        .saturating_mul(MAX_NODES_PER_BYTE)
        .saturating_add(10_000);
    NODES_LEFT.with(|left| left.set(budget));
    serde_yaml_ng::Deserializer::from_str(text).deserialize_any(ShapeVisitor)
}

/// How many nodes [`yaml_shape`] visits per input byte before it refuses the document.
pub const MAX_NODES_PER_BYTE: u64 = 16;

thread_local! {
    /// The nodes the current [`yaml_shape`] walk may still visit (one walk per thread at a
    /// time: the walk is synchronous).
    static NODES_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one visited node; an error once the walk's budget is spent.
fn visit_node<E: serde::de::Error>() -> Result<(), E> {
    NODES_LEFT.with(|left| match left.get().checked_sub(1) {
        Some(n) => {
            left.set(n);
            Ok(())
        }
        None => Err(E::custom(
            "the document expands to too many values (aliases repeat too much)",
        )),
    })
}

/// Visits one value: its shape, with every nested mapping checked for duplicate keys.
struct ShapeVisitor;

/// A nested value, checked like the document and then dropped.
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        visit_node::<D::Error>()?;
        d.deserialize_any(ShapeVisitor).map(|_| Checked)
    }
}

/// A mapping key: its text when it is a scalar (complex keys are checked, not compared).
struct Key(Option<String>);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_unit<E>(self) -> Result<Key, E> {
                Ok(Key(Some("~".into())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(Some(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(Some(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(Some(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(Some(v.to_string())))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(Some(v.to_string())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Key, A::Error> {
                ShapeVisitor.visit_seq(seq).map(|_| Key(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Key, A::Error> {
                ShapeVisitor.visit_map(map).map(|_| Key(None))
            }
            fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Key, A::Error> {
                ShapeVisitor.visit_enum(data).map(|_| Key(None))
            }
        }
        visit_node::<D::Error>()?;
        d.deserialize_any(KeyVisitor)
    }
}

impl<'de> serde::de::Visitor<'de> for ShapeVisitor {
    type Value = YamlShape;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<YamlShape, E> {
        Ok(YamlShape::Null)
    }
    fn visit_none<E>(self) -> Result<YamlShape, E> {
        Ok(YamlShape::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<YamlShape, E> {
        Ok(YamlShape::Bool)
    }
    fn visit_i64<E>(self, _: i64) -> Result<YamlShape, E> {
        Ok(YamlShape::Number)
    }
    fn visit_u64<E>(self, _: u64) -> Result<YamlShape, E> {
        Ok(YamlShape::Number)
    }
    fn visit_f64<E>(self, _: f64) -> Result<YamlShape, E> {
        Ok(YamlShape::Number)
    }
    fn visit_str<E>(self, _: &str) -> Result<YamlShape, E> {
        Ok(YamlShape::String)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<YamlShape, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(YamlShape::Sequence)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<YamlShape, A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            if let Some(key) = key {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format_args!(
                        "duplicate entry with key {key:?}"
                    )));
                }
            }
            map.next_value::<Checked>()?;
        }
        Ok(YamlShape::Mapping)
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<YamlShape, A::Error> {
        use serde::de::VariantAccess;
        let (serde::de::IgnoredAny, variant) = data.variant::<serde::de::IgnoredAny>()?;
        variant.newtype_variant::<Checked>()?;
        Ok(YamlShape::Tagged)
    }
}

#[cfg(test)]
mod shape_tests {
    use super::*;

    #[test]
    fn shapes_of_documents() {
        assert_eq!(yaml_shape("").unwrap(), YamlShape::Null);
        assert_eq!(
            yaml_shape("a: [1, 2]\nb: {c: d}\n").unwrap(),
            YamlShape::Mapping
        );
        assert_eq!(yaml_shape("- 1\n- x\n").unwrap(), YamlShape::Sequence);
        assert_eq!(yaml_shape("7").unwrap(), YamlShape::Number);
        assert_eq!(yaml_shape("x").unwrap(), YamlShape::String);
        assert_eq!(yaml_shape("true").unwrap(), YamlShape::Bool);
        assert_eq!(yaml_shape("!t {a: 1}").unwrap(), YamlShape::Tagged);
        assert!(yaml_shape("a: [").is_err());
        assert!(yaml_shape("a: 1\n---\nb: 2\n").is_err());
        let cut = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n\
                   c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n\
                   e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n";
        let bomb = yaml_shape(cut).unwrap_err().to_string();
        assert!(bomb.contains("too many values"), "{bomb}");
        let dup = yaml_shape("a:\n  b: 1\n  b: 2\n").unwrap_err().to_string();
        assert!(dup.contains("duplicate entry with key \"b\""), "{dup}");
    }
}
