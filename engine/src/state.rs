//! The replicated state and the deterministic [`State::apply`].

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use crate::command::{Command, CommandOutput, Request};
use crate::entity::{Entity, EntityId, EntityKind, DEFAULT_RELEASE_CHANNEL, MAX_ENTITY_ID_LEN};
use crate::environment::Environment;
use crate::error::CommandError;
use crate::name::{validate_name, validate_product_id};
use crate::record::{Record, RecordKey, RequestRecord};
use crate::TimestampMs;

/// How long a request id is remembered for deduplication (entry time, not wall time).
pub const REQUEST_TTL_MS: TimestampMs = 60 * 60 * 1000;

/// The result of applying one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// What the command produced, or why it was refused (then nothing changed but, at most,
    /// the remembered request id).
    pub result: Result<CommandOutput, CommandError>,
    /// Every record key whose value changed (set or removed); storage persists exactly these.
    pub changed: Vec<RecordKey>,
}

/// Everything the hub replicates. Built only by applying commands in log order (or by loading
/// records that were produced that way).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    environments: BTreeMap<String, Environment>,
    entities: BTreeMap<String, Entity>,
    requests: BTreeMap<String, RequestRecord>,
    /// `(first applied at, request id)`, to forget request ids in time order.
    request_expiry: BTreeSet<(TimestampMs, String)>,
}

impl State {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `req`, which Raft committed at log `index`. Deterministic: the result depends
    /// only on the state, the request and `index`.
    pub fn apply(&mut self, req: &Request, index: u64) -> Applied {
        let mut changed = Vec::new();
        if let Some(id) = &req.request_id {
            if let Some(prev) = self.requests.get(id) {
                return Applied {
                    result: prev.result.clone(),
                    changed,
                };
            }
        }
        let result = self.execute(&req.command, req.time_ms, &mut changed);
        if let Some(id) = &req.request_id {
            let record = RequestRecord {
                id: id.clone(),
                index,
                time_ms: req.time_ms,
                result: result.clone(),
            };
            self.request_expiry.insert((req.time_ms, id.clone()));
            self.requests.insert(id.clone(), record);
            changed.push(RecordKey::Request(id.clone()));
        }
        self.forget_requests_before(req.time_ms - REQUEST_TTL_MS, &mut changed);
        self.check_invariants();
        Applied { result, changed }
    }

