//! What a stand-in reports instead of measuring: a level's figures predicted by the simulated
//! engine's own model (`fleetbench_sim::model::predict`, the scheduler the sim server runs, in
//! virtual time), and telemetry samples shaped like an 8-GPU host's.
//!
//! The predictions follow the sim's flags (max running requests, CUDA graphs, MoE backend, TP,
//! `--time-scale`, crash above a batch size), so a job against stand-ins behaves like one
//! against the sim: a config that crashes the sim at a load crashes here too. Percentiles other
//! than p50 and p99 are interpolated between them: these are plausible figures for the
//! controller to store, never measurements.

use std::collections::HashMap;

use fleetbench_proto::agentpb::{self, LevelOutcome, LoadLevel};
use fleetbench_sim::ModelParams;
use fleetbench_sim::model::predict;

/// Prompt and output lengths when the workload is not a random dataset (files are not read).
const DEFAULT_LEN: u32 = 128;

/// A level as the stand-in will report it, and how long it takes on the wall clock.
#[derive(Debug, Clone)]
pub(crate) struct Level {
    pub wall_s: f64,
    pub crashed: bool,
    pub result: agentpb::LevelResult,
}

/// The (prompt, output) lengths of a workload.
fn lengths(w: Option<&agentpb::Workload>) -> (u32, u32) {
    match w.and_then(|w| w.dataset.as_ref()) {
        Some(agentpb::workload::Dataset::Random(r)) => (r.input_len.max(1), r.output_len.max(1)),
        Some(agentpb::workload::Dataset::SharedPrefix(s)) => {
            ((s.prefix_len + s.suffix_len).max(1), s.output_len.max(1))
        }
        Some(agentpb::workload::Dataset::Conversation(c)) => {
            (c.input_len.max(1), c.output_len.max(1))
        }
        _ => (DEFAULT_LEN, DEFAULT_LEN),
    }
}

