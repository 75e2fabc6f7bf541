//! The parsers against a live `llama-server` (CPU, SmolLM2-135M): its start-up log read as it
//! is written, its `/metrics` over HTTP, and its real failure when the port is taken.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fleetbench_engines::{CrashClass, EngineKind, ExitInfo, classify, logs, map_metrics};

struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(port: u16, extra: &[&str]) -> Server {
    let llama = fleetbench_testkit::llama_cpp();
    let mut child = Command::new(&llama.server)
        .arg("-m")
        .arg(&llama.model)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--metrics",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llama-server starts");
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Server { child, lines }
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    let (head, body) = out.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn live_llama_server_facts_metrics_and_port_clash() {
    let port = fleetbench_testkit::free_port();
    let server = start(port, &["-np", "3", "-c", "1536"]);

    let mut parser = logs::parser(EngineKind::Llamacpp);
    let mut facts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !facts.iter().any(|f: &logs::LogFact| f.key == "ready") {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = server
            .lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no ready fact before the deadline; facts: {facts:?}"));
        facts.extend(parser.parse_line(&line));
    }
    let get = |k: &str| facts.iter().find(|f| f.key == k).map(|f| f.value.as_str());
    assert_eq!(get("n_slots"), Some("3"));
    assert_eq!(get("n_ctx_slot"), Some("512"));

    let m = map_metrics(EngineKind::Llamacpp, &http_get(port, "/metrics"));
    assert!(m.parse_errors.is_empty(), "{:?}", m.parse_errors);
    assert_eq!(m.running_requests, Some(0.0));
    assert_eq!(m.queued_requests, Some(0.0));
    assert_eq!(m.generation_tokens_total, Some(0.0));

    // A second server on the same port fails the way llama.cpp does; classify its real exit.
    let mut clash = start(port, &["-np", "1"]);
    let status = clash.child.wait().expect("second server exits");
    let tail: Vec<String> = clash.lines.iter().collect();
    let exit = ExitInfo {
        code: status.code(),
        ..Default::default()
    };
    let crash = classify(EngineKind::Llamacpp, &exit, &tail);
    assert_eq!(crash.class, CrashClass::PortInUse, "{crash:?}\n{tail:#?}");
    assert!(crash.summary.ends_with("exit code 1"), "{}", crash.summary);
    drop(server);
}
