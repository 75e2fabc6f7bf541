//! `fleetbench-gpu-check`: prints this host's GPU facts, a few telemetry samples and the P2P
//! probe. A small, quick-to-build binary for trying the crate on a GPU machine.
//!
//! Usage: fleetbench-gpu-check [--samples N] [--interval-ms MS] [--buffer-mib MIB] [--repeats N]
//!        [--pairs 0-1,1-0] [--json FILE] [--no-probe] [--self-test]
//!
//! `--self-test` runs the pair measurement code on GPU 0 against itself (useful where only one
//! GPU is lent).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use fleetbench_gpu::Gpus;
use fleetbench_gpu::p2p::{self, ProbeOptions};

struct Args {
    samples: u32,
    interval_ms: u64,
    opts: ProbeOptions,
    json: Option<String>,
    probe: bool,
    self_test: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        samples: 5,
        interval_ms: 500,
        opts: ProbeOptions::default(),
        json: None,
        probe: true,
        self_test: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--samples" => a.samples = num("--samples", value("--samples")?)? as u32,
            "--interval-ms" => a.interval_ms = num("--interval-ms", value("--interval-ms")?)?,
            "--buffer-mib" => {
                a.opts.buffer_bytes = num("--buffer-mib", value("--buffer-mib")?)? << 20
            }
            "--repeats" => a.opts.repeats = num("--repeats", value("--repeats")?)? as u32,
            "--pairs" => {
                a.opts.pairs =
                    Some(p2p::parse_pairs(&value("--pairs")?).map_err(|e| e.to_string())?)
            }
            "--json" => a.json = Some(value("--json")?),
            "--no-probe" => a.probe = false,
            "--self-test" => a.self_test = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let gpus = Gpus::init();
    println!("NVML init: {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    if let Some(reason) = gpus.unavailable_reason() {
        println!("NVML unavailable: {reason}");
    }
    let (driver, cuda) = gpus.driver_versions();
    println!("driver {driver}, CUDA driver {cuda}");
    let facts = gpus.facts();
    println!("GPU facts:");
    for f in &facts {
        println!("  {}", serde_json::to_string(f).unwrap_or_default());
    }
    for n in 0..args.samples {
        let t = Instant::now();
        let samples = gpus.sample();
        let took = t.elapsed();
        for s in &samples {
            println!(
                "sample {n} ({:.3} ms): {}",
                took.as_secs_f64() * 1e3,
                serde_json::to_string(s).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(args.interval_ms));
    }
    for (gpu, call, us) in gpus.sample_call_costs() {
        println!("NVML call cost: GPU {gpu} {call}: {us:.1} µs");
    }
    let procs = gpus.gpu_processes();
    println!(
        "GPU processes: {}",
        serde_json::to_string(&procs).unwrap_or_default()
    );
    if args.self_test {
        match p2p::self_test(&args.opts) {
            Ok(figures) => {
                for (label, v) in figures {
                    println!("self-test: {label}: {v:.2}");
                }
            }
            Err(e) => {
                eprintln!("error: self-test: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if !args.probe {
        return ExitCode::SUCCESS;
    }
    match p2p::probe(&gpus, &args.opts) {
        Ok(report) => {
            print!("{}", p2p::render_table(&report));
            if let Some(path) = &args.json {
                let doc = serde_json::to_string_pretty(&report).unwrap_or_default();
                if let Err(e) = std::fs::write(path, doc) {
                    eprintln!("error: cannot write {path}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
