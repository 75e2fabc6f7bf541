use std::io::Write;
use std::sync::Arc;

use super::*;
use crate::config::{Api, DatasetSpec};
use crate::dataset::{Marker, body, words_for_64_bits};

fn file(content: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(content.as_bytes()).unwrap();
    f
}

fn error(content: &str) -> String {
    let f = file(content);
    read(f.path(), 1.0, usize::MAX).unwrap_err().to_string()
}

#[test]
fn lines_are_sorted_relative_and_sped_up() {
    let f = file(
        "{\"timestamp\": 27482, \"input_length\": 655, \"output_length\": 52, \"hash_ids\": [46, 47]}\n\
         \n\
         {\"timestamp\": 10535, \"input_length\": 672, \"output_length\": 26, \"hash_ids\": [46, 47], \"extra\": 1}\n\
         {\"timestamp_ms\": 10535.5, \"text_input\": \"hi there\", \"output_len\": 3}\n\
         {\"timestamp\": 30000, \"input_length\": 9, \"output_length\": 1}\n",
    );
    let t = read(f.path(), 2.0, usize::MAX).unwrap();
    let at: Vec<f64> = t.iter().map(|l| l.at.as_secs_f64() * 1000.0).collect();
    assert_eq!(at.len(), 4);
    assert!((at[0] - 0.0).abs() < 1e-9 && (at[1] - 0.25).abs() < 1e-6);
    assert!(
        (at[2] - 8473.5).abs() < 1e-6 && (at[3] - 9732.5).abs() < 1e-6,
        "{at:?}"
    );
    assert_eq!(
        t[0].source,
        Source::Blocks {
            ids: vec![46, 47],
            input_len: 672
        }
    );
    assert_eq!(t[0].output_len, 26);
    assert_eq!(
        t[1].source,
        Source::Text {
            text: "hi there".into(),
            input_len: None
        }
    );
    assert_eq!(t[3].source, Source::Length(9));
    // The first `limit` requests in time, whatever the file's order.
    let first = read(f.path(), 1.0, 2).unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(first[1].output_len, 3);
}

#[test]
fn errors_name_the_line_and_the_field() {
    let ok = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n";
    let cases = [
        (
            "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1]}",
            "input_length: 600 does not fit 1 hash_ids: 1 blocks of 512 tokens hold 1..=512",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [1, 2]}",
            "hold 513..=1024",
        ),
        (
            "{\"timestamp\": \"x\", \"input_length\": 5, \"output_length\": 2}",
            "timestamp: \"x\" is not a number",
        ),
        (
            "{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 2}",
            "timestamp: -1",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 5}",
            "output_length: missing",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 0}",
            "output_length: 0",
        ),
        (
            "{\"timestamp\": 1, \"input_length\": 2.5, \"output_length\": 1}",
            "input_length: 2.5",
        ),
        (
            "{\"input_length\": 5, \"output_length\": 1}",
            "timestamp: missing",
        ),
        (
            "{\"timestamp\": 1, \"output_length\": 1}",
            "input_length: missing",
        ),
        (
            "{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}",
            "hash_ids[1]: -2 is not a non-negative integer",
        ),
        (
            "{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": []}",
            "hash_ids: 0 ids",
        ),
        (
            "{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": 7}",
            "hash_ids: 7 is not",
        ),
        (
            "{\"timestamp\": 1, \"output_length\": 1, \"prompt\": 7}",
            "prompt: 7 is not a string",
        ),
        ("[1, 2]", "not a JSON object"),
    ];
    for (line, want) in cases {
        let err = error(&format!("{ok}{line}\n"));
        assert!(err.contains(":2: "), "{line}: {err}");
        assert!(err.contains(want), "{line}: {err}");
    }
    assert!(error("\n\n").contains("no requests"));
    // Without input_length, hash_ids are whole blocks.
    let f = file("{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": [4, 5]}\n");
    assert_eq!(
        read(f.path(), 1.0, 9).unwrap()[0].source,
        Source::Blocks {
            ids: vec![4, 5],
            input_len: 1024
        }
    );
}

#[test]
fn options_are_bounded_by_name() {
    assert!(validate(512, 1.0).is_ok() && validate(16, 100.0).is_ok());
    assert_eq!(validate(15, 1.0).unwrap_err().0, "trace_block_tokens");
    assert_eq!(validate(513, 1.0).unwrap_err().0, "trace_block_tokens");
    assert_eq!(validate(32, 0.0).unwrap_err().0, "trace_speedup");
    assert_eq!(validate(32, f64::NAN).unwrap_err().0, "trace_speedup");
    assert_eq!(validate(32, 101.0).unwrap_err().0, "trace_speedup");
}

#[test]
fn blocks_are_whole_but_the_last_which_scales_with_them() {
    assert_eq!(block_lens(655, 2, 512), [512, 143]);
    // 143 of 512 tokens, sent in 16-token blocks: 4.47, rounded up.
    assert_eq!(block_lens(655, 2, 16), [16, 5]);
    assert_eq!(block_lens(1024, 2, 16), [16, 16]);
    assert_eq!(block_lens(513, 2, 16), [16, 1]);
    assert_eq!(block_lens(1, 1, 32), [1]);
}

