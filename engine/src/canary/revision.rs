//! The revision hash (SPEC K3): what identifies one revision of a canary's target, so that
//! a change of version, rendered config or a tracked secret starts an analysis and nothing
//! else does.
//!
//! The hash is **stable across hub upgrades**: each version is defined here byte by byte and
//! never changes (Flagger users' complaint: a controller upgrade that changed the hash function
//! re-analysed every canary). It does not depend on serde, `Debug` output, map iteration order
//! or the platform.
//!
//! Both versions hash the same message, where `field(s)` is `u64be(len(s))` followed by the
//! UTF-8 bytes of `s` (length prefixes make it unambiguous: `("ab", "c")` and `("a", "bc")`
//! differ):
//!
//! ```text
//! field(domain) field(version) field(config)
//! u64be(number of secrets) { field(name) field(value) } for each secret, sorted by name
//! ```
//!
//! - **v2** (written today, [`revision_hash`]): HMAC-SHA256 keyed with the cluster's canary
//!   revision key ([`crate::cluster_key`]), domain `hub-canary-revision/v2`; the revision is
//!   `v2:` followed by the first 16 lowercase hex digits of the MAC. The hash is published
//!   (status, webhooks, `hubctl canary get`) and covers secret values: without the key, which
//!   never leaves the replicated state, it cannot be brute-forced offline to recover a weak
//!   secret.
//! - **v1** (before the key existed, [`legacy_revision_hash`]): plain SHA-256, domain
//!   `hub-canary-revision/v1`, the first 16 hex digits, no prefix.
//!
//! [`is_revision_of`] compares a stored revision with a target in the stored revision's own
//! version, so a canary analysed before the upgrade keeps its v1 revision while its target is
//! unchanged (no spurious re-analysis, and the agent keeps the workloads it runs under that
//! name); the target's next real change is named in v2. Renaming a v1 revision in place would
//! not help: whoever saw it can brute-force it anyway, and the agent would restart workloads
//! whose name changed.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::cluster_key::SecretKey;

/// Domain tag of the v1 definition.
const DOMAIN_V1: &str = "hub-canary-revision/v1";
/// Domain tag of the v2 definition.
const DOMAIN_V2: &str = "hub-canary-revision/v2";

/// What a v2 revision starts with.
pub const REVISION_V2_PREFIX: &str = "v2:";

/// Hex digits kept from the digest.
pub const REVISION_HEX_LEN: usize = 16;

/// Feeds the message of the module documentation to `update`.
fn message(
    domain: &str,
    version: &str,
    config: &str,
    tracked_secrets: &BTreeMap<String, String>,
    update: &mut dyn FnMut(&[u8]),
) {
    fn field(update: &mut dyn FnMut(&[u8]), s: &str) {
        update(&(s.len() as u64).to_be_bytes());
        update(s.as_bytes());
    }
    field(update, domain);
    field(update, version);
    field(update, config);
    update(&(tracked_secrets.len() as u64).to_be_bytes());
    // BTreeMap iterates in sorted key order: the canonical order.
    for (name, value) in tracked_secrets {
        field(update, name);
        field(update, value);
    }
}

fn truncated_hex(digest: &[u8]) -> String {
    let mut out = hex::encode(digest);
    out.truncate(REVISION_HEX_LEN);
    out
}

/// The (v2) revision hash of a target at `version` with rendered `config` and the secrets that
/// are tracked (name → value; a secret that opts out of tracking is left out by the caller),
/// keyed with the cluster's canary revision `key`.
pub fn revision_hash(
    key: &SecretKey,
    version: &str,
    config: &str,
    tracked_secrets: &BTreeMap<String, String>,
) -> String {
    // HMAC takes keys of any length: new_from_slice cannot fail.
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).expect("HMAC accepts any key length");
    message(DOMAIN_V2, version, config, tracked_secrets, &mut |b| {
        mac.update(b)
    });
    format!(
        "{REVISION_V2_PREFIX}{}",
        truncated_hex(&mac.finalize().into_bytes())
    )
}

/// The v1 (unkeyed) revision hash, which canaries analysed before the cluster had a revision
/// key are stored under. Only compared with, never written.
pub fn legacy_revision_hash(
    version: &str,
    config: &str,
    tracked_secrets: &BTreeMap<String, String>,
) -> String {
    let mut h = Sha256::new();
    message(DOMAIN_V1, version, config, tracked_secrets, &mut |b| {
        h.update(b)
    });
    truncated_hex(&h.finalize())
}

