//! Prefix caches: how to empty an engine's, and what its own metrics say it served from it.
//!
//! Every engine keeps the KV of prompts it has seen (SGLang's radix cache, vLLM's prefix cache,
//! llama.cpp's slots and host-RAM prompt cache). A benchmark level that hits it measures cached
//! prefill; the level's cache figure comes from the engine's own counters, read before and
//! after the level, so it does not depend on what the client believes it sent:
//!
//! - SGLang (and the simulator): `sglang:cached_tokens_total` over `sglang:prompt_tokens_total`
//!   (counters); the `sglang:cache_hit_rate` gauge when the counters are absent.
//! - vLLM: `vllm:prefix_cache_hits_total` over `vllm:prefix_cache_queries_total` (tokens).
//! - llama.cpp: `llamacpp:prompt_tokens_total` counts prompt tokens it *evaluated*; what it did
//!   not evaluate of what was sent came from a cache. Newer builds also count those
//!   (`llamacpp:prompt_tokens_cached_total`), so that evaluated plus cached is what it received.
//!
//! Behind a router the client does not know what each replica was sent: a replica's own figure
//! ([`own_figure`]) comes from its counters alone.

use crate::EngineKind;
use crate::prom::{self, Exposition};

/// The cache counters of one scrape (`None`: not exported).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheCounters {
    /// SGLang: prompt tokens received; llama.cpp: prompt tokens evaluated.
    pub prompt_tokens: Option<f64>,
    /// SGLang: prompt tokens served from the radix cache.
    pub cached_tokens: Option<f64>,
    /// llama.cpp: prompt tokens it did not evaluate because a cache held them (newer builds).
    pub prompt_tokens_cached: Option<f64>,
    /// vLLM: prefix-cache hits and queries, in tokens.
    pub hits: Option<f64>,
    pub queries: Option<f64>,
    /// SGLang's recent hit-rate gauge.
    pub hit_rate_gauge: Option<f64>,
}

/// What a level's cache figure is, from two scrapes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheFigure {
    /// The metric(s) it came from; empty when none.
    pub source: String,
    /// Fraction of the level's prompt tokens the engine served from its cache.
    pub hit_rate: Option<f64>,
    /// Prompt tokens by the engine's count (evaluated for llama.cpp, received or looked up for
    /// the others).
    pub prompt_tokens_engine: Option<f64>,
    /// Why there is no figure.
    pub note: String,
}

