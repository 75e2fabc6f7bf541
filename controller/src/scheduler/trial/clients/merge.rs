//! One level from the shares several client agents measured: counts added, latency
//! histograms merged bucket by bucket (exact: the percentiles are those of one histogram that
//! saw every request), throughput over the span the clients covered together on the
//! controller's clock, and how the clients were split and how their clocks agreed.

use std::collections::BTreeMap;

use fleetbench_proto::agentpb::{
    Distribution, LatencyHistogram, LeftOut, LevelClient, LevelClients, LevelOutcome, LevelResult,
    LoadLevel, PrefixCache,
};
use fleetbench_stats::latency::LatencyHist;

/// A client agent's clock against the controller's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Clock {
    /// Its clock minus the controller's, ms.
    pub offset_ms: f64,
    /// Half the round trip of the exchange the offset came from, ms.
    pub uncertainty_ms: f64,
}

/// What one client measured of the level.
#[derive(Debug, Clone)]
pub(crate) struct Share {
    pub host: String,
    pub clock: Clock,
    /// The level as this client ran it (its share of the concurrency or rate).
    pub level: LoadLevel,
    pub result: LevelResult,
}

/// Why shares do not make a level.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum MergeError {
    #[error(
        "client {host}: its level carries no histograms (an agent that predates RunBenchmarkRequest.histograms, or a stand-in): a split level cannot be merged without them"
    )]
    NoHistograms { host: String },
    #[error("client {host}: {what} histogram: {error}")]
    BadHistogram {
        host: String,
        what: &'static str,
        error: fleetbench_stats::latency::PartsError,
    },
    #[error("no client shares to merge")]
    Empty,
}

type Pick = fn(&fleetbench_proto::agentpb::LevelHistograms) -> Option<&LatencyHistogram>;

/// The distributions a level reports, with where each histogram lives.
const DISTS: [(&str, Pick); 7] = [
    ("ttft", |h| h.ttft.as_ref()),
    ("itl", |h| h.itl.as_ref()),
    ("tpot", |h| h.tpot.as_ref()),
    ("e2e", |h| h.e2e.as_ref()),
    ("queue", |h| h.queue.as_ref()),
    ("ttft_answer", |h| h.ttft_answer.as_ref()),
    ("itl_chunk", |h| h.itl_chunk.as_ref()),
];

fn hist(h: &LatencyHistogram) -> Result<LatencyHist, fleetbench_stats::latency::PartsError> {
    LatencyHist::from_parts(&h.values_ns, &h.counts, h.sum_ns, h.min_ns, h.max_ns)
}

