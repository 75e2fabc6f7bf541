//! `fleetbench-sim-bench`: figures about the simulator itself.
//!
//! - `fleetbench-sim-bench stream [--seconds S] [--concurrency 64,512] [--tokens 256]`: streamed
//!   tokens per second the simulator serves in instant fixed-latency mode, pinned to one CPU (the
//!   last one) with a raw client pinned to another, per-token and coalesced writes, and the
//!   simulator's CPU time per 1,000 tokens.
//! - `fleetbench-sim-bench story [--time-scale F] [--requests-per-level N]`: the quickstart A/B
//!   sweep (triton vs flashinfer_cutlass with a crash above batch 384) measured against the real
//!   binary in model mode, next to the model's predictions.
//!
//! - `fleetbench-sim-bench noise [--repeats N] [--concurrency C] [--time-scale F]`: output
//!   tokens/s of one config over N runs with different seeds, with and without `--slowdown 1.1`:
//!   run-to-run spread against a 10% regression.
//!
//! - `fleetbench-sim-bench predict [--concurrency 1,8] [--input-len I] [--output-len O]
//!   [--requests N] [--e2e-slo-ms X] -- SIM FLAGS…`: the model's predictions for those flags
//!   (no server started), and with `--e2e-slo-ms` the knee under that p99 E2E budget.
//!
//! - `fleetbench-sim-bench latency [--concurrency 1,64,512] [--seconds S]`: fixed-latency mode
//!   (50 ms / 5 ms) measured by the raw client: TTFT and ITL p50/p99 minus the injected values,
//!   the error the simulator (plus this client) adds.
//!
//! The simulator binary is found next to this one.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fleetbench_sim::model::{ModelParams, closed_loop};
use fleetbench_sim::parse_args;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pin_self(cpu: usize) {
    // SAFETY: plain syscall on a zeroed, locally owned cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn start_sim(args: &[String], cpu: Option<usize>) -> anyhow::Result<Server> {
    start_sim_on(args, cpu.map(|c| vec![c]))
}

/// Starts the simulator pinned to `cpus` (all of them when `None`).
fn start_sim_on(args: &[String], cpus: Option<Vec<usize>>) -> anyhow::Result<Server> {
    let exe = std::env::current_exe()?.with_file_name("fleetbench-sim");
    let mut cmd = Command::new(&exe);
    cmd.args(["--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(cpus) = cpus {
        // SAFETY: sched_setaffinity is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in &cpus {
                    libc::CPU_SET(cpu, &mut set);
                }
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                Ok(())
            });
        }
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("start {}", exe.display()))?;
    let mut out = child.stdout.take().context("stdout")?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while std::io::Read::read(&mut out, &mut b)? == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).to_string();
    let port = line
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("unexpected first line {line:?}"))?;
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut sink);
    });
    let server = Server { child, port };
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            if r.starts_with("HTTP/1.1 200") {
                return Ok(server);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("simulator not ready within 30 s")
}

