//! `fleetbench watch ID --json`: the job's events as JSON Lines on stdout, one object per event
//! with an `event` key (`job`, `trial`, `engine_ready`, `engine_failed`, `progress`, `level`,
//! `message`), for scripts that follow a job instead of reading progress bars. The stream ends
//! with the job's final `job` event.

use fleetbench_proto::Word;
use fleetbench_proto::agentpb::{Distribution, LevelOutcome, engine_event};
use fleetbench_proto::controllerpb::{Job, JobEvent, JobState, TrialState, job_event};
use fleetbench_spec::level_label;
use serde_json::{Value, json};

use super::jobs::{Client, ControllerArgs};

fn dist(d: &Option<Distribution>) -> Value {
    match d {
        Some(d) => json!({
            "mean": d.mean,
            "percentiles": d.percentiles.iter().collect::<std::collections::BTreeMap<_, _>>(),
        }),
        None => Value::Null,
    }
}

fn job_json(j: &Job) -> Value {
    json!({
        "event": "job",
        "id": j.id,
        "name": j.name,
        "state": JobState::word_of(j.state),
        "trials_done": j.trials_done,
        "trials_total": j.trials_total,
        "levels_done": j.levels_done,
        "levels_total": j.levels_total,
        "crashes": j.crashes,
        "error": j.error,
    })
}

/// Follows a job until it ends, printing each event as a line of JSON; returns its final state.
/// A watch cut because the controller stopped leading goes on at the leader, as `watch` does,
/// with a `{"event": "watch_cut", "text": …}` line; replayed events are not printed twice.
pub async fn follow_json(
    client: &mut Client,
    job_id: &str,
    url: &str,
    args: &ControllerArgs,
) -> anyhow::Result<Job> {
    let last = super::watch::follow_events(
        client,
        job_id,
        url,
        args,
        |text| println!("{}", json!({ "event": "watch_cut", "text": text.trim() })),
        print_event,
    )
    .await?;
    match last {
        Some(j) if JobState::is_final_value(j.state) => Ok(j),
        _ => anyhow::bail!("the watch ended before the job's final state was sent"),
    }
}

/// Prints one event as a line of JSON; the job's state when the event carries it.
fn print_event(ev: JobEvent) -> Option<Job> {
    let line = match ev.event {
        Some(job_event::Event::Job(j)) => {
            println!("{}", job_json(&j));
            return Some(j);
        }
        Some(job_event::Event::Trial(t)) => json!({
            "event": "trial",
            "host": t.host,
            "config": t.config_name,
            "workload": t.workload,
            "repeat": t.repeat,
            "attempt": t.attempt,
            "state": TrialState::word_of(t.state),
            "reason": t.reason,
        }),
        Some(job_event::Event::Engine(e)) => match e.event.and_then(|x| x.event) {
            Some(engine_event::Event::Ready(r)) => {
                json!({ "event": "engine_ready", "host": e.host, "elapsed_s": r.elapsed_s })
            }
            Some(engine_event::Event::Failed(c)) => {
                json!({ "event": "engine_failed", "host": e.host, "summary": c.summary })
            }
            _ => return None,
        },
        Some(job_event::Event::Progress(p)) => match p.progress {
            Some(pr) => json!({
                "event": "progress",
                "host": p.host,
                "config": p.config_name,
                "level_index": pr.level_index,
                "completed": pr.completed,
                "failed": pr.failed,
                "total": pr.total,
            }),
            None => return None,
        },
        Some(job_event::Event::Level(l)) => match &l.result {
            Some(r) => json!({
                "event": "level",
                "host": l.host,
                "config": l.config_name,
                "level": r.level.as_ref().map(level_label),
                "crashed": r.outcome == LevelOutcome::Crashed as i32,
                "crash": r.crash.as_ref().map(|c| c.summary.clone()),
                "completed": r.completed,
                "failed": r.failed,
                "output_tokens_per_s": r.output_tokens_per_s,
                "requests_per_s": r.requests_per_s,
                "ttft_ms": dist(&r.ttft_ms),
                "itl_ms": dist(&r.itl_ms),
                "e2e_ms": dist(&r.e2e_ms),
            }),
            None => return None,
        },
        Some(job_event::Event::Message(m)) => json!({ "event": "message", "text": m }),
        None => return None,
    };
    println!("{line}");
    None
}
