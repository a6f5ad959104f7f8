//! The PKI and both ends of a TLS connection, for real over loopback: who a connection
//! authenticates as, and every certificate that must be refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hub_tls::client::{ClientMode, ClientTls, Connector};
use hub_tls::pki::{file_stem, Ca};
use hub_tls::server::{incoming, Authenticated, Limits, ListenerMode, ServerTls};
use hub_tls::{Identity, TlsError, TlsFiles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tower::Service;

const DAY: Duration = Duration::from_secs(86_400);

fn issue(ca: &Ca, dir: &Path, identity: &Identity, now: SystemTime) -> TlsFiles {
    let hosts = match identity {
        Identity::Node(_) => vec!["127.0.0.1".to_string(), "localhost".to_string()],
        _ => Vec::new(),
    };
    let w = ca
        .issue(identity, &hosts, 30, now)
        .unwrap()
        .write(dir, &file_stem(identity))
        .unwrap();
    TlsFiles {
        ca: ca.cert_path(),
        cert: w.cert,
        key: w.key,
    }
}

/// A node's listener on a free loopback port; returns the port and what each accepted
/// connection authenticated as.
async fn listen(
    files: TlsFiles,
    cluster: &str,
) -> (u16, tokio::sync::mpsc::Receiver<Authenticated>) {
    let tls =
        Arc::new(ServerTls::load(files, Identity::Node(1), cluster, SystemTime::now()).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut conns = incoming(
        listener,
        ListenerMode::Tls {
            tls,
            cluster: cluster.to_string(),
        },
        Limits::default(),
    );
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        while let Some(Ok(mut conn)) = conns.next().await {
            let _ = tx.send(conn.info().auth.clone()).await;
            // Echo one byte so the client knows the session is up.
            let mut b = [0u8; 1];
            if conn.read_exact(&mut b).await.is_ok() {
                let _ = conn.write_all(&b).await;
            }
        }
    });
    (port, rx)
}

async fn dial(tls: Arc<ClientTls>, host: &str, port: u16) -> std::io::Result<()> {
    let mut c = Connector::new(ClientMode::Tls(tls), Duration::from_secs(5));
    let uri: tonic::transport::Uri = format!("http://{host}:{port}").parse().unwrap();
    let conn = c.call(uri).await?;
    let mut io = conn.into_inner();
    io.write_all(b"x").await?;
    let mut b = [0u8; 1];
    io.read_exact(&mut b).await?;
    Ok(())
}