fn request(prompt_words: usize, max_tokens: u32) -> Vec<u8> {
    let prompt = vec!["hello"; prompt_words].join(" ");
    let body = format!(
        r#"{{"prompt":"{prompt}","max_tokens":{max_tokens},"ignore_eos":true,"stream":true}}"#
    );
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One streamed request on a keep-alive connection; returns (TTFT, E2E, events).
async fn one(
    s: &mut TcpStream,
    req: &[u8],
    buf: &mut [u8],
    gaps: &mut Vec<f64>,
) -> anyhow::Result<(Duration, Duration, u64)> {
    let t0 = Instant::now();
    s.write_all(req).await?;
    let mut events = 0u64;
    let mut prev = 0u8;
    let mut first = None;
    let mut last_event: Option<Instant> = None;
    let mut tail = [0u8; 5];
    loop {
        let n = s.read(buf).await?;
        if n == 0 {
            bail!("connection closed mid-stream");
        }
        let now = Instant::now();
        for &c in &buf[..n] {
            if c == b'\n' && prev == b'\n' {
                events += 1;
                if first.is_none() {
                    first = Some(now);
                }
                if let Some(l) = last_event {
                    gaps.push((now - l).as_secs_f64() * 1e3);
                }
                last_event = Some(now);
            }
            prev = c;
        }
        // The chunked body ends with the zero-size chunk.
        if n >= 5 {
            tail.copy_from_slice(&buf[n - 5..n]);
        } else {
            tail.rotate_left(n);
            tail[5 - n..].copy_from_slice(&buf[..n]);
        }
        if &tail == b"0\r\n\r\n" {
            break;
        }
    }
    let end = Instant::now();
    Ok((first.unwrap_or(end) - t0, end - t0, events))
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let p = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the file, 12 and 13 after the ")".
    p(11) + p(12)
}

async fn stream_bench(
    port: u16,
    conc: usize,
    tokens: u32,
    secs: f64,
) -> anyhow::Result<(f64, u64)> {
    let req = Arc::new(request(16, tokens));
    let total = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let req = req.clone();
        let total = total.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; 256 * 1024];
            let mut gaps = Vec::new();
            while Instant::now() < stop {
                gaps.clear();
                let (_, _, events) = one(&mut s, &req, &mut buf, &mut gaps).await?;
                // Token events, without the finish event and [DONE].
                total.fetch_add(events.saturating_sub(2), Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let t0 = Instant::now();
    for t in tasks {
        t.await??;
    }
    let dt = t0.elapsed().as_secs_f64();
    let n = total.load(Relaxed);
    Ok((n as f64 / dt, n))
}

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.first().map(String::as_str) {
        Some("stream") => stream_main(&args, &rt),
        Some("story") => story_main(&args, &rt),
        Some("noise") => noise_main(&args, &rt),
        Some("predict") => predict_main(&args),
        Some("latency") => latency_main(&args, &rt),
        _ => {
            eprintln!("usage: fleetbench-sim-bench stream|story|noise|predict|latency [options]");
            std::process::exit(2);
        }
    }
}

fn stream_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let secs: f64 = flag(args, "--seconds", 3.0);
    let tokens: u32 = flag(args, "--tokens", 256);
    let concs: String = flag(args, "--concurrency", "64,512".to_string());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (server_cpu, client_cpu) = if cpus >= 2 {
        (Some(cpus - 1), Some(0))
    } else {
        (None, None)
    };
    if let Some(c) = client_cpu {
        pin_self(c);
    }
    let hz = 100.0; // USER_HZ on Linux
    println!(
        "simulator pinned to cpu {server_cpu:?}, client to cpu {client_cpu:?}, {tokens} tokens per request, {secs} s per run"
    );
    println!(
        "{:>11} {:>6} {:>14} {:>22}",
        "writes", "conc", "tokens/s", "sim CPU ms/1k tokens"
    );
    for writes in ["per-token", "coalesced"] {
        for conc in concs
            .split(',')
            .filter_map(|c| c.trim().parse::<usize>().ok())
        {
            let sim_args: Vec<String> = [
                "--ttft-ms",
                "0",
                "--itl-ms",
                "0",
                "--workers",
                "1",
                "--stream-writes",
                writes,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let server = start_sim(&sim_args, server_cpu)?;
            let pid = server.child.id();
            let c0 = cpu_ticks(pid);
            let (tps, n) = rt.block_on(stream_bench(server.port, conc, tokens, secs))?;
            let cpu_ms = (cpu_ticks(pid) - c0) as f64 / hz * 1e3;
            println!(
                "{writes:>11} {conc:>6} {tps:>14.0} {:>22.3}",
                cpu_ms / (n as f64 / 1e3)
            );
        }
    }
    Ok(())
}

fn story_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let scale: f64 = flag(args, "--time-scale", 0.05);
    let per_level: usize = flag(args, "--requests-per-level", 0);
    let input: usize = flag(args, "--input-len", 256);
    let output: u32 = flag(args, "--output-len", 128);
    let configs = [
        ("A", "--moe-runner-backend triton".to_string()),
        (
            "B",
            "--moe-runner-backend flashinfer_cutlass --max-running-requests 512 --crash-above-batch 384 --crash-backend flashinfer_cutlass".to_string(),
        ),
    ];
    let levels = [1usize, 8, 32, 128, 256, 512];
    let predict_only = args.iter().any(|a| a == "--predict-only");
    println!("workload: random, input {input}, output {output}, ignore_eos; --time-scale {scale}");
    if predict_only {
        println!(
            "{:>6} {:>6} {:>9} {:>13} {:>10} {:>10} {:>10} {:>10}",
            "config",
            "conc",
            "requests",
            "output tok/s",
            "ttft p50",
            "itl p50",
            "itl p99",
            "wall s"
        );
        for (name, flags) in &configs {
            let mut sim_args: Vec<String> = flags.split_whitespace().map(String::from).collect();
            sim_args.extend(["--time-scale".to_string(), scale.to_string()]);
            let params = ModelParams::from_args(&parse_args(&sim_args)?)?;
            for &c in &levels {
                let n = if per_level > 0 {
                    per_level
                } else {
                    (c * 2).max(8)
                };
                let p = closed_loop(&params, c as u32, input as u32, output, n as u32);
                if p.crashed {
                    println!("{name:>6} {c:>6} {n:>9} {:>13}", "CRASH");
                    continue;
                }
                println!(
                    "{name:>6} {c:>6} {n:>9} {:>13.1} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>10.2}",
                    p.output_tokens_per_s, p.ttft_ms_p50, p.itl_ms_p50, p.itl_ms_p99, p.duration_s
                );
            }
        }
        return Ok(());
    }
    println!(
        "{:>6} {:>6} {:>21} {:>19} {:>19} {:>19} {:>7}",
        "config",
        "conc",
        "tok/s meas/pred",
        "ttft p50 meas/pred",
        "itl p50 meas/pred",
        "itl p99 meas/pred",
        "wall s"
    );
    for (name, flags) in &configs {
        let mut sim_args: Vec<String> = flags.split_whitespace().map(String::from).collect();
        sim_args.extend(["--time-scale".to_string(), scale.to_string()]);
        let params = ModelParams::from_args(&parse_args(&sim_args)?)?;
        let server = start_sim(&sim_args, None)?;
        let req = Arc::new(request(input, output));
        for &c in &levels {
            let n = if per_level > 0 {
                per_level
            } else {
                (c * 3).max(24)
            };
            let pred = closed_loop(&params, c as u32, input as u32, output, n as u32);
            let t0 = Instant::now();
            let res = rt.block_on(closed_level(server.port, c, n, req.clone()));
            let wall = t0.elapsed().as_secs_f64();
            match res {
                Ok(m) => println!(
                    "{name:>6} {c:>6} {:>10.0}/{:<10.0} {:>9.2}/{:<9.2} {:>9.2}/{:<9.2} {:>9.2}/{:<9.2} {wall:>7.2}",
                    m.output_tokens_per_s,
                    pred.output_tokens_per_s,
                    m.ttft_p50,
                    pred.ttft_ms_p50,
                    m.itl_p50,
                    pred.itl_ms_p50,
                    m.itl_p99,
                    pred.itl_ms_p99
                ),
                Err(e) => {
                    println!(
                        "{name:>6} {c:>6} {:>13} {:>13} (predicted crash: {}) {e:#}",
                        "CRASHED", "-", pred.crashed
                    );
                    break;
                }
            }
        }
        drop(server);
    }
    Ok(())
}

