//! Faults, start-up and shutdown against the real binary.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Sim;

const REQ: &str = r#"{"prompt":"a b c","max_tokens":30,"ignore_eos":true,"stream":true}"#;

#[test]
fn crash_above_batch_prints_traceback_and_exits_1() {
    let mut sim = Sim::ready(&[
        "--time-scale",
        "0.1",
        "--moe-runner-backend",
        "flashinfer_cutlass",
        "--crash-above-batch",
        "4",
        "--crash-backend",
        "flashinfer_cutlass",
    ]);
    // Four at a time is fine.
    let port = sim.port;
    let ok: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || common::stream_to(port, "/v1/completions", REQ)))
        .collect();
    for h in ok {
        assert_eq!(h.join().unwrap().token_indices().len(), 30);
    }
    let _clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                // The server dies mid-stream; the client's view is not what this test checks.
                let _ =
                    std::panic::catch_unwind(|| common::stream_to(port, "/v1/completions", REQ));
            })
        })
        .collect();
    let status = sim
        .wait_exit(Duration::from_secs(10))
        .expect("sim exits after the crash");
    assert_eq!(status.code(), Some(1));
    let err = sim.stderr();
    assert!(err.contains("Traceback (most recent call last):"), "{err}");
    assert!(err.contains("File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line"), "{err}");
    assert!(
        err.trim_end()
            .contains("AttributeError: 'PrefillMetadata' object has no attribute 'max_seq_len'"),
        "{err}"
    );
}

#[test]
fn crash_backend_must_match() {
    let mut sim = Sim::ready(&[
        "--time-scale",
        "0.1",
        "--moe-runner-backend",
        "triton",
        "--crash-above-batch",
        "2",
        "--crash-backend",
        "flashinfer_cutlass",
    ]);
    let port = sim.port;
    let hs: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || common::stream_to(port, "/v1/completions", REQ)))
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap().token_indices().len(), 30);
    }
    assert!(sim.wait_exit(Duration::from_millis(100)).is_none());
}

#[test]
fn oom_at_start_and_over_committed_memory() {
    for args in [
        &["--fault", "oom-at-start"][..],
        &["--mem-fraction-static", "0.98"][..],
    ] {
        let mut sim = Sim::start(args);
        let status = sim
            .wait_exit(Duration::from_secs(10))
            .expect("exits during start-up");
        assert_eq!(status.code(), Some(1), "{args:?}");
        let err = sim.stderr();
        assert!(err.contains("Traceback (most recent call last):"), "{err}");
        assert!(
            err.contains("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
            "{err}"
        );
        assert!(!err.contains("fired up"), "{err}");
    }
    let mut sim = Sim::start(&["--mem-fraction-static", "0.3"]);
    assert_eq!(
        sim.wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(1)
    );
    assert!(
        sim.stderr().contains(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static"
        )
    );
}

#[test]
fn unknown_or_bad_flag_exits_2_naming_it() {
    let bin = fleetbench_testkit::workspace_bin("fleetbench-sim");
    let out = Command::new(&bin)
        .args(["--port", "0", "--max-running-reqs-typo", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: unrecognized arguments: --max-running-reqs-typo"),
        "{err}"
    );
    assert!(err.starts_with("usage: fleetbench-sim"), "{err}");
    let out = Command::new(&bin)
        .args(["--moe-runner-backend", "magic"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("argument --moe-runner-backend: invalid choice: 'magic'")
    );
    assert!(
        out.stdout.is_empty(),
        "nothing bound, nothing printed on stdout"
    );
}

#[test]
fn sigterm_exits_promptly_and_cleanly() {
    let mut sim = Sim::ready(&["--time-scale", "1"]);
    // A request in flight must not hold the exit up.
    let port = sim.port;
    std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| common::stream_to(port, "/v1/completions", REQ));
    });
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    // SAFETY: signalling our own child by pid.
    unsafe {
        libc::kill(sim.pid() as libc::pid_t, libc::SIGTERM);
    }
    let status = sim
        .wait_exit(Duration::from_secs(3))
        .expect("exits after SIGTERM");
    assert!(t0.elapsed() < Duration::from_millis(1500));
    assert_eq!(status.code(), Some(0));
    assert!(sim.stderr().contains("Received SIGTERM"));
}

#[test]
fn health_503_while_starting_then_200_with_startup_log() {
    let sim = Sim::start(&["--startup-delay-s", "1", "--mem-fraction-static", "0.8"]);
    let t0 = Instant::now();
    assert_eq!(sim.get("/health").0, 503);
    assert_eq!(sim.post("/v1/completions", REQ).0, 503);
    sim.wait_ready(Duration::from_secs(10));
    assert!(
        t0.elapsed() > Duration::from_millis(700),
        "ready after {:?}",
        t0.elapsed()
    );
    let err = sim.stderr();
    let order = [
        "server_args=ServerArgs(model_path=",
        "Load weight begin. avail mem=",
        "Load weight end. elapsed=",
        "KV Cache is allocated. #tokens: ",
        "max_total_num_tokens=",
        "The server is fired up and ready to roll!",
    ];
    let mut at = 0;
    for o in order {
        let i = err[at..]
            .find(o)
            .unwrap_or_else(|| panic!("{o:?} missing or out of order in\n{err}"));
        at += i + o.len();
    }
    assert!(
        err.lines()
            .any(|l| l.starts_with('[') && l.contains(" TP0] KV Cache")),
        "{err}"
    );
    let kv: u64 = err
        .split("KV Cache is allocated. #tokens: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .expect("KV tokens");
    let (_, info) = sim.get("/server_info");
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(v["max_total_num_tokens"], kv);
    assert_eq!(v["mem_fraction_static"], 0.8);
    assert!(err.contains(&format!(
        "max_total_num_tokens={kv}, chunked_prefill_size=8192"
    )));
}

#[test]
fn slow_start_multiplies_the_delay() {
    let sim = Sim::start(&["--startup-delay-s", "0.1", "--fault", "slow-start"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sim.get("/health").0, 503);
    sim.wait_ready(Duration::from_secs(10));
}

#[test]
fn hang_after_requests_stops_answering() {
    let sim = Sim::ready(&[
        "--ttft-ms",
        "0",
        "--itl-ms",
        "0",
        "--fault",
        "hang-after-requests",
        "2",
    ]);
    for _ in 0..2 {
        assert_eq!(
            sim.post("/v1/completions", r#"{"prompt":"a","max_tokens":2}"#)
                .0,
            200
        );
    }
    let port = sim.port;
    let probe = |path: &'static str, body: Option<&'static str>| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(700)))
            .unwrap();
        let (m, b) = body.map_or(("GET", ""), |b| ("POST", b));
        write!(
            s,
            "{m} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .unwrap();
        let mut buf = [0u8; 64];
        s.read(&mut buf)
    };
    assert!(
        probe("/v1/completions", Some(r#"{"prompt":"a","max_tokens":2}"#)).is_err(),
        "third request answered"
    );
    assert!(
        probe("/health", None).is_err(),
        "/health answered while hung"
    );
}

#[test]
fn nan_fault_outputs_nan_and_logs_it() {
    let sim = Sim::ready(&["--ttft-ms", "0", "--itl-ms", "0", "--fault", "nan"]);
    let (_, body) = sim.post(
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"ignore_eos":true}"#,
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], " NaN NaN NaN");
    std::thread::sleep(Duration::from_millis(100));
    assert!(sim.stderr().contains("NaN in the logits"));
}
