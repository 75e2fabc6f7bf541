//! A sub-millisecond timer for async tasks.
//!
//! Tokio's timer wheel has 1 ms ticks and rounds deadlines up, which would put up to a
//! millisecond of error on every injected delay; the instrument tests need the injected TTFT
//! and ITL to within a fraction of that. One dedicated thread keeps a heap of deadlines, sleeps
//! on a condition variable with nanosecond timeouts (timer slack lowered for that thread) and
//! wakes the tasks whose deadlines passed. Deadlines are never met early.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

struct Entry {
    deadline: Instant,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.deadline, self.seq) == (o.deadline, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(o.deadline, o.seq))
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

fn shared() -> &'static Arc<Shared> {
    static TIMER: OnceLock<Arc<Shared>> = OnceLock::new();
    TIMER.get_or_init(|| {
        let s = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let t = s.clone();
        std::thread::Builder::new()
            .name("sim-timer".into())
            .spawn(move || run(&t))
            .expect("spawn timer thread");
        s
    })
}

fn run(s: &Shared) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let mut due: Vec<Waker> = Vec::with_capacity(1024);
    let mut st = s.state.lock().expect("timer lock");
    loop {
        let now = Instant::now();
        while let Some(Reverse(e)) = st.heap.peek() {
            if e.deadline > now {
                break;
            }
            let Some(Reverse(e)) = st.heap.pop() else {
                break;
            };
            due.push(e.waker);
        }
        if !due.is_empty() {
            drop(st);
            for w in due.drain(..) {
                w.wake();
            }
            st = s.state.lock().expect("timer lock");
            continue;
        }
        st = match st.heap.peek().map(|Reverse(e)| e.deadline) {
            None => s.cv.wait(st).expect("timer lock"),
            // No spinning: with hundreds of streams the next deadline is always a few
            // microseconds away, and a spinning timer thread would take the core the server
            // runs on. The futex wait with 1 ns timer slack is late by tens of microseconds.
            Some(d) => {
                let left = d.saturating_duration_since(now);
                s.cv.wait_timeout(st, left).expect("timer lock").0
            }
        };
    }
}

fn register(deadline: Instant, waker: Waker) {
    let s = shared();
    let mut st = s.state.lock().expect("timer lock");
    let earliest = st
        .heap
        .peek()
        .is_none_or(|Reverse(e)| deadline < e.deadline);
    st.seq += 1;
    let seq = st.seq;
    st.heap.push(Reverse(Entry {
        deadline,
        seq,
        waker,
    }));
    drop(st);
    if earliest {
        s.cv.notify_one();
    }
}

/// Polls ready at `deadline` (to within tens of microseconds). Registers its waker once per
/// deadline, so repeated polls by an unrelated wake-up do not pile up entries.
#[derive(Debug)]
pub struct PreciseSleep {
    deadline: Instant,
    registered: bool,
}

impl PreciseSleep {
    /// A sleep that ends at `deadline`.
    pub fn until(deadline: Instant) -> Self {
        PreciseSleep {
            deadline,
            registered: false,
        }
    }

    /// When it ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline (the next poll registers again).
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        self.registered = false;
    }

    /// Poll form usable from hand-written futures and bodies.
    pub fn poll_at(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        if !self.registered {
            self.registered = true;
            register(self.deadline, cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Future for PreciseSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_at(cx)
    }
}

/// Sleeps until `deadline` with sub-millisecond precision.
pub fn sleep_until(deadline: Instant) -> PreciseSleep {
    PreciseSleep::until(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn never_early_and_usually_close() {
        let mut late = Vec::new();
        for i in 0..21u64 {
            let d = Instant::now() + Duration::from_micros(1500 + i * 37);
            sleep_until(d).await;
            let now = Instant::now();
            assert!(now >= d, "woke {:?} early", d - now);
            late.push(now - d);
        }
        late.sort();
        // Lenient: the machine running the tests may be busy; the bench binary measures precision.
        assert!(
            late[10] < Duration::from_millis(5),
            "median lateness {:?}",
            late[10]
        );
    }

    #[tokio::test]
    async fn many_sleepers_in_deadline_order() {
        let start = Instant::now();
        let mut handles = Vec::new();
        for i in (0..50u64).rev() {
            handles.push(tokio::spawn(async move {
                let d = start + Duration::from_micros(500 * i + 1000);
                sleep_until(d).await;
                assert!(Instant::now() >= d);
                i
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    }
}