pub(crate) fn sum(expo: &Exposition, name: &str) -> Option<f64> {
    let v: Vec<f64> = expo
        .series
        .iter()
        .filter(|s| s.name == name)
        // Ranks other than 0 repeat rank 0's figure (see `metrics`).
        .filter(|s| {
            ["tp_rank", "pp_rank"]
                .iter()
                .all(|k| s.labels.get(*k).is_none_or(|v| v == "0"))
        })
        .map(|s| s.value)
        .filter(|v| v.is_finite())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// Reads the cache counters of a `/metrics` scrape of `kind` (its module names the series).
pub fn counters(kind: EngineKind, text: &str) -> CacheCounters {
    crate::engine::spec(kind).cache_counters(&prom::parse(text))
}

/// A counter's increase (a counter that went down was reset: count from zero).
pub(crate) fn delta(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    let after = after?;
    Some(match before {
        Some(b) if after >= b => after - b,
        _ => after,
    })
}

/// The level's figure from the counters before and after it; `sent`: prompt tokens the client
/// sent in the level (every completed request, warm-up included).
pub fn level_figure(
    kind: EngineKind,
    before: &CacheCounters,
    after: &CacheCounters,
    sent: u64,
) -> CacheFigure {
    let mut f = CacheFigure::default();
    if let (Some(h), Some(q)) = (
        delta(before.hits, after.hits),
        delta(before.queries, after.queries),
    ) {
        f.source = "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total".into();
        f.prompt_tokens_engine = Some(q);
        f.hit_rate = (q > 0.0).then(|| (h / q).clamp(0.0, 1.0));
        return f;
    }
    let engine = crate::engine::spec(kind);
    if engine.counts_evaluated_prompt_tokens(after)
        && let Some(evaluated) = delta(before.prompt_tokens, after.prompt_tokens)
    {
        f.source = "1 - llamacpp:prompt_tokens_total (evaluated) / prompt tokens sent".into();
        f.prompt_tokens_engine = Some(evaluated);
        f.hit_rate = (sent > 0).then(|| (1.0 - evaluated / sent as f64).clamp(0.0, 1.0));
        return f;
    }
    if let Some((c, p)) = received_and_cached(kind, before, after) {
        f.source = SGLANG_SOURCE.into();
        f.prompt_tokens_engine = Some(p);
        f.hit_rate = (p > 0.0).then(|| (c / p).clamp(0.0, 1.0));
        return f;
    }
    if let Some(g) = after.hit_rate_gauge {
        let name = engine.hit_rate_gauge();
        f.source = format!("{name} (a gauge, read at the level's end)");
        f.hit_rate = Some(g.clamp(0.0, 1.0));
        return f;
    }
    f.note = "the engine's metrics carry no prefix-cache counters".into();
    f
}

const SGLANG_SOURCE: &str = "sglang:cached_tokens_total / sglang:prompt_tokens_total";

/// SGLang's cached and received prompt tokens between two scrapes.
fn received_and_cached(
    kind: EngineKind,
    before: &CacheCounters,
    after: &CacheCounters,
) -> Option<(f64, f64)> {
    // SGLang 0.5.23 creates `sglang:cached_tokens_total{cache_source=...}` at its first cache
    // hit: on a fresh (or just restarted) server whose first level hits nothing, the counter is
    // absent from both scrapes while the prompt counter is there, and that is 0 hits (seen on
    // the real server: eight random prompts arriving together after a restart).
    let cached = match delta(before.cached_tokens, after.cached_tokens) {
        None if crate::engine::spec(kind).cached_counter_created_lazily()
            && after.prompt_tokens.is_some() =>
        {
            Some(0.0)
        }
        c => c,
    };
    Some((cached?, delta(before.prompt_tokens, after.prompt_tokens)?))
}

/// What one engine received and served from its cache between two scrapes, by its own
/// counters alone.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnFigure {
    /// Prompt tokens received (llama.cpp: evaluated plus cached; vLLM: looked up).
    pub received: f64,
    /// Of those, served from its prefix cache.
    pub cached: f64,
    /// The metrics it came from.
    pub source: &'static str,
}

/// A replica's own cache figure: unlike [`level_figure`] it needs no count of what the client
/// sent, which behind a router is not known per replica. `Err` says why there is none.
pub fn own_figure(
    kind: EngineKind,
    before: &CacheCounters,
    after: &CacheCounters,
) -> Result<OwnFigure, String> {
    if let (Some(cached), Some(received)) = (
        delta(before.hits, after.hits),
        delta(before.queries, after.queries),
    ) {
        return Ok(OwnFigure {
            received,
            cached,
            source: "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
        });
    }
    if crate::engine::spec(kind).counts_evaluated_prompt_tokens(after)
        && let Some(evaluated) = delta(before.prompt_tokens, after.prompt_tokens)
    {
        let cached = delta(before.prompt_tokens_cached, after.prompt_tokens_cached).ok_or(
            "llama-server without llamacpp:prompt_tokens_cached_total (an older build): its \
             hit rate needs the prompt tokens it was sent, which the router does not count per \
             worker",
        )?;
        return Ok(OwnFigure {
            received: evaluated + cached,
            cached,
            source: "llamacpp:prompt_tokens_cached_total / (it + llamacpp:prompt_tokens_total)",
        });
    }
    if let Some((cached, received)) = received_and_cached(kind, before, after) {
        return Ok(OwnFigure {
            received,
            cached,
            source: SGLANG_SOURCE,
        });
    }
    Err("the engine's metrics carry no prefix-cache counters".into())
}

