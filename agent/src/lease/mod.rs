//! Leases with fencing: who may drive the engine, and until when.
//!
//! A controller that lost its network, died, or was replaced must not keep an engine (and its
//! GPUs) busy, and must not be able to disturb the next holder's work when it comes back. So
//! the engine is held under a lease: an owner, a job and trial, an expiry the owner renews, and
//! an epoch that this agent hands out once and only ever increases. Every call that changes or
//! uses the engine names its epoch; a call under any other epoch is refused (fenced). When the
//! owner stops renewing, the agent ends the lease itself and stops the engine.
//!
//! The epoch is kept in `<data_dir>/lease.epoch`, so a restarted agent never hands out an epoch
//! a previous one did (a stale holder's calls stay fenced across agent restarts). The file fails
//! closed: one that cannot be read or does not hold a number stops the agent at start (starting
//! again at 1 would hand out epochs a stale holder still has), and an epoch is granted only once
//! it is durably saved (temporary file, fsync, rename, fsync of the directory); when that fails
//! the acquire is refused as the host's fault, naming the file.
//!
//! Lease changes that touch the engine (an expiry's stop, a release's stop, an acquire that must
//! wait for that stop) run one at a time under an async lock, so a new holder never sees its
//! engine stopped by the end of the previous lease.

use fleetbench_proto::Word;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbench_proto::agentpb;
use fleetbench_proto::now_unix_ms;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::supervisor::Supervisor;

mod epoch_file;

#[cfg(test)]
use epoch_file::EPOCH_TMP;
pub use epoch_file::EpochFileError;
use epoch_file::{EPOCH_FILE, read_epoch, save_epoch};

/// Shortest and longest TTL a holder may ask for.
pub const MIN_TTL: Duration = Duration::from_millis(1000);
pub const MAX_TTL: Duration = Duration::from_secs(600);
/// Why a lease operation or a leased call was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseError {
    /// A call without an epoch while someone holds the lease (an operator during a job).
    #[error(
        "the engine is leased by {holder}; retry when it is released, or take the lease \
         explicitly (AcquireLease with take; fleetbench-agentctl --take-lease)"
    )]
    Held { holder: String },
    /// A call or renewal under an epoch that no longer holds.
    #[error("fenced: lease epoch {epoch} is no longer valid; {now}")]
    Fenced { epoch: u64, now: String },
    /// AcquireLease while another owner or job holds a live lease.
    #[error(
        "the engine is leased by {holder}; AcquireLease with take overrides \
         (fleetbench-agentctl --take-lease)"
    )]
    Busy { holder: String },
    /// A request field is out of range.
    #[error("{field}: {message}")]
    Field {
        field: &'static str,
        message: String,
    },
    /// The new epoch could not be saved (a read-only or full data directory): the host's
    /// fault, and no lease is granted, since an unsaved epoch could be handed out again after
    /// a restart.
    #[error(
        "host fault: cannot save lease epoch {epoch} to {path}: {message}; no lease is granted \
         until the agent's data directory is writable and has space"
    )]
    Storage {
        epoch: u64,
        path: String,
        message: String,
    },
}

/// One live lease.
#[derive(Debug, Clone)]
struct Held {
    lease: agentpb::Lease,
    /// The mTLS identity that acquired it; `None` on plaintext.
    identity: Option<String>,
    expires: Instant,
    ttl: Duration,
}

impl Held {
    fn describe(&self) -> String {
        let left = self.expires.saturating_duration_since(Instant::now());
        describe(&self.lease, Some(left))
    }
}

fn describe(l: &agentpb::Lease, left: Option<Duration>) -> String {
    let mut s = format!(
        "{} for job {:?} trial {:?} (epoch {}",
        l.owner, l.job_id, l.trial_id, l.epoch
    );
    if let Some(left) = left {
        s.push_str(&format!(", expires in {:.1} s", left.as_secs_f64()));
    }
    s.push(')');
    s
}

#[derive(Debug, Default)]
struct State {
    held: Option<Held>,
    /// The last epoch handed out (and persisted).
    last_epoch: u64,
    /// How the last lease ended other than by release, in words.
    note: String,
}

impl State {
    /// Who holds it now, for a fenced caller.
    fn now(&self) -> String {
        match &self.held {
            Some(h) => format!("the engine is now leased by {}", h.describe()),
            None if self.note.is_empty() => "no lease is held now".into(),
            None => format!("no lease is held now ({})", self.note),
        }
    }

