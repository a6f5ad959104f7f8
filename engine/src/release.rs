//! Product releases (SPEC "Vocabulary", C7): the release manifest, product-dependency version
//! bounds with `1.x.x`-style wildcards, and the built-in release channels a version joins.
//!
//! A manifest is a YAML document; [`parse_manifest`] refuses unknown fields anywhere and
//! reports every problem with the YAML path of the offending field. Everything here is pure:
//! no I/O and no clock.
//!
//! Bounds compare only a version's `(major, minor, patch)`: its pre-release and build metadata
//! are ignored, so `1.0.0-rc1` satisfies a minimum of `1.0.0`. Which pre-releases an entity
//! may move to is decided by its release channel, not by dependency bounds.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use semver::Version;
use serde::{Deserialize, Deserializer, Serialize};

use crate::yaml_budget::{self, BudgetError, CheckedYaml, Document, YamlRefusal};

/// Largest manifest document accepted, in bytes; a larger one is refused before parsing.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;
/// Most artifacts one release may list.
pub const MAX_ARTIFACTS: usize = 64;
/// Most product dependencies one release may declare.
pub const MAX_DEPENDENCIES: usize = 256;
/// Longest artifact URI, in characters.
pub const MAX_URI_CHARS: usize = 2048;
/// Longest product group or product name, in characters.
pub const MAX_PRODUCT_PART_LEN: usize = 128;
/// The only `manifest-version` understood.
pub const MANIFEST_VERSION: &str = "1.0";

/// Why a manifest or bound was refused; Display is the full operator-facing message including
/// the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The document exceeds [`MAX_MANIFEST_BYTES`]; it was not parsed.
    #[error("manifest is {size} bytes, at most {max} bytes allowed")]
    TooLarge {
        /// Size of the document in bytes.
        size: usize,
        /// The limit, [`MAX_MANIFEST_BYTES`].
        max: usize,
    },
    /// The document holds no value: empty, blank, only comments, or `null`.
    #[error(
        "manifest is empty: expected a mapping with product-group, product-name, product-version"
    )]
    Empty,
    /// The document is YAML, but not a mapping of fields.
    #[error("manifest must be a YAML mapping of fields, got {found}")]
    NotMapping {
        /// What the document is instead, e.g. "a sequence".
        found: &'static str,
    },
    /// The YAML library refused the document (syntax, unknown or missing field, wrong type);
    /// the message is the library's, with its path and line.
    #[error("{message}")]
    Yaml {
        /// The library's message.
        message: String,
        /// The field path recovered from the message, when it names one.
        path: Option<String>,
    },
    /// The document passed a parse budget (nesting, alias expansion); it was not parsed.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// A field is well-typed but its value is unacceptable.
    #[error("{path}: {reason}")]
    Invalid {
        /// YAML path of the field, e.g. `artifacts[0].sha256`.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ManifestError {
    /// The YAML path of the offending field, when known ("artifacts[0].sha256").
    pub fn path(&self) -> Option<&str> {
        match self {
            ManifestError::Invalid { path, .. } => Some(path),
            ManifestError::Yaml { path, .. } => path.as_deref(),
            _ => None,
        }
    }

    fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        ManifestError::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }

    fn yaml(err: &serde_yaml_ng::Error) -> Self {
        let message = err.to_string();
        let path = yaml_error_path(&message);
        ManifestError::Yaml { message, path }
    }
}

/// Recovers the field path from a serde_yaml_ng message such as
/// "artifacts[0]: unknown field `foo`, expected ..." (gives `artifacts[0].foo`).
fn yaml_error_path(message: &str) -> Option<String> {
    let (prefix, body) = match message.split_once(": ") {
        Some((p, b)) if !p.is_empty() && !p.contains(char::is_whitespace) && !p.contains('`') => {
            (Some(p), b)
        }
        _ => (None, message),
    };
    let field = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .find_map(|lead| body.strip_prefix(lead))
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field);
    match (prefix, field) {
        (Some(p), Some(f)) => Some(format!("{p}.{f}")),
        (Some(p), None) => Some(p.to_string()),
        (None, Some(f)) => Some(f.to_string()),
        (None, None) => None,
    }
}

/// Debug-quotes operator input for a message, cut short when long.
fn quote(s: &str) -> String {
    const MAX: usize = 64;
    let count = s.chars().count();
    if count <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}... ({count} characters)")
    }
}

