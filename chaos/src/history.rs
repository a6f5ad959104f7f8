//! `hub-bench history`: what a node holds when every entity carries its history (issue 18:
//! memory per entity, snapshot build and install, and how they grow with the entity count).
//!
//! The state is produced by the engine itself, in this process, as the log would produce it:
//! environments of `per_environment` entities each, then `rounds` release rounds. In each
//! round a version is published, every environment's agent reports its entities (the
//! previous version, healthy), the leader's `Evaluate` issues the version-change plans, and
//! the agent reports every task of every plan succeeded, with a line of output per task.
//! After `rounds` rounds every entity has its newest finished plans and a full Activity
//! timeline, as a long-lived hub would.
//!
//! Three phases, each in its own process so each resident size is its own:
//!
//! 1. [`build`]: apply the rounds to a `State`; the resident size after (the state as a
//!    long-running node holds it, allocator churn included) and the encoded bytes per table.
//!    The state then goes into a real store (RocksDB) through the store's own snapshot
//!    install, the path a new follower takes.
//! 2. [`load`]: open that store as `hub-node` does on start (every record read and the state
//!    rebuilt): the time and the resident size; then build a snapshot as the leader does for
//!    a new follower (the store keeps it as its current snapshot file).
//! 3. [`install`]: a new follower's side: that snapshot installed into an empty store;
//!    the time and the process's peak resident size.
//!
//! The catch-up of a new follower over the network is the build, the transfer and the
//! install; the transfer is not measured here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use hub_engine::command::EntityReport;
use hub_engine::entity::Health;
use hub_engine::plan::{TaskReport, TaskState};
use hub_engine::{
    Command, CommandOutput, EntityKind, HistoryWrite, Record, RecordKey, Request, State,
    TimestampMs,
};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::vote::RaftLeaderId;
use serde::{Deserialize, Serialize};

/// The product every entity runs.
const PRODUCT: &str = "com.example:web";
/// Start of the generated history: 2026-01-01T00:00:00Z.
const START_MS: TimestampMs = 1_767_225_600_000;
/// Time between two release rounds.
const ROUND_MS: TimestampMs = 60 * 60 * 1000;

/// The shape of the generated history.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Shape {
    /// Entities in all.
    pub entities: usize,
    /// Entities per environment (one agent's report and plans per environment and round).
    pub per_environment: usize,
    /// Release rounds: each gives every entity one finished plan and its Activity lines.
    pub rounds: usize,
}

/// What [`build`] measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildReport {
    /// Raft entries applied.
    pub entries: u64,
    /// Seconds spent applying them.
    pub apply_seconds: f64,
    /// Finished plans held.
    pub finished_plans: usize,
    /// Activity lines stored, over all entities.
    pub activity_lines: usize,
    /// Resident size of this process before the first entry, KiB.
    pub rss_before_kib: u64,
    /// Resident size after the last entry, KiB: the state, and this process's own copy of
    /// the history (a node keeps history in its store; see [`LoadReport::rss_open_kib`]).
    pub rss_after_kib: u64,
    /// Encoded bytes per table: (table, records, bytes).
    pub tables: Vec<(String, usize, usize)>,
    /// Bytes of the snapshot that seeded the store.
    pub snapshot_bytes: usize,
    /// Seconds the store took to install it, or why it refused.
    pub install: Result<f64, String>,
}

/// What [`load`] measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadReport {
    /// Resident size of this process before opening the store, KiB.
    pub rss_before_kib: u64,
    /// Seconds to open the store (read every record, rebuild the state).
    pub open_seconds: f64,
    /// Resident size with the store open, KiB.
    pub rss_open_kib: u64,
    /// Bytes of the store's directory on disk.
    pub disk_bytes: u64,
    /// Seconds to build a snapshot, and its bytes, or why it failed.
    pub build: Result<(f64, usize), String>,
}

/// What [`install`] measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstallReport {
    /// Seconds for the empty store to install the snapshot, or why it refused.
    pub install: Result<f64, String>,
    /// The process's peak resident size (the snapshot's bytes included), KiB.
    pub peak_kib: u64,
    /// Resident size at the end (the installed state), KiB.
    pub rss_end_kib: u64,
}