    /// A live lease (one past its expiry counts as ended: the expiry task may not have run).
    fn live(&self) -> Option<&Held> {
        self.held.as_ref().filter(|h| h.expires > Instant::now())
    }
}

/// The agent's lease table (one engine, so at most one lease). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Leases {
    state: Arc<Mutex<State>>,
    /// The epoch of the live lease, 0 when none: read by the supervisor before it starts an
    /// engine and by running benchmarks, which end when it changes.
    epoch_tx: Arc<watch::Sender<u64>>,
    wake: Arc<Notify>,
    /// Lease changes that stop the engine, one at a time.
    ops: Arc<tokio::sync::Mutex<()>>,
    path: Option<PathBuf>,
}

fn ttl_of(ttl_ms: u32) -> Result<Duration, LeaseError> {
    let ttl = Duration::from_millis(u64::from(ttl_ms));
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(LeaseError::Field {
            field: "ttl_ms",
            message: format!(
                "{ttl_ms} is outside {} to {} ms",
                MIN_TTL.as_millis(),
                MAX_TTL.as_millis()
            ),
        });
    }
    Ok(ttl)
}

impl Leases {
    /// Leases kept in memory only, starting at epoch 1 (no data directory).
    pub fn in_memory() -> Leases {
        Leases::with(None, 0)
    }

    /// Leases whose epochs continue from the one saved in `data_dir`; a missing file starts at
    /// 1, an unreadable or corrupt one is an error naming it.
    pub fn open(data_dir: &Path) -> Result<Leases, EpochFileError> {
        let path = data_dir.join(EPOCH_FILE);
        let last = read_epoch(&path)?;
        Ok(Leases::with(Some(path), last))
    }

    fn with(path: Option<PathBuf>, last_epoch: u64) -> Leases {
        let (epoch_tx, _) = watch::channel(0);
        Leases {
            state: Arc::new(Mutex::new(State {
                last_epoch,
                ..State::default()
            })),
            epoch_tx: Arc::new(epoch_tx),
            wake: Arc::new(Notify::new()),
            ops: Arc::new(tokio::sync::Mutex::new(())),
            path,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live lease's epoch, 0 when none.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.epoch_tx.subscribe()
    }

    /// The live lease, and how the last one ended (for GetHost and GetEngine).
    pub fn view(&self) -> (Option<agentpb::Lease>, String) {
        let s = self.lock();
        (s.live().map(|h| h.lease.clone()), s.note.clone())
    }

    /// Whether a call under `epoch` (0: none) from `identity` may change or use the engine.
    pub fn check(&self, epoch: u64, identity: Option<&str>) -> Result<(), LeaseError> {
        let s = self.lock();
        match (s.live(), epoch) {
            (None, 0) => Ok(()),
            (Some(h), 0) => Err(LeaseError::Held {
                holder: h.describe(),
            }),
            (Some(h), e)
                if h.lease.epoch == e
                    && (h.identity.is_none() || h.identity.as_deref() == identity) =>
            {
                Ok(())
            }
            (_, e) => Err(LeaseError::Fenced {
                epoch: e,
                now: s.now(),
            }),
        }
    }

    /// Hands out a new lease. Waits while a previous lease's end is stopping the engine.
    pub async fn acquire(
        &self,
        req: &agentpb::AcquireLeaseRequest,
        identity: Option<String>,
    ) -> Result<agentpb::Lease, LeaseError> {
        let ttl = ttl_of(req.ttl_ms)?;
        let owner = match (&identity, req.owner.trim()) {
            (Some(id), "") => id.clone(),
            (Some(id), d) if d == id => id.clone(),
            (Some(id), d) => format!("{id} ({d})"),
            (None, "") => "anonymous".to_string(),
            (None, d) => d.to_string(),
        };
        let _op = self.ops.lock().await;
        // Another owner's live lease, unless taken explicitly (the same owner and job may
        // acquire again).
        let busy = |s: &State| match s.live() {
            Some(h) => {
                let same = h.identity == identity
                    && h.lease.owner == owner
                    && h.lease.job_id == req.job_id;
                if req.take || same {
                    Ok(())
                } else {
                    Err(LeaseError::Busy {
                        holder: h.describe(),
                    })
                }
            }
            None => Ok(()),
        };
        let epoch = {
            let s = self.lock();
            busy(&s)?;
            s.last_epoch + 1
        };
        // Saved before it is granted; under `ops`, so no other acquire can take the same one.
        if let Some(path) = &self.path {
            let p = path.clone();
            let saved = tokio::task::spawn_blocking(move || save_epoch(&p, epoch))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            if let Err(e) = saved {
                tracing::error!(file = %path.display(), error = %e, epoch, "could not save the lease epoch: lease refused");
                return Err(LeaseError::Storage {
                    epoch,
                    path: path.display().to_string(),
                    message: e.to_string(),
                });
            }
        }
        let lease = {
            let mut s = self.lock();
            // Only renewals ran meanwhile (they change no holder); an expiry only frees it.
            busy(&s)?;
            if let Some(h) = s.live() {
                let why = if req.take {
                    format!(
                        "taken by {owner}{}",
                        if req.reason.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", req.reason)
                        }
                    )
                } else {
                    "acquired again by its owner".to_string()
                };
                tracing::warn!(old = %h.describe(), %why, "lease replaced");
                s.note = format!(
                    "lease epoch {} ({}) {why} at {}",
                    h.lease.epoch,
                    describe(&h.lease, None),
                    rfc3339(now_unix_ms())
                );
            }
            s.last_epoch = epoch;
            let now = now_unix_ms();
            let lease = agentpb::Lease {
                epoch,
                owner,
                job_id: req.job_id.clone(),
                trial_id: req.trial_id.clone(),
                ttl_ms: req.ttl_ms,
                acquired_unix_ms: now,
                expires_unix_ms: now + ttl.as_millis() as i64,
            };
            s.held = Some(Held {
                lease: lease.clone(),
                identity,
                expires: Instant::now() + ttl,
                ttl,
            });
            lease
        };
        tracing::info!(lease = %describe(&lease, None), ttl_ms = lease.ttl_ms, "lease acquired");
        self.epoch_tx.send_replace(lease.epoch);
        self.wake.notify_one();
        Ok(lease)
    }

