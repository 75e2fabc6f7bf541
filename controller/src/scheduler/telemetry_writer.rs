//! One writer for the telemetry points of every trial. Each relay averages its host's samples
//! over a window and hands the points here over a bounded channel; the writer stores what has
//! arrived in one transaction per job and flush, instead of one transaction per host and
//! window. At 1,000 busy hosts that is one store write a second instead of 500, and the store
//! stays free for what must not wait (levels, trial states, events).
//!
//! The relays never wait on the store: when the writer falls behind and the channel is full, a
//! window's points are dropped and counted (`fleetbench.telemetry.dropped`, and a warning once
//! per flush). Telemetry is a downsampled history for reports; a level's result and its power
//! figure do not go through here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fleetbench_proto::controllerpb::TelemetryPoint;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::store::Store;

/// Windows the channel holds: a few seconds of 1,000 hosts' windows.
const CHANNEL_WINDOWS: usize = 4096;
/// The writer stores at most this often...
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// ...or sooner, once this many points wait.
const FLUSH_POINTS: usize = 20_000;
/// After shutdown, how long the writer keeps storing what relays hand over last.
const DRAIN: Duration = Duration::from_secs(3);

struct Window {
    job_id: String,
    points: Vec<TelemetryPoint>,
}

enum Msg {
    Window(Window),
    /// Store everything handed over before this, then answer.
    Sync(tokio::sync::oneshot::Sender<()>),
}

/// The relays' handle on the writer.
#[derive(Debug, Clone)]
pub(crate) struct TelemetryWriter {
    tx: mpsc::Sender<Msg>,
    dropped: Arc<AtomicU64>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Window({}, {} points)", self.job_id, self.points.len())
    }
}

impl TelemetryWriter {
    /// Starts the writer; it stops after `shutdown` once the relays' last windows are stored
    /// (at most [`DRAIN`] later), or when every handle is dropped.
    pub fn start(
        store: Store,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (TelemetryWriter, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(CHANNEL_WINDOWS);
        let dropped = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(rx, store, dropped.clone(), shutdown));
        (
            TelemetryWriter {
                tx,
                dropped,
                metrics,
            },
            task,
        )
    }

    /// Hands a window over without waiting; when the writer is behind, the points are dropped
    /// and counted.
    pub fn send(&self, job_id: &str, points: Vec<TelemetryPoint>) {
        if points.is_empty() {
            return;
        }
        let n = points.len() as u64;
        let window = Window {
            job_id: job_id.to_string(),
            points,
        };
        if self.tx.try_send(Msg::Window(window)).is_err() {
            self.dropped.fetch_add(n, Ordering::Relaxed);
            self.metrics.telemetry_dropped(n);
        }
    }
}

impl TelemetryWriter {
    /// Waits (at most `limit`) until every window handed over before this call is stored: a
    /// job's telemetry is in the store when the job is recorded as ended.
    pub async fn sync(&self, limit: Duration) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let synced = tokio::time::timeout(limit, async {
            self.tx.send(Msg::Sync(tx)).await.ok()?;
            rx.await.ok()
        })
        .await;
        if !matches!(synced, Ok(Some(()))) {
            tracing::warn!("telemetry not confirmed stored within {limit:?}");
        }
    }
}

async fn run(
    mut rx: mpsc::Receiver<Msg>,
    store: Store,
    dropped: Arc<AtomicU64>,
    shutdown: CancellationToken,
) {
    let mut pending: BTreeMap<String, Vec<TelemetryPoint>> = BTreeMap::new();
    let mut count = 0usize;
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut drain_until: Option<tokio::time::Instant> = None;
    let mut closed = false;
    loop {
        tokio::select! {
            w = rx.recv(), if !closed => match w {
                Some(Msg::Sync(done)) => {
                    flush(&store, &mut pending, &dropped).await;
                    count = 0;
                    let _ = done.send(());
                }
                Some(Msg::Window(w)) => {
                    count += w.points.len();
                    pending.entry(w.job_id).or_default().extend(w.points);
                    if count >= FLUSH_POINTS {
                        flush(&store, &mut pending, &dropped).await;
                        count = 0;
                    }
                }
                None => closed = true,
            },
            _ = tick.tick() => {
                flush(&store, &mut pending, &dropped).await;
                count = 0;
            }
            _ = shutdown.cancelled(), if drain_until.is_none() => {
                drain_until = Some(tokio::time::Instant::now() + DRAIN);
            }
        }
        if closed || drain_until.is_some_and(|d| tokio::time::Instant::now() >= d) {
            flush(&store, &mut pending, &dropped).await;
            return;
        }
    }
}

async fn flush(
    store: &Store,
    pending: &mut BTreeMap<String, Vec<TelemetryPoint>>,
    dropped: &AtomicU64,
) {
    for (job_id, points) in std::mem::take(pending) {
        if let Err(e) = store.put_telemetry(&job_id, &points).await {
            tracing::warn!(job = %job_id, points = points.len(), error = %e, "telemetry points not stored");
        }
    }
    let lost = dropped.swap(0, Ordering::Relaxed);
    if lost > 0 {
        tracing::warn!(
            points = lost,
            "telemetry points dropped: the store fell behind the relays"
        );
    }
}
