//! The range of every numeric field a job spec or an agent request may carry, in one place:
//! the controller checks a spec against them before anything is expanded or allocated, and the
//! agent checks each `RunBenchmark` and `ApplyEngine` against them before anything runs (a
//! request can come from any caller, not only a controller that validated it). docs/security.md
//! lists them; a value outside is refused by name, never clamped.
//!
//! The ranges are wide enough for any real experiment on a large host and narrow enough that
//! no value can make a binary allocate without bound, overflow a duration or spin forever.

/// Times every (config, workload) pair runs.
pub const REPEATS: (u32, u32) = (1, 100);
/// Trials one job may expand to: configs × workloads × repeats.
pub const MAX_TRIALS: u64 = 10_000;
/// Configs and workloads in one spec.
pub const MAX_CONFIGS: usize = 1_000;
pub const MAX_WORKLOADS: usize = 100;
/// Load levels in one sweep.
pub const MAX_LEVELS: usize = 64;
/// Requests in flight (closed loop), or the cap of an open loop.
pub const CONCURRENCY: (u32, u32) = (1, 65_536);
/// Open-loop arrival rate, requests per second. Below the minimum one level would take days.
pub const REQUEST_RATE: (f64, f64) = (0.01, 100_000.0);
/// Gamma shape of open-loop inter-arrival times.
pub const BURSTINESS: (f64, f64) = (0.01, 100.0);
/// Measured requests per level.
pub const REQUESTS: (u32, u32) = (1, 1_000_000);
/// Warm-up requests per level.
pub const WARMUP: (u32, u32) = (0, 100_000);
/// Seconds per level when bounded by time.
pub const DURATION_S: (f64, f64) = (0.1, 86_400.0);
/// The longest a level bounded by requests may be planned to take at its rate, in seconds.
pub const MAX_LEVEL_S: f64 = 7.0 * 86_400.0;
/// Token lengths: input, output, prefix, suffix.
pub const TOKENS: (u32, u32) = (1, 1_048_576);
/// Shared-prefix groups and prompts per group; their product is capped by `MAX_PROMPTS`.
pub const GROUPS: (u32, u32) = (1, 100_000);
pub const MAX_PROMPTS: u64 = 1_000_000;
/// Turns of one conversation session (each turn's prompt holds every earlier one).
pub const TURNS: (u32, u32) = (1, 1_000);
/// Think time between two turns of a session, ms (an hour at most).
pub const THINK_MS: (u32, u32) = (0, 3_600_000);
/// Tokens each 512-token block of a Mooncake trace is sent as (room for a marker, no more than
/// recorded); the load generator's `dataset::mooncake` holds the same range.
pub const TRACE_BLOCK_TOKENS: (u32, u32) = (16, 512);
/// How much faster than recorded a trace may be replayed (below 1: slower).
pub const TRACE_SPEEDUP: (f64, f64) = (0.01, 100.0);
/// A trace's blocks are sent as recorded (512 tokens) unless the spec says otherwise.
pub const TRACE_BLOCK_TOKENS_DEFAULT: u32 = TRACE_BLOCK_TOKENS.1;
/// A trace is replayed at its recorded speed unless the spec says otherwise.
pub const TRACE_SPEEDUP_DEFAULT: f64 = 1.0;
/// Client agents one level's load may be split over (`load.clients`).
pub const CLIENTS: (u32, u32) = (1, 64);
/// Percentiles reported per distribution.
pub const MAX_PERCENTILES: usize = 32;
/// Latency objectives, milliseconds.
pub const SLO_MS: (f64, f64) = (0.001, 3_600_000.0);
/// GPUs a host selector may ask for.
pub const GPU_COUNT: (u32, u32) = (1, 1_024);
/// Hosts one engine may span (`nodes` of a config): one rank process per host.
pub const NODES: (u32, u32) = (1, 64);
/// Replicas of one engine behind a router (`replicas` of a config): one host each.
pub const REPLICAS: (u32, u32) = (1, 64);
/// Flags in one `ApplyEngine`.
pub const MAX_FLAGS: usize = 256;
/// Level indices a `RunBenchmark` may skip.
pub const MAX_SKIP_LEVELS: usize = 64;
/// Bytes of a name, model, path or other short string.
pub const MAX_NAME_LEN: usize = 1_024;
/// The keep-alive interval a `WatchEngine` caller may ask for, milliseconds; 0 asks for
/// [`DEFAULT_KEEPALIVE_MS`].
pub const KEEPALIVE_MS: (u32, u32) = (100, 600_000);
pub const DEFAULT_KEEPALIVE_MS: u32 = 1_000;

/// `Err("must be between A and B, got V")` when `v` is outside `[lo, hi]`.
pub fn check_u32(v: u32, (lo, hi): (u32, u32)) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("must be between {lo} and {hi}, got {v}"))
    }
}

/// As [`check_u32`] for a number, which must also be finite.
pub fn check_f64(v: f64, (lo, hi): (f64, f64)) -> Result<(), String> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(format!("must be between {lo} and {hi}, got {}", show(v)))
    }
}

/// `1e-300` rather than three hundred zeros.
fn show(v: f64) -> String {
    if v != 0.0 && v.is_finite() && (v.abs() < 1e-3 || v.abs() >= 1e9) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// `Err` when a list is longer than `max`.
pub fn check_len(len: usize, max: usize) -> Result<(), String> {
    if len <= max {
        Ok(())
    } else {
        Err(format!("at most {max} entries, got {len}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_are_inside_and_the_issue_s_values_outside() {
        assert!(check_u32(1, REPEATS).is_ok());
        assert!(check_u32(100, REPEATS).is_ok());
        assert_eq!(
            check_u32(4_000_000_000, REPEATS).unwrap_err(),
            "must be between 1 and 100, got 4000000000"
        );
        assert!(check_f64(1e-300, REQUEST_RATE).is_err());
        assert!(check_f64(f64::NAN, REQUEST_RATE).is_err());
        assert!(check_f64(f64::INFINITY, REQUEST_RATE).is_err());
        assert!(check_f64(0.01, REQUEST_RATE).is_ok());
        assert!(check_len(33, MAX_PERCENTILES).is_err());
    }
}
