//! The hub's pure domain: the replicated [`State`], the [`Command`]s that change it, and the
//! leader's decisions about it.
//!
//! Nothing here does I/O or reads a clock. Every command is applied with the time stamped on
//! its Raft entry ([`State::apply`]), so every node that applies the same log reaches the same
//! state, byte for byte ([`State::digest`]). Decisions ([`evaluate::evaluate`]) are pure
//! functions of the state, a time and the artifact checks the leader observed.
//!
//! # Layout
//!
//! The modules form layers; each imports only from the layers above it.
//!
//! 1. **Data**, the replicated types and nothing that changes the state:
//!    [`environment`], [`entity`], [`product`] and [`release`] (the catalog), [`window`]
//!    and [`settings`], [`suppression`], [`plan`], [`activity`], [`installation`] and
//!    [`module`] (module definitions, rendering), [`canary`] (the Flagger-style phase
//!    machine and the types of canary rollouts) and [`canary_record`], [`metric_template`]
//!    (Flagger's MetricTemplates, which canary metrics reference), [`alert_provider`] (Flagger's
//!    AlertProviders, where canary alerts go), [`cluster_key`],
//!    [`role`], [`audit`] and [`token`] (who may act, what they did, operator tokens),
//!    [`revocation`] (the replicated list of revoked certificates), [`feature_level`]
//!    (the level at which each command was introduced, the cluster's replicated level, and
//!    the rule for changing apply after a release),
//!    [`labels`] (environment labels), [`rollout_policy`] (a product's waves, parsed from
//!    YAML) and [`rollout`] (the committed progress of a release's rollout: soak ends,
//!    promotions, halts; see `docs/FLEET.md`),
//!    [`artifact`], [`name`], [`yaml_error`] and [`yaml_budget`] (validation; every YAML
//!    text is checked against its parse budget before it is parsed). The wire and log types:
//!    [`command`] (what can be proposed), [`record`] (what is stored), [`error`].
//! 2. **Tables**: [`state`] holds the tables and the one lookup that joins them, with read
//!    accessors; `table` (private) is a table whose writes record the changed keys and keep
//!    its lookups current, and `tables` (private) the one declaration of which row each table
//!    holds, how it is persisted and what it indexes.
//! 3. **Decisions**: [`evaluate`] runs every constraint for an entity at a time and says
//!    what the leader would issue, with each constraint's [`evaluate::Reason`] as data
//!    (the `rollout-wave` constraint and [`evaluate::rollout_status`] read waves);
//!    [`feature_gate`] refuses a command above the cluster's feature level (apply, and a
//!    node before proposing); [`leader`] is the leader's policy on top: whether an
//!    evaluation is worth proposing, when to look again, what to watch, and whether a
//!    canary's tick is due.
//! 4. **Transitions**: `apply` (private) is the only module that changes the state: one
//!    exhaustive `match` on [`Command`], and one file per command family; after every
//!    command that succeeded, the wave bookkeeping commits which waves became done and
//!    which rollouts a failure halts, at the entry's time.
//!
//! # Example
//!
//! Publish a release, report what an entity runs, evaluate it and issue the plan:
//!
//! ```
//! use hub_engine::command::EntityReport;
//! use hub_engine::entity::Health;
//! use hub_engine::plan::PlanKind;
//! use hub_engine::evaluate::Outcome;
//! use hub_engine::{evaluate, Command, CommandOutput, EntityKind, Request, State};
//!
//! let mut state = State::new();
//! let mut index = 0;
//! let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
//! let mut apply = |state: &mut State, command: Command| {
//!     index += 1;
//!     let request = Request { command, time_ms: now, request_id: None };
//!     state.apply(&request, index).result.expect("applied")
//! };
//! apply(&mut state, Command::CreateEnvironment { name: "prod".into(), description: String::new() });
//! apply(&mut state, Command::CreateProduct {
//!     product_id: "com.example:web".into(),
//!     description: String::new(),
//! });
//! let CommandOutput::EntityCreated(web) = apply(&mut state, Command::CreateEntity {
//!     environment: "prod".into(),
//!     kind: EntityKind::HelmChart,
//!     name: "web".into(),
//!     product_id: "com.example:web".into(),
//!     k8s_namespace: Some("web".into()),
//!     account_id: None,
//!     release_channel: None,
//! }) else { unreachable!() };
//! for version in ["1.0.0", "1.1.0"] {
//!     let manifest = format!(
//!         "product-group: com.example\nproduct-name: web\nproduct-version: {version}\n\
//!          artifacts:\n  - uri: https://charts.example.com/web-{version}.tgz\n    sha256: {}\n",
//!         "0".repeat(64)
//!     );
//!     apply(&mut state, Command::PublishRelease { manifest });
//! }
//! // The agent reports 1.0.0, healthy.
//! apply(&mut state, Command::ReportEntityStates {
//!     environment: "prod".into(),
//!     states: vec![EntityReport {
//!         entity: web.clone(),
//!         version: Some("1.0.0".parse().unwrap()),
//!         health: Health::Healthy,
//!         config_sha256: None,
//!         secrets_revision: None,
//!         message: String::new(),
//!     }],
//! });
//! // The leader evaluates (a pure function) and proposes `Evaluate`; applying it issues the
//! // plan, re-evaluated at the entry's time.
//! let decision = evaluate(&state, &web, now, &|_| None).expect("the entity exists");
//! assert_eq!(decision.outcome, Outcome::Issue, "{}", decision.summary());
//! let CommandOutput::Evaluated { issued } = apply(&mut state, Command::Evaluate {
//!     entities: vec![web.clone()],
//!     artifacts: Vec::new(),
//! }) else { unreachable!() };
//! let plan = state.plan(&issued[0]).expect("issued");
//! assert_eq!(plan.kind, PlanKind::VersionChange);
//! assert_eq!(plan.to_version.as_ref().map(ToString::to_string).as_deref(), Some("1.1.0"));
//! ```

pub mod access;
pub mod activity;
pub mod alert_provider;
mod apply;
pub mod approval;
pub mod artifact;
pub mod audit;
pub mod canary;
pub mod canary_events;
pub mod canary_history;
pub mod canary_judging;
pub mod canary_record;
pub mod cluster_key;
pub mod cluster_members;
pub mod command;
pub mod entity;
pub mod entry_clock;
pub mod environment;
pub mod error;
pub mod evaluate;
pub mod feature_gate;
pub mod feature_level;
pub mod installation;
pub mod labels;
pub mod leader;
pub mod metric_template;
pub mod module;
pub mod module_channel;
pub mod name;
pub mod never_healthy;
pub mod plan;
pub mod plan_outcome;
pub mod product;
pub mod record;
pub mod release;
pub mod revocation;
pub mod role;
pub mod rollout;
pub mod rollout_policy;
pub mod settings;
pub mod state;
pub mod suppression;
mod table;
mod tables;
pub mod token;
pub mod window;
pub mod window_exception;
pub use hub_wire::yaml_budget;
pub use hub_wire::yaml_error;

pub use command::{Command, CommandOutput, Request};
pub use entity::{Entity, EntityId, EntityKind};
pub use environment::Environment;
pub use error::CommandError;
pub use evaluate::{evaluate, Evaluation};
pub use record::{Record, RecordKey, Residence};
pub use state::{canonical_bytes, Applied, HistoryWrite, State, StateDigest, Trigger};

/// Milliseconds since the Unix epoch, as stamped by the leader on each Raft entry.
pub type TimestampMs = i64;
