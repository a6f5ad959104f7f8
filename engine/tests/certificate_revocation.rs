//! Certificate revocation (issue 56 item 6) through apply: the replicated revocation list,
//! who revoked and when, an operator's retry, the budget, bad input refused naming the field,
//! expired entries pruned, and the list's version. Every apply also runs the harness's checks
//! (determinism, a refusal changes nothing, the state rebuilt from its records equals it).

mod common;

use common::actors::{as_, bind, operator};
use common::{Hub, DAY, HOUR, T0};
use hub_engine::access::Role;
use hub_engine::feature_level::{FeatureLevel, LEVEL_2};
use hub_engine::revocation::{
    serial_from_der_bytes, CertificateRevocation, RevocationListVersion, RevokedCertificate,
    MAX_REASON_CHARS, MAX_REVOKED_CERTIFICATES,
};
use hub_engine::{Command, CommandError, CommandOutput, Record, RecordKey, State};
use hub_identity::Identity;

/// A hub whose admin is `operator/root`.
fn hub() -> Hub {
    let mut h = Hub::new();
    bind(&mut h, "root", Role::Admin, &[]);
    h
}

fn revoke(serial: &str, reason: &str, identity: Option<&str>, not_after: Option<i64>) -> Command {
    Command::RevokeCertificate {
        serial: serial.into(),
        reason: reason.into(),
        identity: identity.map(str::to_string),
        not_after,
    }
}

/// `revoke` as the admin `root` proposes it.
fn by_root(serial: &str, not_after: Option<i64>) -> Command {
    as_(
        "root",
        revoke(serial, "key compromised", Some("agent/prod"), not_after),
    )
}

/// The field a refusal names.
fn field(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { field, .. } => field,
        other => panic!("not a field refusal: {other:?}"),
    }
}

