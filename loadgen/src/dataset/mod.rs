//! Prompt sets: random, ShareGPT, shared-prefix, JSONL and trace replay, turned into ready
//! request bodies once, before any level runs (or, for a large random pool, one at a time as
//! requests go out: `pool`).

pub(crate) mod conversation;
mod files;
mod mark;
pub(crate) mod mooncake;
mod pool;
mod shape;

use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

pub(crate) use conversation::Sessions;
pub(crate) use mark::{Marker, hash_key, words_for_64_bits};
pub(crate) use pool::{LAZY_ABOVE, Pool, PoolSpec, pools};
pub(crate) use shape::Shaper;

use mark::{MarkKey, MarkSlot, Pieces, SENTINEL, cut_words};

use crate::config::{Api, DatasetSpec};
use crate::error::LoadgenError;

/// One prompt, before the model name is known.
#[derive(Debug, Clone)]
pub(crate) struct PromptSpec {
    pub text: String,
    /// Intended prompt tokens (exact when shaped with a tokenizer), if known.
    pub input_len: Option<u32>,
    pub output_len: u32,
    /// Arrival offset from the level start (trace replay).
    pub arrival: Option<Duration>,
    /// The request markers whose places [`SENTINEL`]s hold in `text`, in order.
    pub marks: Vec<MarkSlot>,
    /// Prompt tokens the workload designs to be served from a cache (`None`: it states none).
    pub reusable: Option<u32>,
}

/// One prompt with its request body serialised once.
#[derive(Debug, Clone)]
pub(crate) struct Prompt {
    /// The whole body (a prompt without markers).
    pub body: Bytes,
    /// The body in pieces around its markers; each request fills them in ([`Marker::body`]).
    pub pieces: Option<Pieces>,
    pub input_len: Option<u32>,
    pub output_len: u32,
    pub arrival: Option<Duration>,
    /// Prompt tokens the workload designs to be served from a cache (`None`: it states none).
    pub reusable: Option<u32>,
}

