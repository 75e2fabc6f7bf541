//! Reduces measured requests into a level's statistics.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::client::Streamed;
use crate::config::{BenchConfig, Slo};
use crate::dataset::Prompt;
use crate::error::Failure;
use crate::report::LevelHists;
use crate::report::{LeftOut, LevelReport, RequestRecord};
use crate::stats::{Dist, summary};

/// What one request gave, borrowed from its slot.
pub(crate) struct Measured<'a> {
    pub index: u64,
    pub intended: Instant,
    pub prompt: &'a Prompt,
    /// Prompt tokens the workload designs to be served from a cache.
    pub reusable: u32,
    pub outcome: Result<Streamed, Failure>,
    /// When the request left and its first byte came back, also for a failed request.
    pub sent: Option<Instant>,
    pub first_byte: Option<Instant>,
    /// `(arrival, tokens)` of each token-bearing chunk.
    pub chunks: &'a [(Instant, u32)],
}

/// Arrival of each token, ms from the intended send time (a chunk of k tokens gives k).
fn token_ms(intended: Instant, chunks: &[(Instant, u32)]) -> Vec<f64> {
    let mut out = Vec::with_capacity(chunks.iter().map(|&(_, k)| k as usize).sum());
    for &(at, k) in chunks {
        for _ in 0..k {
            out.push(ms(intended, at));
        }
    }
    out
}

/// A closed-loop level with fewer measured requests than this many times its concurrency is a
/// burst: most of its requests start in the first synchronized wave, so its figures describe a
/// transient, not the engine's steady state.
pub const BURST_FACTOR: u32 = 4;

/// Width of the buckets token arrivals are counted in (throughput over a window).
const BUCKET: Duration = Duration::from_millis(10);

/// Which part of a level counts: requests whose intended send falls in
/// `[began + ramp_up, began + ramp_up + window]` (no window: until the last send).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Steady {
    pub ramp_up: Duration,
    pub window: Option<Duration>,
}

#[derive(Debug, Default)]
pub(crate) struct Accum {
    ttft: Dist,
    /// Time to the first answer token (after any reasoning tokens).
    ttft_answer: Dist,
    itl: Dist,
    /// One gap per token-bearing SSE event, whatever it carries.
    itl_chunk: Dist,
    tpot: Dist,
    e2e: Dist,
    queue: Dist,
    completed: u64,
    failed: u64,
    good: u64,
    failures: BTreeMap<String, u64>,
    first_failure: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    last_end: Option<Instant>,
    /// Requests left out of a steady-state measurement: intended before the window, after it.
    left_ramp_up: u64,
    left_drain: u64,
    /// The last intended send of the level (where a window without a length ends).
    last_intended: Option<Instant>,
    /// Prompt tokens of every completed request, left-out ones included.
    pub all_input_tokens: u64,
    /// Of those, the tokens the workload designs to be served from a cache.
    pub all_reusable_tokens: u64,
    /// Output tokens of every completed request, left-out ones included.
    pub all_output_tokens: u64,
    /// Output tokens of completed requests by arrival, in `BUCKET`s from the level's start.
    arrivals: Vec<f64>,
    pub records: Vec<RequestRecord>,
}

/// Where a request's intended send falls.
enum Place {
    RampUp,
    Inside,
    Drain,
}

fn ns(a: Instant, b: Instant) -> u64 {
    b.saturating_duration_since(a).as_nanos() as u64
}

fn ms(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1e3
}