/// A product-dependency version bound: `1.2.3` (exact), `1.2.x`, `1.x.x` or `x.x.x` (any
/// version). Once a component is `x` every later one is `x`; pre-release suffixes are refused.
///
/// Persisted (serde) as a tuple of three optional numbers, `x` being none: `1.x.x` is
/// `[1,null,null]` in JSON. Deserialisation refuses a number after a none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "BoundRepr", into = "BoundRepr")]
pub struct VersionBound {
    major: Option<u64>,
    minor: Option<u64>,
    patch: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct BoundRepr(Option<u64>, Option<u64>, Option<u64>);

/// Why a text or a stored value is not a [`VersionBound`]. `text` is the input, quoted and
/// cut short when long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    /// Not three dot-separated numbers or `x`.
    #[error("{text} is not a version bound (expected e.g. 1.2.3, 1.2.x or 1.x.x)")]
    Shape {
        /// The input.
        text: String,
    },
    /// A `-` or `+` suffix.
    #[error(
        "{text} is not a version bound: pre-release and build suffixes are not allowed in \
         bounds (expected e.g. 1.2.3, 1.2.x or 1.x.x)"
    )]
    Suffix {
        /// The input.
        text: String,
    },
    /// A number with a leading zero.
    #[error(
        "{text} is not a version bound: leading zeros are not allowed (expected e.g. 1.2.3, \
         1.2.x or 1.x.x)"
    )]
    LeadingZero {
        /// The input.
        text: String,
    },
    /// A number after an `x`.
    #[error(
        "{text} is not a version bound: a number cannot follow an x (expected e.g. 1.2.3, \
         1.2.x or 1.x.x)"
    )]
    NumberAfterX {
        /// The input.
        text: String,
    },
    /// A number above `u64`.
    #[error(
        "{text} is not a version bound: number too large (expected e.g. 1.2.3, 1.2.x or \
         1.x.x)"
    )]
    TooLarge {
        /// The input.
        text: String,
    },
    /// A stored bound with a number after a none.
    #[error("{bound} is not a version bound: a number follows an x")]
    Stored {
        /// The bound as read.
        bound: VersionBound,
    },
}

impl From<VersionBound> for BoundRepr {
    fn from(b: VersionBound) -> Self {
        BoundRepr(b.major, b.minor, b.patch)
    }
}

impl TryFrom<BoundRepr> for VersionBound {
    type Error = BoundError;
    fn try_from(r: BoundRepr) -> Result<Self, BoundError> {
        let bound = VersionBound {
            major: r.0,
            minor: r.1,
            patch: r.2,
        };
        if (r.0.is_none() && r.1.is_some()) || (r.1.is_none() && r.2.is_some()) {
            return Err(BoundError::Stored { bound });
        }
        Ok(bound)
    }
}

impl VersionBound {
    /// Parses `1.2.3`, `1.2.x`, `1.x.x` or `x.x.x`.
    pub fn parse(s: &str) -> Result<Self, BoundError> {
        let text = || quote(s);
        if s.contains(['-', '+']) {
            return Err(BoundError::Suffix { text: text() });
        }
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() != 3 {
            return Err(BoundError::Shape { text: text() });
        }
        let mut comps = [None; 3];
        let mut seen_x = false;
        for (slot, part) in comps.iter_mut().zip(&parts) {
            if *part == "x" {
                seen_x = true;
                continue;
            }
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BoundError::Shape { text: text() });
            }
            if part.len() > 1 && part.starts_with('0') {
                return Err(BoundError::LeadingZero { text: text() });
            }
            if seen_x {
                return Err(BoundError::NumberAfterX { text: text() });
            }
            match part.parse::<u64>() {
                Ok(n) => *slot = Some(n),
                Err(_) => return Err(BoundError::TooLarge { text: text() }),
            }
        }
        Ok(VersionBound {
            major: comps[0],
            minor: comps[1],
            patch: comps[2],
        })
    }

    /// The lowest version this bound admits as a minimum: `x` read as 0.
    fn floor(&self) -> (u64, u64, u64) {
        (
            self.major.unwrap_or(0),
            self.minor.unwrap_or(0),
            self.patch.unwrap_or(0),
        )
    }

    /// Whether `(major, minor, patch)` is at or below this bound, `x` matching anything.
    fn admits_triple_as_maximum(&self, v: (u64, u64, u64)) -> bool {
        for (bound, got) in [(self.major, v.0), (self.minor, v.1), (self.patch, v.2)] {
            match bound {
                None => return true,
                Some(b) if got < b => return true,
                Some(b) if got > b => return false,
                Some(_) => {}
            }
        }
        true
    }

    /// As a minimum: `v >= bound` with `x` read as 0 (pre-release of `v` ignored).
    pub fn admits_as_minimum(&self, v: &Version) -> bool {
        (v.major, v.minor, v.patch) >= self.floor()
    }

    /// As a maximum: `v <= bound` where `x` matches anything, so `1.x.x` admits every
    /// `1.*.*` and nothing of `2.*.*` (pre-release of `v` ignored).
    pub fn admits_as_maximum(&self, v: &Version) -> bool {
        self.admits_triple_as_maximum((v.major, v.minor, v.patch))
    }
}

impl fmt::Display for VersionBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for c in [self.major, self.minor, self.patch] {
            if !first {
                f.write_str(".")?;
            }
            first = false;
            match c {
                Some(n) => write!(f, "{n}")?,
                None => f.write_str("x")?,
            }
        }
        Ok(())
    }
}

