//! The recorded history of a chaos run: what clients did and saw, what agents executed, and
//! what the cluster looked like after healing. Saved as `history.json`; every checker reads
//! its part from here.
//!
//! Times are nanoseconds on the runner's monotonic clock (agents on the same machine log the
//! same `CLOCK_MONOTONIC`). Every part may be empty; a checker with no input passes.

use serde::{Deserialize, Serialize};

/// Everything a run recorded. Missing parts deserialize as empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct History {
    /// Reads and writes of single-value registers (one register per key).
    pub register_ops: Vec<RegisterOp>,
    /// Register writes acknowledged Ok; merged with the Ok writes of `register_ops` by id.
    pub acked_writes: Vec<AckedWrite>,
    /// `(key, value)` read from every node after healing (one entry per node and key).
    pub final_reads: Vec<(String, Option<u64>)>,
    /// Adds to the append-only set workload.
    pub set_adds: Vec<SetAdd>,
    /// The append-only set read after healing.
    pub final_set: Vec<String>,
    /// Task executions gathered from the agents' logs.
    pub task_executions: Vec<TaskExecution>,
    /// Plans as the hub records them after healing.
    pub hub_plans: Vec<HubPlan>,
    /// Committed and applied canary weights, one entry per canary revision.
    pub canary_runs: Vec<CanaryRun>,
    /// Rollouts as the hub records them after healing.
    pub rollouts: Vec<Rollout>,
    /// State-machine digests of every node after healing.
    pub node_digests: Vec<NodeDigest>,
    /// The true wall time (ms since the Unix epoch) of the runner's epoch, which task
    /// execution times count from; `None` in a history that does not say.
    #[serde(default)]
    pub epoch_wall_ms: Option<i64>,
    /// Disk faults as struck, and what the node they hit did.
    #[serde(default)]
    pub disk_strikes: Vec<DiskStrike>,
    /// The cluster's first members (for the membership checker; empty when it made no
    /// change).
    #[serde(default)]
    pub initial_members: Vec<u64>,
    /// Membership changes as made.
    #[serde(default)]
    pub membership_changes: Vec<MembershipChange>,
    /// What members and removed nodes said of the cluster, sampled during and after the run.
    #[serde(default)]
    pub member_samples: Vec<MemberSample>,
    /// The fleet workload: releases rolled out in waves, their committed progress and plans.
    #[serde(default)]
    pub fleet: FleetHistory,
    /// The nodes' processes and logs as the runner sampled them, and where faults held.
    #[serde(default)]
    pub resources: ResourceHistory,
    /// A rolling upgrade across releases (`--faults upgrade`), if the run had one.
    #[serde(default)]
    pub upgrade: Option<super::UpgradeHistory>,
}

/// What the resource budgets are judged on: samples of every member's process and log, the
/// workload-only period before the first fault, and the windows where faults held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceHistory {
    /// Every sample, in the order taken.
    pub samples: Vec<ResourceSample>,
    /// The workload ran and no fault held in `[from, to)` (ns): each node's CPU there is its
    /// pre-fault level. `None` when the run had no such period.
    pub baseline_ns: Option<(u64, u64)>,
    /// Where each fault held.
    pub windows: Vec<FaultWindow>,
}

/// One reading of a node's process and log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceSample {
    /// The node.
    pub node: u64,
    /// When it was taken.
    pub at_ns: u64,
    /// The node's process (`None`: none was running).
    pub pid: Option<u32>,
    /// CPU time that process has used, user and system, in ms.
    pub cpu_ms: u64,
    /// Its resident memory, in KiB.
    pub rss_kib: u64,
    /// Its open file descriptors.
    pub fds: u64,
    /// Bytes in the node's log so far (every process of the node appends to it).
    pub log_bytes: u64,
    /// Lines in the node's log so far.
    pub log_lines: u64,
}

/// Where one fault held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultWindow {
    /// The fault's name (`kill-leader`, …).
    pub fault: String,
    /// When it took effect (ns).
    pub from_ns: u64,
    /// When it was healed (ns).
    pub to_ns: u64,
    /// The nodes it killed, paused, restarted or stopped the disk of: not judged on CPU.
    pub struck: Vec<u64>,
    /// Whether the other nodes' CPU is judged (not for a membership change, whose catch-up
    /// of a new node is work the fault asks for).
    pub cpu_judged: bool,
}