#[tokio::test]
async fn a_connection_carries_the_verified_identity() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let ca = Ca::init(&dir.path().join("pki"), "c1", now).unwrap();
    let mode = std::fs::metadata(dir.path().join("pki/ca-key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the CA key is private");
    let mode = std::fs::metadata(dir.path().join("pki"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let node = issue(&ca, &dir.path().join("pki"), &Identity::Node(1), now);
    let op = issue(
        &ca,
        &dir.path().join("pki"),
        &Identity::Operator("alice".into()),
        now,
    );
    let mode = std::fs::metadata(&op.key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "issued keys are private");

    let (port, mut seen) = listen(node.clone(), "c1").await;
    let client = Arc::new(ClientTls::load(op, None, now).unwrap());
    dial(client.clone(), "127.0.0.1", port).await.unwrap();
    assert_eq!(
        seen.recv().await.unwrap(),
        Authenticated::Identity(Identity::Operator("alice".into()))
    );
    // The server's name is verified: the node certificate names 127.0.0.1 and localhost.
    dial(client, "localhost", port).await.unwrap();
    seen.recv().await.unwrap();

    // A node dialling another node presents its own certificate.
    let peer = Arc::new(ClientTls::load(node, Some(Identity::Node(1)), now).unwrap());
    dial(peer, "127.0.0.1", port).await.unwrap();
    assert_eq!(
        seen.recv().await.unwrap(),
        Authenticated::Identity(Identity::Node(1))
    );
}

#[tokio::test]
async fn foreign_and_unusable_certificates_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let ca = Ca::init(&dir.path().join("a"), "c1", now).unwrap();
    let other = Ca::init(&dir.path().join("b"), "c1", now).unwrap();
    let node = issue(&ca, &dir.path().join("a"), &Identity::Node(1), now);
    let (port, mut seen) = listen(node, "c1").await;

    // Signed by another CA: the server refuses the handshake.
    let rogue = issue(
        &other,
        &dir.path().join("b"),
        &Identity::Operator("mallory".into()),
        now,
    );
    let rogue_as_ours = TlsFiles {
        ca: ca.cert_path(),
        ..rogue.clone()
    };
    assert!(matches!(
        ClientTls::load(rogue_as_ours, None, now),
        Err(TlsError::NotSignedByCa { .. })
    ));
    let rogue = Arc::new(ClientTls::load(rogue, None, now).unwrap());
    let err = dial(rogue, "127.0.0.1", port).await.unwrap_err();
    // The client itself does not trust the server (other CA) either.
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), seen.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_listener_needs_a_node_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let pki = dir.path().join("pki");
    let ca = Ca::init(&pki, "c1", now).unwrap();
    // A node started with an agent's certificate refuses to start.
    let agent = issue(&ca, &pki, &Identity::Agent("prod".into()), now);
    assert!(matches!(
        ServerTls::load(agent, Identity::Node(1), "c1", now),
        Err(TlsError::WrongIdentity { .. })
    ));
}

#[test]
fn bad_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let pki = dir.path().join("pki");
    let ca = Ca::init(&pki, "c1", now).unwrap();
    assert!(matches!(
        Ca::init(&pki, "c1", now),
        Err(TlsError::Exists { .. })
    ));
    let op = issue(&ca, &pki, &Identity::Operator("alice".into()), now);
    let other = issue(&ca, &pki, &Identity::Operator("bob".into()), now);

    // Missing file.
    let missing = TlsFiles {
        cert: pki.join("nope.pem"),
        ..op.clone()
    };
    let e = missing.load(now).unwrap_err();
    assert!(matches!(e, TlsError::Read { .. }));
    assert!(e.to_string().contains("nope.pem"), "{e}");

    // A key that is not the certificate's.
    let mismatch = TlsFiles {
        key: other.key.clone(),
        ..op.clone()
    };
    let e = mismatch.load(now).unwrap_err();
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
    assert!(e.to_string().contains("operator-bob-key.pem"), "{e}");

    // A CA file with no certificate in it.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = TlsFiles {
        ca: empty.clone(),
        ..op.clone()
    }
    .load(now)
    .unwrap_err();
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
    assert!(e.to_string().contains("empty.pem"), "{e}");

    // Expired, and not yet valid: the error names the identity and the dates.
    let long_ago = now - 400 * DAY;
    let expired = issue(
        &ca,
        &dir.path().join("old"),
        &Identity::Operator("carol".into()),
        long_ago,
    );
    let e = expired.load(now).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, TlsError::NotValidNow { .. }), "{msg}");
    assert!(
        msg.contains("operator/carol") && msg.contains(" to "),
        "{msg}"
    );
    let future = issue(
        &ca,
        &dir.path().join("new"),
        &Identity::Operator("dave".into()),
        now + 10 * DAY,
    );
    assert!(matches!(
        future.load(now),
        Err(TlsError::NotValidNow { .. })
    ));

    // Issuing: node certificates need hosts, clients take none, validity at least a day.
    assert!(ca.issue(&Identity::Node(2), &[], 30, now).is_err());
    assert!(ca
        .issue(&Identity::Agent("prod".into()), &["h".into()], 30, now)
        .is_err());
    assert!(ca
        .issue(&Identity::Operator("x".into()), &[], 0, now)
        .is_err());
}
