//! One job's loop: hands its trials to free matching hosts, retries trials whose host was lost
//! on another host, and ends the job (succeeded, failed or cancelled) with every engine stopped.

use fleetbench_proto::Word;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::StopEngineRequest;
use fleetbench_proto::controllerpb::{JobState, RunState, TrialState, job_event};
use fleetbench_proto::now_unix_ms;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Ctx;
mod placement;

use super::trial::{self, TrialOutcome};
use crate::agents::HostSnapshot;
use crate::store::{StoreError, TrialRow};
use fleetbench_spec as spec;
use placement::{block, no_host_message, placeable};

/// Runs (or resumes) a job until it ends, the controller shuts down, or this controller stops
/// leading (`term` cancelled: the job stays `running` in the store for the next leader).
pub(super) async fn run_job(
    ctx: Arc<Ctx>,
    job_id: &str,
    cancel: CancellationToken,
    term: CancellationToken,
) {
    // A root span: one trace per job, whatever request or task happened to start it.
    let span = tracing::info_span!(
        parent: None,
        "job",
        fleetbench.job.id = %job_id,
        fleetbench.job.name = tracing::field::Empty,
    );
    let mut used_hosts = BTreeSet::new();
    let result = drive(&ctx, job_id, &cancel, &term, &mut used_hosts)
        .instrument(span)
        .await;
    let Err(e) = result else { return };
    if e.is_fenced() || term.is_cancelled() {
        // Another controller leads now (or this one is stopping): the job is its to resume.
        tracing::warn!(job = %job_id, error = %e, "job left to the next leader");
        return;
    }
    // A persistent store error: every trial has stopped and released its host; stop the
    // engines, then record the failure once the store takes writes again.
    tracing::error!(job = %job_id, error = %e, "job failed on a store error");
    stop_engines(&ctx, &used_hosts).await;
    let text = format!("store error: {e}");
    loop {
        match ctx
            .store
            .finish_job(job_id, JobState::Failed, &text, now_unix_ms())
            .await
        {
            Ok(()) => break,
            Err(e) if e.is_fenced() => return,
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "cannot record the job's failure yet");
                tokio::select! {
                    _ = term.cancelled() => return,
                    _ = tokio::time::sleep(FAILURE_RECORD_RETRY) => {}
                }
            }
        }
    }
    emit_job(&ctx, job_id).await;
    ctx.metrics.job_finished("sweep", "failed");
    ctx.metrics.job_series_expire(job_id);
    ctx.hub.forget(job_id);
}

/// Hosts a trial may be running on when they are lost before it stops (issue 22: a crashed
/// agent's trial was retried on the next host and killed that agent too).
const MAX_HOSTS_DIED: usize = 2;

/// How often a job that failed on the store tries to record that, once the store's own retry
/// budget is spent.
const FAILURE_RECORD_RETRY: Duration = Duration::from_secs(2);

async fn emit_job(ctx: &Ctx, job_id: &str) {
    if let Ok(Some(job)) = ctx.store.get_job(job_id).await {
        let _ = ctx.hub.emit(job_id, job_event::Event::Job(job)).await;
    }
}

async fn message(ctx: &Ctx, job_id: &str, text: String) -> Result<(), StoreError> {
    tracing::info!(job = %job_id, "{text}");
    ctx.hub.emit(job_id, job_event::Event::Message(text)).await
}

type TrialResult = (TrialRow, String, TrialOutcome);

/// Trials waiting for a host, in order, and the hosts each one was lost on.
struct Queue {
    trials: VecDeque<TrialRow>,
    lost: HashMap<String, BTreeSet<String>>,
    /// The hosts each trial was running on when they were lost, in order.
    died: HashMap<String, Vec<String>>,
    /// `order = "blocked"`: the host each (workload, repeat) block runs on, once its first
    /// trial has started.
    pins: HashMap<(u32, u32), String>,
    blocked: bool,
}

