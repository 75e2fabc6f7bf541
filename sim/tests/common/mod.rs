//! Starts the real `fleetbench-sim` binary and talks to it with a plain blocking HTTP/1.1
//! client, so timings are measured where the bytes arrive.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Sim {
    child: Child,
    pub port: u16,
    stderr: Arc<Mutex<String>>,
}

impl Sim {
    /// Starts the simulator on an ephemeral port with `args` and waits for its listening line.
    pub fn start(args: &[&str]) -> Sim {
        let mut child = Command::new(fleetbench_testkit::workspace_bin("fleetbench-sim"))
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fleetbench-sim");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err = child.stderr.take().expect("stderr piped");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut out = BufReader::new(child.stdout.take().expect("stdout piped"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read listening line");
        let port = line
            .trim()
            .strip_prefix("fleetbench-sim listening on http://127.0.0.1:")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected first line {line:?}; stderr: {}",
                    stderr.lock().unwrap()
                )
            })
            .parse()
            .expect("port number");
        // Keep the pipe drained so the child never blocks on stdout.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        Sim {
            child,
            port,
            stderr,
        }
    }

    /// Starts and waits until /health answers 200.
    pub fn ready(args: &[&str]) -> Sim {
        let sim = Sim::start(args);
        sim.wait_ready(Duration::from_secs(20));
        sim
    }

    pub fn wait_ready(&self, timeout: Duration) {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Ok((200, _)) = self.try_request("GET", "/health", None) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "sim not ready after {timeout:?}; stderr:\n{}",
            self.stderr()
        );
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                // Let the stderr reader catch up with the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.try_request("GET", path, None).expect("GET")
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        self.try_request("POST", path, Some(body)).expect("POST")
    }

    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let body = body.unwrap_or("");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let (status, body) = parse_response(&raw);
        Ok((status, body))
    }

    /// Sends a streamed request and timestamps every SSE event as its bytes arrive.
    pub fn stream(&self, path: &str, body: &str) -> Streamed {
        stream_to(self.port, path, body)
    }
}

/// Streamed request to a simulator on `port` (usable from client threads).
pub fn stream_to(port: u16, path: &str, body: &str) -> Streamed {
    {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let sent = Instant::now();
        s.write_all(req.as_bytes()).expect("write request");
        let mut raw = Vec::new();
        let mut times = Vec::new();
        let mut buf = [0u8; 65536];
        let mut scanned = 0;
        loop {
            let n = s.read(&mut buf).expect("read stream");
            if n == 0 {
                break;
            }
            let now = Instant::now();
            raw.extend_from_slice(&buf[..n]);
            // Chunk framing always uses \r\n, so "\n\n" only ends SSE events.
            while let Some(i) = find(&raw[scanned..], b"\n\n") {
                times.push(now);
                scanned += i + 2;
            }
        }
        let (status, text) = parse_response(&raw);
        let events: Vec<String> = text
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap_or(e).to_string())
            .collect();
        Streamed {
            status,
            sent,
            times,
            events,
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Streamed {
    pub status: u16,
    pub sent: Instant,
    /// Arrival time of each SSE event, in order.
    pub times: Vec<Instant>,
    /// Event payloads without `data: `.
    pub events: Vec<String>,
}

impl Streamed {
    /// Parsed JSON events carrying a token (non-empty text or content).
    pub fn token_indices(&self) -> Vec<usize> {
        self.events
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(e) else {
                    return false;
                };
                let c = &v["choices"][0];
                let t = c["text"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
                    .unwrap_or("");
                !t.is_empty()
            })
            .map(|(i, _)| i)
            .collect()
    }

    pub fn json(&self, i: usize) -> serde_json::Value {
        serde_json::from_str(&self.events[i])
            .unwrap_or_else(|e| panic!("event {i} {:?}: {e}", self.events[i]))
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn parse_response(raw: &[u8]) -> (u16, String) {
    let head_end = find(raw, b"\r\n\r\n").expect("response head");
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut body = &raw[head_end + 4..];
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return (status, String::from_utf8_lossy(body).to_string());
    }
    let mut out = Vec::new();
    while let Some(eol) = find(body, b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap().trim(), 16)
            .expect("chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[eol + 2 + size + 2..];
    }
    (status, String::from_utf8_lossy(&out).to_string())
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
