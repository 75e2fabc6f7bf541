//! Trace replay in the Mooncake JSONL format (the one AIPerf and llm-d replay): one request per
//! line, `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`, sent at
//! its timestamp (optionally sped up) with `max_tokens` = its output length.
//!
//! Each hash id names one 512-token block of the prompt; equal ids are equal content, so ids
//! that two requests share at the start of their prompts are prefix reuse. A prompt is built
//! from its ids: every id stands for a fixed run of one-token words (drawn from the seed and
//! the id alone), the first `n − 1` blocks whole, the last one cut to what `input_length`
//! leaves (`input_length − (n − 1) × 512`, which must be 1..=512, the rule AIPerf checks). The
//! file's blocks are 512 tokens; `block_tokens` below 512 sends each as that many tokens (and
//! the last one scaled alike, rounded up), so that a trace recorded on a long-context model
//! keeps its reuse structure on a small one. Lines with a `prompt` (`text_input`) are sent as
//! written; lines with only an `input_length` get a fresh random prompt of that length.
//!
//! **The reuse the trace designs** is what a prefix cache that never evicts could serve, in
//! send order: the tokens of a request's leading blocks whose id chain (the ids up to and
//! including that block) an earlier request of the level already sent, a block counting up to
//! the length the earlier request sent of it; at most the prompt's length less one (an engine
//! computes the last prompt token to produce the first output token). What it leaves out: reuse
//! of a block after a differing one (no prefix cache serves it), tokens that match by chance
//! where two different blocks begin with the same word, and the first word (and BOS) that all
//! generated prompts share. An engine whose cache evicts, or serves only some earlier prompts
//! (llama.cpp's slots and its host-RAM cache), may reuse less: the figure is the design, read
//! beside the engine's own counter.
//!
//! Markers: the first block of every prompt carries a marker keyed by its id, unique to the
//! run and level, so requests that start with the same block share it within a level and no
//! level reuses an earlier one's cache. A trace's own prompt texts are replayed unchanged.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Map, Value};

use super::mark::{MarkKey, MarkSlot, SENTINEL, cut_words};
use super::pool::{PROMPT_BYTES_PER_TOKEN, index_rng};
use super::{PromptSpec, Shaper, mark_start};
use crate::error::LoadgenError;

/// Tokens of one block of a Mooncake trace file.
pub(crate) const FILE_BLOCK: u32 = 512;
/// Tokens a block may be sent as (`trace_block_tokens`): room for a marker in the first block,
/// and no more than the file's own blocks.
pub(crate) const BLOCK_TOKENS: (u32, u32) = (16, FILE_BLOCK);
/// How much faster (or slower, below 1) than recorded a trace may be replayed.
pub(crate) const SPEEDUP: (f64, f64) = (0.01, 100.0);
/// Input and output lengths a line may ask for (as the job spec bounds token counts).
const MAX_TOKENS: u32 = 1 << 20;
/// Latest timestamp accepted: about 31 years in milliseconds.
const MAX_TIMESTAMP_MS: f64 = 1e12;
/// The most memory a trace's prompts may take, as `fleetbench_proto::budget` counts it.
const MAX_PROMPT_BYTES: u64 = 4 << 30;

/// Checks the replay options; the error names the spec's field.
pub(crate) fn validate(block_tokens: u32, speedup: f64) -> Result<(), (&'static str, String)> {
    if !(BLOCK_TOKENS.0..=BLOCK_TOKENS.1).contains(&block_tokens) {
        return Err((
            "trace_block_tokens",
            format!(
                "{block_tokens} is not in {}..={} (tokens each 512-token block of the trace is \
                 sent as)",
                BLOCK_TOKENS.0, BLOCK_TOKENS.1
            ),
        ));
    }
    if !(speedup.is_finite() && (SPEEDUP.0..=SPEEDUP.1).contains(&speedup)) {
        return Err((
            "trace_speedup",
            format!("{speedup} is not in {}..={}", SPEEDUP.0, SPEEDUP.1),
        ));
    }
    Ok(())
}

