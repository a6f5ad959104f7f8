//! A minimal HTTP/1.1 server: request-head parsing, the router and the connection loop.
//!
//! The parser and the router are pure ([`parse_head`], [`route`]) so they are
//! tested without sockets. [`Server`] accepts connections on a blocking listener and serves
//! each on its own thread (at most [`MAX_CONNECTIONS`] at once), with keep-alive, read and
//! write timeouts and a [`MAX_HEAD`]-byte limit on request heads.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest accepted request head (request line and headers), in bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest request body read (and discarded); larger bodies get 413.
pub const MAX_BODY: u64 = 64 * 1024;
/// Most connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 256;
/// Most requests served on one keep-alive connection.
pub const MAX_REQUESTS_PER_CONNECTION: usize = 1000;
/// How long a connection may stay silent (idle, or mid-request) before it is closed.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing a response may block.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the router needs to know about the running service.
#[derive(Debug)]
pub struct App {
    /// The release version the service claims.
    pub version: String,
    /// `--never-ready`: `/healthz` always answers 503.
    pub never_ready: bool,
    /// `/healthz` answers 503 until this instant (`ready_after_ms` after start).
    pub ready_at: std::time::Instant,
    /// Fraction of `GET /` answered 500.
    pub error_rate: f64,
    /// Delay added to every `GET /`.
    pub latency: Duration,
    /// Extra line in the `GET /` body.
    pub message: Option<String>,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, as sent (methods are case-sensitive).
    pub method: String,
    /// The path, without query string or fragment.
    pub path: String,
    /// `true` for HTTP/1.1, `false` for HTTP/1.0.
    pub http11: bool,
    /// Whether the client wants the connection kept open after the response.
    pub keep_alive: bool,
    /// The body length announced by `Content-Length` (0 when absent).
    pub content_length: u64,
}

/// A response to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Extra headers (besides Content-Type, Content-Length, Connection).
    pub headers: Vec<(&'static str, String)>,
    /// The body (sent unless the request was HEAD).
    pub body: String,
    /// Sleep this long before answering (`latency_ms`).
    pub delay: Duration,
    /// Whether the connection is closed after this response.
    pub close: bool,
    /// HEAD request: send the headers only.
    pub head_only: bool,
}

