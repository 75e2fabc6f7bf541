//! One leader among the controllers that share a PostgreSQL store.
//!
//! Every controller on a PostgreSQL store runs [`elect`]: it polls the store's advisory lock
//! ([`LeaderLock`]) every [`POLL`] while another controller holds it (a standby, which refuses
//! the API and names the leader), and once it holds the lock takes the next epoch, fences the
//! store's writes with it, and starts a term: heartbeats, suites, and the resumption of every
//! unfinished job (the same path a restarted controller takes). The leader checks its lock
//! session every [`CHECK`]; when PostgreSQL says another controller leads (the epoch moved,
//! or the lock is someone else's after a reconnect) it ends the term without a word to the
//! agents. While PostgreSQL cannot be reached at all, the leader keeps its term: nobody can take
//! over through a database nobody reaches, store operations retry under their policy, and
//! fenced writes make sure that whatever it still sends after a takeover is refused.
//!
//! A SQLite store serves one controller: [`lock_sqlite`] takes an exclusive lock on a file next
//! to the database and names the holder when another controller has it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::store::leadership::Poll;
use crate::store::{LeaderInfo, LeaderLock, Store, StoreError};

/// How often a standby tries the lock: the part of a takeover after PostgreSQL released it.
pub const POLL: Duration = Duration::from_millis(250);
/// How long a standby holds back after its lock session failed (PostgreSQL restarted, or
/// unreachable): every session dropped at once, and a standby polling every [`POLL`] would
/// otherwise take the lock before the leader, which reconnects every [`CHECK`], can take it
/// back. Leadership stays put across a database restart; a leader that is really gone is
/// replaced this much later.
pub const RESTART_GRACE: Duration = Duration::from_secs(5);
/// How often the leader checks its lock session and the epoch.
pub const CHECK: Duration = Duration::from_secs(1);

/// What this controller is, for the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not leading yet, the store not asked yet.
    Starting,
    /// Leading under this epoch.
    Leader { epoch: i64 },
    /// Another controller leads (its row; `address` empty when not known).
    Standby { leader: LeaderInfo },
}

/// The role as it changes; the API reads it on every call.
pub type RoleRx = watch::Receiver<Role>;

/// What a term's start and end do (server.rs: heartbeats, suites, resuming jobs).
pub(crate) trait Term: Send + Sync {
    /// Starts leading under `token` (cancelled when the term ends).
    fn begin(&self, token: CancellationToken) -> BoxFuture<'_, Result<(), String>>;
    /// Ends the term; `deposed`: another controller leads now.
    fn end(&self, deposed: bool) -> BoxFuture<'_, ()>;
    /// The current term's token (a child of shutdown), once begun.
    fn token(&self) -> Option<CancellationToken>;
}