/// What the fleet workload recorded: the releases of its product, each release's committed
/// wave progress as the healed hub reports it, and the product's plans.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FleetHistory {
    /// The fleet product (`group:name`); empty when the workload did not run.
    pub product: String,
    /// Every release the workload published (the hub acknowledged), with its rollout status
    /// after healing.
    pub releases: Vec<FleetRelease>,
    /// The product's plans, as the hub records them after healing.
    pub plans: Vec<FleetPlan>,
    /// When faults that struck the leader (kills, pauses, partitions, whole-cluster restarts)
    /// took effect, in ms since the Unix epoch: to count soaks they crossed.
    pub leader_faults_ms: Vec<i64>,
    /// Releases the workload halted as an operator would (`HaltRollout`).
    pub operator_halts: Vec<String>,
}

/// One fleet release and its rollout status after healing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetRelease {
    /// The version.
    pub version: String,
    /// Whether the healed hub answered its `rollout_status` (false: the rest is empty).
    pub status_read: bool,
    /// The halt's cause, when the rollout is halted.
    pub halted: Option<String>,
    /// The waves in policy order (the entities in no wave left out).
    pub waves: Vec<FleetWave>,
}

/// One wave of a release's rollout as committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetWave {
    /// The wave's name.
    pub name: String,
    /// Its entities.
    pub entities: Vec<String>,
    /// Of those, done with the release.
    pub done: usize,
    /// Whether it has passed (soaked or promoted).
    pub passed: bool,
    /// Whether an operator promoted it.
    pub promoted: bool,
    /// The committed completion time (ms since the Unix epoch).
    pub completed_ms: Option<i64>,
    /// The committed soak end (ms since the Unix epoch).
    pub soak_until_ms: Option<i64>,
}

/// A plan of the fleet product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPlan {
    /// The plan id.
    pub id: String,
    /// The entity.
    pub entity: String,
    /// `install`, `version-change`, `rollback`, …
    pub kind: String,
    /// The target version, if any.
    pub to_version: Option<String>,
    /// `issued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    /// The time of the entry that issued it (ms since the Unix epoch).
    pub issued_ms: Option<i64>,
    /// That entry's log index.
    pub issued_index: Option<u64>,
}

/// One membership change as the runner made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipChange {
    /// When the cluster had taken it (the runner's clock, ns from its epoch).
    pub at_ns: u64,
    /// The node added, if any.
    pub added: Option<u64>,
    /// The node removed, if any.
    pub removed: Option<u64>,
    /// Whether the removed node's process was left running.
    pub kept_running: bool,
}

/// What one process said of the cluster at one time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSample {
    /// When (ns from the runner's epoch).
    pub at_ns: u64,
    /// The process's node id.
    pub node: u64,
    /// Its role (`leader`, `follower`, `candidate`, `learner`, `shutdown`).
    pub role: String,
    /// Its leader, if it knows one.
    pub leader: Option<u64>,
    /// The voters of its membership.
    pub voters: Vec<u64>,
    /// Taken after healing, when the membership must have settled.
    pub settled: bool,
}

/// A disk fault as struck (`disk-full` or `fsync-error`) and what its node did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStrike {
    /// The node.
    pub node: u64,
    /// The fault.
    pub fault: DiskFault,
    /// Bytes of ballast that filled the disk (`disk-full`).
    pub ballast_bytes: u64,
    /// Syncs that failed under the node (`fsync-error`).
    pub syncs_failed: u64,
    /// Whether the node's process stopped while the fault held.
    pub stopped: bool,
    /// Whether it stopped the clean way: hub-node's crash-stop line in its log (not a
    /// panic, an abort or another death).
    pub clean_stop: bool,
    /// Whether it served again (answered a status call) after the fault ended.
    pub served_again: bool,
}

/// Which disk fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskFault {
    /// Its filesystem had no free block.
    DiskFull,
    /// Every sync under it failed with EIO.
    FsyncError,
}

