//! Roles through apply: bootstrap, scopes, refusals that name what is missing, the last admin,
//! and a binding revoked between the node's check and apply.

use std::collections::BTreeSet;

use hub_identity::Identity;

use crate::audit::WriteOutcome;
use crate::command::{Command, CommandOutput, Request};
use crate::entity::{EntityKind, SecretValue};
use crate::error::CommandError;
use crate::record::Record;
use crate::state::State;

use super::{authorize, may_read, Role};

struct Hub {
    state: State,
    index: u64,
}

impl Hub {
    fn new() -> Self {
        Hub {
            state: State::new(),
            index: 0,
        }
    }

    /// Applies `command` unwrapped: a node's own entry.
    fn system(&mut self, command: Command) -> Result<CommandOutput, CommandError> {
        self.index += 1;
        let req = Request {
            command,
            time_ms: 1_000 + self.index as i64,
            request_id: None,
        };
        self.state.apply(&req, self.index).result
    }

    /// Applies `command` as `actor`.
    fn by(&mut self, actor: &Identity, command: Command) -> Result<CommandOutput, CommandError> {
        self.system(Command::As {
            actor: actor.clone(),
            command: Box::new(command),
        })
    }
}

fn op(name: &str) -> Identity {
    Identity::Operator(name.into())
}

fn bind(identity: &Identity, role: Role, envs: &[&str], products: &[&str]) -> Command {
    Command::BindRole {
        identity: identity.clone(),
        role,
        environments: envs.iter().map(|s| s.to_string()).collect(),
        products: products.iter().map(|s| s.to_string()).collect(),
    }
}

fn set_secret(env: &str) -> Command {
    Command::SetSecret {
        entity: format!("eid:{env}:helmChart:web"),
        name: "token".into(),
        value: Some(SecretValue("s3cret".into())),
    }
}

/// A hub with environments prod and stage, each with entity web, and admin `operator/root`.
fn hub() -> Hub {
    let mut h = Hub::new();
    for env in ["prod", "stage"] {
        h.system(Command::CreateEnvironment {
            name: env.into(),
            description: String::new(),
        })
        .unwrap();
        h.system(Command::CreateEntity {
            environment: env.into(),
            kind: EntityKind::HelmChart,
            name: "web".into(),
            product_id: "com.example:web".into(),
            k8s_namespace: Some("web".into()),
            account_id: None,
            release_channel: None,
        })
        .unwrap();
    }
    h.system(Command::CreateProduct {
        product_id: "com.example:web".into(),
        description: String::new(),
    })
    .unwrap();
    let root = op("root");
    h.by(&root, bind(&root, Role::Admin, &[], &[])).unwrap();
    h
}

/// Every record but the write audit's and the entry clock (every entry, refused or not,
/// advances it): what a refused write must leave as it was.
fn content(state: &State) -> Vec<Record> {
    state
        .records()
        .filter(|r| {
            !matches!(
                r,
                Record::WriteAudit(_) | Record::AuditLog(_) | Record::EntryClock(_)
            )
        })
        .collect()
}

fn denied(r: Result<CommandOutput, CommandError>) -> String {
    match r {
        Err(CommandError::PermissionDenied(m)) => m,
        other => panic!("not a permission refusal: {other:?}"),
    }
}

/// `command` by each of `whom` is refused by the node's check and at apply, with
/// "WHO may not NAME: needs admin", and changes nothing.
fn only_an_admin_may(h: &mut Hub, whom: &[&Identity], command: &Command, name: &str) {
    for who in whom {
        assert!(authorize(&h.state, who, command).is_err(), "{who}");
        let before = content(&h.state);
        let m = denied(h.by(who, command.clone()));
        assert_eq!(m, format!("{who} may not {name}: needs admin"));
        assert!(
            content(&h.state) == before,
            "{who}: a refusal changes nothing"
        );
    }
}

#[test]
fn the_first_operator_bootstraps_itself_admin_once() {
    let mut h = Hub::new();
    let alice = op("alice");
    let mallory = op("mallory");
    // Nobody may bind someone else while there is no admin.
    denied(h.by(&alice, bind(&mallory, Role::Admin, &[], &[])));
    assert!(h.by(&alice, bind(&alice, Role::Admin, &[], &[])).is_ok());
    assert_eq!(h.state.admin_count(), 1);
    let m = denied(h.by(&mallory, bind(&mallory, Role::Admin, &[], &[])));
    assert_eq!(m, "operator/mallory may not BindRole: needs admin");
    // An agent never bootstraps.
    let mut fresh = Hub::new();
    let agent = Identity::Agent("prod".into());
    denied(fresh.by(&agent, bind(&agent, Role::Admin, &[], &[])));
}

