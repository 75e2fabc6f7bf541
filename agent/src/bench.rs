//! `RunBenchmark`: the load generator against the engine on loopback, one level at a time,
//! watching the supervisor so a crash ends the level as `crashed` instead of hanging.

use std::time::Duration;

use fleetbench_loadgen::{Runner, percentile_key};
use fleetbench_proto::agentpb::{
    self, BenchmarkEvent, EngineState, LevelOutcome, benchmark_event::Event,
};
use fleetbench_proto::now_unix_ms;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::convert;
use crate::supervisor::Snapshot;

/// After a level with failed requests, how long to wait for the supervisor to report a crash
/// (the engine's exit may be noticed a moment after the requests fail).
const CRASH_SETTLE: Duration = Duration::from_secs(3);

type Tx = mpsc::Sender<Result<BenchmarkEvent, tonic::Status>>;

/// What ended a level besides finishing.
enum Interrupt {
    Crashed(agentpb::Crash),
    Replaced,
}

fn interrupt_of(s: &Snapshot, generation: u64) -> Option<Interrupt> {
    if s.generation == generation && s.state == EngineState::Ready {
        return None;
    }
    if s.generation == generation && s.state == EngineState::Failed {
        return Some(Interrupt::Crashed(s.last_crash.clone().unwrap_or_default()));
    }
    Some(Interrupt::Replaced)
}

async fn emit(tx: &Tx, e: Event) -> bool {
    tx.send(Ok(BenchmarkEvent {
        unix_ms: now_unix_ms(),
        event: Some(e),
    }))
    .await
    .is_ok()
}

/// Runs every level of `req` not in `skip_levels`, streaming progress and results on `tx`.
/// Ends after the last level, or after a level the engine did not survive.
pub async fn run(
    runner: Runner,
    req: agentpb::RunBenchmarkRequest,
    mut state: watch::Receiver<Snapshot>,
    generation: u64,
    tx: Tx,
) {
    let config_id = state
        .borrow()
        .plan
        .as_ref()
        .map(|p| p.config_id.clone())
        .unwrap_or_default();
    let plan = state.borrow().plan.clone();
    let http = crate::http::HttpClient::new();
    for (index, level) in req.levels.iter().enumerate() {
        if req.skip_levels.contains(&(index as u32)) {
            continue;
        }
        let span = tracing::info_span!(
            "bench.level",
            fleetbench.level.index = index as i64,
            fleetbench.concurrency = level.concurrency.map(i64::from),
            fleetbench.request_rate = level.request_rate,
            fleetbench.run.id = %req.run_id,
            fleetbench.config.id = %config_id,
            fleetbench.level.output_tokens_per_s = tracing::field::Empty,
            fleetbench.level.requests_per_s = tracing::field::Empty,
            fleetbench.level.ttft_p50_ms = tracing::field::Empty,
            fleetbench.level.ttft_p99_ms = tracing::field::Empty,
            fleetbench.level.itl_p50_ms = tracing::field::Empty,
            fleetbench.level.itl_p99_ms = tracing::field::Empty,
            fleetbench.level.e2e_p50_ms = tracing::field::Empty,
            fleetbench.level.e2e_p99_ms = tracing::field::Empty,
            fleetbench.level.errors = tracing::field::Empty,
            fleetbench.level.error_rate = tracing::field::Empty,
            fleetbench.level.prefix_cache_hit_rate = tracing::field::Empty,
            fleetbench.level.crashed = tracing::field::Empty,
        );
        let before = interrupt_of(&state.borrow(), generation);
        // The cache is emptied, and its counters read, outside the level's clock.
        let mut cache_before = None;
        if let (Some(p), None) = (&plan, &before) {
            let reset = if req.reset_cache {
                crate::cache::reset(&http, p).await
            } else {
                String::new()
            };
            cache_before = Some((reset, crate::cache::counters(&http, p).await));
        }
        let started = now_unix_ms();
        let (report, interrupt) = match before {
            Some(i) => (fleetbench_loadgen::LevelReport::default(), Some(i)),
            None => run_level(&runner, index, level, &mut state, generation, &tx, &span).await,
        };
        let finished = now_unix_ms();
        let mut result = convert::level_result(index, level, &report);
        if let (Some(p), Some((reset, b)), None) = (&plan, cache_before, &interrupt) {
            let a = crate::cache::counters(&http, p).await;
            result.prefix_cache = Some(crate::cache::figure(
                p,
                b,
                a,
                report.prompt_tokens_all,
                reset,
            ));
        }
        result.started_unix_ms = started;
        result.finished_unix_ms = finished;
        let stop = interrupt.is_some();
        match interrupt {
            Some(Interrupt::Crashed(crash)) => {
                result.outcome = LevelOutcome::Crashed as i32;
                if result.error.is_empty() {
                    result.error = format!("engine crashed: {}", crash.summary);
                }
                result.crash = Some(crash);
            }
            Some(Interrupt::Replaced) => {
                result.outcome = LevelOutcome::Failed as i32;
                result.error = "the engine was stopped or replaced during the level".into();
            }
            None => {}
        }
        record(&span, &result);
        if !emit(&tx, Event::Level(result)).await || stop {
            return;
        }
    }
}

