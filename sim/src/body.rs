//! Response bodies: fixed-latency streams (deadlines from request arrival), model-mode streams
//! (tokens handed over by the engine) and plain full bodies.
//!
//! Per-token writes: after each event the body returns `Pending` once (waking itself), so hyper
//! flushes that event before the next is produced. Coalesced writes: every event already due
//! goes into one frame.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

use crate::engine::Slot;
use crate::server::AppState;
use crate::sse::Renderer;
use crate::timer::PreciseSleep;

/// Upper bound of one coalesced write.
const MAX_WRITE: usize = 256 * 1024;

/// What every streamed response shares.
pub struct StreamCore {
    pub state: Arc<AppState>,
    pub renderer: Renderer,
    pub arrival: Instant,
    /// Output tokens this response will carry.
    pub n: u32,
    pub finish: &'static str,
    pub stream: bool,
    pub coalesced: bool,
    /// Tokens per SSE event (`--stream-interval`).
    pub interval: u32,
    sent: u32,
    must_yield: bool,
    tail_sent: bool,
    first_at: Option<Instant>,
}

impl StreamCore {
    /// A core for `n` tokens.
    pub fn new(
        state: Arc<AppState>,
        renderer: Renderer,
        arrival: Instant,
        n: u32,
        finish: &'static str,
        stream: bool,
    ) -> Self {
        let coalesced = state.coalesced;
        let interval = state.args.stream_interval.max(1);
        StreamCore {
            interval,
            state,
            renderer,
            arrival,
            n,
            finish,
            stream,
            coalesced,
            sent: 0,
            must_yield: false,
            tail_sent: false,
            first_at: None,
        }
    }

    fn done(&self) -> bool {
        self.tail_sent
    }

    /// Renders what `available` tokens allow; `None` when nothing new can be sent.
    fn render(&mut self, available: u32, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.tail_sent {
            return Poll::Ready(None);
        }
        if self.must_yield {
            self.must_yield = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let available = available.min(self.n);
        if !self.stream {
            if available < self.n {
                return Poll::Pending;
            }
            self.note_first(Instant::now());
            self.tail_sent = true;
            self.finish_metrics();
            return Poll::Ready(Some(
                self.renderer.full_response(self.n, self.finish).freeze(),
            ));
        }
        if self.sent != self.n && available < self.next_event_end() {
            return Poll::Pending;
        }
        let hint = self.renderer.event_size_hint();
        let now = Instant::now();
        let mut buf;
        if self.sent < self.n {
            self.note_first(now);
            if self.coalesced {
                let k = (available - self.sent) as usize;
                buf = BytesMut::with_capacity((k * hint).min(MAX_WRITE) + 2 * hint);
                while self.sent < self.n
                    && self.next_event_end() <= available
                    && buf.len() < MAX_WRITE
                {
                    let end = self.next_event_end();
                    self.renderer.push_tokens(&mut buf, self.sent, end);
                    self.sent = end;
                }
                if self.sent == self.n {
                    self.push_tail(&mut buf);
                }
            } else {
                buf = BytesMut::with_capacity(hint);
                let end = self.next_event_end();
                self.renderer.push_tokens(&mut buf, self.sent, end);
                self.sent = end;
                self.must_yield = true;
            }
        } else {
            // All tokens sent (per-token mode): the finish, usage and [DONE] events.
            buf = BytesMut::with_capacity(3 * hint);
            self.push_tail(&mut buf);
        }
        Poll::Ready(Some(buf.freeze()))
    }

    /// The token count after the next event (the whole interval, or what is left).
    fn next_event_end(&self) -> u32 {
        (self.sent + self.interval).min(self.n)
    }

    fn push_tail(&mut self, buf: &mut BytesMut) {
        self.renderer.push_tail(buf, self.n, self.finish);
        self.tail_sent = true;
        self.finish_metrics();
    }

    fn note_first(&mut self, now: Instant) {
        if self.first_at.is_none() {
            self.first_at = Some(now);
            self.state
                .metrics
                .ttft
                .observe((now - self.arrival).as_secs_f64());
        }
    }

    fn finish_metrics(&self) {
        let m = &self.state.metrics;
        let now = Instant::now();
        m.e2e.observe((now - self.arrival).as_secs_f64());
        if self.n > 1
            && let Some(first) = self.first_at
        {
            let gaps = u64::from(self.n - 1);
            m.itl
                .observe_n((now - first).as_secs_f64() / gaps as f64, gaps);
        }
    }
}

/// A fixed-latency response: token `k` is due at `arrival + ttft + k * itl`.
pub struct FixedStream {
    pub core: StreamCore,
    pub ttft: Duration,
    pub itl: Duration,
    sleep: PreciseSleep,
}

impl FixedStream {
    /// A stream for `core` with the injected delays.
    pub fn new(core: StreamCore, ttft: Duration, itl: Duration) -> Self {
        let first = core.arrival + ttft;
        let sleep = core.state.timer.sleep_until(first);
        FixedStream {
            core,
            ttft,
            itl,
            sleep,
        }
    }

    fn deadline(&self, k: u32) -> Instant {
        self.core.arrival + self.ttft + self.itl * k
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let n = self.core.n;
        let next = if self.core.stream {
            self.core.next_event_end().max(1) - 1
        } else {
            n - 1
        };
        let due = self.deadline(next);
        if Instant::now() < due {
            if self.sleep.deadline() != due {
                self.sleep.reset(due);
            }
            if self.sleep.poll_at(cx).is_pending() {
                return Poll::Pending;
            }
        }
        // Every token whose deadline has passed (exact: deadlines and this count use the same
        // nanosecond arithmetic, so token `next` is always included).
        let since = Instant::now().saturating_duration_since(self.core.arrival + self.ttft);
        let available = if self.itl.is_zero() {
            n
        } else {
            (since.as_nanos() / self.itl.as_nanos() + 1).min(u128::from(n)) as u32
        };
        self.core.render(available, cx)
    }
}

impl Drop for FixedStream {
    fn drop(&mut self) {
        let left = self.core.state.active.fetch_sub(1, Relaxed) - 1;
        self.core.state.metrics.running.store(left, Relaxed);
        if !self.core.done() {
            self.core.state.metrics.aborted.fetch_add(1, Relaxed);
        }
    }
}

/// A model-mode response: tokens arrive from the engine's steps.
pub struct ModelStream {
    pub core: StreamCore,
    pub slot: Arc<Slot>,
}

impl ModelStream {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let available = self.slot.available(cx.waker());
        self.core.render(available, cx)
    }
}

impl Drop for ModelStream {
    fn drop(&mut self) {
        if !self.core.done() {
            self.core.state.metrics.aborted.fetch_add(1, Relaxed);
            if let Some(engine) = &self.core.state.engine {
                engine.abort(self.slot.id);
            }
        }
    }
}

/// Every body the server sends.
pub enum SimBody {
    Full(Option<Bytes>),
    Fixed(Box<FixedStream>),
    Model(Box<ModelStream>),
}

impl SimBody {
    /// A complete body.
    pub fn full(b: impl Into<Bytes>) -> Self {
        SimBody::Full(Some(b.into()))
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let r = match self.get_mut() {
            SimBody::Full(b) => Poll::Ready(b.take()),
            SimBody::Fixed(s) => s.poll(cx),
            SimBody::Model(s) => s.poll(cx),
        };
        r.map(|o| o.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(b) => b.is_none(),
            SimBody::Fixed(s) => s.core.done(),
            SimBody::Model(s) => s.core.done(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            SimBody::Full(None) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
