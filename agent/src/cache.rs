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

/// The engine's cache counters now; `Err` says why they could not be read.
pub async fn counters(http: &HttpClient, plan: &LaunchPlan) -> Result<CacheCounters, String> {
    let url = plan
        .metrics_url
        .as_ref()
        .ok_or_else(|| format!("profile {} has no metrics path", plan.profile))?;
    match http.get(url, TIMEOUT, MAX_BODY).await {
        Ok(r) if r.status == 200 => Ok(cache::counters(plan.kind, &r.body)),
        Ok(r) => Err(format!("GET {url}: HTTP {}", r.status)),
        Err(e) => Err(format!("GET {url}: {e}")),
    }
}

/// The level's cache figure for the wire.
pub fn figure(
    plan: &LaunchPlan,
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
            let f = cache::level_figure(plan.kind, &b, &a, sent);
            out.source = f.source;
            out.hit_rate = f.hit_rate;
            out.prompt_tokens_engine = f.prompt_tokens_engine;
            out.note = f.note;
        }
        (Err(e), _) | (_, Err(e)) => out.note = format!("no cache figure: {e}"),
    }
    out
}
