//! The subcommands: each measures one thing and prints it.

use std::sync::Arc;
use std::time::Instant;

use fleetbench_sim::model::{ModelParams, closed_loop};
use fleetbench_sim::parse_args;

use crate::client::{closed_level, request, stream_bench};
use crate::flag;
use crate::server::{cpu_ticks, pin_self, start_sim, start_sim_on};

pub(crate) fn stream_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let secs: f64 = flag(args, "--seconds", 3.0);
    let tokens: u32 = flag(args, "--tokens", 256);
    let concs: String = flag(args, "--concurrency", "64,512".to_string());
    let (server_cpu, client_cpu) = split_cpus();
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

pub(crate) fn story_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
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

pub(crate) fn noise_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
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

pub(crate) fn predict_main(args: &[String]) -> anyhow::Result<()> {
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

pub(crate) fn latency_main(args: &[String], rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let concs: String = flag(args, "--concurrency", "1,64,512".to_string());
    let tokens: u32 = flag(args, "--tokens", 64);
    let (server_cpu, _client_cpu) = split_cpus();
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

/// Pins this process (the client) to the first CPU and gives the simulator the last, so the
/// two never share a core; on one CPU neither is pinned. Returns `(server, client)`.
fn split_cpus() -> (Option<usize>, Option<usize>) {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if cpus < 2 {
        return (None, None);
    }
    pin_self(0);
    (Some(cpus - 1), Some(0))
}
