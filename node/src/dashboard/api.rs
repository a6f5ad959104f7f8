//! The dashboard's JSON API (docs/DASHBOARD.md): each endpoint calls the gRPC handler that
//! answers the same question, as the verified caller, so a read or write is allowed here
//! exactly when `hubctl` would be allowed it. Writes are a fixed list ([`DashboardAction`]):
//! the page can do only what it offers.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use tonic::Status;

use hub_engine::evaluate::format_time;
use hub_engine::Command;
use hub_proto::hub_server::Hub;
use hub_proto::{ClusterStatusRequest, ListEntitiesRequest, ListRequest, QueryRequest};
use hub_tls::Identity;

use super::Dashboard;
use crate::auth::Caller;
use crate::query::Query;

/// Longest a long poll (`/api/wait`) is held before it answers "nothing new".
pub(super) const WAIT: Duration = Duration::from_secs(25);

/// Largest request body (a query or an action).
const MAX_BODY_BYTES: usize = 64 << 10;

/// The writes the dashboard offers. JSON form: `{"action": "approve_change_request", "id": …}`.
#[derive(Debug, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
enum DashboardAction {
    /// Approve a module change request.
    ApproveChangeRequest {
        /// `cr-…`.
        id: String,
    },
    /// Reject a module change request.
    RejectChangeRequest {
        /// `cr-…`.
        id: String,
        /// Why (may be empty).
        #[serde(default)]
        reason: String,
    },
    /// Approve a window-exception request (issue 55).
    ApproveWindowException {
        /// `wx-…`.
        id: String,
    },
    /// Reject a window-exception request.
    RejectWindowException {
        /// `wx-…`.
        id: String,
        /// Why (may be empty).
        #[serde(default)]
        reason: String,
    },
}

impl DashboardAction {
    /// The command it is; the actor is stamped from the verified caller when proposed.
    fn command(self) -> Command {
        let actor = String::new();
        match self {
            DashboardAction::ApproveChangeRequest { id } => {
                Command::ApproveChangeRequest { id, actor }
            }
            DashboardAction::RejectChangeRequest { id, reason } => {
                Command::RejectChangeRequest { id, actor, reason }
            }
            DashboardAction::ApproveWindowException { id } => {
                Command::ApproveWindowException { id, actor }
            }
            DashboardAction::RejectWindowException { id, reason } => {
                Command::RejectWindowException { id, reason, actor }
            }
        }
    }
}

/// Answers `/api/<path>` for `caller`.
pub(super) async fn answer(
    d: &Dashboard,
    caller: &Caller,
    path: &str,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let result = match (path, &method) {
        ("session", &Method::GET) => session(d, caller),
        ("cluster", &Method::GET) => cluster(d, caller).await,
        ("environments", &Method::GET) => environments(d, caller).await,
        ("entities", &Method::GET) => match param(&req, "environment") {
            Some(environment) => entities(d, caller, environment).await,
            None => Err(Status::invalid_argument(
                "environment: the query parameter is required (?environment=NAME)",
            )),
        },
        ("wait", &Method::GET) => match param(&req, "after").map(|a| a.parse::<u64>()) {
            Some(Ok(after)) => wait(d, caller, after).await,
            Some(Err(_)) | None => Err(Status::invalid_argument(
                "after: a log index is required (?after=N)",
            )),
        },
        ("query", &Method::POST) => match body(req).await {
            Ok(body) => query(d, caller, body).await,
            Err(refused) => return refused,
        },
        ("action", &Method::POST) => match body(req).await {
            Ok(body) => action(d, caller, &body).await,
            Err(refused) => return refused,
        },
        ("session" | "cluster" | "environments" | "entities" | "wait", _) => {
            return error(StatusCode::METHOD_NOT_ALLOWED, "only GET")
        }
        ("query" | "action", _) => return error(StatusCode::METHOD_NOT_ALLOWED, "only POST"),
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                &format!("/api/{path}: no such endpoint"),
            )
        }
    };
    match result {
        Ok(value) => json_answer(StatusCode::OK, &value),
        Err(status) => status_answer(&status),
    }
}

/// A gRPC request carrying the verified caller, as the authorization layer leaves it.
fn as_caller<T>(message: T, caller: &Caller) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.extensions_mut().insert(caller.clone());
    r
}

