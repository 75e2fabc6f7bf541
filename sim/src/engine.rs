//! Model mode in real time: one task steps the [`Scheduler`], sleeping each step's time
//! (time-scaled, jittered, on absolute deadlines) and handing tokens to the response bodies.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::faults;
use crate::logs;
use crate::metrics::Metrics;
use crate::model::ModelParams;
use crate::sched::{ReqId, Scheduler, StepKind, SubmitError};
use crate::timer::Timer;

/// Where a response body finds the tokens generated for it.
#[derive(Debug)]
pub struct Slot {
    pub id: ReqId,
    /// When the request reached the server (for the queue-time histogram).
    pub arrival: Instant,
    inner: Mutex<(u32, Option<Waker>)>,
}

impl Slot {
    /// Tokens generated so far; remembers `waker` to be woken at the next token.
    pub fn available(&self, waker: &Waker) -> u32 {
        let mut g = self.inner.lock().expect("slot lock");
        match &g.1 {
            Some(w) if w.will_wake(waker) => {}
            _ => g.1 = Some(waker.clone()),
        }
        g.0
    }

    fn deliver(&self, count: u32) {
        let w = {
            let mut g = self.inner.lock().expect("slot lock");
            g.0 = count;
            g.1.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }
}

struct State {
    sched: Scheduler,
    slots: HashMap<ReqId, Arc<Slot>>,
    next_id: ReqId,
}

/// Late by more than this, the step clock restarts from now instead of catching up in a burst.
const MAX_LAG: Duration = Duration::from_millis(5);
/// Minimum wall time between two batch log lines of one kind.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The simulated engine.
pub struct Engine {
    state: Mutex<State>,
    wake: tokio::sync::Notify,
    params: ModelParams,
    metrics: Arc<Metrics>,
    /// Set by the hang fault: the step loop stops.
    pub hung: AtomicBool,
}

impl Engine {
    /// An idle engine.
    pub fn new(params: ModelParams, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Engine {
            state: Mutex::new(State {
                sched: Scheduler::new(params.clone()),
                slots: HashMap::new(),
                next_id: 1,
            }),
            wake: tokio::sync::Notify::new(),
            params,
            metrics,
            hung: AtomicBool::new(false),
        })
    }

    /// Queues a request; its tokens appear in the returned slot.
    pub fn submit(
        &self,
        input: u32,
        output: u32,
        arrival: Instant,
    ) -> Result<Arc<Slot>, SubmitError> {
        let slot = {
            let mut st = self.state.lock().expect("engine lock");
            let id = st.next_id;
            st.next_id += 1;
            st.sched.submit(id, input, output)?;
            let slot = Arc::new(Slot {
                id,
                arrival,
                inner: Mutex::new((0, None)),
            });
            st.slots.insert(id, slot.clone());
            self.metrics.queued.store(st.sched.queued() as u64, Relaxed);
            slot
        };
        self.wake.notify_one();
        Ok(slot)
    }

    /// Forgets a request whose client went away.
    pub fn abort(&self, id: ReqId) {
        let mut st = self.state.lock().expect("engine lock");
        if st.slots.remove(&id).is_some() {
            st.sched.abort(id);
        }
    }

