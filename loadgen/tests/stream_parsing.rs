//! Token accounting over real sockets: continuous usage with multi-token chunks, final-only usage.

mod common;

use common::{chunk, raw_server, sse_head};
use fleetbench_loadgen::{BenchConfig, Bound, DatasetSpec, Level, Runner};
use tokio_util::sync::CancellationToken;

async fn run(url: &str) -> fleetbench_loadgen::LevelOutcome {
    let prompts = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(prompts.path(), "\"hi\"\n").expect("write");
    let cfg = BenchConfig {
        model: Some("m".into()),
        dataset: DatasetSpec::Jsonl {
            path: prompts.path().to_path_buf(),
            output_len: 4,
        },
        levels: vec![Level::closed(1)],
        bound: Bound::Requests(2),
        ..BenchConfig::new(url)
    };
    let runner = Runner::new(cfg).await.expect("runner");
    runner
        .run_level_detailed(0, &Level::closed(1), None, CancellationToken::new(), true)
        .await
}

fn ev(text: &str, finish: &str, usage: Option<u64>) -> Vec<u8> {
    let usage = usage
        .map(|c| format!(",\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{c}}}"))
        .unwrap_or_default();
    chunk(&format!(
        "data: {{\"choices\":[{{\"text\":\"{text}\",\"finish_reason\":{finish}}}]{usage}}}\n\n"
    ))
}

#[tokio::test]
async fn continuous_usage_splits_a_multi_token_chunk_into_per_token_gaps() {
    let url = raw_server(vec![
        sse_head(),
        ev("a", "null", Some(1)),
        ev("bc", "null", Some(3)),
        ev("d", "\"length\"", Some(4)),
        chunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n"),
        b"0\r\n\r\n".to_vec(),
    ])
    .await;
    let out = run(&url).await;
    let r = &out.report;
    assert_eq!((r.completed, r.failed), (2, 0), "{r:?}");
    assert_eq!((r.input_tokens, r.output_tokens), (6, 8));
    assert_eq!(r.itl_ms.count, 2 * 3, "the 2-token chunk counts two gaps");
    for rec in &out.records {
        assert_eq!(rec.token_ms.len(), 4);
        assert_eq!(
            rec.token_ms[1], rec.token_ms[2],
            "both tokens of one chunk arrive together"
        );
        assert!(rec.token_ms[1] > rec.token_ms[0]);
    }
}

#[tokio::test]
async fn final_only_usage_is_a_total_not_a_delta() {
    let url = raw_server(vec![
        sse_head(),
        ev("a", "null", None),
        ev("b", "null", None),
        ev("", "\"length\"", Some(3)),
        ev("c", "null", None),
        chunk("data: [DONE]\n\n"),
        b"0\r\n\r\n".to_vec(),
    ])
    .await;
    let out = run(&url).await;
    let r = &out.report;
    assert_eq!((r.completed, r.failed), (2, 0), "{r:?}");
    assert_eq!(r.output_tokens, 6, "usage says 3 per request");
    for rec in &out.records {
        assert!(rec.usage_reported);
        assert_eq!(
            rec.token_ms.len(),
            3,
            "three chunks with content, one token each"
        );
    }
}

fn delta(field: &str, text: &str, finish: &str, completion: u64) -> Vec<u8> {
    chunk(&format!(
        "data: {{\"choices\":[{{\"delta\":{{\"{field}\":\"{text}\"}},\"finish_reason\":{finish}}}],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{completion}}}}}\n\n"
    ))
}

/// A model that streams reasoning first: `ttft_ms` is its first (reasoning) token,
/// `ttft_answer_ms` the first answer token after it; ITL per token counts a 2-token chunk as
/// two gaps, ITL per chunk as one.
#[tokio::test]
async fn reasoning_then_answer_gives_both_first_token_times_and_both_itls() {
    let url = raw_server(vec![
        sse_head(),
        delta("reasoning_content", "hm", "null", 1),
        delta("reasoning", "so", "null", 2),
        delta("content", "ab", "null", 4),
        delta("content", "c", "\"length\"", 5),
        chunk("data: [DONE]\n\n"),
        b"0\r\n\r\n".to_vec(),
    ])
    .await;
    let out = run(&url).await;
    let r = &out.report;
    assert_eq!(
        (r.completed, r.failed, r.output_tokens),
        (2, 0, 10),
        "{r:?}"
    );
    assert_eq!(r.ttft_answer_ms.count, 2);
    // Two more events (2 ms apart on the wire) come before the answer.
    assert!(
        r.ttft_answer_ms.mean > r.ttft_ms.mean + 2.0,
        "answer {} vs first token {}",
        r.ttft_answer_ms.mean,
        r.ttft_ms.mean
    );
    assert_eq!(r.itl_ms.count, 2 * 4, "5 tokens: 4 per-token gaps");
    assert_eq!(r.itl_chunk_ms.count, 2 * 3, "4 events: 3 per-chunk gaps");
    assert!(r.itl_chunk_ms.max >= r.itl_ms.max);
}