#[test]
fn reuse_is_the_prefix_of_blocks_earlier_requests_sent() {
    let mut seen = Seen::default();
    assert_eq!(seen.add(&[(1, 16), (2, 16), (3, 5)]), 0, "nothing sent yet");
    assert_eq!(seen.add(&[(1, 16), (2, 16), (4, 16), (5, 3)]), 32);
    // Block 3 was sent 5 tokens long: only those count, and nothing after it.
    assert_eq!(seen.add(&[(1, 16), (2, 16), (3, 8), (6, 16)]), 37);
    // Now sent 8 long: all of a prompt but its last token.
    assert_eq!(seen.add(&[(1, 16), (2, 16), (3, 8)]), 39);
    // A block after a differing one is no prefix: nothing.
    assert_eq!(seen.add(&[(2, 16), (1, 16)]), 0);
    assert_eq!(seen.add(&[(9, 16), (2, 16)]), 0);
    // The same id after another chain is another block of the tree.
    assert_eq!(seen.add(&[(9, 16), (1, 16)]), 16);
}

async fn built(trace: &str, block: u32, mark: bool) -> (Vec<PromptSpec>, Arc<Vec<&'static str>>) {
    let f = file(trace);
    let mut s = Shaper::new(None).await.unwrap();
    let words = Arc::new(s.words());
    let n = if mark {
        words_for_64_bits(words.len())
    } else {
        0
    };
    let spec = DatasetSpec::Trace {
        path: f.path().to_path_buf(),
        block_tokens: block,
        speedup: 1.0,
    };
    let v = crate::dataset::build(&spec, 100, 3, &mut s, n)
        .await
        .unwrap();
    assert_eq!(s.inexact, 0);
    (v, words)
}

const TRACE: &str = "\
{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 4, \"hash_ids\": [7, 8, 9]}\n\
{\"timestamp\": 10, \"input_length\": 1400, \"output_length\": 4, \"hash_ids\": [7, 8, 10]}\n\
{\"timestamp\": 20, \"input_length\": 300, \"output_length\": 2, \"hash_ids\": [11]}\n\
{\"timestamp\": 30, \"input_length\": 40, \"output_length\": 2}\n\
{\"timestamp\": 40, \"input_length\": 1536, \"output_length\": 4, \"hash_ids\": [7, 8, 9]}\n";

#[tokio::test]
async fn prompts_are_built_from_their_blocks_with_the_designed_reuse() {
    let (v, _) = built(TRACE, 32, false).await;
    // 32-token blocks: 1100 = 2 × 512 + 76 → 32, 32, 5 (76 × 32 / 512 = 4.75, rounded up).
    let lens: Vec<u32> = v.iter().map(|p| p.input_len.unwrap()).collect();
    // 1400 leaves 376 tokens to the last block: 23.5, rounded up.
    assert_eq!(lens, [69, 88, 19, 40, 96]);
    for p in &v {
        assert_eq!(
            p.text.split_whitespace().count() as u32,
            p.input_len.unwrap()
        );
    }
    assert_eq!(v[0].output_len, 4);
    assert_eq!(v[4].arrival, Some(Duration::from_millis(40)));
    // Request 1 repeats blocks 7 and 8; request 4 those and the 5 tokens of 9 request 0 sent.
    let reuse: Vec<Option<u32>> = v.iter().map(|p| p.reusable).collect();
    assert_eq!(reuse, [Some(0), Some(64), Some(0), Some(0), Some(69)]);
    let words = |p: &PromptSpec, n: usize| p.text.split(' ').take(n).collect::<Vec<_>>().join(" ");
    assert_eq!(words(&v[0], 64), words(&v[1], 64));
    assert_ne!(words(&v[0], 65), words(&v[1], 65));
    assert!(
        v[4].text.starts_with(&v[0].text),
        "block 9 cut short is its prefix"
    );
    // The same trace and seed give the same prompts.
    let (again, _) = built(TRACE, 32, false).await;
    assert!(v.iter().zip(&again).all(|(a, b)| a.text == b.text));
}

#[tokio::test]
async fn markers_keep_the_sharing_within_a_level_and_nothing_across_levels() {
    let (v, words) = built(TRACE, 32, true).await;
    let bodies: Vec<_> = v
        .iter()
        .map(|p| body(Api::Completions, "m", p, true))
        .collect();
    let text = |level: u64, i: usize| {
        let m = Marker::new(words.clone(), 5, level, false);
        let b = m.body(bodies[i].pieces.as_ref().expect("marked"), i as u64, 5);
        let j: serde_json::Value = serde_json::from_slice(&b).unwrap();
        j["prompt"].as_str().unwrap().to_string()
    };
    let head = |t: &str, n: usize| t.split(' ').take(n).collect::<Vec<_>>().join(" ");
    // Requests 0 and 1 share their first two blocks, marker included, and keep their lengths.
    assert_eq!(head(&text(0, 0), 64), head(&text(0, 1), 64));
    assert_eq!(text(0, 1).split_whitespace().count(), 88);
    assert!(text(0, 4).starts_with(&text(0, 0)));
    // Another first block, another marker; another level, other prompts.
    assert_ne!(head(&text(0, 2), 10), head(&text(0, 0), 10));
    assert_ne!(head(&text(1, 0), 64), head(&text(0, 0), 64));
    assert_eq!(head(&text(1, 0), 64), head(&text(1, 1), 64));
    // The generated line is fresh per request.
    assert_ne!(text(0, 3), text(1, 3));
}

#[tokio::test]
async fn a_trace_with_its_own_texts_states_no_reuse() {
    let (v, _) = built(
        "{\"timestamp\": 0, \"prompt\": \"a b c\", \"output_length\": 2}\n\
         {\"timestamp\": 1, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [1]}\n",
        16,
        true,
    )
    .await;
    assert_eq!(v[0].reusable, None);
    assert_eq!(v[0].text, "a b c");
    assert_eq!(v[1].reusable, Some(0));
}
