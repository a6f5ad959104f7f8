//! Names that become file names: entity directories, versions, secret files.
//!
//! Everything here is checked before it touches the filesystem, so a hostile plan cannot
//! name a path outside the driver's data directory (no `/`, no `..`, no leading `.`).

/// Longest version string accepted as a directory name.
const MAX_VERSION_LEN: usize = 128;
/// Longest secret name accepted as a file name.
const MAX_SECRET_NAME_LEN: usize = 128;

/// Why a name cannot become a file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// An entity id without its four parts.
    #[error("entity id {id:?} is not of the form eid:<environment>:<kind>:<name>")]
    EntityIdForm {
        /// The id.
        id: String,
    },
    /// An entity id whose first part is not `eid`.
    #[error("entity id {id:?} does not start with \"eid:\"")]
    EntityIdPrefix {
        /// The id.
        id: String,
    },
    /// An entity of another environment.
    #[error("entity {id} belongs to environment {env:?}, this agent serves {environment:?}")]
    OtherEnvironment {
        /// The id.
        id: String,
        /// Its environment.
        env: String,
        /// The agent's.
        environment: String,
    },
    /// An entity kind that is not 1–63 ASCII letters or digits.
    #[error("entity id {id:?}: kind {kind:?} must be 1-63 ASCII letters or digits")]
    EntityKind {
        /// The id.
        id: String,
        /// Its kind.
        kind: String,
    },
    /// An entity name that is not a DNS-label-like name.
    #[error("entity id {id:?}: name {name:?} {reason}")]
    EntityName {
        /// The id.
        id: String,
        /// Its name.
        name: String,
        /// What is wrong with it.
        #[source]
        reason: LabelError,
    },
    /// The plan has no target version.
    #[error("the plan names no target version")]
    NoVersion,
    /// A version that cannot be a directory name.
    #[error(
        "version {version:?} is not usable as a directory name (1-{MAX_VERSION_LEN} of \
         A-Z a-z 0-9 . + _ -, starting with a letter or digit)"
    )]
    Version {
        /// The version.
        version: String,
    },
    /// A secret name that cannot be a file name.
    #[error(
        "secret name {name:?} is not usable as a file name (1-{MAX_SECRET_NAME_LEN} of \
         A-Z a-z 0-9 . _ -, not starting with '.')"
    )]
    SecretName {
        /// The name.
        name: String,
    },
}

/// What is wrong with a DNS-label-like name ([`check_label`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// Empty or longer than 63 characters.
    #[error("must be 1-63 characters")]
    Length,
    /// A character other than `a-z`, `0-9` and `-`.
    #[error("may only contain a-z, 0-9 and '-'")]
    Characters,
    /// A leading or trailing `-`.
    #[error("must not start or end with '-'")]
    Dash,
}

/// The filesystem-safe directory name of entity `id` (`eid:<env>:<kind>:<name>` →
/// `<kind>--<name>`), after checking that the entity belongs to `environment`.
///
/// `kind` must be ASCII alphanumeric (`helmChart`) and `name` a DNS-label-like name
/// (`a-z`, `0-9`, `-`), so the mapping is injective (the kind holds no `-`).
pub fn entity_dir_name(id: &str, environment: &str) -> Result<String, NameError> {
    let parts: Vec<&str> = id.split(':').collect();
    let [eid, env, kind, name] = parts.as_slice() else {
        return Err(NameError::EntityIdForm { id: id.to_string() });
    };
    if *eid != "eid" {
        return Err(NameError::EntityIdPrefix { id: id.to_string() });
    }
    if *env != environment {
        return Err(NameError::OtherEnvironment {
            id: id.to_string(),
            env: env.to_string(),
            environment: environment.to_string(),
        });
    }
    if kind.is_empty() || kind.len() > 63 || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(NameError::EntityKind {
            id: id.to_string(),
            kind: kind.to_string(),
        });
    }
    check_label(name).map_err(|reason| NameError::EntityName {
        id: id.to_string(),
        name: name.to_string(),
        reason,
    })?;
    Ok(format!("{kind}--{name}"))
}

/// Checks a DNS-label-like name: 1–63 of `a-z`, `0-9`, `-`, not starting or ending with `-`.
pub fn check_label(name: &str) -> Result<(), LabelError> {
    if name.is_empty() || name.len() > 63 {
        return Err(LabelError::Length);
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(LabelError::Characters);
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(LabelError::Dash);
    }
    Ok(())
}

/// Checks a version (used as a directory name): 1–128 of `A-Z a-z 0-9 . + _ -`, starting
/// with an alphanumeric character (so never `.` or `..`).
pub fn check_version(version: &str) -> Result<(), NameError> {
    if version.is_empty() {
        return Err(NameError::NoVersion);
    }
    if version.len() > MAX_VERSION_LEN
        || !version.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '_' | '-'))
    {
        return Err(NameError::Version {
            version: version.to_string(),
        });
    }
    Ok(())
}

/// Checks a secret name (used as a file name): 1–128 of `A-Z a-z 0-9 . _ -`, not starting
/// with `.`.
pub fn check_secret_name(name: &str) -> Result<(), NameError> {
    if name.is_empty()
        || name.len() > MAX_SECRET_NAME_LEN
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(NameError::SecretName {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Whether `s` is a lowercase hex SHA-256 (64 digits).
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_dir_names() {
        assert_eq!(
            entity_dir_name("eid:prod:helmChart:web", "prod").as_deref(),
            Ok("helmChart--web")
        );
        for bad in [
            "eid:prod:helmChart:../x",
            "eid:prod:helm/Chart:web",
            "eid:prod:helmChart:a/b",
            "eid:prod:helmChart:..",
            "eid:prod:helmChart:",
            "eid:prod:helm-chart:web",
            "eid:prod:helmChart:web:x",
            "xid:prod:helmChart:web",
            "eid:prod:helmChart:Web",
            "eid:prod:helmChart:-web",
        ] {
            assert!(entity_dir_name(bad, "prod").is_err(), "{bad}");
        }
        let other = entity_dir_name("eid:dev:helmChart:web", "prod").unwrap_err();
        assert!(
            matches!(&other, NameError::OtherEnvironment { env, .. } if env == "dev"),
            "{other}"
        );
        assert!(other.to_string().contains("environment"), "{other}");
    }

    #[test]
    fn versions_and_secret_names() {
        for good in ["1.0.0", "1.2.3-rc.1+build.5", "v2"] {
            assert!(check_version(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "../1", "1/2", ".hidden", "1 0", "-1"] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
        for good in ["db_password", "TOKEN", "tls.key"] {
            assert!(check_secret_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", ".env", "a b"] {
            assert!(check_secret_name(bad).is_err(), "{bad:?}");
        }
        assert!(is_sha256(&"ab".repeat(32)));
        assert!(!is_sha256(&"AB".repeat(32)));
        assert!(!is_sha256("abc"));
    }
}