#[test]
fn a_scoped_operator_acts_in_its_environment_only() {
    let mut h = hub();
    let root = op("root");
    let bob = op("bob");
    h.by(
        &root,
        bind(&bob, Role::EnvironmentOperator, &["stage"], &[]),
    )
    .unwrap();
    assert!(h.by(&bob, set_secret("stage")).is_ok());
    let before = content(&h.state);
    let m = denied(h.by(&bob, set_secret("prod")));
    assert_eq!(
        m,
        "operator/bob may not SetSecret in prod: needs environment-operator on prod"
    );
    assert!(content(&h.state) == before, "a refusal changes nothing");
    // Not a product editor, not an admin.
    denied(h.by(
        &bob,
        Command::CreateProduct {
            product_id: "com.example:api".into(),
            description: String::new(),
        },
    ));
    denied(h.by(&bob, bind(&bob, Role::Admin, &[], &[])));
    // `*` covers every environment.
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["*"], &[]))
        .unwrap();
    assert!(h.by(&bob, set_secret("prod")).is_ok());
}

#[test]
fn product_editors_are_scoped_by_product_or_group() {
    let mut h = hub();
    let root = op("root");
    let pat = op("pat");
    let product = |id: &str| Command::SetProductWindow {
        product_id: id.into(),
        window: None,
    };
    h.by(
        &root,
        bind(&pat, Role::ProductEditor, &[], &["com.example:*"]),
    )
    .unwrap();
    assert!(h.by(&pat, product("com.example:web")).is_ok());
    let m = denied(h.by(&pat, product("org.other:db")));
    assert_eq!(
        m,
        "operator/pat may not SetProductWindow on org.other:db: needs product-editor on org.other:db"
    );
    // Environments are not theirs.
    denied(h.by(&pat, set_secret("prod")));
}

#[test]
fn a_rollout_policy_needs_product_editor_on_every_product_of_its_group() {
    // Issue 20: a policy paces, halts and recalls every product of its group, so an editor of
    // web alone may not group db with it, nor halt or reshape a group that holds db.
    let mut h = hub();
    let (web, db) = ("com.example:web", "com.example:db");
    h.system(Command::CreateProduct {
        product_id: db.into(),
        description: String::new(),
    })
    .unwrap();
    for env in ["prod", "stage"] {
        h.system(Command::CreateEntity {
            environment: env.into(),
            kind: EntityKind::HelmChart,
            name: "db".into(),
            product_id: db.into(),
            k8s_namespace: Some("db".into()),
            account_id: None,
            release_channel: None,
        })
        .unwrap();
    }
    let (root, pat) = (op("root"), op("pat"));
    h.by(&root, bind(&pat, Role::ProductEditor, &[], &[web]))
        .unwrap();
    let policy = |group: &str| Command::ApplyRolloutPolicy {
        yaml: format!(
            "product: {web}\n{group}waves:\n  - name: all\n    \
             selector: {{environments: [prod, stage]}}\n    soak: 1m\n"
        ),
    };
    let grouped = policy(&format!("products: [{db}]\n"));
    let before = content(&h.state);
    let m = denied(h.by(&pat, grouped.clone()));
    assert_eq!(
        m,
        "operator/pat may not ApplyRolloutPolicy on com.example:db, com.example:web: \
         needs product-editor on com.example:db, com.example:web"
    );
    assert_eq!(content(&h.state), before, "a refusal changes nothing");
    // web alone is theirs; once root has grouped db with it, neither halting the group's
    // rollout nor dropping db from the group is.
    h.by(&pat, policy("")).expect("web's own policy");
    h.by(&root, grouped).expect("root groups db with web");
    let halt = Command::HaltRollout {
        product: web.into(),
        version: "2.0.0".into(),
        reason: "looks bad".into(),
        actor: "pat".into(),
    };
    denied(h.by(&pat, halt.clone()));
    denied(h.by(&pat, policy("")));
    denied(h.by(
        &pat,
        Command::DeleteRolloutPolicy {
            product: web.into(),
        },
    ));
    // With db in their binding as well, the group is theirs.
    h.by(&root, bind(&pat, Role::ProductEditor, &[], &[web, db]))
        .unwrap();
    h.by(&pat, policy("")).expect("both products covered");
}

