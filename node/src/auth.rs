//! Who may call what: every gRPC method's rule, checked against the identity the TLS
//! handshake verified ([`hub_tls::server::Authenticated`]), never against a request field.
//!
//! [`AuthLayer`] runs before any handler. It looks the method up in [`rule`] (a method
//! without a rule is refused: default deny), checks the caller, and puts the [`Caller`] into
//! the request's extensions, where handlers read it ([`caller`]) for the checks that need the
//! decoded request: an agent acts only for its own environment ([`Caller::require_environment`]).
//!
//! | service / method | who |
//! |---|---|
//! | `hub.v1.Raft/*`, `hub.v1.Hub/Forward`, `hub.v1.Hub/ReadIndex` | a node of this cluster that is a member (any node of the cluster while this node has no membership yet, i.e. is being added) |
//! | `hub.v1.Hub/*` (the rest) | an operator (certificate or token), or a node proxying for one |
//! | `hub.v1.Agent/*` | an agent, for its own environment only |
//!
//! A caller proves who it is by a client certificate of the cluster's CA, or, on a
//! connection without one, by an operator token: `authorization: Bearer hubtok_…`. The token
//! is hashed and looked up in this node's applied state at this node's clock ([`TokenCheck`]),
//! on every request: a revoke takes effect on a node with the commit that records it, and
//! apply refuses an entry of a token revoked or expired by the entry's time. A caller that
//! presents both a certificate and a token is refused: it must be one party. Nothing here
//! repeats or logs a token.
//!
//! With `--insecure` (loopback only) every caller is [`Caller::Insecure`] and may do everything.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hub_engine::token::{TokenHash, TokenSecret};
use hub_engine::Command;
use hub_proto::refusal::Refusal;
use hub_tls::server::{Authenticated, ConnInfo};
use hub_tls::Identity;
use tonic::Status;
use tracing::warn;

/// Who is calling, as the transport established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A plaintext (`--insecure`) listener: nobody is identified.
    Insecure,
    /// A verified identity of this cluster.
    Verified(Identity),
}

impl Caller {
    /// The identity to record as the actor of a write; `None` on an insecure listener,
    /// where the client's own field stays.
    pub fn actor(&self) -> Option<String> {
        match self {
            Caller::Insecure => None,
            Caller::Verified(id) => Some(id.to_string()),
        }
    }

    /// Refuses `command` unless the caller's role bindings in `state` allow it (see
    /// `hub_engine::access`). Apply checks again against the bindings of its own time.
    pub fn authorize(&self, state: &hub_engine::State, command: &Command) -> Result<(), Status> {
        match self {
            Caller::Insecure => Ok(()),
            Caller::Verified(id) => hub_engine::access::authorize(state, id, command)
                .map_err(|e| crate::status::command_status(&e)),
        }
    }

    /// Refuses a read by an operator that holds no role.
    pub fn may_read(&self, state: &hub_engine::State) -> Result<(), Status> {
        self.may(
            state,
            &hub_engine::access::Need::Role(
                hub_engine::access::Role::Viewer,
                hub_engine::access::Target::Cluster,
            ),
        )
    }

    /// Refuses the caller unless it meets `need` (a query's, see `crate::query::need`).
    pub fn may(
        &self,
        state: &hub_engine::State,
        need: &hub_engine::access::Need,
    ) -> Result<(), Status> {
        match self {
            Caller::Insecure => Ok(()),
            Caller::Verified(Identity::Node(_)) => Ok(()),
            Caller::Verified(id) if hub_engine::access::satisfies(state, id, need) => Ok(()),
            Caller::Verified(id) => Err(Status::permission_denied(format!(
                "{id} may not read: it holds no role (an admin grants one with hubctl role bind)"
            ))),
        }
    }

