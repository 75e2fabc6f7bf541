//! `RunBenchmark`: the load generator against the engine on loopback, one level at a time,
//! watching the supervisor so a crash ends the level as `crashed` instead of hanging; or
//! against an external target (see `external`), whose process is not the agent's to watch.

use std::time::Duration;

use fleetbench_loadgen::Runner;
use fleetbench_proto::agentpb::{
    self, BenchmarkEvent, EngineState, LevelOutcome, benchmark_event::Event,
};
use fleetbench_proto::now_unix_ms;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::cache::CacheSource;
use crate::convert;
use crate::lease::Leases;
use crate::replicas::Replicas;
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

/// When the lease the run was started under (`epoch`, 0: none) no longer holds: the run must
/// end without reporting the level in progress.
fn fenced(leases: &Leases, epoch: u64, index: usize) -> Option<tonic::Status> {
    let live = *leases.watch().borrow();
    (live != epoch).then(|| {
        let note = leases.view().1;
        tonic::Status::aborted(if epoch == 0 {
            format!(
                "a lease (epoch {live}) was acquired during the unleased benchmark; level \
                 {index} is not reported"
            )
        } else {
            format!(
                "fenced: lease epoch {epoch} ended during the benchmark; level {index} is not \
                 reported ({})",
                if note.is_empty() {
                    "released"
                } else {
                    note.as_str()
                }
            )
        })
    })
}

/// What the load is driven against.
pub enum Target {
    /// The engine this agent started (generation `generation`): a crash ends the level.
    Engine {
        state: watch::Receiver<Snapshot>,
        generation: u64,
    },
    /// An endpoint the agent does not own; its cache counters, if any, from these endpoints.
    External(CacheSource),
}

/// Runs every level of `req` not in `skip_levels`, streaming progress and results on `tx`.
/// Ends after the last level, after a level the engine did not survive, or, with ABORTED and
/// without the level in progress, when the lease it runs under ends.
pub async fn run(
    runner: Runner,
    req: agentpb::RunBenchmarkRequest,
    target: Target,
    leases: Leases,
    tx: Tx,
) {
    match target {
        Target::Engine { state, generation } => {
            let plan = state.borrow().plan.clone();
            let source = plan.as_deref().map(CacheSource::of_plan);
            let replicas = plan.as_deref().and_then(Replicas::of_plan);
            let sources = Sources {
                plan,
                cache: source,
                replicas,
            };
            run_levels(runner, req, Some((state, generation)), sources, leases, tx).await
        }
        Target::External(source) => {
            let sources = Sources {
                plan: None,
                cache: Some(source),
                replicas: None,
            };
            run_levels(runner, req, None, sources, leases, tx).await
        }
    }
}

/// What a level's figures besides the load generator's are read from.
struct Sources {
    /// The engine (or router) the agent started; none for an external target.
    plan: Option<std::sync::Arc<crate::profile::LaunchPlan>>,
    /// Where the prefix-cache counters are.
    cache: Option<CacheSource>,
    /// A router's replicas, read one by one.
    replicas: Option<Replicas>,
}

