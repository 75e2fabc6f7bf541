//! Trace replay against a real `llama-server` (CPU, SmolLM2-135M, one slot): a Mooncake-format
//! trace of 200 requests from 40 interleaved sessions is sent on its schedule (every request
//! once, at its timestamp; the send-time error stated), and the reuse its hash ids design is
//! what the server's own counter says it did not evaluate, within 5 points.
//!
//! The trace: every prompt starts with two system blocks all sessions share; a session's first
//! turn adds one block, each later turn repeats the whole blocks of its previous turn and adds
//! none or one, and every turn ends in a short partial block (whose id is new each turn, as a
//! block's hash changes when its text grows). Blocks are sent as 16 tokens
//! (`trace_block_tokens`), two output tokens each: little prefill per request, so that the
//! server keeps up with the schedule on a loaded two-core machine. Recorded over 73 s, replayed
//! twice as fast.
//!
//! What the server can reuse, and why the design matches it: llama-server with one slot keeps
//! the prompts it served in its host-RAM prompt cache (`--cache-ram`, on by default) and, with
//! `--slot-prompt-similarity 0`, looks there for every request, restoring the cached prompt that
//! shares the most with it: the reuse of the best single earlier prompt, which is the design
//! (the chain of ids a request shares with earlier ones is all one earlier request's). With the
//! default 0.1 a slot that shares a tenth of the new prompt and would keep half of its own is
//! used as it is, without looking: here another session's short first turn, sharing only the
//! system blocks, would cost a turn its history. The cache holds 8,192 tokens (`-c`), more than
//! the sessions in flight at once need. The measured figure is the agent's for llama.cpp:
//! 1 − `llamacpp:prompt_tokens_total` (tokens evaluated during the level) / prompt tokens sent;
//! it also counts what the design leaves out (words that match by chance where two blocks
//! differ).

use std::io::Write;
use std::time::Duration;

use fleetbench_loadgen::{Api, BenchConfig, Bound, DatasetSpec, Level, Runner};
use fleetbench_testkit::servers::LlamaServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

const SESSIONS: u64 = 40;
const TURNS: u64 = 5;
const BLOCK: u32 = 16;
const SPEEDUP: f64 = 2.0;

/// One generated request: its timestamp (ms), block ids, input length in 512-token blocks.
struct Req {
    at_ms: u64,
    ids: Vec<u64>,
    input_length: u32,
    /// Whole blocks of the session's history it repeats (besides the system blocks).
    history: usize,
}

/// The trace, in time order.
fn trace() -> Vec<Req> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut next_id = 2u64; // 0 and 1: the system blocks
    let mut reqs = Vec::new();
    for s in 0..SESSIONS {
        let mut history: Vec<u64> = Vec::new();
        for t in 0..TURNS {
            let at_ms = (s + t) * 1700 + rng.random_range(0..400);
            let new = if t == 0 { 1 } else { rng.random_range(0..=1) };
            let mut ids = vec![0, 1];
            ids.extend(&history);
            let fresh: Vec<u64> = (next_id..next_id + new).collect();
            ids.extend(&fresh);
            ids.push(next_id + new);
            next_id += new + 1;
            // At most 5 of the 16 tokens a block is sent as.
            let partial: u32 = rng.random_range(1..160);
            let input_length = (ids.len() as u32 - 1) * 512 + partial;
            reqs.push(Req {
                at_ms,
                ids,
                input_length,
                history: history.len(),
            });
            history.extend(fresh);
        }
    }
    reqs.sort_by_key(|r| r.at_ms);
    reqs
}

