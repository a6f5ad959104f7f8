//! Calls to the hub that the commands share: one `hub_engine::Command` through `Hub.Submit`
//! with a fresh request id (a retry through another node applies once), one `Hub.Query`, and
//! resolving an entity reference on the server. A helper module: it uses none of the command
//! modules.

use anyhow::Context;
use hub_engine::{Command, CommandOutput};
use hub_proto::{QueryRequest, ReadOptions, SubmitRequest};
use serde_json::{json, Value};

use super::args::{ReadArgs, FRESH};
use super::output::{print, Format};
use crate::node::new_request_id;
use hub_client::answer::ResolveEntity;
use hub_client::{FailoverClient, Freshness};

/// Sends one command with a fresh idempotency key; returns the write's view
/// (`index`, `leader`, `result`, `id`, `output`).
pub(crate) async fn submit(client: &FailoverClient, command: &Command) -> anyhow::Result<Value> {
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
    let id = match serde_json::from_value::<CommandOutput>(output.clone()) {
        Ok(CommandOutput::Changed { id, .. }) if !id.is_empty() => json!(id),
        Ok(CommandOutput::EntityCreated(id))
        | Ok(CommandOutput::EnvironmentCreated(id))
        | Ok(CommandOutput::EnvironmentDeleted(id)) => json!(id),
        _ => Value::Null,
    };
    Ok(json!({
        "index": r.index,
        "leader": r.leader_id,
        "result": r.result,
        "id": id,
        "output": output,
    }))
}

/// Sends `command` and prints the write's result.
pub(crate) async fn submit_and_print(
    client: &FailoverClient,
    command: &Command,
    fmt: Format,
) -> anyhow::Result<Value> {
    let v = submit(client, command).await?;
    print(fmt, &v, &["index", "leader", "result", "id"])?;
    Ok(v)
}

/// Runs one query (see node/src/query.rs) and returns its JSON answer.
pub(crate) async fn query(
    client: &FailoverClient,
    q: Value,
    read: ReadArgs,
) -> anyhow::Result<Value> {
    let req = QueryRequest {
        query_json: q.to_string(),
        read: Some(ReadOptions { stale: read.stale }),
    };
    let r = client
        .call(|mut c| {
            let req = req.clone();
            async move { c.query(req).await }
        })
        .await?;
    serde_json::from_str(&r.json).context("the server's answer is not JSON")
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