/// How to empty a kind's prefix cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheReset {
    /// `POST` this path; a 200 means emptied.
    Post(&'static str),
    /// llama.cpp: `GET /slots`, then `POST /slots/{id}?action=erase` for each slot.
    EraseSlots,
    /// A router keeps no prompts: each of its workers is reset by its own kind's reset.
    Workers,
}

/// The reset for `kind`, with what it cannot do (said next to the result).
pub fn reset_for(kind: EngineKind) -> (CacheReset, &'static str) {
    crate::engine::spec(kind).cache_reset()
}

/// Slot ids from llama.cpp's `GET /slots` answer (a JSON array of objects with `id`).
pub fn slot_ids(body: &str) -> Result<Vec<u64>, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("GET /slots: bad JSON: {e}"))?;
    let arr = v
        .as_array()
        .ok_or_else(|| "GET /slots: not a JSON array".to_string())?;
    arr.iter()
        .map(|s| {
            s.get("id")
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| "GET /slots: a slot without an id".to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_from_each_engines_counters() {
        let sg = |p, c| format!("sglang:prompt_tokens_total {p}\nsglang:cached_tokens_total {c}\n");
        let b = counters(EngineKind::Sglang, &sg(100.0, 10.0));
        let a = counters(EngineKind::Sglang, &sg(1100.0, 260.0));
        let f = level_figure(EngineKind::Sglang, &b, &a, 1000);
        assert_eq!(f.hit_rate, Some(0.25));
        assert_eq!(f.prompt_tokens_engine, Some(1000.0));
        // No hit yet since the start: SGLang has not created its cached-tokens counter.
        let fresh = counters(EngineKind::Sglang, "sglang:prompt_tokens_total 384\n");
        let f = level_figure(EngineKind::Sglang, &CacheCounters::default(), &fresh, 384);
        assert_eq!(
            (f.hit_rate, f.prompt_tokens_engine),
            (Some(0.0), Some(384.0))
        );
        assert!(f.source.starts_with("sglang:cached_tokens_total"), "{f:?}");

        let vl = |h, q| {
            format!(
                "vllm:prefix_cache_hits_total{{engine=\"0\"}} {h}\nvllm:prefix_cache_queries_total{{engine=\"0\"}} {q}\n"
            )
        };
        let b = counters(EngineKind::Vllm, &vl(0.0, 0.0));
        let a = counters(EngineKind::Vllm, &vl(50.0, 200.0));
        assert_eq!(
            level_figure(EngineKind::Vllm, &b, &a, 200).hit_rate,
            Some(0.25)
        );

        let ll = |p| format!("llamacpp:prompt_tokens_total {p}\n");
        let b = counters(EngineKind::Llamacpp, &ll(500.0));
        let a = counters(EngineKind::Llamacpp, &ll(1500.0));
        let f = level_figure(EngineKind::Llamacpp, &b, &a, 2000);
        assert_eq!(f.hit_rate, Some(0.5));
        assert_eq!(f.prompt_tokens_engine, Some(1000.0));
        // A restarted engine's counter starts again from zero.
        let f = level_figure(EngineKind::Llamacpp, &a, &b, 1000);
        assert_eq!(f.hit_rate, Some(0.5));

        let old = counters(EngineKind::Vllm, "vllm:gpu_prefix_cache_hit_rate 0.25\n");
        let f = level_figure(EngineKind::Vllm, &old, &old, 10);
        assert_eq!(f.hit_rate, Some(0.25));
        assert!(
            f.source.starts_with("vllm:gpu_prefix_cache_hit_rate"),
            "{f:?}"
        );
        let none = counters(EngineKind::Vllm, "vllm:num_requests_running 0\n");
        let f = level_figure(EngineKind::Vllm, &none, &none, 10);
        assert!(f.hit_rate.is_none() && !f.note.is_empty());
    }

    #[test]
    fn slot_ids_are_read_and_bad_answers_named() {
        assert_eq!(
            slot_ids(r#"[{"id":0,"n_ctx":512},{"id":1}]"#).unwrap(),
            vec![0, 1]
        );
        assert!(slot_ids("{}").unwrap_err().contains("/slots"));
    }
}
