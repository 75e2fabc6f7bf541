//! Handing events to an `ApplyEngine` stream without ever waiting on its reader.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fleetbench_proto::agentpb::{EngineEvent, engine_event::Event};
use fleetbench_proto::now_unix_ms;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

pub(super) fn event(e: Event) -> EngineEvent {
    EngineEvent {
        unix_ms: now_unix_ms(),
        event: Some(e),
    }
}

/// Progress events dropped because an ApplyEngine reader fell behind (since the agent started).
pub(super) static DROPPED_EVENTS: AtomicU64 = AtomicU64::new(0);
/// How long a lifecycle event waits for a slow reader, in a task of its own.
const EVENT_DELIVERY: Duration = Duration::from_secs(60);

/// Hands an event to an apply's stream without ever waiting on its reader: the supervisor owns
/// the engine and must keep probing, reaping and answering commands however slowly a caller
/// reads. When the stream's buffer is full, a progress event (a log fact, which stays readable
/// in GetEngine; a "still waiting" tick) is dropped and counted; a lifecycle event (spawned,
/// ready, failed, stopping, stopped) is handed to a task of its own that waits for the reader
/// (bounded), so that a slow reader still learns how its apply ended.
pub(super) fn send(events: &Option<mpsc::Sender<EngineEvent>>, e: Event) {
    let Some(tx) = events else { return };
    match tx.try_send(event(e)) {
        // A caller that went away does not stop the engine.
        Ok(()) | Err(TrySendError::Closed(_)) => {}
        Err(TrySendError::Full(ev)) => match ev.event {
            Some(Event::Fact(_) | Event::Waiting(_)) => {
                let n = DROPPED_EVENTS.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::debug!(
                    dropped_total = n,
                    "ApplyEngine reader behind: progress event dropped"
                );
            }
            _ => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(EVENT_DELIVERY, tx.send(ev)).await;
                });
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbench_proto::agentpb::{LogFact, Ready, WaitingReady};

    #[tokio::test]
    async fn a_full_stream_loses_progress_but_never_blocks_and_still_gets_the_outcome() {
        let (tx, mut rx) = mpsc::channel(1);
        let events = Some(tx);
        send(&events, Event::Waiting(WaitingReady::default()));
        let before = DROPPED_EVENTS.load(Ordering::Relaxed);
        // The buffer is full and nobody reads: these return at once.
        for _ in 0..100 {
            send(&events, Event::Fact(LogFact::default()));
        }
        assert!(DROPPED_EVENTS.load(Ordering::Relaxed) >= before + 100);
        send(
            &events,
            Event::Ready(Ready {
                elapsed_s: 1.5,
                ..Default::default()
            }),
        );
        let first = rx.recv().await.unwrap().event;
        assert!(matches!(first, Some(Event::Waiting(_))), "{first:?}");
        // The lifecycle event waited for the reader in a task of its own.
        let second = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap()
            .event;
        assert!(
            matches!(&second, Some(Event::Ready(r)) if r.elapsed_s == 1.5),
            "{second:?}"
        );
    }
}
