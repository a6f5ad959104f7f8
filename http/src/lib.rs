//! The outbound HTTP(S) client of `hub-node` and `hub-agent`: every artifact existence check,
//! artifact download, readiness probe, canary webhook, alert and Prometheus query goes
//! through an [`HttpClient`].
//!
//! - **One library**: [reqwest] over rustls with the `ring` crypto provider (the same provider
//!   tonic's TLS uses, so the workspace builds one; never aws-lc-rs).
//! - **Trust** ([`Trust`]): the system's roots (`/etc/ssl/certs` from Debian's
//!   `ca-certificates`, or `SSL_CERT_FILE` / `SSL_CERT_DIR`), optionally plus a CA bundle, or —
//!   only when asked for explicitly — no verification. No client certificates.
//! - **Long-lived clients**: a client keeps a pool of idle connections (HTTP/1.1 keep-alive),
//!   so repeated calls to one host reuse a connection. A process builds its clients once;
//!   [`ClientPool`] keeps one per trust setting.
//! - **Redirects** ([`Redirects`]): refused (the 3xx is the answer) or followed up to a limit,
//!   never in a loop, never from https to http, never to a denied address.
//!   `Authorization` is dropped when a redirect leaves the first URL's scheme, host and
//!   port (reqwest's rule, tested here).
//! - **Proxies** ([`Proxies`]): `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (and
//!   their lower-case forms) from the environment, or none.
//! - **Deny list** ([`DenyList`]): addresses never connected to (by default loopback, private
//!   and link-local ranges and cloud metadata; an operator opens ranges explicitly). Host
//!   names are checked on the addresses they resolve to (a resolver that drops denied
//!   addresses), IP literals before the request and on every redirect hop, so DNS rebinding
//!   cannot get round it. Through a proxy only IP-literal targets (and a proxy named by host
//!   name) can be checked: the proxy resolves the target's name.
//! - **Addresses** ([`endpoint`]): a path or query the caller adds to an operator's address
//!   is set on the parsed URL (the `url` crate), never appended as text; an address with a
//!   `?` or `#` is refused.
//! - **Credentials**: `user:password@` in a URL is removed from the URL and sent as HTTP Basic
//!   authentication (a sensitive header); errors, `Debug` and logs show URLs without it.
//! - **Bounds**: callers give a whole-request timeout ([`HttpClient::call`]) or time each step
//!   of a stream ([`Response::chunk`]); bodies are read up to a cap; [`excerpt`] keeps at most
//!   [`EXCERPT_BYTES`] of an answer for messages.
//!
//! Errors are [`HttpError`]: the URL without credentials and a typed [`ErrorKind`].
//!
//! [`local`] is the other side, for `hubctl dev registry`, the demo and tests: a local
//! HTTP(S) server with a CA generated on the spot.

mod client;
mod deny;
mod endpoint;
mod error;
pub mod local;
mod pool;
mod redirect;
mod target;
mod tls;

pub use client::{Answer, Body, ClientSettings, HttpClient, Proxies, Redirects, Response};
pub use deny::{parse_ranges, Cidr, DeniedAddress, DenyList, InvalidCidr};
pub use endpoint::endpoint;
pub use error::RedirectRefused;
pub use error::{ErrorKind, HttpError};
pub use pool::ClientPool;
pub use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
pub use reqwest::{Method, StatusCode};
pub use tls::Trust;

/// Most bytes of an answer kept in a message or a stored result.
pub const EXCERPT_BYTES: usize = 256;

/// The start of `body` as one line of text for a message: lossy UTF-8, control characters
/// as spaces, trimmed, at most [`EXCERPT_BYTES`] bytes including a final `…` when cut.
pub fn excerpt(body: &[u8]) -> String {
    const ELLIPSIS: char = '…';
    let head = &body[..body.len().min(EXCERPT_BYTES)];
    let decoded = String::from_utf8_lossy(head);
    let room = EXCERPT_BYTES - ELLIPSIS.len_utf8();
    let mut out = String::with_capacity(EXCERPT_BYTES);
    let mut cut = body.len() > head.len();
    for c in decoded.trim().chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > room {
            cut = true;
            break;
        }
        out.push(c);
    }
    if cut {
        out.push(ELLIPSIS);
    }
    out
}

#[cfg(test)]
mod tests;
