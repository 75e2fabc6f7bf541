//! Who leads the controllers that share one PostgreSQL store.
//!
//! PostgreSQL is the coordination engine: a session-level advisory lock, held on a connection
//! of its own, says who may lead, and the `leadership` row's epoch (bumped by each new holder,
//! read by every fenced write) says whose writes count. The lock alone is not enough: a leader
//! that lost its connection may not know it yet and still has writes in flight, so those writes
//! check the epoch in their own transaction (`Store::write_tx`). The lock is released by
//! PostgreSQL the moment the holder's connection ends, which is what bounds a takeover: a killed
//! process's socket closes at once; a vanished host is noticed through the TCP keep-alives set
//! on the lock's session (about [`DEAD_PEER_S`] seconds).

use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::{AnyConnection, Connection, Executor, Row};

use super::{Backend, Store, StoreError, q};

/// The advisory lock's key: "fleetbnc" in ASCII. Every controller of a store uses this one.
const LOCK_KEY: i64 = 0x666c_6565_7462_6e63;
/// The lock session's TCP keep-alives (idle, interval, count): PostgreSQL drops the session of
/// a host that stopped answering after about idle + interval × count seconds.
const KEEPALIVE: (u32, u32, u32) = (5, 2, 3);
/// How long the leader's lock session may stay silent before PostgreSQL ends it (a frozen
/// leader loses the lock after this).
pub const IDLE_SESSION_S: u32 = 5;
/// PostgreSQL's bound on noticing a vanished leader host (not a killed process: that is at once).
pub const DEAD_PEER_S: u32 = KEEPALIVE.0 + KEEPALIVE.1 * KEEPALIVE.2;
/// How long one statement on the lock's connection may take before the connection counts as
/// lost.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the server lets a statement of the lock's session wait for a row lock (below
/// [`STATEMENT_TIMEOUT`]).
const LOCK_WAIT: Duration = Duration::from_millis(2000);

/// The `leadership` row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderInfo {
    /// Grows by one at every takeover; 0 before any controller led.
    pub epoch: i64,
    /// Who leads (`hostname pid`).
    pub holder: String,
    /// The leader's API URL.
    pub address: String,
    pub since_unix_ms: i64,
}

impl Store {
    /// The `leadership` row as it stands.
    pub async fn leader(&self) -> Result<LeaderInfo, StoreError> {
        self.retry
            .run("read leadership", move || async move {
                let r = sqlx::query(
                    "SELECT epoch, holder, address, since_unix_ms FROM leadership WHERE id = 1",
                )
                .fetch_one(&self.pool)
                .await
                .map_err(q("read leadership"))?;
                leader_from_row(&r).map_err(q("read leadership"))
            })
            .await
    }
}

fn leader_from_row(r: &sqlx::any::AnyRow) -> Result<LeaderInfo, sqlx::Error> {
    Ok(LeaderInfo {
        epoch: r.try_get("epoch")?,
        holder: r.try_get("holder")?,
        address: r.try_get("address")?,
        since_unix_ms: r.try_get("since_unix_ms")?,
    })
}

async fn bump(conn: &mut AnyConnection, holder: &str, address: &str) -> Result<i64, StoreError> {
    // Waits for fenced writes in flight (they hold the row FOR SHARE); every write after this
    // commits sees the new epoch.
    let r = sqlx::query(
        "UPDATE leadership SET epoch = epoch + 1, holder = $1, address = $2, since_unix_ms = $3 \
         WHERE id = 1 RETURNING epoch",
    )
    .bind(holder)
    .bind(address)
    .bind(fleetbench_proto::now_unix_ms())
    .fetch_one(&mut *conn)
    .await
    .map_err(q("bump leadership epoch"))?;
    r.try_get("epoch").map_err(q("read new epoch"))
}

/// What a poll of the lock found.
#[derive(Debug)]
pub enum Poll {
    /// This controller now holds the lock (not yet an epoch).
    Held,
    /// Another controller holds it; here is the row.
    Other(LeaderInfo),
}

/// The advisory lock's own connection. Dropping it (or the process dying) releases the lock.
#[derive(Debug)]
pub struct LeaderLock {
    url: String,
    conn: Option<AnyConnection>,
}

impl LeaderLock {
    /// A lock handle for a PostgreSQL store (refuses SQLite: one controller there).
    pub fn new(store: &Store) -> Option<LeaderLock> {
        (store.backend == Backend::Postgres).then(|| LeaderLock {
            url: store.url.clone(),
            conn: None,
        })
    }

