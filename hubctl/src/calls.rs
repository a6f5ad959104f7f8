//! Calls to the hub that the commands share: one `hub_engine::Command` through `Hub.Submit`
//! with a fresh request id (a retry through another node applies once), a typed query
//! (`hub_client::answer`), and resolving an entity reference on the server. A helper module: it uses none of the command
//! modules.

use anyhow::Context;
use hub_engine::{Command, CommandOutput};
use hub_proto::SubmitRequest;
use serde::Serialize;
use serde_json::Value;

use super::args::{ReadArgs, FRESH};
use super::output::{print, Format};
use hub_client::answer::{ResolveEntity, Typed};
use hub_client::request_id::new_request_id;
use hub_client::{FailoverClient, Freshness};

/// A write's outcome as `hubctl` shows it. The fields are in alphabetical order, the order
/// `-o json` has always printed them in.
#[derive(Debug, Serialize)]
pub(crate) struct Written {
    /// The id of what the command created or changed, when its output names one.
    pub id: Option<String>,
    /// The log index it was applied at.
    pub index: u64,
    /// The leader that committed it.
    pub leader: u64,
    /// The command's output as the node sent it (`null` when it sent none).
    pub output: Value,
    /// What the write produced, in words.
    pub result: String,
    /// The output, typed (`None` when there is none, or one this `hubctl` does not know).
    #[serde(skip)]
    pub command_output: Option<CommandOutput>,
}

/// Sends one command with a fresh idempotency key; returns the write's outcome.
pub(crate) async fn submit(client: &FailoverClient, command: &Command) -> anyhow::Result<Written> {
    let req = SubmitRequest {
        command_json: serde_json::to_string(command).context("encode command")?,
        request_id: new_request_id(),
    };
    let r = client
        .call(|mut c| {
            let req = req.clone();
            async move { c.submit(req).await }
        })
        .await?;
    let output: Value = if r.output_json.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&r.output_json).unwrap_or(Value::Null)
    };
    let command_output = serde_json::from_value::<CommandOutput>(output.clone()).ok();
    let id = match &command_output {
        Some(CommandOutput::Changed { id, .. }) if !id.is_empty() => Some(id.clone()),
        Some(CommandOutput::EntityCreated(id))
        | Some(CommandOutput::EnvironmentCreated(id))
        | Some(CommandOutput::EnvironmentDeleted(id)) => Some(id.clone()),
        _ => None,
    };
    Ok(Written {
        id,
        index: r.index,
        leader: r.leader_id,
        output,
        result: r.result,
        command_output,
    })
}

/// Sends `command` and prints the write's result.
pub(crate) async fn submit_and_print(
    client: &FailoverClient,
    command: &Command,
    fmt: Format,
) -> anyhow::Result<Written> {
    let written = submit(client, command).await?;
    print(
        fmt,
        &serde_json::to_value(&written)?,
        &["index", "leader", "result", "id"],
    )?;
    Ok(written)
}

/// Asks a typed query (see `hub_client::answer`) and returns its typed answer.
pub(crate) async fn ask<T: Typed>(
    client: &FailoverClient,
    query: &T,
    read: ReadArgs,
) -> anyhow::Result<T::Answer> {
    Ok(client.ask(query, freshness(read)).await?)
}

/// Resolves an entity reference to its id (`eid:…`) on the server.
pub(crate) async fn resolve(client: &FailoverClient, reference: &str) -> anyhow::Result<String> {
    let resolved = client
        .ask(&ResolveEntity(reference.to_string()), freshness(FRESH))
        .await?;
    Ok(resolved.id)
}

/// The client's freshness of `read`.
pub(crate) fn freshness(read: ReadArgs) -> Freshness {
    Freshness { stale: read.stale }
}
