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

/// Empties the engine's prefix cache; returns `"flushed"` or why it was not, in words. A
/// router keeps none: each of its workers is reset as its own kind is.
pub async fn reset(http: &HttpClient, plan: &LaunchPlan) -> String {
    match cache::reset_for(plan.kind) {
        (CacheReset::Workers, caveat) => {
            let kind = plan.workers_kind();
            let mut each = Vec::new();
            for w in &plan.spec.workers {
                each.push(format!("{w}: {}", reset_at(http, kind, w).await));
            }
            format!("{} ({caveat})", each.join("; "))
        }
        _ => reset_at(http, plan.kind, &plan.base_url).await,
    }
}

/// Empties the prefix cache of the `kind` engine at `base`.
async fn reset_at(http: &HttpClient, kind: fleetbench_engines::EngineKind, base: &str) -> String {
    let (how, caveat) = cache::reset_for(kind);
    let base = base.trim_end_matches('/');
    let refused = |what: String| format!("not flushed: {what} ({caveat})");
    match how {
        CacheReset::Workers => refused("a router's workers are engines, not routers".into()),
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
    /// The engine the agent started; for a router, its workers (a router keeps no cache).
    pub fn of_plan(plan: &LaunchPlan) -> CacheSource {
        if !plan.spec.workers.is_empty() {
            return CacheSource {
                kind: plan.workers_kind(),
                urls: plan.worker_metrics_urls(),
                none: String::new(),
            };
        }
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

/// One scrape of a Prometheus endpoint: its text, or why it could not be read.
pub async fn scrape(http: &HttpClient, url: &str) -> Result<String, String> {
    match http.get(url, TIMEOUT, MAX_BODY).await {
        Ok(r) if r.status == 200 => Ok(r.body),
        Ok(r) => Err(format!("GET {url}: HTTP {}", r.status)),
        Err(e) => Err(format!("GET {url}: {e}")),
    }
}

/// Counters of several endpoints added up (replicas behind a router or an external target).
pub fn summed(all: &[CacheCounters]) -> CacheCounters {
    let mut sum = CacheCounters::default();
    for c in all {
        sum.prompt_tokens = add(sum.prompt_tokens, c.prompt_tokens);
        sum.cached_tokens = add(sum.cached_tokens, c.cached_tokens);
        sum.prompt_tokens_cached = add(sum.prompt_tokens_cached, c.prompt_tokens_cached);
        sum.hits = add(sum.hits, c.hits);
        sum.queries = add(sum.queries, c.queries);
    }
    // A gauge does not add up over replicas: kept only for a single endpoint.
    if let [one] = all {
        sum.hit_rate_gauge = one.hit_rate_gauge;
    }
    sum
}

/// The engine's cache counters now, summed over the source's endpoints; `Err` says why they
/// could not be read (one endpoint that cannot be read spoils the sum).
pub async fn counters(http: &HttpClient, src: &CacheSource) -> Result<CacheCounters, String> {
    if src.urls.is_empty() {
        return Err(src.none.clone());
    }
    let mut all = Vec::new();
    for url in &src.urls {
        all.push(cache::counters(src.kind, &scrape(http, url).await?));
    }
    Ok(summed(&all))
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