impl FromStr for VersionBound {
    type Err = BoundError;
    fn from_str(s: &str) -> Result<Self, BoundError> {
        VersionBound::parse(s)
    }
}

/// A release's dependency on another product (`extensions.product-dependencies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProductDependency {
    /// `group:name` of the product depended on.
    pub product_id: String,
    /// Lowest acceptable version.
    pub minimum: VersionBound,
    /// Highest acceptable version.
    pub maximum: VersionBound,
    /// An optional dependency is satisfied when no entity of that product exists.
    pub optional: bool,
}

impl ProductDependency {
    /// Whether `v` lies within the bounds: minimum admits it and maximum admits it.
    pub fn admits(&self, v: &Version) -> bool {
        self.minimum.admits_as_minimum(v) && self.maximum.admits_as_maximum(v)
    }
}

impl fmt::Display for ProductDependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}, {}]",
            self.product_id, self.minimum, self.maximum
        )?;
        if self.optional {
            f.write_str(" optional")?;
        }
        Ok(())
    }
}

/// One artifact of a release: where to fetch it and its checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Where the artifact is fetched from.
    pub uri: String,
    /// SHA-256 of the artifact, 64 lowercase hex digits.
    pub sha256: String,
}

/// A validated release manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseManifest {
    /// `group:name`.
    pub product_id: String,
    /// The release's version.
    pub version: Version,
    /// Artifacts to fetch, in manifest order.
    pub artifacts: Vec<Artifact>,
    /// Products this release depends on, in manifest order.
    pub dependencies: Vec<ProductDependency>,
}

/// A scalar read as text: YAML reads `1.2` as a number, and it must still be reported as a
/// bad version rather than as a type error.
struct ScalarText(String);