/// Applies commands to a state at increasing indexes and times, as the log would, and keeps
/// the history they write as storage would.
struct Log {
    state: State,
    /// History records by key, encoded as a store keeps them (a node keeps them in its
    /// store, not its state; encoded, they take about a third of their decoded memory, which
    /// lets 100,000 entities' history be generated on a 24 GiB machine).
    history: BTreeMap<RecordKey, Box<[u8]>>,
    index: u64,
    now: TimestampMs,
}

impl Log {
    fn apply(&mut self, command: Command) -> anyhow::Result<CommandOutput> {
        self.index += 1;
        self.now += 1_000;
        let request = Request {
            command,
            time_ms: self.now,
            request_id: None,
        };
        let kind = request.command.kind();
        let applied = self.state.apply(&request, self.index);
        for write in applied.history {
            match write {
                HistoryWrite::Put(record) => self
                    .history
                    .insert(record.key(), raft_store::codec::encode(&*record).into()),
                HistoryWrite::Delete(key) => self.history.remove(&key),
            };
        }
        applied
            .result
            .map_err(|e| anyhow!("entry {} ({kind}) refused: {e}", self.index))
    }
}

/// A release manifest of [`PRODUCT`] at `version`.
fn manifest(version: &str) -> String {
    format!(
        "product-group: com.example\nproduct-name: web\nproduct-version: {version}\n\
         artifacts:\n  - uri: https://charts.example.com/web-{version}.tgz\n    sha256: {}\n",
        "ab".repeat(32)
    )
}

/// The output line an agent reports for a task that succeeded.
fn task_output(task: &str, version: &str) -> String {
    match task {
        "fetch" => format!("fetched https://charts.example.com/web-{version}.tgz (48213 bytes)\n"),
        "verify" => format!("sha256 {} matches\n", "ab".repeat(32)),
        "configure" => "rendered values.yaml (1742 bytes), 0 overrides\n".to_string(),
        "start" => format!("helm upgrade --install web web-{version}.tgz: revision deployed\n"),
        _ => "3/3 pods ready, 0 restarts\n".to_string(),
    }
}

/// The environments' names and their entities' ids.
type Fleet = Vec<(String, Vec<String>)>;

fn create_fleet(log: &mut Log, shape: &Shape) -> anyhow::Result<Fleet> {
    log.apply(Command::CreateProduct {
        product_id: PRODUCT.into(),
        description: "the web tier".into(),
    })?;
    let environments = shape.entities.div_ceil(shape.per_environment);
    let mut fleet = Vec::with_capacity(environments);
    for e in 0..environments {
        let environment = format!("region-{e:05}");
        log.apply(Command::CreateEnvironment {
            name: environment.clone(),
            description: format!("spoke environment {e}"),
        })?;
        let count = shape
            .per_environment
            .min(shape.entities - e * shape.per_environment);
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let out = log.apply(Command::CreateEntity {
                environment: environment.clone(),
                kind: EntityKind::HelmChart,
                name: format!("web-{i:04}"),
                product_id: PRODUCT.into(),
                k8s_namespace: Some("web".into()),
                account_id: None,
                release_channel: None,
            })?;
            let CommandOutput::EntityCreated(id) = out else {
                bail!("CreateEntity answered {out:?}");
            };
            ids.push(id);
        }
        fleet.push((environment, ids));
    }
    Ok(fleet)
}

/// One release round: publish `version`, and in every environment report, evaluate, and
/// run every issued plan to success. Returns the plans issued.
fn round(
    log: &mut Log,
    fleet: &Fleet,
    previous: Option<&str>,
    version: &str,
) -> anyhow::Result<usize> {
    log.apply(Command::PublishRelease {
        manifest: manifest(version),
    })?;
    let reported = previous.map(|v| v.parse()).transpose()?;
    let mut issued_total = 0;
    for (environment, ids) in fleet {
        log.apply(Command::ReportEntityStates {
            environment: environment.clone(),
            states: ids
                .iter()
                .map(|id| EntityReport {
                    entity: id.clone(),
                    version: reported.clone(),
                    health: Health::Healthy,
                    config_sha256: None,
                    secrets_revision: None,
                    message: String::new(),
                })
                .collect(),
        })?;
        let out = log.apply(Command::Evaluate {
            entities: ids.clone(),
            artifacts: Vec::new(),
        })?;
        let CommandOutput::Evaluated { issued } = out else {
            bail!("Evaluate answered {out:?}");
        };
        issued_total += issued.len();
        let mut reports = Vec::new();
        for plan_id in &issued {
            let plan = log
                .state
                .plan(plan_id)
                .with_context(|| format!("issued plan {plan_id} is not in the state"))?;
            for task in plan.kind.task_names() {
                reports.push(TaskReport {
                    plan_id: plan_id.clone(),
                    task: (*task).to_string(),
                    attempt: 1,
                    state: TaskState::Succeeded,
                    output: task_output(task, version),
                    failure: None,
                });
            }
        }
        if !reports.is_empty() {
            log.apply(Command::ReportTasks {
                environment: environment.clone(),
                reports,
            })?;
        }
    }
    Ok(issued_total)
}

