//! Credentials in registry URLs (`https://user:password@host/...`): removed wherever a URL
//! is shown, and sent as HTTP Basic authentication.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// `url` with the `user:password@` of its authority removed, if it has one. Works on any
/// string (validated or not); strings without `://` are returned unchanged.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..rest_start], &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The `Authorization` header value for a registry URL's `user:password` (each part
/// percent-decoded), as HTTP Basic authentication sends it.
pub fn basic_authorization(userinfo: &str) -> String {
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let mut raw = percent_decode(user);
    raw.push(b':');
    raw.extend(percent_decode(password));
    format!("Basic {}", STANDARD.encode(&raw))
}

/// Decodes `%XX` escapes; malformed escapes are kept verbatim.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_removes_the_userinfo_only() {
        assert_eq!(
            redact_url("https://u:p%40ss@r.example/a@b?x=@"),
            "https://r.example/a@b?x=@"
        );
        assert_eq!(redact_url("http://r/a@b"), "http://r/a@b");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn basic_authorization_decodes_each_part() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("user:pass", "dXNlcjpwYXNz"),
        ] {
            assert_eq!(STANDARD.encode(input.as_bytes()), want, "{input}");
        }
        assert_eq!(percent_decode("a%40b%3Ac"), b"a@b:c");
        assert_eq!(percent_decode("100%"), b"100%");
        assert_eq!(percent_decode("%zz%4"), b"%zz%4");
        assert_eq!(basic_authorization("user:pass"), "Basic dXNlcjpwYXNz");
        // A ':' escaped in the user name stays part of it.
        assert_eq!(
            basic_authorization("a%3Ab:c"),
            format!("Basic {}", STANDARD.encode(b"a:b:c"))
        );
    }
}