impl<'de> Deserialize<'de> for ScalarText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ScalarText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a version string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ScalarText, E> {
                // Debug keeps the fraction of whole numbers: 1.0 stays "1.0".
                Ok(ScalarText(format!("{v:?}")))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawManifest {
    #[serde(default)]
    manifest_version: Option<ScalarText>,
    product_group: String,
    product_name: String,
    product_version: ScalarText,
    #[serde(default)]
    artifacts: Option<Vec<RawArtifact>>,
    #[serde(default)]
    extensions: Option<RawExtensions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawArtifact {
    uri: String,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawExtensions {
    #[serde(default)]
    product_dependencies: Option<Vec<RawDependency>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawDependency {
    product_group: String,
    product_name: String,
    minimum_version: ScalarText,
    maximum_version: ScalarText,
    #[serde(default)]
    optional: bool,
}

/// Checks a product group or name: 1-128 of `a-z0-9._-`, starting with a letter or digit.
fn check_product_part(path: &str, value: &str) -> Result<(), ManifestError> {
    if value.is_empty() {
        return Err(ManifestError::invalid(path, "must not be empty"));
    }
    let count = value.chars().count();
    if count > MAX_PRODUCT_PART_LEN {
        return Err(ManifestError::invalid(
            path,
            format!("{count} characters, at most {MAX_PRODUCT_PART_LEN} allowed"),
        ));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
    if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        return Err(ManifestError::invalid(
            path,
            format!(
                "{} contains {bad:?}; only a-z, 0-9, '.', '_' and '-' are allowed",
                quote(value)
            ),
        ));
    }
    if !value.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(ManifestError::invalid(
            path,
            format!("{} must start with a letter or digit", quote(value)),
        ));
    }
    Ok(())
}

fn parse_bound(path: String, text: &ScalarText) -> Result<VersionBound, ManifestError> {
    VersionBound::parse(&text.0).map_err(|e| ManifestError::invalid(path, e.to_string()))
}

fn check_artifact(path: &str, raw: RawArtifact) -> Result<Artifact, ManifestError> {
    let uri_path = format!("{path}.uri");
    if raw.uri.is_empty() {
        return Err(ManifestError::invalid(uri_path, "must not be empty"));
    }
    let count = raw.uri.chars().count();
    if count > MAX_URI_CHARS {
        return Err(ManifestError::invalid(
            uri_path,
            format!("{count} characters, at most {MAX_URI_CHARS} allowed"),
        ));
    }
    if let Some(bad) = raw
        .uri
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ManifestError::invalid(
            uri_path,
            format!(
                "{} contains {bad:?}; whitespace is not allowed",
                quote(&raw.uri)
            ),
        ));
    }
    let sha_path = format!("{path}.sha256");
    let len = raw.sha256.chars().count();
    if len != 64 {
        return Err(ManifestError::invalid(
            sha_path,
            format!("must be 64 hex digits, got {len} characters"),
        ));
    }
    if let Some((i, bad)) = raw
        .sha256
        .chars()
        .enumerate()
        .find(|(_, c)| !c.is_ascii_hexdigit())
    {
        return Err(ManifestError::invalid(
            sha_path,
            format!("must be 64 hex digits, got {bad:?} at position {i}"),
        ));
    }
    Ok(Artifact {
        uri: raw.uri,
        sha256: raw.sha256.to_ascii_lowercase(),
    })
}

impl RawManifest {
    fn validate(self) -> Result<ReleaseManifest, ManifestError> {
        if let Some(mv) = &self.manifest_version {
            if mv.0 != MANIFEST_VERSION {
                return Err(ManifestError::invalid(
                    "manifest-version",
                    format!(
                        "{} is not supported; only \"{MANIFEST_VERSION}\" is",
                        quote(&mv.0)
                    ),
                ));
            }
        }
        check_product_part("product-group", &self.product_group)?;
        check_product_part("product-name", &self.product_name)?;
        let product_id = format!("{}:{}", self.product_group, self.product_name);
        let version = Version::parse(&self.product_version.0).map_err(|e| {
            ManifestError::invalid(
                "product-version",
                format!(
                    "{} is not a semantic version: {e}",
                    quote(&self.product_version.0)
                ),
            )
        })?;

        let raw_artifacts = self.artifacts.unwrap_or_default();
        if raw_artifacts.len() > MAX_ARTIFACTS {
            return Err(ManifestError::invalid(
                "artifacts",
                format!(
                    "{} artifacts, at most {MAX_ARTIFACTS} allowed",
                    raw_artifacts.len()
                ),
            ));
        }
        let artifacts = raw_artifacts
            .into_iter()
            .enumerate()
            .map(|(i, raw)| check_artifact(&format!("artifacts[{i}]"), raw))
            .collect::<Result<Vec<_>, _>>()?;

        let raw_deps = self
            .extensions
            .and_then(|e| e.product_dependencies)
            .unwrap_or_default();
        let list = "extensions.product-dependencies";
        if raw_deps.len() > MAX_DEPENDENCIES {
            return Err(ManifestError::invalid(
                list,
                format!(
                    "{} dependencies, at most {MAX_DEPENDENCIES} allowed",
                    raw_deps.len()
                ),
            ));
        }
        let mut dependencies = Vec::with_capacity(raw_deps.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in raw_deps.into_iter().enumerate() {
            let path = format!("{list}[{i}]");
            check_product_part(&format!("{path}.product-group"), &raw.product_group)?;
            check_product_part(&format!("{path}.product-name"), &raw.product_name)?;
            let dep_id = format!("{}:{}", raw.product_group, raw.product_name);
            let minimum = parse_bound(format!("{path}.minimum-version"), &raw.minimum_version)?;
            let maximum = parse_bound(format!("{path}.maximum-version"), &raw.maximum_version)?;
            if !maximum.admits_triple_as_maximum(minimum.floor()) {
                return Err(ManifestError::invalid(
                    format!("{path}.minimum-version"),
                    format!(
                        "{minimum} is above maximum-version {maximum}; no version satisfies both"
                    ),
                ));
            }
            if dep_id == product_id {
                return Err(ManifestError::invalid(
                    path,
                    format!("a release cannot depend on its own product {dep_id}"),
                ));
            }
            if let Some(first) = seen.insert(dep_id.clone(), i) {
                return Err(ManifestError::invalid(
                    path,
                    format!("duplicate dependency on {dep_id} (first at {list}[{first}])"),
                ));
            }
            dependencies.push(ProductDependency {
                product_id: dep_id,
                minimum,
                maximum,
                optional: raw.optional,
            });
        }
        Ok(ReleaseManifest {
            product_id,
            version,
            artifacts,
            dependencies,
        })
    }
}

/// Parses and validates a manifest document (at most [`MAX_MANIFEST_BYTES`] bytes).
pub fn parse_manifest(yaml: &str) -> Result<ReleaseManifest, ManifestError> {
    if yaml.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            size: yaml.len(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    let checked = match yaml_budget::check(Document::ReleaseManifest, yaml) {
        Ok(checked) => checked,
        Err(YamlRefusal::Budget(e)) => return Err(ManifestError::Budget(e)),
        Err(YamlRefusal::Syntax(e)) => return Err(ManifestError::yaml(&e)),
    };
    match checked.parse::<RawManifest>() {
        Ok(raw) => raw.validate(),
        Err(err) => Err(classify_yaml_error(checked, &err)),
    }
}

/// Turns an empty or non-mapping document into a clear error; anything else keeps the
/// library's message, preferring a document-level one.
fn classify_yaml_error(yaml: CheckedYaml<'_>, err: &serde_yaml_ng::Error) -> ManifestError {
    use crate::yaml_error::YamlShape;
    let found = match yaml.shape() {
        Ok(YamlShape::Null) => return ManifestError::Empty,
        Ok(YamlShape::Mapping) => return ManifestError::yaml(err),
        Ok(shape) => shape.describe(),
        // A document-level problem (syntax, nesting or alias limits, several documents)
        // matters more than what the typed parse tripped over first.
        Err(doc_err) => return ManifestError::yaml(&doc_err),
    };
    ManifestError::NotMapping { found }
}

/// The DEV channel: every release.
pub const CHANNEL_DEV: &str = "DEV";
/// The RELEASE_CANDIDATE channel: plain releases and `-rc` pre-releases.
pub const CHANNEL_RELEASE_CANDIDATE: &str = "RELEASE_CANDIDATE";
/// The RELEASE channel: plain releases only.
pub const CHANNEL_RELEASE: &str = "RELEASE";
/// The built-in channels.
pub const BUILTIN_CHANNELS: [&str; 3] = [CHANNEL_DEV, CHANNEL_RELEASE_CANDIDATE, CHANNEL_RELEASE];

const CHANNELS_RC: &[&str] = &[CHANNEL_DEV, CHANNEL_RELEASE_CANDIDATE];
const CHANNELS_DEV: &[&str] = &[CHANNEL_DEV];

/// SPEC "Vocabulary": a plain release (no pre-release; build metadata alone still counts as
/// plain) goes into all three built-in channels; an `-rc` pre-release (first pre-release
/// identifier starting with "rc", any case: `1.2.0-rc1`, `1.2.0-RC.2`) into DEV and
/// RELEASE_CANDIDATE; any other pre-release (`-beta`, `-SNAPSHOT`) into DEV only.
pub fn builtin_channels_for(v: &Version) -> &'static [&'static str] {
    if v.pre.is_empty() {
        return &BUILTIN_CHANNELS;
    }
    let first = v.pre.as_str().split('.').next().unwrap_or("");
    if first.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("rc")) {
        CHANNELS_RC
    } else {
        CHANNELS_DEV
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "3F7A9C0D5E1B2A4C6D8E0F1A2B3C4D5E6F7A8B9C0D1E2F3A4B5C6D7E8F9A0B1C";

    // The extension is the seed's example (SPEC C7).
    const VALID: &str = "\
manifest-version: \"1.0\"
product-group: com.example
product-name: web
product-version: 1.2.0
artifacts:
  - uri: https://registry.example.com/web/web-1.2.0.tar.gz
    sha256: 3F7A9C0D5E1B2A4C6D8E0F1A2B3C4D5E6F7A8B9C0D1E2F3A4B5C6D7E8F9A0B1C
extensions:
  product-dependencies:
    - product-group: com.palantir.example
      product-name: example
      minimum-version: 1.0.0
      maximum-version: 1.x.x
    - product-group: com.palantir.other
      product-name: other
      minimum-version: 2.53.1
      maximum-version: 2.x.x
";

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn bound(s: &str) -> VersionBound {
        VersionBound::parse(s).unwrap()
    }

    /// VALID with `from` replaced by `to`; fails if `from` is absent.
    fn edit(from: &str, to: &str) -> String {
        assert!(VALID.contains(from), "{from:?} not in VALID");
        VALID.replacen(from, to, 1)
    }

    #[test]
    fn seed_example_manifest_parses() {
        // SPEC C7: the seed's product-dependencies extension.
        let m = parse_manifest(VALID).unwrap();
        assert_eq!(m.product_id, "com.example:web");
        assert_eq!(m.version, v("1.2.0"));
        assert_eq!(m.artifacts.len(), 1);
        assert_eq!(m.artifacts[0].sha256, SHA.to_ascii_lowercase());
        let deps: Vec<String> = m.dependencies.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            deps,
            [
                "com.palantir.example:example [1.0.0, 1.x.x]",
                "com.palantir.other:other [2.53.1, 2.x.x]"
            ]
        );
        assert!(!m.dependencies[0].optional);

        // Minimal manifest: defaults, numbers accepted as manifest-version, optional flag.
        let m = parse_manifest(
            "manifest-version: 1.0\nproduct-group: g\nproduct-name: 0n\n\
             product-version: 0.1.0-rc.1+b7\nextensions:\n  product-dependencies:\n    \
             - {product-group: g, product-name: db, minimum-version: x.x.x,\n       \
             maximum-version: x.x.x, optional: true}\n",
        )
        .unwrap();
        assert!(m.artifacts.is_empty());
        assert_eq!(
            m.dependencies[0].to_string(),
            "g:db [x.x.x, x.x.x] optional"
        );
        assert!(m.dependencies[0].admits(&v("0.0.0")));
        assert!(m.dependencies[0].admits(&v("99.1.2")));
    }

