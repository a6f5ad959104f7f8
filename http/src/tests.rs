//! The client against real TLS servers started here (CAs generated with rcgen).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;

use crate::local::{Handler, LocalCa, LocalServer, Reply, Request};
use crate::*;

const T: Duration = Duration::from_secs(10);
const CAP: usize = 1 << 20;

fn settings(redirects: Redirects, deny: DenyList) -> ClientSettings {
    ClientSettings {
        user_agent: "hub-http-test".into(),
        redirects,
        proxies: Proxies::None,
        deny: Arc::new(deny),
    }
}

fn client(trust: &Trust) -> HttpClient {
    HttpClient::new(
        &settings(Redirects::Follow { max: 5 }, DenyList::none()),
        trust,
    )
    .unwrap()
}

fn ca_trust(ca: &LocalCa) -> Trust {
    Trust::SystemRootsAnd {
        ca_pem: ca.ca_pem().to_string(),
    }
}

/// Requests a server saw: (path, Authorization).
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A server on `ip` (TLS when `tls`), answering with `answer(path)` and recording requests.
async fn server(
    ip: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: impl Fn(&str) -> Reply + Send + Sync + 'static,
) -> (LocalServer, Seen) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let handler: Handler = Arc::new(move |r: Request| {
        let auth = r
            .headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string());
        record.lock().unwrap().push((r.path.clone(), auth));
        answer(&r.path)
    });
    (LocalServer::start(listener, tls, handler).unwrap(), seen)
}

async fn tls_server(
    ca: &LocalCa,
    names: &[&str],
    answer: impl Fn(&str) -> Reply + Send + Sync + 'static,
) -> (LocalServer, Seen) {
    server("127.0.0.1", Some(ca.server_config(names).unwrap()), answer).await
}

fn ok(_: &str) -> Reply {
    Reply::text(200, "fine")
}

async fn get(client: &HttpClient, url: &str) -> Result<Answer, HttpError> {
    client.call(Method::GET, url, None, T, CAP).await
}

