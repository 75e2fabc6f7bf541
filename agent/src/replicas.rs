//! Per-replica truth around a level driven through a router this agent started: the router's
//! workers (`EngineSpec.workers`) and the router itself are scraped before and after the
//! level, and the level carries each replica's own counters, the router's per-worker
//! outcomes, the balance and the fleet-wide cache-hit rate (`LevelResult.deployment`).
//!
//! The replicas run on other agents (or anywhere the router profile allows): this agent only
//! reads their `/metrics`, at the URLs its profile let the router use. The figures themselves
//! are computed in `fleetbench_engines::deployment`; the summed cache counters of the level's
//! `prefix_cache` come from the same scrapes (`cache::summed`), so the two never disagree on
//! what the replicas held before the level.

use fleetbench_engines::EngineKind;
use fleetbench_engines::cache::CacheCounters;
use fleetbench_engines::deployment::{self, ReplicaCounters, ReplicaScrapes, WorkerOutcome};
use fleetbench_proto::agentpb;

use crate::http::HttpClient;
use crate::profile::LaunchPlan;

/// A router's workers and its own metrics endpoint.
#[derive(Debug, Clone)]
pub struct Replicas {
    /// How the workers' metrics read.
    kind: EngineKind,
    /// (base URL, metrics URL) per worker.
    workers: Vec<(String, String)>,
    router_kind: EngineKind,
    router_metrics: Option<String>,
}

/// One reading of every endpoint.
#[derive(Debug, Clone)]
pub struct Snapshot {
    router: Result<Vec<WorkerOutcome>, String>,
    workers: Vec<Result<ReplicaCounters, String>>,
}

impl Replicas {
    /// The replicas of a router's plan; `None` for an engine.
    pub fn of_plan(plan: &LaunchPlan) -> Option<Replicas> {
        if plan.spec.workers.is_empty() {
            return None;
        }
        Some(Replicas {
            kind: plan.workers_kind(),
            workers: plan
                .spec
                .workers
                .iter()
                .cloned()
                .zip(plan.worker_metrics_urls())
                .collect(),
            router_kind: plan.kind,
            router_metrics: plan.metrics_url.clone(),
        })
    }

    /// Reads the router and every worker now.
    pub async fn snapshot(&self, http: &HttpClient) -> Snapshot {
        let router = match &self.router_metrics {
            Some(url) => crate::cache::scrape(http, url)
                .await
                .map(|t| deployment::worker_outcomes(self.router_kind, &t)),
            None => Err("the router's profile has no metrics path".into()),
        };
        let mut workers = Vec::with_capacity(self.workers.len());
        for (_, url) in &self.workers {
            workers.push(
                crate::cache::scrape(http, url)
                    .await
                    .map(|t| deployment::replica_counters(self.kind, &t)),
            );
        }
        Snapshot { router, workers }
    }

    /// The workers' cache counters added up, as an external target's replicas are; `Err`
    /// when one could not be read.
    pub fn summed(&self, s: &Snapshot) -> Result<CacheCounters, String> {
        let all = s
            .workers
            .iter()
            .map(|w| w.as_ref().map(|c| c.cache).map_err(String::clone))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::cache::summed(&all))
    }

    /// The level's figures for the wire; `client_*`: what the load generator counted over
    /// every completed request of the level (warm-up and left-out ones included).
    pub fn figure(
        &self,
        before: Snapshot,
        after: Snapshot,
        client_output_tokens: u64,
        client_prompt_tokens: u64,
    ) -> agentpb::Deployment {
        let scrapes: Vec<ReplicaScrapes> = self
            .workers
            .iter()
            .zip(before.workers.into_iter().zip(after.workers))
            .map(|((worker, _), (b, a))| ReplicaScrapes {
                worker: worker.clone(),
                before: b,
                after: a,
            })
            .collect();
        let router = match (&before.router, &after.router) {
            (Ok(b), Ok(a)) => Ok((b.as_slice(), a.as_slice())),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        let f = deployment::level_figures(self.kind, &scrapes, router);
        agentpb::Deployment {
            replicas: f
                .replicas
                .into_iter()
                .map(|r| agentpb::ReplicaLevel {
                    worker: r.worker,
                    output_tokens: r.output_tokens,
                    prompt_tokens: r.prompt_tokens,
                    cached_tokens: r.cached_tokens,
                    cache_hit_rate: r.cache_hit_rate,
                    cache_source: r.cache_source,
                    requests: r.requests,
                    router_requests: r.router_requests,
                    router_outcomes: r.router_outcomes.into_iter().collect(),
                    share: r.share,
                    note: r.note,
                })
                .collect(),
            cache_hit_rate: f.cache_hit_rate,
            balance: f.balance,
            client_output_tokens,
            client_prompt_tokens,
            router_outcomes: f.router_outcomes.into_iter().collect(),
            note: f.note,
        }
    }
}