    #[test]
    fn bounds_admit_table() {
        // SPEC C7: (minimum, maximum, version, admitted). Pre-releases compare by their
        // (major, minor, patch) only.
        let table = [
            ("1.0.0", "1.x.x", "1.0.0", true),
            ("1.0.0", "1.x.x", "1.99.3", true),
            ("1.0.0", "1.x.x", "2.0.0", false),
            ("1.0.0", "1.x.x", "0.9.9", false),
            ("1.0.0", "1.x.x", "1.0.0-rc1", true),
            ("2.53.1", "2.x.x", "2.53.1", true),
            ("2.53.1", "2.x.x", "2.60.0", true),
            ("2.53.1", "2.x.x", "2.53.0", false),
            ("2.53.1", "2.x.x", "3.0.0", false),
            ("1.0.0", "1.2.x", "1.2.99", true),
            ("1.0.0", "1.2.x", "1.3.0", false),
            ("1.0.0", "1.2.x", "1.1.7", true),
            ("1.2.x", "1.2.3", "1.2.0", true),
            ("1.2.x", "1.2.3", "1.2.4", false),
            ("1.2.x", "1.2.3", "1.1.9", false),
            ("1.x.x", "1.x.x", "1.0.0", true),
            ("x.x.x", "x.x.x", "0.0.0", true),
        ];
        for (min, max, ver, want) in table {
            let dep = ProductDependency {
                product_id: "g:n".into(),
                minimum: bound(min),
                maximum: bound(max),
                optional: false,
            };
            assert_eq!(dep.admits(&v(ver)), want, "{min}..{max} admits {ver}");
        }
    }

