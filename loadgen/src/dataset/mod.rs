//! Prompt sets: random, ShareGPT, shared-prefix, JSONL and trace replay, turned into ready
//! request bodies once, before any level runs.

mod files;
mod shape;

use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

pub(crate) use shape::Shaper;

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
}

/// One prompt with its request body serialised once.
#[derive(Debug, Clone)]
pub(crate) struct Prompt {
    pub body: Bytes,
    pub input_len: Option<u32>,
    pub output_len: u32,
    pub arrival: Option<Duration>,
}

/// Builds `count` prompts (all lines for a trace).
pub(crate) async fn build(
    spec: &DatasetSpec,
    count: usize,
    seed: u64,
    shaper: &mut Shaper,
) -> Result<Vec<PromptSpec>, LoadgenError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(count);
    match spec {
        DatasetSpec::Random {
            input_len,
            output_len,
            range_ratio,
        } => {
            let low = ((*input_len as f64 * range_ratio).floor() as u32).clamp(1, *input_len);
            let out_low = ((*output_len as f64 * range_ratio).floor() as u32).clamp(1, *output_len);
            for _ in 0..count {
                let len = rng.random_range(low..=*input_len);
                let olen = rng.random_range(out_low..=*output_len);
                let text = shaper.prompt(len, &mut rng).await?;
                out.push(PromptSpec {
                    text,
                    input_len: Some(len),
                    output_len: olen,
                    arrival: None,
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
            'outer: for p in &prefixes {
                for _ in 0..*prompts_per_group {
                    if pool.len() >= count {
                        break 'outer;
                    }
                    let total = prefix_len + suffix_len;
                    let text = shaper.extend(p, *prefix_len, total, &mut rng).await?;
                    pool.push(PromptSpec {
                        text,
                        input_len: Some(total),
                        output_len: *output_len,
                        arrival: None,
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
                let ilen = shaper.count(prompt).await?;
                out.push(PromptSpec {
                    text: prompt.clone(),
                    input_len: Some(ilen),
                    output_len: olen,
                    arrival: None,
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
                out.push(PromptSpec {
                    text,
                    input_len: None,
                    output_len: olen.unwrap_or(*output_len),
                    arrival: None,
                });
            }
            cycle(&mut out, count);
        }
        DatasetSpec::Trace { path } => {
            for entry in files::trace(path)? {
                let text = match entry.prompt {
                    Some(t) => t,
                    None => {
                        shaper
                            .prompt(entry.input_len.unwrap_or(1), &mut rng)
                            .await?
                    }
                };
                out.push(PromptSpec {
                    text,
                    input_len: entry.input_len,
                    output_len: entry.output_len,
                    arrival: Some(entry.at),
                });
            }
        }
    }
    Ok(out)
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
        input_len: p.input_len,
        output_len: p.output_len,
        arrival: p.arrival,
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
        let a = build(&spec, 50, 7, &mut s1).await.unwrap();
        let b = build(&spec, 50, 7, &mut s1).await.unwrap();
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
        let v = build(&spec, 12, 1, &mut s).await.unwrap();
        let mut prefixes: Vec<String> = v
            .iter()
            .map(|p| p.text.split(' ').take(10).collect::<Vec<_>>().join(" "))
            .collect();
        prefixes.sort();
        prefixes.dedup();
        assert_eq!(prefixes.len(), 3);
        assert!(v.iter().all(|p| p.text.split_whitespace().count() == 15));
    }

    #[test]
    fn chat_and_completion_bodies() {
        let p = PromptSpec {
            text: "a \"b\"".into(),
            input_len: Some(2),
            output_len: 9,
            arrival: None,
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
