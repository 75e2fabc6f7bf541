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

use crate::arrivals::{schedule, schedule_for};
use crate::client::{SetupClient, Target, call_json};
use crate::config::{BenchConfig, Bound, DatasetSpec, Level};
use crate::dataset::conversation::{self, BodyOpts};
use crate::dataset::{self, Marker, Pool, Sessions, Shaper, hash_key, words_for_64_bits};
use crate::error::LoadgenError;
use crate::level::{Accum, Steady};
use crate::report::{LevelOutcome, LevelReport, Progress};
use crate::tokenize::Counter;

mod drive;
mod sessions;

use drive::{Plan, Shared, drive, send_progress};

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
    prompts: Arc<Pool>,
    warmup: Arc<Pool>,
    shaping: Shaping,
    /// Closed-loop streams start one after another over this span (zero: all at once).
    ramp_up: Duration,
    /// The measurement window after the ramp-up (`None`: until the last request is sent).
    window: Option<Duration>,
    /// Whether measurement leaves out a ramp-up and the drain ([`Runner::with_window`]).
    steady: bool,
    /// The one-token words request markers are spelled with.
    words: Arc<Vec<&'static str>>,
    /// Hash of the run's identity (job, trial, attempt): part of every request marker.
    run_key: u64,
    /// Whether prompts carry request markers (see `dataset::mark`).
    marked: bool,
    /// The sessions of a conversation workload (its levels run `Plan::Sessions`).
    sessions: Option<Arc<Sessions>>,
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
        let target = Target::resolve(&cfg.base_url, &cfg.client).await?;
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
                | DatasetSpec::Conversation { .. }
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
                let at = match &cfg.tokenize_url {
                    Some(url) => Target::resolve(url, &cfg.client).await?,
                    None => target.clone(),
                };
                let c = Counter::server(SetupClient::new(at.clone()), &at.base_url).await?;
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
        let words = Arc::new(shaper.words());
        let mark = words_for_64_bits(words.len());
        let measured = match (cfg.bound, &cfg.dataset) {
            (Bound::Requests(n), _) => n as usize,
            // A trace bounded by time replays every request inside it: all of them are built.
            (Bound::Duration(_), DatasetSpec::Trace { .. }) => usize::MAX / 2,
            (Bound::Duration(_), _) => DURATION_POOL,
        };
        let seed = cfg.seed;
        if let DatasetSpec::Conversation {
            turns,
            input_len,
            output_len,
            think_time_ms,
            system_prompt_len,
        } = cfg.dataset
        {
            let shape = conversation::Shape {
                turns,
                input_len,
                output_len,
                think: Duration::from_millis(think_time_ms),
                system: system_prompt_len,
            };
            let body = BodyOpts {
                api: cfg.api,
                model: &model,
                ignore_eos: cfg.ignore_eos,
            };
            // Warm-up sessions replay the same pool: their markers differ (see `Marker`).
            let (prompts, sessions) =
                conversation::build(shape, measured, seed, &mut shaper, mark, body).await?;
            let marked = prompts.iter().any(|p| p.pieces.is_some());
            let prompts = Arc::new(Pool::Eager(prompts));
            return Ok(Runner {
                shaping: Shaping {
                    source: source.to_string(),
                    inexact: shaper.inexact,
                },
                target,
                model,
                marked,
                warmup: prompts.clone(),
                prompts,
                cfg,
                ramp_up: Duration::ZERO,
                window: None,
                steady: false,
                words,
                run_key: rand::random(),
                sessions: Some(Arc::new(sessions)),
            });
        }
        let (prompts, warmup, marked) = dataset::pools(
            &dataset::PoolSpec {
                dataset: &cfg.dataset,
                measured,
                warmup: cfg.warmup as usize,
                seed: cfg.seed,
                mark,
                api: cfg.api,
                model: &model,
                ignore_eos: cfg.ignore_eos,
                lazy_above: dataset::LAZY_ABOVE,
            },
            &mut shaper,
        )
        .await?;
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
            ramp_up: Duration::ZERO,
            window: None,
            steady: false,
            words,
            // A run without a caller's identity still never repeats another's prompts.
            run_key: rand::random(),
            marked,
            sessions: None,
        })
    }

    /// Names the run (e.g. `job/trial/attempt`): request markers derive from it, the level and
    /// the request's index, so the same name gives the same prompts and no two runs share one.
    #[must_use]
    pub fn with_run_key(mut self, key: &str) -> Runner {
        self.run_key = hash_key(key);
        self
    }

    /// Measures steady state: requests whose intended send falls inside the window (from the
    /// end of the ramp-up, for `window` or, when `None`, until the last request is sent) count;
    /// throughput counts the tokens that arrived inside it, over its length. Requests of the
    /// ramp-up and of the drain still run and are reported as left out. A duration-bound level
    /// with a window runs for the ramp-up plus the window.
    #[must_use]
    pub fn with_window(mut self, window: Option<Duration>) -> Runner {
        self.window = window;
        self.steady = true;
        self
    }

    /// Whether prompts carry request markers (a trace's own texts and dataset files with
    /// the sentinel do not).
    pub fn marks_prompts(&self) -> bool {
        self.marked
    }

    /// Starts the streams of a closed-loop level one after another, evenly over `ramp`, instead
    /// of all at the same instant. Stream `s` of `c` is first due at `ramp * s / c` after the
    /// level began, and its latencies count from then. A synchronized start sends `c` requests
    /// at one instant: the client writes them one after another and the server reads them one
    /// after another, so at hundreds of streams the first wave waits milliseconds in both (real
    /// queueing, which the report shows), and with fixed-latency answers every later request
    /// of a stream stays in step with that wave. A ramp of at least one inter-token gap spreads
    /// the streams over the token clock as independent users would be. Warm-up and open-loop
    /// levels are not ramped; the level's duration still counts from its start.
    #[must_use]
    pub fn with_ramp_up(mut self, ramp: Duration) -> Runner {
        self.ramp_up = ramp;
        self
    }

    /// The model name sent with every request.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// How prompt lengths were shaped.
    pub fn shaping(&self) -> &Shaping {
        &self.shaping
    }

    /// What opening connections to the server has cost so far (set-up calls, warm-up and
    /// every level); subtract two snapshots for one level.
    pub fn connection_stats(&self) -> crate::client::ConnectionStats {
        self.target.stats.snapshot()
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
                histograms: None,
            };
        }
        if self.cfg.warmup > 0 && !cancel.is_cancelled() {
            let slots = level.concurrency.unwrap_or(16).min(self.cfg.warmup).max(1);
            let warm = self.shared(index, self.warmup.clone(), false, Instant::now(), true);
            let plan = self.with_sessions(Plan::Closed {
                slots,
                count: Some(self.cfg.warmup as u64),
                until: None,
                ramp: Duration::ZERO,
            });
            let mut set = JoinSet::new();
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = drive(&warm, plan, &mut set) => {}
            }
            set.abort_all();
            while set.join_next().await.is_some() {}
            let acc = warm.acc.lock().unwrap_or_else(|e| e.into_inner());
            report.prompt_tokens_all = acc.all_input_tokens;
            report.reusable_tokens_all = acc.all_reusable_tokens;
            report.output_tokens_all = acc.all_output_tokens;
        }
        let start = Instant::now();
        let shared = self.shared(index, self.prompts.clone(), details, start, false);
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
        let mut acc = std::mem::take(&mut *shared.acc.lock().unwrap_or_else(|e| e.into_inner()));
        acc.finish(
            &mut report,
            &self.cfg,
            shared.began.get().copied().unwrap_or(start),
            shared.peak.load(Ordering::Relaxed),
            cancelled,
            shared.stop_reason(),
            shared
                .steady
                .map(|w| (shared.began.get().copied().unwrap_or(start), w)),
        );
        // Random prompts are fresh by design (markers); conversations and traces of blocks
        // state their reuse (a trace with its own texts does not).
        let designs = match self.cfg.dataset {
            DatasetSpec::Random { .. } | DatasetSpec::Conversation { .. } => true,
            DatasetSpec::Trace { .. } => self.prompts.states_reuse(),
            _ => false,
        };
        report.designed_reuse = (designs && report.prompt_tokens_all > 0)
            .then(|| report.reusable_tokens_all as f64 / report.prompt_tokens_all as f64);
        let records = std::mem::take(&mut acc.records);
        LevelOutcome {
            report,
            records,
            histograms: Some(acc.into_histograms()),
        }
    }

    fn shared(
        &self,
        index: usize,
        prompts: Arc<Pool>,
        details: bool,
        start: Instant,
        warmup: bool,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            marker: Marker::new(self.words.clone(), self.run_key, index as u64, warmup),
            steady: (self.steady && !warmup).then_some(Steady {
                ramp_up: self.ramp_up,
                window: self.window,
            }),
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

    /// A closed loop over the workload's sessions, where it has them.
    fn with_sessions(&self, plan: Plan) -> Plan {
        match (plan, &self.sessions) {
            (
                Plan::Closed {
                    slots,
                    count,
                    until,
                    ramp,
                },
                Some(s),
            ) => Plan::Sessions {
                slots,
                count,
                until,
                ramp,
                sessions: s.clone(),
            },
            (plan, _) => plan,
        }
    }

    fn plan(&self, level: &Level) -> Plan {
        let plan = self.plan_requests(level);
        self.with_sessions(plan)
    }

    fn plan_requests(&self, level: &Level) -> Plan {
        let is_trace = matches!(self.cfg.dataset, DatasetSpec::Trace { .. });
        let seed = self.cfg.seed ^ 0x9e37_79b9_7f4a_7c15;
        // With a measurement window the level issues for the ramp-up plus the window (a
        // request count still caps it).
        let windowed = self.window.map(|w| self.ramp_up + w);
        match (level.request_rate, is_trace) {
            (None, false) => {
                let slots = level.concurrency.unwrap_or(1);
                match self.cfg.bound {
                    Bound::Requests(n) if windowed.is_some() => Plan::Closed {
                        slots,
                        count: Some(u64::from(n)),
                        until: windowed,
                        ramp: self.ramp_up,
                    },
                    Bound::Duration(_) if windowed.is_some() => Plan::Closed {
                        slots,
                        count: None,
                        until: windowed,
                        ramp: self.ramp_up,
                    },
                    Bound::Requests(n) => Plan::Closed {
                        slots,
                        count: Some(u64::from(n)),
                        until: None,
                        ramp: self.ramp_up,
                    },
                    Bound::Duration(d) => Plan::Closed {
                        slots,
                        count: None,
                        until: Some(d),
                        ramp: self.ramp_up,
                    },
                }
            }
            (_, true) => {
                let mut at: Vec<Duration> = self.prompts.arrivals();
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
                let mut arrivals = match self.cfg.bound {
                    Bound::Requests(n) => schedule(n as usize, rate, level.burstiness, seed),
                    Bound::Duration(d) => {
                        schedule_for(windowed.unwrap_or(d), rate, level.burstiness, seed)
                    }
                };
                if let Some(w) = windowed {
                    arrivals.retain(|t| *t <= w);
                }
                Plan::Open {
                    arrivals,
                    cap: level.concurrency,
                }
            }
        }
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