/// Encoded bytes per table of `records`: (table, records, bytes), largest first.
fn table_bytes(records: impl Iterator<Item = Record>) -> Vec<(String, usize, usize)> {
    let mut tables: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for r in records {
        let key = format!("{:?}", r.key());
        let table = key.split('(').next().unwrap_or(&key).to_string();
        let t = tables.entry(table).or_default();
        t.0 += 1;
        t.1 += raft_store::codec::encode(&r).len();
    }
    let mut out: Vec<_> = tables.into_iter().map(|(t, (n, b))| (t, n, b)).collect();
    out.sort_by_key(|t| std::cmp::Reverse(t.2));
    out
}

/// An iterator with its length counted beforehand.
struct ExactLen<I>(I, usize);

impl<I: Iterator> Iterator for ExactLen<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        let item = self.0.next()?;
        self.1 = self.1.saturating_sub(1);
        Some(item)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.1, Some(self.1))
    }
}

impl<I: Iterator> ExactSizeIterator for ExactLen<I> {}

/// The resident size of this process, KiB.
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// A size line of `/proc/self/status` (`VmRSS:`, `VmHWM:`), KiB.
fn status_kib(field: &str) -> u64 {
    process_status_kib("self", field)
}

/// A size line of `/proc/PROCESS/status` (`PROCESS` a pid or `self`), KiB; 0 if the process
/// or the line is gone.
pub fn process_status_kib(process: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Whose store [`build`] seeds: node 1 of a one-node cluster.
#[derive(Debug, Clone)]
pub struct Seat {
    /// The cluster's id (the store refuses to open for another).
    pub cluster_id: String,
    /// Node 1's Raft address, as its membership records it.
    pub node_addr: String,
}

impl Default for Seat {
    /// The benchmark's own stores, which no node serves.
    fn default() -> Self {
        Seat {
            cluster_id: "hub-bench-history".into(),
            node_addr: "127.0.0.1:7401".into(),
        }
    }
}

/// The identity of the benchmark's stores.
fn identity() -> raft_store::NodeIdentity {
    seat_identity(&Seat::default())
}

/// Node 1's identity in `seat`'s cluster.
fn seat_identity(seat: &Seat) -> raft_store::NodeIdentity {
    raft_store::NodeIdentity {
        node_id: 1,
        cluster_id: seat.cluster_id.clone(),
    }
}

/// A one-node membership (node 1 at `node_addr`) and the log id of the seeded state.
fn seed_meta(last_index: u64, node_addr: &str) -> raft_store::SnapshotMeta {
    let log_id = openraft::LogId::new(
        openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
        last_index,
    );
    let nodes = BTreeMap::from([(1u64, openraft::BasicNode::new(node_addr))]);
    // A membership of one voter that is also its one node cannot be refused.
    let membership = openraft::Membership::new(vec![[1u64].into()], nodes)
        .expect("one voter, present in the nodes");
    raft_store::SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: raft_store::StoredMembership::new(Some(log_id), membership),
    }
}

/// A history record the bench encoded itself.
fn decode(bytes: &[u8]) -> Record {
    // Proven: `Log::apply` stored these bytes as `codec::encode` wrote them.
    raft_store::codec::decode_bounded(bytes, raft_store::codec::Limit::Snapshot)
        .expect("the bench's own encoding decodes")
}