/// Tokens a request is sent as: whole blocks of 16, the last scaled from what it has of 512.
fn sent_tokens(r: &Req) -> u32 {
    let n = r.ids.len() as u32;
    let last = r.input_length - (n - 1) * 512;
    (n - 1) * BLOCK + (last * BLOCK).div_ceil(512)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mooncake_trace_is_replayed_on_schedule_with_the_reuse_it_designs() {
    let reqs = trace();
    let n = reqs.len();
    assert_eq!(n as u64, SESSIONS * TURNS);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for r in &reqs {
        let line = serde_json::json!({
            "timestamp": r.at_ms,
            "input_length": r.input_length,
            "output_length": 2,
            "hash_ids": r.ids,
        });
        writeln!(f, "{line}").unwrap();
    }
    drop(f);

    // One slot that looks in the host cache for every request, a context (and host cache) of
    // 8,192 tokens, HTTP threads for every connection the open loop may hold while requests
    // queue for the slot. One compute thread: ggml's threads wait for each other at every
    // operation, and on a loaded two-core machine two of them evaluated a prompt token in
    // 29 ms where one took 8.
    let llama = LlamaServer::start(
        &[
            "--metrics",
            "-np",
            "1",
            "-c",
            "8192",
            "--slot-prompt-similarity",
            "0",
            "-t",
            "1",
            "--threads-http",
            "16",
        ],
        None,
    );
    let cfg = BenchConfig {
        dataset: DatasetSpec::Trace {
            path: path.clone(),
            block_tokens: BLOCK,
            speedup: SPEEDUP,
        },
        // A cap well above what the server needs in flight: the trace sets the pace.
        levels: vec![Level::closed(64)],
        bound: Bound::Requests(n as u32),
        api: Api::Completions,
        request_timeout: Duration::from_secs(120),
        ..BenchConfig::new(llama.url())
    };
    let runner = Runner::new(cfg).await.expect("runner");
    assert_eq!(runner.shaping().source, "server /tokenize");
    assert_eq!(runner.shaping().inexact, 0, "every block is its length");

    let before = llama.metric("llamacpp:prompt_tokens_total");
    let out = runner
        .run_level_detailed(0, &Level::closed(64), None, CancellationToken::new(), true)
        .await;
    let evaluated = llama.metric("llamacpp:prompt_tokens_total") - before;
    let r = &out.report;
    assert_eq!(
        (r.completed, r.failed),
        (n as u64, 0),
        "{r:?}\n{}",
        llama.log_tail()
    );

    // Every request sent once, in trace order, at its timestamp divided by the speed-up.
    let mut recs = out.records.clone();
    recs.sort_by_key(|x| x.index);
    let indices: Vec<u64> = recs.iter().map(|x| x.index).collect();
    assert_eq!(indices, (0..n as u64).collect::<Vec<_>>());
    let t0 = recs[0].intended_ms;
    for (rec, req) in recs.iter().zip(&reqs) {
        let want = (req.at_ms - reqs[0].at_ms) as f64 / SPEEDUP;
        assert!(
            (rec.intended_ms - t0 - want).abs() < 0.01,
            "request {} intended at {} ms, the trace says {want}",
            rec.index,
            rec.intended_ms - t0
        );
        assert_eq!(rec.max_tokens, 2);
        assert_eq!(rec.input_tokens, u64::from(sent_tokens(req)));
    }
    // The send-time error: actual send − scheduled, from each request's record; the level's
    // queue_ms is the same figure.
    let mut err: Vec<f64> = recs
        .iter()
        .map(|x| x.sent_ms.expect("sent") - x.intended_ms)
        .collect();
    err.sort_by(f64::total_cmp);
    let mean = err.iter().sum::<f64>() / n as f64;
    let (p99, max) = (percentile(&err, 99.0), err[n - 1]);
    assert!(err[0] >= 0.0, "a request went out early: {:.3} ms", err[0]);
    assert_eq!(r.queue_ms.count, n as u64);
    let level_p99 = r.queue_ms.get("p99").unwrap();
    assert!(
        (level_p99 - p99).abs() <= 0.05 + 0.01 * p99,
        "{:?} against p99 {p99}",
        r.queue_ms
    );
    // On a loaded two-core machine a timer wake-up can be late by milliseconds; 50 ms would
    // be a schedule not kept.
    assert!(
        p99 < 50.0,
        "send error p99 {p99:.2} ms (mean {mean:.2}, max {max:.2})"
    );

    // The reuse the trace designs: the system blocks once the first request sent them, and
    // each session's history.
    let total: u64 = reqs.iter().map(|q| u64::from(sent_tokens(q))).sum();
    let reusable: u64 = reqs
        .iter()
        .skip(1)
        .map(|q| u64::from(BLOCK) * (2 + q.history as u64))
        .sum();
    assert_eq!(
        r.prompt_tokens_all, total,
        "prompt tokens as the server counted them"
    );
    assert_eq!(r.reusable_tokens_all, reusable);
    let designed = r
        .designed_reuse
        .expect("a trace of blocks states its reuse");
    let measured = 1.0 - evaluated / r.prompt_tokens_all as f64;
    let span = (reqs[n - 1].at_ms - reqs[0].at_ms) as f64 / SPEEDUP / 1000.0;
    println!(
        "trace replay: {n} requests over {span:.1} s (recorded {:.1} s, speed-up {SPEEDUP}); \
         send error mean {mean:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; designed reuse \
         {:.1}% ({} of {} prompt tokens), llama-server reused {:.1}% ({evaluated} evaluated); \
         TTFT p50 {:.1} ms, p99 {:.1} ms",
        span * SPEEDUP,
        designed * 100.0,
        r.reusable_tokens_all,
        r.prompt_tokens_all,
        measured * 100.0,
        r.ttft_ms.get("p50").unwrap_or(f64::NAN),
        r.ttft_ms.get("p99").unwrap_or(f64::NAN),
    );
    assert!(
        (designed - measured).abs() <= 0.05,
        "designed {designed:.3}, the server reused {measured:.3}\n{}",
        llama.log_tail()
    );
}