/// `50.0` → `"p50"`, `99.9` → `"p99.9"` (the load generator's keys).
fn percentile_key(p: f64) -> String {
    let s = format!("{p:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("p{s}")
}

fn distribution(count: u64, p50: f64, p99: f64, percentiles: &[f64]) -> agentpb::Distribution {
    let at = |p: f64| {
        if p <= 50.0 {
            p50 * (0.8 + 0.2 * p / 50.0)
        } else {
            p50 + (p99 - p50) * ((p - 50.0) / 49.0).min(1.2)
        }
    };
    let mut map = HashMap::new();
    for p in percentiles {
        map.insert(percentile_key(*p), at(*p));
    }
    agentpb::Distribution {
        count,
        mean: (p50 * 2.0 + p99) / 3.0,
        min: p50 * 0.8,
        max: p99 * 1.1,
        percentiles: map,
    }
}

/// Predicts one level of `req` for an engine with `params`; `jitter` (about 1.0) spreads hosts.
pub(crate) fn level(
    params: &ModelParams,
    req: &agentpb::RunBenchmarkRequest,
    index: u32,
    load: &LoadLevel,
    jitter: f64,
) -> Level {
    let (input_len, output_len) = lengths(req.workload.as_ref());
    // An open-loop level is modelled at the concurrency its rate would keep busy, capped.
    let concurrency = match (load.concurrency, load.request_rate) {
        (Some(c), _) => c.max(1),
        (None, Some(rate)) => (rate.ceil() as u32).clamp(1, 1024),
        (None, None) => 1,
    };
    let requests = match req.bound {
        Some(agentpb::run_benchmark_request::Bound::NumRequests(n)) => n.max(1),
        _ => predict::default_requests(concurrency),
    };
    let p = predict::closed_loop(params, concurrency, input_len, output_len, requests);
    let mut wall_s = p.duration_s * jitter;
    let mut completed = u64::from(p.requests);
    if let Some(agentpb::run_benchmark_request::Bound::DurationS(d)) = req.bound {
        // Bounded by time: the level lasts that long and completes what its rate allows.
        completed = (p.requests_per_s / jitter * d).round() as u64;
        wall_s = d;
    }
    let wall_s = wall_s.max(0.05);
    let percentiles = if req.percentiles.is_empty() {
        vec![50.0, 90.0, 99.0]
    } else {
        req.percentiles.clone()
    };
    let ms = |v: f64| v * jitter;
    let mut result = agentpb::LevelResult {
        level_index: index,
        level: Some(*load),
        outcome: LevelOutcome::Ok as i32,
        completed,
        duration_s: wall_s,
        input_tokens: completed * u64::from(input_len),
        output_tokens: completed * u64::from(output_len),
        output_tokens_per_s: p.output_tokens_per_s / jitter,
        total_tokens_per_s: p.requests_per_s / jitter * f64::from(input_len + output_len),
        requests_per_s: p.requests_per_s / jitter,
        goodput_requests_per_s: p.requests_per_s / jitter,
        peak_concurrency: concurrency,
        ttft_ms: Some(distribution(
            completed,
            ms(p.ttft_ms_p50),
            ms(p.ttft_ms_p99),
            &percentiles,
        )),
        itl_ms: Some(distribution(
            completed * u64::from(output_len.saturating_sub(1)),
            ms(p.itl_ms_p50),
            ms(p.itl_ms_p99),
            &percentiles,
        )),
        tpot_ms: Some(distribution(
            completed,
            ms(p.itl_ms_p50),
            ms(p.itl_ms_p99),
            &percentiles,
        )),
        e2e_ms: Some(distribution(
            completed,
            ms(p.e2e_ms_p50),
            ms(p.e2e_ms_p99),
            &percentiles,
        )),
        queue_ms: Some(distribution(completed, 0.0, 0.0, &percentiles)),
        sent: completed,
        burst: completed < 4 * u64::from(concurrency),
        ..Default::default()
    };
    if p.crashed {
        result.outcome = LevelOutcome::Crashed as i32;
        result.completed = 0;
        result.failed = completed.max(1);
        result.sent = result.failed;
        result.error_rate = 1.0;
        result.output_tokens_per_s = 0.0;
        result.total_tokens_per_s = 0.0;
        result.requests_per_s = 0.0;
        result.goodput_requests_per_s = 0.0;
        result.crash = Some(crash(concurrency));
        result.error = "the engine died during the level".into();
    }
    Level {
        wall_s,
        crashed: p.crashed,
        result,
    }
}

/// The crash a stand-in reports when the model says the engine dies at a batch size.
pub(crate) fn crash(concurrency: u32) -> agentpb::Crash {
    agentpb::Crash {
        class: agentpb::CrashClass::PythonException as i32,
        exception_type: "AttributeError".into(),
        message: "stand-in: the simulated engine's model crashes at this batch size".into(),
        summary: format!(
            "AttributeError at concurrency {concurrency} (stand-in, from the sim's model)"
        ),
        ..Default::default()
    }
}

/// Engine-side load the telemetry shows: the running level's concurrency, 0 when idle.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    pub ready: bool,
    pub running: u32,
}

/// GPUs a stand-in host reports.
pub(crate) const GPUS: u32 = 8;
const GPU_MEMORY: u64 = 143_771_000_000;