    /// Refuses a membership change by anyone but an admin or a node (a node proxies a call
    /// it checked).
    pub fn require_admin(&self, state: &hub_engine::State, what: &str) -> Result<(), Status> {
        let need = hub_engine::access::Need::Role(
            hub_engine::access::Role::Admin,
            hub_engine::access::Target::Cluster,
        );
        match self {
            Caller::Insecure | Caller::Verified(Identity::Node(_)) => Ok(()),
            Caller::Verified(id) if hub_engine::access::satisfies(state, id, &need) => Ok(()),
            Caller::Verified(id) => Err(Status::permission_denied(format!(
                "{id} may not {what}: needs admin"
            ))),
        }
    }

    /// Refuses an agent acting for another environment than its certificate's.
    pub fn require_environment(&self, environment: &str) -> Result<(), Status> {
        match self {
            Caller::Insecure => Ok(()),
            Caller::Verified(Identity::Agent(own)) if own == environment => Ok(()),
            Caller::Verified(who) => Err(Status::permission_denied(format!(
                "{who} may not act for environment {environment:?}"
            ))),
        }
    }
}

/// The caller of a request that passed [`AuthLayer`].
pub fn caller<T>(req: &tonic::Request<T>) -> Result<Caller, Status> {
    req.extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("the request did not pass the authorization layer"))
}

/// Who may call a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A member node of this cluster.
    Node,
    /// An operator, or a node proxying an operator's call.
    Operator,
    /// An agent (its environment is checked by the handler).
    Agent,
}

/// The rule of every method; `None` (refused) for anything else.
pub fn rule(path: &str) -> Option<Rule> {
    Some(match path {
        "/hub.v1.Raft/AppendEntries"
        | "/hub.v1.Raft/StreamAppend"
        | "/hub.v1.Raft/Vote"
        | "/hub.v1.Raft/PreVote"
        | "/hub.v1.Raft/InstallSnapshot"
        | "/hub.v1.Raft/TransferLeader"
        | "/hub.v1.Hub/Forward"
        | "/hub.v1.Hub/ReadIndex" => Rule::Node,
        "/hub.v1.Hub/CreateEnvironment"
        | "/hub.v1.Hub/DeleteEnvironment"
        | "/hub.v1.Hub/CreateEntity"
        | "/hub.v1.Hub/GetEnvironment"
        | "/hub.v1.Hub/ListEnvironments"
        | "/hub.v1.Hub/ListEntities"
        | "/hub.v1.Hub/StateDigest"
        | "/hub.v1.Hub/NodeStatus"
        | "/hub.v1.Hub/ClusterStatus"
        | "/hub.v1.Hub/InitCluster"
        | "/hub.v1.Hub/AddNode"
        | "/hub.v1.Hub/RemoveNode"
        | "/hub.v1.Hub/TransferLeader"
        | "/hub.v1.Hub/SnapshotSave"
        | "/hub.v1.Hub/Submit"
        | "/hub.v1.Hub/Query" => Rule::Operator,
        "/hub.v1.Agent/ReportStates"
        | "/hub.v1.Agent/ReportTask"
        | "/hub.v1.Agent/ReportTasks"
        | "/hub.v1.Agent/FetchPlans"
        | "/hub.v1.Agent/ReportCanaries" => Rule::Agent,
        _ => return None,
    })
}

/// Whether a node id may act as a peer now.
pub type MemberCheck = Arc<dyn Fn(u64) -> bool + Send + Sync>;

/// What this node knows of a bearer token's hash now (its applied state, its clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenVerdict {
    /// A live token: the caller is `token/<name>`.
    Valid(Identity),
    /// No token has this secret (never created, or revoked).
    Unknown,
    /// The token `name` expired at `at` (RFC 3339).
    Expired {
        /// The token's name.
        name: String,
        /// When it expired.
        at: String,
    },
}

/// Looks a bearer token's hash up.
pub type TokenCheck = Arc<dyn Fn(&TokenHash) -> TokenVerdict + Send + Sync>;