/// What a line's prompt is made of.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// Its own text, sent as written (with the input length the file states, if any).
    Text {
        text: String,
        input_len: Option<u32>,
    },
    /// A fresh random prompt of this many tokens.
    Length(u32),
    /// Blocks named by hash ids; `input_len` tokens in the file's 512-token blocks.
    Blocks { ids: Vec<u64>, input_len: u32 },
}

/// One request of a trace, in send order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    /// Offset from the first request, divided by the speed-up.
    pub at: Duration,
    pub output_len: u32,
    pub source: Source,
}

fn bad(path: &Path, line: Option<usize>, message: impl Into<String>) -> LoadgenError {
    LoadgenError::Dataset {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

/// The value of the first of `names` the object has, and the name it had.
fn field<'a>(
    obj: &'a Map<String, Value>,
    names: &[&'static str],
) -> Option<(&'static str, &'a Value)> {
    names
        .iter()
        .find_map(|n| obj.get(*n).filter(|v| !v.is_null()).map(|v| (*n, v)))
}

fn length(name: &str, v: &Value, min: u32) -> Result<u32, String> {
    v.as_u64()
        .filter(|n| (u64::from(min)..=u64::from(MAX_TOKENS)).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| format!("{name}: {v} is not an integer in {min}..={MAX_TOKENS}"))
}

/// One line's fields, each error naming its field; `None` for a blank line.
fn parse_line(text: &str) -> Result<Option<(f64, u32, Source)>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let obj: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    let (name, ts) = field(&obj, &["timestamp", "timestamp_ms", "arrival_ms"])
        .ok_or("timestamp: missing (milliseconds from the trace's start)")?;
    let ts = ts
        .as_f64()
        .filter(|t| t.is_finite() && (0.0..=MAX_TIMESTAMP_MS).contains(t))
        .ok_or_else(|| format!("{name}: {ts} is not a number of milliseconds in 0..=1e12"))?;
    let (name, out) = field(&obj, &["output_length", "output_len"])
        .ok_or("output_length: missing (the tokens to generate)")?;
    let output_len = length(name, out, 1)?;
    let input_len = match field(&obj, &["input_length", "input_len"]) {
        Some((name, v)) => Some(length(name, v, 1)?),
        None => None,
    };
    if let Some((name, v)) = field(&obj, &["prompt", "text_input", "input_text"]) {
        let text = v
            .as_str()
            .ok_or_else(|| format!("{name}: {v} is not a string"))?
            .to_string();
        return Ok(Some((ts, output_len, Source::Text { text, input_len })));
    }
    let source = match (field(&obj, &["hash_ids"]), input_len) {
        (Some((_, ids)), input_len) => {
            let ids = block_ids(ids)?;
            let n = ids.len() as u64;
            let (lo, hi) = (
                (n - 1) * u64::from(FILE_BLOCK) + 1,
                n * u64::from(FILE_BLOCK),
            );
            let input_len = input_len.unwrap_or(hi.min(u64::from(MAX_TOKENS)) as u32);
            if !(lo..=hi).contains(&u64::from(input_len)) {
                return Err(format!(
                    "input_length: {input_len} does not fit {n} hash_ids: {n} blocks of \
                     {FILE_BLOCK} tokens hold {lo}..={hi} input tokens"
                ));
            }
            Source::Blocks { ids, input_len }
        }
        (None, Some(len)) => Source::Length(len),
        (None, None) => {
            return Err("input_length: missing (give input_length, hash_ids or prompt)".into());
        }
    };
    Ok(Some((ts, output_len, source)))
}

fn block_ids(v: &Value) -> Result<Vec<u64>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("hash_ids: {v} is not an array of block ids"))?;
    let most = MAX_TOKENS.div_ceil(FILE_BLOCK) as usize;
    if items.is_empty() || items.len() > most {
        return Err(format!(
            "hash_ids: {} ids; a prompt has 1..={most} blocks of {FILE_BLOCK} tokens",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, id)| {
            id.as_u64()
                .ok_or_else(|| format!("hash_ids[{i}]: {id} is not a non-negative integer"))
        })
        .collect()
}