    /// Extends the live lease by its TTL (or `ttl_ms`) from now.
    pub fn renew(
        &self,
        epoch: u64,
        ttl_ms: u32,
        identity: Option<&str>,
    ) -> Result<agentpb::Lease, LeaseError> {
        let new_ttl = if ttl_ms == 0 {
            None
        } else {
            Some(ttl_of(ttl_ms)?)
        };
        self.check_epoch(epoch, identity)?;
        let mut s = self.lock();
        let h = s.held.as_mut().expect("checked live");
        if let Some(t) = new_ttl {
            h.ttl = t;
            h.lease.ttl_ms = ttl_ms;
        }
        h.expires = Instant::now() + h.ttl;
        h.lease.expires_unix_ms = now_unix_ms() + h.ttl.as_millis() as i64;
        let lease = h.lease.clone();
        drop(s);
        self.wake.notify_one();
        Ok(lease)
    }

    /// As [`check`](Self::check) but epoch 0 is fenced too (renew and release need a lease).
    fn check_epoch(&self, epoch: u64, identity: Option<&str>) -> Result<(), LeaseError> {
        if epoch == 0 {
            return Err(LeaseError::Field {
                field: "epoch",
                message: "0 names no lease".into(),
            });
        }
        self.check(epoch, identity)
    }

    /// Ends the live lease; unless `keep_engine`, stops the engine before the next holder can
    /// acquire.
    pub async fn release(
        &self,
        epoch: u64,
        keep_engine: bool,
        identity: Option<&str>,
        sup: &Supervisor,
    ) -> Result<agentpb::EngineStatus, LeaseError> {
        let _op = self.ops.lock().await;
        self.check_epoch(epoch, identity)?;
        let ended = self.lock().held.take();
        if let Some(h) = &ended {
            tracing::info!(lease = %describe(&h.lease, None), keep_engine, "lease released");
        }
        self.epoch_tx.send_replace(0);
        self.wake.notify_one();
        if keep_engine {
            return Ok(sup.snapshot().to_status());
        }
        Ok(sup
            .stop("lease released")
            .await
            .unwrap_or_else(|_| sup.snapshot().to_status()))
    }

