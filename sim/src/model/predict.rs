//! Predictions: the scheduler of the real engine run in virtual time against a closed-loop
//! client (a finished request is replaced by a new one of the same shape after the client's
//! reaction time, [`client_delay_ms`]).
//! Because it is the same [`Scheduler`], the predictions follow every rule the server follows
//! (prefill priority, chunking, max running requests, KV reservations, crashes); only jitter and
//! the client's own overhead are missing.
//!
//! Measured against the binary, throughput, TTFT p50 and ITL p50 agree within a few percent.
//! ITL p99 is optimistic: a real client returns requests less regularly, so more prefill steps
//! land between two tokens of a request. Prefer throughput and p50 latencies (or TTFT/E2E
//! budgets) where the prediction is used as the truth.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::ModelParams;
use crate::sched::{Scheduler, StepKind};

/// A latency budget; `None` fields are not checked. Percentile 99, in wall-clock milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slo {
    pub ttft_p99_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
}

/// What a closed-loop level is predicted to measure (wall clock, time-scale applied).
#[derive(Debug, Clone, PartialEq)]
pub struct LevelPrediction {
    pub concurrency: u32,
    pub requests: u32,
    /// The engine crashed (fault injection) during the level; the figures are then zero.
    pub crashed: bool,
    pub duration_s: f64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub ttft_ms_p50: f64,
    pub ttft_ms_p99: f64,
    pub itl_ms_p50: f64,
    pub itl_ms_p99: f64,
    pub e2e_ms_p50: f64,
    pub e2e_ms_p99: f64,
}

impl LevelPrediction {
    /// Whether the level stays within `slo` (a crashed level never does).
    pub fn meets(&self, slo: &Slo) -> bool {
        let ok = |limit: Option<f64>, v: f64| limit.is_none_or(|l| v <= l);
        !self.crashed
            && ok(slo.ttft_p99_ms, self.ttft_ms_p99)
            && ok(slo.itl_p99_ms, self.itl_ms_p99)
            && ok(slo.e2e_p99_ms, self.e2e_ms_p99)
    }
}

