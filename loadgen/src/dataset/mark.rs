//! Request markers: words unique to each request, at the start of its prompt, so that no engine
//! cache (SGLang's radix cache, vLLM's prefix cache, llama.cpp's slot and host-RAM prompt
//! caches) serves a prompt by accident. Without them every level of a sweep resends the same
//! prompts and later levels measure cached prefill.
//!
//! A marker is `n` words from the shaper's one-token word list (each adds exactly one token
//! after the first word), the digits of a 64-bit hash of (run key, level, warm-up or measured,
//! what the marker identifies). Generated prompts give up their first `n` random words to it,
//! so their token length is unchanged; file prompts (ShareGPT, JSONL) get it in front (their
//! counted length includes it). Sharing stays where the workload asks for it: the groups of the
//! shared-prefix workload share a group marker (and the request's own marker follows the shared
//! prefix), identical lines of a dataset file share a marker within one pass over the file, and
//! a trace's own prompt texts are replayed unchanged.
//!
//! The body of each prompt is serialised once with a sentinel where a marker goes and split
//! there; a request's body is the pieces with its markers in between (one copy per request).

use bytes::{BufMut, Bytes, BytesMut};

/// Stands in the prompt text where a marker goes until the body is split (never in a marker).
pub(crate) const SENTINEL: char = '\u{1}';
/// The sentinel as it appears in serialised JSON.
const SENTINEL_JSON: &[u8] = b"\\u0001";

/// What a marker identifies: the request itself, a shared-prefix group, a file line's text, or
/// a trace's first block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkKey {
    /// Unique to the request (its index in the level).
    Request,
    /// Shared by every request of a shared-prefix group within the level.
    Group(u32),
    /// Shared by identical texts of a dataset file within one pass over the file.
    Text(u64),
    /// Shared by every request of a trace whose prompt starts with this block, within the level.
    Block(u64),
}

/// One marker slot of a prompt: how many words, and what they identify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MarkSlot {
    pub words: u8,
    pub key: MarkKey,
}

/// A request body in pieces: `pieces[i]`, marker `slots[i]`, `pieces[i + 1]`, …
#[derive(Debug, Clone)]
pub(crate) struct Pieces {
    pub pieces: Vec<Bytes>,
    pub slots: Vec<MarkSlot>,
}

impl Pieces {
    /// Splits a serialised body at its sentinels; `None` when their count does not match the
    /// slots (a file text that held the sentinel itself: that prompt is sent unmarked).
    pub fn split(body: &[u8], slots: Vec<MarkSlot>) -> Option<Pieces> {
        let mut pieces = Vec::with_capacity(slots.len() + 1);
        let mut rest = body;
        while let Some(i) = memchr::memmem::find(rest, SENTINEL_JSON) {
            pieces.push(Bytes::copy_from_slice(&rest[..i]));
            rest = &rest[i + SENTINEL_JSON.len()..];
        }
        pieces.push(Bytes::copy_from_slice(rest));
        (pieces.len() == slots.len() + 1).then_some(Pieces { pieces, slots })
    }
}

/// Everything a request needs to build its markers: shared by the slots of one level.
#[derive(Debug, Clone)]
pub(crate) struct Marker {
    words: std::sync::Arc<Vec<&'static str>>,
    run: u64,
    level: u64,
    warmup: bool,
}

/// How many words a 64-bit marker needs with `n` distinct words.
pub(crate) fn words_for_64_bits(n: usize) -> u8 {
    let bits = (n.max(2) as f64).log2();
    (64.0 / bits).ceil().min(64.0) as u8
}

