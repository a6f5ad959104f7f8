//! Errors of outbound calls: the URL (never its credentials) and what went wrong, typed.

use std::error::Error as StdError;
use std::time::Duration;

use crate::deny::DeniedAddress;

/// A failed call: `<url>: <what happened>`. The URL never carries credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url}: {kind}")]
pub struct HttpError {
    /// The URL called, without `user:password@`.
    pub url: String,
    /// What happened.
    pub kind: ErrorKind,
}

impl HttpError {
    /// An error of `kind` for `url` (already without credentials).
    pub fn new(url: impl Into<String>, kind: ErrorKind) -> Self {
        Self {
            url: url.into(),
            kind,
        }
    }
}

/// What went wrong with a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The URL does not parse.
    #[error("malformed URL: {0}")]
    MalformedUrl(String),
    /// An address with a `?` or `#`, to which the caller would add a path or a query.
    #[error("'{0}' is not allowed in an outbound address")]
    QueryOrFragment(char),
    /// Neither http nor https.
    #[error("unsupported URL scheme {0:?} (only http and https)")]
    UnsupportedScheme(String),
    /// The deny list refused the address; no connection was made.
    #[error("refused without connecting: {0} (--outbound-deny; --outbound-allow opens a range)")]
    Denied(DeniedAddress),
    /// The server's certificate did not verify.
    #[error("TLS certificate not trusted: {0}")]
    CertificateNotTrusted(String),
    /// Any other TLS failure (protocol versions, alerts, a plain-text server).
    #[error("TLS handshake failed: {0}")]
    TlsHandshake(String),
    /// A CA bundle that cannot be used.
    #[error("unusable CA bundle: {0}")]
    InvalidCaBundle(String),
    /// No TCP connection (refused, unreachable, name not found).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The caller's deadline passed.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// A redirect that is not followed.
    #[error("{0}")]
    Redirect(RedirectRefused),
    /// The answer is larger than the caller's cap.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(u64),
    /// The exchange failed after connecting (a reset, a malformed answer, a cut body).
    #[error("{0}")]
    Transport(String),
    /// The client could not be built.
    #[error("cannot set up the HTTP client: {0}")]
    Setup(String),
}

/// The kind of a reqwest error, from the typed errors in its source chain.
pub(crate) fn classify(error: reqwest::Error) -> ErrorKind {
    // The caller shows its own URL, without credentials.
    let error = &error.without_url();
    if let Some(kind) = find_typed(error, 0) {
        return kind;
    }
    if error.is_connect() {
        return ErrorKind::Connect(connect_reason(error));
    }
    if error.is_body() || error.is_decode() {
        return ErrorKind::Transport(format!("reading the answer: {}", chain(error)));
    }
    ErrorKind::Transport(chain(error))
}

/// The first typed error in `e`, its sources and the errors wrapped in `io::Error`s (which
/// hide their inner error from `source()`), depth-first.
fn find_typed(e: &(dyn StdError + 'static), depth: usize) -> Option<ErrorKind> {
    if depth > 16 {
        return None;
    }
    if let Some(kind) = typed(e) {
        return Some(kind);
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        if let Some(kind) = find_typed(inner, depth + 1) {
            return Some(kind);
        }
    }
    find_typed(e.source()?, depth + 1)
}

fn typed(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if let Some(denied) = e.downcast_ref::<DeniedAddress>() {
        return Some(ErrorKind::Denied(denied.clone()));
    }
    if let Some(refused) = e.downcast_ref::<RedirectRefused>() {
        return Some(match refused {
            RedirectRefused::Denied(denied) => ErrorKind::Denied(denied.clone()),
            other => ErrorKind::Redirect(other.clone()),
        });
    }
    e.downcast_ref::<rustls::Error>().map(classify_tls)
}

/// "connection refused", or the innermost message of the chain.
fn connect_reason(error: &reqwest::Error) -> String {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    let mut innermost = String::new();
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused".into(),
                std::io::ErrorKind::TimedOut => return "timed out".into(),
                _ => {}
            }
        }
        innermost = e.to_string();
        current = e.source();
    }
    innermost
}

/// The error and its sources, `: `-separated.
fn chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut current: Option<&(dyn StdError + 'static)> = error.source();
    while let Some(e) = current {
        let part = e.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        current = e.source();
    }
    text
}

/// Why a redirect was not followed. URLs are shown without credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefused {
    /// The target was visited before in this chain.
    #[error("redirect loop: {0} was already visited")]
    Loop(String),
    /// The chain is longer than the limit.
    #[error("more than {0} redirects")]
    TooMany(usize),
    /// The target is neither http nor https.
    #[error("redirect to {0}: only http and https are followed")]
    Scheme(String),
    /// From https to plain http.
    #[error("redirect from https to plain http ({0}) refused")]
    Downgrade(String),
    /// The target is an IP literal in the deny list.
    #[error("redirect to {0}")]
    Denied(DeniedAddress),
}

/// What a rustls failure during a handshake means for the caller.
pub(crate) fn classify_tls(error: &rustls::Error) -> ErrorKind {
    let rustls::Error::InvalidCertificate(reason) = error else {
        return ErrorKind::TlsHandshake(error.to_string());
    };
    let why = match reason {
        rustls::CertificateError::UnknownIssuer => {
            "it is not signed by a trusted CA (unknown issuer)".to_string()
        }
        rustls::CertificateError::NotValidForName
        | rustls::CertificateError::NotValidForNameContext { .. } => {
            "it is not valid for this host name".to_string()
        }
        rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => {
            "it has expired".to_string()
        }
        rustls::CertificateError::NotValidYet
        | rustls::CertificateError::NotValidYetContext { .. } => "it is not valid yet".to_string(),
        rustls::CertificateError::Revoked => "it was revoked".to_string(),
        rustls::CertificateError::BadSignature => "its signature is invalid".to_string(),
        other => format!("{other:?}"),
    };
    ErrorKind::CertificateNotTrusted(why)
}