    fn execute(
        &mut self,
        command: &Command,
        now: TimestampMs,
        changed: &mut Vec<RecordKey>,
    ) -> Result<CommandOutput, CommandError> {
        match command {
            Command::CreateEnvironment { name, description } => {
                validate_name("name", name)?;
                if description.len() > 1024 {
                    return Err(CommandError::invalid(
                        "description",
                        "longer than 1024 bytes",
                    ));
                }
                if self.environments.contains_key(name) {
                    return Err(CommandError::AlreadyExists {
                        kind: "environment".into(),
                        name: name.clone(),
                    });
                }
                self.environments.insert(
                    name.clone(),
                    Environment {
                        name: name.clone(),
                        description: description.clone(),
                        created_at_ms: now,
                    },
                );
                changed.push(RecordKey::Environment(name.clone()));
                Ok(CommandOutput::EnvironmentCreated(name.clone()))
            }
            Command::DeleteEnvironment { name } => {
                if !self.environments.contains_key(name) {
                    return Err(CommandError::NotFound {
                        kind: "environment".into(),
                        name: name.clone(),
                    });
                }
                let count = self.entities_of(name).count();
                if count > 0 {
                    return Err(CommandError::FailedPrecondition(format!(
                        "environment {name:?} still has {count} entities; delete them first"
                    )));
                }
                self.environments.remove(name);
                changed.push(RecordKey::Environment(name.clone()));
                Ok(CommandOutput::EnvironmentDeleted(name.clone()))
            }
            Command::CreateEntity {
                environment,
                kind,
                name,
                product_id,
                k8s_namespace,
                account_id,
                release_channel,
            } => {
                validate_name("environment", environment)?;
                validate_name("name", name)?;
                validate_product_id("product_id", product_id)?;
                let k8s_namespace = non_empty(k8s_namespace);
                let account_id = non_empty(account_id);
                match kind {
                    EntityKind::HelmChart => match &k8s_namespace {
                        None => {
                            return Err(CommandError::invalid(
                                "k8s_namespace",
                                "required for a helmChart entity",
                            ))
                        }
                        Some(ns) => validate_name("k8s_namespace", ns)?,
                    },
                    EntityKind::TerraformModule => {
                        if k8s_namespace.is_some() {
                            return Err(CommandError::invalid(
                                "k8s_namespace",
                                "only helmChart entities have a namespace",
                            ));
                        }
                    }
                }
                if account_id.is_some() && *kind != EntityKind::TerraformModule {
                    return Err(CommandError::invalid(
                        "account_id",
                        "only terraformModule entities have an account",
                    ));
                }
                let release_channel = non_empty(release_channel)
                    .unwrap_or_else(|| DEFAULT_RELEASE_CHANNEL.to_string());
                if !self.environments.contains_key(environment) {
                    return Err(CommandError::NotFound {
                        kind: "environment".into(),
                        name: environment.clone(),
                    });
                }
                let id = EntityId::new(environment, *kind, name);
                if id.0.len() >= MAX_ENTITY_ID_LEN {
                    return Err(CommandError::invalid(
                        "name",
                        format!("entity id {id} must be shorter than {MAX_ENTITY_ID_LEN}"),
                    ));
                }
                if self.entities.contains_key(&id.0) {
                    return Err(CommandError::AlreadyExists {
                        kind: "entity".into(),
                        name: id.0,
                    });
                }
                let entity = Entity {
                    id: id.clone(),
                    environment: environment.clone(),
                    kind: *kind,
                    name: name.clone(),
                    product_id: product_id.clone(),
                    k8s_namespace,
                    account_id,
                    release_channel,
                    created_at_ms: now,
                };
                self.entities.insert(id.0.clone(), entity);
                changed.push(RecordKey::Entity(id.0.clone()));
                Ok(CommandOutput::EntityCreated(id.0))
            }
        }
    }

    fn forget_requests_before(&mut self, cutoff: TimestampMs, changed: &mut Vec<RecordKey>) {
        while let Some((t, id)) = self.request_expiry.first().cloned() {
            if t >= cutoff {
                break;
            }
            self.request_expiry.pop_first();
            self.requests.remove(&id);
            changed.push(RecordKey::Request(id));
        }
    }

    /// Cheap structural checks, run after every apply in debug builds.
    fn check_invariants(&self) {
        debug_assert_eq!(self.requests.len(), self.request_expiry.len());
        debug_assert!(self
            .entities
            .values()
            .all(|e| self.environments.contains_key(&e.environment)));
    }

    /// An environment by name.
    pub fn environment(&self, name: &str) -> Option<&Environment> {
        self.environments.get(name)
    }

    /// All environments, by name.
    pub fn environments(&self) -> impl Iterator<Item = &Environment> {
        self.environments.values()
    }

