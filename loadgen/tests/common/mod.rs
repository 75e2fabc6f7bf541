//! Real servers for the load generator's tests: `fleetbench-sim` and small raw-socket servers
//! that misbehave on purpose.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fleetbench_loadgen::{Api, BenchConfig, Bound, DatasetSpec, Level};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A `fleetbench-sim` process, killed on drop.
pub struct Sim {
    pub child: Child,
    pub url: String,
}

impl Sim {
    pub fn start(args: &[&str]) -> Sim {
        let bin = fleetbench_testkit::workspace_bin("fleetbench-sim");
        let mut child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fleetbench-sim");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("sim exited before listening")
                .expect("read sim stdout");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Sim { child, url }
    }

    pub fn fixed(ttft_ms: f64, itl_ms: f64) -> Sim {
        Sim::fixed_with(ttft_ms, itl_ms, &[])
    }

    /// Fixed-latency mode with further flags.
    pub fn fixed_with(ttft_ms: f64, itl_ms: f64, more: &[&str]) -> Sim {
        let (ttft, itl) = (ttft_ms.to_string(), itl_ms.to_string());
        let mut args = vec!["--ttft-ms", ttft.as_str(), "--itl-ms", itl.as_str()];
        args.extend_from_slice(more);
        Sim::start(&args)
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn config(
    url: &str,
    input_len: u32,
    output_len: u32,
    levels: Vec<Level>,
    requests: u32,
) -> BenchConfig {
    BenchConfig {
        dataset: DatasetSpec::Random {
            input_len,
            output_len,
            range_ratio: 1.0,
        },
        levels,
        bound: Bound::Requests(requests),
        api: Api::Completions,
        request_timeout: Duration::from_secs(30),
        ..BenchConfig::new(url)
    }
}

/// A raw HTTP server on 127.0.0.1:0 that answers every connection with `response` bytes (in
/// `parts`, flushed one by one) and then closes it.
pub async fn raw_server(parts: Vec<Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let parts = parts.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                // Read the request head and its body (Content-Length) before answering.
                loop {
                    let Ok(n) = sock.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                for p in parts {
                    if sock.write_all(&p).await.is_err() {
                        return;
                    }
                    let _ = sock.flush().await;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

pub fn sse_head() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec()
}

/// One chunked-encoding chunk holding `data`.
pub fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}
