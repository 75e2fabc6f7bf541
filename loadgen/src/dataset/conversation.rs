//! Multi-turn conversations and agent sessions: workloads whose reuse is designed, stated and
//! checked against the engine's own cache counters.
//!
//! A session is one closed-loop stream. Its turn `t` sends the whole history (every earlier
//! user message and answer) plus a new user message of `input_len` tokens; between turns it
//! thinks for `think_time_ms` and keeps its stream meanwhile, as a user at a keyboard keeps a
//! connection (and an engine slot's worth of cache) while reading. With `system_prompt_len`,
//! every session of a level starts with the same system prompt (an agent's long instructions);
//! the new message of each later turn then plays a tool's output.
//!
//! **The answers in the history are fixed texts of `output_len` tokens made here, not what
//! the engine answered.** Every prompt is then known before the level starts: shaped to an
//! exact token count once, identical for every config compared (a config that answers
//! differently is not sent a different workload), and the reuse it designs is exact
//! arithmetic: turn `t` repeats turn `t − 1`'s prompt, `L(t−1)` tokens, and nothing more (the
//! engine's cache holds that prompt followed by its own answer, which the fixed answer does not
//! repeat). Re-sending the engine's own answers would add the answer to the reuse, but its
//! re-tokenisation may differ from the tokens generated, and the workload would differ per
//! config. The price: an engine's cached answer tokens are never reused, as they would be in a
//! real chat; the designed figure states exactly what is reusable.
//!
//! The protocol's fresh-prompt markers stay: the first user message of every session carries
//! a marker unique to the run, level and session (`MarkKey::Request` keyed by the session's
//! index), so no session reuses another's history and no level reuses an earlier level's; a
//! system prompt carries a group marker, shared by the sessions of one level only. Later turns
//! repeat their session's marked history unchanged. Lengths: turn `t`'s prompt is
//! `L(t) = system + input + t × (output + input)` tokens (the words are one token each, so the
//! lengths add up); for the chat API the template's own tokens come on top and are not counted
//! in the designed figure.

use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::mark::{MarkKey, MarkSlot, Pieces, cut_words};
use super::{Prompt, Shaper};
use crate::config::Api;
use crate::error::LoadgenError;

/// Turns per session at most (each turn's prompt holds every earlier one).
pub(crate) const MAX_TURNS: u32 = 1000;
/// Think time at most (an hour).
pub(crate) const MAX_THINK_MS: u64 = 3_600_000;

/// Checks the parameters; the error names the field.
pub(crate) fn validate(
    turns: u32,
    input_len: u32,
    output_len: u32,
    think_time_ms: u64,
) -> Result<(), (&'static str, String)> {
    if !(1..=MAX_TURNS).contains(&turns) {
        return Err(("turns", format!("{turns} is not in 1..={MAX_TURNS}")));
    }
    if input_len == 0 {
        return Err(("input_len", "must be at least 1".into()));
    }
    if output_len == 0 {
        return Err(("output_len", "must be at least 1".into()));
    }
    if think_time_ms > MAX_THINK_MS {
        return Err((
            "think_time_ms",
            format!("{think_time_ms} is above {MAX_THINK_MS} (an hour)"),
        ));
    }
    Ok(())
}

/// The shape of a conversation workload's sessions, shared by the slots of a level.
#[derive(Debug)]
pub(crate) struct Sessions {
    pub turns: u32,
    pub think: Duration,
    /// Conversations in the pool; session `s` replays conversation `s % conversations` with a
    /// marker of its own.
    pub conversations: usize,
    /// Tokens of turn `t`'s prompt that repeat turn `t − 1`'s prompt (0 at turn 0).
    pub history: Vec<u32>,
    /// Tokens of the system prompt every session of a level shares (0: none).
    pub system: u32,
}

impl Sessions {
    /// Index in the prompt pool of session `session`'s turn `turn`.
    pub fn prompt_index(&self, session: u64, turn: u32) -> usize {
        (session % self.conversations as u64) as usize * self.turns as usize + turn as usize
    }

    /// Tokens of turn `turn`'s prompt the workload designs to be served from a cache: the
    /// session's previous prompt, or at turn 0 the system prompt once a request of the level
    /// that carries it has finished (`system_done`).
    pub fn reusable(&self, turn: u32, system_done: bool) -> u32 {
        match turn {
            0 if system_done => self.system,
            0 => 0,
            t => self.history[t as usize],
        }
    }
}

/// What a conversation workload asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub turns: u32,
    pub input_len: u32,
    pub output_len: u32,
    pub think: Duration,
    pub system: u32,
}

/// How request bodies are written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyOpts<'a> {
    pub api: Api,
    pub model: &'a str,
    pub ignore_eos: bool,
}

/// One message of a conversation: its role and text (one-token words with leading spaces,
/// the first message starting with the shaper's first word).
struct Msg {
    role: &'static str,
    text: String,
}

