//! Per-replica truth for a deployment (replicas behind a router): each replica's own counters
//! (generated tokens, prompt tokens received, served from its cache, requests where it counts
//! them) and the router's per-worker outcomes, read before and after a level, and what they
//! add up to: each replica's share, the balance across replicas and the fleet-wide cache-hit
//! rate. [`level_figures`] is the one place these are computed.
//!
//! A replica's cache figure comes from its own counters alone ([`cache::own_figure`]): the
//! client knows what it sent the router, not what the router sent each replica.

use std::collections::BTreeMap;

use crate::EngineKind;
use crate::cache::{self, CacheCounters, delta};
use crate::{metrics, prom};

/// One of a router's per-worker counters: attempts to `worker` that ended in `outcome`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOutcome {
    pub worker: String,
    pub outcome: String,
    pub count: f64,
}

/// A router's per-worker outcomes in one scrape of its `/metrics` (empty for an engine).
pub fn worker_outcomes(kind: EngineKind, text: &str) -> Vec<WorkerOutcome> {
    crate::engine::spec(kind).worker_outcomes(&prom::parse(text))
}

/// One replica's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaCounters {
    pub cache: CacheCounters,
    /// Tokens generated since its start.
    pub generated: Option<f64>,
    /// Requests finished since its start, where the engine counts them.
    pub requests: Option<f64>,
}

/// Reads one scrape of a replica of `kind` (its module names the series).
pub fn replica_counters(kind: EngineKind, text: &str) -> ReplicaCounters {
    let expo = prom::parse(text);
    let engine = crate::engine::spec(kind);
    let mapping = engine.metric_mapping(&expo);
    ReplicaCounters {
        cache: engine.cache_counters(&expo),
        generated: metrics::figure(&expo, &mapping.gen_total),
        requests: metrics::figure(&expo, &mapping.requests),
    }
}

/// One replica's scrapes around a level; `Err` says why one could not be read.
#[derive(Debug, Clone)]
pub struct ReplicaScrapes {
    /// Its base URL, as the router was given it.
    pub worker: String,
    pub before: Result<ReplicaCounters, String>,
    pub after: Result<ReplicaCounters, String>,
}

/// One replica's figures for a level.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaFigure {
    pub worker: String,
    pub output_tokens: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub cached_tokens: Option<f64>,
    pub cache_hit_rate: Option<f64>,
    pub cache_source: String,
    pub requests: Option<f64>,
    /// The router's attempts to it, and those by outcome.
    pub router_requests: Option<f64>,
    pub router_outcomes: BTreeMap<String, f64>,
    /// Its share of the generated tokens.
    pub share: Option<f64>,
    pub note: String,
}

/// A level through a router.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentFigure {
    pub replicas: Vec<ReplicaFigure>,
    /// Cached over received prompt tokens, summed over the replicas.
    pub cache_hit_rate: Option<f64>,
    /// The largest replica's generated tokens over the mean.
    pub balance: Option<f64>,
    /// The router's outcomes over all workers.
    pub router_outcomes: BTreeMap<String, f64>,
    pub note: String,
}

