//! The controller's store: jobs, configs, trials, runs (trial attempts), level results,
//! telemetry points, job events and self-registered agents.
//!
//! One code path serves SQLite (the default, a file) and PostgreSQL (`postgres://…`) through
//! sqlx's `Any` driver; the SQL is the common subset of both (`$n` parameters, `ON CONFLICT`).
//! Protobuf messages that are only ever read whole (a run, a level result, an event) are kept
//! encoded in a blob next to the columns queries filter on.
//!
//! Idempotence: a level result's key is `(job_id, trial_id, level_index)`. A level is stored the
//! first time any attempt of its trial reports it; a replayed or retried report inserts nothing
//! and [`Store::put_level`] says so. A trial re-run after a restart or a lost host is asked to
//! skip the levels already kept ([`Store::stored_level_indices`]).
//!
//! Every operation runs under the store's [`RetryPolicy`] ([`retry`]): transient errors (a lost
//! connection, a restarting server, SQLite busy) are retried with backoff for a bounded time.
//! Writes are fenced ([`Store::set_fence`]): on PostgreSQL a controller that leads under an epoch
//! checks, in the same transaction and under a share lock on the `leadership` row, that the
//! epoch is still current, so a deposed leader cannot write anything after a new one took over.

mod events;
mod figures;
mod jobs;
pub(crate) mod leadership;
mod results;
pub mod retry;
mod suites;

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, ConnectOptions, Row};

pub use events::RegisteredAgent;
pub use jobs::{NewJob, TrialRow};
pub use leadership::{DEAD_PEER_S, IDLE_SESSION_S, LeaderInfo, LeaderLock};

/// Every PostgreSQL pool session's settings. A leader frozen (SIGSTOP, a paused VM, a stall)
/// inside a fenced write transaction holds a share lock on the `leadership` row that no standby
/// can get past, and its socket stays open: the server itself must end it. The controller's
/// transactions are a few statements with no wait between them, so a session idle inside one
/// for [`IDLE_IN_TRANSACTION_S`] seconds is frozen, and PostgreSQL terminates it (rolling the
/// write back, releasing the lock). `client_connection_check_interval` (PostgreSQL 14 and
/// later) ends a statement whose client has gone.
pub fn postgres_session() -> String {
    format!(
        "SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'; \
         SET client_connection_check_interval = '1s'; \
         SET application_name = 'fleetbench-controller'"
    )
}
/// See [`postgres_session`].
pub const IDLE_IN_TRANSACTION_S: u32 = 5;
pub use retry::{ErrorClass, RetryPolicy};

/// Errors of the store. Each names what was being done.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store URL is neither `sqlite://…` nor `postgres://…`.
    #[error("store url {0:?}: expected sqlite://PATH or postgres://…")]
    BadUrl(String),
    /// The database could not be opened or reached.
    #[error("opening the store at {url}: {source}")]
    Open { url: String, source: sqlx::Error },
    /// A schema migration failed.
    #[error("migrating the store schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A query failed.
    #[error("store query ({what}): {source}")]
    Query {
        what: &'static str,
        source: sqlx::Error,
    },
    /// A stored blob no longer decodes (written by an incompatible version).
    #[error("stored {what} does not decode: {source}")]
    Decode {
        what: &'static str,
        source: prost::DecodeError,
    },
    /// A write by a controller that no longer leads: another one took over under a newer
    /// epoch. Nothing was written.
    #[error(
        "write refused: this controller led under epoch {mine}, the store's leader is now \
         epoch {current} ({holder})"
    )]
    Fenced {
        mine: i64,
        current: i64,
        holder: String,
    },
    /// Transient errors that lasted longer than the retry budget.
    #[error("store {what}: still failing after {tries} tries over {waited:.1?}: {last}")]
    GaveUp {
        what: &'static str,
        tries: u32,
        waited: Duration,
        last: Box<StoreError>,
    },
    /// SQLite serves one controller: another one already runs on this file.
    #[error(
        "the SQLite store {path} is in use by another controller ({holder}); a SQLite store \
         serves one controller: run two controllers on PostgreSQL (docs/controller.md, high \
         availability)"
    )]
    InUse { path: String, holder: String },
}

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// The store: a connection pool plus the backend it talks to.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    url: String,
    retry: RetryPolicy,
    /// The leader epoch writes are fenced with (0: not fenced). Shared by every clone.
    fence: Arc<AtomicI64>,
}

