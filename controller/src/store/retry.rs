//! Which store errors are worth retrying, and the retry policy every store operation runs under.
//!
//! A controller that measures for hours must not lose a job to a database that restarted, a
//! connection the network reset, a serialization conflict or a SQLite writer holding the lock
//! for a moment. Those errors are [`ErrorClass::Transient`]: the operation is tried again with
//! exponential backoff and jitter until it succeeds or the policy's budget is spent. Everything
//! else (a missing table, a dropped database, an undecodable blob, a refused login, a fenced-off
//! leader) is [`ErrorClass::Persistent`] and returned at once. The classification lives here
//! and nowhere else.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use rand::Rng;

use super::StoreError;

/// Whether an error can go away by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Connection lost or refused, pool timeout, serialization failure or deadlock, a server
    /// shutting down or starting, SQLite busy or locked: retried.
    Transient,
    /// Anything else: retrying would only repeat it.
    Persistent,
}

/// PostgreSQL SQLSTATEs that a retry can outlive: connection exceptions (class 08), the
/// serialization failure and deadlock of concurrent transactions, a server shutting down or
/// still starting, too many connections.
fn transient_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300" | "55P03"
        )
}

/// SQLite's primary result codes BUSY (5) and LOCKED (6), whatever their extended form
/// (`SQLITE_BUSY_SNAPSHOT` is 517: the low byte is the primary code).
fn transient_sqlite_code(code: &str) -> bool {
    code.parse::<i64>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
}

/// The class of a driver error.
pub fn classify_sqlx(e: &sqlx::Error) -> ErrorClass {
    use sqlx::Error::*;
    match e {
        Io(_) | PoolTimedOut | Protocol(_) | WorkerCrashed => ErrorClass::Transient,
        Database(db) => {
            let code = db.code().unwrap_or_default();
            let transient = transient_sqlstate(&code)
                || transient_sqlite_code(&code)
                // Older SQLite messages without a code still say what happened.
                || db.message().contains("database is locked");
            if transient {
                ErrorClass::Transient
            } else {
                ErrorClass::Persistent
            }
        }
        _ => ErrorClass::Persistent,
    }
}

impl StoreError {
    /// Whether retrying this error can help.
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Open { source, .. } | StoreError::Query { source, .. } => {
                classify_sqlx(source)
            }
            _ => ErrorClass::Persistent,
        }
    }

    /// A write refused because another controller leads now.
    pub fn is_fenced(&self) -> bool {
        match self {
            StoreError::Fenced { .. } => true,
            StoreError::GaveUp { last, .. } => last.is_fenced(),
            _ => false,
        }
    }
}

/// How long and how often a store operation is retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Total time an operation may keep failing transiently before it fails for good.
    pub budget: Duration,
    /// The first delay; each next one doubles, up to `max_delay`.
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: Duration::from_secs(60),
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// No retry at all (tools that want the first error).
    pub fn none() -> Self {
        RetryPolicy {
            budget: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }

    /// The delay before retry number `n` (0 for the first): the exponential step with "equal
    /// jitter" (half fixed, half random), so that many waiters do not retry in lockstep and
    /// none retries at once.
    pub fn delay(&self, n: u32) -> Duration {
        let step = self
            .first_delay
            .saturating_mul(1u32 << n.min(20))
            .min(self.max_delay);
        let half = step / 2;
        half + rand::rng().random_range(Duration::ZERO..=half)
    }

    /// Runs `op` until it succeeds, fails persistently, or transient failures have lasted
    /// longer than the budget (then [`StoreError::GaveUp`] carries the last error).
    pub async fn run<T, F, Fut>(&self, what: &'static str, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let start = Instant::now();
        let mut tries = 0u32;
        loop {
            let e = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            tries += 1;
            if e.class() == ErrorClass::Persistent {
                return Err(e);
            }
            let wait = self.delay(tries - 1);
            if start.elapsed() + wait > self.budget {
                if tries == 1 {
                    return Err(e);
                }
                tracing::error!(what, tries, error = %e, "store still failing; giving up");
                return Err(StoreError::GaveUp {
                    what,
                    tries,
                    waited: start.elapsed(),
                    last: Box::new(e),
                });
            }
            if tries == 1 {
                tracing::warn!(what, error = %e, "transient store error; retrying");
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified() {
        for c in [
            "08006", "08001", "40001", "40P01", "57P01", "57P03", "53300",
        ] {
            assert!(transient_sqlstate(c), "{c}");
        }
        for c in ["3D000", "42P01", "23505", "28P01", "22P02"] {
            assert!(!transient_sqlstate(c), "{c}");
        }
        for c in ["5", "6", "517", "261", "262"] {
            assert!(transient_sqlite_code(c), "{c}");
        }
        for c in ["1", "19", "2067", "11"] {
            assert!(!transient_sqlite_code(c), "{c}");
        }
        assert_eq!(
            classify_sqlx(&sqlx::Error::PoolTimedOut),
            ErrorClass::Transient
        );
        assert_eq!(
            classify_sqlx(&sqlx::Error::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset
            ))),
            ErrorClass::Transient
        );
        assert_eq!(
            classify_sqlx(&sqlx::Error::PoolClosed),
            ErrorClass::Persistent
        );
        assert_eq!(
            classify_sqlx(&sqlx::Error::RowNotFound),
            ErrorClass::Persistent
        );
    }

    #[test]
    fn delays_grow_with_jitter_up_to_the_cap() {
        let p = RetryPolicy::default();
        for n in 0..30 {
            let d = p.delay(n);
            let step = (p.first_delay * (1u32 << n.min(20))).min(p.max_delay);
            assert!(
                d >= step / 2 && d <= step,
                "retry {n}: {d:?} outside {step:?}"
            );
        }
    }

    fn io() -> StoreError {
        StoreError::Query {
            what: "t",
            source: sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_until_the_budget_is_spent() {
        let p = RetryPolicy {
            budget: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        // Three transient failures, then success.
        let mut n = 0;
        let v = p
            .run("t", || {
                n += 1;
                let r = if n <= 3 { Err(io()) } else { Ok(n) };
                async move { r }
            })
            .await
            .unwrap();
        assert_eq!(v, 4);
        // Always failing: gives up after about the budget, naming the last error.
        let start = tokio::time::Instant::now();
        let e = p
            .run("t", || async { Err::<(), _>(io()) })
            .await
            .unwrap_err();
        let waited = start.elapsed();
        assert!(
            waited <= Duration::from_secs(10) && waited >= Duration::from_secs(5),
            "{waited:?}"
        );
        assert!(
            matches!(e, StoreError::GaveUp { tries, .. } if tries > 3),
            "{e}"
        );
        // A persistent error is returned at once.
        let mut n = 0;
        let e = p
            .run("t", || {
                n += 1;
                async {
                    Err::<(), _>(StoreError::Query {
                        what: "t",
                        source: sqlx::Error::RowNotFound,
                    })
                }
            })
            .await
            .unwrap_err();
        assert_eq!(n, 1);
        assert!(matches!(e, StoreError::Query { .. }));
    }
}