impl Accum {
    pub fn add(
        &mut self,
        m: Measured<'_>,
        start: Instant,
        slo: Option<&Slo>,
        details: bool,
        level_index: usize,
        steady: Option<(Instant, Steady)>,
    ) {
        self.last_intended = Some(self.last_intended.map_or(m.intended, |t| t.max(m.intended)));
        let place = match steady {
            None => Place::Inside,
            Some((began, w)) => {
                let at = m.intended.saturating_duration_since(began);
                if at < w.ramp_up {
                    Place::RampUp
                } else if w.window.is_some_and(|len| at > w.ramp_up + len) {
                    Place::Drain
                } else {
                    Place::Inside
                }
            }
        };
        if let Ok(s) = &m.outcome {
            self.all_input_tokens += s
                .usage
                .map_or(u64::from(m.prompt.input_len.unwrap_or(0)), |u| u.0);
            self.all_reusable_tokens += u64::from(m.reusable);
            self.all_output_tokens += s.usage.map_or(s.counted_tokens, |u| u.1);
            if steady.is_some() {
                self.count_arrivals(start, m.chunks, s.usage.map(|u| u.1));
            }
        }
        match place {
            Place::Inside => {}
            Place::RampUp => {
                self.left_ramp_up += 1;
                return;
            }
            Place::Drain => {
                self.left_drain += 1;
                return;
            }
        }
        let s = match m.outcome {
            Err(f) => {
                self.failed += 1;
                *self.failures.entry(f.kind.key()).or_default() += 1;
                if self.first_failure.is_none() {
                    self.first_failure = Some(format!("{}: {}", f.kind.key(), f.message));
                }
                if details {
                    // How far it got is kept: a stall before the answer, before the first
                    // token or mid-stream reads differently.
                    let token_ms = token_ms(m.intended, m.chunks);
                    self.records.push(RequestRecord {
                        level_index,
                        index: m.index,
                        intended_ms: ms(start, m.intended),
                        sent_ms: m.sent.map(|t| ms(start, t)),
                        first_byte_ms: m.first_byte.map(|t| ms(m.intended, t)),
                        ttft_ms: token_ms.first().copied(),
                        e2e_ms: None,
                        expected_input_tokens: m.prompt.input_len,
                        max_tokens: m.prompt.output_len,
                        input_tokens: 0,
                        output_tokens: token_ms.len() as u64,
                        usage_reported: false,
                        token_ms,
                        error_kind: Some(f.kind.key()),
                        error: Some(f.message),
                    });
                }
                return;
            }
            Ok(s) => s,
        };
        self.completed += 1;
        let (input, output) = match s.usage {
            Some((p, c)) => (p, c),
            None => (u64::from(m.prompt.input_len.unwrap_or(0)), s.counted_tokens),
        };
        self.input_tokens += input;
        self.output_tokens += output;
        self.last_end = Some(self.last_end.map_or(s.end, |e| e.max(s.end)));
        self.queue.record(ns(m.intended, s.sent));
        let e2e = ns(m.intended, s.end);
        self.e2e.record(e2e);
        let mut ttft = None;
        if let Some(&(first, _)) = m.chunks.first() {
            let t = ns(m.intended, first);
            ttft = Some(t);
            self.ttft.record(t);
            let mut prev = first;
            for &(at, k) in &m.chunks[1..] {
                let gap = ns(prev, at);
                self.itl.record_n(gap / u64::from(k), u64::from(k));
                self.itl_chunk.record(gap);
                prev = at;
            }
        }
        if let Some(a) = s.first_answer {
            self.ttft_answer.record(ns(m.intended, a));
        }
        let tpot = match ttft {
            Some(t) if output > 1 => {
                let v = e2e.saturating_sub(t) / (output - 1);
                self.tpot.record(v);
                Some(v)
            }
            _ => None,
        };
        let meets = |limit: Option<f64>, value: Option<u64>| match (limit, value) {
            (None, _) => true,
            (Some(l), Some(v)) => v as f64 / 1e6 <= l,
            (Some(_), None) => false,
        };
        let good = slo.is_none_or(|slo| {
            meets(slo.ttft_ms, ttft)
                && meets(slo.e2e_ms, Some(e2e))
                && (slo.tpot_ms.is_none() || output <= 1 || meets(slo.tpot_ms, tpot))
        });
        self.good += u64::from(good);
        if details {
            let token_ms = token_ms(m.intended, m.chunks);
            self.records.push(RequestRecord {
                level_index,
                index: m.index,
                intended_ms: ms(start, m.intended),
                sent_ms: Some(ms(start, s.sent)),
                first_byte_ms: s.first_byte.map(|t| ms(m.intended, t)),
                ttft_ms: ttft.map(|t| t as f64 / 1e6),
                e2e_ms: Some(e2e as f64 / 1e6),
                expected_input_tokens: m.prompt.input_len,
                max_tokens: m.prompt.output_len,
                input_tokens: input,
                output_tokens: output,
                usage_reported: s.usage.is_some(),
                token_ms,
                error_kind: None,
                error: None,
            });
        }
    }

    /// Adds a completed request's output tokens to the arrival buckets (its `usage` count,
    /// spread over its chunks in proportion to what each carried).
    fn count_arrivals(&mut self, start: Instant, chunks: &[(Instant, u32)], usage: Option<u64>) {
        let counted: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
        if counted == 0 {
            return;
        }
        let scale = usage.map_or(1.0, |u| u as f64 / counted as f64);
        for &(at, k) in chunks {
            let b = (at.saturating_duration_since(start).as_nanos() / BUCKET.as_nanos()) as usize;
            if self.arrivals.len() <= b {
                self.arrivals.resize(b + 1, 0.0);
            }
            self.arrivals[b] += f64::from(k) * scale;
        }
    }

    /// Output tokens that arrived in `[from, to)` (offsets from the level's start).
    fn arrived(&self, from: Duration, to: Duration) -> f64 {
        let b = |d: Duration| (d.as_nanos() / BUCKET.as_nanos()) as usize;
        let (lo, hi) = (b(from), b(to).min(self.arrivals.len()));
        self.arrivals.get(lo..hi).map_or(0.0, |s| s.iter().sum())
    }

