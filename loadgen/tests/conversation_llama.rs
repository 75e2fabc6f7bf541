//! Multi-turn sessions against a real `llama-server` (CPU, SmolLM2-135M, two slots): the
//! reuse the workload designs (each turn repeats the session's previous prompt; agent sessions
//! also share a system prompt) is what the server's own counter says it did not evaluate,
//! within 5 points, level by level; and a later level reuses nothing of an earlier one's.
//!
//! The measured figure is the agent's for llama.cpp: 1 − `llamacpp:prompt_tokens_total`
//! (tokens evaluated during the level) / prompt tokens sent.

mod common;

use std::time::Duration;

use fleetbench_loadgen::{Api, BenchConfig, Bound, DatasetSpec, Level, LevelReport, Runner};
use fleetbench_testkit::servers::LlamaServer;
use tokio_util::sync::CancellationToken;

/// Runs every level; returns each level's report with the server's measured reuse.
async fn sweep(
    llama: &LlamaServer,
    dataset: DatasetSpec,
    levels: &[Level],
    requests: u32,
) -> Vec<(LevelReport, f64)> {
    let url = llama.url();
    let cfg = BenchConfig {
        dataset,
        levels: levels.to_vec(),
        bound: Bound::Requests(requests),
        api: Api::Completions,
        request_timeout: Duration::from_secs(60),
        ..BenchConfig::new(&url)
    };
    let runner = Runner::new(cfg).await.expect("runner");
    assert_eq!(runner.shaping().source, "server /tokenize");
    assert_eq!(runner.shaping().inexact, 0);
    let mut out = Vec::new();
    for (i, level) in levels.iter().enumerate() {
        let before = llama.metric("llamacpp:prompt_tokens_total");
        let r = runner
            .run_level(i, level, None, CancellationToken::new())
            .await;
        let evaluated = llama.metric("llamacpp:prompt_tokens_total") - before;
        assert_eq!(
            (r.completed, r.failed),
            (u64::from(requests), 0),
            "level {i}: {r:?}\n{}",
            llama.log_tail()
        );
        let measured = 1.0 - evaluated / r.prompt_tokens_all as f64;
        out.push((r, measured));
    }
    out
}

fn check(name: &str, levels: &[(LevelReport, f64)]) {
    for (i, (r, measured)) in levels.iter().enumerate() {
        let designed = r.designed_reuse.expect("a conversation states its reuse");
        println!(
            "{name} level {i}: designed reuse {:.1}% ({} of {} prompt tokens), llama-server \
             reused {:.1}%, TTFT p50 {:.1} ms",
            designed * 100.0,
            r.reusable_tokens_all,
            r.prompt_tokens_all,
            measured * 100.0,
            r.ttft_ms.get("p50").unwrap_or(f64::NAN),
        );
        assert!(
            (designed - measured).abs() <= 0.05,
            "{name} level {i}: designed {designed:.3}, the server reused {measured:.3}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_reuse_matches_the_servers_cache_counter() {
    let llama = LlamaServer::start(&["--metrics"], None);
    // Four turns of 64-token messages and 16-token answers: prompts of 64, 144, 224, 304
    // tokens, of which 0, 64, 144, 224 repeat the previous turn (58.7%). Two sessions at a
    // time on two slots, thinking 50 ms between turns; 16 requests are four sessions.
    let chat = DatasetSpec::Conversation {
        turns: 4,
        input_len: 64,
        output_len: 16,
        think_time_ms: 50,
        system_prompt_len: 0,
    };
    let levels = [Level::closed(2), Level::closed(2)];
    let got = sweep(&llama, chat, &levels, 16).await;
    for (r, _) in &got {
        assert_eq!(r.reusable_tokens_all, 4 * (64 + 144 + 224));
        assert_eq!(r.prompt_tokens_all, 4 * (64 + 144 + 224 + 304));
    }
    check("conversation", &got);

    // Agent sessions: a 200-token system prompt every session shares, three turns of 48-token
    // tool outputs and 8-token answers.
    let agent = DatasetSpec::Conversation {
        turns: 3,
        input_len: 48,
        output_len: 8,
        think_time_ms: 20,
        system_prompt_len: 200,
    };
    let got = sweep(&llama, agent, &levels, 12).await;
    check("agent", &got);
}