#[test]
fn the_leaders_and_agents_commands_need_their_own_identities() {
    let mut h = hub();
    let root = op("root");
    let evaluate = Command::Evaluate {
        entities: Vec::new(),
        artifacts: Vec::new(),
    };
    let m = denied(h.by(&root, evaluate.clone()));
    assert_eq!(m, "operator/root may not Evaluate: needs a hub node");
    assert!(h.by(&Identity::Node(1), evaluate).is_ok());
    let report = Command::ReportEntityStates {
        environment: "prod".into(),
        states: Vec::new(),
    };
    let m = denied(h.by(&Identity::Agent("stage".into()), report.clone()));
    assert_eq!(
        m,
        "agent/stage may not ReportEntityStates: needs the agent of prod"
    );
    assert!(h.by(&Identity::Agent("prod".into()), report).is_ok());
    // The sampled state report has the same rule.
    let sampled = Command::ReportSampledEntityStates {
        environment: "prod".into(),
        states: Vec::new(),
    };
    let m = denied(h.by(&Identity::Agent("stage".into()), sampled.clone()));
    assert_eq!(
        m,
        "agent/stage may not ReportSampledEntityStates: needs the agent of prod"
    );
    assert!(h.by(&Identity::Agent("prod".into()), sampled).is_ok());
}

/// Issue 55, item 6: the hub-wide config-tracking switch decides for every canary of every
/// environment, so only an admin turns it; an operator of every environment and a viewer are
/// refused by the node's check and at apply, and the settings stay as they were.
#[test]
fn only_an_admin_turns_canary_config_tracking() {
    let mut h = hub();
    let root = op("root");
    let (bob, vera) = (op("bob"), op("vera"));
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["*"], &[]))
        .unwrap();
    h.by(&root, bind(&vera, Role::Viewer, &[], &[])).unwrap();
    let off = Command::SetCanaryConfigTracking { enabled: false };
    assert!(h.state.cluster_settings().canary_config_tracking);
    for who in [&bob, &vera] {
        assert!(authorize(&h.state, who, &off).is_err(), "{who}");
        let before = content(&h.state);
        let m = denied(h.by(who, off.clone()));
        assert_eq!(
            m,
            format!("{who} may not SetCanaryConfigTracking: needs admin")
        );
        assert!(
            content(&h.state) == before,
            "{who}: a refusal changes nothing"
        );
        assert!(h.state.cluster_settings().canary_config_tracking, "{who}");
    }
    // The admin's own entry does turn it off: the refusals above were of the actor.
    h.by(&root, off).unwrap();
    assert!(!h.state.cluster_settings().canary_config_tracking);
}

/// Issue 56 item 6: a revoked certificate is refused by every node, so revoking one is the
/// admins' alone: an operator of every environment, a viewer, an agent and a node are refused
/// by the node's check and at apply, and nothing is revoked.
#[test]
fn only_an_admin_revokes_a_certificate() {
    let mut h = hub();
    let root = op("root");
    let (bob, vera) = (op("bob"), op("vera"));
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["*"], &[]))
        .unwrap();
    h.by(&root, bind(&vera, Role::Viewer, &[], &[])).unwrap();
    let revoke = Command::RevokeCertificate {
        serial: "8F:3A:01".into(),
        reason: "laptop stolen".into(),
        identity: Some("operator/alice".into()),
        not_after: None,
    };
    let (agent, node) = (Identity::Agent("prod".into()), Identity::Node(1));
    only_an_admin_may(
        &mut h,
        &[&bob, &vera, &agent, &node],
        &revoke,
        "RevokeCertificate",
    );
    assert!(!h.state.is_revoked("8f3a01"));
    // The admin's own entry does revoke it, recording the admin: the refusals were of the
    // actor.
    h.by(&root, revoke).unwrap();
    assert!(h.state.is_revoked("8f3a01"));
    let entry = h.state.revoked_certificate("8f3a01").unwrap();
    assert_eq!(entry.revoked_by, root);
    assert_eq!(entry.identity, Some(op("alice")));
}

