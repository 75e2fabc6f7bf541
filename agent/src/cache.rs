//! The engine's prefix cache around a benchmark level: emptied before it when the caller asks
//! (`reset_cache`), and its own counters read before and after it, so that every level stores
//! what the engine served from its cache (see `fleetbench_engines::cache`).

use std::time::Duration;

use fleetbench_engines::cache::{self, CacheCounters, CacheReset};
use fleetbench_proto::agentpb;

use crate::http::HttpClient;
use crate::profile::LaunchPlan;

const TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY: usize = 8 << 20;

/// Empties the engine's prefix cache; returns `"flushed"` or why it was not, in words.
pub async fn reset(http: &HttpClient, plan: &LaunchPlan) -> String {
    let (how, caveat) = cache::reset_for(plan.kind);
    let base = plan.base_url.trim_end_matches('/');
    let refused = |what: String| format!("not flushed: {what} ({caveat})");
    match how {
        CacheReset::Post(path) => match http.post(&format!("{base}{path}"), TIMEOUT, 4096).await {
            Ok(r) if r.status == 200 => "flushed".into(),
            Ok(r) => refused(format!(
                "POST {path}: HTTP {}: {}",
                r.status,
                r.body.trim().chars().take(200).collect::<String>()
            )),
            Err(e) => refused(format!("POST {path}: {e}")),
        },
        CacheReset::EraseSlots => {
            let ids = match http.get(&format!("{base}/slots"), TIMEOUT, MAX_BODY).await {
                Ok(r) if r.status == 200 => cache::slot_ids(&r.body),
                Ok(r) => Err(format!(
                    "GET /slots: HTTP {} (started with --no-slots?)",
                    r.status
                )),
                Err(e) => Err(format!("GET /slots: {e}")),
            };
            let ids = match ids {
                Ok(ids) => ids,
                Err(e) => return refused(e),
            };
            for id in &ids {
                let url = format!("{base}/slots/{id}?action=erase");
                match http.post(&url, TIMEOUT, 4096).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        return refused(format!(
                            "POST /slots/{id}?action=erase: HTTP {}: {}",
                            r.status,
                            r.body.trim().chars().take(200).collect::<String>()
                        ));
                    }
                    Err(e) => return refused(format!("POST /slots/{id}?action=erase: {e}")),
                }
            }
            format!("flushed ({} slots erased; {caveat})", ids.len())
        }
    }
}

/// Where a level's cache counters are read: the engine's kind (how to read them) and its
/// Prometheus endpoints (one for an owned engine; the replicas behind an external target).
#[derive(Debug, Clone)]
pub struct CacheSource {
    pub kind: fleetbench_engines::EngineKind,
    pub urls: Vec<String>,
    /// Why there are no URLs, for the level's note.
    pub none: String,
}

impl CacheSource {
    /// The engine the agent started.
    pub fn of_plan(plan: &LaunchPlan) -> CacheSource {
        CacheSource {
            kind: plan.kind,
            urls: plan.metrics_url.iter().cloned().collect(),
            none: format!("profile {} has no metrics path", plan.profile),
        }
    }
}

fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) | (None, x) => x,
    }
}

/// The engine's cache counters now, summed over the source's endpoints; `Err` says why they
/// could not be read (one endpoint that cannot be read spoils the sum).
pub async fn counters(http: &HttpClient, src: &CacheSource) -> Result<CacheCounters, String> {
    if src.urls.is_empty() {
        return Err(src.none.clone());
    }
    let mut sum = CacheCounters::default();
    for url in &src.urls {
        let c = match http.get(url, TIMEOUT, MAX_BODY).await {
            Ok(r) if r.status == 200 => cache::counters(src.kind, &r.body),
            Ok(r) => return Err(format!("GET {url}: HTTP {}", r.status)),
            Err(e) => return Err(format!("GET {url}: {e}")),
        };
        sum.prompt_tokens = add(sum.prompt_tokens, c.prompt_tokens);
        sum.cached_tokens = add(sum.cached_tokens, c.cached_tokens);
        sum.hits = add(sum.hits, c.hits);
        sum.queries = add(sum.queries, c.queries);
        // A gauge does not add up over replicas: kept only for a single endpoint.
        sum.hit_rate_gauge = if src.urls.len() == 1 {
            c.hit_rate_gauge
        } else {
            None
        };
    }
    Ok(sum)
}

/// The level's cache figure for the wire.
pub fn figure(
    kind: fleetbench_engines::EngineKind,
    before: Result<CacheCounters, String>,
    after: Result<CacheCounters, String>,
    sent: u64,
    reset: String,
) -> agentpb::PrefixCache {
    let mut out = agentpb::PrefixCache {
        prompt_tokens_sent: sent,
        reset,
        ..Default::default()
    };
    match (before, after) {
        (Ok(b), Ok(a)) => {
            let f = cache::level_figure(kind, &b, &a, sent);
            out.source = f.source;
            out.hit_rate = f.hit_rate;
            out.prompt_tokens_engine = f.prompt_tokens_engine;
            out.note = f.note;
        }
        (Err(e), _) | (_, Err(e)) => out.note = format!("no cache figure: {e}"),
    }
    out
}
