//! A lean scanner for OpenAI-style SSE streams: splits `data:` lines out of arbitrary byte chunks
//! and pulls out of each event only what timing needs (token-bearing or not, usage, end, error),
//! without building a JSON tree. A buffer is kept only for a line split across chunks.

use memchr::memmem::Finder;

/// What one `data:` payload says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Event {
    /// `data: [DONE]`.
    pub done: bool,
    /// A choice carries non-empty `text`, `content`, `reasoning_content` or `reasoning`.
    pub has_content: bool,
    /// A choice carries non-empty answer text (`text` or `content`), not only reasoning.
    pub answer: bool,
    /// `usage` as `(prompt_tokens, completion_tokens)` when present and not null.
    pub usage: Option<(u64, u64)>,
    /// A choice has a non-null `finish_reason`.
    pub finished: bool,
    /// An error object instead of a completion chunk.
    pub error: bool,
    /// Not a JSON object.
    pub malformed: bool,
}

/// The longest SSE line kept across chunks. A server that never sends a newline would otherwise
/// grow the buffer without bound; past this the event is reported malformed and the rest of
/// the line skipped.
pub(crate) const MAX_LINE: usize = 1 << 20;

/// The payload passed with the malformed event that reports an over-long line.
pub(crate) const OVERSIZE: &[u8] = b"(an SSE line longer than 1 MiB)";

/// Splits a byte stream into `data:` payloads; one per stream slot, reused across requests.
#[derive(Debug)]
pub(crate) struct SseScanner {
    partial: Vec<u8>,
    /// Skipping the rest of an over-long line.
    skipping: bool,
    keys: Keys,
}

#[derive(Debug)]
struct Keys {
    usage: Finder<'static>,
    prompt_tokens: Finder<'static>,
    completion_tokens: Finder<'static>,
    text: Finder<'static>,
    content: Finder<'static>,
    reasoning: Finder<'static>,
    /// vLLM's newer name for `reasoning_content`.
    reasoning_short: Finder<'static>,
    choices: Finder<'static>,
    finish: Finder<'static>,
    error: Finder<'static>,
}

impl Default for SseScanner {
    fn default() -> Self {
        SseScanner {
            partial: Vec::with_capacity(1024),
            skipping: false,
            keys: Keys {
                usage: Finder::new(b"\"usage\":"),
                prompt_tokens: Finder::new(b"\"prompt_tokens\":"),
                completion_tokens: Finder::new(b"\"completion_tokens\":"),
                text: Finder::new(b"\"text\":"),
                content: Finder::new(b"\"content\":"),
                reasoning: Finder::new(b"\"reasoning_content\":"),
                reasoning_short: Finder::new(b"\"reasoning\":"),
                choices: Finder::new(b"\"choices\":"),
                finish: Finder::new(b"\"finish_reason\":"),
                error: Finder::new(b"\"error\":"),
            },
        }
    }
}

impl SseScanner {
    /// Forgets a partial line (between requests).
    pub fn reset(&mut self) {
        self.partial.clear();
        self.skipping = false;
    }

    fn oversize(&mut self, on_event: &mut impl FnMut(Event, &[u8]) -> bool) {
        self.partial.clear();
        self.skipping = true;
        let ev = Event {
            malformed: true,
            ..Event::default()
        };
        on_event(ev, OVERSIZE);
    }

    /// Feeds bytes as they arrived; calls `on_event` with each complete `data:` payload's
    /// [`Event`] and the raw payload. Stops early when `on_event` returns `false`.
    pub fn feed(&mut self, mut chunk: &[u8], mut on_event: impl FnMut(Event, &[u8]) -> bool) {
        if self.skipping {
            match memchr::memchr(b'\n', chunk) {
                None => return,
                Some(nl) => {
                    chunk = &chunk[nl + 1..];
                    self.skipping = false;
                }
            }
        }
        if !self.partial.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                None if self.partial.len() + chunk.len() > MAX_LINE => {
                    return self.oversize(&mut on_event);
                }
                None => {
                    self.partial.extend_from_slice(chunk);
                    return;
                }
                Some(nl) if self.partial.len() + nl > MAX_LINE => {
                    self.partial.clear();
                    chunk = &chunk[nl + 1..];
                    let ev = Event {
                        malformed: true,
                        ..Event::default()
                    };
                    if !on_event(ev, OVERSIZE) {
                        return;
                    }
                }
                Some(nl) => {
                    self.partial.extend_from_slice(&chunk[..nl]);
                    chunk = &chunk[nl + 1..];
                    let line = std::mem::take(&mut self.partial);
                    let go_on = self.line(&line, &mut on_event);
                    self.partial = line;
                    self.partial.clear();
                    if !go_on {
                        return;
                    }
                }
            }
        }
        while let Some(nl) = memchr::memchr(b'\n', chunk) {
            if !self.line(&chunk[..nl], &mut on_event) {
                return;
            }
            chunk = &chunk[nl + 1..];
        }
        if chunk.len() > MAX_LINE {
            return self.oversize(&mut on_event);
        }
        self.partial.extend_from_slice(chunk);
    }

    fn line(&self, line: &[u8], on_event: &mut impl FnMut(Event, &[u8]) -> bool) -> bool {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(payload) = line.strip_prefix(b"data:") else {
            return true; // blank separator, comment, `event:` or `id:` line
        };
        let payload = trim(payload);
        on_event(self.keys.analyze(payload), payload)
    }
}