/// Reads a trace: every line checked (the error names the file, the line and the field),
/// sorted by timestamp, offsets from the first request divided by `speedup`; the first `limit`
/// requests kept.
pub(crate) fn read(path: &Path, speedup: f64, limit: usize) -> Result<Vec<Line>, LoadgenError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadgenError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(row) = parse_line(line).map_err(|m| bad(path, Some(i + 1), m))? {
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return Err(bad(path, None, "no requests"));
    }
    // Stable: requests recorded at the same millisecond keep the file's order.
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = rows[0].0;
    rows.truncate(limit.max(1));
    Ok(rows
        .into_iter()
        .map(|(ts, output_len, source)| Line {
            at: Duration::try_from_secs_f64((ts - first) / 1000.0 / speedup)
                .unwrap_or(Duration::MAX),
            output_len,
            source,
        })
        .collect())
}

/// Token lengths of a prompt's blocks when each 512-token block is sent as `block` tokens: all
/// but the last whole, the last scaled from what `input_len` leaves it (rounded up).
pub(crate) fn block_lens(input_len: u32, blocks: usize, block: u32) -> Vec<u32> {
    let n = blocks.max(1);
    let last_file = input_len
        .saturating_sub((n as u32 - 1) * FILE_BLOCK)
        .clamp(1, FILE_BLOCK);
    let last = (u64::from(last_file) * u64::from(block)).div_ceil(u64::from(FILE_BLOCK)) as u32;
    let mut lens = vec![block; n];
    lens[n - 1] = last;
    lens
}

/// The id chains earlier requests of a level sent, as a tree: node `(parent, id)` is a block
/// after the chain `parent` ends, with the most tokens of it any request sent.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    nodes: HashMap<(u32, u64), (u32, u32)>,
}

impl Seen {
    /// Tokens of a request's `blocks` (`(id, tokens)` in prompt order) that earlier requests
    /// already sent as a prefix, at most all but the last token; then records its blocks.
    pub(crate) fn add(&mut self, blocks: &[(u64, u32)]) -> u32 {
        const ROOT: u32 = 0;
        let mut reused = 0u32;
        let mut parent = ROOT;
        for &(id, len) in blocks {
            let Some(&(node, seen)) = self.nodes.get(&(parent, id)) else {
                break;
            };
            reused += len.min(seen);
            if len > seen {
                break;
            }
            parent = node;
        }
        let mut parent = ROOT;
        for &(id, len) in blocks {
            let next = self.nodes.len() as u32 + 1;
            let entry = self.nodes.entry((parent, id)).or_insert((next, 0));
            entry.1 = entry.1.max(len);
            parent = entry.0;
        }
        let total: u32 = blocks.iter().map(|b| b.1).sum();
        reused.min(total.saturating_sub(1))
    }
}

/// Word content of blocks, made once per id: `block` word indices drawn from the seed and the
/// id alone, so equal ids are equal text in every prompt.
struct Content<'a> {
    words: &'a [&'static str],
    seed: u64,
    block: u32,
    made: HashMap<u64, Vec<u16>>,
}

impl Content<'_> {
    fn push(&mut self, text: &mut String, id: u64, n: u32) {
        let (words, seed, block) = (self.words, self.seed, self.block);
        let content = self.made.entry(id).or_insert_with(|| {
            // Word lists are short (the shaper's ~150 words): an index fits 16 bits.
            let mut rng = index_rng(seed, id);
            (0..block)
                .map(|_| rng.random_range(0..words.len()) as u16)
                .collect()
        });
        for &w in &content[..(n as usize).min(content.len())] {
            text.push(' ');
            text.push_str(words[usize::from(w)]);
        }
    }
}