/// Who the caller is and what roles it holds.
fn session(d: &Dashboard, caller: &Caller) -> Result<Value, Status> {
    let s = d.node.state.read();
    let may_read = caller.may_read(&s.state).is_ok();
    let Caller::Verified(identity) = caller else {
        return Ok(json!({
            "identity": "anyone (insecure loopback node)", "roles": [], "may_read": true,
            "insecure": true,
        }));
    };
    let roles: Vec<Value> = s
        .state
        .bindings_of(identity)
        .map(|b| {
            json!({"role": b.role.as_str(), "environments": b.environments, "products": b.products})
        })
        .collect();
    let expires = match identity {
        Identity::Token(name) => s
            .state
            .token(name)
            .and_then(|t| t.expires_ms)
            .map(format_time),
        _ => None,
    };
    Ok(json!({
        "identity": identity.to_string(), "roles": roles, "may_read": may_read,
        "expires": expires, "insecure": false,
    }))
}

/// Members, leader, term and each member's lag behind the leader.
async fn cluster(d: &Dashboard, caller: &Caller) -> Result<Value, Status> {
    caller.may_read(&d.node.state.read().state)?;
    let status = d
        .hub()
        .cluster_status(as_caller(ClusterStatusRequest {}, caller))
        .await?
        .into_inner();
    let leader_applied = status
        .members
        .iter()
        .find(|m| status.has_leader && m.id == status.leader)
        .map(|m| m.last_applied);
    let members: Vec<Value> = status
        .members
        .iter()
        .map(|m| {
            let lag = match (leader_applied, m.role.as_str()) {
                (_, "unreachable") | (None, _) => Value::Null,
                (Some(l), _) => json!(l.saturating_sub(m.last_applied)),
            };
            json!({
                "id": m.id, "addr": m.addr, "role": m.role, "term": m.term,
                "last_applied": m.last_applied, "lag": lag, "digest": m.digest, "error": m.error,
            })
        })
        .collect();
    Ok(json!({
        "leader": status.has_leader.then_some(status.leader),
        "has_leader": status.has_leader, "term": status.term, "node": d.node.id,
        "applied_index": d.node.state.read().applied_index(), "members": members,
    }))
}

/// Every environment.
async fn environments(d: &Dashboard, caller: &Caller) -> Result<Value, Status> {
    let list = d
        .hub()
        .list_environments(as_caller(ListRequest { read: None }, caller))
        .await?
        .into_inner();
    Ok(
        json!({ "environments": list.environments.iter().map(|e| json!({
        "name": e.name, "description": e.description, "entity_count": e.entity_count,
        "created": format_time(e.created_at_ms),
    })).collect::<Vec<_>>() }),
    )
}

/// The entities of one environment.
async fn entities(d: &Dashboard, caller: &Caller, environment: String) -> Result<Value, Status> {
    let list = d
        .hub()
        .list_entities(as_caller(
            ListEntitiesRequest {
                environment,
                read: None,
            },
            caller,
        ))
        .await?
        .into_inner();
    Ok(json!({ "entities": list.entities.iter().map(|e| json!({
        "id": e.id, "environment": e.environment, "kind": e.kind, "name": e.name,
        "product_id": e.product_id, "release_channel": e.release_channel,
    })).collect::<Vec<_>>() }))
}

/// One `Hub.Query`, answered by its handler; change requests say whether the caller may
/// decide them.
async fn query(d: &Dashboard, caller: &Caller, body: String) -> Result<Value, Status> {
    let parsed: Query = serde_json::from_str(&body)
        .map_err(|e| Status::invalid_argument(format!("bad query: {e}")))?;
    let reply = d
        .hub()
        .query(as_caller(
            QueryRequest {
                query_json: body,
                read: None,
            },
            caller,
        ))
        .await?
        .into_inner();
    let mut value: Value = serde_json::from_str(&reply.json)
        .map_err(|e| Status::internal(format!("the query's answer is not JSON: {e}")))?;
    let approve_cr = |id| Command::ApproveChangeRequest {
        id,
        actor: String::new(),
    };
    let approve_wx = |id| Command::ApproveWindowException {
        id,
        actor: String::new(),
    };
    match parsed {
        Query::ChangeRequests { .. } => {
            if let Some(Value::Array(rows)) = value.get_mut("change_requests") {
                rows.iter_mut()
                    .for_each(|row| mark_may_decide(d, caller, row, approve_cr));
            }
        }
        Query::ChangeRequest { .. } => mark_may_decide(d, caller, &mut value, approve_cr),
        Query::WindowExceptions { .. } => {
            if let Some(Value::Array(rows)) = value.get_mut("window_exceptions") {
                rows.iter_mut()
                    .for_each(|row| mark_may_decide(d, caller, row, approve_wx));
            }
        }
        Query::WindowException { .. } => mark_may_decide(d, caller, &mut value, approve_wx),
        _ => {}
    }
    Ok(value)
}