/// Builds enough conversations for `count` requests (turn-major within a conversation).
/// `mark`: words of each marker (0: unmarked).
pub(crate) async fn build(
    shape: Shape,
    count: usize,
    seed: u64,
    shaper: &mut Shaper,
    mark: u8,
    body: BodyOpts<'_>,
) -> Result<(Vec<Prompt>, Sessions), LoadgenError> {
    let turns = shape.turns.max(1);
    let conversations = count.div_ceil(turns as usize).max(1);
    let mut rng = StdRng::seed_from_u64(seed);
    let words = shaper.words();
    let system_text = match shape.system {
        0 => None,
        n => Some(shaper.prompt(n, &mut rng).await?),
    };
    let mut lens = Vec::with_capacity(turns as usize);
    let mut prompts = Vec::with_capacity(conversations * turns as usize);
    for _ in 0..conversations {
        // The flat text, shaped to exact lengths, and where each message starts in it.
        let mut starts = Vec::with_capacity(2 * turns as usize + 1);
        let (mut text, mut len) = match &system_text {
            Some(sys) => {
                starts.push(("system", 0));
                starts.push(("user", sys.len()));
                let total = shape.system + shape.input_len;
                (
                    shaper.extend(sys, shape.system, total, &mut rng).await?,
                    total,
                )
            }
            None => {
                starts.push(("user", 0));
                (
                    shaper.prompt(shape.input_len, &mut rng).await?,
                    shape.input_len,
                )
            }
        };
        let mut ends = vec![text.len()];
        let mut turn_lens = vec![len];
        for _ in 1..turns {
            starts.push(("assistant", text.len()));
            for _ in 0..shape.output_len {
                text.push(' ');
                text.push_str(words[rng.random_range(0..words.len())]);
            }
            starts.push(("user", text.len()));
            let total = len + shape.output_len + shape.input_len;
            text = shaper
                .extend(&text, len + shape.output_len, total, &mut rng)
                .await?;
            len = total;
            ends.push(text.len());
            turn_lens.push(len);
        }
        if lens.is_empty() {
            lens = turn_lens;
        }
        let mut msgs: Vec<Msg> = starts
            .iter()
            .enumerate()
            .map(|(i, &(role, from))| {
                let to = starts.get(i + 1).map_or(text.len(), |s| s.1);
                Msg {
                    role,
                    text: text[from..to].to_string(),
                }
            })
            .collect();
        let slots = mark_messages(&mut msgs, system_text.is_some(), mark);
        // Turn t's prompt holds the messages up to its user message.
        let first_user = usize::from(system_text.is_some());
        for t in 0..turns as usize {
            let upto = first_user + 2 * t + 1;
            let input_len = lens.get(t).copied();
            prompts.push(prompt(&msgs[..upto], &slots, input_len, shape, body));
        }
    }
    let history = (0..turns as usize)
        .map(|t| if t == 0 { 0 } else { lens[t - 1] })
        .collect();
    Ok((
        prompts,
        Sessions {
            turns,
            think: shape.think,
            conversations,
            history,
            system: shape.system,
        },
    ))
}

/// Puts the markers in: a group marker after the system prompt's first word, the session's
/// own marker at the start of its first user message.
fn mark_messages(msgs: &mut [Msg], system: bool, mark: u8) -> Vec<MarkSlot> {
    let mut slots = Vec::new();
    if mark == 0 {
        return slots;
    }
    let first = |t: &str| t.find(' ').unwrap_or(t.len());
    if system {
        let from = first(&msgs[0].text);
        let words = cut_words(&mut msgs[0].text, from, mark);
        slots.push(MarkSlot {
            words,
            key: MarkKey::Group(0),
        });
        // The user message's text starts with a space: the marker takes its first words.
        let words = cut_words(&mut msgs[1].text, 0, mark);
        slots.push(MarkSlot {
            words,
            key: MarkKey::Request,
        });
    } else {
        let from = first(&msgs[0].text);
        let words = cut_words(&mut msgs[0].text, from, mark);
        slots.push(MarkSlot {
            words,
            key: MarkKey::Request,
        });
    }
    slots
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
    messages: Option<Vec<Message<'a>>>,
    max_tokens: u32,
    temperature: f64,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
}

fn prompt(
    msgs: &[Msg],
    slots: &[MarkSlot],
    input_len: Option<u32>,
    shape: Shape,
    o: BodyOpts<'_>,
) -> Prompt {
    let flat: String;
    let (prompt, messages) = match o.api {
        Api::Completions => {
            flat = msgs.iter().map(|m| m.text.as_str()).collect();
            (Some(flat.as_str()), None)
        }
        Api::Chat => (
            None,
            Some(
                msgs.iter()
                    .map(|m| Message {
                        role: m.role,
                        content: m.text.trim_start(),
                    })
                    .collect(),
            ),
        ),
    };
    let body = Body {
        model: o.model,
        prompt,
        messages,
        max_tokens: shape.output_len,
        temperature: 0.0,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
            continuous_usage_stats: true,
        },
        ignore_eos: o.ignore_eos,
    };
    let body = Bytes::from(serde_json::to_vec(&body).expect("request bodies always serialise"));
    // The system marker sits in every turn; the session marker too (turn 0 holds both).
    let pieces = (!slots.is_empty())
        .then(|| Pieces::split(&body, slots.to_vec()))
        .flatten();
    Prompt {
        body,
        pieces,
        input_len,
        output_len: shape.output_len,
        arrival: None,
        reusable: None,
    }
}

#[cfg(test)]
mod tests;