fn revoked_keys(changed: &[RecordKey]) -> Vec<&str> {
    changed
        .iter()
        .filter_map(|k| match k {
            RecordKey::RevokedCertificate(s) => Some(s.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_revocation_records_the_serial_its_reason_the_admin_and_the_entry_time() {
    let mut h = hub();
    assert_eq!(
        h.state.revocation_list_version(),
        RevocationListVersion::default()
    );
    h.advance(HOUR);
    let out = h.ok(as_(
        "root",
        revoke(
            "00:8F:3A:01",
            "laptop stolen",
            Some("operator/alice"),
            Some(T0 + 30 * DAY),
        ),
    ));
    let CommandOutput::Changed { id, summary } = out else {
        panic!("{out:?}")
    };
    assert_eq!(id, "8f3a01");
    assert_eq!(summary, "certificate 8f3a01 revoked (operator/alice)");
    // Stored under the canonical serial; other spellings are not looked up.
    assert!(h.state.is_revoked("8f3a01"));
    assert!(!h.state.is_revoked("8F3A01"));
    assert!(!h.state.is_revoked("0f3a01"));
    assert_eq!(
        h.state.revoked_certificate("8f3a01"),
        Some(&RevokedCertificate {
            serial: "8f3a01".into(),
            reason: "laptop stolen".into(),
            identity: Some(Identity::Operator("alice".into())),
            not_after: Some(T0 + 30 * DAY),
            revoked_at: T0 + HOUR,
            revoked_by: operator("root"),
            revoked_index: h.index,
        })
    );
    assert_eq!(h.state.revoked_certificates().len(), 1);
    assert_eq!(
        h.state.revocation_list_version(),
        RevocationListVersion {
            count: 1,
            newest_index: h.index
        }
    );
    // A node that loads the records (a restart, a snapshot) has the same list and version.
    let loaded = State::from_records(h.state.records());
    assert!(loaded.is_revoked("8f3a01"));
    assert_eq!(
        loaded.revocation_list_version(),
        h.state.revocation_list_version()
    );
}

#[test]
fn revoking_a_revoked_serial_again_succeeds_and_keeps_the_first_entry() {
    let mut h = hub();
    h.ok(as_(
        "root",
        revoke("8f3a01", "laptop stolen", Some("operator/alice"), None),
    ));
    let first = h.state.revoked_certificate("8f3a01").cloned().unwrap();
    let version = h.state.revocation_list_version();
    // An operator's retry after a timeout, spelled another way, with another reason.
    h.advance(HOUR);
    let applied = h.apply(as_(
        "root",
        revoke("8F:3A:01", "retry", None, Some(T0 + DAY)),
    ));
    let Ok(CommandOutput::Changed { id, summary }) = &applied.result else {
        panic!("{:?}", applied.result)
    };
    assert_eq!(id, "8f3a01");
    assert!(summary.contains("already revoked"), "{summary}");
    assert!(revoked_keys(&applied.changed).is_empty());
    assert_eq!(h.state.revoked_certificate("8f3a01"), Some(&first));
    assert_eq!(h.state.revocation_list_version(), version);
}

#[test]
fn bad_input_is_refused_naming_the_field_and_changes_nothing() {
    let mut h = hub();
    h.ok(by_root("01", None));
    let before: Vec<Record> = h
        .state
        .revoked_certificates()
        .cloned()
        .map(Record::RevokedCertificate)
        .collect();
    let long_reason = "x".repeat(MAX_REASON_CHARS + 1);
    let twenty_one_bytes = "01".repeat(21);
    let cases: Vec<(Command, &str)> = vec![
        (revoke("8f:3g", "r", None, None), "serial"),
        (revoke("", "r", None, None), "serial"),
        (revoke("0x8f", "r", None, None), "serial"),
        (revoke("8f:3", "r", None, None), "serial"),
        (revoke(&twenty_one_bytes, "r", None, None), "serial"),
        (revoke("8f3a01", "", None, None), "reason"),
        (revoke("8f3a01", "   ", None, None), "reason"),
        (revoke("8f3a01", &long_reason, None, None), "reason"),
        (
            revoke("8f3a01", "red \u{1b}[31m text", None, None),
            "reason",
        ),
        (
            revoke("8f3a01", "reads \u{202e}backwards", None, None),
            "reason",
        ),
        (revoke("8f3a01", "r", Some("token/ci"), None), "identity"),
        (revoke("8f3a01", "r", Some("alice"), None), "identity"),
        (revoke("8f3a01", "r", Some("node/0"), None), "identity"),
        (
            revoke("8f3a01", "r", Some("hub://c1/operator/alice"), None),
            "identity",
        ),
    ];
    for (command, expected) in cases {
        let shown = format!("{command:?}");
        let e = h.err(as_("root", command));
        let message = e.to_string();
        assert_eq!(field(e), expected, "{shown}: {message}");
    }
    // The messages say what is wrong with the value.
    let e = h.err(as_("root", revoke("8f:3g", "r", None, None)));
    assert_eq!(
        e.to_string(),
        "invalid serial: \"8f:3g\" is not a serial number: hex digits (0-9, a-f, A-F), optionally with ':' between bytes"
    );
    let e = h.err(as_("root", revoke("8f3a01", &long_reason, None, None)));
    assert_eq!(e.to_string(), "invalid reason: 201 characters; at most 200");
    // A node's own entry has no actor to record: refused.
    assert_eq!(field(h.err(revoke("8f3a01", "r", None, None))), "actor");
    let after: Vec<Record> = h
        .state
        .revoked_certificates()
        .cloned()
        .map(Record::RevokedCertificate)
        .collect();
    assert_eq!(after, before);
    assert!(!h.state.is_revoked("8f3a01"));
}

/// `n` revoked certificates with serials `1..=n` (`01`, `02`, …; `not_after` of the first as
/// given), as a node loads them from its store.
fn load_list(h: &mut Hub, n: usize, first_not_after: Option<i64>) {
    let mut records: Vec<Record> = h.state.records().collect();
    records.extend((1..=n).map(|i| {
        Record::RevokedCertificate(RevokedCertificate {
            serial: serial_from_der_bytes(&(i as u32).to_be_bytes()),
            reason: "bulk".into(),
            identity: None,
            not_after: if i == 1 { first_not_after } else { None },
            revoked_at: T0,
            revoked_by: operator("root"),
            revoked_index: i as u64,
        })
    }));
    h.load_records(records);
    h.index = n as u64 + 10;
}

#[test]
fn one_revocation_beyond_the_budget_is_refused() {
    let mut h = hub();
    load_list(&mut h, MAX_REVOKED_CERTIFICATES, None);
    assert_eq!(
        h.state.revoked_certificates().len(),
        MAX_REVOKED_CERTIFICATES
    );
    let e = h.err(by_root("8f3a01", None));
    let CommandError::FailedPrecondition(m) = &e else {
        panic!("{e:?}")
    };
    assert!(
        m.starts_with("the cluster holds 10000 revoked certificates, the most it keeps"),
        "{m}"
    );
    assert!(!h.state.is_revoked("8f3a01"));
    // A retry of one already in the list still succeeds: it adds nothing.
    h.ok(by_root("00:01", None));
}

#[test]
fn a_full_list_takes_a_new_revocation_once_an_expired_entry_can_go() {
    let mut h = hub();
    load_list(&mut h, MAX_REVOKED_CERTIFICATES, Some(T0 + HOUR));
    h.set_time(T0 + HOUR + DAY);
    let applied = h.apply(by_root("8f3a01", None));
    assert!(applied.result.is_ok(), "{:?}", applied.result);
    assert_eq!(revoked_keys(&applied.changed), ["01", "8f3a01"]);
    assert!(!h.state.is_revoked("01"));
    assert_eq!(
        h.state.revoked_certificates().len(),
        MAX_REVOKED_CERTIFICATES
    );
}

#[test]
fn an_entry_is_pruned_by_a_later_revocation_a_day_after_its_certificate_expired() {
    let mut h = hub();
    h.ok(by_root("0a", Some(T0 + HOUR)));
    h.ok(by_root("0b", None));
    let v1 = h.state.revocation_list_version();
    assert_eq!(v1.count, 2);
    // Less than a day after 0a's notAfter: kept.
    h.set_time(T0 + HOUR + DAY - 1);
    let applied = h.apply(by_root("0c", None));
    assert_eq!(revoked_keys(&applied.changed), ["0c"]);
    assert!(h.state.is_revoked("0a"));
    let v2 = h.state.revocation_list_version();
    assert_ne!(v2, v1);
    // A repeat prunes nothing: it changes nothing at all.
    h.advance(DAY);
    let applied = h.apply(by_root("0c", None));
    assert!(revoked_keys(&applied.changed).is_empty());
    assert!(h.state.is_revoked("0a"));
    assert_eq!(h.state.revocation_list_version(), v2);
    // The next new revocation drops it; 0b, which gave no notAfter, stays.
    let applied = h.apply(by_root("0d", None));
    assert_eq!(revoked_keys(&applied.changed), ["0a", "0d"]);
    assert!(!h.state.is_revoked("0a"));
    assert!(h.state.is_revoked("0b"));
    let v3 = h.state.revocation_list_version();
    assert_eq!(
        v3,
        RevocationListVersion {
            count: 3,
            newest_index: h.index
        }
    );
    assert_ne!(v3, v2);
    // Revoked again after its entry went, it is a new entry.
    h.ok(by_root("0a", None));
    assert!(h.state.is_revoked("0a"));
    assert_eq!(h.state.revoked_certificate("0a").unwrap().not_after, None);
}

#[test]
fn the_command_as_hubctl_sends_it_in_json() {
    let json = r#"{"RevokeCertificate":{"serial":"8F:3A:01","reason":"laptop stolen","identity":"operator/alice","not_after":1798588800000}}"#;
    let command: Command = serde_json::from_str(json).unwrap();
    assert_eq!(
        command,
        revoke(
            "8F:3A:01",
            "laptop stolen",
            Some("operator/alice"),
            Some(1_798_588_800_000)
        )
    );
    assert_eq!(serde_json::to_string(&command).unwrap(), json);
    // The optional fields may be null or left out.
    let short = r#"{"RevokeCertificate":{"serial":"8f3a01","reason":"r"}}"#;
    assert_eq!(
        serde_json::from_str::<Command>(short).unwrap(),
        revoke("8f3a01", "r", None, None)
    );
    assert_eq!(command.kind(), "revoke_certificate");
    assert_eq!(command.tag(), 70);
}

/// A batch of the serials given, each with `reason`.
fn batch(serials: &[&str], reason: &str) -> Command {
    as_(
        "root",
        Command::RevokeCertificates {
            certificates: serials
                .iter()
                .map(|s| CertificateRevocation {
                    serial: s.to_string(),
                    reason: reason.into(),
                    identity: None,
                    not_after: None,
                })
                .collect(),
        },
    )
}

/// A hub whose cluster runs feature level 2, where `RevokeCertificates` applies.
fn hub_at_level_2() -> Hub {
    let mut h = hub();
    h.ok(Command::SetClusterLevel { level: LEVEL_2 });
    h
}

#[test]
fn a_batch_needs_feature_level_2_and_changes_nothing_before() {
    let mut h = hub();
    let e = h.err(batch(&["0a"], "crl"));
    assert_eq!(
        e,
        CommandError::FeatureLevelTooLow {
            cluster: FeatureLevel(1),
            needed: LEVEL_2,
            command: "revoke_certificates".into(),
        }
    );
    assert!(!h.state.is_revoked("0a"));
    h.ok(Command::SetClusterLevel { level: LEVEL_2 });
    h.ok(batch(&["0a"], "crl"));
    assert!(h.state.is_revoked("0a"));
}

#[test]
fn a_batch_revokes_every_new_serial_in_one_entry_and_keeps_earlier_entries() {
    let mut h = hub_at_level_2();
    h.ok(by_root("0b", None));
    h.advance(HOUR);
    let applied = h.apply(batch(&["0a", "0B", "0c", "0a", "00:0d"], "listed in a CRL"));
    let Ok(CommandOutput::Changed { summary, .. }) = &applied.result else {
        panic!("{:?}", applied.result)
    };
    assert_eq!(
        summary,
        "3 certificates revoked, 2 already revoked or repeated"
    );
    assert_eq!(revoked_keys(&applied.changed), ["0a", "0c", "0d"]);
    let entry = h.state.revoked_certificate("0c").unwrap();
    assert_eq!(entry.reason, "listed in a CRL");
    assert_eq!(entry.revoked_at, T0 + HOUR);
    assert_eq!(entry.revoked_index, h.index);
    assert_eq!(entry.revoked_by, operator("root"));
    // 0b keeps its first entry.
    assert_eq!(
        h.state.revoked_certificate("0b").unwrap().reason,
        "key compromised"
    );
    // The same batch again changes nothing and succeeds.
    let again = h.apply(batch(&["0a", "0c", "0d"], "listed in a CRL"));
    assert!(again.result.is_ok());
    assert!(revoked_keys(&again.changed).is_empty());
}

#[test]
fn a_bad_entry_refuses_the_whole_batch_naming_its_position() {
    let mut h = hub_at_level_2();
    assert_eq!(
        field(h.err(batch(&["0a", "zz"], "crl"))),
        "certificates[1].serial"
    );
    assert_eq!(field(h.err(batch(&["0a"], " "))), "certificates[0].reason");
    assert_eq!(field(h.err(batch(&[], "crl"))), "certificates");
    assert!(!h.state.is_revoked("0a"));
}

#[test]
fn a_batch_that_would_overflow_the_list_is_refused_whole() {
    let mut h = hub_at_level_2();
    load_list(&mut h, MAX_REVOKED_CERTIFICATES - 1, None);
    let e = h.err(batch(&["8f3a01", "8f3a02"], "crl"));
    let CommandError::FailedPrecondition(m) = &e else {
        panic!("{e:?}")
    };
    assert!(
        m.starts_with("the batch would make 10001 revoked certificates"),
        "{m}"
    );
    assert!(!h.state.is_revoked("8f3a01"));
    // One that fits, with a serial already listed, goes in.
    h.ok(batch(&["8f3a01", "01"], "crl"));
    assert_eq!(
        h.state.revoked_certificates().len(),
        MAX_REVOKED_CERTIFICATES
    );
    let too_many: Vec<String> = (0..=MAX_REVOKED_CERTIFICATES)
        .map(|i| format!("{:x}", i + 0x100000))
        .collect();
    let refs: Vec<&str> = too_many.iter().map(String::as_str).collect();
    assert_eq!(field(h.err(batch(&refs, "crl"))), "certificates");
}

#[test]
fn the_batch_command_as_hubctl_sends_it_in_json() {
    let json = r#"{"RevokeCertificates":{"certificates":[{"serial":"0a","reason":"crl","identity":null,"not_after":null}]}}"#;
    let command: Command = serde_json::from_str(json).unwrap();
    let Command::As { command: inner, .. } = batch(&["0a"], "crl") else {
        unreachable!()
    };
    assert_eq!(command, *inner);
    assert_eq!(serde_json::to_string(&command).unwrap(), json);
    assert_eq!(command.kind(), "revoke_certificates");
    assert_eq!(command.tag(), 72);
    assert_eq!(command.level(), LEVEL_2);
}