    #[test]
    fn bound_parse_display_and_serde() {
        for ok in ["1.2.3", "1.2.x", "1.x.x", "x.x.x", "0.0.0", "10.20.30"] {
            let b: VersionBound = ok.parse().unwrap();
            assert_eq!(b.to_string(), ok);
        }
        let bad = [
            ("1.y.x", "(expected e.g. 1.2.3, 1.2.x or 1.x.x)"),
            ("1.x.2", "a number cannot follow an x"),
            ("1.2.3-rc1", "pre-release"),
            ("1.2.3+b", "pre-release"),
            ("1.2", "not a version bound"),
            ("1.2.3.4", "not a version bound"),
            ("", "not a version bound"),
            ("01.2.3", "leading zeros"),
            ("1.X.x", "not a version bound"),
            ("+1.2.3", "pre-release"),
            (" 1.2.3", "not a version bound"),
            ("1.2.99999999999999999999", "too large"),
        ];
        for (s, want) in bad {
            let err = VersionBound::parse(s).unwrap_err().to_string();
            assert!(err.contains(want), "{s:?}: {err}");
        }
        assert_eq!(
            VersionBound::parse("1.y.x").unwrap_err(),
            BoundError::Shape {
                text: "\"1.y.x\"".into()
            }
        );
        assert_eq!(
            VersionBound::parse("1.y.x").unwrap_err().to_string(),
            "\"1.y.x\" is not a version bound (expected e.g. 1.2.3, 1.2.x or 1.x.x)"
        );
        // Persisted shape: three optional numbers.
        assert_eq!(
            serde_json::to_string(&bound("1.x.x")).unwrap(),
            "[1,null,null]"
        );
        assert_eq!(serde_json::to_string(&bound("1.2.3")).unwrap(), "[1,2,3]");
        assert!(serde_json::from_str::<VersionBound>("[null,1,null]").is_err());
        assert!(serde_json::from_str::<VersionBound>("[1,null,3]").is_err());
    }

    /// Asserts that `yaml` is refused with `fragment` in the message and `path` as the path.
    fn refused(yaml: &str, path: Option<&str>, fragment: &str) {
        let err = parse_manifest(yaml).expect_err(fragment);
        let msg = err.to_string();
        assert!(msg.contains(fragment), "want {fragment:?} in {msg:?}");
        assert_eq!(err.path(), path, "{msg}");
    }