/// Issue 56: the batch of a CRL (`RevokeCertificates`, level 2) is the admins' alone as the
/// single revocation is: an operator of every environment, a viewer, an agent and a node
/// are refused by the node's check and at apply, and nothing of the batch is revoked.
#[test]
fn only_an_admin_revokes_a_batch_of_certificates() {
    use crate::feature_level::LEVEL_2;
    use crate::revocation::CertificateRevocation;
    let mut h = hub();
    h.system(Command::SetClusterLevel { level: LEVEL_2 })
        .unwrap();
    let root = op("root");
    let (bob, vera) = (op("bob"), op("vera"));
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["*"], &[]))
        .unwrap();
    h.by(&root, bind(&vera, Role::Viewer, &[], &[])).unwrap();
    let revocation = |serial: &str| CertificateRevocation {
        serial: serial.into(),
        reason: "CA key exposed".into(),
        identity: None,
        not_after: None,
    };
    let revoke = Command::RevokeCertificates {
        certificates: vec![revocation("8F:3A:01"), revocation("8F:3A:02")],
    };
    let (agent, node) = (Identity::Agent("prod".into()), Identity::Node(1));
    only_an_admin_may(
        &mut h,
        &[&bob, &vera, &agent, &node],
        &revoke,
        "RevokeCertificates",
    );
    assert!(!h.state.is_revoked("8f3a01") && !h.state.is_revoked("8f3a02"));
    // The admin's own entry revokes both, recording the admin.
    h.by(&root, revoke).unwrap();
    for serial in ["8f3a01", "8f3a02"] {
        let entry = h.state.revoked_certificate(serial).unwrap();
        assert_eq!(entry.revoked_by, root, "{serial}");
    }
}

/// Issue 56 item 4: a cluster's feature level is raised once every member advertises it,
/// which only a node knows, so only a node sets it: an admin, an operator of every
/// environment, a viewer and an agent are refused by the node's check and at apply, and the
/// level stays as it was. A node's entry (wrapped or its own) raises it.
#[test]
fn only_a_node_sets_the_cluster_level() {
    use crate::feature_level::{simulated, FeatureLevel};
    // The next release's binary: one that applies level 2.
    let _next = simulated::next_release(2, &[]);
    let mut h = hub();
    let root = op("root");
    let (bob, vera) = (op("bob"), op("vera"));
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["*"], &[]))
        .unwrap();
    h.by(&root, bind(&vera, Role::Viewer, &[], &[])).unwrap();
    let raise = Command::SetClusterLevel {
        level: FeatureLevel(2),
    };
    for who in [&root, &bob, &vera, &Identity::Agent("prod".into())] {
        assert!(authorize(&h.state, who, &raise).is_err(), "{who}");
        let before = content(&h.state);
        let m = denied(h.by(who, raise.clone()));
        assert_eq!(
            m,
            format!("{who} may not SetClusterLevel: needs a hub node")
        );
        assert!(
            content(&h.state) == before,
            "{who}: a refusal changes nothing"
        );
        assert_eq!(h.state.cluster_level(), FeatureLevel(1), "{who}");
    }
    let node = Identity::Node(1);
    assert!(authorize(&h.state, &node, &raise).is_ok());
    h.by(&node, raise).unwrap();
    assert_eq!(h.state.cluster_level(), FeatureLevel(2));
    h.system(Command::SetClusterLevel {
        level: FeatureLevel(2),
    })
    .unwrap();
    assert_eq!(h.state.cluster_level(), FeatureLevel(2));
}

#[test]
fn the_last_admin_cannot_be_unbound() {
    let mut h = hub();
    let root = op("root");
    let unbind = |who: &Identity| Command::UnbindRole {
        identity: who.clone(),
        role: Role::Admin,
    };
    let r = h.by(&root, unbind(&root));
    assert!(
        matches!(&r, Err(CommandError::FailedPrecondition(m)) if m.contains("last admin")),
        "{r:?}"
    );
    let carol = op("carol");
    h.by(&root, bind(&carol, Role::Admin, &[], &[])).unwrap();
    assert!(h.by(&carol, unbind(&root)).is_ok());
    assert_eq!(h.state.admin_count(), 1);
    // root is no longer anything.
    denied(h.by(&root, set_secret("prod")));
}