/// One telemetry sample of a host with [`GPUS`] GPUs; `energy_mj` is the host's running
/// energy counter per GPU, advanced here by the power drawn over `dt_s`.
pub(crate) fn sample(
    unix_ms: i64,
    load: Load,
    config_id: &str,
    energy_mj: &mut [u64],
    dt_s: f64,
) -> agentpb::MetricsSample {
    let busy = (f64::from(load.running) / 64.0).min(1.0);
    let gpus = (0..GPUS)
        .map(|i| {
            let power = 110.0 + if load.ready { 90.0 } else { 0.0 } + 480.0 * busy;
            if let Some(e) = energy_mj.get_mut(i as usize) {
                *e += (power * dt_s * 1000.0) as u64;
            }
            agentpb::GpuSample {
                index: i,
                uuid: String::new(),
                utilization_pct: Some(100.0 * busy),
                memory_utilization_pct: Some(60.0 * busy),
                memory_used_bytes: Some(if load.ready { GPU_MEMORY / 10 * 9 } else { 0 }),
                memory_total_bytes: Some(GPU_MEMORY),
                power_w: Some(power),
                energy_mj: energy_mj.get(i as usize).copied(),
                temperature_c: Some(35 + (30.0 * busy) as u32),
                ..Default::default()
            }
        })
        .collect();
    let engine = load.ready.then(|| agentpb::EngineMetrics {
        scraped: true,
        running_requests: Some(f64::from(load.running)),
        queued_requests: Some(0.0),
        kv_cache_usage: Some(0.5 * busy),
        generation_tokens_per_s: Some(2000.0 * busy),
        ..Default::default()
    });
    agentpb::MetricsSample {
        unix_ms,
        gpus,
        engine,
        process: load.ready.then_some(agentpb::ProcessSample {
            process_count: 1,
            cpu_pct: 100.0 * (0.1 + busy),
            rss_bytes: 2 << 30,
        }),
        config_id: config_id.to_string(),
        // The stand-in sets its own name (the host's, as a real agent reports its hostname).
        hostname: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(flags: &[&str]) -> ModelParams {
        let args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        ModelParams::from_args(&fleetbench_sim::parse_args(&args).unwrap()).unwrap()
    }

    fn request(bound: agentpb::run_benchmark_request::Bound) -> agentpb::RunBenchmarkRequest {
        agentpb::RunBenchmarkRequest {
            workload: Some(agentpb::Workload {
                dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                    input_len: 64,
                    output_len: 32,
                    range_ratio: 0.0,
                })),
                ..Default::default()
            }),
            bound: Some(bound),
            percentiles: vec![50.0, 99.0],
            ..Default::default()
        }
    }

    #[test]
    fn a_level_follows_the_sims_model_and_crashes_where_it_does() {
        let req = request(agentpb::run_benchmark_request::Bound::NumRequests(64));
        let p = params(&[]);
        let at = |c: u32| LoadLevel {
            concurrency: Some(c),
            ..Default::default()
        };
        let low = level(&p, &req, 0, &at(1), 1.0);
        let high = level(&p, &req, 1, &at(16), 1.0);
        assert_eq!(low.result.completed, 64);
        assert!(!low.crashed && !high.crashed);
        // Batching: more concurrency, more throughput and a shorter level.
        assert!(high.result.output_tokens_per_s > 2.0 * low.result.output_tokens_per_s);
        assert!(high.wall_s < low.wall_s);
        let ttft = low.result.ttft_ms.as_ref().unwrap();
        assert!(ttft.percentiles["p99"] >= ttft.percentiles["p50"]);

        let fragile = params(&["--crash-above-batch", "8"]);
        let crashed = level(&fragile, &req, 1, &at(16), 1.0);
        assert!(crashed.crashed);
        assert_eq!(crashed.result.outcome, LevelOutcome::Crashed as i32);
        assert_eq!(crashed.result.completed, 0);
        assert!(crashed.result.crash.is_some());
    }

    #[test]
    fn a_level_bounded_by_time_lasts_that_long() {
        let req = request(agentpb::run_benchmark_request::Bound::DurationS(2.5));
        let l = level(
            &params(&[]),
            &req,
            0,
            &LoadLevel {
                concurrency: Some(4),
                ..Default::default()
            },
            1.0,
        );
        assert_eq!(l.wall_s, 2.5);
        let expected = l.result.requests_per_s * 2.5;
        assert!((l.result.completed as f64 - expected).abs() <= 1.0);
    }

    #[test]
    fn telemetry_shows_load_and_counts_energy() {
        let mut energy = vec![0; GPUS as usize];
        let idle = sample(1, Load::default(), "", &mut energy, 1.0);
        assert_eq!(idle.gpus.len(), GPUS as usize);
        assert!(idle.engine.is_none());
        let busy = sample(
            2,
            Load {
                ready: true,
                running: 64,
            },
            "c1",
            &mut energy,
            1.0,
        );
        assert!(busy.gpus[0].power_w.unwrap() > idle.gpus[0].power_w.unwrap());
        assert_eq!(energy[0], 110_000 + 680_000);
        assert_eq!(busy.engine.unwrap().running_requests, Some(64.0));
    }
}
