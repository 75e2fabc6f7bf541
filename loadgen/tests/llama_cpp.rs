//! The load generator against a real `llama-server` (CPU, SmolLM2-135M): completions and chat,
//! token counts equal to the server's `usage`, exact prompt lengths through its `/tokenize`, and
//! prompts the server has not cached at every level (its own `/metrics` counts what it
//! evaluated).

mod common;

use std::time::Duration;

use fleetbench_testkit::servers::LlamaServer;

use common::config;
use fleetbench_loadgen::{Api, Level, LevelOutcome, Runner};
use tokio_util::sync::CancellationToken;

/// The server (its log tail is shown when an assertion fails: a request that never finishes
/// is then told apart as the server's or the client's).
type Llama = LlamaServer;

fn start_llama() -> (Llama, String) {
    let server = LlamaServer::start(&["--metrics"], None);
    let url = server.url();
    (server, url)
}

/// What a failed level shows: the failed requests (sent, first byte, tokens, error) and the
/// tail of llama-server's log, so a request that never finishes is told apart as the server's
/// or the client's.
fn failure_story(out: &LevelOutcome, llama: &Llama) -> String {
    format!(
        "{:?}\nfailed requests: {:?}\nllama-server log:\n{}",
        out.report,
        out.records
            .iter()
            .filter(|rec| rec.error.is_some())
            .map(|rec| (
                rec.index,
                rec.sent_ms,
                rec.first_byte_ms,
                rec.token_ms.len(),
                &rec.error
            ))
            .collect::<Vec<_>>(),
        llama.log_tail()
    )
}

async fn run_level(url: &str, api: Api) -> LevelOutcome {
    let mut cfg = config(url, 24, 12, vec![Level::closed(2)], 6);
    cfg.api = api;
    // Twelve tokens from a 135M model take well under a second; 30 s is only a hang guard.
    cfg.request_timeout = Duration::from_secs(30);
    let runner = Runner::new(cfg).await.expect("runner");
    assert!(!runner.model().is_empty(), "model from /v1/models");
    assert_eq!(runner.shaping().source, "server /tokenize");
    runner
        .run_level_detailed(0, &Level::closed(2), None, CancellationToken::new(), true)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_chat_against_llama_server() {
    let (llama, url) = start_llama();
    for api in [Api::Completions, Api::Chat] {
        let out = run_level(&url, api).await;
        let r = &out.report;
        assert_eq!(
            (r.completed, r.failed),
            (6, 0),
            "{api:?}: {}",
            failure_story(&out, &llama)
        );
        assert_eq!(
            r.output_tokens,
            6 * 12,
            "{api:?}: ignore_eos and max_tokens give fixed lengths"
        );
        for rec in &out.records {
            assert!(
                rec.usage_reported,
                "{api:?}: llama-server sends usage when include_usage is set"
            );
            assert_eq!(rec.output_tokens, 12);
            // Every generated token arrives as its own chunk on llama.cpp: the streamed count
            // is an independent check of the usage figure.
            assert_eq!(rec.token_ms.len() as u64, rec.output_tokens, "{api:?}");
            if api == Api::Completions {
                assert_eq!(rec.input_tokens, 24, "prompt shaped to exactly 24 tokens");
            } else {
                assert!(
                    rec.input_tokens > 24,
                    "chat template adds tokens: {}",
                    rec.input_tokens
                );
            }
        }
        assert!(r.ttft_ms.count == 6 && r.itl_ms.count == 6 * 11);
    }
}

/// Every level of one runner sends prompts the server has not seen. llama.cpp keeps recent
/// prompts (in its slots and its `--cache-ram` host cache) and serves a repeated one from
/// there: when each level replayed the pool from its start, the second level's prompt tokens
/// were almost all taken from the cache (188 of 192 here; docs/validation/h200.md, run 9), so its
/// TTFT measured a cache, not prefill. The server's own counter says how much it evaluated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_level_sends_prompts_the_server_has_not_cached() {
    let (llama, url) = start_llama();
    let levels = vec![Level::closed(1), Level::closed(2)];
    let runner = Runner::new(config(&url, 48, 4, levels.clone(), 4))
        .await
        .expect("runner");
    for (i, level) in levels.iter().enumerate() {
        let before = llama.metric("llamacpp:prompt_tokens_total");
        let out = runner
            .run_level_detailed(i, level, None, CancellationToken::new(), false)
            .await;
        let r = &out.report;
        assert_eq!(
            (r.completed, r.failed),
            (4, 0),
            "{}",
            failure_story(&out, &llama)
        );
        assert_eq!(r.input_tokens, 4 * 48);
        let evaluated = llama.metric("llamacpp:prompt_tokens_total") - before;
        // A few tokens may be shared (the BOS token, a common first word); a replayed prompt
        // shares all 48.
        assert!(
            evaluated >= 0.9 * r.input_tokens as f64,
            "level {i}: the server evaluated {evaluated} of {} prompt tokens sent; the rest came \
             from its prompt cache",
            r.input_tokens
        );
    }
}
