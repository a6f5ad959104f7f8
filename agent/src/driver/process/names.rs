//! Names that become file names: entity directories, versions, secret files.
//!
//! Everything here is checked before it touches the filesystem, so a hostile plan cannot
//! name a path outside the driver's data directory (no `/`, no `..`, no leading `.`).

/// Longest version string accepted as a directory name.
const MAX_VERSION_LEN: usize = 128;
/// Longest secret name accepted as a file name.
const MAX_SECRET_NAME_LEN: usize = 128;

/// The filesystem-safe directory name of entity `id` (`eid:<env>:<kind>:<name>` →
/// `<kind>--<name>`), after checking that the entity belongs to `environment`.
///
/// `kind` must be ASCII alphanumeric (`helmChart`) and `name` a DNS-label-like name
/// (`a-z`, `0-9`, `-`), so the mapping is injective (the kind holds no `-`).
pub fn entity_dir_name(id: &str, environment: &str) -> Result<String, String> {
    let parts: Vec<&str> = id.split(':').collect();
    let [eid, env, kind, name] = parts.as_slice() else {
        return Err(format!(
            "entity id {id:?} is not of the form eid:<environment>:<kind>:<name>"
        ));
    };
    if *eid != "eid" {
        return Err(format!("entity id {id:?} does not start with \"eid:\""));
    }
    if *env != environment {
        return Err(format!(
            "entity {id} belongs to environment {env:?}, this agent serves {environment:?}"
        ));
    }
    if kind.is_empty() || kind.len() > 63 || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "entity id {id:?}: kind {kind:?} must be 1-63 ASCII letters or digits"
        ));
    }
    check_label(name).map_err(|why| format!("entity id {id:?}: name {name:?} {why}"))?;
    Ok(format!("{kind}--{name}"))
}

/// Checks a DNS-label-like name: 1–63 of `a-z`, `0-9`, `-`, not starting or ending with `-`.
pub fn check_label(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err("must be 1-63 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err("may only contain a-z, 0-9 and '-'".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("must not start or end with '-'".into());
    }
    Ok(())
}

/// Checks a version (used as a directory name): 1–128 of `A-Z a-z 0-9 . + _ -`, starting
/// with an alphanumeric character (so never `.` or `..`).
pub fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() {
        return Err("the plan names no target version".into());
    }
    if version.len() > MAX_VERSION_LEN
        || !version.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '_' | '-'))
    {
        return Err(format!(
            "version {version:?} is not usable as a directory name (1-{MAX_VERSION_LEN} of \
             A-Z a-z 0-9 . + _ -, starting with a letter or digit)"
        ));
    }
    Ok(())
}

/// Checks a secret name (used as a file name): 1–128 of `A-Z a-z 0-9 . _ -`, not starting
/// with `.`.
pub fn check_secret_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > MAX_SECRET_NAME_LEN
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "secret name {name:?} is not usable as a file name (1-{MAX_SECRET_NAME_LEN} of \
             A-Z a-z 0-9 . _ -, not starting with '.')"
        ));
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
        assert!(other.contains("environment"), "{other}");
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