/// Whether the certificate of this serial number (its DER INTEGER's content bytes) is
/// revoked, in this node's applied state (`hubctl pki revoke`).
pub type RevocationCheck = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// What `state` says of the token whose secret hashes to `hash` at `now_ms`.
pub fn token_verdict(state: &hub_engine::State, hash: &TokenHash, now_ms: i64) -> TokenVerdict {
    match state.token_by_hash(hash) {
        None => TokenVerdict::Unknown,
        Some(t) => match t.expires_ms {
            Some(at) if t.is_expired(now_ms) => TokenVerdict::Expired {
                name: t.name.clone(),
                at: hub_engine::evaluate::format_time(at),
            },
            _ => TokenVerdict::Valid(t.identity()),
        },
    }
}

/// The `authorization` header's bearer secret. The errors never repeat the header.
fn bearer(value: &http::HeaderValue) -> Result<TokenSecret, TokenRefusal> {
    let text = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(TokenRefusal::NotBearer)?;
    TokenSecret::parse(text.trim()).map_err(TokenRefusal::Malformed)
}

/// Why a bearer token does not identify its caller. No variant holds the secret or the
/// header: the text goes back to a caller that may not own it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// The header is not `Bearer <token>`.
    #[error("the authorization header is not \"Bearer <token>\"")]
    NotBearer,
    /// The token does not have a token's shape.
    #[error(transparent)]
    Malformed(hub_engine::token::TokenFormatError),
    /// No token of this hub has this secret's hash.
    #[error("the token is not known to this hub: it was revoked, or never created here")]
    Unknown,
    /// The token expired.
    #[error("token/{name} expired at {at}: an admin creates a new one")]
    Expired {
        /// The token's name.
        name: String,
        /// When it expired (RFC 3339).
        at: String,
    },
}

/// Counts of refused calls.
#[derive(Debug, Default)]
pub struct AuthStats {
    /// Calls without a usable certificate.
    pub unauthenticated: AtomicU64,
    /// Calls by an identity the method's rule does not admit.
    pub denied: AtomicU64,
    /// Writes refused because the caller's roles do not allow them.
    pub by_role: AtomicU64,
    /// Refusals not logged because of the log rate limit.
    pub unlogged: AtomicU64,
    /// Role refusals not recorded in the audit because of its rate limit.
    pub unaudited: AtomicU64,
    audit_second: AtomicU64,
    audited_in_second: AtomicU64,
    log_second: AtomicU64,
    logged_in_second: AtomicU64,
}

/// At most this many refusals are logged per second (a stranger hammering a listener costs the
/// log a few lines a second); the rest are counted.
const REFUSAL_LOGS_PER_SECOND: u64 = 5;

/// Whether `status` is the refusal of a calling node that is not a member
/// ([`Refusal::CallerNotAMember`]): the refusal is about the node, not its request, so a node
/// relaying a client's call (a forwarded write, a read index) answers its client
/// [`Refusal::NodeNotAMember`], and the client moves on to another node, instead of passing on
/// a refusal the client would take as final.
pub fn refuses_a_non_member(status: &Status) -> bool {
    Refusal::of(status) == Some(Refusal::CallerNotAMember)
}
/// At most this many role refusals per second and node are recorded in the audit (each is a
/// Raft entry); the rest are counted, and the next recorded one says how many.
const REFUSAL_AUDITS_PER_SECOND: u64 = 5;