fn same_worker(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The router's per-worker, per-outcome increases over the level (a counter that went down
/// was reset: counted from zero).
fn outcome_deltas(before: &[WorkerOutcome], after: &[WorkerOutcome]) -> Vec<(String, String, f64)> {
    after
        .iter()
        .filter_map(|a| {
            let b = before
                .iter()
                .find(|b| same_worker(&b.worker, &a.worker) && b.outcome == a.outcome)
                .map(|b| b.count);
            let d = delta(Some(b.unwrap_or(0.0)), Some(a.count))?;
            Some((a.worker.clone(), a.outcome.clone(), d))
        })
        .collect()
}

/// Every figure of a level through a router: per replica (its own counters' increases, its
/// share of the generated tokens, the router's attempts to it), the balance across replicas
/// and the fleet-wide cache-hit rate. `kind`: the engine the replicas run; `router`: the
/// router's outcomes before and after the level (`Err`: why its metrics could not be read).
pub fn level_figures(
    kind: EngineKind,
    replicas: &[ReplicaScrapes],
    router: Result<(&[WorkerOutcome], &[WorkerOutcome]), String>,
) -> DeploymentFigure {
    let mut out = DeploymentFigure::default();
    let mut notes = Vec::new();
    let router_read = router.is_ok();
    let outcomes = match router {
        Ok((b, a)) => outcome_deltas(b, a),
        Err(e) => {
            notes.push(format!("router: {e}"));
            Vec::new()
        }
    };
    for (_, outcome, n) in &outcomes {
        *out.router_outcomes.entry(outcome.clone()).or_default() += n;
    }
    for r in replicas {
        let mut f = ReplicaFigure {
            worker: r.worker.clone(),
            ..Default::default()
        };
        for (w, outcome, n) in &outcomes {
            if same_worker(w, &r.worker) {
                *f.router_outcomes.entry(outcome.clone()).or_default() += n;
            }
        }
        if router_read {
            f.router_requests = Some(f.router_outcomes.values().sum());
        }
        match (&r.before, &r.after) {
            (Ok(b), Ok(a)) => {
                f.output_tokens = delta(b.generated, a.generated);
                f.requests = delta(b.requests, a.requests);
                match cache::own_figure(kind, &b.cache, &a.cache) {
                    Ok(c) => {
                        f.prompt_tokens = Some(c.received);
                        f.cached_tokens = Some(c.cached);
                        f.cache_hit_rate = (c.received > 0.0).then(|| c.cached / c.received);
                        f.cache_source = c.source.to_string();
                    }
                    Err(e) => f.note = e,
                }
                if f.output_tokens.is_none() {
                    f.note = join(&f.note, "no generation counter in its metrics");
                }
            }
            (Err(e), _) | (_, Err(e)) => f.note = e.clone(),
        }
        if !f.note.is_empty() {
            notes.push(format!("{}: {}", f.worker, f.note));
        }
        out.replicas.push(f);
    }
    let outputs: Option<Vec<f64>> = out.replicas.iter().map(|r| r.output_tokens).collect();
    if let Some(o) = outputs.filter(|o| !o.is_empty()) {
        let total: f64 = o.iter().sum();
        if total > 0.0 {
            for (r, v) in out.replicas.iter_mut().zip(&o) {
                r.share = Some(v / total);
            }
            let max = o.iter().copied().fold(0.0, f64::max);
            out.balance = Some(max / (total / o.len() as f64));
        }
    }
    let pairs: Option<Vec<(f64, f64)>> = out
        .replicas
        .iter()
        .map(|r| Some((r.cached_tokens?, r.prompt_tokens?)))
        .collect();
    if let Some(p) = pairs.filter(|p| !p.is_empty()) {
        let (cached, received) = p
            .iter()
            .fold((0.0, 0.0), |(c, t), (pc, pt)| (c + pc, t + pt));
        out.cache_hit_rate = (received > 0.0).then(|| cached / received);
    }
    out.note = notes.join("; ");
    out
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}; {b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama(evaluated: f64, cached: f64, predicted: f64) -> ReplicaCounters {
        replica_counters(
            EngineKind::Llamacpp,
            &format!(
                "llamacpp:prompt_tokens_total {evaluated}\nllamacpp:prompt_tokens_cached_total {cached}\nllamacpp:tokens_predicted_total {predicted}\n"
            ),
        )
    }

    fn outcome(worker: &str, outcome: &str, count: f64) -> WorkerOutcome {
        WorkerOutcome {
            worker: worker.into(),
            outcome: outcome.into(),
            count,
        }
    }

    #[test]
    fn replicas_add_up_to_the_fleet() {
        let replicas = [
            ReplicaScrapes {
                worker: "http://a:1".into(),
                before: Ok(llama(100.0, 0.0, 10.0)),
                // Received 400, of which 300 cached; 96 generated.
                after: Ok(llama(200.0, 300.0, 106.0)),
            },
            ReplicaScrapes {
                worker: "http://b:2/".into(),
                before: Ok(llama(0.0, 0.0, 0.0)),
                // Received 200, of which 50 cached; 32 generated.
                after: Ok(llama(150.0, 50.0, 32.0)),
            },
        ];
        let before = [outcome("http://a:1", "success", 2.0)];
        let after = [
            outcome("http://a:1", "success", 8.0),
            outcome("http://b:2", "success", 2.0),
            outcome("http://b:2", "failure", 1.0),
        ];
        let f = level_figures(EngineKind::Llamacpp, &replicas, Ok((&before, &after)));
        assert_eq!(f.note, "");
        let (a, b) = (&f.replicas[0], &f.replicas[1]);
        assert_eq!(
            (a.output_tokens, a.prompt_tokens, a.cached_tokens),
            (Some(96.0), Some(400.0), Some(300.0))
        );
        assert_eq!(a.cache_hit_rate, Some(0.75));
        assert_eq!(
            (a.router_requests, b.router_requests),
            (Some(6.0), Some(3.0))
        );
        assert_eq!(b.router_outcomes["failure"], 1.0);
        assert_eq!(f.router_outcomes["success"], 8.0);
        assert_eq!(a.share, Some(0.75));
        // 96 of a mean of 64.
        assert_eq!(f.balance, Some(1.5));
        // 350 of 600 received prompt tokens.
        assert!((f.cache_hit_rate.unwrap() - 350.0 / 600.0).abs() < 1e-12);
    }

    #[test]
    fn an_sglang_replica_counts_its_requests_and_its_cache() {
        let sg = |p: f64, c: f64, g: f64, n: f64| {
            replica_counters(
                EngineKind::Sglang,
                &format!(
                    "sglang:prompt_tokens_total {p}\nsglang:cached_tokens_total{{cache_source=\"device\"}} {c}\nsglang:generation_tokens_total {g}\nsglang:num_requests_total {n}\n"
                ),
            )
        };
        let replicas = [ReplicaScrapes {
            worker: "http://a:1".into(),
            before: Ok(sg(100.0, 0.0, 10.0, 1.0)),
            after: Ok(sg(500.0, 100.0, 74.0, 5.0)),
        }];
        let f = level_figures(EngineKind::Sglang, &replicas, Ok((&[], &[])));
        let r = &f.replicas[0];
        assert_eq!((r.requests, r.output_tokens), (Some(4.0), Some(64.0)));
        assert_eq!(r.cache_hit_rate, Some(0.25));
        assert_eq!(r.router_requests, Some(0.0));
        assert_eq!(f.balance, Some(1.0));
    }

    #[test]
    fn a_missing_figure_is_named_and_spoils_no_other() {
        let old_build = replica_counters(
            EngineKind::Llamacpp,
            "llamacpp:prompt_tokens_total 5\nllamacpp:tokens_predicted_total 7\n",
        );
        let replicas = [
            ReplicaScrapes {
                worker: "http://a:1".into(),
                before: Ok(ReplicaCounters::default()),
                after: Ok(old_build),
            },
            ReplicaScrapes {
                worker: "http://b:2".into(),
                before: Err("GET http://b:2/metrics: connection refused".into()),
                after: Ok(ReplicaCounters::default()),
            },
        ];
        let f = level_figures(
            EngineKind::Llamacpp,
            &replicas,
            Err("GET http://r:3/metrics: HTTP 500".into()),
        );
        assert_eq!(f.replicas[0].output_tokens, Some(7.0));
        assert!(f.replicas[0].note.contains("prompt_tokens_cached_total"));
        assert!(f.replicas[0].router_requests.is_none());
        assert!(f.cache_hit_rate.is_none() && f.balance.is_none());
        assert!(f.note.contains("router: GET http://r:3"), "{}", f.note);
        assert!(f.note.contains("http://b:2: GET"), "{}", f.note);
    }
}