/// `hist` summarised at the percentiles `like` reports (its keys: `p50`, `p99.9`, ...).
fn distribution(h: &LatencyHist, like: Option<&Distribution>) -> Distribution {
    let Some((min, max)) = h.extremes_ns() else {
        return Distribution::default();
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let percentiles = like
        .map(|d| {
            d.percentiles
                .keys()
                .filter_map(|k| {
                    let p: f64 = k.strip_prefix('p')?.parse().ok()?;
                    Some((k.clone(), ms(h.percentile_ns(p))))
                })
                .collect()
        })
        .unwrap_or_default();
    Distribution {
        count: h.count(),
        mean: h.mean_ns() / 1e6,
        min: ms(min),
        max: ms(max),
        percentiles,
    }
}

/// The level `index` (as the spec states it: `level`) from every client's share.
pub(crate) fn merge(
    index: u32,
    level: &LoadLevel,
    shares: &[Share],
) -> Result<LevelResult, MergeError> {
    let first = shares.first().ok_or(MergeError::Empty)?;
    let mut out = LevelResult {
        level_index: index,
        level: Some(*level),
        window_s: first.result.window_s,
        ramp_up_s: first.result.ramp_up_s,
        lease_epoch: first.result.lease_epoch,
        ..LevelResult::default()
    };
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    let mut left = LeftOut::default();
    let (mut prompt_sent, mut reusable) = (0u64, 0u64);
    let mut errors = Vec::new();
    for s in shares {
        let r = &s.result;
        out.completed += r.completed;
        out.failed += r.failed;
        out.sent += r.sent;
        out.input_tokens += r.input_tokens;
        out.output_tokens += r.output_tokens;
        out.peak_concurrency += r.peak_concurrency;
        out.goodput_requests_per_s += r.goodput_requests_per_s;
        for (k, n) in &r.failures_by_kind {
            *failures.entry(k.clone()).or_default() += n;
        }
        if let Some(l) = &r.left_out {
            left.failed += l.failed;
            left.ramp_up += l.ramp_up;
            left.drain += l.drain;
        }
        if let Some(c) = &r.prefix_cache {
            prompt_sent += c.prompt_tokens_sent;
            reusable += c.prompt_tokens_reusable;
        }
        if r.outcome != LevelOutcome::Ok as i32 || !r.error.is_empty() {
            let what = if r.error.is_empty() {
                "failed"
            } else {
                r.error.as_str()
            };
            errors.push(format!("client {}: {what}", s.host));
        }
    }
    out.failures_by_kind = failures.into_iter().collect();
    out.left_out = Some(left);
    out.error_rate = if out.sent > 0 {
        out.failed as f64 / out.sent as f64
    } else {
        0.0
    };
    out.error = errors.join("; ");
    // A client that measured nothing leaves a part of the load unmeasured: the level failed.
    out.outcome = if errors.is_empty() && out.completed > 0 {
        LevelOutcome::Ok as i32
    } else {
        LevelOutcome::Failed as i32
    };
    out.burst = level.request_rate.is_none()
        && level
            .concurrency
            .is_some_and(|c| out.sent < u64::from(fleetbench_proto::BURST_FACTOR) * u64::from(c));
    timing(&mut out, shares);
    histograms(&mut out, shares)?;
    out.prefix_cache = Some(PrefixCache {
        prompt_tokens_sent: prompt_sent,
        prompt_tokens_reusable: reusable,
        designed_reuse: first
            .result
            .prefix_cache
            .as_ref()
            .and_then(|c| c.designed_reuse)
            .and(if prompt_sent > 0 {
                Some(reusable as f64 / prompt_sent as f64)
            } else {
                None
            }),
        note: format!(
            "a level split over {} client agents: the engine's cache counters are not read \
             (each client ends its share at its own time, so no one reading spans the level)",
            shares.len()
        ),
        ..PrefixCache::default()
    });
    Ok(out)
}

/// Start, end and throughput on the controller's clock, and the clients' agreement.
fn timing(out: &mut LevelResult, shares: &[Share]) {
    let on_ours = |unix_ms: i64, c: Clock| unix_ms as f64 - c.offset_ms;
    let starts: Vec<f64> = shares
        .iter()
        .map(|s| on_ours(s.result.started_unix_ms, s.clock))
        .collect();
    // Each client's last response, from its own start and duration (finer than its
    // millisecond finish stamp, which also includes the cache read after the level).
    let ends: Vec<f64> = shares
        .iter()
        .zip(&starts)
        .map(|(s, start)| start + s.result.duration_s * 1e3)
        .collect();
    let first = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let last_start = starts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let end = ends.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    out.started_unix_ms = first.round() as i64;
    out.finished_unix_ms = shares
        .iter()
        .map(|s| on_ours(s.result.finished_unix_ms, s.clock).round() as i64)
        .max()
        .unwrap_or(out.started_unix_ms);
    if out.window_s.is_some() {
        // Steady-state windows of one length that begin together: the rates add.
        out.duration_s = shares
            .iter()
            .map(|s| s.result.duration_s)
            .fold(0.0, f64::max);
        out.output_tokens_per_s = shares.iter().map(|s| s.result.output_tokens_per_s).sum();
        out.total_tokens_per_s = shares.iter().map(|s| s.result.total_tokens_per_s).sum();
        out.requests_per_s = shares.iter().map(|s| s.result.requests_per_s).sum();
    } else {
        // From the first client's start to the last response of any: what one client that
        // sent every request would have divided by.
        out.duration_s = ((end - first) / 1e3).max(0.0);
        let per_s = |x: u64| {
            if out.duration_s > 0.0 {
                x as f64 / out.duration_s
            } else {
                0.0
            }
        };
        out.output_tokens_per_s = per_s(out.output_tokens);
        out.total_tokens_per_s = per_s(out.input_tokens + out.output_tokens);
        out.requests_per_s = per_s(out.completed);
        out.goodput_requests_per_s = if out.duration_s > 0.0 {
            shares
                .iter()
                .map(|s| s.result.goodput_requests_per_s * s.result.duration_s)
                .sum::<f64>()
                / out.duration_s
        } else {
            0.0
        };
    }
    let uncertainty = shares
        .iter()
        .map(|s| s.clock.uncertainty_ms)
        .fold(0.0, f64::max);
    out.clients = Some(LevelClients {
        clients: shares
            .iter()
            .zip(starts.iter().zip(&ends))
            .map(|(s, (start, end))| LevelClient {
                host: s.host.clone(),
                concurrency: s.level.concurrency,
                request_rate: s.level.request_rate,
                completed: s.result.completed,
                failed: s.result.failed,
                clock_offset_ms: s.clock.offset_ms,
                clock_uncertainty_ms: s.clock.uncertainty_ms,
                started_unix_ms: start.round() as i64,
                finished_unix_ms: end.round() as i64,
            })
            .collect(),
        start_spread_ms: last_start - first,
        clock_uncertainty_ms: uncertainty,
    });
}

/// Every distribution from the clients' merged histograms.
fn histograms(out: &mut LevelResult, shares: &[Share]) -> Result<(), MergeError> {
    let mut merged: Vec<LatencyHist> = vec![LatencyHist::default(); DISTS.len()];
    for s in shares {
        let h = s
            .result
            .histograms
            .as_ref()
            .ok_or_else(|| MergeError::NoHistograms {
                host: s.host.clone(),
            })?;
        for (slot, (what, pick)) in merged.iter_mut().zip(DISTS) {
            if let Some(part) = pick(h) {
                let part = hist(part).map_err(|error| MergeError::BadHistogram {
                    host: s.host.clone(),
                    what,
                    error,
                })?;
                slot.merge(&part);
            }
        }
    }
    // Each distribution at the percentiles the first client reported for it.
    let r = &shares[0].result;
    let [ttft, itl, tpot, e2e, queue, ttft_answer, itl_chunk] = [
        &r.ttft_ms,
        &r.itl_ms,
        &r.tpot_ms,
        &r.e2e_ms,
        &r.queue_ms,
        &r.ttft_answer_ms,
        &r.itl_chunk_ms,
    ]
    .map(Option::as_ref);
    let d = |i: usize, like| Some(distribution(&merged[i], like));
    out.ttft_ms = d(0, ttft);
    out.itl_ms = d(1, itl);
    out.tpot_ms = d(2, tpot);
    out.e2e_ms = d(3, e2e);
    out.queue_ms = d(4, queue);
    out.ttft_answer_ms = d(5, ttft_answer);
    out.itl_chunk_ms = d(6, itl_chunk);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbench_proto::agentpb::LevelHistograms;

    fn wire(h: &LatencyHist) -> LatencyHistogram {
        let (values_ns, counts) = h.buckets().into_iter().unzip();
        let (min_ns, max_ns) = h.extremes_ns().unwrap_or((0, 0));
        LatencyHistogram {
            values_ns,
            counts,
            sum_ns: h.sum_ns(),
            min_ns,
            max_ns,
        }
    }

    /// A client's share: `n` requests with TTFTs from `ttft`, 10 output tokens each.
    fn share(
        host: &str,
        offset_ms: f64,
        start: i64,
        n: u64,
        ttft: impl Fn(u64) -> u64,
    ) -> (Share, LatencyHist) {
        let mut h = LatencyHist::default();
        for i in 0..n {
            h.record(ttft(i));
        }
        let d = Distribution {
            count: n,
            percentiles: [("p50".to_string(), 0.0), ("p99".to_string(), 0.0)].into(),
            ..Distribution::default()
        };
        let result = LevelResult {
            outcome: LevelOutcome::Ok as i32,
            completed: n,
            sent: n,
            output_tokens: 10 * n,
            input_tokens: 100 * n,
            duration_s: 2.0,
            // Its own clock: ours plus its offset.
            started_unix_ms: start + offset_ms as i64,
            finished_unix_ms: start + offset_ms as i64 + 2_000,
            ttft_ms: Some(d),
            histograms: Some(LevelHistograms {
                ttft: Some(wire(&h)),
                ..LevelHistograms::default()
            }),
            ..LevelResult::default()
        };
        let level = LoadLevel {
            concurrency: Some(2),
            ..LoadLevel::default()
        };
        let clock = Clock {
            offset_ms,
            uncertainty_ms: 0.4,
        };
        (
            Share {
                host: host.into(),
                clock,
                level,
                result,
            },
            h,
        )
    }

    #[test]
    fn shares_merge_exactly_on_the_controllers_clock() {
        // Three clients, clocks 250 ms ahead, 40 ms behind and level; all started at 10,000
        // on the controller's clock except the last, 100 ms later.
        let (a, ha) = share("h1", 250.0, 10_000, 300, |i| 1_000_000 + i * 37_000);
        let (b, hb) = share("h2", -40.0, 10_000, 200, |i| 5_000_000 + i * 91_000);
        let (c, hc) = share("h3", 0.0, 10_100, 100, |i| 20_000_000 + i * 3_000);
        let level = LoadLevel {
            concurrency: Some(6),
            ..LoadLevel::default()
        };
        let m = merge(3, &level, &[a, b, c]).unwrap();
        assert_eq!(
            (m.level_index, m.completed, m.sent, m.output_tokens),
            (3, 600, 600, 6_000)
        );
        let mut all = ha.clone();
        all.merge(&hb);
        all.merge(&hc);
        let ttft = m.ttft_ms.unwrap();
        assert_eq!(ttft.count, 600);
        for (k, p) in [("p50", 50.0), ("p99", 99.0)] {
            assert_eq!(
                ttft.percentiles[k],
                all.percentile_ns(p) as f64 / 1e6,
                "{k}"
            );
        }
        assert!((ttft.mean - all.mean_ns() / 1e6).abs() < 1e-9);
        // The span from the first start to the last response: 10,000 .. 12,100 ms.
        assert!((m.duration_s - 2.1).abs() < 1e-9, "{}", m.duration_s);
        assert!((m.output_tokens_per_s - 6_000.0 / 2.1).abs() < 1e-6);
        assert_eq!(m.started_unix_ms, 10_000);
        let clients = m.clients.unwrap();
        assert_eq!(clients.clients.len(), 3);
        assert!((clients.start_spread_ms - 100.0).abs() < 1e-9);
        assert_eq!(clients.clients[0].started_unix_ms, 10_000);
        assert_eq!(m.outcome, LevelOutcome::Ok as i32);
        // Not a burst: 600 measured requests for 6 streams.
        assert!(!m.burst);
    }

    #[test]
    fn a_client_that_measured_nothing_fails_the_level_by_name() {
        let (a, _) = share("h1", 0.0, 0, 50, |i| 1_000_000 + i);
        let (mut b, _) = share("h2", 0.0, 0, 0, |i| i + 1);
        b.result.outcome = LevelOutcome::Failed as i32;
        b.result.error = "all 5 requests failed (5 × connect)".into();
        let level = LoadLevel {
            concurrency: Some(2),
            ..LoadLevel::default()
        };
        let m = merge(0, &level, &[a.clone(), b]).unwrap();
        assert_eq!(m.outcome, LevelOutcome::Failed as i32);
        assert!(
            m.error.starts_with("client h2: all 5 requests failed"),
            "{}",
            m.error
        );
        let mut old = a;
        old.result.histograms = None;
        assert_eq!(
            merge(0, &level, &[old]).unwrap_err(),
            MergeError::NoHistograms { host: "h1".into() }
        );
        assert_eq!(merge(0, &level, &[]).unwrap_err(), MergeError::Empty);
    }
}
