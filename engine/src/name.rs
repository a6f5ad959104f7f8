//! Validation of names that become parts of identifiers.

use crate::error::CommandError;

/// Longest name of an environment or entity.
pub const MAX_NAME_LEN: usize = 63;

/// Longest name of a custom release channel.
pub const MAX_CHANNEL_NAME_LEN: usize = 64;

/// Refuses `text` longer than `max` bytes, naming `field`, its length and the limit.
pub fn validate_len(field: &str, text: &str, max: usize) -> Result<(), CommandError> {
    if text.len() > max {
        return Err(CommandError::invalid(
            field,
            format!("{} characters, at most {max} allowed", text.len()),
        ));
    }
    Ok(())
}

/// Checks a DNS-label-like name: 1–63 characters of `a-z`, `0-9` and `-`, starting with a
/// letter and not ending with `-`. `field` names the field in the error.
pub fn validate_name(field: &str, name: &str) -> Result<(), CommandError> {
    if name.is_empty() {
        return Err(CommandError::invalid(field, "must not be empty"));
    }
    validate_len(field, name, MAX_NAME_LEN)?;
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(CommandError::invalid(
            field,
            format!("{name:?} contains {bad:?}; only a-z, 0-9 and '-' are allowed"),
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(CommandError::invalid(
            field,
            format!("{name:?} must start with a letter"),
        ));
    }
    if name.ends_with('-') {
        return Err(CommandError::invalid(
            field,
            format!("{name:?} must not end with '-'"),
        ));
    }
    Ok(())
}

/// Checks a product id `group:name`, where each part is a name as in [`validate_name`] but may
/// also contain `.` (Maven-style groups such as `com.example`).
pub fn validate_product_id(field: &str, id: &str) -> Result<(), CommandError> {
    let Some((group, name)) = id.split_once(':') else {
        return Err(CommandError::invalid(
            field,
            format!("{id:?} must have the form group:name"),
        ));
    };
    for (part, value) in [("group", group), ("name", name)] {
        let ok = !value.is_empty()
            && value.len() <= 128
            && value.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_')
            })
            && value.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(CommandError::invalid(
                field,
                format!("{part} {value:?} of {id:?} must be 1-128 of a-z, 0-9, '-', '.', '_'"),
            ));
        }
    }
    Ok(())
}

/// Checks a custom channel name: 1–[`MAX_CHANNEL_NAME_LEN`] characters of `A-Z`, `0-9` and
/// `_`, starting with a letter (the built-in channels are such names too).
pub fn validate_channel_name(field: &str, name: &str) -> Result<(), CommandError> {
    validate_len(field, name, MAX_CHANNEL_NAME_LEN)?;
    let ok = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(CommandError::invalid(
            field,
            format!(
                "{name:?} must be 1-{MAX_CHANNEL_NAME_LEN} of A-Z, 0-9 and '_', starting with a \
                 letter"
            ),
        ))
    }
}

/// Checks a module installation id `<environment>/<module>`, each part a name as in
/// [`validate_name`].
pub fn validate_installation_id(field: &str, id: &str) -> Result<(), CommandError> {
    if id.len() > 2 * MAX_NAME_LEN + 1 {
        return Err(CommandError::invalid(
            field,
            format!(
                "{} characters: an environment and a module of at most {MAX_NAME_LEN} each",
                id.len()
            ),
        ));
    }
    let Some((environment, module)) = id.split_once('/') else {
        return Err(CommandError::invalid(
            field,
            format!("{id:?} must have the form environment/module"),
        ));
    };
    validate_name(field, environment)?;
    validate_name(field, module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dns_labels() {
        for ok in ["prod", "eu-west-1", "a", "a1-b2"] {
            validate_name("name", ok).unwrap();
        }
    }

    #[test]
    fn rejects_bad_names_naming_the_field() {
        for bad in [
            "",
            "Prod",
            "-a",
            "a-",
            "1abc",
            "a_b",
            "a b",
            &"x".repeat(64),
        ] {
            let err = validate_name("name", bad).unwrap_err();
            assert!(err.to_string().starts_with("invalid name:"), "{err}");
        }
    }

    #[test]
    fn channel_names_and_installation_ids() {
        validate_channel_name("channel", "STABLE_2").unwrap();
        for bad in [
            "",
            "stable",
            "2X",
            "A-B",
            &"X".repeat(MAX_CHANNEL_NAME_LEN + 1),
        ] {
            assert!(validate_channel_name("channel", bad).is_err(), "{bad}");
        }
        validate_installation_id("installation", "prod/web").unwrap();
        for bad in ["prod", "prod/", "/web", "prod/web/x", "Prod/web"] {
            let err = validate_installation_id("installation", bad).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid installation:"),
                "{err}"
            );
        }
    }

    #[test]
    fn product_ids() {
        validate_product_id("product_id", "com.example:web-app").unwrap();
        for bad in ["web", ":web", "g:", "G:web", "g:w b"] {
            assert!(validate_product_id("product_id", bad).is_err(), "{bad}");
        }
    }
}