/// Sets `may_decide` on a change request's or window-exception request's view: whether the
/// caller's roles allow approving it (`approve` of its id; rejecting needs the same), by the
/// engine's access table.
fn mark_may_decide(
    d: &Dashboard,
    caller: &Caller,
    row: &mut Value,
    approve: impl Fn(String) -> Command,
) {
    let Some(id) = row.get("id").and_then(Value::as_str).map(str::to_string) else {
        return;
    };
    let approve = approve(id);
    let may = caller
        .authorize(&d.node.state.read().state, &approve)
        .is_ok();
    row["may_decide"] = json!(may);
}

/// Proposes one of the dashboard's writes as the caller.
async fn action(d: &Dashboard, caller: &Caller, body: &str) -> Result<Value, Status> {
    let action: DashboardAction = serde_json::from_str(body)
        .map_err(|e| Status::invalid_argument(format!("bad action: {e}")))?;
    let mut command = action.command();
    if caller.actor().is_none() {
        // An insecure node identifies nobody: say where the write came from.
        command.stamp_actor("dashboard");
    }
    let reply = d.node.propose(command, None, caller).await?;
    Ok(json!({"index": reply.index, "summary": reply.result}))
}

/// Answers once this node has applied an entry after `after`, or after [`WAIT`].
async fn wait(d: &Dashboard, caller: &Caller, after: u64) -> Result<Value, Status> {
    use openraft::async_runtime::watch::WatchReceiver;
    caller.may_read(&d.node.state.read().state)?;
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut metrics = d.node.raft.metrics();
    loop {
        // The state machine applies an entry before Raft's metrics report it applied.
        let applied = d.node.state.read().applied_index();
        if applied > after {
            return Ok(json!({ "applied_index": applied }));
        }
        match tokio::time::timeout_at(deadline, metrics.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return Err(crate::stopping::refusal()),
            Err(_) => return Ok(json!({ "applied_index": applied })),
        }
    }
}

/// The request's body as UTF-8 JSON, at most [`MAX_BODY_BYTES`], read within
/// [`crate::http_serve::BODY_READ_TIMEOUT`]; or the answer refusing it.
async fn body(req: Request<Incoming>) -> Result<String, Response<Full<Bytes>>> {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content-type: must be application/json",
        ));
    }
    let read = tokio::time::timeout(
        crate::http_serve::BODY_READ_TIMEOUT,
        Limited::new(req.into_body(), MAX_BODY_BYTES).collect(),
    );
    let Ok(read) = read.await else {
        return Err(error(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "body: not received within {} s",
                crate::http_serve::BODY_READ_TIMEOUT.as_secs()
            ),
        ));
    };
    let bytes = match read {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("body: more than {MAX_BODY_BYTES} bytes"),
            ))
        }
        Err(e) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                &format!("body: cannot be read: {e}"),
            ))
        }
    };
    String::from_utf8(bytes.to_vec()).map_err(|_| error(StatusCode::BAD_REQUEST, "body: not UTF-8"))
}

/// The value of query parameter `name`, percent-decoded.
fn param(req: &Request<Incoming>, name: &str) -> Option<String> {
    let query = req.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// A JSON answer.
fn json_answer(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(value.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `{"error": message}` with `status`.
pub(super) fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_answer(status, &json!({ "error": message }))
}

/// A refused or failed call as HTTP: the gRPC code's nearest status, and its message.
pub(super) fn status_answer(status: &Status) -> Response<Full<Bytes>> {
    use tonic::Code;
    let http = match status.code() {
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Ok | Code::Cancelled | Code::Unknown | Code::Internal | Code::DataLoss => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    let mut r = error(http, status.message());
    if http == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"hub\""),
        );
    }
    r
}
