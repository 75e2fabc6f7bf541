//! Deployments placed by the controller, for real: three agents on loopback, two with a real
//! `llama-server` profile (CPU, SmolLM2-135M) and one with SGLang's real router
//! (`sglang-router` 0.3.2). A config of `replicas = 2` behind `router` takes all three hosts at
//! once; the controller starts a replica on each engine host, then the router in front of their
//! URLs, and loads it through the router.
//!
//! - `cache_aware` against `round_robin` on multi-turn conversations, four repeats: the verdict
//!   calls `cache_aware` the winner, significantly; every replica's own cache counter is within
//!   5 points of what the workload designs for the requests it served under each policy, and
//!   the replicas' counters add up to what the client counted.
//! - A replica's engine SIGKILLed mid-level: the level is stored `crashed` (`replica_lost`,
//!   naming the replica's host), the router and the other replica are stopped, the next level
//!   runs on a fresh deployment, and nothing runs after the job.
//! - A replica that cannot start (its host's program exits at once): the router never starts,
//!   the replica that did is stopped, and the trial's reason names the replica and its host.
//!
//! Designed reuse per replica, one session at a time (concurrency 1) and every session whole
//! (`requests` a multiple of `turns`): turn `t`'s prompt is turn `t − 1`'s plus its answer and
//! a new message (`STEP` tokens). A replica that served `n` requests with `p` prompt tokens:
//! - `cache_aware` keeps a session on one replica, so each request but a session's first reuses
//!   its session's previous prompt: `(p − n·STEP + (n / TURNS)·OUTPUT_LEN) / p`;
//! - `round_robin` alternates requests over the two replicas, and a session's turn count is
//!   even, so a replica serves every other turn of every session and each of its requests but
//!   a session's first reuses turn `t − 2`'s prompt: `(p − n·STEP) / (2p)`.
//!
//! The router retries an attempt that failed at one worker on the next (one attempt in a few
//! dozen runs; see agent/tests/router.rs), which shifts `round_robin`'s alternation: a level
//! with a failed attempt states no per-replica design for it, and says so.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::spawned::{alive, follow, nothing_running};
use common::*;
use fleetbench_proto::agentpb::{CrashClass, LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::{CompareRequest, GetResultsRequest, JobState};

const TURNS: u32 = 4;
const INPUT_LEN: u32 = 96;
const OUTPUT_LEN: u32 = 8;
const STEP: f64 = (INPUT_LEN + OUTPUT_LEN) as f64;
const SESSIONS: u32 = 3;

/// Every agent of the deployment, the router's first.
fn members<'a>(router: &'a Proc, replicas: &'a [Proc]) -> Vec<&'a Proc> {
    std::iter::once(router).chain(replicas).collect()
}

/// The router's agent (`rt`, profile `router`, allowlisting both replicas) and the replicas'
/// (`p1`, `p2`, profile `llamacpp` each on a port of its own); `p2`'s program exits at once
/// when `broken_p2`.
fn deployment_agents(dir: &Path, broken_p2: bool) -> (Proc, Vec<Proc>) {
    let llama = fleetbench_testkit::llama_cpp();
    let ports = [
        fleetbench_testkit::free_port(),
        fleetbench_testkit::free_port(),
    ];
    let agent = |name: &str, profile: String| {
        let toml = format!(
            "name = \"{name}\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = {:?}\n\
             {profile}",
            dir.join(name)
        );
        spawn_agent_toml(dir, name, &toml)
    };
    let replicas = ["p1", "p2"]
        .iter()
        .zip(ports)
        .map(|(name, port)| {
            let program = if broken_p2 && *name == "p2" {
                std::path::PathBuf::from("/bin/false")
            } else {
                llama.server.clone()
            };
            agent(
                name,
                format!(
                    "[profiles.llamacpp]\nkind = \"llamacpp\"\nprogram = {:?}\nmodels = [{:?}]\n\
                     port = {port}\nstart_timeout_s = 120\n",
                    program, llama.model
                ),
            )
        })
        .collect();
    let workers: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let router = agent(
        "rt",
        format!(
            "[profiles.router]\nkind = \"sglang-router\"\nprogram = {:?}\nport = {}\n\
             metrics_port = {}\nallowed_workers = {workers:?}\nstart_timeout_s = 60\n\
             run_as_root = true\n",
            fleetbench_testkit::engines::sglang_router(),
            fleetbench_testkit::free_port(),
            fleetbench_testkit::free_port(),
        ),
    );
    (router, replicas)
}

/// Two replicas of llama-server behind SGLang's router: `cache-aware`, and `round-robin`
/// (which changes the policy alone) when `both`; multi-turn sessions over
/// levels of [`SESSIONS`] whole sessions each at `concurrency`.
fn spec(repeats: u32, both: bool, concurrency: &str) -> String {
    let llama = fleetbench_testkit::llama_cpp();
    let second = if both {
        r#"
[[configs]]
name = "round-robin"
extends = "cache-aware"
router = { flags = { "--policy" = "round_robin" } }
"#
    } else {
        ""
    };
    format!(
        r#"name = "routing"
repeats = {repeats}

[[configs]]
name = "cache-aware"
engine = "llamacpp"
model = {:?}
flags = {{ "--ctx-size" = 2048, "--threads" = 2, "--parallel" = 1 }}
replicas = 2
router = {{ profile = "router", flags = {{ "--policy" = "cache_aware" }} }}
{second}
[[workloads]]
name = "chat"
dataset = "conversation"
turns = {TURNS}
input_len = {INPUT_LEN}
output_len = {OUTPUT_LEN}
ignore_eos = true

[load]
concurrency = [{}]
requests = {}
"#,
        llama.model.to_string_lossy(),
        concurrency,
        SESSIONS * TURNS,
    )
}

/// What every level through the deployment must hold; prints its per-replica figures and
/// checks each replica's cache counter against the policy's design (see the module docs).
fn check_level(policy: &str, l: &LevelResult) {
    assert_eq!(l.outcome, LevelOutcome::Ok as i32, "{policy}: {l:?}");
    let requests = u64::from(SESSIONS * TURNS);
    assert_eq!((l.completed, l.failed), (requests, 0), "{policy}: {l:?}");
    let d = l.deployment.as_ref().expect("a level through a router");
    assert_eq!(d.note, "", "{policy}: {d:?}");
    assert_eq!(d.replicas.len(), 2, "{policy}: {d:?}");
    // Nothing lost or counted twice: the replicas' own counters add up to the client's.
    let out: f64 = d.replicas.iter().map(|r| r.output_tokens.unwrap()).sum();
    assert_eq!(out, d.client_output_tokens as f64, "{policy}: {d:?}");
    let prompt: f64 = d.replicas.iter().map(|r| r.prompt_tokens.unwrap()).sum();
    assert_eq!(prompt, d.client_prompt_tokens as f64, "{policy}: {d:?}");
    let retried: f64 = d
        .replicas
        .iter()
        .map(|r| r.router_outcomes.get("failure").copied().unwrap_or(0.0))
        .sum();
    println!(
        "{policy}: fleet cache-hit rate {:.1}%, workload's design (sticky) {:.1}%, balance {:.2}",
        d.cache_hit_rate.unwrap_or(f64::NAN) * 100.0,
        l.prefix_cache
            .as_ref()
            .and_then(|c| c.designed_reuse)
            .unwrap_or(f64::NAN)
            * 100.0,
        d.balance.unwrap_or(f64::NAN),
    );
    let (mut designed_sum, mut prompt_sum) = (0.0, 0.0);
    for r in &d.replicas {
        let n = r.router_outcomes.get("success").copied().unwrap_or(0.0);
        let p = r.prompt_tokens.unwrap();
        if n == 0.0 {
            // `cache_aware` may keep every session on one replica (at concurrency 1 it sent
            // all of them to the same one in every run here): this one served nothing.
            assert_eq!((p, r.output_tokens), (0.0, Some(0.0)), "{r:?}");
            println!("  {}: served no request", r.worker);
            continue;
        }
        // Each request generates exactly OUTPUT_LEN tokens: the router's successes are the
        // replica's own requests.
        assert_eq!(n * f64::from(OUTPUT_LEN), r.output_tokens.unwrap(), "{r:?}");
        let designed = match policy {
            "cache-aware" => (p - n * STEP + n / f64::from(TURNS) * f64::from(OUTPUT_LEN)) / p,
            _ => (p - n * STEP) / (2.0 * p),
        };
        let hit = r.cache_hit_rate.unwrap();
        println!(
            "  {}: {n} requests, share {:.0}%, {} of {p} prompt tokens cached: {:.1}% (designed \
             {:.1}%)",
            r.worker,
            r.share.unwrap_or(f64::NAN) * 100.0,
            r.cached_tokens.unwrap(),
            hit * 100.0,
            designed * 100.0
        );
        designed_sum += designed * p;
        prompt_sum += p;
        if policy == "round-robin" && retried > 0.0 {
            continue;
        }
        assert!(
            (hit - designed).abs() <= 0.05,
            "{policy}: {} hit {hit:.3}, designed {designed:.3}: {d:?}",
            r.worker
        );
    }
    if retried > 0.0 {
        println!("  {retried} attempt(s) failed and were retried");
        if policy == "round-robin" {
            println!("  (the alternation shifted: no per-replica design stated)");
        }
    }
    let fleet = d.cache_hit_rate.unwrap();
    if policy == "cache-aware" || retried == 0.0 {
        let designed = designed_sum / prompt_sum;
        assert!(
            (fleet - designed).abs() <= 0.05,
            "{policy}: fleet {fleet:.3}, designed {designed:.3}"
        );
    }
    if policy == "round-robin" && retried == 0.0 {
        // Alternation gives each replica the same number of requests of the same answer length.
        assert_eq!(d.balance, Some(1.0), "{d:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_aware_routing_beats_round_robin_by_verdict_with_per_replica_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (router, replicas) = deployment_agents(dir.path(), false);
    let agents = members(&router, &replicas);
    let ctl = start_local(local_config(dir.path(), &agents)).await;
    let mut c = client(ctl.addr).await;
    let began = Instant::now();
    let id = submit_trials(&mut c, spec(4, true, "1"), "routing.toml", 8).await;
    let pids = follow(&mut c, &id, |_| {}).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(600)).await;
    println!("routing job: {:.0} s", began.elapsed().as_secs_f64());
    assert_eq!(
        job.state,
        JobState::Succeeded as i32,
        "{job:?}\n{}",
        router.log_text()
    );

    // Every trial held all three hosts: the router's run on `rt`, its replicas' as its facts.
    let runs = ctl.store.runs(&id).await.unwrap();
    assert_eq!(runs.len(), 8, "{runs:#?}");
    for run in &runs {
        assert_eq!(run.host, "rt", "{run:?}");
        let fact = |k: &str| {
            run.facts
                .iter()
                .find(|f| f.key == k)
                .map(|f| f.value.clone())
                .unwrap_or_default()
        };
        assert_eq!(fact("deployment.replicas"), "2", "{run:?}");
        let mut hosts = [
            fact("deployment.replica0.host"),
            fact("deployment.replica1.host"),
        ];
        hosts.sort();
        assert_eq!(hosts, ["p1", "p2"], "{run:?}");
        let argv = run.argv.join(" ");
        for i in 0..2 {
            let url = fact(&format!("deployment.replica{i}.url"));
            assert!(
                url.starts_with("http://127.0.0.1:") && argv.contains(&url),
                "{argv}"
            );
            assert!(
                fact(&format!("deployment.replica{i}.argv")).contains("--parallel 1"),
                "{run:?}"
            );
        }
        let policy = if run.config_name == "cache-aware" {
            "cache_aware"
        } else {
            "round_robin"
        };
        assert_eq!(
            fact("policy"),
            policy,
            "the router's own start line: {run:?}"
        );
    }
    // Telemetry came from every host of the deployment.
    let res = c
        .get_results(GetResultsRequest {
            job_ids: vec![id.clone()],
            include_telemetry: true,
        })
        .await
        .unwrap()
        .into_inner();
    let hosts: std::collections::BTreeSet<&str> =
        res.telemetry.iter().map(|p| p.host.as_str()).collect();
    assert_eq!(
        hosts,
        ["p1", "p2", "rt"].into(),
        "telemetry from every host"
    );
    // Three processes per trial, one per host, and none runs now.
    for host in ["rt", "p1", "p2"] {
        assert_eq!(pids.get(host).map(Vec::len), Some(8), "{host}: {pids:?}");
    }
    nothing_running(&pids, &agents).await;

    let levels = ctl.store.levels(&id).await.unwrap();
    assert_eq!(levels.len(), 8);
    for l in &levels {
        check_level(&l.config_name, l.result.as_ref().unwrap());
    }
    let cmp = c
        .compare(CompareRequest {
            job_ids: vec![id.clone()],
            alpha: 0.0,
            history_job_ids: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cmp.groups.len(), 1, "{cmp:?}");
    let g = &cmp.groups[0];
    for cfg in &g.configs {
        println!(
            "{} {}: {:.1} ± {:.1} output tok/s",
            g.level_label, cfg.config_name, cfg.output_tokens_per_s, cfg.output_tokens_per_s_spread
        );
    }
    println!("{}: {}", g.level_label, g.verdict);
    assert!(
        g.margin_significant && g.winner_config == "cache-aware",
        "{}",
        g.verdict
    );
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_lost_mid_level_marks_the_level_and_leaves_nothing_running() {
    let dir = tempfile::tempdir().unwrap();
    let (router, replicas) = deployment_agents(dir.path(), false);
    let agents = members(&router, &replicas);
    let ctl = start_local(local_config(dir.path(), &agents)).await;
    let mut c = client(ctl.addr).await;
    let id = submit_trials(&mut c, spec(1, false, "1, 2"), "routing.toml", 1).await;
    // At level 0's first progress, p2's llama-server is killed from outside.
    let mut killed = None;
    let pids = follow(&mut c, &id, |pids| {
        if killed.is_some() {
            return;
        }
        let Some(p2) = pids.get("p2") else {
            return;
        };
        // SAFETY: SIGKILL to the replica this test's agent spawned.
        assert_eq!(unsafe { libc::kill(p2[0] as i32, libc::SIGKILL) }, 0);
        killed = Some(p2[0]);
    })
    .await;
    let job = wait_job(&mut c, &id, Duration::from_secs(300)).await;
    let trials = ctl.store.trials(&id).await.unwrap();
    let killed = killed.unwrap_or_else(|| panic!("no level ran: {}\n{trials:?}", job.error));
    assert_eq!(
        job.state,
        JobState::Succeeded as i32,
        "{job:?}\n{}",
        router.log_text()
    );
    let levels = ctl.store.levels(&id).await.unwrap();
    let by_index: BTreeMap<u32, LevelResult> = levels
        .iter()
        .map(|l| {
            let r = l.result.clone().unwrap();
            (r.level_index, r)
        })
        .collect();
    let l0 = &by_index[&0];
    assert_eq!(l0.outcome, LevelOutcome::Crashed as i32, "{l0:?}");
    let crash = l0.crash.as_ref().unwrap();
    assert_eq!(crash.class, CrashClass::ReplicaLost as i32, "{crash:?}");
    assert!(
        crash.summary.contains("on host p2 ended mid-level")
            && crash.summary.contains("the router was stopped"),
        "{}",
        crash.summary
    );
    println!("level 0: {}", crash.summary);
    // The rest ran on a fresh deployment: a second process on every host.
    check_level("cache-aware", &by_index[&1]);
    assert!(!alive(killed));
    for host in ["rt", "p1", "p2"] {
        assert_eq!(pids.get(host).map(Vec::len), Some(2), "{host}: {pids:?}");
    }
    nothing_running(&pids, &agents).await;
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_start_leaves_nothing_running_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (router, replicas) = deployment_agents(dir.path(), true);
    let agents = members(&router, &replicas);
    let ctl = start_local(local_config(dir.path(), &agents)).await;
    let mut c = client(ctl.addr).await;
    let id = submit_trials(&mut c, spec(1, false, "1"), "routing.toml", 1).await;
    let pids = follow(&mut c, &id, |_| {}).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    let trials = ctl.store.trials(&id).await.unwrap();
    let reason = &trials[0].reason;
    assert!(
        reason.contains("deployment of 2: replica")
            && reason.contains("on host p2 could not start"),
        "{reason}"
    );
    println!("{reason}");
    assert!(ctl.store.levels(&id).await.unwrap().is_empty());
    // The router never started; the replica that did was stopped with the deployment.
    assert!(!pids.contains_key("rt"), "{pids:?}");
    nothing_running(&pids, &agents).await;
    ctl.shutdown().await;
}