async fn run_levels(
    runner: Runner,
    req: agentpb::RunBenchmarkRequest,
    mut engine: Option<(watch::Receiver<Snapshot>, u64)>,
    sources: Sources,
    leases: Leases,
    tx: Tx,
) {
    let Sources {
        plan,
        cache: source,
        replicas,
    } = sources;
    // An external target has no config of fleetbench's: its spans carry an empty config id.
    let config_id = plan
        .as_ref()
        .map(|p| p.config_id.clone())
        .unwrap_or_default();
    let epoch = req.lease_epoch;
    let mut lease = leases.watch();
    let http = crate::http::HttpClient::new();
    // A synchronized start applies to the first level this call measures.
    let mut start_at = (req.start_at_unix_ms != 0).then_some(req.start_at_unix_ms);
    for (index, level) in req.levels.iter().enumerate() {
        if req.skip_levels.contains(&(index as u32)) {
            continue;
        }
        let span = fleetbench_proto::bench_level_span!(
            index,
            level,
            fleetbench.run.id = %req.run_id,
            fleetbench.config.id = %config_id,
        );
        if let Some(s) = fenced(&leases, epoch, index) {
            tracing::warn!(parent: &span, "{}", s.message());
            let _ = tx.send(Err(s)).await;
            return;
        }
        let before = engine
            .as_ref()
            .and_then(|(state, generation)| interrupt_of(&state.borrow(), *generation));
        // The cache is emptied, and its counters read, outside the level's clock.
        let mut cache_before = None;
        let mut replicas_before = None;
        if let (Some(src), None) = (&source, &before) {
            let reset = match (&plan, req.reset_cache) {
                (_, false) => String::new(),
                (Some(p), true) => crate::cache::reset(&http, p).await,
                (None, true) => {
                    "not flushed: an external target's cache is not fleetbench's to empty".into()
                }
            };
            let counters = match &replicas {
                Some(r) => {
                    let snap = r.snapshot(&http).await;
                    let c = r.summed(&snap);
                    replicas_before = Some(snap);
                    c
                }
                None => crate::cache::counters(&http, src).await,
            };
            cache_before = Some((reset, counters));
        }
        if let Some(at) = start_at.take()
            && before.is_none()
        {
            let wait = Duration::from_millis(u64::try_from(at - now_unix_ms()).unwrap_or(0));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = tx.closed() => return,
            }
        }
        let started = now_unix_ms();
        let (report, histograms, interrupt) = match before {
            Some(i) => (fleetbench_loadgen::LevelReport::default(), None, Some(i)),
            None => {
                let watched = Watched {
                    engine: engine.as_mut(),
                    lease: &mut lease,
                    epoch,
                };
                run_level(&runner, index, level, watched, &tx, &span).await
            }
        };
        // A level finished under a lease that ended is not a result of the lease holder's.
        if let Some(s) = fenced(&leases, epoch, index) {
            tracing::warn!(parent: &span, "{}", s.message());
            let _ = tx.send(Err(s)).await;
            return;
        }
        let finished = now_unix_ms();
        let mut result = convert::level_result(index, level, &report);
        if req.histograms {
            result.histograms = histograms.as_ref().map(convert::histograms);
        }
        if let (Some(src), Some((reset, b)), None) = (&source, cache_before, &interrupt) {
            let a = match (&replicas, replicas_before) {
                (Some(r), Some(rb)) => {
                    let snap = r.snapshot(&http).await;
                    let a = r.summed(&snap);
                    result.deployment = Some(r.figure(
                        rb,
                        snap,
                        report.output_tokens_all,
                        report.prompt_tokens_all,
                    ));
                    a
                }
                _ => crate::cache::counters(&http, src).await,
            };
            let mut figure = crate::cache::figure(src.kind, b, a, report.prompt_tokens_all, reset);
            // The reuse the workload designs, on the same prompt tokens, beside the engine's.
            figure.designed_reuse = report.designed_reuse;
            figure.prompt_tokens_reusable = report.reusable_tokens_all;
            result.prefix_cache = Some(figure);
        }
        result.started_unix_ms = started;
        result.finished_unix_ms = finished;
        result.lease_epoch = epoch;
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

/// What a level watches besides its requests: the engine (none for an external target), and
/// the lease it runs under.
struct Watched<'a> {
    engine: Option<&'a mut (watch::Receiver<Snapshot>, u64)>,
    lease: &'a mut watch::Receiver<u64>,
    epoch: u64,
}

async fn run_level(
    runner: &Runner,
    index: usize,
    level: &agentpb::LoadLevel,
    w: Watched<'_>,
    tx: &Tx,
    span: &tracing::Span,
) -> (
    fleetbench_loadgen::LevelReport,
    Option<fleetbench_loadgen::LevelHists>,
    Option<Interrupt>,
) {
    let Watched {
        mut engine,
        lease,
        epoch,
    } = w;
    let watching = engine.is_some();
    let cancel = CancellationToken::new();
    let (ptx, mut prx) = mpsc::unbounded_channel();
    let lg_level = convert::level_from_proto(level);
    let fut = tracing::Instrument::instrument(
        runner.run_level_detailed(index, &lg_level, Some(ptx), cancel.clone(), false),
        span.clone(),
    );
    tokio::pin!(fut);
    let mut interrupt = None;
    let mut progress_open = true;
    let outcome = loop {
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
            changed = changed(engine.as_deref_mut()), if watching && !cancel.is_cancelled() => {
                let i = match (changed, engine.as_deref_mut()) {
                    (Ok(()), Some((state, generation))) => {
                        interrupt_of(&state.borrow_and_update(), *generation)
                    }
                    _ => Some(Interrupt::Replaced),
                };
                if i.is_some() {
                    interrupt = i;
                    cancel.cancel();
                }
            }
            changed = lease.changed(), if !cancel.is_cancelled() => {
                // The caller sees the fencing after the loop; the level stops at once.
                if changed.is_err() || *lease.borrow_and_update() != epoch {
                    cancel.cancel();
                }
            }
            _ = tx.closed(), if !cancel.is_cancelled() => cancel.cancel(),
        }
    };
    let (report, histograms) = (outcome.report, outcome.histograms);
    if let Some((state, generation)) = engine
        && interrupt.is_none()
        && report.failed > 0
    {
        let generation = *generation;
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
    (report, histograms, interrupt)
}

/// The engine's next state change; never, without an engine.
async fn changed(
    engine: Option<&mut (watch::Receiver<Snapshot>, u64)>,
) -> Result<(), watch::error::RecvError> {
    match engine {
        Some((state, _)) => state.changed().await,
        None => std::future::pending().await,
    }
}

fn record(span: &tracing::Span, r: &agentpb::LevelResult) {
    fleetbench_proto::spans::record_level(span, r);
    tracing::info!(parent: span, outcome = r.outcome, completed = r.completed, failed = r.failed, "level finished");
}
