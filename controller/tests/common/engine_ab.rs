//! The checks an A/B job on a real engine ends with (`vllm_job`, `sglang_job`): every stored
//! level complete with the cache emptied before it and the engine's own cache figure, and the
//! verdicts printed and asserted (nothing called at c=1 at [`AA_ALPHA`], `winner` significant
//! at c=8 at the default level); and the
//! A/A job both run beside it (two configs with the same flags: nothing may be called).

use std::time::{Duration, Instant};

use fleetbench_proto::controllerpb::{
    CompareRequest, CompareResponse, GetResultsRequest, JobState, SubmitJobRequest,
};

use super::{Client, Proc, wait_job};

/// The level the A/A verdict is asserted at. An A/A job's "significant" is a false call by
/// construction, made at the test's alpha: at the users' default 5% the test would fail one
/// CI run in twenty with nothing wrong. At 0.1% it still fails when something biases one twin
/// (the first start after a cold page cache, a restart that leaks state into the next trial, a
/// paired analysis that pairs the wrong runs); the verdict at the default level is printed.
pub const AA_ALPHA: f64 = 0.001;

/// Submits `spec`, waits until the job succeeds (the agent's log in the message otherwise) and
/// returns its id; prints how long it took under `what`.
pub async fn run_job(c: &mut Client, agent: &Proc, what: &str, spec: String) -> String {
    let t = Instant::now();
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec,
            file_name: format!("{what}.toml"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let job = wait_job(c, &r.job_id, Duration::from_secs(900)).await;
    assert_eq!(
        job.state,
        JobState::Succeeded as i32,
        "{job:?}\n{}",
        agent.log_text()
    );
    println!("{what}: {:.0} s", t.elapsed().as_secs_f64());
    r.job_id
}

/// An A/A job: `a` and its twin `b`, which extends `a` and only sets the sampling seed to 0
/// (`seed_flag`: the spec refuses two identical configs; a seed changes which random tokens are
/// drawn, not the work: vLLM's default seed is 0 already, SGLang's a random one per start), 2
/// repeats interleaved, so every trial restarts the engine, one level at concurrency 4 of 16
/// requests.
pub fn aa_spec(engine: &str, model: &str, flag: &str, value: u32, seed_flag: &str) -> String {
    format!(
        r#"name = "{engine}-aa"
repeats = 2
order = "interleaved"

[[configs]]
name = "a"
engine = "{engine}"
model = {model:?}
flags = {{ "{flag}" = {value} }}

[[configs]]
name = "b"
extends = "a"
flags = {{ "{seed_flag}" = 0 }}

[[workloads]]
name = "random-48-32"
dataset = "random"
input_len = 48
output_len = 32
ignore_eos = true

[load]
concurrency = [4]
requests = 16
reset_cache = true
"#
    )
}

/// The A/A job's one level: every trial complete, the twins tested and nothing called at
/// [`AA_ALPHA`]; the verdict at the default level printed beside it.
pub async fn check_aa(c: &mut Client, job_id: &str) {
    let res = c
        .get_results(GetResultsRequest {
            job_ids: vec![job_id.to_string()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.levels.len(), 2 * 2, "{:?}", res.levels);
    for l in &res.levels {
        let result = l.result.as_ref().expect("a stored result");
        assert_eq!((result.completed, result.sent), (16, 16), "{result:?}");
    }
    let default = compare(c, job_id, 0.0).await;
    let strict = compare(c, job_id, AA_ALPHA).await;
    for g in &default.groups {
        println!("A/A {} at the default level: {}", g.level_label, g.verdict);
    }
    assert_eq!(strict.groups.len(), 1, "{strict:?}");
    let g = &strict.groups[0];
    assert!(g.tested, "{}", g.verdict);
    assert!(
        !g.margin_significant,
        "identical configs called different at alpha {AA_ALPHA}: {}",
        g.verdict
    );
}

/// Checks the job's 3 repeats x 2 configs x 2 levels of 16 requests of 32 tokens each, whose
/// cache figure came from `cache_counter`, then its comparison.
pub async fn check_levels_and_verdicts(
    c: &mut Client,
    job_id: &str,
    cache_counter: &str,
    winner: &str,
) {
    let res = c
        .get_results(GetResultsRequest {
            job_ids: vec![job_id.to_string()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.levels.len(), 3 * 2 * 2, "{:?}", res.levels);
    for l in &res.levels {
        let result = l.result.as_ref().expect("a stored result");
        assert_eq!((result.completed, result.sent), (16, 16), "{result:?}");
        assert_eq!(result.output_tokens, 16 * 32, "{result:?}");
        let cache = result.prefix_cache.as_ref().expect("a cache figure");
        assert_eq!(cache.reset, "flushed", "{cache:?}");
        assert!(cache.source.contains(cache_counter), "{cache:?}");
    }

    let cmp = compare(c, job_id, 0.0).await;
    // At c=1 both configs run one request at a time: a call there at the default level is
    // within its 5% chance (or a small true difference); at AA_ALPHA it is a bias.
    let strict = compare(c, job_id, AA_ALPHA).await;
    for g in &cmp.groups {
        let tput: Vec<String> = g
            .configs
            .iter()
            .map(|c| {
                format!(
                    "{} {:.1}±{:.1}",
                    c.config_name, c.output_tokens_per_s, c.output_tokens_per_s_spread
                )
            })
            .collect();
        println!("{}: {} | {}", g.level_label, tput.join(", "), g.verdict);
    }
    assert_eq!(cmp.groups.len(), 2, "{cmp:?}");
    let at = |c: &str| {
        cmp.groups
            .iter()
            .find(|g| g.level_label.contains(c))
            .unwrap_or_else(|| panic!("no level {c}: {cmp:?}"))
    };
    let one = at("c=1");
    assert!(one.tested, "{}", one.verdict);
    let one_strict = strict
        .groups
        .iter()
        .find(|g| g.level_label.contains("c=1"))
        .expect("c=1");
    assert!(
        !one_strict.margin_significant,
        "c=1 called at alpha {AA_ALPHA}: {}",
        one_strict.verdict
    );
    let eight = at("c=8");
    assert!(
        eight.margin_significant && eight.winner_config == winner,
        "c=8: {}",
        eight.verdict
    );
}

/// The job's comparison at `alpha` (0: the default level).
async fn compare(c: &Client, job_id: &str, alpha: f64) -> CompareResponse {
    c.clone()
        .compare(CompareRequest {
            job_ids: vec![job_id.to_string()],
            alpha,
            history_job_ids: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
}