/// Builds `count` prompts (for a trace: its first `count` requests).
/// `mark`: words of each request marker (0: prompts are sent as built, unmarked).
pub(crate) async fn build(
    spec: &DatasetSpec,
    count: usize,
    seed: u64,
    shaper: &mut Shaper,
    mark: u8,
) -> Result<Vec<PromptSpec>, LoadgenError> {
    let mut rng = StdRng::seed_from_u64(seed);
    // A trace bounded by time asks for all of its requests: `count` is then no size.
    let mut out = Vec::with_capacity(count.min(1 << 16));
    match spec {
        DatasetSpec::Random {
            input_len,
            output_len,
            range_ratio,
        } => {
            let low = ((*input_len as f64 * range_ratio).floor() as u32).clamp(1, *input_len);
            let out_low = ((*output_len as f64 * range_ratio).floor() as u32).clamp(1, *output_len);
            for i in 0..count {
                // Each prompt from its own index (a lazy pool makes prompt i alone: pool.rs).
                let mut rng = pool::index_rng(seed, i as u64);
                let len = rng.random_range(low..=*input_len);
                let olen = rng.random_range(out_low..=*output_len);
                let text = shaper.prompt(len, &mut rng).await?;
                let (text, marks) = mark_start(text, mark);
                out.push(PromptSpec {
                    text,
                    input_len: Some(len),
                    output_len: olen,
                    arrival: None,
                    marks,
                    reusable: Some(0),
                });
            }
        }
        DatasetSpec::SharedPrefix {
            groups,
            prompts_per_group,
            prefix_len,
            suffix_len,
            output_len,
        } => {
            let mut prefixes = Vec::with_capacity(*groups as usize);
            for _ in 0..*groups {
                prefixes.push(shaper.prompt(*prefix_len, &mut rng).await?);
            }
            let per_pool = (*groups as usize) * (*prompts_per_group as usize);
            let mut pool = Vec::with_capacity(per_pool.min(count.max(1)));
            // Group-major order, then shuffled, as a real shared-prefix workload interleaves groups.
            'outer: for (g, p) in prefixes.iter().enumerate() {
                for _ in 0..*prompts_per_group {
                    if pool.len() >= count {
                        break 'outer;
                    }
                    let total = prefix_len + suffix_len;
                    let text = shaper.extend(p, *prefix_len, total, &mut rng).await?;
                    let (text, marks) = mark_shared(text, p.len(), g as u32, mark);
                    pool.push(PromptSpec {
                        text,
                        input_len: Some(total),
                        output_len: *output_len,
                        arrival: None,
                        marks,
                        reusable: None,
                    });
                }
            }
            shuffle(&mut pool, &mut rng);
            for i in 0..count {
                out.push(pool[i % pool.len()].clone());
            }
        }
        DatasetSpec::ShareGpt { path, output_len } => {
            let convs = files::sharegpt(path)?;
            let mut order: Vec<usize> = (0..convs.len()).collect();
            shuffle(&mut order, &mut rng);
            for i in order {
                if out.len() >= count {
                    break;
                }
                let (prompt, reply) = &convs[i];
                let olen = match output_len {
                    Some(n) => *n,
                    None => shaper.count(reply).await?,
                };
                if olen == 0 {
                    continue;
                }
                let (text, marks) = mark_file(prompt, mark);
                let ilen = if marks.is_empty() {
                    shaper.count(prompt).await?
                } else {
                    // The marker's words are one token each; count one in place.
                    let sample = text.replace(SENTINEL, &shaper.filler(mark));
                    shaper.count(&sample).await?
                };
                out.push(PromptSpec {
                    text,
                    input_len: Some(ilen),
                    output_len: olen,
                    arrival: None,
                    marks,
                    reusable: None,
                });
            }
            if out.is_empty() {
                return Err(LoadgenError::Dataset {
                    path: path.clone(),
                    line: None,
                    message: "no usable conversation".into(),
                });
            }
            cycle(&mut out, count);
        }
        DatasetSpec::Jsonl { path, output_len } => {
            let lines = files::jsonl(path)?;
            for (text, olen) in lines {
                let (text, marks) = mark_file(&text, mark);
                out.push(PromptSpec {
                    text,
                    input_len: None,
                    output_len: olen.unwrap_or(*output_len),
                    arrival: None,
                    marks,
                    reusable: None,
                });
            }
            cycle(&mut out, count);
        }
        DatasetSpec::Conversation { .. } => {
            return Err(LoadgenError::Shaping(
                "conversations are built by dataset::conversation::build".into(),
            ));
        }
        DatasetSpec::Trace {
            path,
            block_tokens,
            speedup,
        } => {
            let lines = mooncake::read(path, *speedup, count)?;
            out = mooncake::build(path, lines, *block_tokens, seed, shaper, mark, &mut rng).await?;
        }
    }
    Ok(out)
}

/// A generated prompt (`the` and one-token words): the marker takes the words after `the`.
fn mark_start(mut text: String, mark: u8) -> (String, Vec<MarkSlot>) {
    if mark == 0 || text.contains(SENTINEL) {
        return (text, Vec::new());
    }
    let from = text.find(' ').unwrap_or(text.len());
    let words = cut_words(&mut text, from, mark);
    let key = MarkKey::Request;
    (text, vec![MarkSlot { words, key }])
}

/// A shared-prefix prompt: a group marker at the start of the shared prefix, the request's own
/// marker right after it (at byte `prefix_end`).
fn mark_shared(
    mut text: String,
    prefix_end: usize,
    group: u32,
    mark: u8,
) -> (String, Vec<MarkSlot>) {
    if mark == 0 || text.contains(SENTINEL) {
        return (text, Vec::new());
    }
    let mut marks = Vec::with_capacity(2);
    if text.as_bytes().get(prefix_end) == Some(&b' ') {
        let words = cut_words(&mut text, prefix_end, mark);
        marks.push(MarkSlot {
            words,
            key: MarkKey::Request,
        });
    }
    let from = text.find(' ').unwrap_or(text.len());
    if from < prefix_end {
        let words = cut_words(&mut text, from, mark);
        marks.insert(
            0,
            MarkSlot {
                words,
                key: MarkKey::Group(group),
            },
        );
    }
    (text, marks)
}

