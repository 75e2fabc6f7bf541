//! Job events: stored (so `WatchJob` can replay a job's past) and broadcast to live watchers.
//!
//! Stored events carry the store's sequence number; a watcher subscribes first, replays the
//! stored events, then forwards live events newer than the last one it replayed, so nothing is
//! missed or shown twice. Progress ticks are broadcast only (seq 0), never stored.

use std::collections::HashMap;
use std::sync::Mutex;

use fleetbench_proto::controllerpb::{JobEvent, job_event};
use fleetbench_proto::now_unix_ms;
use tokio::sync::broadcast;

use crate::store::{Store, StoreError};

/// A live event with its store sequence number (0: not stored).
pub type Sequenced = (i64, JobEvent);

/// The per-job event channels.
#[derive(Debug)]
pub struct EventHub {
    store: Store,
    channels: Mutex<HashMap<String, broadcast::Sender<Sequenced>>>,
}

impl EventHub {
    pub fn new(store: Store) -> Self {
        EventHub {
            store,
            channels: Mutex::new(HashMap::new()),
        }
    }

    fn sender(&self, job_id: &str) -> broadcast::Sender<Sequenced> {
        let mut channels = self.channels.lock().expect("event hub lock");
        channels
            .entry(job_id.to_string())
            .or_insert_with(|| broadcast::channel(4096).0)
            .clone()
    }

    /// Live events of a job from now on.
    pub fn subscribe(&self, job_id: &str) -> broadcast::Receiver<Sequenced> {
        self.sender(job_id).subscribe()
    }

    /// Stores (unless a progress tick) and broadcasts an event.
    pub async fn emit(&self, job_id: &str, event: job_event::Event) -> Result<(), StoreError> {
        let ev = JobEvent {
            unix_ms: now_unix_ms(),
            job_id: job_id.to_string(),
            event: Some(event),
        };
        let seq = if matches!(ev.event, Some(job_event::Event::Progress(_))) {
            0
        } else {
            self.store.append_event(job_id, &ev).await?
        };
        // No receiver is fine: nobody watches.
        let _ = self.sender(job_id).send((seq, ev));
        Ok(())
    }

    /// Drops the channel of a finished job once its last event is out.
    pub fn forget(&self, job_id: &str) {
        self.channels.lock().expect("event hub lock").remove(job_id);
    }
}