/// Phase 1: generate the history and seed a store in `dir` with it, as node 1 of `seat`'s
/// one-node cluster (a `hub-node` started on `dir` with that id, cluster id and address
/// serves it).
pub async fn build(shape: Shape, dir: &Path, seat: &Seat) -> anyhow::Result<BuildReport> {
    if shape.per_environment == 0 || shape.entities == 0 {
        bail!("--entities and --per-environment must be at least 1");
    }
    let rss_before_kib = rss_kib();
    let mut log = Log {
        state: State::new(),
        history: BTreeMap::new(),
        index: 0,
        now: START_MS,
    };
    let started = Instant::now();
    let fleet = create_fleet(&mut log, &shape)?;
    let mut previous: Option<String> = None;
    for r in 0..shape.rounds {
        let version = format!("1.0.{r}");
        log.now = START_MS + (r as TimestampMs + 1) * ROUND_MS;
        let issued = round(&mut log, &fleet, previous.as_deref(), &version)?;
        if issued != shape.entities {
            bail!(
                "round {r} issued {issued} plans for {} entities",
                shape.entities
            );
        }
        previous = Some(version);
    }
    let apply_seconds = started.elapsed().as_secs_f64();
    let rss_after_kib = rss_kib();
    let state = &log.state;
    let finished_plans = state.plan_outcomes().count();
    let activity_lines = log
        .history
        .keys()
        .filter(|k| matches!(k, RecordKey::ActivityLine(_)))
        .count();
    let history = &log.history;
    let stored = || {
        state
            .records()
            .chain(history.values().map(|bytes| decode(bytes)))
    };
    let tables = table_bytes(stored());
    let meta = seed_meta(log.index, &seat.node_addr);
    let count = stored().count();
    // Beside the store's directory, not in it: a new store wants an empty directory.
    let seed = PathBuf::from(format!("{}.seed.snap", dir.display()));
    let data = raft_store::snapshot_data(&seed, &meta, ExactLen(stored(), count))
        .with_context(|| format!("writing {}", seed.display()))?;
    let snapshot_bytes = data.len() as usize;
    // The store builds its own state from the snapshot: this one is no longer needed.
    let entries = log.index;
    drop(log);
    let (_store, _log_store, mut sm) = raft_store::open(dir, &seat_identity(seat))
        .with_context(|| format!("opening a store in {}", dir.display()))?;
    let started = Instant::now();
    let install = sm
        .install_snapshot(&meta, data)
        .await
        .map(|()| started.elapsed().as_secs_f64())
        .map_err(|e| e.to_string());
    std::fs::remove_file(&seed).with_context(|| format!("removing {}", seed.display()))?;
    Ok(BuildReport {
        entries,
        apply_seconds,
        finished_plans,
        activity_lines,
        rss_before_kib,
        rss_after_kib,
        tables,
        snapshot_bytes,
        install,
    })
}

/// The bytes of the files under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Phase 2: open the store in `dir` as a node does, and build a snapshot.
pub async fn load(dir: &Path) -> anyhow::Result<LoadReport> {
    let rss_before_kib = rss_kib();
    let started = Instant::now();
    let (_store, _log_store, mut sm) = raft_store::open(dir, &identity())
        .with_context(|| format!("opening the store in {}", dir.display()))?;
    let open_seconds = started.elapsed().as_secs_f64();
    let rss_open_kib = rss_kib();
    let disk_bytes = disk_bytes(dir);
    let started = Instant::now();
    let build = sm
        .build_snapshot()
        .await
        .map(|s| (started.elapsed().as_secs_f64(), s.snapshot.len() as usize))
        .map_err(|e| e.to_string());
    Ok(LoadReport {
        rss_before_kib,
        open_seconds,
        rss_open_kib,
        disk_bytes,
        build,
    })
}

/// Phase 3: install the current snapshot of the store in `from` into an empty store in
/// `empty`.
pub async fn install(from: &Path, empty: &Path) -> anyhow::Result<InstallReport> {
    let file = raft_store::snapshot_path(from);
    let meta = raft_store::read_current_meta(from)?
        .with_context(|| format!("{}: no snapshot", file.display()))?;
    let data = raft_store::SnapshotData::open(&file).with_context(|| file.display().to_string())?;
    let (_store, _log_store, mut sm) = raft_store::open(empty, &identity())
        .with_context(|| format!("opening a store in {}", empty.display()))?;
    let started = Instant::now();
    let install = sm
        .install_snapshot(&meta, data)
        .await
        .map(|()| started.elapsed().as_secs_f64())
        .map_err(|e| e.to_string());
    Ok(InstallReport {
        install,
        peak_kib: status_kib("VmHWM:"),
        rss_end_kib: rss_kib(),
    })
}