    #[test]
    fn invalid_manifests_name_the_field() {
        // SPEC C7: a refused manifest says which field is wrong and why.
        const DEP0: &str = "extensions.product-dependencies[0]";
        const DEP1: &str = "extensions.product-dependencies[1]";
        let dep0 = |field: &str| format!("{DEP0}.{field}");
        let dep1 = |field: &str| format!("{DEP1}.{field}");

        // Unknown, missing and mistyped fields: the YAML library's message.
        let yaml = edit("product-name: web\n", "product-name: web\nowner: me\n");
        refused(&yaml, Some("owner"), "unknown field `owner`");
        let yaml = edit("    sha256:", "    foo: 1\n    sha256:");
        refused(
            &yaml,
            Some("artifacts[0].foo"),
            "artifacts[0]: unknown field `foo`",
        );
        let yaml = edit(
            "product-name: other\n",
            "product-name: other\n      note: x\n",
        );
        refused(&yaml, Some(&dep1("note")), "unknown field `note`");
        let yaml = edit("product-version: 1.2.0\n", "");
        refused(
            &yaml,
            Some("product-version"),
            "missing field `product-version`",
        );
        let yaml = edit("product-group: com.example", "product-group: [a]");
        refused(&yaml, Some("product-group"), "invalid type: sequence");
        let yaml = edit(
            "maximum-version: 2.x.x",
            "maximum-version: 2.x.x\n      optional: no",
        );
        refused(&yaml, Some(&dep1("optional")), "expected a boolean");

        // Values.
        let yaml = edit("manifest-version: \"1.0\"", "manifest-version: \"2.0\"");
        refused(&yaml, Some("manifest-version"), "\"2.0\" is not supported");
        let yaml = edit("product-version: 1.2.0", "product-version: 1.2");
        let want = "product-version: \"1.2\" is not a semantic version: ";
        refused(&yaml, Some("product-version"), want);
        let yaml = edit("product-version: 1.2.0", "product-version: abc");
        refused(
            &yaml,
            Some("product-version"),
            "\"abc\" is not a semantic version",
        );
        let yaml = edit("product-version: 1.2.0", "product-version: 1");
        refused(
            &yaml,
            Some("product-version"),
            "\"1\" is not a semantic version",
        );
        let yaml = edit("product-group: com.example", "product-group: Com.example");
        refused(&yaml, Some("product-group"), "contains 'C'");
        let yaml = edit("product-name: web", "product-name: _web");
        refused(
            &yaml,
            Some("product-name"),
            "must start with a letter or digit",
        );
        let yaml = edit("product-name: example", "product-name: \"\"");
        refused(&yaml, Some(&dep0("product-name")), "must not be empty");
        let yaml = edit(SHA, "3f7a9c0d5e1b");
        let want = "artifacts[0].sha256: must be 64 hex digits, got 12 characters";
        refused(&yaml, Some("artifacts[0].sha256"), want);
        let yaml = edit("3F7A", "3G7A");
        refused(&yaml, Some("artifacts[0].sha256"), "got 'G' at position 1");
        let yaml = edit(
            "uri: https://registry.example.com/web/web-1.2.0.tar.gz",
            "uri: ''",
        );
        refused(&yaml, Some("artifacts[0].uri"), "must not be empty");
        let yaml = edit("web-1.2.0.tar.gz", "web 1.2.0.tar.gz");
        refused(&yaml, Some("artifacts[0].uri"), "whitespace is not allowed");

        // Bounds.
        let yaml = edit("maximum-version: 2.x.x", "maximum-version: 1.y.x");
        let want = "extensions.product-dependencies[1].maximum-version: \"1.y.x\" is not a \
                    version bound (expected e.g. 1.2.3, 1.2.x or 1.x.x)";
        refused(&yaml, Some(&dep1("maximum-version")), want);
        let yaml = edit("maximum-version: 1.x.x", "maximum-version: 1.x.2");
        refused(
            &yaml,
            Some(&dep0("maximum-version")),
            "a number cannot follow an x",
        );
        let yaml = edit("minimum-version: 1.0.0", "minimum-version: 1.2.3-rc1");
        refused(&yaml, Some(&dep0("minimum-version")), "pre-release");
        let yaml = edit("maximum-version: 1.x.x", "maximum-version: 1");
        refused(
            &yaml,
            Some(&dep0("maximum-version")),
            "\"1\" is not a version bound",
        );
        let yaml = edit("minimum-version: 1.0.0", "minimum-version: 2.0.0");
        let want = "2.0.0 is above maximum-version 1.x.x";
        refused(&yaml, Some(&dep0("minimum-version")), want);

        // Dependency set.
        let other = "com.palantir.other\n      product-name: other";
        let yaml = edit(other, "com.palantir.example\n      product-name: example");
        let want = "duplicate dependency on com.palantir.example:example \
                    (first at extensions.product-dependencies[0])";
        refused(&yaml, Some(DEP1), want);
        let yaml = edit(other, "com.example\n      product-name: web");
        let want = "cannot depend on its own product com.example:web";
        refused(&yaml, Some(DEP1), want);
        let artifact = format!("  - {{uri: u, sha256: {SHA}}}\n");
        let yaml = format!(
            "product-group: g\nproduct-name: n\nproduct-version: 1.0.0\nartifacts:\n{}",
            artifact.repeat(MAX_ARTIFACTS + 1)
        );
        refused(&yaml, Some("artifacts"), "65 artifacts, at most 64 allowed");

        // Documents.
        refused("", None, "manifest is empty");
        refused("# only a comment\n", None, "manifest is empty");
        let want = "must be a YAML mapping of fields, got a sequence";
        refused("- product-group: com.example\n", None, want);
        refused("just text", None, "got a string");
        let yaml = format!("# {}\n{VALID}", "p".repeat(MAX_MANIFEST_BYTES));
        refused(&yaml, None, "at most 262144 bytes allowed");
        let want = "mapping values are not allowed in this context at line 1";
        refused("product-group: g: h\n", None, want);
        let yaml = format!("x: {}", "[".repeat(10_000));
        refused(
            &yaml,
            None,
            "release manifest: nesting deeper than 128 at line 1",
        );
        // Alias expansion ("billion laughs") is bounded: the parse budget's node count.
        let mut bomb = String::from("a: &a [1,2,3,4,5,6,7,8,9]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h"])
        {
            bomb.push_str(&format!(
                "{name}: &{name} [{}]\n",
                format!("*{prev},").repeat(9)
            ));
        }
        refused(
            &bomb,
            None,
            "release manifest: more than 10556 values once aliases are expanded",
        );
        let want = "more than one document is not supported";
        refused("--- {product-group: a}\n--- b\n", None, want);
    }

