//! The checks an A/B job on a real engine ends with (`vllm_job`, `sglang_job`): every stored
//! level complete with the cache emptied before it and the engine's own cache figure, and the
//! verdicts printed and asserted (nothing called at c=1, `winner` significant at c=8).

use fleetbench_proto::controllerpb::{CompareRequest, GetResultsRequest};

use super::Client;

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

    let cmp = c
        .compare(CompareRequest {
            job_ids: vec![job_id.to_string()],
            alpha: 0.0,
        })
        .await
        .unwrap()
        .into_inner();
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
    assert!(!one.margin_significant, "c=1 called: {}", one.verdict);
    let eight = at("c=8");
    assert!(
        eight.margin_significant && eight.winner_config == winner,
        "c=8: {}",
        eight.verdict
    );
}