/// The modelled client's reaction time before request `i` reaches the engine (wall ms): 0.05
/// to 0.30 ms, spread by a hash of the index, as a real closed-loop client over loopback shows.
/// The spread matters: requests that finish together do not come back together, so prefill
/// steps come to interleave with decode steps (and show in ITL p99), as they do in the server.
pub fn client_delay_ms(i: usize) -> f64 {
    let mut x = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    0.05 + 0.25 * ((x >> 11) as f64 / (1u64 << 53) as f64)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// A closed-loop level of `requests` requests at `concurrency`, each with `input_len` prompt
/// tokens and exactly `output_len` output tokens (`ignore_eos`).
pub fn closed_loop(
    params: &ModelParams,
    concurrency: u32,
    input_len: u32,
    output_len: u32,
    requests: u32,
) -> LevelPrediction {
    let c = concurrency.max(1);
    let output_len = output_len.max(1);
    let scale = params.time_scale;
    let mut sched = Scheduler::new(params.clone());
    let n = requests.max(1) as usize;
    let mut arrival = vec![0.0f64; n];
    let mut last = vec![0.0f64; n];
    let mut ttft = Vec::with_capacity(n);
    let mut e2e = Vec::with_capacity(n);
    let mut itl = Vec::with_capacity(n * (output_len as usize - 1).min(4096));
    let mut issued = 0usize;
    let mut done = 0usize;
    let mut t = 0.0f64;
    let mut crashed = false;
    let mut refused = false;
    // Requests on their way: (arrival time in ns, request index), earliest first.
    let mut on_the_way: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let ns = |ms: f64| (ms * 1e6) as u64;
    while issued < n.min(c as usize) {
        on_the_way.push(Reverse((ns(client_delay_ms(issued)), issued)));
        issued += 1;
    }
    while done < n && !refused {
        while let Some(Reverse((at, i))) = on_the_way.peek().copied() {
            if at as f64 / 1e6 > t {
                break;
            }
            on_the_way.pop();
            arrival[i] = at as f64 / 1e6;
            refused |= sched.submit(i as u64, input_len, output_len).is_err();
        }
        let Some(step) = sched.next_step() else {
            // Idle: the engine waits for the next request to arrive.
            match on_the_way.peek() {
                Some(Reverse((at, _))) => {
                    t = t.max(*at as f64 / 1e6);
                    continue;
                }
                None => break,
            }
        };
        if let StepKind::Decode { batch } = step.kind
            && params.crashes_at(batch)
        {
            crashed = true;
            break;
        }
        t += step.ms * scale;
        for e in &step.emits {
            let i = e.id as usize;
            if e.count == 1 {
                ttft.push(t - arrival[i]);
            } else {
                itl.push(t - last[i]);
            }
            last[i] = t;
            if e.finished {
                e2e.push(t - arrival[i]);
                done += 1;
                if issued < n {
                    on_the_way.push(Reverse((ns(t + client_delay_ms(issued)), issued)));
                    issued += 1;
                }
            }
        }
    }
    if crashed || refused || done == 0 {
        return LevelPrediction {
            concurrency: c,
            requests: n as u32,
            crashed: true,
            duration_s: t / 1e3,
            output_tokens_per_s: 0.0,
            requests_per_s: 0.0,
            ttft_ms_p50: 0.0,
            ttft_ms_p99: 0.0,
            itl_ms_p50: 0.0,
            itl_ms_p99: 0.0,
            e2e_ms_p50: 0.0,
            e2e_ms_p99: 0.0,
        };
    }
    let secs = t / 1e3;
    LevelPrediction {
        concurrency: c,
        requests: n as u32,
        crashed: false,
        duration_s: secs,
        output_tokens_per_s: (done as f64 * f64::from(output_len)) / secs,
        requests_per_s: done as f64 / secs,
        ttft_ms_p50: pct(&mut ttft, 50.0),
        ttft_ms_p99: pct(&mut ttft, 99.0),
        itl_ms_p50: pct(&mut itl, 50.0),
        itl_ms_p99: pct(&mut itl, 99.0),
        e2e_ms_p50: pct(&mut e2e, 50.0),
        e2e_ms_p99: pct(&mut e2e, 99.0),
    }
}

/// Requests a prediction runs per level: enough rounds that ramp-up and drain do not dominate.
pub fn default_requests(concurrency: u32) -> u32 {
    (concurrency.max(1) * 8).max(64)
}

/// Output tokens per second (wall clock) a closed loop at `concurrency` is predicted to reach;
/// 0 when the engine crashes at that load.
pub fn steady_state_throughput(
    params: &ModelParams,
    concurrency: u32,
    input_len: u32,
    output_len: u32,
) -> f64 {
    closed_loop(
        params,
        concurrency,
        input_len,
        output_len,
        default_requests(concurrency),
    )
    .output_tokens_per_s
}

/// The highest concurrency whose closed-loop level meets `slo` (0 if even 1 does not), found by
/// doubling then bisecting; assumes latency does not fall as concurrency rises (true of this
/// model). Searches up to 16,384.
pub fn knee(params: &ModelParams, input_len: u32, output_len: u32, slo: Slo) -> u32 {
    let meets =
        |c: u32| closed_loop(params, c, input_len, output_len, default_requests(c)).meets(&slo);
    if !meets(1) {
        return 0;
    }
    let mut lo = 1u32;
    let mut hi = 2u32;
    while hi <= 16_384 && meets(hi) {
        lo = hi;
        hi *= 2;
    }
    if hi > 16_384 {
        return lo;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if meets(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_args;

    fn params(flags: &str) -> ModelParams {
        let v: Vec<String> = flags.split_whitespace().map(String::from).collect();
        ModelParams::from_args(&parse_args(&v).unwrap()).unwrap()
    }

    const A: &str = "--moe-runner-backend triton";
    const B: &str = "--moe-runner-backend flashinfer_cutlass --max-running-requests 512 \
                     --crash-above-batch 384 --crash-backend flashinfer_cutlass";

    fn tput(flags: &str, c: u32) -> LevelPrediction {
        closed_loop(&params(flags), c, 256, 128, default_requests(c))
    }

    #[test]
    fn quickstart_story_emerges() {
        for c in [1, 8] {
            let (a, b) = (tput(A, c), tput(B, c));
            let r = b.output_tokens_per_s / a.output_tokens_per_s;
            assert!((0.88..0.96).contains(&r), "c={c}: B/A {r:.3}");
        }
        for c in [128, 256] {
            let (a, b) = (tput(A, c), tput(B, c));
            let r = b.output_tokens_per_s / a.output_tokens_per_s;
            assert!(r > 1.15, "c={c}: B/A {r:.3}");
        }
        assert!(!tput(A, 512).crashed);
        assert!(tput(B, 512).crashed);
    }

    #[test]
    fn throughput_grows_with_batch_up_to_the_cap() {
        let p = params("--max-running-requests 64");
        let t: Vec<f64> = [1, 8, 32, 64, 128, 256]
            .iter()
            .map(|&c| steady_state_throughput(&p, c, 256, 128))
            .collect();
        assert!(t.windows(2).take(3).all(|w| w[1] > w[0] * 1.2), "{t:?}");
        // Above the cap, requests queue: no more throughput, and TTFT grows instead.
        assert!((t[5] / t[3] - 1.0).abs() < 0.03, "{t:?}");
        let q = closed_loop(&p, 256, 256, 128, 512);
        let u = closed_loop(&p, 64, 256, 128, 512);
        assert!(q.ttft_ms_p50 > 4.0 * u.ttft_ms_p50);
    }

    #[test]
    fn time_scale_and_slowdown_scale_predictions() {
        let base = steady_state_throughput(&params(""), 32, 128, 64);
        let fast = steady_state_throughput(&params("--time-scale 0.1"), 32, 128, 64);
        let slow = steady_state_throughput(&params("--slowdown 1.1"), 32, 128, 64);
        // Not exactly x10: the client's reaction time is wall-clock and does not scale.
        assert!((fast / base - 10.0).abs() < 0.3, "{}", fast / base);
        assert!((base / slow - 1.1).abs() < 0.01, "{}", base / slow);
    }

    /// A search space of 3 flags has one clear best under an ITL budget.
    #[test]
    fn search_space_has_single_clear_best() {
        let slo = Slo {
            ttft_p99_ms: Some(2000.0),
            itl_p99_ms: Some(30.0),
            e2e_p99_ms: None,
        };
        let mut results = Vec::new();
        for backend in ["triton", "flashinfer_cutlass", "deep_gemm", "cutlass"] {
            for graph in ["", "--disable-cuda-graph"] {
                for mrr in [64, 128, 256] {
                    let flags = format!(
                        "--moe-runner-backend {backend} {graph} --max-running-requests {mrr}"
                    );
                    let pr = closed_loop(&params(&flags), 256, 256, 128, 1024);
                    let score = if pr.meets(&slo) {
                        pr.output_tokens_per_s
                    } else {
                        0.0
                    };
                    results.push((score, flags));
                }
            }
        }
        results.sort_by(|a, b| b.0.total_cmp(&a.0));
        for r in &results {
            println!("{:10.1} {}", r.0, r.1);
        }
        let (best, second) = (&results[0], &results[1]);
        assert!(best.0 > 0.0);
        assert!(best.0 > second.0 * 1.03, "best {best:?} second {second:?}");
    }

    #[test]
    fn knee_is_the_last_level_meeting_the_slo() {
        let p = params("--moe-runner-backend triton");
        let slo = Slo {
            ttft_p99_ms: None,
            itl_p99_ms: Some(20.0),
            e2e_p99_ms: None,
        };
        let k = knee(&p, 256, 128, slo);
        assert!(k > 8 && k < 512, "knee {k}");
        let at = |c| closed_loop(&p, c, 256, 128, default_requests(c));
        assert!(at(k).meets(&slo));
        assert!(!at(k + 1).meets(&slo));
        // A crash caps the knee.
        let c = params("--moe-runner-backend triton --crash-above-batch 16");
        assert!(knee(&c, 256, 128, slo) <= 16);
    }
}