    /// The step loop; runs until the process ends (or forever idle once hung).
    /// `context_ms_per_1k`: what a decode step costs more per 1,000 tokens in the KV cache.
    pub async fn run(
        self: Arc<Self>,
        timer: Arc<Timer>,
        seed: u64,
        jitter: f64,
        context_ms_per_1k: f64,
    ) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_f1ee_7be0);
        let mut normal = move || {
            // Box-Muller: two uniforms to one standard normal.
            let u1: f64 = rng.random::<f64>().max(1e-12);
            let u2: f64 = rng.random();
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        let drift = (1.0 + 0.5 * jitter * normal()).max(0.5);
        let scale = self.params.time_scale;
        let mut clock: Option<Instant> = None;
        let mut log = BatchLog::new();
        loop {
            if self.hung.load(Relaxed) {
                std::future::pending::<()>().await;
            }
            let step = {
                let mut st = self.state.lock().expect("engine lock");
                st.sched.next_step()
            };
            let Some(step) = step else {
                clock = None;
                self.wake.notified().await;
                continue;
            };
            if let StepKind::Decode { batch } = step.kind
                && self.params.crashes_at(batch)
            {
                faults::crash_batch(batch, self.params.backend.as_str());
            }
            let factor = drift * (1.0 + jitter * normal()).max(0.5);
            // Attention over the context: a decode step reads every cached token.
            let context = match step.kind {
                StepKind::Decode { .. } if context_ms_per_1k > 0.0 => {
                    let kv = self.state.lock().expect("engine lock").sched.kv_used();
                    context_ms_per_1k * kv as f64 / 1e3
                }
                _ => 0.0,
            };
            let dur = Duration::from_secs_f64((step.ms + context) * scale * factor / 1e3);
            let now = Instant::now();
            let start = match clock {
                Some(c) if now.saturating_duration_since(c) < MAX_LAG => c,
                _ => now,
            };
            let end = start + dur;
            timer.sleep_until(end).await;
            clock = Some(end);
            let (running, queued, kv) = {
                let mut st = self.state.lock().expect("engine lock");
                for e in &step.emits {
                    let slot = if e.finished {
                        st.slots.remove(&e.id)
                    } else {
                        st.slots.get(&e.id).cloned()
                    };
                    if let Some(slot) = slot {
                        if e.count == 1 {
                            // Queued from arrival until the step that prefilled it began.
                            let queued = start.saturating_duration_since(slot.arrival);
                            self.metrics.queue_time.observe(queued.as_secs_f64());
                        }
                        slot.deliver(e.count);
                    }
                }
                (
                    st.sched.running() as u64,
                    st.sched.queued() as u64,
                    st.sched.kv_used(),
                )
            };
            let m = &self.metrics;
            m.generation_tokens
                .fetch_add(step.emits.len() as u64, Relaxed);
            m.running.store(running, Relaxed);
            m.queued.store(queued, Relaxed);
            m.kv_used.store(kv, Relaxed);
            if let StepKind::Decode { batch } = step.kind {
                m.cuda_graph
                    .store(u64::from(self.params.uses_graph(batch, 0)), Relaxed);
            }
            log.step(
                &self.params,
                step.kind,
                step.emits.len() as u64,
                running,
                queued,
                kv,
            );
        }
    }
}

struct BatchLog {
    last_decode: Instant,
    last_prefill: Instant,
    tokens: u64,
}

impl BatchLog {
    fn new() -> Self {
        let long_ago = Instant::now() - LOG_EVERY;
        BatchLog {
            last_decode: long_ago,
            last_prefill: long_ago,
            tokens: 0,
        }
    }

    fn step(
        &mut self,
        p: &ModelParams,
        kind: StepKind,
        tokens: u64,
        running: u64,
        queued: u64,
        kv: u64,
    ) {
        self.tokens += tokens;
        let usage = kv as f64 / p.max_total_num_tokens.max(1) as f64;
        match kind {
            StepKind::Prefill { reqs, tokens } => {
                if self.last_prefill.elapsed() >= LOG_EVERY {
                    self.last_prefill = Instant::now();
                    logs::info(&format!(
                        "Prefill batch. #new-seq: {reqs}, #new-token: {tokens}, #cached-token: 0, token usage: {usage:.2}, #running-req: {running}, #queue-req: {queued}, "
                    ));
                }
            }
            StepKind::Decode { batch } => {
                let dt = self.last_decode.elapsed();
                if dt >= LOG_EVERY {
                    let tput = self.tokens as f64 / dt.as_secs_f64();
                    self.tokens = 0;
                    self.last_decode = Instant::now();
                    let graph = if p.uses_graph(batch, 0) {
                        "True"
                    } else {
                        "False"
                    };
                    logs::info(&format!(
                        "Decode batch. #running-req: {batch}, #token: {kv}, token usage: {usage:.2}, cuda graph: {graph}, gen throughput (token/s): {tput:.2}, #queue-req: {queued}, "
                    ));
                }
            }
        }
    }
}
