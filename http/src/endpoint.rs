//! Outbound URLs built from an operator's address with the `url` crate: path segments and
//! query pairs are set on the parsed address, never appended to it as text, so nothing in
//! the address can turn what the hub adds into a fragment, a query or another path.

use reqwest::Url;

use crate::error::{ErrorKind, HttpError};

/// `address` (`http(s)://host[:port][/prefix]`) with `segments` appended to its path and
/// `query` as its query, e.g. Prometheus's `<address>/api/v1/query?query=…`. An address with a
/// `?` or `#` is refused, naming the character, and so is anything but an http(s) URL with a
/// host. Credentials in the address are kept (the client sends them as Basic
/// authentication); errors never show them.
pub fn endpoint(
    address: &str,
    segments: &[&str],
    query: &[(&str, &str)],
) -> Result<String, HttpError> {
    let refuse = |kind| HttpError::new(shown(address), kind);
    if let Some(c) = address.chars().find(|c| matches!(c, '?' | '#')) {
        return Err(refuse(ErrorKind::QueryOrFragment(c)));
    }
    if let Some(bad) = segments.iter().find(|s| matches!(**s, "" | "." | "..")) {
        return Err(refuse(ErrorKind::MalformedUrl(format!(
            "the path segment {bad:?} would not name a file under the address"
        ))));
    }
    let mut url =
        Url::parse(address).map_err(|e| refuse(ErrorKind::MalformedUrl(e.to_string())))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse(ErrorKind::UnsupportedScheme(
            url.scheme().to_string(),
        )));
    }
    url.path_segments_mut()
        .map_err(|()| refuse(ErrorKind::MalformedUrl("no host".to_string())))?
        .pop_if_empty()
        .extend(segments);
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    Ok(url.into())
}

/// `address` for a message: without anything up to the last `@` before the first `/` after
/// the scheme, so a password is not shown even when it holds a `#` or `?` (which the URL
/// parser would take for the start of a fragment or a query).
fn shown(address: &str) -> String {
    let Some((scheme, rest)) = address.split_once("://") else {
        return hub_wire::url_credentials::redact_url(address);
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => address.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUERY: &[&str] = &["api", "v1", "query"];

    #[test]
    fn segments_and_pairs_are_set_not_appended() {
        let q = [("query", "rate(x{a=\"b\"}[1m]) > 0.5 & y#z")];
        assert_eq!(
            endpoint("http://prom:9090", QUERY, &q).unwrap(),
            "http://prom:9090/api/v1/query?query=rate%28x%7Ba%3D%22b%22%7D%5B1m%5D%29+%3E+0.5+%26+y%23z"
        );
        for prefixed in [
            "https://u:p@prom.example/prefix",
            "https://u:p@prom.example/prefix/",
        ] {
            assert_eq!(
                endpoint(prefixed, QUERY, &[("query", "up")]).unwrap(),
                "https://u:p@prom.example/prefix/api/v1/query?query=up"
            );
        }
        // A segment cannot add segments of its own, nor climb.
        assert_eq!(
            endpoint("http://h/a", &["b/c"], &[]).unwrap(),
            "http://h/a/b%2Fc"
        );
        for bad in ["..", ".", ""] {
            assert!(endpoint("http://h/a", &[bad, "x"], &[]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_query_or_fragment_in_the_address_is_refused() {
        for (address, c) in [
            ("http://127.0.0.1:9/internal/secret#", '#'),
            ("http://127.0.0.1:9/internal/secret?x=", '?'),
            ("http://u:s#cret@h/", '#'),
        ] {
            let err = endpoint(address, QUERY, &[("query", "up")]).unwrap_err();
            assert_eq!(err.kind, ErrorKind::QueryOrFragment(c), "{address}");
            assert!(
                err.to_string()
                    .ends_with(&format!("'{c}' is not allowed in an outbound address")),
                "{err}"
            );
            assert!(!err.to_string().contains("s#cret"), "{err}");
        }
        for bad in [
            "file:///etc/passwd",
            "prom:9090",
            "http://",
            "data:text/plain,x",
        ] {
            assert!(endpoint(bad, QUERY, &[]).is_err(), "{bad}");
        }
    }
}
