//! The revision hash (SPEC K3): what identifies one revision of a canary's target, so that
//! a change of version, rendered config or a tracked secret starts an analysis and nothing
//! else does.
//!
//! The hash is **stable across hub upgrades**: it is defined here byte by byte and must never
//! change (Flagger users' complaint: a controller upgrade that changed the hash function
//! re-analysed every canary). It does not depend on serde, `Debug` output, map iteration
//! order or the platform. Should the definition ever need to change, add a new function with a
//! new domain tag and keep this one for existing canaries.
//!
//! Definition (v1): SHA-256 over
//!
//! ```text
//! field("hub-canary-revision/v1") field(version) field(config)
//! u64be(number of secrets) { field(name) field(value) } for each secret, sorted by name
//! ```
//!
//! where `field(s)` is `u64be(len(s))` followed by the UTF-8 bytes of `s`; the revision is the
//! first 16 lowercase hex digits (64 bits) of the digest. Length prefixes make the encoding
//! unambiguous (`("ab", "c")` and `("a", "bc")` differ).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Domain tag of the v1 definition.
const DOMAIN_V1: &str = "hub-canary-revision/v1";

/// Hex digits kept from the digest.
pub const REVISION_HEX_LEN: usize = 16;

/// The revision hash of a target at `version` with rendered `config` and the secrets that are
/// tracked (name → value; a secret that opts out of tracking is left out by the caller).
/// Secret values only enter the digest; the result reveals nothing usable about them.
pub fn revision_hash(
    version: &str,
    config: &str,
    tracked_secrets: &BTreeMap<String, String>,
) -> String {
    fn field(h: &mut Sha256, s: &str) {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    }
    let mut h = Sha256::new();
    field(&mut h, DOMAIN_V1);
    field(&mut h, version);
    field(&mut h, config);
    h.update((tracked_secrets.len() as u64).to_be_bytes());
    // BTreeMap iterates in sorted key order: the canonical order.
    for (name, value) in tracked_secrets {
        field(&mut h, name);
        field(&mut h, value);
    }
    let digest = h.finalize();
    let mut out = hex::encode(digest);
    out.truncate(REVISION_HEX_LEN);
    out
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

    #[test]
    fn pinned_values_never_change() {
        // SPEC K3: these values are part of the hub's compatibility contract. If this test
        // fails, the hash function changed and every canary would re-analyse after the
        // upgrade: restore the definition instead of updating the values.
        assert_eq!(revision_hash("", "", &BTreeMap::new()), "6d09fd2f4f8090e2");
        assert_eq!(
            revision_hash(
                "1.2.3",
                "replicas: 2\nimage: podinfo:6.0.0\n",
                &secrets(&[("db-password", "s3cret"), ("api-key", "k")])
            ),
            "510106a52c3582c0"
        );
    }

    #[test]
    fn every_input_counts_and_fields_do_not_run_together() {
        let none = BTreeMap::new();
        let base = revision_hash("1.0.0", "a: 1", &none);
        assert_eq!(base.len(), REVISION_HEX_LEN);
        assert!(base
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