impl Response {
    /// A text response that keeps the connection open.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
            close: false,
            head_only: false,
        }
    }

    /// A text response after which the connection is closed (used for protocol errors).
    pub fn closing(status: u16, body: impl Into<String>) -> Self {
        Response {
            close: true,
            ..Response::text(status, body)
        }
    }

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: {}\r\n",
            self.status,
            reason(self.status),
            self.body.len(),
            if self.close { "close" } else { "keep-alive" },
        );
        for (name, value) in &self.headers {
            head.push_str(name);
            head.push_str(": ");
            head.push_str(value);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        if !self.head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Finds the end of a request head: the index just past the blank line (`\r\n\r\n`, or a
/// bare `\n\n`), if `buf` contains one.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

/// Parses a complete request head (up to and including the blank line). Errors are the
/// response to send, which closes the connection.
pub fn parse_head(head: &[u8]) -> Result<Request, Response> {
    let bad = |why: &str| Response::closing(400, format!("bad request: {why}\n"));
    let text = std::str::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("malformed request line"));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
        return Err(bad("malformed method"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.starts_with("HTTP/") => {
            return Err(Response::closing(505, "only HTTP/1.0 and HTTP/1.1\n"))
        }
        _ => return Err(bad("malformed HTTP version")),
    };
    let path = request_path(target).ok_or_else(|| bad("malformed request target"))?;

    let mut connection_close = !http11;
    let mut content_length: Option<u64> = None;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(bad("malformed header line"));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace() || b < 0x21) {
            return Err(bad("malformed header name"));
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    connection_close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && !http11 {
                    connection_close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .map_err(|_| bad("malformed Content-Length"))?;
            if content_length.is_some_and(|old| old != n) {
                return Err(bad("conflicting Content-Length headers"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Response::closing(
                501,
                "Transfer-Encoding is not supported\n",
            ));
        }
    }
    Ok(Request {
        method: method.to_string(),
        path,
        http11,
        keep_alive: !connection_close,
        content_length: content_length.unwrap_or(0),
    })
}

/// The path of a request target: origin form (`/a?b`) or absolute form
/// (`http://host/a?b`), without query or fragment; `*` is kept as is.
fn request_path(target: &str) -> Option<String> {
    let rest = if target.starts_with('/') || target == "*" {
        target
    } else {
        let after = target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("https://"))?;
        match after.find('/') {
            Some(i) => &after[i..],
            None => "/",
        }
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let path = &rest[..end];
    if path.is_empty() || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return None;
    }
    Some(path.to_string())
}

/// Routes one request. `roll` yields a uniform number in `[0, 1)` for the error injection.
pub fn route(req: &Request, app: &App, roll: &mut dyn FnMut() -> f64) -> Response {
    let head = req.method == "HEAD";
    let get = req.method == "GET" || head;
    let mut resp = match req.path.as_str() {
        "/" | "/version" | "/healthz" if !get => {
            let mut r = Response::text(405, "method not allowed\n");
            r.headers.push(("Allow", "GET, HEAD".into()));
            r
        }
        "/" => {
            let mut r = if app.error_rate > 0.0 && roll() < app.error_rate {
                Response::text(500, "injected error (error_rate)\n")
            } else {
                let mut body = format!("demo-service {}\n", app.version);
                if let Some(message) = &app.message {
                    body.push_str(message);
                    body.push('\n');
                }
                Response::text(200, body)
            };
            r.delay = app.latency;
            r
        }
        "/version" => Response::text(200, format!("{}\n", app.version)),
        "/healthz" if app.never_ready => Response::text(503, "not ready (--never-ready)\n"),
        "/healthz" if std::time::Instant::now() < app.ready_at => {
            Response::text(503, "not ready yet (ready_after_ms)\n")
        }
        "/healthz" => Response::text(200, "ok\n"),
        _ => Response::text(404, "not found\n"),
    };
    resp.headers.push(("X-Demo-Version", app.version.clone()));
    resp.head_only = head;
    resp.close = !req.keep_alive;
    resp
}

/// A xorshift64* generator state shared by all connections, seeded from the clock and pid.
struct Rng(AtomicU64);

impl Rng {
    fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = splitmix(nanos ^ (u64::from(std::process::id()) << 32));
        Rng(AtomicU64::new(if seed == 0 { 0x9e37_79b9 } else { seed }))
    }

    /// A uniform number in `[0, 1)`.
    fn next_f64(&self) -> f64 {
        let step = |mut x: u64| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x
        };
        let prev = match self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
        {
            Ok(x) | Err(x) => x,
        };
        let out = step(prev).wrapping_mul(0x2545_f491_4f6c_dd1d);
        (out >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A bound listener and the app it serves.
pub struct Server {
    listener: TcpListener,
    app: Arc<App>,
    rng: Arc<Rng>,
    active: Arc<AtomicUsize>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port).
    pub fn bind(addr: SocketAddr, app: App) -> io::Result<Server> {
        Ok(Server {
            listener: TcpListener::bind(addr)?,
            app: Arc::new(app),
            rng: Arc::new(Rng::new()),
            active: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts and serves connections forever.
    pub fn serve(self) -> ! {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("demo-service: accept failed: {e}");
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if self.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                self.active.fetch_sub(1, Ordering::AcqRel);
                reject_busy(stream);
                continue;
            }
            let (app, rng, active) = (self.app.clone(), self.rng.clone(), self.active.clone());
            let spawned = thread::Builder::new().name("conn".into()).spawn(move || {
                // Failures here are the client's (timeouts, resets): nothing to report.
                let _ = serve_connection(stream, &app, &rng);
                active.fetch_sub(1, Ordering::AcqRel);
            });
            if let Err(e) = spawned {
                // The closure (and the stream) were dropped; undo the count.
                self.active.fetch_sub(1, Ordering::AcqRel);
                eprintln!("demo-service: cannot spawn a connection thread: {e}");
            }
        }
    }
}

fn reject_busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let _ = stream.write_all(&Response::closing(503, "too many connections\n").to_bytes());
}

/// Serves requests on one connection until it closes, errs, times out or asks to close.
fn serve_connection(mut stream: TcpStream, app: &App, rng: &Rng) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    for served in 1..=MAX_REQUESTS_PER_CONNECTION {
        // Read until a complete head is buffered.
        let end = loop {
            if let Some(end) = head_end(&buf) {
                break end;
            }
            if buf.len() >= MAX_HEAD {
                let resp = Response::closing(431, "request head too large\n");
                return finish(stream, &resp);
            }
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Ok(()); // closed by the client (between requests, or mid-head)
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        if end > MAX_HEAD {
            let resp = Response::closing(431, "request head too large\n");
            return finish(stream, &resp);
        }
        let mut resp = match parse_head(&buf[..end]) {
            Ok(req) => {
                if req.content_length > MAX_BODY {
                    Response::closing(413, "request body too large\n")
                } else {
                    // Discard the body: the buffered part first, then the rest from the socket.
                    let buffered = (buf.len() - end) as u64;
                    let from_buf = buffered.min(req.content_length) as usize;
                    buf.drain(..end + from_buf);
                    let rest = req.content_length - from_buf as u64;
                    if rest > 0 {
                        let copied = io::copy(&mut (&mut stream).take(rest), &mut io::sink())?;
                        if copied < rest {
                            return Ok(()); // closed mid-body
                        }
                    }
                    route(&req, app, &mut || rng.next_f64())
                }
            }
            Err(resp) => resp,
        };
        if served == MAX_REQUESTS_PER_CONNECTION {
            resp.close = true;
        }
        if !resp.delay.is_zero() {
            thread::sleep(resp.delay);
        }
        if resp.close {
            return finish(stream, &resp);
        }
        stream.write_all(&resp.to_bytes())?;
    }
    Ok(())
}

/// Writes a last response and closes the connection gracefully: shut down the sending side,
/// then discard what the client still sends (briefly, and boundedly), so that unread request
/// bytes do not turn the close into a reset that would destroy the response in flight.
fn finish(mut stream: TcpStream, resp: &Response) -> io::Result<()> {
    stream.write_all(&resp.to_bytes())?;
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Write)?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    let _ = io::copy(&mut (&mut stream).take(MAX_BODY), &mut io::sink());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> App {
        App {
            version: "1.2.3".into(),
            never_ready: false,
            ready_at: std::time::Instant::now(),
            error_rate: 0.0,
            latency: Duration::ZERO,
            message: None,
        }
    }

    /// What a connection answers to one complete request head.
    fn respond(head: &[u8], app: &App, roll: &mut dyn FnMut() -> f64) -> Response {
        match parse_head(head) {
            Ok(req) => route(&req, app, roll),
            Err(resp) => resp,
        }
    }

    fn ask(app: &App, raw: &str) -> Response {
        respond(raw.as_bytes(), app, &mut || 0.5)
    }

    fn get(app: &App, path: &str) -> Response {
        ask(app, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"))
    }

    #[test]
    fn endpoints() {
        let a = app();
        let r = get(&a, "/");
        assert_eq!((r.status, r.body.as_str()), (200, "demo-service 1.2.3\n"));
        assert!(!r.close);
        let r = get(&a, "/version");
        assert_eq!((r.status, r.body.as_str()), (200, "1.2.3\n"));
        let r = get(&a, "/healthz?probe=1");
        assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
        assert_eq!(get(&a, "/nope").status, 404);
        assert_eq!(get(&a, "/healthz/").status, 404);
        assert_eq!(get(&a, "http://example.com/version").status, 200);
        assert_eq!(get(&a, "http://example.com").body, "demo-service 1.2.3\n");
        let r = ask(&a, "POST /healthz HTTP/1.1\r\n\r\n");
        assert_eq!(r.status, 405);
        assert!(r.headers.contains(&("Allow", "GET, HEAD".into())));
        assert_eq!(ask(&a, "DELETE /other HTTP/1.1\r\n\r\n").status, 404);
    }

    #[test]
    fn head_requests_send_no_body() {
        let r = ask(&app(), "HEAD /version HTTP/1.1\r\n\r\n");
        assert_eq!(r.status, 200);
        let wire = String::from_utf8(r.to_bytes()).unwrap();
        assert!(wire.contains("Content-Length: 6\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\n"), "{wire}");
    }

    #[test]
    fn message_never_ready_and_latency() {
        let a = App {
            never_ready: true,
            message: Some("hello there".into()),
            latency: Duration::from_millis(30),
            ..app()
        };
        let r = get(&a, "/");
        assert_eq!(r.body, "demo-service 1.2.3\nhello there\n");
        assert_eq!(r.delay, Duration::from_millis(30));
        assert_eq!(get(&a, "/version").delay, Duration::ZERO);
        let r = get(&a, "/healthz");
        assert_eq!(r.status, 503);
    }

    #[test]
    fn error_rate_uses_the_roll() {
        let a = App {
            error_rate: 0.3,
            ..app()
        };
        assert_eq!(
            respond(b"GET / HTTP/1.1\r\n\r\n", &a, &mut || 0.29).status,
            500
        );
        assert_eq!(
            respond(b"GET / HTTP/1.1\r\n\r\n", &a, &mut || 0.3).status,
            200
        );
        // Only `/` fails.
        assert_eq!(
            respond(b"GET /healthz HTTP/1.1\r\n\r\n", &a, &mut || 0.0).status,
            200
        );
        let all = App {
            error_rate: 1.0,
            ..app()
        };
        assert_eq!(
            respond(b"GET / HTTP/1.1\r\n\r\n", &all, &mut || 0.999).status,
            500
        );
    }

    #[test]
    fn rng_is_uniform_enough() {
        let rng = Rng::new();
        let n = 20_000;
        let mut below = 0;
        for _ in 0..n {
            let x = rng.next_f64();
            assert!((0.0..1.0).contains(&x));
            if x < 0.25 {
                below += 1;
            }
        }
        let frac = below as f64 / n as f64;
        assert!((0.22..0.28).contains(&frac), "{frac}");
    }

    #[test]
    fn connection_handling() {
        let a = app();
        assert!(ask(&a, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n").close);
        assert!(
            ask(
                &a,
                "GET / HTTP/1.1\r\nconnection: Keep-Alive, CLOSE\r\n\r\n"
            )
            .close
        );
        assert!(ask(&a, "GET / HTTP/1.0\r\n\r\n").close);
        assert!(!ask(&a, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").close);
        let wire = String::from_utf8(ask(&a, "GET / HTTP/1.0\n\n").to_bytes()).unwrap();
        assert!(wire.starts_with("HTTP/1.1 200 OK\r\n"), "{wire}");
        assert!(wire.contains("Connection: close\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\ndemo-service 1.2.3\n"), "{wire}");
    }

    #[test]
    fn bad_requests_get_400_and_close() {
        let a = app();
        for raw in [
            "\r\n\r\n",
            "GET\r\n\r\n",
            "GET /\r\n\r\n",
            "GET / HTTP/1.1 extra\r\n\r\n",
            "GET  / HTTP/1.1\r\n\r\n",
            "G@T / HTTP/1.1\r\n\r\n",
            "GET relative HTTP/1.1\r\n\r\n",
            "GET /a\x01b HTTP/1.1\r\n\r\n",
            "GET / FTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        ] {
            let r = ask(&a, raw);
            assert_eq!(r.status, 400, "{raw:?}");
            assert!(r.close, "{raw:?}");
        }
        assert_eq!(
            respond(b"GET /\xff HTTP/1.1\r\n\r\n", &a, &mut || 0.5).status,
            400
        );
        assert_eq!(ask(&a, "GET / HTTP/2.0\r\n\r\n").status, 505);
        let r = ask(&a, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!((r.status, r.close), (501, true));
    }

    #[test]
    fn head_end_finds_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(head_end(b""), None);
    }

    fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(raw).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_on_port_zero() {
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), app()).unwrap();
        let addr = server.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        thread::spawn(move || server.serve());

        // Keep-alive: two requests (the first with a body) on one connection, the second closes.
        let out = exchange(
            addr,
            b"POST /nope HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /version HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert!(out.starts_with("HTTP/1.1 404 Not Found\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\n1.2.3\n"), "{out}");
        assert_eq!(out.matches("HTTP/1.1 ").count(), 2, "{out}");

        // Oversized head: 431, then close.
        let mut big = b"GET / HTTP/1.1\r\nX-Pad: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        big.extend_from_slice(b"\r\n\r\n");
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(&big);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");

        // Garbage: 400.
        let out = exchange(addr, b"\x00\x01\x02\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 400 "), "{out}");

        // A client that closes mid-head does not disturb the server.
        drop(TcpStream::connect(addr).unwrap());
        let out = exchange(addr, b"GET /healthz HTTP/1.0\r\n\r\n");
        assert!(out.ends_with("\r\n\r\nok\n"), "{out}");
    }
}
