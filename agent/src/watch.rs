//! `WatchEngine`: the engine's status pushed to a watcher (the controller's heartbeat) at once,
//! again on every change of the engine or its lease, and a keep-alive when nothing changed for
//! the interval the watcher asked. One stream per watcher replaces a `GetEngine` call per
//! interval; the keep-alive is what lets the watcher tell a frozen agent (SIGSTOP, a partition
//! that drops packets) from a quiet one.
//!
//! The stream's task is its own: a slow watcher only delays its own messages (the channel is
//! small), never the supervisor or the lease table, which publish on `watch` channels.

use std::time::Duration;

use fleetbench_proto::agentpb::{self, engine_watch_event::Event};
use fleetbench_proto::limits::KEEPALIVE_MS;
use tokio::sync::{mpsc, watch};
use tonic::Status;

use crate::status::RpcError;

/// The keep-alive interval a request asks for (0: the default), or the field's error.
pub(crate) fn keepalive_of(req: &agentpb::WatchEngineRequest) -> Result<Duration, RpcError> {
    let ms = if req.keepalive_ms == 0 {
        fleetbench_proto::limits::DEFAULT_KEEPALIVE_MS
    } else {
        req.keepalive_ms
    };
    fleetbench_proto::limits::check_u32(ms, KEEPALIVE_MS).map_err(|message| RpcError::Field {
        field: "keepalive_ms".into(),
        message,
    })?;
    Ok(Duration::from_millis(u64::from(ms)))
}

fn event(e: Event) -> agentpb::EngineWatchEvent {
    agentpb::EngineWatchEvent {
        unix_ms: fleetbench_proto::now_unix_ms(),
        event: Some(e),
    }
}

/// Streams `status()` at once and after every change of `engine` or `lease`, and a keep-alive
/// after `keepalive` without a message, until the watcher goes away or the supervisor ends.
pub(crate) fn spawn<E, L>(
    mut engine: watch::Receiver<E>,
    mut lease: watch::Receiver<L>,
    keepalive: Duration,
    status: impl Fn() -> agentpb::EngineStatus + Send + 'static,
) -> mpsc::Receiver<Result<agentpb::EngineWatchEvent, Status>>
where
    E: Send + Sync + 'static,
    L: Send + Sync + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            // Marked seen before the status is read: a change after this point wakes the
            // loop below, so none is missed.
            engine.borrow_and_update();
            lease.borrow_and_update();
            if tx.send(Ok(event(Event::Status(status())))).await.is_err() {
                return;
            }
            loop {
                tokio::select! {
                    r = engine.changed() => match r {
                        Ok(()) => break,
                        // The supervisor ended: the agent is shutting down.
                        Err(_) => return,
                    },
                    r = lease.changed() => match r {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                    _ = tokio::time::sleep(keepalive) => {
                        let alive = event(Event::Keepalive(agentpb::KeepAlive {}));
                        if tx.send(Ok(alive)).await.is_err() {
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            }
        }
    });
    rx
}
