//! A local HTTP(S) server with a CA generated on the spot, for `hubctl dev registry`,
//! `hubctl demo --https` and tests: [`LocalCa`] makes the CA and server certificates,
//! [`LocalServer`] answers requests with a handler over TLS (or plain TCP) and counts the
//! connections it accepted.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The server configuration [`LocalCa::server_config`] makes.
pub use rustls::ServerConfig;

/// Largest request body the server reads.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Why a CA or a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LocalCaError {
    /// rcgen refused the parameters (e.g. a malformed name).
    #[error("cannot generate the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("cannot use the certificate: {0}")]
    Tls(#[from] rustls::Error),
}

/// A CA generated in memory (ECDSA P-256); its key never leaves the process.
pub struct LocalCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa").finish_non_exhaustive()
    }
}

impl LocalCa {
    /// A new CA named `common_name`.
    pub fn generate(common_name: &str) -> Result<Self, LocalCaError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate as PEM: what clients trust (`--ca-file`).
    pub fn ca_pem(&self) -> &str {
        &self.pem
    }

    /// A rustls server configuration with a new certificate for `names` (DNS names or IP
    /// addresses) signed by this CA.
    pub fn server_config(&self, names: &[&str]) -> Result<Arc<rustls::ServerConfig>, LocalCaError> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A request as the handler sees it.
#[derive(Debug)]
pub struct Request {
    /// The method.
    pub method: hyper::Method,
    /// Path and query.
    pub path: String,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The body (at most 1 MiB; a larger one is answered 413 without calling the handler).
    pub body: Bytes,
}

/// The handler's answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body (to `HEAD`, only its length is sent).
    pub body: Bytes,
}

impl Reply {
    /// `status` with a text body.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: Bytes::from(body.into()),
        }
    }

    /// A redirect to `location`.
    pub fn redirect(status: u16, location: &str) -> Self {
        Self {
            status,
            headers: vec![("location".into(), location.into())],
            body: Bytes::new(),
        }
    }
}

/// What answers requests.
pub type Handler = Arc<dyn Fn(Request) -> Reply + Send + Sync>;

/// A running server; dropping it stops accepting (connections being served finish).
pub struct LocalServer {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for LocalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl LocalServer {
    /// Serves `listener` with `handler`, over TLS with `tls` or plain HTTP without. HTTP/1.1
    /// with keep-alive. Must be called inside a tokio runtime.
    pub fn start(
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        handler: Handler,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicU64::new(0));
        let counter = connections.clone();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let accept = tokio::spawn(async move {
            loop {
                let tcp = match listener.accept().await {
                    Ok((tcp, _)) => tcp,
                    Err(_) => {
                        // E.g. out of file descriptors: give the system a moment.
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = tcp.set_nodelay(true);
                let handler = handler.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        Some(acceptor) => {
                            // A failed handshake (e.g. a client that does not trust the CA)
                            // just ends the connection.
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                serve_connection(TokioIo::new(stream), handler).await;
                            }
                        }
                        None => serve_connection(TokioIo::new(tcp), handler).await,
                    }
                });
            }
        });
        Ok(Self {
            addr,
            connections,
            accept,
        })
    }

    /// An HTTPS server on a free port of 127.0.0.1 with a certificate of `ca` for `127.0.0.1`
    /// and `localhost`.
    pub async fn loopback_https(ca: &LocalCa, handler: Handler) -> std::io::Result<Self> {
        let tls = ca
            .server_config(&["127.0.0.1", "localhost"])
            .map_err(std::io::Error::other)?;
        Self::start(TcpListener::bind("127.0.0.1:0").await?, Some(tls), handler)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far (whether or not their TLS handshake succeeded).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve_connection<I>(io: TokioIo<I>, handler: Handler)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let handler = handler.clone();
        async move {
            let (parts, body) = request.into_parts();
            let reply = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
                Ok(body) => {
                    let reply = handler(Request {
                        method: parts.method,
                        path: parts
                            .uri
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_else(|| "/".into()),
                        headers: parts.headers,
                        body: body.to_bytes(),
                    });
                    build_reply(reply)
                }
                Err(_) => build_reply(Reply::text(413, "request body too large")),
            };
            Ok::<_, Infallible>(reply)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}

/// The hyper response of a reply; hyper sets `Content-Length` and sends no body to `HEAD`.
fn build_reply(reply: Reply) -> hyper::Response<Full<Bytes>> {
    let mut builder = hyper::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder.body(Full::new(reply.body)).unwrap_or_else(|_| {
        // Only a handler's malformed status or header gets here.
        let mut r = hyper::Response::new(Full::new(Bytes::from_static(b"bad reply")));
        *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}
