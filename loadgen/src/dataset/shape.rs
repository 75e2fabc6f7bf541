//! Random prompts of exact token lengths: words that each add exactly one token after a
//! fixed first word are chosen once per server, then each prompt is checked and trimmed.

use rand::Rng;
use rand::rngs::StdRng;

use crate::error::LoadgenError;
use crate::tokenize::Counter;

const FIRST: &str = "the";

const WORDS: &[&str] = &[
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "good",
    "new",
    "first",
    "last",
    "long",
    "great",
    "little",
    "own",
    "other",
    "old",
    "big",
    "high",
    "different",
    "small",
    "large",
    "next",
    "early",
    "young",
    "important",
    "few",
    "public",
    "bad",
    "same",
    "able",
    "run",
    "say",
    "make",
    "go",
    "know",
    "take",
    "see",
    "come",
    "think",
    "look",
    "want",
    "give",
    "use",
    "find",
    "tell",
    "ask",
    "seem",
    "feel",
    "try",
    "leave",
    "call",
    "red",
    "blue",
    "green",
    "light",
];

fn push_words(words: &[&'static str], out: &mut String, n: u32, rng: &mut StdRng) {
    out.reserve(n as usize * 7);
    for _ in 0..n {
        out.push(' ');
        out.push_str(words[rng.random_range(0..words.len())]);
    }
}

/// The text [`Shaper::prompt`] starts from, before its count is checked: the first word and
/// `len - base` random one-token words (what a lazy pool sends, `dataset::pool`).
pub(crate) fn unchecked_prompt(
    words: &[&'static str],
    base: u32,
    len: u32,
    rng: &mut StdRng,
) -> String {
    let mut text = String::from(FIRST);
    push_words(words, &mut text, len.saturating_sub(base), rng);
    text
}

/// Builds prompts of exact lengths when a counter is available, else of that many words.
#[derive(Debug)]
pub(crate) struct Shaper {
    counter: Option<Counter>,
    /// Words that add exactly one token each.
    words: Vec<&'static str>,
    /// Tokens of `FIRST` alone, special tokens included.
    base: u32,
    /// Prompts whose length could not be made exact.
    pub inexact: u32,
}

impl Shaper {
    pub async fn new(mut counter: Option<Counter>) -> Result<Shaper, LoadgenError> {
        let (words, base) = match counter.as_mut() {
            None => (WORDS.to_vec(), 1),
            Some(c) => {
                let base = c.count(FIRST).await?;
                let mut words = Vec::new();
                for w in WORDS {
                    if c.count(&format!("{FIRST} {w}")).await? == base + 1 {
                        words.push(*w);
                    }
                }
                if words.len() < 8 {
                    return Err(LoadgenError::Shaping(format!(
                        "only {} of {} common words are one token each for this tokenizer",
                        words.len(),
                        WORDS.len()
                    )));
                }
                (words, base)
            }
        };
        Ok(Shaper {
            counter,
            words,
            base,
            inexact: 0,
        })
    }

    /// The words that add exactly one token each (what request markers are spelled with).
    pub fn words(&self) -> Vec<&'static str> {
        self.words.clone()
    }

    /// `n` one-token words, each with a leading space: stands in for a marker when counting.
    pub fn filler(&self, n: u8) -> String {
        format!(" {}", self.words[0]).repeat(usize::from(n))
    }

    fn push_words(&self, out: &mut String, n: u32, rng: &mut StdRng) {
        push_words(&self.words, out, n, rng);
    }

    /// Tokens of the first word alone (special tokens included): a generated prompt of `len`
    /// tokens is it and `len - base` one-token words.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// Random words forming a prefix of `len` tokens (a whole prompt when nothing follows).
    pub async fn prompt(&mut self, len: u32, rng: &mut StdRng) -> Result<String, LoadgenError> {
        let text = unchecked_prompt(&self.words, self.base, len, rng);
        self.fit(text, len, rng).await
    }

    /// `prefix` followed by random words, `total` tokens in all.
    pub async fn extend(
        &mut self,
        prefix: &str,
        prefix_len: u32,
        total: u32,
        rng: &mut StdRng,
    ) -> Result<String, LoadgenError> {
        let mut text = prefix.to_string();
        self.push_words(&mut text, total.saturating_sub(prefix_len), rng);
        self.fit(text, total, rng).await
    }

    /// Adds or drops trailing words until the count is exact (merges across words are rare, so
    /// this almost never loops).
    async fn fit(
        &mut self,
        mut text: String,
        target: u32,
        rng: &mut StdRng,
    ) -> Result<String, LoadgenError> {
        let Some(counter) = self.counter.as_mut() else {
            return Ok(text);
        };
        for _ in 0..6 {
            let n = counter.count(&text).await?;
            if n == target {
                return Ok(text);
            }
            if n < target {
                for _ in 0..target - n {
                    text.push(' ');
                    text.push_str(self.words[rng.random_range(0..self.words.len())]);
                }
            } else {
                for _ in 0..n - target {
                    match text.rfind(' ') {
                        Some(i) if i > 0 => text.truncate(i),
                        _ => break,
                    }
                }
            }
        }
        self.inexact += 1;
        Ok(text)
    }

    /// Token count of arbitrary text (ShareGPT replies); words when no counter.
    pub async fn count(&mut self, text: &str) -> Result<u32, LoadgenError> {
        match self.counter.as_mut() {
            Some(c) => c.count(text).await,
            None => Ok(text.split_whitespace().count() as u32),
        }
    }
}
