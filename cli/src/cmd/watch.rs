//! `fleetbench watch ID`: a job's events, with a progress bar per host (the levels of the trial
//! it runs) and one for the whole job. [`follow`] is shared with `fleetbench run`.

use fleetbench_proto::Word;
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use fleetbench_proto::agentpb::{LevelOutcome, LevelResult, engine_event};
use fleetbench_proto::controllerpb::{
    Job, JobState, TrialEvent, TrialState, WatchJobRequest, job_event,
};
use fleetbench_spec::level_label;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::jobs::{Client, ControllerArgs, connect};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job to follow.
    pub job_id: String,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Print each event as a line of JSON on stdout instead of progress bars.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut client = connect(args.controller.url()?, &args.controller).await?;
    let job = if args.json {
        let url = args.controller.url()?;
        super::watch_json::follow_json(&mut client, &args.job_id, url, &args.controller).await?
    } else {
        let url = args.controller.url()?;
        follow(&mut client, &args.job_id, url, &args.controller).await?
    };
    Ok(exit_code(&job))
}

/// 0 for a succeeded job, 1 otherwise.
pub fn exit_code(job: &Job) -> ExitCode {
    if job.state == JobState::Succeeded as i32 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

struct Bars {
    mp: MultiProgress,
    job: ProgressBar,
    hosts: HashMap<String, ProgressBar>,
    /// The job's counts between its state snapshots (which come at its start and end).
    state: String,
    trials_done: u32,
    trials_total: u32,
    crashes: u32,
}

impl Bars {
    fn new() -> Self {
        let mp = MultiProgress::new();
        let job = mp.add(ProgressBar::new(0));
        job.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} levels  {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        job.set_prefix("job");
        job.enable_steady_tick(Duration::from_millis(250));
        Bars {
            mp,
            job,
            hosts: HashMap::new(),
            state: String::new(),
            trials_done: 0,
            trials_total: 0,
            crashes: 0,
        }
    }

    fn job_message(&self) {
        self.job.set_message(format!(
            "{}  trials {}/{}  crashes {}",
            self.state, self.trials_done, self.trials_total, self.crashes
        ));
    }

    fn line(&self, text: String) {
        if self.mp.is_hidden() {
            println!("{text}");
        } else {
            let _ = self.mp.println(text);
        }
    }

    fn host(&mut self, host: &str) -> &ProgressBar {
        let mp = &self.mp;
        self.hosts.entry(host.to_string()).or_insert_with(|| {
            let b = mp.add(ProgressBar::new(0));
            b.set_style(
                ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_prefix(host.to_string());
            b
        })
    }

    fn finish(&self) {
        for b in self.hosts.values() {
            b.finish_and_clear();
        }
        self.job.finish_and_clear();
    }
}

fn pct(r: &LevelResult, which: &str, key: &str) -> f64 {
    let d = match which {
        "ttft" => &r.ttft_ms,
        "itl" => &r.itl_ms,
        _ => &r.e2e_ms,
    };
    d.as_ref()
        .and_then(|d| d.percentiles.get(key).copied())
        .unwrap_or(f64::NAN)
}

fn level_line(host: &str, config: &str, r: &LevelResult) -> String {
    let label = r.level.as_ref().map(level_label).unwrap_or_default();
    if r.outcome == LevelOutcome::Crashed as i32 {
        let summary = r
            .crash
            .as_ref()
            .map(|c| c.summary.clone())
            .unwrap_or_default();
        return format!("  {host:<12} {config:<16} {label:<10} CRASHED: {summary}");
    }
    format!(
        "  {host:<12} {config:<16} {label:<10} {:>9.1} tok/s {:>7.2} req/s  TTFT p50 {:>7.1} p99 {:>7.1} ms  ITL p99 {:>6.1} ms{}",
        r.output_tokens_per_s,
        r.requests_per_s,
        pct(r, "ttft", "p50"),
        pct(r, "ttft", "p99"),
        pct(r, "itl", "p99"),
        level_notes(r)
    )
}

/// What a reader of a level's line must know about its figures: failures, a burst, the
/// engine's cache hits.
fn level_notes(r: &LevelResult) -> String {
    let mut out = String::new();
    if r.failed > 0 {
        out.push_str(&format!(
            "  {} errors ({:.1}%)",
            r.failed,
            100.0 * r.error_rate
        ));
    }
    if r.burst {
        out.push_str("  burst");
    }
    if let Some(h) = r.prefix_cache.as_ref().and_then(|c| c.hit_rate)
        && h > 0.0
    {
        out.push_str(&format!("  cache hits {:.0}%", 100.0 * h));
    }
    out
}

fn trial_state(t: &TrialEvent) -> TrialState {
    TrialState::try_from(t.state).unwrap_or(TrialState::Unspecified)
}

/// How long [`follow`] keeps trying to find a leading controller after its watch was cut
/// (a takeover takes seconds; see docs/controller.md).
const REJOIN_FOR: Duration = Duration::from_secs(60);

/// Follows a job until it ends; returns its final state. When the controller stops leading
/// (deposed, frozen, killed) the watch goes on at the leader (see [`follow_events`]).
pub async fn follow(
    client: &mut Client,
    job_id: &str,
    url: &str,
    args: &ControllerArgs,
) -> anyhow::Result<Job> {
    // Both closures reach the bars, one at a time (a note is printed only between events).
    let bars = std::cell::RefCell::new(Bars::new());
    let last = follow_events(
        client,
        job_id,
        url,
        args,
        |note| bars.borrow().line(note),
        |ev| show(&mut bars.borrow_mut(), ev),
    )
    .await?;
    bars.into_inner().finish();
    let job = last.context("the watch ended before the job's state was sent")?;
    println!(
        "job {} ({}): {}  trials {}/{}  levels {}/{}  crashes {}{}",
        job.id,
        job.name,
        JobState::word_of(job.state),
        job.trials_done,
        job.trials_total,
        job.levels_done,
        job.levels_total,
        job.crashes,
        if job.error.is_empty() {
            String::new()
        } else {
            format!("\n  error: {}", job.error)
        }
    );
    Ok(job)
}

/// The watch loop both renderings share: `on` sees each event once and returns the job's state
/// when the event carries it; the loop ends at a final state or when the stream ends. When the
/// controller stops leading (deposed, frozen, killed) the watch goes on at the leader: the one
/// the deposed controller names, else the first of `url` (the `--controller` list) that leads,
/// with a `note` saying so. Events the new watch replays from before the cut are not passed on
/// twice. Returns the last state seen.
pub(crate) async fn follow_events(
    client: &mut Client,
    job_id: &str,
    url: &str,
    args: &ControllerArgs,
    note: impl Fn(String),
    mut on: impl FnMut(fleetbench_proto::controllerpb::JobEvent) -> Option<Job>,
) -> anyhow::Result<Option<Job>> {
    let mut last: Option<Job> = None;
    // The newest event passed on: a watch opened after a cut replays the job's stored past,
    // and what is older than `replayed_before` was passed on by the watch before it.
    let mut shown_ms = 0i64;
    let mut replayed_before = 0i64;
    'watch: loop {
        let opened = client
            .watch_job(WatchJobRequest {
                job_id: job_id.to_string(),
            })
            .await;
        let mut stream = match opened {
            Ok(s) => s.into_inner(),
            Err(s) if shown_ms > 0 && rejoinable(&s) => {
                *client = rejoin(&note, &s, url, args).await?;
                replayed_before = shown_ms;
                continue 'watch;
            }
            Err(s) => return Err(s).with_context(|| format!("WatchJob {job_id}")),
        };
        loop {
            let ev = match stream.message().await {
                Ok(Some(ev)) => ev,
                Ok(None) => break 'watch,
                Err(s) if rejoinable(&s) => {
                    *client = rejoin(&note, &s, url, args).await?;
                    replayed_before = shown_ms;
                    continue 'watch;
                }
                Err(s) => return Err(s).context("watching the job"),
            };
            let is_job = matches!(ev.event, Some(job_event::Event::Job(_)));
            if !is_job && ev.unix_ms < replayed_before {
                continue;
            }
            shown_ms = shown_ms.max(ev.unix_ms).max(1);
            if let Some(job) = on(ev) {
                let done = JobState::is_final_value(job.state);
                last = Some(job);
                if done {
                    break 'watch;
                }
            }
        }
    }
    Ok(last)
}

/// A cut watch worth following elsewhere: the controller stopped leading or went away.
fn rejoinable(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// A client of the leader after a cut: the one the deposed controller named, else the first
/// leading controller of `url`, tried every second for [`REJOIN_FOR`].
async fn rejoin(
    note: &dyn Fn(String),
    why: &tonic::Status,
    url: &str,
    args: &ControllerArgs,
) -> anyhow::Result<Client> {
    let named = why
        .metadata()
        .get(super::jobs::LEADER_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|l| !l.is_empty())
        .map(str::to_string);
    note(format!(
        "  the watch was cut ({}): following the job at {}",
        why.message(),
        named.as_deref().unwrap_or("the leading controller")
    ));
    let start = std::time::Instant::now();
    loop {
        let target = named.as_deref().unwrap_or(url);
        match connect(target, args).await {
            Ok(c) => return Ok(c),
            Err(_) if start.elapsed() < REJOIN_FOR => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if named.is_some() && start.elapsed() > Duration::from_secs(10) {
                    // The named leader did not answer: look among all addresses instead.
                    return Box::pin(rejoin(note, &tonic::Status::unavailable(""), url, args))
                        .await;
                }
            }
            Err(e) => return Err(e.context(format!("no leading controller within {REJOIN_FOR:?}"))),
        }
    }
}

/// Shows one event; the job's state when the event carries it.
fn show(bars: &mut Bars, ev: fleetbench_proto::controllerpb::JobEvent) -> Option<Job> {
    {
        match ev.event {
            Some(job_event::Event::Job(j)) => {
                bars.job.set_length(u64::from(j.levels_total));
                bars.job.set_position(u64::from(j.levels_done));
                bars.state = JobState::word_of(j.state);
                bars.trials_done = j.trials_done;
                bars.trials_total = j.trials_total;
                bars.crashes = j.crashes;
                bars.job_message();
                return Some(j);
            }
            Some(job_event::Event::Trial(t)) => {
                let state = trial_state(&t);
                let bar = bars.host(&t.host).clone();
                match state {
                    TrialState::StartingEngine => {
                        bar.set_length(u64::from(t.level_count));
                        bar.set_position(0);
                        bar.set_message(format!(
                            "{} / {} #{} starting engine",
                            t.config_name,
                            t.workload,
                            t.repeat + 1
                        ));
                    }
                    TrialState::Running => {
                        bar.set_message(format!(
                            "{} / {} #{}",
                            t.config_name,
                            t.workload,
                            t.repeat + 1
                        ));
                    }
                    TrialState::Done => {
                        bar.set_message("idle");
                        bars.trials_done += 1;
                        bars.job_message();
                    }
                    TrialState::EngineFailed
                    | TrialState::HostLost
                    | TrialState::Interrupted
                    | TrialState::Cancelled => {
                        bars.line(format!(
                            "  {:<12} {:<16} trial {} #{} attempt {}: {}: {}",
                            t.host,
                            t.config_name,
                            t.workload,
                            t.repeat + 1,
                            t.attempt,
                            state.word(),
                            t.reason
                        ));
                        bar.set_message("idle");
                        if state == TrialState::EngineFailed {
                            bars.trials_done += 1;
                            bars.crashes += 1;
                            bars.job_message();
                        }
                    }
                    _ => {}
                }
            }
            Some(job_event::Event::Engine(e)) => match e.event.and_then(|e| e.event) {
                Some(engine_event::Event::Ready(r)) => {
                    bars.line(format!(
                        "  {:<12} engine ready in {:.1}s",
                        e.host, r.elapsed_s
                    ));
                }
                Some(engine_event::Event::Failed(c)) => {
                    bars.line(format!("  {:<12} engine failed: {}", e.host, c.summary));
                }
                _ => {}
            },
            Some(job_event::Event::Progress(p)) => {
                if let Some(pr) = p.progress {
                    let bar = bars.host(&p.host).clone();
                    let total = if pr.total > 0 {
                        format!("/{}", pr.total)
                    } else {
                        String::new()
                    };
                    bar.set_message(format!(
                        "{} level {}: {}{} requests{}",
                        p.config_name,
                        pr.level_index + 1,
                        pr.completed,
                        total,
                        if pr.failed > 0 {
                            format!(", {} failed", pr.failed)
                        } else {
                            String::new()
                        }
                    ));
                }
            }
            Some(job_event::Event::Level(l)) => {
                if let Some(r) = &l.result {
                    bars.line(level_line(&l.host, &l.config_name, r));
                    if r.outcome == LevelOutcome::Crashed as i32 {
                        bars.crashes += 1;
                        bars.job_message();
                    }
                }
                bars.host(&l.host).inc(1);
                bars.job.inc(1);
            }
            Some(job_event::Event::Message(m)) => bars.line(format!("  {m}")),
            None => {}
        }
    }
    None
}
