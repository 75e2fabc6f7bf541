//! The runner: resolves the model, builds prompts once, then runs load levels (closed or open
//! loop) and reduces what each request measured into a [`LevelReport`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::arrivals::{schedule, schedule_for, sleep_until_precise};
use crate::client::{Conn, Scratch, SetupClient, Target, call_json, stream_request};
use crate::config::{BenchConfig, Bound, DatasetSpec, Level};
use crate::dataset::{self, Prompt, Shaper};
use crate::error::{Failure, FailureKind, LoadgenError};
use crate::level::{Accum, Measured};
use crate::report::{LevelOutcome, LevelReport, Progress};
use crate::tokenize::Counter;

/// How long before its intended time an open-loop job is handed to a slot.
const HANDOFF_LEAD: Duration = Duration::from_millis(3);

/// Prompts built for a run whose bound is a duration (they are cycled).
const DURATION_POOL: usize = 1000;

/// Runs load levels against one server. Cheap to share: levels run one after another.
#[derive(Debug)]
pub struct Runner {
    cfg: BenchConfig,
    target: Target,
    model: String,
    prompts: Arc<Vec<Prompt>>,
    warmup: Arc<Vec<Prompt>>,
    shaping: Shaping,
}

/// How prompt lengths were shaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaping {
    /// `"tokenizer.json"`, `"server /tokenize"` or `"words (approximate)"`.
    pub source: String,
    /// Prompts whose token count could not be made exact.
    pub inexact: u32,
}

#[derive(Deserialize)]
struct Models {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

impl Runner {
    /// Validates the configuration, asks `/v1/models` for the model unless given, and builds
    /// every prompt (shaped to exact lengths where a tokenizer is at hand).
    pub async fn new(cfg: BenchConfig) -> Result<Runner, LoadgenError> {
        cfg.validate()?;
        let target = Target::resolve(&cfg.base_url).await?;
        let server_err = |message: String| LoadgenError::Server {
            url: target.base_url.clone(),
            message,
        };
        let model = match &cfg.model {
            Some(m) => m.clone(),
            None => {
                let (status, body) =
                    call_json(&target, http::Method::GET, "/v1/models", Bytes::new())
                        .await
                        .map_err(|m| server_err(format!("GET /v1/models: {m}")))?;
                if status != 200 {
                    return Err(server_err(format!(
                        "GET /v1/models: HTTP {status}: {}",
                        String::from_utf8_lossy(&body)
                    )));
                }
                let models: Models = serde_json::from_slice(&body)
                    .map_err(|e| server_err(format!("GET /v1/models: bad JSON: {e}")))?;
                models
                    .data
                    .into_iter()
                    .next()
                    .map(|m| m.id)
                    .ok_or_else(|| {
                        server_err("GET /v1/models lists no model; pass the model name".into())
                    })?
            }
        };
        let needs_shaping = matches!(
            cfg.dataset,
            DatasetSpec::Random { .. }
                | DatasetSpec::SharedPrefix { .. }
                | DatasetSpec::Trace { .. }
        ) || matches!(
            cfg.dataset,
            DatasetSpec::ShareGpt {
                output_len: None,
                ..
            }
        );
        let (counter, source) = match &cfg.tokenizer {
            Some(path) => (Some(Counter::local(path.clone())?), "tokenizer.json"),
            None if needs_shaping => {
                let c = Counter::server(SetupClient::new(target.clone()), &target.base_url).await?;
                let source = if c.is_some() {
                    "server /tokenize"
                } else {
                    "words (approximate)"
                };
                (c, source)
            }
            None => (None, "words (approximate)"),
        };
        let mut shaper = Shaper::new(counter).await?;
        let measured = match cfg.bound {
            Bound::Requests(n) => n as usize,
            Bound::Duration(_) => DURATION_POOL,
        };
        let seed = cfg.seed;
        let specs = dataset::build(
            &cfg.dataset,
            measured + cfg.warmup as usize,
            seed,
            &mut shaper,
        )
        .await?;
        let mut prompts: Vec<Prompt> = specs
            .iter()
            .map(|p| dataset::body(cfg.api, &model, p, cfg.ignore_eos))
            .collect();
        let warmup = if matches!(cfg.dataset, DatasetSpec::Trace { .. }) {
            prompts.iter().take(cfg.warmup as usize).cloned().collect()
        } else {
            prompts.split_off(
                prompts
                    .len()
                    .saturating_sub(cfg.warmup as usize)
                    .max(1.min(prompts.len())),
            )
        };
        if prompts.is_empty() {
            return Err(LoadgenError::Shaping("the dataset gave no prompts".into()));
        }
        let shaping = Shaping {
            source: source.to_string(),
            inexact: shaper.inexact,
        };
        if shaper.inexact > 0 {
            tracing::warn!(
                inexact = shaper.inexact,
                "some prompts could not be shaped to their exact token length"
            );
        }
        Ok(Runner {
            cfg,
            target,
            model,
            prompts: Arc::new(prompts),
            warmup: Arc::new(warmup),
            shaping,
        })
    }