#[test]
fn a_binding_revoked_after_the_nodes_check_is_enforced_at_apply() {
    let mut h = hub();
    let root = op("root");
    let bob = op("bob");
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["prod"], &[]))
        .unwrap();
    // The node checks against its state and proposes...
    assert!(authorize(&h.state, &bob, &set_secret("prod")).is_ok());
    // ...an unbind commits first...
    h.by(
        &root,
        Command::UnbindRole {
            identity: bob.clone(),
            role: Role::EnvironmentOperator,
        },
    )
    .unwrap();
    // ...and apply refuses the write.
    denied(h.by(&bob, set_secret("prod")));
}

#[test]
fn bad_bindings_are_refused_naming_the_field() {
    let mut h = hub();
    let root = op("root");
    let dan = op("dan");
    let field = |r: Result<CommandOutput, CommandError>| match r {
        Err(CommandError::InvalidField { field, .. }) => field,
        other => panic!("not a field refusal: {other:?}"),
    };
    let before = content(&h.state);
    for (command, want) in [
        (
            bind(&dan, Role::EnvironmentOperator, &["nowhere"], &[]),
            "environments",
        ),
        (
            bind(&dan, Role::EnvironmentOperator, &[], &[]),
            "environments",
        ),
        (
            bind(
                &dan,
                Role::EnvironmentOperator,
                &["prod"],
                &["com.example:web"],
            ),
            "products",
        ),
        (
            bind(&dan, Role::ProductEditor, &[], &["com.example:db"]),
            "products",
        ),
        (
            bind(&dan, Role::ProductEditor, &[], &["org.none:*"]),
            "products",
        ),
        (
            bind(&dan, Role::ProductEditor, &[], &["no-colon"]),
            "products",
        ),
        (bind(&dan, Role::Viewer, &["prod"], &[]), "environments"),
        (bind(&Identity::Node(2), Role::Admin, &[], &[]), "identity"),
    ] {
        assert_eq!(field(h.by(&root, command)), want);
    }
    assert!(content(&h.state) == before);
}

#[test]
fn nested_as_and_unsigned_role_changes_are_refused() {
    let mut h = hub();
    let root = op("root");
    let inner = Command::As {
        actor: root.clone(),
        command: Box::new(set_secret("prod")),
    };
    assert!(matches!(
        h.by(&root, inner),
        Err(CommandError::InvalidField { .. })
    ));
    // A role change must record who made it.
    assert!(matches!(
        h.system(bind(&op("eve"), Role::Admin, &[], &[])),
        Err(CommandError::InvalidField { field, .. }) if field == "actor"
    ));
}

#[test]
fn any_binding_reads_and_nobody_else_does() {
    let mut h = hub();
    let root = op("root");
    let vic = op("vic");
    assert!(!may_read(&h.state, &vic));
    h.by(&root, bind(&vic, Role::Viewer, &[], &[])).unwrap();
    assert!(may_read(&h.state, &vic));
    // A viewer writes nothing.
    denied(h.by(&vic, set_secret("prod")));
    let listed: BTreeSet<String> = h
        .state
        .role_bindings()
        .map(|b| format!("{}#{}", b.identity, b.role))
        .collect();
    assert_eq!(
        listed,
        BTreeSet::from([
            "operator/root#admin".to_string(),
            "operator/vic#viewer".to_string()
        ])
    );
}