/// Connections of a SQLite store's pool: WAL lets readers run beside the one writer, so the
/// API's reads never wait for a job's writes; writers queue on SQLite's lock (busy_timeout).
const SQLITE_POOL: u32 = 8;
/// How long a SQLite writer waits for the lock before SQLITE_BUSY (then retried).
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

fn q(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { what, source }
}

fn decode<M: prost::Message + Default>(what: &'static str, bytes: &[u8]) -> Result<M, StoreError> {
    M::decode(bytes).map_err(|source| StoreError::Decode { what, source })
}

#[derive(Debug)]
struct Embedded(Vec<Migration>);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async move { Ok(self.0) })
    }
}

/// The versioned migrations of one backend, embedded in the binary. A new schema version is a
/// new file and a new entry here; applied versions are recorded in `_sqlx_migrations`.
fn migrations(backend: Backend) -> Vec<Migration> {
    let v1 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0001_init.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0001_init.sql"),
    };
    let v2 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0002_suite_runs.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0002_suite_runs.sql"),
    };
    let v3 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0003_level_power.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0003_level_power.sql"),
    };
    let v4 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0004_level_protocol.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0004_level_protocol.sql"),
    };
    let v5 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0005_level_lease_epoch.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0005_level_lease_epoch.sql"),
    };
    let v6 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0006_leadership.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0006_leadership.sql"),
    };
    let v7 = match backend {
        Backend::Sqlite => include_str!("migrations/sqlite/0007_result_views.sql"),
        Backend::Postgres => include_str!("migrations/postgres/0007_result_views.sql"),
    };
    vec![
        Migration::new(
            1,
            Cow::Borrowed("init"),
            MigrationType::Simple,
            Cow::Borrowed(v1),
            false,
        ),
        Migration::new(
            2,
            Cow::Borrowed("suite_runs"),
            MigrationType::Simple,
            Cow::Borrowed(v2),
            false,
        ),
        Migration::new(
            3,
            Cow::Borrowed("level_power"),
            MigrationType::Simple,
            Cow::Borrowed(v3),
            false,
        ),
        Migration::new(
            4,
            Cow::Borrowed("level_protocol"),
            MigrationType::Simple,
            Cow::Borrowed(v4),
            false,
        ),
        Migration::new(
            5,
            Cow::Borrowed("level_lease_epoch"),
            MigrationType::Simple,
            Cow::Borrowed(v5),
            false,
        ),
        Migration::new(
            6,
            Cow::Borrowed("leadership"),
            MigrationType::Simple,
            Cow::Borrowed(v6),
            false,
        ),
        Migration::new(
            7,
            Cow::Borrowed("result_views"),
            MigrationType::Simple,
            Cow::Borrowed(v7),
            false,
        ),
    ]
}