    /// The model name sent with every request.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// How prompt lengths were shaped.
    pub fn shaping(&self) -> &Shaping {
        &self.shaping
    }

    /// The configuration this runner was built with.
    pub fn config(&self) -> &BenchConfig {
        &self.cfg
    }

    /// Runs one level; cancelling the token ends it early and returns what was measured with
    /// `cancelled = true`.
    pub async fn run_level(
        &self,
        index: usize,
        level: &Level,
        progress: Option<UnboundedSender<Progress>>,
        cancel: CancellationToken,
    ) -> LevelReport {
        self.run_level_detailed(index, level, progress, cancel, false)
            .await
            .report
    }

    /// [`Runner::run_level`], also returning one record per request when `details` is set.
    pub async fn run_level_detailed(
        &self,
        index: usize,
        level: &Level,
        progress: Option<UnboundedSender<Progress>>,
        cancel: CancellationToken,
        details: bool,
    ) -> LevelOutcome {
        let mut report = LevelReport {
            concurrency: level.concurrency,
            request_rate: level.request_rate,
            ..Default::default()
        };
        let probe = BenchConfig {
            levels: vec![level.clone()],
            ..self.cfg.clone()
        };
        if let Err(e) = probe.validate() {
            report.error = Some(e.to_string());
            return LevelOutcome {
                report,
                records: Vec::new(),
            };
        }
        if self.cfg.warmup > 0 && !cancel.is_cancelled() {
            let slots = level.concurrency.unwrap_or(16).min(self.cfg.warmup).max(1);
            let warm = self.shared(index, self.warmup.clone(), false, Instant::now());
            let plan = Plan::Closed {
                slots,
                count: Some(self.cfg.warmup as u64),
                until: None,
            };
            let mut set = JoinSet::new();
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = drive(&warm, plan, &mut set) => {}
            }
            set.abort_all();
            while set.join_next().await.is_some() {}
        }
        let start = Instant::now();
        let shared = self.shared(index, self.prompts.clone(), details, start);
        let plan = self.plan(level);
        let total = plan.total();
        let mut set = JoinSet::new();
        let ticker = async {
            let mut iv = tokio::time::interval(Duration::from_millis(200));
            loop {
                iv.tick().await;
                send_progress(&progress, &shared, index, total);
            }
        };
        let cancelled = tokio::select! {
            _ = cancel.cancelled() => true,
            _ = drive(&shared, plan, &mut set) => false,
            _ = ticker => false,
        };
        set.abort_all();
        while set.join_next().await.is_some() {}
        send_progress(&progress, &shared, index, total);
        let acc = std::mem::take(&mut *shared.acc.lock().unwrap_or_else(|e| e.into_inner()));
        acc.finish(
            &mut report,
            &self.cfg,
            shared.began.get().copied().unwrap_or(start),
            shared.peak.load(Ordering::Relaxed),
            cancelled,
            shared.stop_reason(),
        );
        LevelOutcome {
            report,
            records: acc.records,
        }
    }

    fn shared(
        &self,
        index: usize,
        prompts: Arc<Vec<Prompt>>,
        details: bool,
        start: Instant,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            target: self.target.clone(),
            path: self.cfg.api.path(),
            prompts,
            timeout: self.cfg.request_timeout,
            level_index: index,
            details,
            start,
            slo: self.cfg.slo,
            acc: std::sync::Mutex::new(Accum::default()),
            next: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            idle: AtomicU32::new(0),
            connect_streak: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            stop_message: std::sync::Mutex::new(None),
            began: std::sync::OnceLock::new(),
        })
    }

    fn plan(&self, level: &Level) -> Plan {
        let is_trace = matches!(self.cfg.dataset, DatasetSpec::Trace { .. });
        let seed = self.cfg.seed ^ 0x9e37_79b9_7f4a_7c15;
        match (level.request_rate, is_trace) {
            (None, false) => {
                let slots = level.concurrency.unwrap_or(1);
                match self.cfg.bound {
                    Bound::Requests(n) => Plan::Closed {
                        slots,
                        count: Some(u64::from(n)),
                        until: None,
                    },
                    Bound::Duration(d) => Plan::Closed {
                        slots,
                        count: None,
                        until: Some(d),
                    },
                }
            }
            (_, true) => {
                let mut at: Vec<Duration> = self.prompts.iter().filter_map(|p| p.arrival).collect();
                match self.cfg.bound {
                    Bound::Requests(n) => at.truncate(n as usize),
                    Bound::Duration(d) => at.retain(|t| *t <= d),
                }
                Plan::Open {
                    arrivals: at,
                    cap: level.concurrency,
                }
            }
            (Some(rate), false) => {
                let arrivals = match self.cfg.bound {
                    Bound::Requests(n) => schedule(n as usize, rate, level.burstiness, seed),
                    Bound::Duration(d) => schedule_for(d, rate, level.burstiness, seed),
                };
                Plan::Open {
                    arrivals,
                    cap: level.concurrency,
                }
            }
        }
    }
}

