//! Queries through the failover client: typed ([`FailoverClient::ask`]) or, for a caller
//! that wants the document itself, as JSON ([`FailoverClient::query_json`]).

use hub_proto::{QueryRequest, ReadOptions};

use crate::answer::Typed;
use crate::failover::{ClientError, FailoverClient};
use crate::query::Query;

/// How fresh an answer must be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    /// Answer from the asked node's own state, without confirming with the leader that it
    /// is current (faster; may lag behind the latest writes).
    pub stale: bool,
}

impl FailoverClient {
    /// Asks `query` and returns the answer's JSON text as the node sent it.
    pub async fn query_text(
        &self,
        query: &Query,
        freshness: Freshness,
    ) -> Result<String, ClientError> {
        let req = QueryRequest {
            query_json: serde_json::to_string(query).map_err(ClientError::Encode)?,
            read: Some(ReadOptions {
                stale: freshness.stale,
            }),
        };
        let reply = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.query(req).await }
            })
            .await?;
        Ok(reply.json)
    }

    /// Asks `query` and returns its answer as JSON (every answer also has its type: see
    /// [`FailoverClient::ask`]).
    pub async fn query_json(
        &self,
        query: &Query,
        freshness: Freshness,
    ) -> Result<serde_json::Value, ClientError> {
        let text = self.query_text(query, freshness).await?;
        serde_json::from_str(&text).map_err(|error| ClientError::Answer {
            query: query_kind(query),
            error,
        })
    }

    /// Asks a typed query and returns its answer.
    pub async fn ask<T: Typed>(
        &self,
        typed: &T,
        freshness: Freshness,
    ) -> Result<T::Answer, ClientError> {
        let query = typed.query();
        let text = self.query_text(&query, freshness).await?;
        serde_json::from_str(&text).map_err(|error| ClientError::Answer {
            query: query_kind(&query),
            error,
        })
    }
}

/// The query's kind, as its JSON names it (`explain`), for errors.
fn query_kind(query: &Query) -> String {
    serde_json::to_value(query)
        .ok()
        .and_then(|v| v.get("query").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_else(|| "query".to_string())
}
