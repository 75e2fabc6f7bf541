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

mod events;
mod jobs;
mod results;
mod suites;

use std::borrow::Cow;
use std::str::FromStr;

use futures::future::BoxFuture;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, ConnectOptions};

pub use events::RegisteredAgent;
pub use jobs::{NewJob, TrialRow};
pub use suites::SuiteRun;

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
}

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
    ]
}

impl Store {
    /// Opens (creating a SQLite file and its directory when missing) and migrates the store.
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
            // One writer at a time is SQLite's model; a single connection also avoids
            // SQLITE_BUSY between our own tasks.
            max_conns = 1;
        }
        let opts = AnyConnectOptions::from_str(&full)
            .map_err(open_err)?
            .disable_statement_logging();
        let pool = AnyPoolOptions::new()
            .max_connections(max_conns)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_with(opts)
            .await
            .map_err(open_err)?;
        if backend == Backend::Sqlite {
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await
                .map_err(q("enable WAL"))?;
        }
        let migrator = Migrator::new(Embedded(migrations(backend))).await?;
        migrator.run(&pool).await?;
        Ok(Store { pool, backend })
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
