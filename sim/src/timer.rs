//! A sub-millisecond timer for async tasks.
//!
//! Tokio's timer wheel has 1 ms ticks and rounds deadlines up, which would put up to a
//! millisecond of error on every injected delay; the instrument tests need the injected TTFT
//! and ITL to within a fraction of that. A [`Timer`] keeps a heap of deadlines and one Linux
//! `timerfd` armed (nanosecond resolution) for the earliest; the fd sits in the runtime's own
//! epoll set, so expiries are handled by a task on the runtime's threads: no extra thread, no
//! cross-thread wake-ups or context switches, which matters when the simulator gets one core.
//! Deadlines are never met early.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

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
    /// The deadline the timerfd is armed for.
    armed: Option<Instant>,
}

/// Deadlines of one runtime. Create it inside the runtime ([`Timer::new`] spawns its task).
pub struct Timer {
    state: Mutex<State>,
    fd: AsyncFd<OwnedFd>,
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer").finish_non_exhaustive()
    }
}

impl Timer {
    /// A timer whose expiries are handled by a task on the current runtime.
    pub fn new() -> io::Result<Arc<Timer>> {
        // SAFETY: plain syscall; the fd is owned right away.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the OwnedFd is moved into the AsyncFd and stays open, unchanged, for its life.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        let timer = Arc::new(Timer {
            state: Mutex::new(State::default()),
            fd,
        });
        tokio::spawn(drive(timer.clone()));
        Ok(timer)
    }

    /// A sleep that ends at `deadline`.
    pub fn sleep_until(self: &Arc<Self>, deadline: Instant) -> PreciseSleep {
        PreciseSleep {
            timer: self.clone(),
            deadline,
            registered: false,
        }
    }

    fn arm(&self, deadline: Instant) {
        // Relative arming: the time between `now` and the syscall only makes it later.
        let left = deadline.saturating_duration_since(Instant::now());
        // A zero it_value would disarm the timer; one nanosecond fires at once.
        let nanos = left.as_nanos().max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (nanos / 1_000_000_000) as libc::time_t,
                tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: valid fd and itimerspec; the old value is not asked for.
        unsafe {
            libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut());
        }
    }

    fn register(&self, deadline: Instant, waker: Waker) {
        let mut st = self.state.lock().expect("timer lock");
        st.seq += 1;
        let seq = st.seq;
        st.heap.push(Reverse(Entry {
            deadline,
            seq,
            waker,
        }));
        if st.armed.is_none_or(|a| deadline < a) {
            st.armed = Some(deadline);
            self.arm(deadline);
        }
    }

    /// Pops every entry that is due and re-arms for the next one.
    fn take_due(&self, due: &mut Vec<Waker>) {
        let mut st = self.state.lock().expect("timer lock");
        let now = Instant::now();
        while let Some(Reverse(e)) = st.heap.peek() {
            if e.deadline > now {
                break;
            }
            if let Some(Reverse(e)) = st.heap.pop() {
                due.push(e.waker);
            }
        }
        st.armed = st.heap.peek().map(|Reverse(e)| e.deadline);
        if let Some(next) = st.armed {
            self.arm(next);
        }
    }
}

async fn drive(timer: Arc<Timer>) {
    let mut due = Vec::with_capacity(1024);
    loop {
        let Ok(mut guard) = timer.fd.readable().await else {
            return;
        };
        // Consume the expiry count; WouldBlock clears a stale readiness.
        let read = guard.try_io(|fd| {
            let mut buf = [0u8; 8];
            // SAFETY: reading 8 bytes into an 8-byte buffer from our own timerfd.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
        if matches!(read, Ok(Ok(()))) {
            // One read takes every expiry: the fd stays unreadable until it fires again, so a
            // second read (one more syscall per token) would only find WouldBlock. A later
            // expiry seen by the runtime in the meantime is not cleared (readiness ticks).
            guard.clear_ready();
        }
        timer.take_due(&mut due);
        for w in due.drain(..) {
            w.wake();
        }
    }
}

/// Polls ready at `deadline` (to within tens of microseconds, never before). Registers its waker
/// once per deadline, so repeated polls by an unrelated wake-up do not pile up entries.
#[derive(Debug)]
pub struct PreciseSleep {
    timer: Arc<Timer>,
    deadline: Instant,
    registered: bool,
}

impl PreciseSleep {
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
            self.timer.register(self.deadline, cx.waker().clone());
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn never_early_and_usually_close() {
        let timer = Timer::new().unwrap();
        let mut late = Vec::new();
        for i in 0..21u64 {
            let d = Instant::now() + Duration::from_micros(1500 + i * 37);
            timer.sleep_until(d).await;
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_sleepers_in_deadline_order() {
        let timer = Timer::new().unwrap();
        let start = Instant::now();
        let mut handles = Vec::new();
        for i in (0..50u64).rev() {
            let t = timer.clone();
            handles.push(tokio::spawn(async move {
                let d = start + Duration::from_micros(500 * i + 1000);
                t.sleep_until(d).await;
                assert!(Instant::now() >= d);
                i
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    }
}