fn send_progress(
    tx: &Option<UnboundedSender<Progress>>,
    sh: &Shared,
    index: usize,
    total: Option<u64>,
) {
    if let Some(tx) = tx {
        let _ = tx.send(Progress {
            level_index: index,
            completed: sh.completed.load(Ordering::Relaxed),
            failed: sh.failed.load(Ordering::Relaxed),
            total,
            elapsed: sh.start.elapsed(),
        });
    }
}

enum Plan {
    Closed {
        slots: u32,
        count: Option<u64>,
        until: Option<Duration>,
    },
    Open {
        arrivals: Vec<Duration>,
        cap: Option<u32>,
    },
}

impl Plan {
    fn total(&self) -> Option<u64> {
        match self {
            Plan::Closed { count, .. } => *count,
            Plan::Open { arrivals, .. } => Some(arrivals.len() as u64),
        }
    }
}

/// State shared by the slots of one level.
struct Shared {
    target: Target,
    path: &'static str,
    prompts: Arc<Vec<Prompt>>,
    timeout: Duration,
    level_index: usize,
    details: bool,
    start: Instant,
    slo: Option<crate::config::Slo>,
    acc: std::sync::Mutex<Accum>,
    next: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    in_flight: AtomicU32,
    peak: AtomicU32,
    idle: AtomicU32,
    connect_streak: AtomicU32,
    stop: AtomicBool,
    stop_message: std::sync::Mutex<Option<String>>,
    /// When the first request could go out (after the closed loop's connections are open).
    began: std::sync::OnceLock<Instant>,
}

impl Shared {
    fn stop_reason(&self) -> Option<String> {
        self.stop_message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Gives up on a level whose server cannot be reached at all, instead of spinning through
    /// every remaining request (or the whole duration) on refused connects.
    fn note_connect(&self, failure: Option<&Failure>, slots: u32) {
        match failure {
            Some(f) if matches!(f.kind, FailureKind::ConnectRefused | FailureKind::Connect) => {
                let streak = self.connect_streak.fetch_add(1, Ordering::Relaxed) + 1;
                if streak >= (3 * slots).max(10)
                    && self.completed.load(Ordering::Relaxed) == 0
                    && !self.stop.swap(true, Ordering::Relaxed)
                {
                    *self.stop_message.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                        "stopped after {streak} connection failures in a row: {}",
                        f.message
                    ));
                }
            }
            _ => self.connect_streak.store(0, Ordering::Relaxed),
        }
    }
}

struct Job {
    index: u64,
    intended: Instant,
}