impl Store {
    /// Opens (creating a SQLite file and its directory when missing) and migrates the store.
    /// Every PostgreSQL connection of the pool runs [`postgres_session`] first.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::BadUrl(url.to_string()));
        };
        let open_err = |source| StoreError::Open {
            url: url.to_string(),
            source,
        };
        let mut full = url.to_string();
        let mut max_conns = 8;
        if backend == Backend::Sqlite {
            let path = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:");
            let path = path.split('?').next().unwrap_or_default();
            if let Some(dir) = std::path::Path::new(path).parent()
                && !dir.as_os_str().is_empty()
            {
                std::fs::create_dir_all(dir).map_err(|e| open_err(sqlx::Error::Io(e)))?;
            }
            if !url.contains('?') {
                full.push_str("?mode=rwc");
            }
            max_conns = SQLITE_POOL;
        }
        let opts = AnyConnectOptions::from_str(&full)
            .map_err(open_err)?
            .disable_statement_logging();
        let mut pool_opts = AnyPoolOptions::new()
            .max_connections(max_conns)
            // A connection that cannot be had in 5 s is a transient error the retry policy
            // sees (and logs), rather than a wait hidden inside the pool.
            .acquire_timeout(std::time::Duration::from_secs(5));
        if backend == Backend::Sqlite {
            // Every connection of the pool: WAL (readers beside the writer), a writer waits
            // for the lock instead of failing at once, and fsync at checkpoints only (WAL
            // keeps a committed transaction across a process crash).
            pool_opts = pool_opts.after_connect(|conn, _| {
                Box::pin(async move {
                    use sqlx::Executor;
                    conn.execute(sqlx::raw_sql(&format!(
                        "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}; \
                         PRAGMA synchronous = NORMAL;"
                    )))
                    .await?;
                    Ok(())
                })
            });
        } else {
            pool_opts = pool_opts.after_connect(|conn, _| {
                Box::pin(async move {
                    use sqlx::Executor;
                    let settings = postgres_session();
                    conn.execute(sqlx::raw_sql(&settings)).await?;
                    Ok(())
                })
            });
        }
        let pool = pool_opts.connect_with(opts).await.map_err(open_err)?;
        let migrator = Migrator::new(Embedded(migrations(backend))).await?;
        migrator.run(&pool).await?;
        let store = Store {
            pool,
            backend,
            url: url.to_string(),
            retry: RetryPolicy::default(),
            fence: Arc::new(AtomicI64::new(0)),
        };
        let filled = store.fill_level_figures().await?;
        if filled > 0 {
            tracing::info!(
                levels = filled,
                "filled the figure columns of levels stored before"
            );
        }
        Ok(store)
    }

    /// This store with another retry policy (every clone made from it shares it).
    pub fn with_retry(mut self, policy: RetryPolicy) -> Store {
        self.retry = policy;
        self
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Fences every later write of this store and its clones with a leader epoch (0: none).
    pub fn set_fence(&self, epoch: i64) {
        self.fence.store(epoch, Ordering::SeqCst);
    }

    /// The epoch writes are fenced with (0: none).
    pub fn fence(&self) -> i64 {
        self.fence.load(Ordering::SeqCst)
    }

    /// Begins a write transaction, fenced: when this store writes for a leader epoch, the
    /// `leadership` row is read under a share lock (PostgreSQL `FOR SHARE`) and the write is
    /// refused unless the epoch is still current. A new leader's epoch bump waits for such a
    /// transaction to end, and every transaction after the bump sees the new epoch: a write is
    /// either before the takeover or refused.
    async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin write"))?;
        let mine = self.fence();
        if mine != 0 {
            let lock = match self.backend {
                Backend::Postgres => " FOR SHARE",
                Backend::Sqlite => "",
            };
            let row = sqlx::query(&format!(
                "SELECT epoch, holder FROM leadership WHERE id = 1{lock}"
            ))
            .fetch_one(&mut *tx)
            .await
            .map_err(q("check leadership"))?;
            let current: i64 = row.try_get("epoch").map_err(q("read leadership"))?;
            if current != mine {
                let holder: String = row.try_get("holder").unwrap_or_default();
                return Err(StoreError::Fenced {
                    mine,
                    current,
                    holder,
                });
            }
        }
        Ok(tx)
    }

    /// The backend this store talks to.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Runs one statement as is (administration and tests: `CREATE DATABASE …`).
    pub async fn execute_raw(&self, sql: &str) -> Result<(), StoreError> {
        sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .map_err(q("raw statement"))?;
        Ok(())
    }

    /// Closes the pool (waits for connections to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}