async fn drive(
    ctx: &Arc<Ctx>,
    job_id: &str,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
    used_hosts: &mut BTreeSet<String>,
) -> Result<(), StoreError> {
    let Some(job) = ctx.store.get_job(job_id).await? else {
        return Ok(());
    };
    tracing::Span::current().record("fleetbench.job.name", job.name.as_str());
    let spec = match spec::parse(&job.file_name, &job.spec_toml) {
        Ok(s) => Arc::new(s),
        Err(errors) => {
            let text = format!(
                "the stored spec no longer validates: {}",
                spec::render_errors(&errors)
            );
            ctx.store
                .finish_job(job_id, JobState::Failed, &text, now_unix_ms())
                .await?;
            emit_job(ctx, job_id).await;
            return Ok(());
        }
    };
    let resumed = job.state == JobState::Running as i32;
    ctx.store.mark_job_running(job_id, now_unix_ms()).await?;
    emit_job(ctx, job_id).await;

    if resumed {
        // Runs the previous controller left running died with it; their trials run again
        // (as new attempts) and skip the levels already stored.
        for mut run in ctx.store.runs(job_id).await? {
            if run.state == RunState::Running as i32 {
                run.state = RunState::HostLost as i32;
                run.finished_unix_ms = now_unix_ms();
                ctx.store.put_run(&run).await?;
            }
        }
        message(ctx, job_id, "controller restarted: resuming the job".into()).await?;
    }

    let mut queue = Queue {
        trials: ctx
            .store
            .trials(job_id)
            .await?
            .into_iter()
            .filter(|t| !t.is_finished())
            .collect(),
        lost: HashMap::new(),
        died: HashMap::new(),
        pins: HashMap::new(),
        blocked: spec.order.is_blocked(),
    };
    if queue.blocked && !resumed {
        let seed = spec.order_seed(job_id);
        message(
            ctx,
            job_id,
            format!(
                "trial order: blocked by host, each block's configs shuffled with seed {seed} \
                 (order_seed = {seed} reproduces it)"
            ),
        )
        .await?;
    }
    // Trials run under their own token: a persistent store error stops them all (each one's
    // host lease is a guard, released as its task ends, panicked or not).
    let trials = cancel.child_token();
    let mut running: JoinSet<TrialResult> = JoinSet::new();
    let sched = schedule(
        ctx,
        job_id,
        &spec,
        &mut queue,
        &mut running,
        &trials,
        cancel,
        shutdown,
        used_hosts,
    )
    .await;
    let failure = match sched {
        Ok(f) => f,
        Err(e) => {
            if e.is_fenced() {
                // Before the trials stop: none may stop an engine the new leader runs.
                ctx.mark_deposed();
            }
            trials.cancel();
            while running.join_next().await.is_some() {}
            return Err(e);
        }
    };

    if shutdown.is_cancelled() {
        // The controller is stopping, not the user: the job stays running for the next start.
        return Ok(());
    }
    let (state, error, label) = if cancel.is_cancelled() {
        for t in &queue.trials {
            ctx.store
                .set_trial_state(&t.id, TrialState::Cancelled, "job cancelled")
                .await?;
        }
        (JobState::Cancelled, String::new(), "cancelled")
    } else if let Some(f) = failure {
        (JobState::Failed, f, "failed")
    } else if let Some(f) = nothing_measured(ctx, job_id).await? {
        (JobState::Failed, f, "failed")
    } else {
        (JobState::Succeeded, String::new(), "succeeded")
    };
    stop_engines(ctx, used_hosts).await;
    // The trials' relays have handed over their last windows; store them before the job ends.
    ctx.telemetry.sync(Duration::from_secs(10)).await;
    ctx.store
        .finish_job(job_id, state, &error, now_unix_ms())
        .await?;
    emit_job(ctx, job_id).await;
    ctx.metrics.job_finished("sweep", label);
    ctx.metrics.job_series_expire(job_id);
    ctx.hub.forget(job_id);
    tracing::info!(job = %job_id, state = label, "job ended");
    Ok(())
}