    #[test]
    fn largest_accepted_manifest() {
        let padded = format!("{VALID}#");
        let padded = format!("{padded}{}", "p".repeat(MAX_MANIFEST_BYTES - padded.len()));
        assert_eq!(padded.len(), MAX_MANIFEST_BYTES);
        assert!(parse_manifest(&padded).is_ok());
        let err = parse_manifest(&format!("{padded}p")).unwrap_err();
        assert_eq!(
            err,
            ManifestError::TooLarge {
                size: MAX_MANIFEST_BYTES + 1,
                max: MAX_MANIFEST_BYTES
            }
        );
    }

    #[test]
    fn builtin_channels_table() {
        // SPEC "Vocabulary": plain -> all three, -rc -> DEV + RELEASE_CANDIDATE, else DEV.
        let all: &[&str] = &[CHANNEL_DEV, CHANNEL_RELEASE_CANDIDATE, CHANNEL_RELEASE];
        let rc: &[&str] = &[CHANNEL_DEV, CHANNEL_RELEASE_CANDIDATE];
        let dev: &[&str] = &[CHANNEL_DEV];
        for (ver, want) in [
            ("1.0.0", all),
            ("1.0.0-rc1", rc),
            ("1.0.0-RC.2", rc),
            ("1.0.0-rc", rc),
            ("1.0.0-beta.1", dev),
            ("1.0.0-SNAPSHOT", dev),
            ("1.0.0-alpha.rc1", dev),
            ("1.0.0-r", dev),
            ("1.0.0+build5", all),
            ("1.0.0-rc.1+build5", rc),
        ] {
            assert_eq!(builtin_channels_for(&v(ver)), want, "{ver}");
        }
    }

    #[test]
    fn manifest_serde_round_trip() {
        let m = parse_manifest(&edit(
            "      maximum-version: 2.x.x",
            "      maximum-version: 2.x.x\n      optional: true",
        ))
        .unwrap();
        assert!(m.dependencies[1].optional);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<ReleaseManifest>(&json).unwrap(), m);
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&m, cfg).unwrap();
        let (back, used): (ReleaseManifest, usize) =
            bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!((back, used), (m, bytes.len()));
    }

    /// Tiny deterministic generator (SplitMix64).
    struct SplitMix64(u64);

    impl SplitMix64 {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn check_ok_invariants(m: &ReleaseManifest) {
        assert!(m.artifacts.len() <= MAX_ARTIFACTS);
        assert!(m.dependencies.len() <= MAX_DEPENDENCIES);
        for a in &m.artifacts {
            assert!(a.sha256.len() == 64 && !a.sha256.chars().any(|c| c.is_ascii_uppercase()));
            assert!(!a.uri.is_empty());
        }
        for d in &m.dependencies {
            assert_ne!(d.product_id, m.product_id);
        }
    }

    #[test]
    fn no_panic_on_arbitrary_input() {
        const ALPHABET: &[u8] = b" \n\t:-[]{},&*!|>'\"#%@`?.x0123456789abcdefABCDEF\\";
        let mut rng = SplitMix64(0x5EED_2024);
        let mut oks = 0;
        for _ in 0..1000 {
            let len = rng.below(200);
            let bytes: Vec<u8> = (0..len)
                .map(|_| match rng.below(2) {
                    0 => ALPHABET[rng.below(ALPHABET.len())],
                    _ => rng.next() as u8,
                })
                .collect();
            if let Ok(m) = parse_manifest(&String::from_utf8_lossy(&bytes)) {
                check_ok_invariants(&m);
            }
        }
        for _ in 0..1000 {
            let mut bytes = VALID.as_bytes().to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len() + 1);
                let c = ALPHABET[rng.below(ALPHABET.len())];
                match rng.below(3) {
                    0 if at < bytes.len() => bytes[at] = c,
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, c),
                }
            }
            match parse_manifest(&String::from_utf8_lossy(&bytes)) {
                Ok(m) => {
                    check_ok_invariants(&m);
                    oks += 1;
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        // Some mutations (e.g. in the URI or a comment) stay valid; most do not.
        assert!(oks > 0 && oks < 1000, "{oks}");
    }
}
