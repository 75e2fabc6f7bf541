//! The agent lease as a stand-in keeps it: one holder at a time, an epoch that only grows, an
//! expiry the holder renews. It answers the controller's lease calls as a real agent does, so
//! the controller's renewals are part of what the scale benchmark measures; fencing of engine
//! calls is the real agent's job (tested there), not modelled here.

use std::sync::Mutex;

use fleetbench_proto::agentpb;
use fleetbench_proto::now_unix_ms;
use tonic::Status;

#[derive(Debug, Default)]
pub(crate) struct Leases {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    held: Option<agentpb::Lease>,
}

impl Leases {
    pub(crate) fn acquire(
        &self,
        req: agentpb::AcquireLeaseRequest,
    ) -> Result<agentpb::Lease, Status> {
        if !(1_000..=600_000).contains(&req.ttl_ms) {
            return Err(Status::invalid_argument(format!(
                "ttl_ms: {} is outside 1000..=600000",
                req.ttl_ms
            )));
        }
        let now = now_unix_ms();
        let mut s = self.inner.lock().expect("lease lock");
        if let Some(h) = &s.held
            && h.expires_unix_ms > now
            && !req.take
            && (h.owner != req.owner || h.job_id != req.job_id)
        {
            return Err(Status::aborted(format!(
                "leased by {} for job {} (epoch {})",
                h.owner, h.job_id, h.epoch
            )));
        }
        s.epoch += 1;
        let lease = agentpb::Lease {
            epoch: s.epoch,
            owner: req.owner,
            job_id: req.job_id,
            trial_id: req.trial_id,
            ttl_ms: req.ttl_ms,
            acquired_unix_ms: now,
            expires_unix_ms: now + i64::from(req.ttl_ms),
        };
        s.held = Some(lease.clone());
        Ok(lease)
    }

    pub(crate) fn renew(&self, req: agentpb::RenewLeaseRequest) -> Result<agentpb::Lease, Status> {
        let now = now_unix_ms();
        let mut s = self.inner.lock().expect("lease lock");
        match &mut s.held {
            Some(h) if h.epoch == req.epoch && h.expires_unix_ms > now => {
                if req.ttl_ms != 0 {
                    h.ttl_ms = req.ttl_ms;
                }
                h.expires_unix_ms = now + i64::from(h.ttl_ms);
                Ok(h.clone())
            }
            _ => Err(Status::aborted(format!(
                "lease epoch {} is not held (current epoch {})",
                req.epoch, s.epoch
            ))),
        }
    }

    /// The live lease, if any (a stand-in ends no lease by itself: an expired one is not live).
    pub(crate) fn held(&self) -> Option<agentpb::Lease> {
        let s = self.inner.lock().expect("lease lock");
        s.held.clone().filter(|h| h.expires_unix_ms > now_unix_ms())
    }

    pub(crate) fn release(&self, req: &agentpb::ReleaseLeaseRequest) -> Result<(), Status> {
        let mut s = self.inner.lock().expect("lease lock");
        match &s.held {
            Some(h) if h.epoch == req.epoch => {
                s.held = None;
                Ok(())
            }
            _ => Err(Status::aborted(format!(
                "lease epoch {} is not held (current epoch {})",
                req.epoch, s.epoch
            ))),
        }
    }
}