#[tokio::test]
async fn https_with_a_ca_bundle_reuses_one_connection() {
    let ca = LocalCa::generate("test CA").unwrap();
    let (srv, seen) = tls_server(&ca, &["127.0.0.1"], ok).await;
    let client = client(&ca_trust(&ca));
    for i in 0..3 {
        let url = format!("https://{}/x{i}", srv.addr());
        let answer = get(&client, &url).await.unwrap();
        assert_eq!(
            (answer.status.as_u16(), &answer.body[..]),
            (200, &b"fine"[..])
        );
    }
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(
        srv.connections(),
        1,
        "keep-alive: one connection for three calls"
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_named_as_such() {
    let ca = LocalCa::generate("test CA").unwrap();
    let other = LocalCa::generate("another CA").unwrap();
    let (srv, seen) = tls_server(&ca, &["127.0.0.1"], ok).await;
    let url = format!("https://user:hunter2@{}/a.tgz", srv.addr());
    for trust in [Trust::SystemRoots, ca_trust(&other)] {
        let err = get(&client(&trust), &url).await.unwrap_err();
        assert!(
            matches!(&err.kind, ErrorKind::CertificateNotTrusted(why) if why.contains("unknown issuer")),
            "{err:?}"
        );
        let text = err.to_string();
        assert_eq!(
            text,
            format!(
                "https://{}/a.tgz: TLS certificate not trusted: it is not signed by a trusted CA (unknown issuer)",
                srv.addr()
            )
        );
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "no request after a failed handshake"
    );
    // Skipping verification is explicit, and works.
    let answer = get(&client(&Trust::SkipVerification), &url).await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn a_certificate_for_another_name_and_a_plain_server_fail_the_handshake() {
    let ca = LocalCa::generate("test CA").unwrap();
    let (srv, _) = tls_server(&ca, &["registry.example"], ok).await;
    let err = get(&client(&ca_trust(&ca)), &format!("https://{}/", srv.addr()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err.kind, ErrorKind::CertificateNotTrusted(why) if why.contains("not valid for this host name")),
        "{err:?}"
    );
    let (plain, _) = server("127.0.0.1", None, ok).await;
    let err = get(
        &client(&ca_trust(&ca)),
        &format!("https://{}/", plain.addr()),
    )
    .await
    .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::TlsHandshake(_)), "{err:?}");
}

#[tokio::test]
async fn credentials_become_basic_auth_and_never_appear() {
    let (srv, seen) = server("127.0.0.1", None, |p| match p {
        "/ok" => Reply::text(200, "ok"),
        _ => Reply::text(404, "no"),
    })
    .await;
    let client = client(&Trust::SystemRoots);
    let url = format!("http://user:p%40ss@{}/ok", srv.addr());
    assert_eq!(get(&client, &url).await.unwrap().status, StatusCode::OK);
    assert_eq!(
        seen.lock().unwrap()[0].1.as_deref(),
        Some(hub_wire::url_credentials::basic_authorization("user:p%40ss").as_str())
    );
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let err = get(&client, &format!("http://user:hunter2@{closed}/x"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("http://{closed}/x: cannot connect: connection refused")
    );
    for text in [
        format!("{err:?}"),
        format!("{client:?}"),
        format!("{:?}", crate::target::Target::parse(&url).unwrap()),
    ] {
        assert!(
            !text.contains("hunter2") && !text.contains("p%40ss"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn authorization_stays_on_its_host_across_redirects() {
    let (other, other_seen) = server("127.0.0.1", None, ok).await;
    let elsewhere = format!("http://{}/elsewhere", other.addr());
    let (srv, seen) = server("127.0.0.1", None, move |p| match p {
        "/same" => Reply::redirect(302, "/final"),
        "/away" => Reply::redirect(307, &elsewhere),
        _ => Reply::text(200, "here"),
    })
    .await;
    let client = client(&Trust::SystemRoots);
    let base = format!("http://user:pass@{}", srv.addr());
    let basic = hub_wire::url_credentials::basic_authorization("user:pass");

    let answer = get(&client, &format!("{base}/same")).await.unwrap();
    assert_eq!(&answer.body[..], b"here");
    let same: Vec<_> = seen.lock().unwrap().clone();
    assert_eq!(
        same,
        vec![
            ("/same".to_string(), Some(basic.clone())),
            ("/final".to_string(), Some(basic.clone()))
        ]
    );

    let answer = get(&client, &format!("{base}/away")).await.unwrap();
    assert_eq!(&answer.body[..], b"fine");
    assert_eq!(
        other_seen.lock().unwrap().clone(),
        vec![("/elsewhere".to_string(), None)],
        "another host (here: another port) never gets the credentials"
    );
    let response = client
        .send(Method::GET, &format!("{base}/away"), None)
        .await
        .unwrap();
    assert_eq!(
        response.final_url(),
        format!("http://{}/elsewhere", other.addr())
    );
}

#[tokio::test]
async fn redirect_loops_chains_and_downgrades_are_refused() {
    let ca = LocalCa::generate("test CA").unwrap();
    let (plain, _) = server("127.0.0.1", None, ok).await;
    let plain_url = format!("http://{}/x", plain.addr());
    let (srv, _) = tls_server(&ca, &["127.0.0.1"], move |p| {
        if p == "/loop" {
            return Reply::redirect(302, "/loop");
        }
        if let Some(n) = p.strip_prefix("/chain/") {
            let n: u32 = n.parse().unwrap();
            return Reply::redirect(302, &format!("/chain/{}", n + 1));
        }
        match p {
            "/down" => Reply::redirect(302, &plain_url),
            "/ftp" => Reply::redirect(302, "ftp://127.0.0.1/x"),
            _ => Reply::text(200, "end"),
        }
    })
    .await;
    let client = client(&ca_trust(&ca));
    let url = |p: &str| format!("https://{}{p}", srv.addr());
    let kind = |e: HttpError| e.kind;
    assert_eq!(
        kind(get(&client, &url("/loop")).await.unwrap_err()),
        ErrorKind::Redirect(RedirectRefused::Loop(url("/loop")))
    );
    assert_eq!(
        kind(get(&client, &url("/chain/0")).await.unwrap_err()),
        ErrorKind::Redirect(RedirectRefused::TooMany(5))
    );
    assert!(matches!(
        kind(get(&client, &url("/down")).await.unwrap_err()),
        ErrorKind::Redirect(RedirectRefused::Downgrade(_))
    ));
    assert!(matches!(
        kind(get(&client, &url("/ftp")).await.unwrap_err()),
        ErrorKind::Redirect(RedirectRefused::Scheme(_))
    ));
    assert_eq!(plain.connections(), 0);

    // A client that refuses redirects answers with the 3xx.
    let refusing = HttpClient::new(
        &settings(Redirects::Refuse, DenyList::none()),
        &ca_trust(&ca),
    )
    .unwrap();
    let answer = get(&refusing, &url("/loop")).await.unwrap();
    assert_eq!(answer.status, StatusCode::FOUND);
}

#[tokio::test]
async fn denied_addresses_are_refused_before_connecting() {
    // 127.0.0.2 is loopback too: the server is real, the list keeps the client away.
    let (target, _) = server("127.0.0.2", None, ok).await;
    let target_url = format!("http://{}/hook", target.addr());
    let deny = DenyList::parse("127.0.0.2/32").unwrap();
    let client = HttpClient::new(
        &settings(Redirects::Follow { max: 5 }, deny),
        &Trust::SystemRoots,
    )
    .unwrap();
    let err = get(&client, &target_url).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{target_url}: refused without connecting: 127.0.0.2 is 127.0.0.2, in the denied \
             range 127.0.0.2/32 (--outbound-deny; --outbound-allow opens a range)"
        )
    );

    // A redirect to it, from an allowed server.
    let to = target_url.clone();
    let (srv, _) = server("127.0.0.1", None, move |_| Reply::redirect(302, &to)).await;
    let err = get(&client, &format!("http://{}/r", srv.addr()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err.kind, ErrorKind::Denied(d) if d.range.to_string() == "127.0.0.2/32"),
        "{err:?}"
    );
    assert_eq!(target.connections(), 0);

    // A host name is checked on the addresses it resolves to.
    let (local, _) = server("127.0.0.1", None, ok).await;
    let deny = DenyList::parse("127.0.0.0/8, ::1/128").unwrap();
    let client = HttpClient::new(&settings(Redirects::Refuse, deny), &Trust::SystemRoots).unwrap();
    let url = format!("http://localhost:{}/", local.addr().port());
    let err = get(&client, &url).await.unwrap_err();
    assert!(
        matches!(&err.kind, ErrorKind::Denied(d) if d.host == "localhost"),
        "{err:?}"
    );
    assert_eq!(local.connections(), 0);
}

#[tokio::test]
async fn bodies_are_capped_and_calls_time_out() {
    let (srv, _) = server("127.0.0.1", None, |_| Reply::text(200, "x".repeat(2000))).await;
    let client = client(&Trust::SystemRoots);
    let url = format!("http://{}/big", srv.addr());
    let err = client
        .call(Method::GET, &url, None, T, 1000)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TooLarge(1000));
    assert_eq!(
        client
            .call(Method::GET, &url, None, T, 2000)
            .await
            .unwrap()
            .body
            .len(),
        2000
    );

    // A server that accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let started = std::time::Instant::now();
    let err = client
        .call(
            Method::GET,
            &format!("http://{addr}/"),
            None,
            Duration::from_millis(200),
            CAP,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout(Duration::from_millis(200)));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        err.to_string(),
        format!("http://{addr}/: no answer within 200 ms")
    );
}

#[tokio::test]
async fn bad_urls_are_named_without_credentials() {
    let client = client(&Trust::SystemRoots);
    let err = get(&client, "http://exa mple/x").await.unwrap_err();
    assert!(matches!(err.kind, ErrorKind::MalformedUrl(_)), "{err:?}");
    let err = get(&client, "ftp://u:secret@r.example/x")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::UnsupportedScheme("ftp".into()));
    assert_eq!(
        err.to_string(),
        "ftp://r.example/x: unsupported URL scheme \"ftp\" (only http and https)"
    );
    let err = get(&client, "http://u:secret@[::1/x").await.unwrap_err();
    assert!(matches!(err.kind, ErrorKind::MalformedUrl(_)), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[tokio::test]
async fn a_pool_keeps_one_client_per_trust() {
    let ca = LocalCa::generate("test CA").unwrap();
    let (srv, _) = tls_server(&ca, &["127.0.0.1"], ok).await;
    let pool = ClientPool::new(settings(Redirects::Follow { max: 5 }, DenyList::none()));
    for _ in 0..2 {
        let c = pool.client(&ca_trust(&ca)).unwrap();
        get(&c, &format!("https://{}/", srv.addr())).await.unwrap();
    }
    assert_eq!(srv.connections(), 1);
    let err = pool
        .client(&Trust::SystemRootsAnd {
            ca_pem: "no certificate here".into(),
        })
        .unwrap_err();
    assert!(matches!(err, ErrorKind::InvalidCaBundle(_)), "{err:?}");
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn deny_lists_parse_and_match() {
    let default = DenyList::parse(DenyList::DEFAULT).unwrap();
    assert_eq!(default.to_string(), DenyList::DEFAULT);
    for denied in [
        "169.254.169.254",
        "169.254.0.1",
        "::ffff:169.254.169.254",
        "fe80::1",
        "100.100.100.200",
        "fd00:ec2::254",
        "127.0.0.1",
        "127.255.255.254",
        "0.0.0.0",
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "100.64.0.1",
        "::1",
        "::",
        "fc00::1",
        "fd12:3456::1",
        "::ffff:127.0.0.1",
        "::ffff:10.1.2.3",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
    ] {
        assert!(default.denies(ip(denied)).is_some(), "{denied}");
    }
    for allowed in [
        "8.8.8.8",
        "169.255.0.1",
        "172.32.0.1",
        "192.169.0.1",
        "100.128.0.1",
        "2001:db8::1",
        "2606:4700::1111",
        "64:ff9b::808:808",
        "::ffff:8.8.8.8",
    ] {
        assert_eq!(default.denies(ip(allowed)), None, "{allowed}");
    }
    assert_eq!(DenyList::parse("").unwrap(), DenyList::none());
    assert_eq!(DenyList::parse(" , ").unwrap(), DenyList::none());
    let all = DenyList::parse("0.0.0.0/0,::/0").unwrap();
    assert!(all.denies(ip("8.8.8.8")).is_some() && all.denies(ip("2001:db8::1")).is_some());
    let err = DenyList::parse("169.254.1.0/16").unwrap_err();
    assert!(
        err.to_string().contains("did you mean 169.254.0.0/16"),
        "{err}"
    );
    for bad in ["nonsense", "10.0.0.0/33", "::/129", "10.0.0.0/x", "/8"] {
        assert!(DenyList::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn allowed_ranges_open_what_they_cover_and_no_more() {
    let open = |ranges: &str| {
        DenyList::parse(DenyList::DEFAULT)
            .unwrap()
            .allowing(parse_ranges(ranges).unwrap())
    };
    let loopback = open(DenyList::LOOPBACK);
    for allowed in [
        "127.0.0.1",
        "127.0.0.2",
        "::1",
        "::ffff:127.0.0.1",
        "64:ff9b::7f00:1",
    ] {
        assert_eq!(loopback.denies(ip(allowed)), None, "{allowed}");
    }
    for denied in ["10.0.0.1", "169.254.169.254", "fc00::1", "192.168.0.1"] {
        assert!(loopback.denies(ip(denied)).is_some(), "{denied}");
    }
    assert_eq!(
        loopback.to_string(),
        format!("{}; allowed: {}", DenyList::DEFAULT, DenyList::LOOPBACK)
    );
    // Opening link-local leaves the metadata address, denied by name, denied.
    let link_local = open("169.254.0.0/16");
    assert_eq!(link_local.denies(ip("169.254.1.1")), None);
    assert_eq!(
        link_local
            .denies(ip("169.254.169.254"))
            .map(|r| r.to_string()),
        Some("169.254.169.254/32".into())
    );
    assert_eq!(
        open("169.254.169.254/32").denies(ip("169.254.169.254")),
        None
    );
    // A wider opening does not undo a narrower denial; an exact one does.
    let everything = open("0.0.0.0/0,::/0");
    assert!(everything.denies(ip("10.0.0.1")).is_some());
    assert_eq!(open("10.0.0.0/8").denies(ip("10.0.0.1")), None);
    let inside = DenyList::parse("10.0.0.0/8,10.1.0.0/16")
        .unwrap()
        .allowing(parse_ranges("10.0.0.0/12").unwrap());
    assert_eq!(inside.denies(ip("10.2.0.1")), None);
    assert!(inside.denies(ip("10.1.0.1")).is_some());
    assert!(inside.denies(ip("10.16.0.1")).is_some());
}

#[test]
fn excerpts_are_short_single_lines() {
    assert_eq!(excerpt(b"  ok\n"), "ok");
    assert_eq!(excerpt(b"a\nb\tc"), "a b c");
    let long = "é".repeat(400);
    let e = excerpt(long.as_bytes());
    assert!(
        e.len() <= EXCERPT_BYTES && e.ends_with('…'),
        "{} {e}",
        e.len()
    );
    assert_eq!(excerpt(&[0xff, b'x']), "\u{fffd}x");
    assert_eq!(excerpt(b""), "");
}