#[test]
fn every_identified_write_is_audited_with_its_outcome() {
    let mut h = hub();
    let root = op("root");
    let bob = op("bob");
    let rows_before = h.state.write_audit().count();
    h.by(
        &root,
        bind(&bob, Role::EnvironmentOperator, &["stage"], &[]),
    )
    .unwrap();
    denied(h.by(&bob, set_secret("prod")));
    h.by(&bob, set_secret("stage")).unwrap();
    // A node's own entry and an agent's applied report are not audited.
    h.system(Command::ExpireSuppressions).unwrap();
    h.by(
        &Identity::Agent("prod".into()),
        Command::ReportEntityStates {
            environment: "prod".into(),
            states: Vec::new(),
        },
    )
    .unwrap();
    // An agent's report for another environment is refused, and that is audited.
    denied(h.by(
        &Identity::Agent("stage".into()),
        Command::ReportEntityStates {
            environment: "prod".into(),
            states: Vec::new(),
        },
    ));
    let rows: Vec<_> = h.state.write_audit().skip(rows_before).collect();
    let seen: Vec<(String, &str, String, bool)> = rows
        .iter()
        .map(|w| {
            (
                w.actor.to_string(),
                w.command.as_str(),
                w.target.clone(),
                w.outcome == WriteOutcome::Applied,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("operator/root".into(), "BindRole", "cluster".into(), true),
            (
                "operator/bob".into(),
                "SetSecret",
                "environment prod".into(),
                false
            ),
            (
                "operator/bob".into(),
                "SetSecret",
                "environment stage".into(),
                true
            ),
            (
                "agent/stage".into(),
                "ReportEntityStates",
                "environment prod".into(),
                false
            ),
        ]
    );
    assert!(matches!(
        &rows[1].outcome,
        WriteOutcome::Refused(CommandError::PermissionDenied(m)) if m.contains("needs environment-operator on prod")
    ));
    // Rows are keyed by their entry's index, and no secret value is in any of them.
    assert!(rows.windows(2).all(|w| w[0].index < w[1].index));
    assert!(!format!("{rows:?}").contains("s3cret"));
}

#[test]
fn retention_drops_the_oldest_rows_and_counts_them() {
    let mut h = hub();
    let root = op("root");
    let before = h.state.write_audit().count() as u64;
    assert_eq!(before, 1, "the hub's admin binding");
    h.by(&root, Command::SetAuditRetention { entries: 3 })
        .unwrap();
    for _ in 0..4 {
        h.by(&root, set_secret("prod")).unwrap();
    }
    let indexes: Vec<u64> = h.state.write_audit().map(|w| w.index).collect();
    assert_eq!(indexes.len(), 3);
    assert_eq!(
        indexes,
        [h.index - 2, h.index - 1, h.index],
        "the newest stay"
    );
    // 1 + 1 (the retention change itself) + 4 rows written, 3 kept.
    assert_eq!(h.state.audit_log().dropped, 3);
    assert_eq!(h.state.audit_log().retention, 3);
    for bad in [0, crate::audit::MAX_AUDIT_RETENTION + 1] {
        assert!(matches!(
            h.by(&root, Command::SetAuditRetention { entries: bad }),
            Err(CommandError::InvalidField { field, .. }) if field == "entries"
        ));
    }
    // Only admins set it.
    let bob = op("bob");
    h.by(&root, bind(&bob, Role::EnvironmentOperator, &["*"], &[]))
        .unwrap();
    denied(h.by(&bob, Command::SetAuditRetention { entries: 10 }));
}

fn token_hash(seed: u8) -> crate::token::TokenHash {
    crate::token::TokenSecret::from_bytes([seed; crate::token::SECRET_BYTES]).hash()
}

fn create_token(name: &str, seed: u8, ttl_ms: Option<u64>, roles: Vec<TokenRole>) -> Command {
    Command::CreateToken {
        name: name.into(),
        hash: token_hash(seed),
        ttl_ms,
        roles,
    }
}

fn token_role(role: Role, envs: &[&str]) -> TokenRole {
    TokenRole {
        role,
        environments: envs.iter().map(|s| s.to_string()).collect(),
        products: BTreeSet::new(),
    }
}

use crate::command::TokenRole;

#[test]
fn a_token_acts_with_its_roles_until_revoked() {
    let mut h = hub();
    let root = op("root");
    let ci = Identity::Token("ci".into());
    h.by(
        &root,
        create_token(
            "ci",
            1,
            None,
            vec![token_role(Role::EnvironmentOperator, &["stage"])],
        ),
    )
    .unwrap();
    assert_eq!(
        h.state.token_by_hash(&token_hash(1)).map(|t| t.identity()),
        Some(ci.clone())
    );
    h.by(&ci, set_secret("stage")).unwrap();
    let m = denied(h.by(&ci, set_secret("prod")));
    assert_eq!(
        m,
        "token/ci may not SetSecret in prod: needs environment-operator on prod"
    );
    // The audit names the token as the actor and the method.
    let last = h.state.write_audit().last().unwrap();
    assert_eq!(last.actor, ci);
    assert_eq!(last.method, crate::audit::AuthMethod::Token);
    // A token may not mint tokens (admins only) nor bind itself more.
    denied(h.by(&ci, create_token("ci2", 2, None, vec![])));
    denied(h.by(&ci, bind(&ci, Role::Admin, &[], &[])));

    h.by(&root, Command::RevokeToken { name: "ci".into() })
        .unwrap();
    assert!(h.state.token_by_hash(&token_hash(1)).is_none());
    assert_eq!(h.state.bindings_of(&ci).count(), 0);
    let before = content(&h.state);
    // An entry the node accepted before the revoke commits after it: apply refuses it.
    assert_eq!(
        denied(h.by(&ci, set_secret("stage"))),
        "token/ci is revoked"
    );
    assert_eq!(content(&h.state), before);
    // The name is free again, and the new token does not inherit the old one's roles.
    h.by(&root, create_token("ci", 3, None, vec![])).unwrap();
    assert_eq!(h.state.bindings_of(&ci).count(), 0);
    assert!(h.state.token_by_hash(&token_hash(1)).is_none());
}

#[test]
fn an_expired_token_is_refused_at_the_entry_time() {
    let mut h = hub();
    let root = op("root");
    let ci = Identity::Token("ci".into());
    // The hub's entries are stamped 1_000 + index: the token lives 3 ms.
    h.by(
        &root,
        create_token("ci", 1, Some(3), vec![token_role(Role::Admin, &[])]),
    )
    .unwrap();
    let created = h.state.token("ci").unwrap().clone();
    assert_eq!(created.expires_ms, Some(created.created_ms + 3));
    h.by(&ci, set_secret("prod")).unwrap();
    h.system(Command::ExpireSuppressions).unwrap();
    let m = denied(h.by(&ci, set_secret("prod")));
    assert!(m.starts_with("token/ci expired at "), "{m}");
}

#[test]
fn token_bad_input_is_refused_by_field_and_changes_nothing() {
    let mut h = hub();
    let root = op("root");
    h.by(&root, create_token("ci", 1, None, vec![])).unwrap();
    let before = content(&h.state);
    let invalid = |r: Result<CommandOutput, CommandError>| match r {
        Err(CommandError::InvalidField { field, .. }) => field,
        other => panic!("not a field refusal: {other:?}"),
    };
    assert_eq!(
        invalid(h.by(&root, create_token("ok", 2, Some(0), vec![]))),
        "ttl"
    );
    assert_eq!(
        invalid(h.by(
            &root,
            create_token("ok", 2, Some(crate::token::MAX_TOKEN_TTL_MS + 1), vec![])
        )),
        "ttl"
    );
    assert_eq!(
        invalid(h.by(&root, create_token("a/b", 2, None, vec![]))),
        "name"
    );
    assert_eq!(
        invalid(h.by(&root, create_token("ok", 1, None, vec![]))),
        "hash"
    );
    assert_eq!(
        invalid(h.by(
            &root,
            create_token(
                "ok",
                2,
                None,
                vec![token_role(Role::Approver, &["nowhere"])]
            )
        )),
        "environments"
    );
    assert_eq!(
        invalid(h.by(
            &root,
            create_token("ok", 2, None, vec![token_role(Role::Viewer, &[]); 2])
        )),
        "roles"
    );
    assert!(matches!(
        h.by(&root, create_token("ci", 2, None, vec![])),
        Err(CommandError::AlreadyExists { .. })
    ));
    assert!(matches!(
        h.by(
            &root,
            Command::RevokeToken {
                name: "nope".into()
            }
        ),
        Err(CommandError::NotFound { .. })
    ));
    // A binding for a token that does not exist would wait for one of that name.
    assert_eq!(
        invalid(h.by(
            &root,
            bind(&Identity::Token("nope".into()), Role::Viewer, &[], &[])
        )),
        "identity"
    );
    assert_eq!(content(&h.state), before);
}

#[test]
fn a_token_admin_is_never_the_last_admin_nor_a_bootstrap() {
    let mut h = hub();
    let root = op("root");
    let ops = Identity::Token("ops".into());
    h.by(
        &root,
        create_token("ops", 1, None, vec![token_role(Role::Admin, &[])]),
    )
    .unwrap();
    assert_eq!(h.state.admin_count(), 1);
    // root stays the last admin although the token is one too.
    assert!(matches!(
        h.by(
            &root,
            Command::UnbindRole {
                identity: root.clone(),
                role: Role::Admin
            }
        ),
        Err(CommandError::FailedPrecondition(_))
    ));
    // The token's admin role can always go.
    h.by(
        &ops,
        Command::UnbindRole {
            identity: ops.clone(),
            role: Role::Admin,
        },
    )
    .unwrap();
    // Without any admin, a token cannot bootstrap one: only an operator's certificate can.
    let mut fresh = Hub::new();
    let t = Identity::Token("x".into());
    denied(fresh.by(&t, bind(&t, Role::Admin, &[], &[])));
}