/// One client operation on a register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterOp {
    /// Unique id of the operation in the run.
    pub id: u64,
    /// The client (a sequential process) that issued it.
    pub client: u32,
    /// The register.
    pub key: String,
    /// Read or write.
    pub kind: OpKind,
    /// When the client sent the request.
    pub invoke_ns: u64,
    /// When the client got the answer; `None` when it never did.
    pub complete_ns: Option<u64>,
    /// What the client learned.
    pub outcome: Outcome,
}

/// What a register operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpKind {
    /// Sets the register to `value`.
    Write {
        /// The value written (unique per key in the runner's workload).
        value: u64,
    },
    /// Returns the register's current value.
    Read,
    /// Sets the register to `new` if it holds `expect` (Jepsen's compare-and-set; the
    /// runner's own workload issues none).
    Cas {
        /// The value the register must hold.
        expect: u64,
        /// The value it gets then.
        new: u64,
    },
}

/// What the client learned about an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// It took effect between invoke and completion; reads carry the value
    /// (`None`: the key was never written).
    Ok {
        /// The value a read returned; `None` for writes.
        read_value: Option<u64>,
    },
    /// It definitely did not take effect (refused before being proposed).
    Failed,
    /// A compare-and-set that completed and did not swap: the register did not hold the
    /// expected value at its linearization point.
    Mismatch,
    /// Timed out or the connection was lost: it may take effect at any time after invoke, or
    /// never.
    Unknown,
}

/// A register write acknowledged Ok.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckedWrite {
    /// The operation id (same as the [`RegisterOp`] id when that op is recorded too).
    pub id: u64,
    /// The register.
    pub key: String,
    /// The value written.
    pub value: u64,
}

/// One add to the append-only set workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAdd {
    /// Unique id of the operation in the run.
    pub id: u64,
    /// The element added.
    pub element: String,
    /// What the client learned.
    pub outcome: AddOutcome,
}

/// What the client learned about a set add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddOutcome {
    /// Acknowledged: it must be in the final set.
    Ok,
    /// Refused before being proposed: it must not have taken effect.
    Failed,
    /// Timed out or lost: it may or may not be in the final set.
    Unknown,
}

/// One line of an agent's task log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskExecution {
    /// The agent that executed the task.
    pub agent: String,
    /// The plan id (`p-12-0`).
    pub plan: String,
    /// The entity the plan acts on.
    pub entity: String,
    /// The task within the plan.
    pub task: String,
    /// Attempt number (retries of the same task count up).
    pub attempt: u32,
    /// What happened.
    pub state: TaskState,
    /// When it happened.
    pub at_ns: u64,
}

/// A task-log event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// The agent started the task.
    Started,
    /// The task finished successfully.
    Succeeded,
    /// The task finished with an error.
    Failed,
}

/// A plan as the hub records it after healing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubPlan {
    /// The plan id.
    pub id: String,
    /// The entity the plan acts on.
    pub entity: String,
    /// `issued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    /// The plan's tasks.
    pub tasks: Vec<String>,
    /// The time of the entry that issued it to its agent (the hub's time, ms since the Unix
    /// epoch).
    #[serde(default)]
    pub issued_ms: Option<i64>,
    /// That entry's log index.
    #[serde(default)]
    pub issued_index: Option<u64>,
}

/// Canary weights of one canary revision: what the hub committed and what was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryRun {
    /// The canary revision.
    pub canary: String,
    /// `(step, weight)` committed by the hub.
    pub committed: Vec<(u64, u8)>,
    /// `(step, weight)` applied to the traffic split, in application order.
    pub applied: Vec<(u64, u8)>,
}

/// A rollout as the hub records it after healing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The rollout id.
    pub id: String,
    /// `release`, `module` or `canary`.
    pub kind: String,
    /// The hub's state name.
    pub state: String,
    /// Whether the state is terminal.
    pub terminal: bool,
}

/// A node's state-machine digest after healing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDigest {
    /// The node id.
    pub node: u64,
    /// The log index the digest was taken at.
    pub applied_index: u64,
    /// The digest of the state machine at that index.
    pub digest: String,
}
