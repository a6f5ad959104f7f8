//! The hub agent (`hub-agent`): runs in a spoke environment, fails over between hub nodes,
//! reports what is deployed and executes plans exactly once.
//!
//! Not built yet: it arrives with the agent issue, after the orchestration engine. The crate
//! exists so the workspace has the layout of docs/ARCHITECTURE.md from the start.
