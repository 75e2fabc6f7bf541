//! The `bench.level` span: one load level, as the controller sees it (a child of its `trial`
//! span) and as the agent runs it (a child of its `RunBenchmark` server span, in the same
//! trace). One definition, so that both views of a level carry the same attribute names and
//! the same figures, and a dashboard or trace query written against one reads the other.

#[doc(hidden)]
pub use tracing as __tracing;

use crate::agentpb::{CrashClass, LevelOutcome, LevelResult};
use crate::words::Word;

/// Opens a `bench.level` span for level `index` (any integer) of `level` (a
/// [`LoadLevel`](crate::agentpb::LoadLevel)), with the caller's own fields after them (each
/// `name = value,` with its trailing comma, in `tracing`'s syntax). The result fields start
/// empty; [`record_level`] fills them from the level's result.
#[macro_export]
macro_rules! bench_level_span {
    ($index:expr, $level:expr, $($field:tt)*) => {
        $crate::spans::__tracing::info_span!(
            "bench.level",
            fleetbench.level.index = ($index) as i64,
            fleetbench.concurrency = $level.concurrency.map(i64::from),
            fleetbench.request_rate = $level.request_rate,
            $($field)*
            fleetbench.level.output_tokens_per_s = $crate::spans::__tracing::field::Empty,
            fleetbench.level.requests_per_s = $crate::spans::__tracing::field::Empty,
            fleetbench.level.ttft_p50_ms = $crate::spans::__tracing::field::Empty,
            fleetbench.level.ttft_p99_ms = $crate::spans::__tracing::field::Empty,
            fleetbench.level.itl_p50_ms = $crate::spans::__tracing::field::Empty,
            fleetbench.level.itl_p99_ms = $crate::spans::__tracing::field::Empty,
            fleetbench.level.e2e_p50_ms = $crate::spans::__tracing::field::Empty,
            fleetbench.level.e2e_p99_ms = $crate::spans::__tracing::field::Empty,
            fleetbench.level.errors = $crate::spans::__tracing::field::Empty,
            fleetbench.level.error_rate = $crate::spans::__tracing::field::Empty,
            fleetbench.level.prefix_cache_hit_rate = $crate::spans::__tracing::field::Empty,
            fleetbench.level.crashed = $crate::spans::__tracing::field::Empty,
            fleetbench.crash.class = $crate::spans::__tracing::field::Empty,
        )
    };
}

/// Records a level's result on its `bench.level` span. A figure the result does not carry (no
/// completed request, no engine cache metric) is left unset rather than written as zero.
pub fn record_level(span: &tracing::Span, r: &LevelResult) {
    span.record(
        "fleetbench.level.output_tokens_per_s",
        r.output_tokens_per_s,
    );
    span.record("fleetbench.level.requests_per_s", r.requests_per_s);
    span.record("fleetbench.level.errors", r.failed as i64);
    span.record("fleetbench.level.error_rate", r.error_rate);
    if let Some(h) = r.prefix_cache.as_ref().and_then(|c| c.hit_rate) {
        span.record("fleetbench.level.prefix_cache_hit_rate", h);
    }
    let crashed = r.outcome == LevelOutcome::Crashed as i32;
    span.record("fleetbench.level.crashed", crashed);
    if let Some(c) = r.crash.as_ref().filter(|_| crashed) {
        span.record(
            "fleetbench.crash.class",
            CrashClass::word_of(c.class).as_str(),
        );
    }
    for (field, d, key) in [
        ("fleetbench.level.ttft_p50_ms", &r.ttft_ms, "p50"),
        ("fleetbench.level.ttft_p99_ms", &r.ttft_ms, "p99"),
        ("fleetbench.level.itl_p50_ms", &r.itl_ms, "p50"),
        ("fleetbench.level.itl_p99_ms", &r.itl_ms, "p99"),
        ("fleetbench.level.e2e_p50_ms", &r.e2e_ms, "p50"),
        ("fleetbench.level.e2e_p99_ms", &r.e2e_ms, "p99"),
    ] {
        if let Some(v) = d.as_ref().and_then(|d| d.percentiles.get(key)) {
            span.record(field, *v);
        }
    }
}