/// Hands trials to hosts until none is left (or the job stops). Returns the job's failure, if
/// any; a store error returns at once, the caller stops the trials still running.
#[allow(clippy::too_many_arguments)]
async fn schedule(
    ctx: &Arc<Ctx>,
    job_id: &str,
    spec: &Arc<spec::JobSpec>,
    queue: &mut Queue,
    running: &mut JoinSet<TrialResult>,
    trials: &CancellationToken,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
    used_hosts: &mut BTreeSet<String>,
) -> Result<Option<String>, StoreError> {
    let mut waiting_since: Option<Instant> = None;
    let mut failure: Option<String> = None;
    let mut changes = ctx.inventory.subscribe();

    loop {
        let stop = cancel.is_cancelled() || failure.is_some();
        if !stop {
            while let Some((i, leases)) = placeable(ctx, spec, job_id, queue) {
                let mut t = queue.trials.remove(i).expect("index from placeable");
                if queue.blocked {
                    queue.pins.insert(block(&t), leases[0].host.clone());
                }
                t.attempts = ctx.store.next_attempt(&t.id).await?;
                used_hosts.extend(leases.iter().map(|l| l.host.clone()));
                let (ctx2, spec2, token) = (ctx.clone(), spec.clone(), trials.child_token());
                running.spawn(
                    async move {
                        let (host, outcome) =
                            trial::run_placed(&ctx2, &spec2, &t, leases, token).await;
                        (t, host, outcome)
                    }
                    .in_current_span(),
                );
            }
        }
        if running.is_empty() && (queue.trials.is_empty() || stop) {
            break;
        }
        if running.is_empty() {
            let since = *waiting_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= ctx.host_wait {
                failure = Some(no_host_message(ctx, spec, ctx.host_wait));
                continue;
            }
        } else {
            waiting_since = None;
        }
        tokio::select! {
            Some(joined) = running.join_next(), if !running.is_empty() => {
                match joined {
                    Ok((t, host, outcome)) => {
                        if let Some(f) = settle(ctx, job_id, t, &host, outcome, queue, shutdown).await? {
                            failure.get_or_insert(f);
                        }
                    }
                    Err(e) => {
                        // A panicked trial: its lease was dropped with its task, so its host
                        // is free again; the job records why it failed.
                        tracing::error!(job = %job_id, error = %e, "a trial task panicked");
                        failure.get_or_insert(format!("a trial task failed: {e}"));
                    }
                }
            }
            _ = changes.changed() => {}
            _ = cancel.cancelled(), if !cancel.is_cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    Ok(failure)
}

/// Records a trial attempt's end; requeues it after a lost host. Returns a job failure, if any.
async fn settle(
    ctx: &Ctx,
    job_id: &str,
    t: TrialRow,
    host: &str,
    outcome: TrialOutcome,
    queue: &mut Queue,
    shutdown: &CancellationToken,
) -> Result<Option<String>, StoreError> {
    if shutdown.is_cancelled() {
        return Ok(None);
    }
    match outcome {
        TrialOutcome::Done => {
            ctx.store
                .set_trial_state(&t.id, TrialState::Done, "")
                .await?;
        }
        TrialOutcome::EngineFailed(reason) => {
            ctx.store
                .set_trial_state(&t.id, TrialState::EngineFailed, &reason)
                .await?;
        }
        TrialOutcome::Cancelled => {
            ctx.store
                .set_trial_state(&t.id, TrialState::Cancelled, "job cancelled")
                .await?;
        }
        TrialOutcome::HostLost(reason) => {
            // The trial marked the host unreachable before its lease let go of it.
            let text = format!("trial {} lost host {host}", t.id);
            let retry = "retrying on another host";
            return retry_elsewhere(
                ctx,
                job_id,
                queue,
                t,
                host,
                TrialState::HostLost,
                text,
                &reason,
                retry,
            )
            .await;
        }
        TrialOutcome::DiedRunning(reason) => {
            // The trial may be what killed the agent (a spec that exhausts it): it runs on one
            // more host at most, whatever attempts are left, so it cannot take down the fleet.
            let died = queue.died.entry(t.id.clone()).or_default();
            died.push(host.to_string());
            if died.len() >= MAX_HOSTS_DIED {
                let hosts = died.join(" and ");
                let text = format!(
                    "trial {} stopped: hosts {hosts} were lost while running it (attempt {}; \
                     last: {reason}); it is not retried on another host, since a trial that \
                     kills agents would take down the fleet",
                    t.id, t.attempts
                );
                ctx.store
                    .set_trial_state(&t.id, TrialState::HostLost, &text)
                    .await?;
                message(ctx, job_id, text.clone()).await?;
                return Ok(Some(text));
            }
            let text = format!("trial {} lost host {host} while running", t.id);
            let retry = "retrying once on another host";
            return retry_elsewhere(
                ctx,
                job_id,
                queue,
                t,
                host,
                TrialState::HostLost,
                text,
                &reason,
                retry,
            )
            .await;
        }
        TrialOutcome::Interrupted(reason) => {
            // The host answers (its lease was taken, or another holder had it): not marked
            // unreachable. The level in progress was not stored; the trial runs again and
            // skips the levels already stored.
            let text = format!("trial {} interrupted on host {host}", t.id);
            let retry = "the level in progress is not stored; re-running the trial";
            return retry_elsewhere(
                ctx,
                job_id,
                queue,
                t,
                host,
                TrialState::Interrupted,
                text,
                &reason,
                retry,
            )
            .await;
        }
        TrialOutcome::Store(e) => return Err(e),
    }
    Ok(None)
}

/// A trial that lost its host or its lease, recorded in `state`: the job's failure when it has
/// no attempts left; else it goes first in the queue, away from `host`, and its block moves
/// with it (the notes of the results then name both hosts).
#[allow(clippy::too_many_arguments)]
async fn retry_elsewhere(
    ctx: &Ctx,
    job_id: &str,
    queue: &mut Queue,
    t: TrialRow,
    host: &str,
    state: TrialState,
    what: String,
    reason: &str,
    retry: &str,
) -> Result<Option<String>, StoreError> {
    ctx.store.set_trial_state(&t.id, state, reason).await?;
    let text = format!("{what} (attempt {}): {reason}", t.attempts);
    if t.attempts >= ctx.trial_attempts {
        message(ctx, job_id, format!("{text}; no attempts left")).await?;
        return Ok(Some(format!(
            "trial {} failed {} attempts; last: {reason}",
            t.id, t.attempts
        )));
    }
    message(ctx, job_id, format!("{text}; {retry}")).await?;
    queue.pins.remove(&block(&t));
    queue
        .lost
        .entry(t.id.clone())
        .or_default()
        .insert(host.to_string());
    queue.trials.push_front(t);
    Ok(None)
}

/// A job whose every trial failed to start its engine measured nothing: a failure, not a
/// result (one config failing to start, next to others that ran, is a result).
async fn nothing_measured(ctx: &Ctx, job_id: &str) -> Result<Option<String>, StoreError> {
    let trials = ctx.store.trials(job_id).await?;
    if trials.is_empty() || trials.iter().any(|t| t.state != TrialState::EngineFailed) {
        return Ok(None);
    }
    Ok(Some(format!(
        "nothing was measured: every trial's engine failed to start (first: {})",
        trials[0].reason
    )))
}

/// Stops the engine on every host the job used, in parallel (bounded wait per host).
async fn stop_engines(ctx: &Ctx, hosts: &BTreeSet<String>) {
    let stops = hosts.iter().filter_map(|h| {
        let mut client = ctx.inventory.client(h)?;
        let host = h.clone();
        Some(async move {
            let r = tokio::time::timeout(
                Duration::from_secs(60),
                // No epoch: refused where another job has leased the host since.
                client.stop_engine(StopEngineRequest { lease_epoch: 0 }),
            )
            .await;
            if !matches!(r, Ok(Ok(_))) {
                tracing::warn!(host = %host, "could not confirm the engine stopped at job end");
            }
        })
    });
    futures::future::join_all(stops).await;
}
