//! A real Prometheus for black-box tests (issue 52 item 3): Debian's `prometheus` binary,
//! started by the test on loopback with its own configuration and storage directory (never
//! the package's service), scraping given targets every second, and its HTTP query API.
//!
//! A test that needs it calls [`Prometheus::binary`]: without the binary it is skipped with a
//! loud message, unless `HUB_REQUIRE_PROMETHEUS` is set (CI sets it: scripts/test.sh), which
//! makes a missing binary a failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, poll_until, CONVERGE_TIMEOUT};

/// The variable that makes a missing `prometheus` binary fail the test instead of skipping it.
pub const REQUIRE_VAR: &str = "HUB_REQUIRE_PROMETHEUS";

/// A `prometheus` process the test started; killed on drop.
pub struct Prometheus {
    child: Child,
    /// The port of its web API (on 127.0.0.1).
    pub port: u16,
    log: PathBuf,
}

/// The `data` of a query answer.
#[derive(serde::Deserialize)]
struct QueryAnswer {
    status: String,
    data: Option<QueryData>,
}

/// A vector or a scalar result (the tests ask for nothing else).
#[derive(serde::Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum QueryData {
    Vector(Vec<Series>),
    Scalar((f64, String)),
}

/// One series of a vector.
#[derive(serde::Deserialize)]
struct Series {
    value: (f64, String),
}

impl Prometheus {
    /// The `prometheus` binary on `PATH` (Debian's package puts it in /usr/bin). `None`, after
    /// a loud message on stderr, when it is absent and [`REQUIRE_VAR`] is not set; panics when
    /// it is absent and the variable is set.
    pub fn binary(test: &str) -> Option<PathBuf> {
        let found = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("prometheus"))
                .find(|p| p.is_file())
        });
        if found.is_none() {
            assert!(
                std::env::var_os(REQUIRE_VAR).is_none(),
                "{test}: {REQUIRE_VAR} is set but no prometheus binary is on PATH \
                 (scripts/deps.sh installs Debian's prometheus package)"
            );
            // Straight to stderr: the test harness captures `eprintln!` of a passing test.
            let _ = writeln!(
                std::io::stderr(),
                "\n=====================================================================\n\
                 SKIPPED {test}: no prometheus binary on PATH.\n\
                 Install it (apt-get install prometheus, or scripts/deps.sh), or set\n\
                 {REQUIRE_VAR}=1 to make this a failure (CI does).\n\
                 =====================================================================\n"
            );
        }
        found
    }

    /// Starts `binary` with its files under `dir`, scraping `targets` (`host:port`, path
    /// `/metrics`) as job `job` every second; waits until its API answers.
    pub fn start(binary: &Path, dir: &Path, job: &str, targets: &[String]) -> Prometheus {
        let dir = dir.join("prometheus");
        std::fs::create_dir_all(dir.join("data")).expect("prometheus dir");
        let config = dir.join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).expect("prometheus log");
        let err = out.try_clone().expect("prometheus log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let mut p = Prometheus { child, port, log };
        poll_until(CONVERGE_TIMEOUT, || {
            let (status, _) = get(port, "/-/ready")?;
            (status == 200).then_some(())
        })
        .unwrap_or_else(|| {
            let exited = p.child.try_wait().ok().flatten();
            panic!(
                "prometheus never became ready (exited: {exited:?}):\n{}",
                p.log_tail(30)
            )
        });
        p
    }

    /// Its address, as a MetricTemplate's `provider.address`.
    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The first sample of instant query `query` now: `None` when the answer is empty, not a
    /// number (NaN), or the call failed.
    pub fn query(&self, query: &str) -> Option<f64> {
        let (status, body) = get(self.port, &format!("/api/v1/query?query={}", encode(query)))?;
        if status != 200 {
            return None;
        }
        let answer: QueryAnswer = serde_json::from_str(&body).ok()?;
        if answer.status != "success" {
            return None;
        }
        let text = match answer.data? {
            QueryData::Vector(series) => series.into_iter().next()?.value.1,
            QueryData::Scalar((_, text)) => text,
        };
        text.parse::<f64>().ok().filter(|v| v.is_finite())
    }

    /// Waits until every target of `job` was scraped successfully (`up == 1`).
    pub fn wait_scraping(&self, job: &str) {
        poll_until(CONVERGE_TIMEOUT, || {
            (self.query(&format!("min(up{{job=\"{job}\"}})")) == Some(1.0)).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "prometheus never scraped {job}: up = {:?}\n{}",
                self.query(&format!("up{{job=\"{job}\"}}")),
                self.log_tail(30)
            )
        });
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `s` percent-encoded for a URL's query (everything but RFC 3986's unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` on `127.0.0.1:port` over HTTP/1.1 (a body with a length or chunked): the status
/// and body, `None` when the call fails.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let status = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 || h == "\r\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if n == 0 {
                break;
            }
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).ok()?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        r.read_to_end(&mut body).ok()?;
    }
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            super::encode("sum(up{job=\"a b\"})[1m]"),
            "sum%28up%7Bjob%3D%22a%20b%22%7D%29%5B1m%5D"
        );
    }
}
