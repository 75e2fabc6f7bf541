//! An engine's `/metrics` mapped to common names (running and queued requests, KV-cache
//! usage, generation throughput, token counters), with every raw series kept.

use crate::EngineKind;
use crate::prom::{self, Exposition};

pub use crate::prom::Series;

/// The common view of one scrape. `None` where the engine does not export the figure.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EngineMetricsData {
    /// Requests in the running batch, summed over data-parallel ranks / engines.
    pub running_requests: Option<f64>,
    /// Requests waiting for a batch slot, summed likewise.
    pub queued_requests: Option<f64>,
    /// KV-cache usage, 0..1, averaged over ranks / engines.
    pub kv_cache_usage: Option<f64>,
    /// The server's generation throughput as the engine itself reports it (tokens/s): only
    /// SGLang does (`gen_throughput`). vLLM has no such gauge, and llama.cpp's
    /// `predicted_tokens_seconds` is the mean decode speed *per request* over the window since
    /// the previous scrape by anyone (16 tokens/s on an H200 while the server generated 750
    /// with 64 requests in flight, and reset by every other scraper): for both, derive it with
    /// [`rate`] from `generation_tokens_total`, as the agent does.
    pub generation_tokens_per_s: Option<f64>,
    /// Prompt tokens processed since start (counter).
    pub prompt_tokens_total: Option<f64>,
    /// Tokens generated since start (counter).
    pub generation_tokens_total: Option<f64>,
    /// Every series of the scrape, unchanged.
    pub raw: Vec<Series>,
    /// Lines of the scrape that could not be read (`line N: reason`).
    pub parse_errors: Vec<String>,
}

/// How a figure combines over label sets.
#[derive(Clone, Copy)]
pub(crate) enum Agg {
    Sum,
    Mean,
}

/// Which series give a figure: candidate names in order (new name first, renamed old ones
/// after), and how to combine label sets.
pub(crate) struct Rule {
    pub(crate) names: &'static [&'static str],
    pub(crate) agg: Agg,
}

/// One engine's names for the common figures (each engine module holds its own).
pub(crate) struct Mapping {
    pub(crate) running: Rule,
    pub(crate) queued: Rule,
    pub(crate) kv: Rule,
    pub(crate) gen_rate: Rule,
    pub(crate) prompt_total: Rule,
    pub(crate) gen_total: Rule,
    /// Requests the engine finished since its start (counter); no names where it keeps none
    /// (llama-server).
    pub(crate) requests: Rule,
}

/// Reads a scrape of `kind`'s `/metrics` and maps it. `generic` uses whichever built-in
/// engine's names the scrape carries.
pub fn map_metrics(kind: EngineKind, text: &str) -> EngineMetricsData {
    let expo = prom::parse(text);
    let mapping = crate::engine::spec(kind).metric_mapping(&expo);
    EngineMetricsData {
        running_requests: figure(&expo, &mapping.running),
        queued_requests: figure(&expo, &mapping.queued),
        kv_cache_usage: figure(&expo, &mapping.kv),
        generation_tokens_per_s: figure(&expo, &mapping.gen_rate),
        prompt_tokens_total: figure(&expo, &mapping.prompt_total),
        generation_tokens_total: figure(&expo, &mapping.gen_total),
        parse_errors: expo.errors.iter().map(|e| e.to_string()).collect(),
        raw: expo.series,
    }
}

/// The first candidate name present, combined over its label sets. Series of tensor- or
/// pipeline-parallel ranks other than 0 are left out: SGLang's schedulers may each report
/// the same batch, and summing them would count it once per rank.
pub(crate) fn figure(expo: &Exposition, rule: &Rule) -> Option<f64> {
    rule.names.iter().find_map(|name| {
        let all: Vec<&Series> = expo.series.iter().filter(|s| s.name == *name).collect();
        let rank0: Vec<&Series> = all
            .iter()
            .copied()
            .filter(|s| {
                ["tp_rank", "pp_rank"]
                    .iter()
                    .all(|k| s.labels.get(*k).is_none_or(|v| v == "0"))
            })
            .collect();
        let chosen = if rank0.is_empty() { all } else { rank0 };
        let values: Vec<f64> = chosen
            .iter()
            .map(|s| s.value)
            .filter(|v| v.is_finite())
            .collect();
        if values.is_empty() {
            return None;
        }
        let sum: f64 = values.iter().sum();
        Some(match rule.agg {
            Agg::Sum => sum,
            Agg::Mean => sum / values.len() as f64,
        })
    })
}

/// Per-second rate of a counter between two scrapes `dt_s` seconds apart. A counter that went
/// down was reset (engine restart): the rate counts from zero, as Prometheus does. `None` for
/// a non-positive interval or a missing value.
pub fn rate(prev: Option<f64>, cur: Option<f64>, dt_s: f64) -> Option<f64> {
    let (prev, cur) = (prev?, cur?);
    if dt_s.is_nan() || dt_s <= 0.0 || !prev.is_finite() || !cur.is_finite() {
        return None;
    }
    let delta = if cur >= prev { cur - prev } else { cur };
    Some(delta / dt_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_handles_resets_and_bad_intervals() {
        assert_eq!(rate(Some(100.0), Some(350.0), 2.5), Some(100.0));
        assert_eq!(rate(Some(100.0), Some(30.0), 1.0), Some(30.0));
        assert_eq!(rate(Some(1.0), Some(2.0), 0.0), None);
        assert_eq!(rate(None, Some(2.0), 1.0), None);
    }

    #[test]
    fn ranks_other_than_zero_are_not_double_counted() {
        let text = "sglang:num_running_reqs{tp_rank=\"0\",dp_rank=\"0\"} 3\n\
                    sglang:num_running_reqs{tp_rank=\"1\",dp_rank=\"0\"} 3\n\
                    sglang:num_running_reqs{tp_rank=\"0\",dp_rank=\"1\"} 4\n\
                    sglang:token_usage{tp_rank=\"0\",dp_rank=\"0\"} 0.2\n\
                    sglang:token_usage{tp_rank=\"0\",dp_rank=\"1\"} 0.4\n";
        let m = map_metrics(EngineKind::Sglang, text);
        assert_eq!(m.running_requests, Some(7.0));
        assert!((m.kv_cache_usage.unwrap() - 0.3).abs() < 1e-9);
        assert_eq!(m.queued_requests, None);
        assert_eq!(m.raw.len(), 5);
    }
}