/// Whether the `stored` revision names the target at `version` with `config` and
/// `tracked_secrets`, in the stored revision's own version: a v2 revision is compared with the
/// keyed hash (never equal without the key), any other with the v1 hash.
pub fn is_revision_of(
    stored: &str,
    key: Option<&SecretKey>,
    version: &str,
    config: &str,
    tracked_secrets: &BTreeMap<String, String>,
) -> bool {
    if stored.starts_with(REVISION_V2_PREFIX) {
        key.is_some_and(|k| revision_hash(k, version, config, tracked_secrets) == stored)
    } else {
        legacy_revision_hash(version, config, tracked_secrets) == stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn key(byte: u8) -> SecretKey {
        SecretKey::from_bytes([byte; crate::cluster_key::KEY_BYTES])
    }

    #[test]
    fn pinned_values_never_change() {
        // SPEC K3: these values are part of the hub's compatibility contract. If this test
        // fails, the hash function changed and every canary would re-analyse after the
        // upgrade: restore the definition instead of updating the values.
        assert_eq!(
            legacy_revision_hash("", "", &BTreeMap::new()),
            "6d09fd2f4f8090e2"
        );
        assert_eq!(
            legacy_revision_hash(
                "1.2.3",
                "replicas: 2\nimage: podinfo:6.0.0\n",
                &secrets(&[("db-password", "s3cret"), ("api-key", "k")])
            ),
            "510106a52c3582c0"
        );
        assert_eq!(
            revision_hash(&key(7), "", "", &BTreeMap::new()),
            "v2:87a57139c2ec5867"
        );
        assert_eq!(
            revision_hash(
                &key(7),
                "1.2.3",
                "replicas: 2\nimage: podinfo:6.0.0\n",
                &secrets(&[("db-password", "s3cret"), ("api-key", "k")])
            ),
            "v2:2482bf23970034ad"
        );
    }

    #[test]
    fn the_keyed_hash_depends_on_the_key_and_comparison_follows_the_stored_version() {
        let s = secrets(&[("db-password", "s3cret")]);
        let a = revision_hash(&key(1), "1.0.0", "a: 1", &s);
        assert!(a.starts_with(REVISION_V2_PREFIX));
        assert_eq!(a.len(), REVISION_V2_PREFIX.len() + REVISION_HEX_LEN);
        assert_ne!(a, revision_hash(&key(2), "1.0.0", "a: 1", &s));
        // Without the key the published value says nothing: not even the v1 hash matches.
        assert_ne!(
            &a[REVISION_V2_PREFIX.len()..],
            legacy_revision_hash("1.0.0", "a: 1", &s)
        );

        assert!(is_revision_of(&a, Some(&key(1)), "1.0.0", "a: 1", &s));
        assert!(!is_revision_of(&a, Some(&key(2)), "1.0.0", "a: 1", &s));
        assert!(!is_revision_of(&a, None, "1.0.0", "a: 1", &s));
        assert!(!is_revision_of(&a, Some(&key(1)), "1.0.1", "a: 1", &s));
        // A revision stored before the upgrade (v1) is compared with the v1 hash, key or not.
        let old = legacy_revision_hash("1.0.0", "a: 1", &s);
        assert!(is_revision_of(&old, Some(&key(1)), "1.0.0", "a: 1", &s));
        assert!(is_revision_of(&old, None, "1.0.0", "a: 1", &s));
        assert!(!is_revision_of(&old, Some(&key(1)), "1.0.0", "a: 2", &s));
    }

    #[test]
    fn every_input_counts_and_fields_do_not_run_together() {
        let none = BTreeMap::new();
        let k = key(3);
        let revision_hash =
            |v: &str, c: &str, s: &BTreeMap<String, String>| super::revision_hash(&k, v, c, s);
        let base = revision_hash("1.0.0", "a: 1", &none);
        assert_eq!(base.len(), REVISION_V2_PREFIX.len() + REVISION_HEX_LEN);
        assert!(base[REVISION_V2_PREFIX.len()..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(base, revision_hash("1.0.1", "a: 1", &none));
        assert_ne!(base, revision_hash("1.0.0", "a: 2", &none));
        assert_ne!(
            base,
            revision_hash("1.0.0", "a: 1", &secrets(&[("s", "v")]))
        );
        assert_ne!(
            revision_hash("1.0.0", "a: 1", &secrets(&[("s", "v1")])),
            revision_hash("1.0.0", "a: 1", &secrets(&[("s", "v2")]))
        );
        assert_ne!(
            revision_hash("ab", "c", &none),
            revision_hash("a", "bc", &none)
        );
        assert_ne!(
            revision_hash("v", "", &secrets(&[("ab", "c")])),
            revision_hash("v", "", &secrets(&[("a", "bc")]))
        );
        // Deterministic.
        assert_eq!(base, revision_hash("1.0.0", "a: 1", &none));
    }
}
