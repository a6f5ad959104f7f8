//! The web dashboard (`hub-node --http-listen`, docs/DASHBOARD.md): a page and its JSON API
//! over HTTPS with the node's certificate, for operators.
//!
//! Who: every `/api/` call is identified like a gRPC call ([`Policy::identify`]): an operator
//! token as `authorization: Bearer` (what a browser sends), or an operator's client
//! certificate. Nodes and agents are refused: the dashboard is for people. What a caller may
//! read or write is then decided by the same checks as the gRPC API, because the API calls the
//! gRPC handlers themselves ([`HubService`]) with the verified caller, and writes go through
//! [`HubNode::propose`]. The static files hold no data and are served to anyone.
//!
//! The page is embedded in the binary (`assets/`); nothing is fetched from elsewhere, and the
//! content security policy forbids it.

mod api;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use hub_tls::server::ConnInfo;
use hub_tls::Identity;

use crate::api::HubService;
use crate::auth::{Caller, Policy};
use crate::http_serve::{ConnectionLimits, HttpLimits};
use crate::node::HubNode;

/// The page.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script.
const APP_JS: &str = include_str!("assets/app.js");
/// Its style sheet.
const APP_CSS: &str = include_str!("assets/app.css");

/// The page may load only its own script, style and API; nothing may frame it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// A browser opens a few connections and holds one long poll ([`api::WAIT`]) on one of them.
const LIMITS: HttpLimits = HttpLimits {
    connections: ConnectionLimits {
        admitted: 256,
        unadmitted: 64,
        unadmitted_per_source: 16,
    },
    lifetime: Duration::from_secs(120),
    grace: Duration::from_secs(30),
    max_streams: 32,
};

/// The dashboard of one node.
#[derive(Clone)]
pub struct Dashboard {
    node: Arc<HubNode>,
    policy: Policy,
}

impl Dashboard {
    /// The dashboard of `node`, identifying callers by `policy`.
    pub fn new(node: Arc<HubNode>, policy: Policy) -> Self {
        Self { node, policy }
    }

    /// Serves the dashboard on `listener` until the process ends.
    pub async fn serve(self, listener: TcpListener, mode: hub_tls::server::ListenerMode) {
        crate::http_serve::serve(listener, mode, LIMITS, move |info, req| {
            let dashboard = self.clone();
            async move { with_headers(dashboard.answer(&info, req).await) }
        })
        .await;
    }

    /// The answer to one request.
    async fn answer(&self, info: &ConnInfo, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_string();
        if let Some(path) = path.strip_prefix("/api/") {
            let caller = match self.caller(info, &req) {
                Ok(caller) => caller,
                Err(status) => return api::status_answer(&status),
            };
            return api::answer(self, &caller, path, req).await;
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return api::error(StatusCode::METHOD_NOT_ALLOWED, "only GET");
        }
        match path.as_str() {
            "/" | "/index.html" => asset(INDEX_HTML, "text/html; charset=utf-8"),
            "/app.js" => asset(APP_JS, "text/javascript; charset=utf-8"),
            "/app.css" => asset(APP_CSS, "text/css; charset=utf-8"),
            _ => api::error(StatusCode::NOT_FOUND, "not found"),
        }
    }

    /// Who calls: an operator by token or certificate; everyone on an insecure listener.
    fn caller(&self, info: &ConnInfo, req: &Request<Incoming>) -> Result<Caller, tonic::Status> {
        if self.policy.insecure {
            return Ok(Caller::Insecure);
        }
        let identity = self.policy.identify(
            req.uri().path(),
            Some(info),
            req.headers().get(header::AUTHORIZATION),
        )?;
        match identity {
            Identity::Operator(_) | Identity::Token(_) => Ok(Caller::Verified(identity)),
            Identity::Node(_) | Identity::Agent(_) => Err(tonic::Status::permission_denied(
                format!("{identity} may not use the dashboard: it is for operators"),
            )),
        }
    }

    /// The gRPC service, for calling its handlers as `caller`.
    fn hub(&self) -> HubService {
        HubService {
            node: self.node.clone(),
        }
    }
}

/// A static file.
fn asset(body: &'static str, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Adds the security headers every answer carries.
fn with_headers(mut r: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    r
}