async fn closed_level(
    port: u16,
    conc: usize,
    n: usize,
    req: Arc<Vec<u8>>,
) -> anyhow::Result<Level> {
    let left = Arc::new(AtomicU64::new(n as u64));
    let tokens = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (left, tokens, req) = (left.clone(), tokens.clone(), req.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; 64 * 1024];
            let mut ttfts = Vec::new();
            let mut gaps = Vec::new();
            while left
                .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1))
                .is_ok()
            {
                let before = gaps.len();
                let (ttft, _, events) = one(&mut s, &req, &mut buf, &mut gaps).await?;
                // Token gaps only: drop the gaps to the finish event and [DONE].
                let keep = gaps.len().saturating_sub(2).max(before);
                gaps.truncate(keep);
                tokens.fetch_add(events.saturating_sub(2), Relaxed);
                ttfts.push(ttft.as_secs_f64() * 1e3);
            }
            anyhow::Ok((ttfts, gaps))
        }));
    }
    let mut ttfts = Vec::new();
    let mut gaps = Vec::new();
    for t in tasks {
        let (a, b) = t.await??;
        ttfts.extend(a);
        gaps.extend(b);
    }
    let dt = t0.elapsed().as_secs_f64();
    Ok(Level {
        output_tokens_per_s: tokens.load(Relaxed) as f64 / dt,
        ttft_p50: pct(&mut ttfts, 50.0),
        ttft_p99: pct(&mut ttfts, 99.0),
        itl_p50: pct(&mut gaps, 50.0),
        itl_p99: pct(&mut gaps, 99.0),
    })
}

