//! The client side: the connector every tonic channel of the hub dials through (peers,
//! forwarded writes, `hubctl`, agents, tools). Over TLS it presents the party's certificate,
//! verifies the server's against the cluster CA and the dialled name, and accepts only a
//! node of the same cluster as the server: an agent's or operator's certificate, even one
//! signed by the same CA, cannot pose as a node.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::identity::Identity;
use crate::material::{certificate_identity, Material, TlsFiles};
use crate::server::load_as_any;
use crate::stream::MaybeTls;
use crate::{arc_provider, TlsError, ALPN_H2, PROTOCOLS};

/// Accepts a server certificate only if it is valid for the name and names a node of the
/// cluster.
#[derive(Debug)]
struct NodeVerifier {
    inner: Arc<WebPkiServerVerifier>,
    /// `None`: a node of any cluster the CA signed for (a client without its own
    /// certificate does not know the cluster id).
    cluster: Option<String>,
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified =
            self.inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?;
        match certificate_identity(end_entity) {
            Ok((id, _))
                if self.cluster.as_ref().is_none_or(|c| *c == id.cluster)
                    && matches!(id.identity, Identity::Node(_)) =>
            {
                Ok(verified)
            }
            Ok((id, _)) => Err(rustls::Error::General(format!(
                "the server's certificate is for {id}, not a hub node{}",
                self.cluster
                    .as_ref()
                    .map(|c| format!(" of cluster {c:?}"))
                    .unwrap_or_default()
            ))),
            Err(e) => Err(rustls::Error::General(format!(
                "the server's certificate {e}"
            ))),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn client_config(
    roots: Arc<rustls::RootCertStore>,
    cluster: Option<String>,
    certified: Option<&rustls::sign::CertifiedKey>,
) -> Result<ClientConfig, TlsError> {
    let inner = WebPkiServerVerifier::builder_with_provider(roots, arc_provider())
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let verifier = Arc::new(NodeVerifier { inner, cluster });
    let builder = ClientConfig::builder_with_provider(arc_provider())
        .with_protocol_versions(PROTOCOLS)
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut cfg = match certified {
        Some(c) => builder
            .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(c.clone()))),
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(cfg)
}

fn party_config(m: &Material) -> Result<ClientConfig, TlsError> {
    client_config(
        m.roots.clone(),
        Some(m.identity.cluster.clone()),
        Some(&m.certified),
    )
}

/// A TLS client without a certificate of its own: it verifies the node it dials against the
/// CA in `ca` but is nobody to the hub (every method answers UNAUTHENTICATED). For tools and
/// tests that show what an unidentified caller gets.
pub fn anonymous(ca: &std::path::Path) -> Result<ClientMode, TlsError> {
    let roots = crate::material::load_roots(ca)?;
    Ok(ClientMode::Anonymous(Arc::new(client_config(
        roots, None, None,
    )?)))
}

/// A party's client TLS, reloadable.
pub struct ClientTls {
    files: TlsFiles,
    expected: Option<Identity>,
    current: RwLock<(Arc<ClientConfig>, Material)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &self.files)
            .field("identity", &self.expected)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Loads `files`; with `expected`, the certificate must name that identity.
    pub fn load(
        files: TlsFiles,
        expected: Option<Identity>,
        now: SystemTime,
    ) -> Result<ClientTls, TlsError> {
        let m = load_as_any(&files, expected.as_ref(), None, now)?;
        let cfg = party_config(&m)?;
        Ok(ClientTls {
            files,
            expected,
            current: RwLock::new((Arc::new(cfg), m)),
        })
    }

    /// Re-reads the files (same identity and cluster); on error the current ones stay. New
    /// connections use the new certificate; open ones keep theirs.
    pub fn reload(&self, now: SystemTime) -> Result<Material, TlsError> {
        let old = self.material();
        let expected = self
            .expected
            .clone()
            .unwrap_or_else(|| old.identity.identity.clone());
        let m = load_as_any(
            &self.files,
            Some(&expected),
            Some(&old.identity.cluster),
            now,
        )?;
        let cfg = party_config(&m)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (Arc::new(cfg), m.clone());
        Ok(m)
    }

    /// The material in use.
    pub fn material(&self) -> Material {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    fn config(&self) -> Arc<ClientConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }
}

/// How a client dials.
#[derive(Debug, Clone)]
pub enum ClientMode {
    /// Plaintext (a node or tool run with `--insecure`).
    Plaintext,
    /// TLS with the party's certificate.
    Tls(Arc<ClientTls>),
    /// TLS without a certificate ([`anonymous`]).
    Anonymous(Arc<ClientConfig>),
}

/// A tower connector for tonic: TCP (no Nagle), then TLS in [`ClientMode::Tls`], within a
/// deadline.
#[derive(Debug, Clone)]
pub struct Connector {
    mode: ClientMode,
    timeout: Duration,
}

/// A dialled connection.
pub type ClientConn = TokioIo<MaybeTls<tokio_rustls::client::TlsStream<TcpStream>>>;

impl Connector {
    /// A connector in `mode` whose TCP connect and handshake take at most `timeout`.
    pub fn new(mode: ClientMode, timeout: Duration) -> Self {
        Self { mode, timeout }
    }

    /// Who this connector's certificate names; `None` without one (plaintext, or
    /// server-authenticated TLS only).
    pub fn identity(&self) -> Option<Identity> {
        match &self.mode {
            ClientMode::Tls(tls) => Some(tls.material().identity.identity),
            _ => None,
        }
    }

    /// A lazily connecting channel to `addr` (`host:port`), configured by `endpoint`.
    pub fn channel_lazy(
        &self,
        addr: &str,
        endpoint: impl FnOnce(Endpoint) -> Endpoint,
    ) -> Result<Channel, tonic::transport::Error> {
        let ep = endpoint(Endpoint::from_shared(format!("http://{addr}"))?);
        Ok(ep.connect_with_connector_lazy(self.clone()))
    }

    /// A channel to `addr`, connected now.
    pub async fn channel(
        &self,
        addr: &str,
        endpoint: impl FnOnce(Endpoint) -> Endpoint,
    ) -> Result<Channel, tonic::transport::Error> {
        let ep = endpoint(Endpoint::from_shared(format!("http://{addr}"))?);
        ep.connect_with_connector(self.clone()).await
    }
}

async fn dial(mode: ClientMode, uri: Uri) -> io::Result<ClientConn> {
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host in the address"))?;
    // `[::1]` in a URI; the bare address for connecting and for the server name.
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(80);
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    let config = match mode {
        ClientMode::Plaintext => return Ok(TokioIo::new(MaybeTls::Plain(tcp))),
        ClientMode::Tls(tls) => tls.config(),
        ClientMode::Anonymous(config) => config,
    };
    let name = ServerName::try_from(host.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    Ok(TokioIo::new(MaybeTls::Tls(Box::new(tls))))
}

impl tower::Service<Uri> for Connector {
    type Response = ClientConn;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<ClientConn>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (mode, timeout) = (self.mode.clone(), self.timeout);
        Box::pin(async move {
            let target = uri.to_string();
            match tokio::time::timeout(timeout, dial(mode, uri)).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {target} timed out after {timeout:?}"),
                )),
            }
        })
    }
}