    /// Ends leases at their expiry, stopping the engine, until `stop`.
    pub async fn run_expiry(self, sup: Supervisor, stop: CancellationToken) {
        loop {
            let deadline = self.lock().held.as_ref().map(|h| h.expires);
            let wake = self.wake.notified();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = wake => continue,
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            let _op = self.ops.lock().await;
            let expired = {
                let mut s = self.lock();
                match &s.held {
                    Some(h) if h.expires <= Instant::now() => {
                        let h = s.held.take().expect("matched");
                        s.note = format!(
                            "lease epoch {} ({}) expired at {}: not renewed within {} ms; \
                             the engine was stopped",
                            h.lease.epoch,
                            describe(&h.lease, None),
                            rfc3339(now_unix_ms()),
                            h.ttl.as_millis()
                        );
                        Some(h)
                    }
                    _ => None,
                }
            };
            let Some(h) = expired else { continue };
            self.epoch_tx.send_replace(0);
            let began = std::time::Instant::now();
            tracing::warn!(lease = %describe(&h.lease, None), "lease expired: stopping the engine");
            let reason = format!("lease epoch {} expired", h.lease.epoch);
            match sup.stop(&reason).await {
                Ok(st) => tracing::warn!(
                    lease_epoch = h.lease.epoch,
                    engine_state = st.state().word(),
                    stop_s = began.elapsed().as_secs_f64(),
                    "engine stopped after the lease expired"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "could not stop the engine after the lease expired")
                }
            }
        }
    }
}

fn rfc3339(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| unix_ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(owner: &str, job: &str, take: bool) -> agentpb::AcquireLeaseRequest {
        agentpb::AcquireLeaseRequest {
            owner: owner.into(),
            job_id: job.into(),
            trial_id: "t1".into(),
            ttl_ms: 5000,
            take,
            reason: String::new(),
        }
    }

    #[tokio::test]
    async fn epochs_grow_fence_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let l = Leases::open(dir.path()).unwrap();
        l.check(0, None).expect("no lease: unleased calls pass");
        let a = l.acquire(&req("ctl", "j1", false), None).await.unwrap();
        assert_eq!(a.epoch, 1);
        l.check(a.epoch, None).unwrap();
        let e = l.check(0, None).unwrap_err().to_string();
        assert!(
            e.contains("ctl") && e.contains("j1") && e.contains("take-lease"),
            "{e}"
        );
        // Another owner is refused, and may take it explicitly.
        let busy = l.acquire(&req("op", "", false), None).await.unwrap_err();
        assert!(matches!(busy, LeaseError::Busy { .. }), "{busy}");
        let b = l.acquire(&req("op", "", true), None).await.unwrap();
        assert_eq!(b.epoch, 2);
        let f = l.check(a.epoch, None).unwrap_err();
        assert!(
            matches!(f, LeaseError::Fenced { epoch: 1, .. }) && f.to_string().contains("op"),
            "{f}"
        );
        assert!(l.renew(a.epoch, 0, None).is_err());
        assert!(l.view().1.contains("taken by op"), "{}", l.view().1);
        // A restarted agent continues after the noted epoch.
        let l2 = Leases::open(dir.path()).unwrap();
        assert_eq!(
            l2.acquire(&req("ctl", "j1", false), None)
                .await
                .unwrap()
                .epoch,
            3
        );
    }

    #[tokio::test]
    async fn mtls_identity_must_match_and_the_ttl_is_bounded() {
        let l = Leases::in_memory();
        let a = l
            .acquire(&req("", "j", false), Some("ctl-a".into()))
            .await
            .unwrap();
        assert_eq!(a.owner, "ctl-a");
        assert!(l.check(a.epoch, Some("ctl-a")).is_ok());
        assert!(l.check(a.epoch, Some("ctl-b")).is_err());
        let mut r = req("x", "j", false);
        r.ttl_ms = 10;
        let e = l.acquire(&r, None).await.unwrap_err().to_string();
        assert!(e.starts_with("ttl_ms:"), "{e}");
    }

    #[tokio::test]
    async fn an_epoch_that_cannot_be_saved_is_not_granted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(EPOCH_FILE), "7\n").unwrap();
        let l = Leases::open(dir.path()).unwrap();
        // The temporary file's name taken by a directory: the save fails even for root.
        std::fs::create_dir(dir.path().join(EPOCH_TMP)).unwrap();
        let e = l.acquire(&req("ctl", "j1", false), None).await.unwrap_err();
        assert!(
            matches!(&e, LeaseError::Storage { epoch: 8, path, .. }
                if path.ends_with(EPOCH_FILE)),
            "{e}"
        );
        assert!(e.to_string().starts_with("host fault:"), "{e}");
        assert!(l.view().0.is_none(), "a lease was held after the refusal");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(EPOCH_FILE)).unwrap(),
            "7\n"
        );
        // Once the directory is usable again the next epoch is the one never granted.
        std::fs::remove_dir(dir.path().join(EPOCH_TMP)).unwrap();
        let a = l.acquire(&req("ctl", "j1", false), None).await.unwrap();
        assert_eq!(a.epoch, 8);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(EPOCH_FILE)).unwrap(),
            "8\n"
        );
        assert!(!dir.path().join(EPOCH_TMP).exists());
    }
}