    /// The entities of one environment, by id.
    pub fn entities_of<'a>(&'a self, environment: &str) -> impl Iterator<Item = &'a Entity> + 'a {
        let prefix = EntityId::environment_prefix(environment);
        self.entities
            .range(prefix.clone()..)
            .take_while(move |(id, _)| id.starts_with(&prefix))
            .map(|(_, e)| e)
    }

    /// All entities, by id.
    pub fn entities(&self) -> impl Iterator<Item = &Entity> {
        self.entities.values()
    }

    /// The current record under `key`, if any.
    pub fn record(&self, key: &RecordKey) -> Option<Record> {
        match key {
            RecordKey::Environment(n) => self.environments.get(n).cloned().map(Record::Environment),
            RecordKey::Entity(n) => self.entities.get(n).cloned().map(Record::Entity),
            RecordKey::Request(n) => self.requests.get(n).cloned().map(Record::Request),
        }
    }

    /// Every record, in key order.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        let envs = self.environments.values().cloned().map(Record::Environment);
        let ents = self.entities.values().cloned().map(Record::Entity);
        let reqs = self.requests.values().cloned().map(Record::Request);
        envs.chain(ents).chain(reqs)
    }

    /// Adds a record while loading persisted state or a snapshot.
    pub fn insert_record(&mut self, record: Record) {
        match record {
            Record::Environment(e) => {
                self.environments.insert(e.name.clone(), e);
            }
            Record::Entity(e) => {
                self.entities.insert(e.id.0.clone(), e);
            }
            Record::Request(r) => {
                self.request_expiry.insert((r.time_ms, r.id.clone()));
                self.requests.insert(r.id.clone(), r);
            }
        }
    }

    /// SHA-256 over every record in key order, hex encoded. Equal on every node that applied
    /// the same log prefix.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for record in self.records() {
            let key = record.key().to_bytes();
            let value = canonical_bytes(&record);
            hasher.update((key.len() as u64).to_le_bytes());
            hasher.update(&key);
            hasher.update((value.len() as u64).to_le_bytes());
            hasher.update(&value);
        }
        hex::encode(hasher.finalize())
    }
}