/// A stable 64-bit hash of a run key (FNV-1a; the same key gives the same markers).
pub(crate) fn hash_key(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finaliser: every input bit moves every output bit.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Marker {
    pub fn new(
        words: std::sync::Arc<Vec<&'static str>>,
        run: u64,
        level: u64,
        warmup: bool,
    ) -> Self {
        Marker {
            words,
            run,
            level,
            warmup,
        }
    }

    fn hash(&self, key: MarkKey, request: u64, pool: u64) -> u64 {
        let (kind, id) = match key {
            MarkKey::Request => (1u64, request),
            MarkKey::Group(g) => (2, u64::from(g)),
            // One pass over the file is `pool` requests: repeats within it share.
            MarkKey::Text(t) => (3, t ^ mix(request / pool.max(1))),
            MarkKey::Block(id) => (4, id),
        };
        let mut h = mix(self.run ^ mix(self.level.wrapping_add(u64::from(self.warmup) << 32)));
        h = mix(h ^ kind);
        mix(h ^ mix(id))
    }

    /// Appends the marker words (each with a leading space).
    fn push(&self, out: &mut BytesMut, slot: MarkSlot, request: u64, pool: u64) {
        let n = self.words.len() as u64;
        let mut h = self.hash(slot.key, request, pool);
        for i in 0..slot.words {
            // Past 64 bits of digits, mix again so long markers do not end in the first word.
            if i > 0 && h == 0 {
                h = mix(u64::from(i) ^ self.run);
            }
            out.put_u8(b' ');
            out.put_slice(self.words[(h % n) as usize].as_bytes());
            h /= n;
        }
    }

    /// The body of request `request` of this level (`pool`: prompts before they repeat).
    pub fn body(&self, p: &Pieces, request: u64, pool: u64) -> Bytes {
        let len: usize = p.pieces.iter().map(Bytes::len).sum::<usize>()
            + p.slots
                .iter()
                .map(|s| usize::from(s.words) * 12)
                .sum::<usize>();
        let mut out = BytesMut::with_capacity(len);
        for (i, piece) in p.pieces.iter().enumerate() {
            out.put_slice(piece);
            if let Some(slot) = p.slots.get(i) {
                self.push(&mut out, *slot, request, pool);
            }
        }
        out.freeze()
    }

    /// The marker text alone (tests, and counting a file prompt's length).
    #[cfg(test)]
    pub fn text(&self, key: MarkKey, words: u8, request: u64, pool: u64) -> String {
        let mut out = BytesMut::new();
        self.push(&mut out, MarkSlot { words, key }, request, pool);
        String::from_utf8(out.to_vec()).expect("words are UTF-8")
    }
}

/// Replaces up to `n` words that start at byte `from` of `text` (each word preceded by a
/// space, `text[from] == ' '`) with the sentinel; returns how many words were taken (fewer when
/// the text is short).
pub(crate) fn cut_words(text: &mut String, from: usize, n: u8) -> u8 {
    let mut to = from;
    let mut taken = 0u8;
    let bytes = text.as_bytes();
    while taken < n && to < bytes.len() && bytes[to] == b' ' {
        to += 1;
        while to < bytes.len() && bytes[to] != b' ' {
            to += 1;
        }
        taken += 1;
    }
    text.replace_range(from..to, &SENTINEL.to_string());
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn words() -> Arc<Vec<&'static str>> {
        Arc::new(vec!["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"])
    }

    #[test]
    fn cut_keeps_the_word_count() {
        let mut t = "the w1 w2 w3 w4 w5".to_string();
        let n = cut_words(&mut t, 3, 3);
        assert_eq!(n, 3);
        assert_eq!(t, "the\u{1} w4 w5");
        let mut short = "the w1".to_string();
        assert_eq!(cut_words(&mut short, 3, 3), 1);
        assert_eq!(short, "the\u{1}");
        let mut prefix = "the p1 p2 s1 s2 s3".to_string();
        assert_eq!(cut_words(&mut prefix, 9, 2), 2);
        assert_eq!(prefix, "the p1 p2\u{1} s3");
    }

    #[test]
    fn markers_differ_by_request_level_and_run_but_groups_share() {
        let m = |run, level| Marker::new(words(), run, level, false);
        let a = m(1, 0);
        let n = words_for_64_bits(10);
        assert_eq!(n, 20);
        let r0 = a.text(MarkKey::Request, n, 0, 100);
        assert_eq!(r0.split_whitespace().count(), 20);
        assert_ne!(r0, a.text(MarkKey::Request, n, 1, 100));
        assert_ne!(r0, m(1, 1).text(MarkKey::Request, n, 0, 100));
        assert_ne!(r0, m(2, 0).text(MarkKey::Request, n, 0, 100));
        assert_ne!(
            r0,
            Marker::new(words(), 1, 0, true).text(MarkKey::Request, n, 0, 100)
        );
        // A group marker does not depend on the request.
        assert_eq!(
            a.text(MarkKey::Group(3), n, 0, 100),
            a.text(MarkKey::Group(3), n, 7, 100)
        );
        // A file line's marker is shared within a pass, not across passes.
        assert_eq!(
            a.text(MarkKey::Text(9), n, 1, 100),
            a.text(MarkKey::Text(9), n, 99, 100)
        );
        assert_ne!(
            a.text(MarkKey::Text(9), n, 1, 100),
            a.text(MarkKey::Text(9), n, 101, 100)
        );
    }

    #[test]
    fn bodies_are_split_and_rebuilt() {
        let text = "the\u{1} w4 w5";
        let json = serde_json::to_vec(&serde_json::json!({ "prompt": text })).unwrap();
        let slot = MarkSlot {
            words: 2,
            key: MarkKey::Request,
        };
        let p = Pieces::split(&json, vec![slot]).unwrap();
        let m = Marker::new(words(), 5, 0, false);
        let body = m.body(&p, 3, 10);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let prompt = v["prompt"].as_str().unwrap();
        assert_eq!(prompt.split_whitespace().count(), 5);
        assert!(prompt.starts_with("the "));
        assert!(prompt.ends_with(" w4 w5"));
        assert!(Pieces::split(&json, vec![slot, slot]).is_none());
    }
}
