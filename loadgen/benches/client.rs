//! Client cost and accuracy of the load generator, with the client pinned to CPU 0 and
//! `fleetbench-sim` pinned to CPU 1 (`taskset`).
//!
//!   cargo build --release -p fleetbench-sim && cargo bench -p fleetbench-loadgen --bench client
//!
//! Prints (1) streamed tokens/s and client CPU ms per 1,000 tokens (getrusage) at concurrency
//! 64 and 512, 256 output tokens, instant server, per-token and coalesced writes; (2) the
//! client-added TTFT and ITL error at p50/p99 with the server injecting 50 ms / 5 ms (and, at
//! 512 streams, 50 ms / 100 ms, a token rate the pinned simulator sustains).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fleetbench_loadgen::{BenchConfig, Bound, DatasetSpec, Level, Runner};
use tokio_util::sync::CancellationToken;

struct Sim(Child, String);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sim(args: &[&str]) -> Sim {
    let bin = std::env::var_os("FLEETBENCH_SIM")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| fleetbench_testkit::workspace_bin("fleetbench-sim"));
    let cpu = std::env::var("SIM_CPU").unwrap_or_else(|_| "1".into());
    let mut child = Command::new("taskset")
        .args(["-c", &cpu])
        .arg(bin)
        .args(["--host", "127.0.0.1", "--port", "0", "--workers", "1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn taskset fleetbench-sim");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let url = loop {
        let line = lines.next().expect("sim exited").expect("read");
        if let Some(u) = line.split("listening on ").nth(1) {
            break u.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Sim(child, url)
}

/// `(sum, count)` of a histogram in the server's /metrics (seconds), summed over label sets.
fn server_hist(url: &str, name: &str) -> (f64, f64) {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect for /metrics");
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read /metrics");
    let get = |suffix: &str| -> f64 {
        let prefix = format!("{name}{suffix}");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (get("_sum"), get("_count"))
}

fn server_mean_ms(before: (f64, f64), after: (f64, f64)) -> f64 {
    (after.0 - before.0) / (after.1 - before.1).max(1.0) * 1e3
}

fn pin_self(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; the calls only read the set we built.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("warning: cannot pin the client to CPU {cpu}");
        }
    }
}

/// (user, system) CPU time of this process.
fn cpu_split() -> (Duration, Duration) {
    // SAFETY: getrusage fills the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn cfg(url: &str, out: u32, bound: Bound) -> BenchConfig {
    BenchConfig {
        dataset: DatasetSpec::Random {
            input_len: 16,
            output_len: out,
            range_ratio: 1.0,
        },
        bound,
        warmup: 64,
        percentiles: vec![50.0, 99.0],
        request_timeout: Duration::from_secs(60),
        ..BenchConfig::new(url)
    }
}

async fn throughput() {
    println!(
        "## Client cost: instant server, 256 output tokens, {} s per level",
        secs()
    );
    println!(
        "| writes | concurrency | streamed tokens/s | client CPU ms / 1,000 tokens (user + sys) | client core busy |"
    );
    println!("|---|---|---|---|---|");
    for writes in ["per-token", "coalesced"] {
        let s = sim(&["--ttft-ms", "0", "--itl-ms", "0", "--stream-writes", writes]);
        for c in [64u32, 512] {
            let mut conf = cfg(&s.1, 256, Bound::Duration(Duration::from_secs(secs())));
            conf.warmup = 0; // getrusage would count it
            let runner = Runner::new(conf).await.expect("runner");
            let (u0, s0) = cpu_split();
            let r = runner
                .run_level(0, &Level::closed(c), None, CancellationToken::new())
                .await;
            let (u1, s1) = cpu_split();
            assert_eq!(r.failed, 0, "{r:?}");
            let per_k = |d: Duration| d.as_secs_f64() * 1e3 / (r.output_tokens as f64 / 1e3);
            let (user, sys) = (u1 - u0, s1 - s0);
            println!(
                "| {writes} | {c} | {:.0} | {:.3} ({:.3} + {:.3}) | {:.0}% |",
                r.output_tokens_per_s,
                per_k(user + sys),
                per_k(user),
                per_k(sys),
                100.0 * (user + sys).as_secs_f64() / r.duration_s.max(1e-6)
            );
        }
    }
}

async fn accuracy() {
    println!();
    println!(
        "## Client-added error: server injects TTFT 50 ms and ITL 5 ms (32-64 output tokens) or 100 ms (4-8), per-token writes, streams ramped over one ITL"
    );
    println!(
        "| concurrency | ITL | requests | TTFT p50 − 50 | TTFT p99 − 50 | ITL p50 − ITL | ITL p99 − ITL | client − server mean TTFT | client − server mean ITL |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    const TTFT: &str = "sglang:time_to_first_token_seconds";
    const ITL: &str = "sglang:inter_token_latency_seconds";
    // 512 streams 5 ms apart need 102 k tokens/s with one write each, more than the pinned
    // simulator's core gives: the last row (5 k tokens/s) shows the client where the server
    // keeps up.
    for (c, n, itl, out) in [
        (1u32, 30u32, 5u32, 64u32),
        (64, 640, 5, 64),
        (512, 3072, 5, 64),
        (512, 1536, 100, 8),
    ] {
        let s = sim(&["--ttft-ms", "50", "--itl-ms", &itl.to_string()]);
        let mut conf = cfg(&s.1, out, Bound::Requests(n));
        // No warm-up, so that the server's histograms cover exactly the measured requests.
        conf.warmup = 0;
        // Lengths over [out/2, out]: one fixed length keeps every stream of a closed loop in
        // lockstep, and each wave of c simultaneous requests queues in both processes.
        conf.dataset = DatasetSpec::Random {
            input_len: 16,
            output_len: out,
            range_ratio: 0.5,
        };
        // Ramped over one gap, the streams' tokens spread over the server's token clock instead
        // of all starting (and staying) in step with one synchronized first wave.
        let runner = Runner::new(conf)
            .await
            .expect("runner")
            .with_ramp_up(Duration::from_millis(u64::from(itl)));
        let (t0, i0) = (server_hist(&s.1, TTFT), server_hist(&s.1, ITL));
        let r = runner
            .run_level(0, &Level::closed(c), None, CancellationToken::new())
            .await;
        let (t1, i1) = (server_hist(&s.1, TTFT), server_hist(&s.1, ITL));
        assert_eq!(r.failed, 0, "{r:?}");
        let g =
            |s: &fleetbench_loadgen::Stats, k: &str, base: f64| s.get(k).unwrap_or(f64::NAN) - base;
        let itl = f64::from(itl);
        println!(
            "| {c} | {itl} | {n} | {:+.3} | {:+.3} | {:+.3} | {:+.3} | {:+.3} | {:+.4} |",
            g(&r.ttft_ms, "p50", 50.0),
            g(&r.ttft_ms, "p99", 50.0),
            g(&r.itl_ms, "p50", itl),
            g(&r.itl_ms, "p99", itl),
            r.ttft_ms.mean - server_mean_ms(t0, t1),
            r.itl_ms.mean - server_mean_ms(i0, i1),
        );
    }
    println!();
    println!(
        "(ms; the server's means come from its own /metrics histograms over the same requests)"
    );
}

fn secs() -> u64 {
    std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing; there is nothing to list.
    }
    pin_self(
        std::env::var("CLIENT_CPU")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        throughput().await;
        accuracy().await;
    });
}