/// A deterministic encoding of a record for the digest.
fn canonical_bytes(record: &Record) -> Vec<u8> {
    // Encoding plain data structs into a Vec cannot fail: there is no I/O and no size limit.
    bincode::serde::encode_to_vec(record, bincode::config::standard())
        .expect("encoding a record into memory cannot fail")
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value.as_ref().filter(|v| !v.is_empty()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(command: Command, time_ms: TimestampMs) -> Request {
        Request {
            command,
            time_ms,
            request_id: None,
        }
    }

    fn create_env(name: &str) -> Command {
        Command::CreateEnvironment {
            name: name.into(),
            description: String::new(),
        }
    }

    fn create_helm(env: &str, name: &str) -> Command {
        Command::CreateEntity {
            environment: env.into(),
            kind: EntityKind::HelmChart,
            name: name.into(),
            product_id: "com.example:web".into(),
            k8s_namespace: Some("web".into()),
            account_id: None,
            release_channel: None,
        }
    }

    #[test]
    fn creates_environments_and_entities() {
        let mut s = State::new();
        let a = s.apply(&req(create_env("prod"), 10), 1);
        assert_eq!(
            a.result,
            Ok(CommandOutput::EnvironmentCreated("prod".into()))
        );
        assert_eq!(a.changed, vec![RecordKey::Environment("prod".into())]);
        let a = s.apply(&req(create_helm("prod", "web"), 11), 2);
        assert_eq!(
            a.result,
            Ok(CommandOutput::EntityCreated(
                "eid:prod:helmChart:web".into()
            ))
        );
        let e = s.entities_of("prod").next().unwrap();
        assert_eq!(e.release_channel, "RELEASE");
        assert_eq!(e.created_at_ms, 11);
    }

    #[test]
    fn refused_commands_change_nothing() {
        // SPEC S3
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        let before = s.clone();
        let digest = s.digest();
        for cmd in [
            create_env("prod"),
            create_env("Bad"),
            create_helm("nope", "web"),
            Command::DeleteEnvironment {
                name: "nope".into(),
            },
            Command::CreateEntity {
                environment: "prod".into(),
                kind: EntityKind::HelmChart,
                name: "web".into(),
                product_id: "com.example:web".into(),
                k8s_namespace: None,
                account_id: None,
                release_channel: None,
            },
        ] {
            let a = s.apply(&req(cmd, 2), 2);
            assert!(a.result.is_err());
            assert!(a.changed.is_empty());
        }
        assert_eq!(s, before);
        assert_eq!(s.digest(), digest);
    }

    #[test]
    fn duplicate_names_fail_with_the_name() {
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        let err = s.apply(&req(create_env("prod"), 1), 2).result.unwrap_err();
        assert_eq!(err.to_string(), "environment \"prod\" already exists");
        s.apply(&req(create_helm("prod", "web"), 1), 3);
        let err = s
            .apply(&req(create_helm("prod", "web"), 1), 4)
            .result
            .unwrap_err();
        assert!(err.to_string().contains("eid:prod:helmChart:web"), "{err}");
    }

    #[test]
    fn an_environment_with_entities_is_not_deleted() {
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        s.apply(&req(create_helm("prod", "web"), 1), 2);
        let a = s.apply(
            &req(
                Command::DeleteEnvironment {
                    name: "prod".into(),
                },
                1,
            ),
            3,
        );
        assert!(a.result.unwrap_err().to_string().contains("1 entities"));
        assert!(s.environment("prod").is_some());
    }

    #[test]
    fn request_ids_apply_once_and_expire() {
        let mut s = State::new();
        let mut r = req(create_env("prod"), 1_000);
        r.request_id = Some("k1".into());
        let first = s.apply(&r, 1);
        assert!(first.result.is_ok());
        let again = s.apply(&r, 2);
        assert_eq!(again.result, first.result);
        assert!(again.changed.is_empty());
        // After the TTL the id is forgotten on the next apply.
        let later = s.apply(&req(create_env("dev"), 1_000 + REQUEST_TTL_MS + 1), 3);
        assert!(later.changed.contains(&RecordKey::Request("k1".into())));
        assert!(s.record(&RecordKey::Request("k1".into())).is_none());
    }

    #[test]
    fn entities_of_does_not_leak_across_prefixes() {
        let mut s = State::new();
        for env in ["prod", "prod2"] {
            s.apply(&req(create_env(env), 1), 1);
            s.apply(&req(create_helm(env, "web"), 1), 2);
        }
        assert_eq!(s.entities_of("prod").count(), 1);
        assert_eq!(s.entities_of("prod2").count(), 1);
    }

    #[test]
    fn records_rebuild_an_equal_state_and_digest() {
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        s.apply(&req(create_helm("prod", "web"), 2), 2);
        let mut r = req(create_env("dev"), 3);
        r.request_id = Some("x".into());
        s.apply(&r, 3);
        let mut t = State::new();
        for rec in s.records() {
            t.insert_record(rec);
        }
        assert_eq!(s, t);
        assert_eq!(s.digest(), t.digest());
        assert_ne!(s.digest(), State::new().digest());
    }

    /// A tiny deterministic generator, so a failing seed can be replayed exactly.
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn pick(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn random_request(rng: &mut SplitMix, t: TimestampMs) -> Request {
        let env = format!("e{}", rng.pick(6));
        let command = match rng.pick(4) {
            0 => create_env(&env),
            1 => Command::DeleteEnvironment { name: env },
            _ => create_helm(&env, &format!("s{}", rng.pick(4))),
        };
        let request_id = (rng.pick(3) == 0).then(|| format!("r{}", rng.pick(20)));
        Request {
            command,
            time_ms: t,
            request_id,
        }
    }

    #[test]
    fn random_histories_are_deterministic_and_rebuildable() {
        for seed in 0..50u64 {
            let mut rng = SplitMix(seed);
            let (mut a, mut b) = (State::new(), State::new());
            let mut t = 0;
            for index in 1..=200u64 {
                // Time jumps now and then past the request-id TTL.
                t += if rng.pick(50) == 0 {
                    REQUEST_TTL_MS
                } else {
                    1_000
                };
                let req = random_request(&mut rng, t);
                let ra = a.apply(&req, index);
                let rb = b.apply(&req, index);
                assert_eq!(ra, rb, "seed {seed} index {index}");
                // Storage persists exactly the changed keys: rebuilding from records is exact.
                let mut rebuilt = State::new();
                for rec in a.records() {
                    rebuilt.insert_record(rec);
                }
                assert_eq!(rebuilt, a, "seed {seed} index {index}");
            }
            assert_eq!(a.digest(), b.digest(), "seed {seed}");
        }
    }
}