async fn drive(sh: &Arc<Shared>, plan: Plan, set: &mut JoinSet<()>) {
    match plan {
        Plan::Closed {
            slots,
            count,
            until,
        } => {
            // Connect every slot before the clock starts, so the first requests do not carry
            // the connection set-up.
            let barrier = Arc::new(tokio::sync::Barrier::new(slots as usize + 1));
            for _ in 0..slots {
                let sh = sh.clone();
                let barrier = barrier.clone();
                set.spawn(async move {
                    let mut slot = Slot {
                        conn: Conn::open(sh.target.addr).await.ok(),
                        scratch: Scratch::default(),
                    };
                    barrier.wait().await;
                    let deadline = until.map(|d| Instant::now() + d);
                    // The next request is due the moment the last one ended: the time spent on
                    // its accounting is client queueing, and counts.
                    // Every stream is free from the same instant: the first wave's sends, one
                    // after another on this thread, count as queueing too.
                    let mut free_at = *sh.began.get_or_init(Instant::now);
                    loop {
                        if sh.stop.load(Ordering::Relaxed)
                            || deadline.is_some_and(|d| Instant::now() >= d)
                        {
                            break;
                        }
                        let index = sh.next.fetch_add(1, Ordering::Relaxed);
                        if count.is_some_and(|c| index >= c) {
                            break;
                        }
                        free_at = slot.run(&sh, index, free_at, slots).await;
                    }
                });
            }
            barrier.wait().await;
            sh.began.get_or_init(Instant::now);
            while set.join_next().await.is_some() {}
        }
        Plan::Open { arrivals, cap } => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            let start = Instant::now();
            let _ = sh.began.set(start);
            let mut slots = 0u32;
            let slot_limit = cap.unwrap_or(u32::MAX);
            for (i, at) in arrivals.iter().enumerate() {
                let intended = start + *at;
                // Hand the job over a little early; the slot waits for the exact instant itself,
                // so the hand-off between threads does not delay the send.
                tokio::time::sleep_until(
                    intended
                        .checked_sub(HANDOFF_LEAD)
                        .unwrap_or(intended)
                        .into(),
                )
                .await;
                if sh.stop.load(Ordering::Relaxed) {
                    break;
                }
                if sh.idle.load(Ordering::Relaxed) == 0 && slots < slot_limit {
                    slots += 1;
                    let (sh, rx) = (sh.clone(), rx.clone());
                    set.spawn(async move {
                        let mut slot = Slot {
                            conn: None,
                            scratch: Scratch::default(),
                        };
                        loop {
                            sh.idle.fetch_add(1, Ordering::Relaxed);
                            let job = rx.lock().await.recv().await;
                            sh.idle.fetch_sub(1, Ordering::Relaxed);
                            let Some(job) = job else { break };
                            sleep_until_precise(job.intended).await;
                            slot.run(&sh, job.index, job.intended, slot_limit.min(64))
                                .await;
                        }
                    });
                    // Let the new slot reach its receive before the job is queued.
                    tokio::task::yield_now().await;
                }
                if tx
                    .send(Job {
                        index: i as u64,
                        intended,
                    })
                    .is_err()
                {
                    break;
                }
            }
            drop(tx);
            while set.join_next().await.is_some() {}
        }
    }
}

/// One stream slot: a connection reused across its requests and reusable buffers.
struct Slot {
    conn: Option<Conn>,
    scratch: Scratch,
}

impl Slot {
    /// Runs one request; returns when its stream ended (or the failure was seen).
    async fn run(&mut self, sh: &Shared, index: u64, intended: Instant, slots: u32) -> Instant {
        let prompt = &sh.prompts[(index % sh.prompts.len() as u64) as usize];
        let now_in_flight = sh.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        sh.peak.fetch_max(now_in_flight, Ordering::Relaxed);
        let Slot { conn, scratch } = self;
        let outcome = tokio::time::timeout(sh.timeout, async {
            // A kept-alive connection the server closed while it sat idle fails before any
            // answer: that is no failure of the server under test, so retry once on a new one.
            let mut retried = false;
            loop {
                let usable = match conn.as_mut() {
                    Some(c) => c.usable().await,
                    None => false,
                };
                if !usable {
                    *conn = Some(Conn::open(sh.target.addr).await?);
                }
                let c = conn.as_mut().expect("connection set above");
                let req = sh
                    .target
                    .request(http::Method::POST, sh.path, prompt.body.clone());
                match stream_request(c, req, scratch).await {
                    Err(_) if !retried && c.send_failed && c.served > 0 => {
                        retried = true;
                        *conn = None;
                    }
                    other => return other,
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(Failure::new(
                FailureKind::Timeout,
                format!("no complete answer within {:?}", sh.timeout),
            ))
        });
        sh.in_flight.fetch_sub(1, Ordering::Relaxed);
        let ended = outcome.as_ref().map_or_else(|_| Instant::now(), |s| s.end);
        if outcome.is_err() || !conn.as_ref().is_some_and(Conn::is_open) {
            *conn = None;
        }
        sh.note_connect(outcome.as_ref().err(), slots);
        match &outcome {
            Ok(_) => sh.completed.fetch_add(1, Ordering::Relaxed),
            Err(_) => sh.failed.fetch_add(1, Ordering::Relaxed),
        };
        let m = Measured {
            index,
            intended,
            prompt,
            outcome,
            chunks: &scratch.chunks,
        };
        sh.acc.lock().unwrap_or_else(|e| e.into_inner()).add(
            m,
            sh.start,
            sh.slo.as_ref(),
            sh.details,
            sh.level_index,
        );
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent runs levels on spawned tasks: the futures must be `Send`, the runner `Sync`.
    #[test]
    fn run_level_future_is_send() {
        fn send<T: Send>(_: &T) {}
        fn sync<T: Sync>() {}
        sync::<Runner>();
        let check = |r: &'static Runner| {
            let f = r.run_level(
                0,
                &Level {
                    concurrency: Some(1),
                    request_rate: None,
                    burstiness: 1.0,
                },
                None,
                CancellationToken::new(),
            );
            send(&f);
        };
        let _ = check;
    }
}
