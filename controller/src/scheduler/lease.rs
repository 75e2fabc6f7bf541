//! The agent lease a trial attempt holds on its host (see `agent.v1`'s "Leases and fencing").
//!
//! The attempt acquires the lease before it applies the engine, renews it every TTL/3, and
//! releases it at the end (which stops the engine). It knows the lease is gone in two ways:
//! the agent refuses a renewal as fenced (an operator took the lease), or no renewal has
//! succeeded for a whole TTL counted from when the last good one was *sent* (a partition, a
//! dead agent). The agent's own expiry is counted from when it *received* that renewal, so the
//! controller gives the lease up no later than the agent ends it: by the time the trial runs
//! again elsewhere, the old engine is stopping, and whatever the old host still reports is
//! ignored.

use std::time::Duration;

use fleetbench_proto::agentpb::{AcquireLeaseRequest, ReleaseLeaseRequest, RenewLeaseRequest};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::agents::AgentClient;

/// The owner name a controller declares (over mTLS the agent uses the certificate's name).
pub(crate) const OWNER: &str = "fleetbench-controller";
/// How long a release (which stops the engine) may take.
const RELEASE_WAIT: Duration = Duration::from_secs(60);

/// Why a lease is no longer held.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LeaseEnd {
    /// The agent fenced this epoch off (another holder took the lease).
    Fenced(String),
    /// No renewal got through for a TTL: the host is unreachable.
    Lost(String),
}

/// Why the lease could not be acquired.
#[derive(Debug)]
pub(crate) enum AcquireError {
    /// Another holder has it (ABORTED): try again later or elsewhere.
    Busy(String),
    /// The agent could not be reached.
    Unreachable(String),
    /// The agent refused the request (an old agent without leases, a bad field).
    Refused(String),
}

/// A held lease and the task renewing it.
#[derive(Debug)]
pub(crate) struct AgentLease {
    pub epoch: u64,
    client: AgentClient,
    end: watch::Receiver<Option<LeaseEnd>>,
    stop: CancellationToken,
    renewer: JoinHandle<()>,
}

impl AgentLease {
    /// Acquires the lease for `job_id`/`trial_id` and starts renewing it.
    pub(crate) async fn acquire(
        client: &AgentClient,
        job_id: &str,
        trial_id: &str,
        ttl: Duration,
    ) -> Result<AgentLease, AcquireError> {
        let mut c = client.clone();
        let sent = Instant::now();
        let req = AcquireLeaseRequest {
            owner: OWNER.into(),
            job_id: job_id.into(),
            trial_id: trial_id.into(),
            ttl_ms: ttl.as_millis() as u32,
            take: false,
            reason: String::new(),
        };
        let lease = match tokio::time::timeout(ttl, c.acquire_lease(req)).await {
            Err(_) => {
                return Err(AcquireError::Unreachable(format!(
                    "AcquireLease: no answer within {} ms",
                    ttl.as_millis()
                )));
            }
            Ok(Err(s)) => {
                let text = format!("AcquireLease: {}: {}", s.code(), s.message());
                return Err(match s.code() {
                    tonic::Code::Aborted => AcquireError::Busy(text),
                    tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled => AcquireError::Unreachable(text),
                    _ => AcquireError::Refused(text),
                });
            }
            Ok(Ok(r)) => r.into_inner(),
        };
        let (tx, end) = watch::channel(None);
        let stop = CancellationToken::new();
        let renewer = tokio::spawn(renew(
            client.clone(),
            lease.epoch,
            ttl,
            sent + ttl,
            tx,
            stop.clone(),
        ));
        tracing::info!(
            epoch = lease.epoch,
            ttl_ms = ttl.as_millis() as u64,
            "agent lease acquired"
        );
        Ok(AgentLease {
            epoch: lease.epoch,
            client: client.clone(),
            end,
            stop,
            renewer,
        })
    }

    /// Whether the lease still holds as far as this controller knows.
    pub(crate) fn held(&self) -> bool {
        self.end.borrow().is_none()
    }

    /// Resolves when the lease is gone.
    pub(crate) async fn ended(&self) -> LeaseEnd {
        let mut end = self.end.clone();
        loop {
            if let Some(e) = end.borrow_and_update().clone() {
                return e;
            }
            if end.changed().await.is_err() {
                return LeaseEnd::Lost("the lease renewer ended".into());
            }
        }
    }

    /// Stops renewing and, if the lease still holds, releases it (the agent stops the engine).
    pub(crate) async fn release(self) {
        self.stop.cancel();
        let held = self.held();
        let _ = self.renewer.await;
        if !held || !self.end.borrow().is_none() {
            return;
        }
        let mut c = self.client.clone();
        let r = tokio::time::timeout(
            RELEASE_WAIT,
            c.release_lease(ReleaseLeaseRequest {
                epoch: self.epoch,
                keep_engine: false,
            }),
        )
        .await;
        match r {
            Ok(Ok(_)) => tracing::info!(epoch = self.epoch, "agent lease released"),
            Ok(Err(s)) => {
                tracing::warn!(epoch = self.epoch, code = ?s.code(), message = s.message(), "agent lease release refused")
            }
            Err(_) => tracing::warn!(
                epoch = self.epoch,
                "agent lease release unanswered; the agent ends it at its expiry"
            ),
        }
    }
}

/// Renews every TTL/3 until `stop`, or until the lease is gone (published on `end`).
async fn renew(
    mut client: AgentClient,
    epoch: u64,
    ttl: Duration,
    mut valid_until: Instant,
    end: watch::Sender<Option<LeaseEnd>>,
    stop: CancellationToken,
) {
    let every = ttl / 3;
    let mut last_error = String::from("no renewal answered");
    loop {
        let next = Instant::now() + every;
        let sent = Instant::now();
        // Each try is bounded by the lease's remaining life: a renewal answered after the
        // lease is gone at the agent would be a lie.
        let left = valid_until.saturating_duration_since(sent);
        let r = tokio::select! {
            _ = stop.cancelled() => return,
            r = tokio::time::timeout(left, client.renew_lease(RenewLeaseRequest { epoch, ttl_ms: 0 })) => r,
        };
        match r {
            Ok(Ok(_)) => valid_until = sent + ttl,
            Ok(Err(s)) if s.code() == tonic::Code::Aborted => {
                tracing::warn!(epoch, message = s.message(), "agent lease fenced off");
                let _ = end.send(Some(LeaseEnd::Fenced(s.message().to_string())));
                return;
            }
            Ok(Err(s)) => last_error = format!("{}: {}", s.code(), s.message()),
            Err(_) => last_error = "no answer".into(),
        }
        if Instant::now() >= valid_until {
            let text = format!(
                "lease epoch {epoch} not renewed within its {} ms TTL (the agent stops the \
                 engine by itself); last renewal: {last_error}",
                ttl.as_millis()
            );
            tracing::warn!(epoch, "{text}");
            let _ = end.send(Some(LeaseEnd::Lost(text)));
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next.min(valid_until)) => {}
        }
    }
}
