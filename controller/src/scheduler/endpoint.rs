//! One trial at a time per external endpoint.
//!
//! A config with `[configs.target]` measures a server fleetbench does not own, from whichever of
//! the job's hosts is free. Two trials loading the same server at once would each measure the
//! other's load as the server's slowness: their figures, and every verdict drawn from them,
//! would be wrong in a way nothing in the results shows. So every trial against an endpoint
//! (one scheme, host and port: a gateway's tenants and headers share its capacity) holds it for
//! its whole run, across jobs, and a second trial waits for it, holding its host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

/// The endpoints this controller's trials are loading.
#[derive(Debug, Default)]
pub(crate) struct Endpoints {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held while a trial loads an endpoint; the next trial for it may start once this is dropped.
pub(crate) struct EndpointHold {
    _guard: OwnedMutexGuard<()>,
}

impl Endpoints {
    /// Waits until no other trial of this controller loads `origin`, then holds it. `None` when
    /// `cancel` fires first.
    pub(crate) async fn hold(
        &self,
        origin: &str,
        cancel: &CancellationToken,
    ) -> Option<EndpointHold> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(origin.to_string()).or_default().clone()
        };
        let guard = match lock.clone().try_lock_owned() {
            Ok(g) => g,
            Err(_) => {
                tracing::info!(
                    endpoint = origin,
                    "waiting for the endpoint: another trial is loading it"
                );
                tokio::select! {
                    g = lock.lock_owned() => g,
                    _ = cancel.cancelled() => return None,
                }
            }
        };
        Some(EndpointHold { _guard: guard })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_trial_waits_for_the_endpoint_and_another_endpoint_does_not() {
        let e = Endpoints::default();
        let cancel = CancellationToken::new();
        let first = e.hold("https://gw:443", &cancel).await.unwrap();
        // Another endpoint is free.
        let other = e.hold("https://other:443", &cancel).await;
        assert!(other.is_some());
        // The same endpoint waits until the first trial lets go.
        let waiting = tokio::time::timeout(
            Duration::from_millis(100),
            e.hold("https://gw:443", &cancel),
        )
        .await;
        assert!(waiting.is_err(), "held twice");
        drop(first);
        let second =
            tokio::time::timeout(Duration::from_secs(1), e.hold("https://gw:443", &cancel))
                .await
                .expect("released on drop");
        assert!(second.is_some());
        // A cancelled wait gives up.
        let stop = CancellationToken::new();
        stop.cancel();
        assert!(e.hold("https://gw:443", &stop).await.is_none());
    }
}