/// Runs elections until `shutdown`: standby, leader, standby again when deposed.
pub(crate) async fn elect(
    mut lock: LeaderLock,
    store: Store,
    holder: String,
    address: String,
    role: watch::Sender<Role>,
    term: impl Term,
    shutdown: CancellationToken,
) {
    let mut logged_standby = false;
    loop {
        // Standby: poll the lock.
        let waiting = Instant::now();
        // Until when a standby holds back after its session failed (see RESTART_GRACE).
        let mut hold_back: Option<Instant> = None;
        let epoch = loop {
            if shutdown.is_cancelled() {
                lock.release();
                return;
            }
            if hold_back.is_some_and(|t| Instant::now() < t) {
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(POLL) => {}
                }
                continue;
            }
            match lock.try_lock().await {
                Ok(Poll::Held) => match lock.take_epoch(&holder, &address).await {
                    Ok(e) => break e,
                    Err(e) => tracing::warn!(error = %e, "took the leader lock, not the epoch"),
                },
                Ok(Poll::Other(leader)) => {
                    if !logged_standby {
                        tracing::info!(
                            leader = %leader.holder,
                            address = %leader.address,
                            epoch = leader.epoch,
                            "standing by: another controller leads"
                        );
                        // Tests and scripts read this line.
                        println!(
                            "fleetbench-controller standby; leader {} at {}",
                            leader.holder, leader.address
                        );
                        logged_standby = true;
                    }
                    role.send_if_modified(|r| {
                        let new = Role::Standby { leader };
                        let changed = *r != new;
                        *r = new;
                        changed
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot try the leader lock");
                    // Only a standby that knew a leader: a controller starting alone takes
                    // the lock as soon as the database answers.
                    if matches!(&*role.borrow(), Role::Standby { leader } if leader.epoch > 0) {
                        hold_back = Some(Instant::now() + RESTART_GRACE);
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        };
        logged_standby = false;
        store.set_fence(epoch);
        tracing::info!(
            epoch,
            waited_ms = waiting.elapsed().as_millis() as u64,
            "leading"
        );
        println!("fleetbench-controller leading (epoch {epoch})");
        if let Err(e) = term.begin(shutdown.child_token()).await {
            tracing::error!(error = %e, "starting the term failed; stepping down");
            term.end(false).await;
            lock.release();
            role.send_replace(Role::Starting);
            continue;
        }
        role.send_replace(Role::Leader { epoch });
        let deposed = hold(&mut lock, epoch, &term, &shutdown).await;
        role.send_replace(Role::Standby {
            leader: LeaderInfo::default(),
        });
        if deposed {
            tracing::warn!(epoch, "deposed: another controller leads now");
            println!("fleetbench-controller deposed (epoch {epoch})");
        }
        // Jobs end before the lock goes: the next leader finds them as they were left.
        term.end(deposed).await;
        lock.release();
        if shutdown.is_cancelled() {
            return;
        }
    }
}

/// Holds the term until shutdown (false) or deposition (true).
async fn hold(
    lock: &mut LeaderLock,
    epoch: i64,
    term: &impl Term,
    shutdown: &CancellationToken,
) -> bool {
    let ended = term.token().unwrap_or_else(|| shutdown.clone());
    let mut lost_since: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = ended.cancelled() => return !shutdown.is_cancelled(),
            _ = tokio::time::sleep(CHECK) => {}
        }
        let was_connected = lock.connected();
        let current = if was_connected {
            lock.current_epoch().await
        } else {
            // The session (and the lock with it) was lost: take the lock again; it is still
            // ours only if nobody led in between.
            match lock.try_lock().await {
                Ok(Poll::Held) => lock.current_epoch().await,
                Ok(Poll::Other(leader)) => Ok(leader.epoch.max(epoch + 1)),
                Err(e) => Err(e),
            }
        };
        match current {
            Ok(e) if e == epoch => {
                if let Some(since) = lost_since.take() {
                    tracing::info!(
                        epoch,
                        lost_s = since.elapsed().as_secs_f64(),
                        "leader lock taken again"
                    );
                }
            }
            Ok(_) => return true,
            Err(e) => {
                if lost_since.is_none() {
                    tracing::warn!(error = %e, "leader lock session lost; reconnecting");
                }
                lost_since.get_or_insert_with(Instant::now);
            }
        }
    }
}

/// Errors taking the SQLite store's controller lock.
pub fn lock_sqlite(store: &Store) -> Result<std::fs::File, StoreError> {
    let path = sqlite_lock_path(store.url());
    let in_use = |holder: String| StoreError::InUse {
        path: path.display().to_string(),
        holder,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| in_use(format!("cannot open the lock file: {e}")))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path)
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            return Err(in_use(if holder.is_empty() {
                "unknown".into()
            } else {
                holder
            }));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(in_use(format!("cannot lock {}: {e}", path.display())));
        }
    }
    f.set_len(0)
        .and_then(|_| writeln!(f, "{}", holder_name()))
        .map_err(|e| in_use(format!("cannot write the lock file: {e}")))?;
    Ok(f)
}

/// `DB-PATH.controller-lock` beside the database file.
fn sqlite_lock_path(url: &str) -> PathBuf {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or_default();
    let mut p = Path::new(path).as_os_str().to_owned();
    p.push(".controller-lock");
    PathBuf::from(p)
}

/// This controller as the leadership row and the SQLite lock file name it: host and pid.
pub fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host} pid {}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_file_sits_beside_the_database() {
        assert_eq!(
            sqlite_lock_path("sqlite:///var/lib/fb/controller.db?mode=rwc"),
            PathBuf::from("/var/lib/fb/controller.db.controller-lock")
        );
        assert_eq!(
            sqlite_lock_path("sqlite://data/c.db"),
            PathBuf::from("data/c.db.controller-lock")
        );
    }
}
