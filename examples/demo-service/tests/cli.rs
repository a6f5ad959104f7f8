//! Black-box tests of the `demo-service` binary: exit codes, `starts_file`, the endpoints.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_demo-service");

/// A fresh scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "demo-service-test-{name}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn config(&self, text: &str) -> PathBuf {
        let path = self.0.join("config.yml");
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the child on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.get(9..12)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

fn start(config: &Path, version: &str, extra: &[&str]) -> (Running, u16) {
    let text = std::fs::read_to_string(config).unwrap();
    let port: u16 = text
        .lines()
        .find_map(|l| l.strip_prefix("port: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let child = Command::new(BIN)
        .args(["--config", config.to_str().unwrap(), "--version", version])
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(port, "/version").is_none() {
        assert!(Instant::now() < deadline, "demo-service did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (running, port)
}

#[test]
fn usage_and_config_errors_exit_2() {
    let dir = Scratch::new("usage");
    let out = run(&["--version", "1.0.0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));

    let bad = dir.config("port: 1\nerror_rate: lots\n");
    let out = run(&["--config", bad.to_str().unwrap(), "--version", "1.0.0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`error_rate`"), "{err}");

    let missing = dir.0.join("missing.yml");
    let out = run(&["--config", missing.to_str().unwrap(), "--version", "1.0.0"]);
    assert_eq!(out.status.code(), Some(2));

    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn busy_port_exits_3_naming_the_port() {
    let dir = Scratch::new("busy");
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let config = dir.config(&format!("port: {port}\nstarts_file: starts\n"));
    let out = run(&["--config", config.to_str().unwrap(), "--version", "1.0.0"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("port {port}")), "{err}");
    // A failed start is not a start.
    assert!(!dir.0.join("starts").exists());
}

#[test]
fn serves_and_records_starts() {
    let dir = Scratch::new("serve");
    let port = free_port();
    let config = dir.config(&format!(
        "# demo\nport: {port}\nstarts_file: starts\nmessage: hi\nother:\n  nested: 1\n"
    ));
    {
        let (_run, port) = start(&config, "1.0.0", &[]);
        assert_eq!(
            get(port, "/"),
            Some((200, "demo-service 1.0.0\nhi\n".into()))
        );
        assert_eq!(get(port, "/version"), Some((200, "1.0.0\n".into())));
        assert_eq!(get(port, "/healthz"), Some((200, "ok\n".into())));
        assert_eq!(get(port, "/missing").map(|r| r.0), Some(404));
    }
    let (child, port) = start(&config, "2.0.0", &["--never-ready"]);
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(503));
    let pid = child.0.id();
    let starts = std::fs::read_to_string(dir.0.join("starts")).unwrap();
    let lines: Vec<&str> = starts.lines().collect();
    assert_eq!(lines.len(), 2, "{starts}");
    assert!(lines[0].starts_with("1.0.0 "), "{starts}");
    assert_eq!(lines[1], format!("2.0.0 {pid}"));
}

#[test]
fn error_rate_one_always_fails() {
    let dir = Scratch::new("errors");
    let port = free_port();
    let config = dir.config(&format!("port: {port}\nerror_rate: 1.0\nlatency_ms: 50\n"));
    let (_run, port) = start(&config, "1.1.0", &[]);
    let t = Instant::now();
    assert_eq!(get(port, "/").map(|r| r.0), Some(500));
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
}

#[test]
fn sigterm_and_sigint_exit_0_promptly() {
    for signal in ["-TERM", "-INT"] {
        let dir = Scratch::new("signal");
        let config = dir.config(&format!("port: {}\n", free_port()));
        let (mut running, _port) = start(&config, "1.0.0", &[]);
        let pid = running.0.id().to_string();
        let killed = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = running.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "{signal}: still running");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(0), "{signal}: {status:?}");
    }
}
