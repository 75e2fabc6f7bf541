//! A level's per-replica figures (`LevelResult.deployment`, a level through a router), as
//! `bench` prints them and as its `--json` carries them.

use fleetbench_proto::agentpb;
use serde_json::{Value, json};

fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.1}%", v * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// A level through a router: each replica's own figures and the router's per worker.
pub fn print(d: &agentpb::Deployment) {
    println!(
        "      replicas: cache hit {} (fleet), balance {}",
        pct(d.cache_hit_rate),
        d.balance.map_or("-".into(), |b| format!("{b:.2}"))
    );
    for r in &d.replicas {
        println!(
            "        {}: {} routed {:?}, {} output tokens ({}), cache hit {}",
            r.worker,
            r.router_requests.map_or("-".into(), |n| n.to_string()),
            r.router_outcomes,
            r.output_tokens.map_or("-".into(), |n| n.to_string()),
            pct(r.share),
            pct(r.cache_hit_rate)
        );
    }
    if !d.note.is_empty() {
        println!("      note: {}", d.note);
    }
}

pub fn json(d: &agentpb::Deployment) -> Value {
    let replicas: Vec<Value> = d
        .replicas
        .iter()
        .map(|r| {
            json!({"worker": r.worker, "output_tokens": r.output_tokens, "prompt_tokens": r.prompt_tokens,
                   "cached_tokens": r.cached_tokens, "cache_hit_rate": r.cache_hit_rate,
                   "cache_source": r.cache_source, "requests": r.requests,
                   "router_requests": r.router_requests, "router_outcomes": r.router_outcomes,
                   "share": r.share, "note": r.note})
        })
        .collect();
    json!({"replicas": replicas, "cache_hit_rate": d.cache_hit_rate, "balance": d.balance,
           "client_output_tokens": d.client_output_tokens, "client_prompt_tokens": d.client_prompt_tokens,
           "router_outcomes": d.router_outcomes, "note": d.note})
}