    async fn conn(&mut self) -> Result<&mut AnyConnection, StoreError> {
        if self.conn.is_none() {
            let mut c = tokio::time::timeout(STATEMENT_TIMEOUT, AnyConnection::connect(&self.url))
                .await
                .map_err(|_| timeout("connect"))?
                .map_err(|source| StoreError::Open {
                    url: self.url.clone(),
                    source,
                })?;
            let (idle, interval, count) = KEEPALIVE;
            for set in [
                format!("SET tcp_keepalives_idle = {idle}"),
                format!("SET tcp_keepalives_interval = {interval}"),
                format!("SET tcp_keepalives_count = {count}"),
                "SET application_name = 'fleetbench-leader'".to_string(),
                // The epoch bump waits for fenced writes in flight; one of a frozen leader
                // waits until PostgreSQL ends that session. The server gives the wait up
                // before this client's own time-out drops the connection, so no blocked
                // statement is left behind on the server holding the advisory lock; the bump
                // is tried again at the next poll.
                format!("SET lock_timeout = '{}ms'", LOCK_WAIT.as_millis()),
            ] {
                c.execute(set.as_str())
                    .await
                    .map_err(q("set lock session keep-alives"))?;
            }
            // A frozen leader (stopped, hung, swapping) keeps its socket, and the kernel
            // answers keep-alives for it: the server ends a lock session that stays idle
            // longer than this (the leader checks every second). PostgreSQL 14 and later.
            if let Err(e) = c
                .execute(format!("SET idle_session_timeout = '{IDLE_SESSION_S}s'").as_str())
                .await
            {
                tracing::warn!(error = %e, "idle_session_timeout not set: a frozen leader keeps the lock");
            }
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("just set"))
    }

    /// A failure drops the connection (and so the lock, if it was held).
    fn settle<T>(&mut self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if r.is_err() {
            self.release();
        }
        r
    }

    /// One try at the lock: held, or the row of whoever holds it.
    pub fn try_lock(&mut self) -> BoxFuture<'_, Result<Poll, StoreError>> {
        Box::pin(async move {
            let r = tokio::time::timeout(STATEMENT_TIMEOUT, async {
                let c = self.conn().await?;
                try_lock_on(c).await
            })
            .await
            .unwrap_or_else(|_| Err(timeout("try the leader lock")));
            self.settle(r)
        })
    }

    /// With the lock held: takes the next epoch for `holder` at `address`.
    pub fn take_epoch<'a>(
        &'a mut self,
        holder: &'a str,
        address: &'a str,
    ) -> BoxFuture<'a, Result<i64, StoreError>> {
        Box::pin(async move {
            let r = tokio::time::timeout(STATEMENT_TIMEOUT, async {
                let c = self.conn().await?;
                bump(c, holder, address).await
            })
            .await
            .unwrap_or_else(|_| Err(timeout("take leadership epoch")));
            self.settle(r)
        })
    }

    /// With the lock held: the epoch in the row (another one: this controller was deposed).
    pub fn current_epoch(&mut self) -> BoxFuture<'_, Result<i64, StoreError>> {
        Box::pin(async move {
            let r = tokio::time::timeout(STATEMENT_TIMEOUT, async {
                let c = self.conn().await?;
                epoch_on(c).await
            })
            .await
            .unwrap_or_else(|_| Err(timeout("check leadership")));
            self.settle(r)
        })
    }

    /// Whether the lock's connection is open (the lock held, if it was taken).
    pub fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Closes the connection: PostgreSQL releases the lock at once.
    pub fn release(&mut self) {
        // Dropping an sqlx connection closes its socket; the server ends the session.
        self.conn = None;
    }
}

async fn try_lock_on(c: &mut AnyConnection) -> Result<Poll, StoreError> {
    let got: bool = sqlx::query("SELECT pg_try_advisory_lock($1) AS got")
        .bind(LOCK_KEY)
        .fetch_one(&mut *c)
        .await
        .and_then(|r| r.try_get("got"))
        .map_err(q("try the leader lock"))?;
    if got {
        return Ok(Poll::Held);
    }
    let r =
        sqlx::query("SELECT epoch, holder, address, since_unix_ms FROM leadership WHERE id = 1")
            .fetch_one(&mut *c)
            .await
            .map_err(q("read leadership"))?;
    Ok(Poll::Other(
        leader_from_row(&r).map_err(q("read leadership"))?,
    ))
}

async fn epoch_on(c: &mut AnyConnection) -> Result<i64, StoreError> {
    sqlx::query("SELECT epoch FROM leadership WHERE id = 1")
        .fetch_one(&mut *c)
        .await
        .and_then(|r| r.try_get("epoch"))
        .map_err(q("check leadership"))
}

fn timeout(what: &'static str) -> StoreError {
    StoreError::Query {
        what,
        source: sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {STATEMENT_TIMEOUT:?}"),
        )),
    }
}
