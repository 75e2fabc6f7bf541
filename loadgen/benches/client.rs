//! Client cost and accuracy of the load generator, with the client pinned to CPU 0 and
//! `fleetbench-sim` pinned to CPU 1 (`taskset`).
//!
//!   cargo build --release -p fleetbench-sim && cargo bench -p fleetbench-loadgen --bench client
//!
//! Prints (1) streamed tokens/s and client CPU ms per 1,000 tokens (getrusage) at concurrency
//! 64 and 512, 256 output tokens, instant server, per-token and coalesced writes; (2) the
//! client-added TTFT and ITL error at p50/p99 with the server injecting 50 ms / 5 ms.

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

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
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
        "| writes | concurrency | streamed tokens/s | client CPU ms / 1,000 tokens | client CPU use |"
    );
    println!("|---|---|---|---|---|");
    for writes in ["per-token", "coalesced"] {
        let s = sim(&["--ttft-ms", "0", "--itl-ms", "0", "--stream-writes", writes]);
        for c in [64u32, 512] {
            let runner = Runner::new(cfg(&s.1, 256, Bound::Duration(Duration::from_secs(secs()))))
                .await
                .expect("runner");
            let level = Level::closed(c);
            let cpu0 = cpu_time();
            let r = runner
                .run_level(0, &level, None, CancellationToken::new())
                .await;
            let cpu = cpu_time() - cpu0;
            assert_eq!(r.failed, 0, "{r:?}");
            // getrusage covers the warm-up too: count its tokens (64 × 256) in the divisor.
            let tokens = r.output_tokens + 64 * 256;
            let wall = r.duration_s;
            println!(
                "| {writes} | {c} | {:.0} | {:.3} | {:.0}% |",
                r.output_tokens_per_s,
                cpu.as_secs_f64() * 1e3 / (tokens as f64 / 1e3),
                100.0 * cpu.as_secs_f64() / (wall + 0.0001).max(0.0001)
            );
        }
    }
}

async fn accuracy() {
    println!();
    println!(
        "## Client-added error: server injects TTFT 50 ms, ITL 5 ms (per-token writes), 64 output tokens"
    );
    println!(
        "| concurrency | requests | TTFT p50 − 50 | TTFT p99 − 50 | ITL p50 − 5 | ITL p99 − 5 | (ms) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let s = sim(&["--ttft-ms", "50", "--itl-ms", "5"]);
    for (c, n) in [(1u32, 30u32), (64, 640), (512, 3072)] {
        let mut conf = cfg(&s.1, 64, Bound::Requests(n));
        conf.warmup = c.min(64);
        let runner = Runner::new(conf).await.expect("runner");
        let r = runner
            .run_level(0, &Level::closed(c), None, CancellationToken::new())
            .await;
        assert_eq!(r.failed, 0, "{r:?}");
        let g =
            |s: &fleetbench_loadgen::Stats, k: &str, base: f64| s.get(k).unwrap_or(f64::NAN) - base;
        println!(
            "| {c} | {n} | {:+.3} | {:+.3} | {:+.3} | {:+.3} | |",
            g(&r.ttft_ms, "p50", 50.0),
            g(&r.ttft_ms, "p99", 50.0),
            g(&r.itl_ms, "p50", 5.0),
            g(&r.itl_ms, "p99", 5.0)
        );
    }
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