async fn run_level(
    runner: &Runner,
    index: usize,
    level: &agentpb::LoadLevel,
    state: &mut watch::Receiver<Snapshot>,
    generation: u64,
    tx: &Tx,
    span: &tracing::Span,
) -> (fleetbench_loadgen::LevelReport, Option<Interrupt>) {
    let cancel = CancellationToken::new();
    let (ptx, mut prx) = mpsc::unbounded_channel();
    let lg_level = convert::level_from_proto(level);
    let fut = tracing::Instrument::instrument(
        runner.run_level(index, &lg_level, Some(ptx), cancel.clone()),
        span.clone(),
    );
    tokio::pin!(fut);
    let mut interrupt = None;
    let mut progress_open = true;
    let report = loop {
        tokio::select! {
            r = &mut fut => break r,
            p = prx.recv(), if progress_open => match p {
                Some(p) => {
                    if !emit(tx, Event::Progress(convert::progress(&p))).await {
                        cancel.cancel();
                    }
                }
                None => progress_open = false,
            },
            changed = state.changed(), if !cancel.is_cancelled() => {
                let i = match changed {
                    Ok(()) => interrupt_of(&state.borrow_and_update(), generation),
                    Err(_) => Some(Interrupt::Replaced),
                };
                if i.is_some() {
                    interrupt = i;
                    cancel.cancel();
                }
            }
            _ = tx.closed(), if !cancel.is_cancelled() => cancel.cancel(),
        }
    };
    if interrupt.is_none() && report.failed > 0 {
        // Failed requests are often the first sign of a crash: give the supervisor a moment.
        let settle = async {
            loop {
                if let Some(i) = interrupt_of(&state.borrow_and_update(), generation) {
                    return Some(i);
                }
                if state.changed().await.is_err() {
                    return Some(Interrupt::Replaced);
                }
            }
        };
        interrupt = tokio::time::timeout(CRASH_SETTLE, settle)
            .await
            .ok()
            .flatten();
    }
    (report, interrupt)
}

fn record(span: &tracing::Span, r: &agentpb::LevelResult) {
    let p = |d: &Option<agentpb::Distribution>, q: f64| {
        d.as_ref()
            .and_then(|d| d.percentiles.get(&percentile_key(q)).copied())
    };
    span.record(
        "fleetbench.level.output_tokens_per_s",
        r.output_tokens_per_s,
    );
    span.record("fleetbench.level.requests_per_s", r.requests_per_s);
    span.record("fleetbench.level.errors", r.failed as i64);
    span.record("fleetbench.level.error_rate", r.error_rate);
    if let Some(h) = r.prefix_cache.as_ref().and_then(|c| c.hit_rate) {
        span.record("fleetbench.level.prefix_cache_hit_rate", h);
    }
    span.record(
        "fleetbench.level.crashed",
        r.outcome == LevelOutcome::Crashed as i32,
    );
    for (field, d, q) in [
        ("fleetbench.level.ttft_p50_ms", &r.ttft_ms, 50.0),
        ("fleetbench.level.ttft_p99_ms", &r.ttft_ms, 99.0),
        ("fleetbench.level.itl_p50_ms", &r.itl_ms, 50.0),
        ("fleetbench.level.itl_p99_ms", &r.itl_ms, 99.0),
        ("fleetbench.level.e2e_p50_ms", &r.e2e_ms, 50.0),
        ("fleetbench.level.e2e_p99_ms", &r.e2e_ms, 99.0),
    ] {
        if let Some(v) = p(d, q) {
            span.record(field, v);
        }
    }
    tracing::info!(parent: span, outcome = r.outcome, completed = r.completed, failed = r.failed, "level finished");
}