    /// Fills `r` from what was accumulated. `steady`: when the level began and its window.
    #[allow(clippy::too_many_arguments)]
    pub fn finish(
        &self,
        r: &mut LevelReport,
        cfg: &BenchConfig,
        start: Instant,
        peak: u32,
        cancelled: bool,
        stop: Option<String>,
        steady: Option<(Instant, Steady)>,
    ) {
        let p = &cfg.percentiles;
        r.completed = self.completed;
        r.failed = self.failed;
        r.sent = self.completed + self.failed;
        r.error_rate = if r.sent > 0 {
            self.failed as f64 / r.sent as f64
        } else {
            0.0
        };
        r.failures_by_kind = self.failures.clone();
        r.left_out = LeftOut {
            failed: self.failed,
            ramp_up: self.left_ramp_up,
            drain: self.left_drain,
        };
        r.burst = r.request_rate.is_none()
            && r.concurrency
                .is_some_and(|c| r.sent < u64::from(BURST_FACTOR) * u64::from(c));
        let end = self.last_end.unwrap_or_else(Instant::now);
        r.duration_s = end.saturating_duration_since(start).as_secs_f64();
        r.input_tokens = self.input_tokens;
        r.output_tokens = self.output_tokens;
        r.prompt_tokens_all += self.all_input_tokens;
        r.reusable_tokens_all += self.all_reusable_tokens;
        r.output_tokens_all += self.all_output_tokens;
        let mut window_output = None;
        if let Some((began, w)) = steady {
            let from = began + w.ramp_up;
            // The window ends at its length, or earlier where the last request was sent (a
            // request count reached first): the drain after the last send never counts.
            let last = self.last_intended.unwrap_or(from);
            let to = match w.window {
                Some(len) => (from + len).min(last),
                None => last,
            };
            if to > from {
                // The window is measured from the level's start, as the arrival buckets are.
                let (a, b) = (
                    from.saturating_duration_since(start),
                    to.saturating_duration_since(start),
                );
                window_output = Some(self.arrived(a, b));
                r.duration_s = (to - from).as_secs_f64();
                r.window_s = Some(r.duration_s);
            }
            r.ramp_up_s = Some(w.ramp_up.as_secs_f64());
        }
        let per_s = |x: u64| {
            if r.duration_s > 0.0 {
                x as f64 / r.duration_s
            } else {
                0.0
            }
        };
        match window_output {
            Some(out) => {
                r.output_tokens_per_s = out / r.duration_s;
                r.total_tokens_per_s = (out + self.input_tokens as f64) / r.duration_s;
            }
            None => {
                r.output_tokens_per_s = per_s(self.output_tokens);
                r.total_tokens_per_s = per_s(self.input_tokens + self.output_tokens);
            }
        }
        r.requests_per_s = per_s(self.completed);
        r.goodput_requests_per_s = per_s(self.good);
        r.peak_concurrency = peak;
        r.ttft_ms = summary(&self.ttft, p);
        r.ttft_answer_ms = summary(&self.ttft_answer, p);
        r.itl_ms = summary(&self.itl, p);
        r.itl_chunk_ms = summary(&self.itl_chunk, p);
        r.tpot_ms = summary(&self.tpot, p);
        r.e2e_ms = summary(&self.e2e, p);
        r.queue_ms = summary(&self.queue, p);
        r.cancelled = cancelled;
        r.error = match (self.completed, stop) {
            (_, Some(s)) => Some(s),
            (0, None) if self.failed > 0 => {
                let kinds: Vec<String> = self
                    .failures
                    .iter()
                    .map(|(k, n)| format!("{n} × {k}"))
                    .collect();
                Some(format!(
                    "all {} requests failed ({}); first: {}",
                    self.failed,
                    kinds.join(", "),
                    self.first_failure.as_deref().unwrap_or("?")
                ))
            }
            (0, None) if !cancelled && self.left_ramp_up > 0 => Some(format!(
                "all {} requests were intended during the ramp-up, none inside the measurement \
                 window: lengthen the level or shorten the ramp-up",
                self.left_ramp_up
            )),
            (0, None) if !cancelled => Some("no request was sent".into()),
            _ => None,
        };
        if r.error.is_some() && self.itl.count() == 0 && self.completed == 0 {
            r.duration_s = start.elapsed().as_secs_f64();
        }
    }

    /// The level's histograms, for a caller that merges several agents' levels.
    pub fn into_histograms(self) -> LevelHists {
        LevelHists {
            ttft: self.ttft,
            ttft_answer: self.ttft_answer,
            itl: self.itl,
            itl_chunk: self.itl_chunk,
            tpot: self.tpot,
            e2e: self.e2e,
            queue: self.queue,
        }
    }
}
