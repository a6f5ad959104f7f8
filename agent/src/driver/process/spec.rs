//! `service.json` (how to run an artifact) and the plan's config (a YAML mapping).
//!
//! ```json
//! {"command": "bin/demo-service",
//!  "args": ["--config", "${CONFIG}", "--version", "${VERSION}"],
//!  "env": {"PORT": "${PORT}"},
//!  "readiness": {"http": "/healthz"},        // or {"tcp": true}, or null
//!  "ready_timeout_ms": 10000, "stop_timeout_ms": 5000}
//! ```
//!
//! `command` is absolute or relative to the unpacked version directory. In `args` and `env`
//! values, `${CONFIG}`, `${PORT}`, `${VERSION}`, `${SECRETS_DIR}` and `${DATA}` are replaced;
//! anything else (e.g. a shell's `${HOME}`) is left alone.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Largest `service.json` read.
const MAX_SERVICE_JSON: u64 = 1024 * 1024;
/// Longest readiness or stop timeout accepted.
const MAX_TIMEOUT_MS: u64 = 600_000;

/// How to tell that a service is ready.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Readiness {
    /// `GET http://127.0.0.1:PORT<path>` answers 2xx.
    Http(String),
    /// A TCP connection to `127.0.0.1:PORT` succeeds (must be `true`).
    Tcp(bool),
}

/// The parsed `service.json` at the root of an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Program: absolute, or relative to the version directory.
    pub command: String,
    /// Arguments (with substitutions).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment (values with substitutions).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Readiness probe; `null` or absent: the process stays alive for 1 s.
    #[serde(default)]
    pub readiness: Option<Readiness>,
    /// How long readiness may take.
    #[serde(default = "default_ready_timeout_ms")]
    pub ready_timeout_ms: u64,
    /// How long a graceful stop (SIGTERM) may take before SIGKILL.
    #[serde(default = "default_stop_timeout_ms")]
    pub stop_timeout_ms: u64,
}

fn default_ready_timeout_ms() -> u64 {
    10_000
}

fn default_stop_timeout_ms() -> u64 {
    5_000
}

/// Values substituted into `args` and `env`.
#[derive(Debug, Clone)]
pub struct Vars {
    /// `${CONFIG}`: absolute path of the config file.
    pub config: PathBuf,
    /// `${PORT}`: the config's top-level `port`.
    pub port: Option<u16>,
    /// `${VERSION}`.
    pub version: String,
    /// `${SECRETS_DIR}`.
    pub secrets_dir: PathBuf,
    /// `${DATA}`.
    pub data: PathBuf,
}

impl ServiceSpec {
    /// Reads and validates `service.json` in `version_dir`. Errors are validation errors for
    /// the plan record.
    pub fn load(version_dir: &Path) -> Result<Self, Vec<String>> {
        use std::io::Read;
        let path = version_dir.join("service.json");
        let mut bytes = Vec::new();
        let read = std::fs::File::open(&path).and_then(|f| {
            f.take(MAX_SERVICE_JSON + 1).read_to_end(&mut bytes)?;
            Ok(())
        });
        if let Err(e) = read {
            return Err(vec![format!(
                "service.json: cannot read it at the artifact's root: {e}"
            )]);
        }
        if bytes.len() as u64 > MAX_SERVICE_JSON {
            return Err(vec![format!(
                "service.json: larger than {MAX_SERVICE_JSON} bytes"
            )]);
        }
        let spec: ServiceSpec =
            serde_json::from_slice(&bytes).map_err(|e| vec![format!("service.json: {e}")])?;
        spec.validate(version_dir)?;
        Ok(spec)
    }