struct Level {
    output_tokens_per_s: f64,
    ttft_p50: f64,
    ttft_p99: f64,
    itl_p50: f64,
    itl_p99: f64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn noise_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let repeats: u64 = flag(args, "--repeats", 5);
    let conc: usize = flag(args, "--concurrency", 64);
    let scale: f64 = flag(args, "--time-scale", 0.5);
    let input: usize = flag(args, "--input-len", 256);
    let output: u32 = flag(args, "--output-len", 128);
    let n: usize = flag(args, "--requests", conc * 2);
    let req = Arc::new(request(input, output));
    println!(
        "config: --moe-runner-backend triton, concurrency {conc}, {n} requests, input {input}, output {output}, --time-scale {scale}"
    );
    for slowdown in [1.0, 1.1] {
        let mut v = Vec::new();
        for seed in 1..=repeats {
            let sim_args: Vec<String> = format!(
                "--moe-runner-backend triton --time-scale {scale} --seed {seed} --slowdown {slowdown}"
            )
            .split_whitespace()
            .map(String::from)
            .collect();
            let server = start_sim(&sim_args, None)?;
            let level = rt.block_on(closed_level(server.port, conc, n, req.clone()))?;
            v.push(level.output_tokens_per_s);
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64)
            .sqrt();
        println!(
            "slowdown {slowdown:.2}: mean {mean:.1} tok/s, sd {sd:.1} ({:.2}%), runs {:?}",
            100.0 * sd / mean,
            v.iter().map(|x| x.round()).collect::<Vec<_>>()
        );
    }
    Ok(())
}

fn predict_main(args: &[String]) -> anyhow::Result<()> {
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let (own, sim) = (&args[..split], args.get(split + 1..).unwrap_or(&[]));
    let concs: String = flag(own, "--concurrency", "1,8,32,128,256,512".to_string());
    let input: u32 = flag(own, "--input-len", 256);
    let output: u32 = flag(own, "--output-len", 128);
    let requests: u32 = flag(own, "--requests", 0);
    let params = ModelParams::from_args(&parse_args(sim)?)?;
    println!("flags: {}", sim.join(" "));
    println!(
        "{:>6} {:>9} {:>13} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "conc", "requests", "output tok/s", "ttft p50", "ttft p99", "itl p50", "e2e p99", "wall s"
    );
    for c in concs
        .split(',')
        .filter_map(|c| c.trim().parse::<u32>().ok())
    {
        let n = if requests > 0 {
            requests
        } else {
            fleetbench_sim::model::predict::default_requests(c)
        };
        let p = closed_loop(&params, c, input, output, n);
        if p.crashed {
            println!("{c:>6} {n:>9} {:>13}", "CRASH");
            continue;
        }
        println!(
            "{c:>6} {n:>9} {:>13.1} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>10.2}",
            p.output_tokens_per_s,
            p.ttft_ms_p50,
            p.ttft_ms_p99,
            p.itl_ms_p50,
            p.e2e_ms_p99,
            p.duration_s
        );
    }
    let e2e: f64 = flag(own, "--e2e-slo-ms", 0.0);
    if e2e > 0.0 {
        let slo = fleetbench_sim::model::Slo {
            e2e_p99_ms: Some(e2e),
            ..Default::default()
        };
        println!(
            "knee (p99 E2E <= {e2e} ms): {}",
            fleetbench_sim::model::knee(&params, input, output, slo)
        );
    }
    Ok(())
}

fn latency_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let concs: String = flag(args, "--concurrency", "1,64,512".to_string());
    let tokens: u32 = flag(args, "--tokens", 64);
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (server_cpu, client_cpu) = if cpus >= 2 {
        (Some(cpus - 1), Some(0))
    } else {
        (None, None)
    };
    if let Some(c) = client_cpu {
        pin_self(c);
    }
    let writes: String = flag(args, "--writes", "per-token".to_string());
    let sim_cpus: usize = flag(args, "--sim-cpus", 1);
    let sim_args: Vec<String> = [
        "--ttft-ms",
        "50",
        "--itl-ms",
        "5",
        "--stream-writes",
        &writes,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let server = match server_cpu {
        Some(last) => {
            let first = last + 1 - sim_cpus.clamp(1, last);
            start_sim_on(&sim_args, Some((first..=last).collect()))?
        }
        None => start_sim(&sim_args, None)?,
    };
    println!("simulator on {sim_cpus} cpu(s), {writes} writes");
    let req = Arc::new(request(16, tokens));
    println!(
        "fixed latency 50 ms / 5 ms, {tokens} tokens per request; error = measured - injected (ms)"
    );
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10}",
        "conc", "ttft p50", "ttft p99", "itl p50", "itl p99"
    );
    for c in concs
        .split(',')
        .filter_map(|c| c.trim().parse::<usize>().ok())
    {
        let n = (c * 4).max(40);
        let l = rt.block_on(closed_level(server.port, c, n, req.clone()))?;
        println!(
            "{c:>6} {:>+10.3} {:>+10.3} {:>+10.3} {:>+10.3}",
            l.ttft_p50 - 50.0,
            l.ttft_p99 - 50.0,
            l.itl_p50 - 5.0,
            l.itl_p99 - 5.0
        );
    }
    Ok(())
}
