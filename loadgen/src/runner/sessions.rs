//! Driving a level of multi-turn sessions (`dataset::conversation`): a closed loop whose
//! streams are sessions. A stream takes the next session, sends its turns one after another,
//! and between two turns thinks while keeping the stream (the level's concurrency counts
//! sessions, thinking ones included), then takes the next session.
//!
//! A later turn's latency counts from its intended send: the end of the previous turn plus
//! the think time. A request bound counts requests (turns), so the last sessions of a level may
//! stop part-way; a duration bound stops before a turn intended after it. Each request states
//! the prompt tokens its workload designs to be reusable (`Sessions::reusable`), summed into
//! the level's designed reuse.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::drive::{Req, Shared, Slot};
use crate::arrivals::sleep_until_precise;
use crate::client::{Conn, Scratch};
use crate::dataset::Sessions;

/// The closed loop's shape: streams, request count, duration, ramp-up.
pub(super) struct Closed {
    pub slots: u32,
    pub count: Option<u64>,
    pub until: Option<Duration>,
    pub ramp: Duration,
}

pub(super) async fn drive(
    sh: &Arc<Shared>,
    c: Closed,
    sessions: Arc<Sessions>,
    set: &mut JoinSet<()>,
) {
    let next_session = Arc::new(AtomicU64::new(0));
    // Whether a request carrying the level's system prompt has finished: only then can an
    // engine serve it from its cache (two sessions that start together both compute it).
    let system_done = Arc::new(AtomicBool::new(false));
    // Connect every stream before the clock starts, as the single-turn closed loop does.
    let barrier = Arc::new(tokio::sync::Barrier::new(c.slots as usize + 1));
    for s in 0..c.slots {
        let (sh, sessions, barrier) = (sh.clone(), sessions.clone(), barrier.clone());
        let (next_session, system_done) = (next_session.clone(), system_done.clone());
        let offset = c.ramp.mul_f64(f64::from(s) / f64::from(c.slots));
        let (slots, count, until) = (c.slots, c.count, c.until);
        set.spawn(async move {
            let mut slot = Slot {
                conn: Conn::open(&sh.target).await.ok(),
                scratch: Scratch::default(),
            };
            barrier.wait().await;
            let deadline = until.map(|d| Instant::now() + d);
            let mut free_at = *sh.began.get_or_init(Instant::now) + offset;
            if !offset.is_zero() {
                sleep_until_precise(free_at).await;
            }
            'sessions: loop {
                let session = next_session.fetch_add(1, Ordering::Relaxed);
                for turn in 0..sessions.turns {
                    let intended = if turn == 0 {
                        free_at
                    } else {
                        free_at + sessions.think
                    };
                    if deadline.is_some_and(|d| intended >= d) {
                        break 'sessions;
                    }
                    if turn > 0 && !sessions.think.is_zero() {
                        sleep_until_precise(intended).await;
                    }
                    if sh.stop.load(Ordering::Relaxed) {
                        break 'sessions;
                    }
                    let index = sh.next.fetch_add(1, Ordering::Relaxed);
                    if count.is_some_and(|c| index >= c) {
                        break 'sessions;
                    }
                    let req = Req {
                        index,
                        prompt: sessions.prompt_index(session, turn),
                        mark: session,
                        reusable: sessions.reusable(turn, system_done.load(Ordering::Relaxed)),
                    };
                    free_at = slot.send(&sh, req, intended, slots).await;
                    system_done.store(true, Ordering::Relaxed);
                }
            }
        });
    }
    barrier.wait().await;
    sh.began.get_or_init(Instant::now);
    while set.join_next().await.is_some() {}
}
