//! Driving one level: the slots that send requests (closed loop: a fixed number of streams;
//! open loop: arrivals on a schedule handed to free slots) and the state they share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;

use super::HANDOFF_LEAD;
use crate::arrivals::sleep_until_precise;
use crate::client::{Conn, Scratch, Target, stream_request};
use crate::dataset::{Marker, Sessions};
use crate::error::{Failure, FailureKind};
use crate::level::{Accum, Measured};
use crate::report::Progress;

pub(super) fn send_progress(
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

pub(super) enum Plan {
    Closed {
        slots: u32,
        count: Option<u64>,
        until: Option<Duration>,
        /// Stream `s` of `slots` starts at `ramp * s / slots` after the level began.
        ramp: Duration,
    },
    Open {
        arrivals: Vec<Duration>,
        cap: Option<u32>,
    },
    /// Closed loop over multi-turn sessions (`super::sessions`).
    Sessions {
        slots: u32,
        count: Option<u64>,
        until: Option<Duration>,
        ramp: Duration,
        sessions: Arc<Sessions>,
    },
}

impl Plan {
    pub(super) fn total(&self) -> Option<u64> {
        match self {
            Plan::Closed { count, .. } | Plan::Sessions { count, .. } => *count,
            Plan::Open { arrivals, .. } => Some(arrivals.len() as u64),
        }
    }
}

/// State shared by the slots of one level.
pub(super) struct Shared {
    pub(super) target: Target,
    pub(super) path: &'static str,
    pub(super) prompts: Arc<crate::dataset::Pool>,
    /// Fills in each request's markers.
    pub(super) marker: Marker,
    pub(super) timeout: Duration,
    pub(super) level_index: usize,
    pub(super) details: bool,
    pub(super) start: Instant,
    pub(super) slo: Option<crate::config::Slo>,
    /// The measurement window, when the level measures steady state only.
    pub(super) steady: Option<crate::level::Steady>,
    pub(super) acc: std::sync::Mutex<Accum>,
    pub(super) next: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) in_flight: AtomicU32,
    pub(super) peak: AtomicU32,
    pub(super) idle: AtomicU32,
    pub(super) connect_streak: AtomicU32,
    pub(super) stop: AtomicBool,
    pub(super) stop_message: std::sync::Mutex<Option<String>>,
    /// When the first request could go out (after the closed loop's connections are open).
    pub(super) began: std::sync::OnceLock<Instant>,
}

impl Shared {
    pub(super) fn stop_reason(&self) -> Option<String> {
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

pub(super) async fn drive(sh: &Arc<Shared>, plan: Plan, set: &mut JoinSet<()>) {
    match plan {
        Plan::Sessions {
            slots,
            count,
            until,
            ramp,
            sessions,
        } => {
            let closed = super::sessions::Closed {
                slots,
                count,
                until,
                ramp,
            };
            super::sessions::drive(sh, closed, sessions, set).await;
        }
        Plan::Closed {
            slots,
            count,
            until,
            ramp,
        } => {
            // Connect every slot before the clock starts, so the first requests do not carry
            // the connection set-up.
            let barrier = Arc::new(tokio::sync::Barrier::new(slots as usize + 1));
            for s in 0..slots {
                let sh = sh.clone();
                let barrier = barrier.clone();
                let offset = ramp.mul_f64(f64::from(s) / f64::from(slots));
                set.spawn(async move {
                    let mut slot = Slot {
                        conn: Conn::open(&sh.target).await.ok(),
                        scratch: Scratch::default(),
                    };
                    barrier.wait().await;
                    let deadline = until.map(|d| Instant::now() + d);
                    // The next request is due the moment the last one ended: the time spent on
                    // its accounting is client queueing, and counts.
                    // Without a ramp every stream is free from the same instant: the first
                    // wave's sends, one after another on this thread, count as queueing too.
                    let mut free_at = *sh.began.get_or_init(Instant::now) + offset;
                    if !offset.is_zero() {
                        sleep_until_precise(free_at).await;
                    }
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
pub(super) struct Slot {
    pub(super) conn: Option<Conn>,
    pub(super) scratch: Scratch,
}

/// One request of a level: its index, which prompt it sends, what its markers are keyed by,
/// and how many of its prompt tokens the workload designs to be reusable.
pub(super) struct Req {
    pub(super) index: u64,
    pub(super) prompt: usize,
    pub(super) mark: u64,
    pub(super) reusable: u32,
}

impl Slot {
    /// Runs one request; returns when its stream ended (or the failure was seen).
    async fn run(&mut self, sh: &Shared, index: u64, intended: Instant, slots: u32) -> Instant {
        let pool = sh.prompts.len();
        let req = Req {
            index,
            prompt: (index % pool) as usize,
            mark: index,
            reusable: sh.prompts.reusable(index % pool),
        };
        self.send(sh, req, intended, slots).await
    }

    /// Runs request `req`; returns when its stream ended (or the failure was seen).
    pub(super) async fn send(
        &mut self,
        sh: &Shared,
        req: Req,
        intended: Instant,
        slots: u32,
    ) -> Instant {
        let Req {
            index,
            prompt,
            mark,
            reusable,
        } = req;
        let pool = sh.prompts.len();
        // A lazy pool builds the prompt here: the time counts as this request's queueing.
        let prompt = sh.prompts.get(prompt as u64);
        let body = match &prompt.pieces {
            Some(p) => sh.marker.body(p, mark, pool),
            None => prompt.body.clone(),
        };
        let now_in_flight = sh.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        sh.peak.fetch_max(now_in_flight, Ordering::Relaxed);
        let Slot { conn, scratch } = self;
        // A request that fails before it is sent must not show the previous one's figures.
        scratch.clear();
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
                    *conn = Some(Conn::open(&sh.target).await?);
                }
                let c = conn.as_mut().expect("connection set above");
                let req = sh.target.request(http::Method::POST, sh.path, body.clone());
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
            prompt: &prompt,
            reusable,
            outcome,
            sent: scratch.sent,
            first_byte: scratch.first_byte,
            chunks: &scratch.chunks,
        };
        sh.acc.lock().unwrap_or_else(|e| e.into_inner()).add(
            m,
            sh.start,
            sh.slo.as_ref(),
            sh.details,
            sh.level_index,
            sh.steady
                .map(|w| (sh.began.get().copied().unwrap_or(sh.start), w)),
        );
        ended
    }
}