/// One fuzz input: the first byte picks up to eight cut points, the rest is the stream. Fed
/// whole and fed in pieces it must give the same events, and the kept partial line never
/// passes [`MAX_LINE`]. Panics (the fuzzer's finding) when either fails.
#[cfg(feature = "fuzzing")]
pub fn fuzz_one(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let cuts = usize::from(n % 8).min(rest.len());
    let (cut_bytes, stream) = rest.split_at(cuts);
    let collect = |points: &[usize]| {
        let mut s = SseScanner::default();
        let mut out = Vec::new();
        let mut at = 0;
        for &p in points.iter().chain(std::iter::once(&stream.len())) {
            s.feed(&stream[at..p], |ev, raw| {
                out.push((ev, raw.to_vec()));
                true
            });
            assert!(s.partial.len() <= MAX_LINE, "partial line over the cap");
            at = p;
        }
        out
    };
    let mut points: Vec<usize> = cut_bytes
        .iter()
        .map(|&c| usize::from(c) * stream.len() / 255)
        .collect();
    points.sort_unstable();
    assert_eq!(
        collect(&[]),
        collect(&points),
        "events depend on chunk boundaries"
    );
}

impl Keys {
    fn analyze(&self, p: &[u8]) -> Event {
        let mut ev = Event::default();
        if p == b"[DONE]" {
            ev.done = true;
            return ev;
        }
        if p.first() != Some(&b'{') || p.last() != Some(&b'}') {
            ev.malformed = true;
            return ev;
        }
        if let Some(at) = self.usage.find(p) {
            let rest = &p[at + 8..];
            if skip_ws(rest).first() == Some(&b'{') {
                let prompt = self
                    .prompt_tokens
                    .find(rest)
                    .and_then(|i| number(&rest[i + 16..]));
                let completion = self
                    .completion_tokens
                    .find(rest)
                    .and_then(|i| number(&rest[i + 20..]));
                if let Some(c) = completion {
                    ev.usage = Some((prompt.unwrap_or(0), c));
                }
            }
        }
        match self.choices.find(p) {
            None => {
                ev.error = self.error.find(p).is_some()
                    || memchr::memmem::find(p, b"\"object\":\"error\"").is_some();
            }
            Some(at) => {
                let rest = &p[at..];
                ev.answer = non_empty_string_after(&self.content, rest)
                    || non_empty_string_after(&self.text, rest);
                ev.has_content = ev.answer
                    || non_empty_string_after(&self.reasoning, rest)
                    || non_empty_string_after(&self.reasoning_short, rest);
                ev.finished = self
                    .finish
                    .find(rest)
                    .is_some_and(|i| skip_ws(&rest[i + 16..]).first().is_some_and(|b| *b == b'"'));
            }
        }
        ev
    }
}

fn non_empty_string_after(key: &Finder<'_>, hay: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = key.find(&hay[from..]) {
        let after = skip_ws(&hay[from + i + key.needle().len()..]);
        if after.len() >= 2 && after[0] == b'"' && after[1] != b'"' {
            return true;
        }
        from += i + 1;
    }
    false
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
}

fn trim(s: &[u8]) -> &[u8] {
    let s = skip_ws(s);
    let n = s
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    &s[..s.len() - n]
}