    fn validate(&self, version_dir: &Path) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        let mut err = |m: String| errors.push(format!("service.json: {m}"));
        if self.command.is_empty() {
            err("command: must not be empty".into());
        } else if Path::new(&self.command)
            .components()
            .any(|c| c == Component::ParentDir)
        {
            err(format!("command: {:?} must not contain '..'", self.command));
        } else if !self.program(version_dir).is_file() {
            err(format!(
                "command: {:?} does not exist in the artifact",
                self.command
            ));
        }
        let all = std::iter::once(&self.command)
            .chain(&self.args)
            .chain(self.env.keys())
            .chain(self.env.values());
        if all.into_iter().any(|s| s.contains('\0')) {
            err("command, args and env must not contain NUL characters".into());
        }
        for key in self.env.keys() {
            if key.is_empty() || key.contains('=') {
                err(format!("env: {key:?} is not a variable name"));
            }
        }
        match &self.readiness {
            Some(Readiness::Http(path)) => {
                if !path.starts_with('/')
                    || path.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    err(format!(
                        "readiness.http: {path:?} must be a path starting with '/' without spaces"
                    ));
                }
            }
            Some(Readiness::Tcp(false)) => {
                err("readiness.tcp: must be true (use null for no probe)".into())
            }
            Some(Readiness::Tcp(true)) | None => {}
        }
        for (name, value) in [
            ("ready_timeout_ms", self.ready_timeout_ms),
            ("stop_timeout_ms", self.stop_timeout_ms),
        ] {
            if value == 0 || value > MAX_TIMEOUT_MS {
                err(format!(
                    "{name}: {value} must be between 1 and {MAX_TIMEOUT_MS}"
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The program to run: `command` if absolute, else relative to `version_dir`.
    pub fn program(&self, version_dir: &Path) -> PathBuf {
        version_dir.join(&self.command)
    }

    /// Whether `args` or `env` use `${PORT}`, or the readiness probe needs a port.
    pub fn needs_port(&self) -> bool {
        matches!(self.readiness, Some(Readiness::Http(_) | Readiness::Tcp(_)))
            || self
                .args
                .iter()
                .chain(self.env.values())
                .any(|s| s.contains("${PORT}"))
    }

    /// The readiness timeout.
    pub fn ready_timeout(&self) -> Duration {
        Duration::from_millis(self.ready_timeout_ms)
    }

    /// The graceful stop timeout.
    pub fn stop_timeout(&self) -> Duration {
        Duration::from_millis(self.stop_timeout_ms)
    }
}

/// Replaces the driver's `${…}` variables in `s`.
pub fn substitute(s: &str, vars: &Vars) -> String {
    let port = vars.port.map(|p| p.to_string()).unwrap_or_default();
    s.replace("${CONFIG}", &vars.config.to_string_lossy())
        .replace("${PORT}", &port)
        .replace("${VERSION}", &vars.version)
        .replace("${SECRETS_DIR}", &vars.secrets_dir.to_string_lossy())
        .replace("${DATA}", &vars.data.to_string_lossy())
}

/// Validates the plan's config text (a YAML mapping; empty text is an empty mapping) and
/// returns its top-level integer `port`, if any. Errors are validation errors.
pub fn parse_config(text: &str) -> Result<Option<u16>, Vec<String>> {
    use hub_wire::yaml_budget::{check, Document, YamlRefusal};
    let value: serde_yaml_ng::Value = match check(Document::ConfigOverrides, text) {
        Ok(checked) => checked.parse(),
        Err(YamlRefusal::Syntax(e)) => Err(e),
        Err(YamlRefusal::Budget(e)) => return Err(vec![format!("config: {e}")]),
    }
    .map_err(|e| vec![format!("config: invalid YAML: {e}")])?;
    let map = match value {
        serde_yaml_ng::Value::Null => return Ok(None),
        serde_yaml_ng::Value::Mapping(m) => m,
        other => {
            let kind = match other {
                serde_yaml_ng::Value::Bool(_) => "a boolean",
                serde_yaml_ng::Value::Number(_) => "a number",
                serde_yaml_ng::Value::String(_) => "a string",
                serde_yaml_ng::Value::Sequence(_) => "a sequence",
                _ => "a tagged value",
            };
            return Err(vec![format!("config: must be a YAML mapping, got {kind}")]);
        }
    };
    match map.get("port") {
        None => Ok(None),
        Some(v) => match v.as_u64().and_then(|p| u16::try_from(p).ok()) {
            Some(p) if p > 0 => Ok(Some(p)),
            _ => Err(vec![
                "config: port: must be an integer between 1 and 65535".to_string()
            ]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(service_json: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("service.json"), service_json).unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/svc"), "").unwrap();
        dir
    }

    #[test]
    fn service_json_parsing() {
        let d = dir_with(r#"{"command": "bin/svc", "readiness": {"http": "/healthz"}}"#);
        let spec = ServiceSpec::load(d.path()).unwrap();
        assert_eq!(spec.readiness, Some(Readiness::Http("/healthz".into())));
        assert_eq!(
            (spec.ready_timeout_ms, spec.stop_timeout_ms),
            (10_000, 5_000)
        );
        assert!(spec.needs_port());
        let d = dir_with(r#"{"command": "/bin/sh", "readiness": null, "args": ["x"]}"#);
        let spec = ServiceSpec::load(d.path()).unwrap();
        assert!(!spec.needs_port());
        let d = dir_with(r#"{"command": "/bin/sh", "readiness": {"tcp": true}}"#);
        assert!(ServiceSpec::load(d.path()).unwrap().needs_port());

        for (bad, want) in [
            (
                r#"{"command": "bin/svc", "bogus": 1}"#,
                "unknown field `bogus`",
            ),
            (r#"{"command": "bin/nope"}"#, "does not exist"),
            (r#"{"command": "../bin/svc"}"#, "'..'"),
            (r#"{"command": ""}"#, "must not be empty"),
            (
                r#"{"command": "bin/svc", "readiness": {"http": "healthz"}}"#,
                "readiness.http",
            ),
            (
                r#"{"command": "bin/svc", "readiness": {"tcp": false}}"#,
                "readiness.tcp",
            ),
            (
                r#"{"command": "bin/svc", "readiness": {"grpc": 1}}"#,
                "unknown variant",
            ),
            (
                r#"{"command": "bin/svc", "ready_timeout_ms": 0}"#,
                "ready_timeout_ms",
            ),
            (r#"{"command": "bin/svc", "env": {"A=B": "x"}}"#, "env"),
            ("not json", "service.json: expected"),
        ] {
            let d = dir_with(bad);
            let errors = ServiceSpec::load(d.path()).unwrap_err();
            assert!(errors.iter().any(|e| e.contains(want)), "{bad}: {errors:?}");
        }
        let empty = tempfile::tempdir().unwrap();
        assert!(ServiceSpec::load(empty.path()).unwrap_err()[0].contains("cannot read"));
    }

    #[test]
    fn config_parsing_and_substitution() {
        assert_eq!(parse_config(""), Ok(None));
        assert_eq!(parse_config("a: 1\nport: 8080\n"), Ok(Some(8080)));
        assert_eq!(parse_config("a: 1"), Ok(None));
        for (bad, want) in [
            ("- a\n- b", "got a sequence"),
            ("just text", "got a string"),
            ("port: 70000", "port"),
            ("port: web", "port"),
            ("a: [", "invalid YAML"),
            (
                &*format!("a: {}", "[".repeat(10_000)),
                "nesting deeper than 128",
            ),
            (
                "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n\
                 c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
                "values once aliases are expanded",
            ),
        ] {
            let e = parse_config(bad).unwrap_err();
            assert!(e[0].contains(want), "{bad}: {e:?}");
        }
        let vars = Vars {
            config: "/c.yaml".into(),
            port: Some(81),
            version: "1.0.0".into(),
            secrets_dir: "/s".into(),
            data: "/d".into(),
        };
        assert_eq!(
            substitute(
                "${CONFIG} ${PORT} ${VERSION} ${SECRETS_DIR} ${DATA} ${HOME}",
                &vars
            ),
            "/c.yaml 81 1.0.0 /s /d ${HOME}"
        );
    }
}
