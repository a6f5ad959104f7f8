//! A request URL split into what is sent, what is shown and the credentials.

use std::fmt;
use std::net::IpAddr;

use reqwest::header::HeaderValue;
use reqwest::Url;

use crate::deny::DenyList;
use crate::error::{ErrorKind, HttpError};

/// A parsed `http(s)://` URL without its credentials, and the `Authorization` they make.
pub(crate) struct Target {
    /// The URL to request, without `user:password@`.
    pub(crate) url: Url,
    /// `url` as text, for messages.
    pub(crate) shown: String,
    /// HTTP Basic authentication from the URL's credentials (a sensitive header value).
    pub(crate) authorization: Option<HeaderValue>,
}

impl fmt::Debug for Target {
    /// The URL without credentials; never the `Authorization` value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Target {
    /// Parses `url`: `http` or `https` only. Errors name the URL without its credentials.
    pub(crate) fn parse(url: &str) -> Result<Self, HttpError> {
        let shown_input = hub_wire::url_credentials::redact_url(url);
        let mut parsed = Url::parse(url).map_err(|e| {
            HttpError::new(shown_input.clone(), ErrorKind::MalformedUrl(e.to_string()))
        })?;
        match parsed.scheme() {
            "http" | "https" => {}
            other => {
                return Err(HttpError::new(
                    shown_input,
                    ErrorKind::UnsupportedScheme(other.to_string()),
                ))
            }
        }
        let authorization = if parsed.username().is_empty() && parsed.password().is_none() {
            None
        } else {
            let userinfo = format!("{}:{}", parsed.username(), parsed.password().unwrap_or(""));
            let value = hub_wire::url_credentials::basic_authorization(&userinfo);
            // Base64 text is always a valid header value.
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                HttpError::new(
                    shown_input.clone(),
                    ErrorKind::MalformedUrl("unusable credentials".to_string()),
                )
            })?;
            value.set_sensitive(true);
            // Removing credentials from an http(s) URL with a host cannot fail.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            Some(value)
        };
        Ok(Self {
            shown: parsed.to_string(),
            url: parsed,
            authorization,
        })
    }

    /// Refuses an IP-literal host in the deny list (host names are checked when resolved).
    pub(crate) fn check_literal(&self, deny: &DenyList) -> Result<(), HttpError> {
        check_literal(&self.url, deny)
            .map_err(|d| HttpError::new(self.shown.clone(), ErrorKind::Denied(d)))
    }
}

/// The IP literal of `url`'s host, if it is one.
pub(crate) fn ip_literal(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(_) => None,
    }
}

/// Refuses `url` if its host is an IP literal in the deny list.
pub(crate) fn check_literal(url: &Url, deny: &DenyList) -> Result<(), crate::deny::DeniedAddress> {
    match ip_literal(url) {
        Some(address) => deny.check(url.host_str().unwrap_or_default(), address),
        None => Ok(()),
    }
}

/// `url` as text without `user:password@`.
pub(crate) fn shown(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}