/// Seconds since the epoch (for the per-second limits).
fn unix_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl AuthStats {
    /// Counts a write refused by role and logs it (rate-limited with the other refusals).
    pub fn refused_by_role(&self, message: &str) {
        self.by_role.fetch_add(1, Ordering::Relaxed);
        if self.may_log() {
            warn!(%message, "write refused by role");
        }
    }

    /// Whether one more role refusal may be recorded in the audit this second; if so, how
    /// many were not since the last one that was.
    pub fn may_audit(&self) -> Option<u64> {
        let sec = unix_second();
        if self.audit_second.swap(sec, Ordering::Relaxed) != sec {
            self.audited_in_second.store(0, Ordering::Relaxed);
        }
        if self.audited_in_second.fetch_add(1, Ordering::Relaxed) < REFUSAL_AUDITS_PER_SECOND {
            Some(self.unaudited.swap(0, Ordering::Relaxed))
        } else {
            self.unaudited.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    fn may_log(&self) -> bool {
        let sec = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        // Races between calls only blur the limit a little.
        if self.log_second.swap(sec, Ordering::Relaxed) != sec {
            self.logged_in_second.store(0, Ordering::Relaxed);
        }
        if self.logged_in_second.fetch_add(1, Ordering::Relaxed) < REFUSAL_LOGS_PER_SECOND {
            true
        } else {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// The authorization policy of one listener.
#[derive(Clone)]
pub struct Policy {
    /// Plaintext listener: everybody is [`Caller::Insecure`].
    pub insecure: bool,
    /// Which node ids are members.
    pub is_member: MemberCheck,
    /// Which operator tokens are live.
    pub tokens: TokenCheck,
    /// Which certificates are revoked.
    pub revoked: RevocationCheck,
    /// Refusal counts.
    pub stats: Arc<AuthStats>,
}

impl Policy {
    /// Decides a call to `path` by the connection `info` and the request's `authorization`
    /// header.
    pub fn check(
        &self,
        path: &str,
        info: Option<&ConnInfo>,
        authorization: Option<&http::HeaderValue>,
    ) -> Result<Caller, Status> {
        if self.insecure {
            return Ok(Caller::Insecure);
        }
        let Some(rule) = rule(path) else {
            self.stats.denied.fetch_add(1, Ordering::Relaxed);
            return Err(Status::permission_denied(format!(
                "{path}: no such method is open to anyone"
            )));
        };
        let identity = self.identify(path, info, authorization)?;
        let identity = &identity;
        let allowed = match (rule, identity) {
            (Rule::Node, Identity::Node(id)) | (Rule::Operator, Identity::Node(id)) => {
                (self.is_member)(*id)
            }
            (Rule::Operator, Identity::Operator(_) | Identity::Token(_))
            | (Rule::Agent, Identity::Agent(_)) => true,
            _ => false,
        };
        if !allowed {
            let needs = match (rule, identity) {
                (Rule::Node | Rule::Operator, Identity::Node(_)) => {
                    "a node that is a member of this cluster"
                }
                (Rule::Node, _) => "a node of this cluster",
                (Rule::Operator, _) => "an operator",
                (Rule::Agent, _) => "an agent",
            };
            self.stats.denied.fetch_add(1, Ordering::Relaxed);
            if self.stats.may_log() {
                let remote = remote_of(info);
                warn!(%path, %remote, caller = %identity, "call refused: permission denied");
            }
            let message = format!("{identity} may not call {path}: it needs {needs}");
            return Err(
                if matches!(identity, Identity::Node(_))
                    && matches!(rule, Rule::Node | Rule::Operator)
                {
                    Refusal::CallerNotAMember.status(message)
                } else {
                    Status::permission_denied(message)
                },
            );
        }
        Ok(Caller::Verified(identity.clone()))
    }

    /// Who the caller of `path` is: the identity of its client certificate, or of the
    /// operator token in its `authorization` header (refused when it presents both, or
    /// neither). Refusals are counted and logged as unauthenticated.
    pub fn identify(
        &self,
        path: &str,
        info: Option<&ConnInfo>,
        authorization: Option<&http::HeaderValue>,
    ) -> Result<Identity, Status> {
        let remote = remote_of(info);
        let auth = info.map_or(&Authenticated::NoCertificate, |i| &i.auth);
        match (auth, authorization) {
            (Authenticated::Identity(_), Some(_)) => Err(self.refuse_unauthenticated(
                path,
                &remote,
                "both a client certificate and a token: present one of them".into(),
            )),
            (Authenticated::Identity(id), None) => {
                let serial = info.map_or(&[][..], |i| i.serial.as_slice());
                if (self.revoked)(serial) {
                    return Err(self.refuse_unauthenticated(
                        path,
                        &remote,
                        format!(
                            "the certificate of {id} (serial {}) is revoked",
                            hub_engine::revocation::serial_from_der_bytes(serial)
                        ),
                    ));
                }
                Ok(id.clone())
            }
            (Authenticated::NoCertificate, Some(header)) => {
                let id = self
                    .token_caller(header)
                    .map_err(|refusal| {
                        self.refuse_unauthenticated(path, &remote, refusal.to_string())
                    })?;
                // The token admits its connection: it leaves the budget of connections that
                // have not proved who they are, and their deadline (hub_tls::budget).
                if let Some(info) = info {
                    info.admission.admit().map_err(|e| {
                        Status::resource_exhausted(format!("{e}: try again later or another node"))
                    })?;
                }
                Ok(id)
            }
            (Authenticated::Plaintext | Authenticated::NoCertificate, _) => {
                Err(self.refuse_unauthenticated(
                    path,
                    &remote,
                    "no client certificate or token: present a certificate signed by the cluster CA (--ca-file, --cert-file, --key-file) or an operator token (--token, HUBCTL_TOKEN)".into(),
                ))
            }
            (Authenticated::Unusable(reason), _) => {
                Err(self.refuse_unauthenticated(path, &remote, reason.clone()))
            }
        }
    }

    /// The identity of a bearer token, or why it is refused.
    fn token_caller(&self, header: &http::HeaderValue) -> Result<Identity, TokenRefusal> {
        let secret = bearer(header)?;
        match (self.tokens)(&secret.hash()) {
            TokenVerdict::Valid(id) => Ok(id),
            TokenVerdict::Unknown => Err(TokenRefusal::Unknown),
            TokenVerdict::Expired { name, at } => Err(TokenRefusal::Expired { name, at }),
        }
    }

    fn refuse_unauthenticated(&self, path: &str, remote: &str, reason: String) -> Status {
        self.stats.unauthenticated.fetch_add(1, Ordering::Relaxed);
        if self.stats.may_log() {
            warn!(%path, %remote, %reason, "call refused: unauthenticated");
        }
        Status::unauthenticated(reason)
    }
}

/// The peer's address as logs show it.
fn remote_of(info: Option<&ConnInfo>) -> String {
    info.and_then(|i| i.remote)
        .map_or_else(|| "?".to_string(), |a| a.to_string())
}

/// The tower layer that applies a [`Policy`] to every request.
#[derive(Clone)]
pub struct AuthLayer {
    policy: Policy,
}

impl AuthLayer {
    /// A layer enforcing `policy`.
    pub fn new(policy: Policy) -> Self {
        Self { policy }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// See [`AuthLayer`].
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    policy: Policy,
}

impl<S, B> tower::Service<http::Request<B>> for AuthService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let decision = self.policy.check(
            req.uri().path(),
            req.extensions().get::<ConnInfo>(),
            req.headers().get(http::header::AUTHORIZATION),
        );
        match decision {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                Box::pin(self.inner.call(req))
            }
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rpc of hub.proto has a rule: a method added without one would be refused to
    /// everybody, so the table and the proto must move together.
    #[test]
    fn every_rpc_has_a_rule() {
        let proto = include_str!("../../proto/proto/hub.proto");
        let mut service = "";
        let mut count = 0;
        for line in proto.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("service ") {
                service = rest.trim_end_matches('{').trim();
            }
            if let Some(rest) = line.strip_prefix("rpc ") {
                let method = rest.split('(').next().unwrap_or("").trim();
                let path = format!("/hub.v1.{service}/{method}");
                assert!(rule(&path).is_some(), "{path} has no rule");
                count += 1;
            }
        }
        assert!(count >= 25, "found {count} rpcs");
        assert_eq!(rule("/hub.v1.Hub/Unknown"), None);
    }

    fn policy(members: &'static [u64]) -> Policy {
        Policy {
            insecure: false,
            is_member: Arc::new(move |id| members.contains(&id)),
            revoked: Arc::new(|serial: &[u8]| serial == [0x0b, 0xad]),
            tokens: Arc::new(|hash| {
                if *hash == secret(1).hash() {
                    TokenVerdict::Valid(Identity::Token("ci".into()))
                } else if *hash == secret(2).hash() {
                    TokenVerdict::Expired {
                        name: "old".into(),
                        at: "2026-01-01T00:00:00Z".into(),
                    }
                } else {
                    TokenVerdict::Unknown
                }
            }),
            stats: Arc::default(),
        }
    }

    fn secret(seed: u8) -> TokenSecret {
        TokenSecret::from_bytes([seed; hub_engine::token::SECRET_BYTES])
    }

    fn header(text: &str) -> http::HeaderValue {
        http::HeaderValue::from_str(text).unwrap()
    }

    #[test]
    fn a_token_identifies_a_caller_without_a_certificate() {
        let p = policy(&[1]);
        let anon = conn(Authenticated::NoCertificate);
        let op = conn(Authenticated::Identity(Identity::Operator("alice".into())));
        let good = header(&format!("Bearer {}", secret(1).reveal()));
        assert_eq!(
            p.check("/hub.v1.Hub/Query", Some(&anon), Some(&good))
                .unwrap(),
            Caller::Verified(Identity::Token("ci".into()))
        );
        // A token is an operator's credential: no node or agent method takes one.
        for path in ["/hub.v1.Raft/Vote", "/hub.v1.Agent/FetchPlans"] {
            let e = p.check(path, Some(&anon), Some(&good)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{path}");
        }
        let refused = |h: &http::HeaderValue, c: &ConnInfo| {
            let e = p.check("/hub.v1.Hub/Query", Some(c), Some(h)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
            e.message().to_string()
        };
        let expired = refused(&header(&format!("Bearer {}", secret(2).reveal())), &anon);
        assert_eq!(
            expired,
            "token/old expired at 2026-01-01T00:00:00Z: an admin creates a new one"
        );
        let unknown_secret = secret(3).reveal();
        let unknown = refused(&header(&format!("Bearer {unknown_secret}")), &anon);
        assert!(unknown.contains("revoked"), "{unknown}");
        let malformed = format!("Bearer {}", &unknown_secret[1..]);
        let m = refused(&header(&malformed), &anon);
        assert!(m.starts_with("a token is "), "{m}");
        assert!(refused(&header("Basic abc"), &anon).contains("Bearer <token>"));
        let both = refused(&good, &op);
        assert!(both.contains("present one of them"), "{both}");
        // No refusal repeats what the caller sent.
        for m in [expired, unknown, m, both] {
            assert!(!m.contains(&unknown_secret[8..]) && !m.contains(&secret(1).reveal()[8..]));
        }
    }

    fn conn(auth: Authenticated) -> ConnInfo {
        ConnInfo {
            remote: None,
            auth,
            admission: hub_tls::budget::Admission::granted(),
            serial: vec![0x01],
        }
    }

    #[test]
    fn a_revoked_certificate_is_refused_on_every_call() {
        let p = policy(&[1, 2, 3]);
        for who in [
            Identity::Operator("alice".into()),
            Identity::Agent("prod".into()),
            Identity::Node(2),
        ] {
            let mut revoked = conn(Authenticated::Identity(who.clone()));
            revoked.serial = vec![0x0b, 0xad];
            for path in [
                "/hub.v1.Hub/Query",
                "/hub.v1.Agent/FetchPlans",
                "/hub.v1.Raft/Vote",
            ] {
                let e = p.check(path, Some(&revoked), None).unwrap_err();
                assert_eq!(e.code(), tonic::Code::Unauthenticated, "{who} {path}");
                assert!(
                    e.message().contains("serial 0bad) is revoked"),
                    "{}",
                    e.message()
                );
            }
        }
    }

    #[test]
    fn rules_admit_only_their_identities() {
        let p = policy(&[1, 2, 3]);
        let op = conn(Authenticated::Identity(Identity::Operator("alice".into())));
        let agent = conn(Authenticated::Identity(Identity::Agent("prod".into())));
        let node = conn(Authenticated::Identity(Identity::Node(2)));
        let stranger = conn(Authenticated::Identity(Identity::Node(9)));
        assert!(p.check("/hub.v1.Hub/Submit", Some(&op), None).is_ok());
        assert!(p.check("/hub.v1.Hub/Submit", Some(&node), None).is_ok());
        let e = p
            .check("/hub.v1.Raft/AppendEntries", Some(&op), None)
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e
            .message()
            .contains("operator/alice may not call /hub.v1.Raft/AppendEntries"));
        assert!(p
            .check("/hub.v1.Raft/AppendEntries", Some(&node), None)
            .is_ok());
        // The replication stream: members only, like the call it pipelines.
        assert!(p
            .check("/hub.v1.Raft/StreamAppend", Some(&node), None)
            .is_ok());
        for who in [&op, &agent, &stranger] {
            assert!(p
                .check("/hub.v1.Raft/StreamAppend", Some(who), None)
                .is_err());
        }
        let e = p
            .check("/hub.v1.Raft/Vote", Some(&stranger), None)
            .unwrap_err();
        assert!(e.message().contains("member"), "{e:?}");
        // A node that is not a member is refused as such (a relaying node tells its client
        // to move on); an operator refused is not.
        assert!(refuses_a_non_member(&e), "{e:?}");
        let forward = p
            .check("/hub.v1.Hub/Forward", Some(&stranger), None)
            .unwrap_err();
        assert!(refuses_a_non_member(&forward), "{forward:?}");
        let op_refused = p
            .check("/hub.v1.Raft/AppendEntries", Some(&op), None)
            .unwrap_err();
        assert!(!refuses_a_non_member(&op_refused));
        assert!(p.check("/hub.v1.Hub/Forward", Some(&agent), None).is_err());
        assert!(p
            .check("/hub.v1.Agent/FetchPlans", Some(&agent), None)
            .is_ok());
        assert!(p
            .check("/hub.v1.Agent/FetchPlans", Some(&op), None)
            .is_err());
        assert!(p.check("/hub.v1.Hub/Query", Some(&agent), None).is_err());
        let e = p
            .check(
                "/hub.v1.Hub/Submit",
                Some(&conn(Authenticated::NoCertificate)),
                None,
            )
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("no client certificate"));
        let e = p
            .check(
                "/hub.v1.Hub/Submit",
                Some(&conn(Authenticated::Unusable("of cluster \"c2\"".into()))),
                None,
            )
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(p.check("/hub.v1.Hub/Nope", Some(&op), None).is_err());
        assert_eq!(p.stats.denied.load(Ordering::Relaxed), 11);
        assert_eq!(p.stats.unauthenticated.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn an_agent_acts_only_for_its_environment() {
        let a = Caller::Verified(Identity::Agent("prod".into()));
        assert!(a.require_environment("prod").is_ok());
        let e = a.require_environment("stage").unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            e.message(),
            "agent/prod may not act for environment \"stage\""
        );
        assert!(Caller::Insecure.require_environment("any").is_ok());
        let op = Caller::Verified(Identity::Operator("alice".into()));
        assert!(op.require_environment("prod").is_err());
    }
}