fn number(s: &[u8]) -> Option<u64> {
    let s = skip_ws(s);
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    s[..digits].iter().try_fold(0u64, |acc, b| {
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<Event> {
        let mut s = SseScanner::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |e, _| {
                out.push(e);
                true
            });
        }
        out
    }

    #[test]
    fn splits_events_across_arbitrary_chunk_boundaries() {
        let stream = b"data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n\
            data: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}]}\r\n\r\n\
            data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"total_tokens\":9,\"completion_tokens\":2}}\n\n\
            data: [DONE]\n\n";
        let whole = events(&[stream]);
        for split in 1..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(events(&[a, b]), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole);
        assert_eq!(whole.len(), 4);
        assert!(whole[0].has_content && !whole[0].finished);
        assert!(whole[1].has_content && whole[1].finished);
        assert_eq!(whole[2].usage, Some((7, 2)));
        assert!(!whole[2].has_content);
        assert!(whole[3].done);
    }

    #[test]
    fn chat_deltas_role_chunks_and_spaces() {
        let e = events(&[b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
            data: {\"choices\": [{\"delta\": {\"content\": null}}], \"usage\": null}\n\n\
            data: {\"choices\": [{\"delta\": {\"content\": \"\\\"hi\"}}], \"usage\": {\"prompt_tokens\": 3, \"completion_tokens\": 1}}\n\n\
            data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"x\"}}]}\n\n"]);
        assert!(!e[0].has_content);
        assert!(!e[1].has_content && e[1].usage.is_none());
        assert!(e[2].has_content && e[2].answer);
        assert_eq!(e[2].usage, Some((3, 1)));
        assert!(e[3].has_content && !e[3].answer, "reasoning is no answer");
    }

    #[test]
    fn short_reasoning_field_counts_as_a_token_but_not_an_answer() {
        let e = events(&[
            b"data: {\"choices\":[{\"delta\":{\"reasoning\":\"hm\"}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"reasoning\":null,\"content\":\"ok\"}}]}\n\n",
        ]);
        assert!(e[0].has_content && !e[0].answer);
        assert!(e[1].has_content && e[1].answer);
    }

    #[test]
    fn errors_and_garbage_are_flagged() {
        let e = events(&[b": keep-alive\n\nevent: x\ndata: {\"error\":{\"message\":\"boom\"}}\n\ndata: {\"object\":\"error\",\"message\":\"m\"}\n\ndata: <html>\n\n"]);
        assert_eq!(e.len(), 3);
        assert!(e[0].error && e[1].error);
        assert!(e[2].malformed);
    }

    #[test]
    fn content_text_that_looks_like_keys_is_not_misread() {
        // `"usage":` inside a string is escaped, so it cannot match the key.
        let e = events(&[
            b"data: {\"choices\":[{\"text\":\"\\\"usage\\\": {\\\"completion_tokens\\\": 9}\"}]}\n",
        ]);
        assert_eq!(e[0].usage, None);
        assert!(e[0].has_content);
    }

    #[test]
    fn a_line_without_end_is_capped_and_reported_once() {
        let mut s = SseScanner::default();
        let mut seen = Vec::new();
        let junk = vec![b'x'; 64 * 1024];
        // 2 MiB without a newline, in 64 KiB chunks, then a good event.
        for _ in 0..32 {
            s.feed(&junk, |ev, raw| {
                seen.push((ev, raw.to_vec()));
                true
            });
            assert!(s.partial.len() <= MAX_LINE);
        }
        s.feed(b"still junk\ndata: [DONE]\n", |ev, raw| {
            seen.push((ev, raw.to_vec()));
            true
        });
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].0.malformed && seen[0].1 == OVERSIZE);
        assert!(seen[1].0.done);
        // One chunk longer than the cap with no newline: reported, not kept.
        let mut s = SseScanner::default();
        let mut n = 0;
        s.feed(&vec![b'y'; MAX_LINE + 1], |ev, _| {
            n += usize::from(ev.malformed);
            true
        });
        assert_eq!((n, s.partial.len()), (1, 0));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn all_events(stream: &[u8], cuts: &[usize]) -> Vec<(Event, Vec<u8>)> {
            let mut s = SseScanner::default();
            let mut out = Vec::new();
            let mut at = 0;
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
            points.sort_unstable();
            points.push(stream.len());
            for p in points {
                s.feed(&stream[at..p], |ev, raw| {
                    out.push((ev, raw.to_vec()));
                    true
                });
                at = p;
                assert!(s.partial.len() <= MAX_LINE);
            }
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            /// Any bytes, cut anywhere: no panic, and the events do not depend on the cuts.
            #[test]
            fn events_do_not_depend_on_chunk_boundaries(
                lines in prop::collection::vec(prop_oneof![
                    r#"data: \{"choices":\[\{"text":"[a-z ]{0,8}","finish_reason":(null|"stop")\}\](,"usage":\{"prompt_tokens":[0-9]{1,5},"completion_tokens":[0-9]{1,5}\})?\}"#,
                    "data: \\[DONE\\]",
                    r#"data: \{"error":\{"message":"[a-z]{0,10}"\}\}"#,
                    ": keep-alive",
                    "",
                    "[ -~]{0,40}",
                ], 0..30),
                junk in prop::collection::vec(any::<u8>(), 0..200),
                cuts in prop::collection::vec(any::<usize>(), 0..12),
            ) {
                let mut stream = lines.join("\n").into_bytes();
                stream.extend_from_slice(&junk);
                stream.push(b'\n');
                let whole = all_events(&stream, &[]);
                let cut = all_events(&stream, &cuts);
                prop_assert_eq!(whole, cut);
            }
        }
    }
}