/// The text of a prompt made of blocks `ids` of `lens` tokens: the shaper's first word (`base`
/// tokens) begins the first block; with `mark` > 0 a marker keyed by the first id takes the
/// first block's next words (never more than that block has).
fn blocks_prompt(
    content: &mut Content<'_>,
    base: u32,
    ids: &[u64],
    lens: &[u32],
    mark: u8,
) -> (String, Vec<MarkSlot>) {
    let mut text = String::from("the");
    let first_words = lens[0].saturating_sub(base);
    for (i, (&id, &len)) in ids.iter().zip(lens).enumerate() {
        let n = if i == 0 { first_words } else { len };
        content.push(&mut text, id, n);
    }
    let take = u8::try_from(first_words).unwrap_or(u8::MAX).min(mark);
    if take == 0 {
        return (text, Vec::new());
    }
    let words = cut_words(&mut text, "the".len(), take);
    let key = MarkKey::Block(ids[0]);
    (text, vec![MarkSlot { words, key }])
}

/// Builds the prompts of a trace's lines in send order, with the reuse each designs (`None`
/// for a line with its own text: nothing is known of it). `mark`: words of each marker.
pub(crate) async fn build(
    path: &Path,
    lines: Vec<Line>,
    block: u32,
    seed: u64,
    shaper: &mut Shaper,
    mark: u8,
    rng: &mut StdRng,
) -> Result<Vec<PromptSpec>, LoadgenError> {
    let tokens: u64 = lines
        .iter()
        .map(|l| match &l.source {
            Source::Text { text, .. } => text.len() as u64,
            Source::Length(n) => u64::from(*n),
            Source::Blocks { ids, input_len } => block_lens(*input_len, ids.len(), block)
                .iter()
                .map(|&t| u64::from(t))
                .sum(),
        })
        .sum();
    let need = tokens.saturating_mul(PROMPT_BYTES_PER_TOKEN);
    if need > MAX_PROMPT_BYTES {
        return Err(bad(
            path,
            None,
            format!(
                "the {} requests replayed hold {tokens} prompt tokens, about {} MiB as \
                 counted ({PROMPT_BYTES_PER_TOKEN} bytes a token), over the {} MiB budget: \
                 replay fewer requests or a smaller trace_block_tokens",
                lines.len(),
                need >> 20,
                MAX_PROMPT_BYTES >> 20
            ),
        ));
    }
    let words = shaper.words();
    let base = shaper.base();
    let mut content = Content {
        words: &words,
        seed,
        block,
        made: HashMap::new(),
    };
    let mut seen = Seen::default();
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let (text, input_len, marks, reusable) = match line.source {
            Source::Text { text, input_len } => (text, input_len, Vec::new(), None),
            Source::Length(n) => {
                let (text, marks) = mark_start(shaper.prompt(n, rng).await?, mark);
                (text, Some(n), marks, Some(0))
            }
            Source::Blocks { ids, input_len } => {
                let lens = block_lens(input_len, ids.len(), block);
                let (text, marks) = blocks_prompt(&mut content, base, &ids, &lens, mark);
                let chain: Vec<(u64, u32)> =
                    ids.iter().copied().zip(lens.iter().copied()).collect();
                let reusable = seen.add(&chain);
                let len: u32 = lens.iter().sum();
                // Checked, never trimmed: a trimmed block would differ between the requests
                // that share it.
                let sample = match marks.first() {
                    Some(m) => text.replace(SENTINEL, &shaper.filler(m.words)),
                    None => text.clone(),
                };
                if shaper.count(&sample).await? != len {
                    shaper.inexact += 1;
                }
                (text, Some(len), marks, Some(reusable))
            }
        };
        out.push(PromptSpec {
            text,
            input_len,
            output_len: line.output_len,
            arrival: Some(line.at),
            marks,
            reusable,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