/// A dataset file's prompt: the marker goes in front, on a line of its own; identical texts
/// share it within one pass over the file.
fn mark_file(text: &str, mark: u8) -> (String, Vec<MarkSlot>) {
    if mark == 0 || text.contains(SENTINEL) {
        return (text.to_string(), Vec::new());
    }
    let key = MarkKey::Text(hash_key(text));
    (
        format!("{SENTINEL}\n{text}"),
        vec![MarkSlot { words: mark, key }],
    )
}

fn shuffle<T>(v: &mut [T], rng: &mut StdRng) {
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
}

fn cycle(v: &mut Vec<PromptSpec>, count: usize) {
    let n = v.len();
    if n == 0 {
        return;
    }
    if n > count {
        v.truncate(count);
    }
    for i in n..count {
        v.push(v[i % n].clone());
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
    continuous_usage_stats: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<[Message<'a>; 1]>,
    max_tokens: u32,
    temperature: f64,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
}

/// Serialises the request body of one prompt.
pub(crate) fn body(api: Api, model: &str, p: &PromptSpec, ignore_eos: bool) -> Prompt {
    let mut prompt = body_of(api, model, p, ignore_eos);
    if !p.marks.is_empty() {
        prompt.pieces = Pieces::split(&prompt.body, p.marks.clone());
        if prompt.pieces.is_none() {
            // Never expected: the sentinel was checked absent before marking.
            let clean = PromptSpec {
                text: p.text.replace(SENTINEL, ""),
                ..p.clone()
            };
            prompt = body_of(api, model, &clean, ignore_eos);
        }
    }
    prompt
}

fn body_of(api: Api, model: &str, p: &PromptSpec, ignore_eos: bool) -> Prompt {
    let body = Body {
        model,
        prompt: (api == Api::Completions).then_some(p.text.as_str()),
        messages: (api == Api::Chat).then(|| {
            [Message {
                role: "user",
                content: &p.text,
            }]
        }),
        max_tokens: p.output_len,
        temperature: 0.0,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
            continuous_usage_stats: true,
        },
        ignore_eos,
    };
    Prompt {
        body: Bytes::from(serde_json::to_vec(&body).expect("request bodies always serialise")),
        pieces: None,
        input_len: p.input_len,
        output_len: p.output_len,
        arrival: p.arrival,
        reusable: p.reusable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn random_without_counter_is_seeded_and_within_range() {
        let spec = DatasetSpec::Random {
            input_len: 40,
            output_len: 20,
            range_ratio: 0.5,
        };
        let mut s1 = Shaper::new(None).await.unwrap();
        let a = build(&spec, 50, 7, &mut s1, 0).await.unwrap();
        let b = build(&spec, 50, 7, &mut s1, 0).await.unwrap();
        assert_eq!(a.len(), 50);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.text, y.text);
            let len = x.input_len.unwrap();
            assert!((20..=40).contains(&len));
            assert_eq!(x.text.split_whitespace().count() as u32, len);
            assert!((10..=20).contains(&x.output_len));
        }
        assert!(
            a.iter().any(|p| p.input_len != a[0].input_len),
            "range ratio varies lengths"
        );
    }

    #[tokio::test]
    async fn shared_prefix_groups_share_their_prefix() {
        let spec = DatasetSpec::SharedPrefix {
            groups: 3,
            prompts_per_group: 4,
            prefix_len: 10,
            suffix_len: 5,
            output_len: 8,
        };
        let mut s = Shaper::new(None).await.unwrap();
        let v = build(&spec, 12, 1, &mut s, 0).await.unwrap();
        let mut prefixes: Vec<String> = v
            .iter()
            .map(|p| p.text.split(' ').take(10).collect::<Vec<_>>().join(" "))
            .collect();
        prefixes.sort();
        prefixes.dedup();
        assert_eq!(prefixes.len(), 3);
        assert!(v.iter().all(|p| p.text.split_whitespace().count() == 15));
    }

    fn marked(p: &Prompt, m: &Marker, request: u64) -> String {
        let body = m.body(p.pieces.as_ref().expect("marked"), request, 1000);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        v["prompt"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn marked_prompts_are_unique_per_request_and_level_and_keep_their_length() {
        let spec = DatasetSpec::Random {
            input_len: 30,
            output_len: 4,
            range_ratio: 1.0,
        };
        let mut s = Shaper::new(None).await.unwrap();
        let words = std::sync::Arc::new(s.words());
        let n = words_for_64_bits(words.len());
        let v = build(&spec, 4, 1, &mut s, n).await.unwrap();
        let p: Vec<Prompt> = v
            .iter()
            .map(|p| body(Api::Completions, "m", p, true))
            .collect();
        let mut seen = std::collections::HashSet::new();
        for level in 0..3 {
            let m = Marker::new(words.clone(), hash_key("job-1/trial-1"), level, false);
            // 8 requests cycle the 4 prompts twice: no prompt is sent twice.
            for r in 0..8u64 {
                let text = marked(&p[(r % 4) as usize], &m, r);
                assert_eq!(text.split_whitespace().count(), 30, "{text}");
                assert!(text.starts_with("the "));
                // The marker is at the start: the first 1 + n words differ between requests.
                let head: Vec<&str> = text.split(' ').take(1 + usize::from(n)).collect();
                assert!(seen.insert(head.join(" ")), "marker repeated: {text}");
            }
        }
        // Another run (job, trial) marks differently.
        let other = Marker::new(words.clone(), hash_key("job-1/trial-2"), 0, false);
        let m0 = Marker::new(words.clone(), hash_key("job-1/trial-1"), 0, false);
        assert_ne!(marked(&p[0], &m0, 0), marked(&p[0], &other, 0));
    }

    #[tokio::test]
    async fn marked_shared_prefix_groups_share_within_a_level_only() {
        let spec = DatasetSpec::SharedPrefix {
            groups: 2,
            prompts_per_group: 3,
            prefix_len: 40,
            suffix_len: 30,
            output_len: 8,
        };
        let mut s = Shaper::new(None).await.unwrap();
        let words = std::sync::Arc::new(s.words());
        let n = words_for_64_bits(words.len());
        let v = build(&spec, 6, 1, &mut s, n).await.unwrap();
        let p: Vec<Prompt> = v
            .iter()
            .map(|p| body(Api::Completions, "m", p, true))
            .collect();
        let m = Marker::new(words.clone(), 7, 0, false);
        let texts: Vec<String> = (0..6).map(|r| marked(&p[r], &m, r as u64)).collect();
        let prefix = |t: &str| t.split(' ').take(40).collect::<Vec<_>>().join(" ");
        let mut prefixes: Vec<String> = texts.iter().map(|t| prefix(t)).collect();
        prefixes.sort();
        prefixes.dedup();
        assert_eq!(prefixes.len(), 2, "two groups share two prefixes");
        let mut all = texts.clone();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6, "every request differs after its group prefix");
        assert!(texts.iter().all(|t| t.split_whitespace().count() == 70));
        // The next level's groups have prefixes of their own.
        let m1 = Marker::new(words, 7, 1, false);
        assert!(!prefixes.contains(&prefix(&marked(&p[0], &m1, 0))));
    }

    #[test]
    fn chat_and_completion_bodies() {
        let p = PromptSpec {
            text: "a \"b\"".into(),
            input_len: Some(2),
            output_len: 9,
            arrival: None,
            marks: Vec::new(),
            reusable: None,
        };
        let c: serde_json::Value =
            serde_json::from_slice(&body(Api::Completions, "m", &p, true).body).unwrap();
        assert_eq!(c["prompt"], "a \"b\"");
        assert_eq!(c["max_tokens"], 9);
        assert_eq!(c["ignore_eos"], true);
        assert_eq!(c["stream_options"]["include_usage"], true);
        let ch: serde_json::Value =
            serde_json::from_slice(&body(Api::Chat, "m", &p, false).body).unwrap();
        assert_eq!(ch["messages"][0]["content"], "a \"b\"");
        assert!(ch.get("prompt").is_none() && ch.get("ignore_eos").is_none());
    }
}
