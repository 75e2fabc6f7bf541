//! A real Prometheus (`/usr/bin/prometheus`) for the dashboard tests: started on a free port,
//! scraping one target every second, asked through its HTTP API; killed when dropped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Prometheus {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_prometheus(dir: &Path, target: SocketAddr) -> Prometheus {
    let bin = Path::new("/usr/bin/prometheus");
    assert!(
        bin.exists(),
        "/usr/bin/prometheus missing: install the Debian package `prometheus` (scripts/test.sh does)"
    );
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: fleetbench-controller\n    scrape_interval: 1s\n    \
             static_configs:\n      - targets: [\"{target}\"]\n"
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", fleetbench_testkit::free_port())
        .parse()
        .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let p = Prometheus { child, addr };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = http_get(addr, "/-/ready") {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// HTTP/1.0 GET (the server closes the connection and sends no chunked encoding).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs a query; returns the `data.result` array.
pub fn query(prom: SocketAddr, expr: &str, range: Option<(f64, f64)>) -> Vec<Value> {
    let path = match range {
        Some((start, end)) => format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step=1",
            encode(expr)
        ),
        None => format!("/api/v1/query?query={}", encode(expr)),
    };
    let (status, body) = http_get(prom, &path).expect("query prometheus");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(status, 200, "{expr}: {body}");
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

pub fn has_finite_value(result: &[Value]) -> bool {
    let finite = |p: &Value| {
        p[1].as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    };
    result.iter().any(|series| {
        series["value"]
            .as_array()
            .is_some_and(|_| finite(&series["value"]))
            || series["values"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(finite))
    })
}

pub fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Polls an instant query until `done` holds for its result (or panics after `timeout`).
pub async fn wait_query(
    prom: SocketAddr,
    expr: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let r = query(prom, expr, None);
        if done(&r) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {expr} -> {r:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
