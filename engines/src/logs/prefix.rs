//! Strips logger prefixes: SGLang `[2026-03-11 13:53:21 DP0 TP0 EP0] `, vLLM
//! `(EngineCore_DP0 pid=1234) INFO 03-11 13:53:21 [core.py:413] `, llama.cpp
//! `0.00.256.855 I srv    load_model: ` (time and level only; the function name stays, parsers
//! match on it), uvicorn `INFO:     `, and ANSI colour codes.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// A log line without its logger prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripped<'a> {
    /// The message.
    pub message: Cow<'a, str>,
    /// Parallel ranks named in the prefix (`TP1`, `DP0`, `Worker_TP1`): `(kind, index)`.
    pub ranks: Vec<(String, u32)>,
}

impl Stripped<'_> {
    /// Whether the line came from rank 0 of every parallel dimension it names (or names none).
    /// Per-rank facts (weight load, KV pool) are read from rank 0 only, so TP=8 does not report
    /// them eight times.
    pub fn is_rank_zero(&self) -> bool {
        self.ranks.iter().all(|(_, i)| *i == 0)
    }
}

static ANSI: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").expect("valid regex"));

static SGLANG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?((?: [A-Za-z]+\d+)*)\] ?")
        .expect("valid regex")
});

static VLLM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:\(([\w.-]+)(?: pid=\d+)?\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? (?:\[[^\]]*\] |[\w./-]+:\d+\] )",
    )
    .expect("valid regex")
});

static VLLM_PROC_ONLY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\(([\w.-]+) pid=\d+\) ").expect("valid regex"));

static LLAMA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d+\.\d{2}\.\d{3}\.\d{3} [DIWE] (?:(?:srv|cmn|slot|spec|res|que|mtmd) +)?")
        .expect("valid regex")
});

static UVICORN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+").expect("valid regex")
});

static RANK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[ _])(TP|DP|PP|EP|CP|ATTN_CP)(\d+)").expect("valid regex"));

/// Strips colour codes and the logger prefix of any of the known engines.
pub fn strip_prefix(line: &str) -> Stripped<'_> {
    let line = line.trim_end_matches(['\r', '\n']);
    let clean: Cow<'_, str> = if line.contains('\x1b') {
        ANSI.replace_all(line, "")
    } else {
        Cow::Borrowed(line)
    };
    let (skip, rank_text) = prefix_span(&clean);
    let ranks = rank_text
        .map(|t| {
            RANK.captures_iter(&t)
                .filter_map(|c| Some((c[1].to_string(), c[2].parse().ok()?)))
                .collect()
        })
        .unwrap_or_default();
    let message = match clean {
        Cow::Borrowed(s) => Cow::Borrowed(&s[skip..]),
        Cow::Owned(s) => Cow::Owned(s[skip..].to_string()),
    };
    Stripped { message, ranks }
}

/// Length of the prefix and the text naming ranks, if any. Uvicorn's `INFO:     ` may follow
/// another prefix (SGLang and vLLM route uvicorn through their own loggers).
fn prefix_span(line: &str) -> (usize, Option<String>) {
    let (skip, ranks) = outer_prefix(line);
    match UVICORN.find(&line[skip..]) {
        Some(m) => (skip + m.end(), ranks),
        None => (skip, ranks),
    }
}

fn outer_prefix(line: &str) -> (usize, Option<String>) {
    if let Some(c) = SGLANG.captures(line) {
        return (c[0].len(), Some(c[1].to_string()));
    }
    if let Some(c) = VLLM.captures(line) {
        return (c[0].len(), c.get(1).map(|m| m.as_str().to_string()));
    }
    if let Some(c) = VLLM_PROC_ONLY.captures(line) {
        // A traceback line printed by a vLLM child without the logger: only the process tag.
        return (c[0].len(), Some(c[1].to_string()));
    }
    if let Some(m) = LLAMA.find(line) {
        return (m.end(), None);
    }
    (0, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_prefix_and_ranks() {
        let s = strip_prefix("[2026-03-11 13:53:21 DP0 TP3 EP3] Load weight end. elapsed=1 s");
        assert_eq!(s.message, "Load weight end. elapsed=1 s");
        assert_eq!(
            s.ranks,
            vec![
                ("DP".to_string(), 0),
                ("TP".to_string(), 3),
                ("EP".to_string(), 3)
            ]
        );
        assert!(!s.is_rank_zero());
        let s = strip_prefix("[2026-03-11 13:53:21.123] server_args={}");
        assert_eq!(s.message, "server_args={}");
        assert!(s.is_rank_zero());
    }

    #[test]
    fn vllm_prefix_with_process_colour_and_rank() {
        let s = strip_prefix(
            "\x1b[1;36m(Worker_TP1 pid=4242)\x1b[0;0m INFO 11-29 14:50:01 [gpu_model_runner.py:5089] Model loading took 15.3 GiB memory and 12.5 seconds",
        );
        assert_eq!(
            s.message,
            "Model loading took 15.3 GiB memory and 12.5 seconds"
        );
        assert_eq!(s.ranks, vec![("TP".to_string(), 1)]);
        let s = strip_prefix("INFO 03-11 13:53:21 llm_engine.py:123] old format");
        assert_eq!(s.message, "old format");
    }

    #[test]
    fn llamacpp_and_uvicorn_prefixes() {
        let s = strip_prefix("0.00.256.855 I srv    load_model: initializing, n_slots = 2");
        assert_eq!(s.message, "load_model: initializing, n_slots = 2");
        let s = strip_prefix("0.00.167.916 I llama_context: n_seq_max             = 4");
        assert_eq!(s.message, "llama_context: n_seq_max             = 4");
        let s = strip_prefix("INFO:     Uvicorn running on http://127.0.0.1:30000");
        assert_eq!(s.message, "Uvicorn running on http://127.0.0.1:30000");
        let s = strip_prefix("(APIServer pid=2871) INFO:     Application startup complete.");
        assert_eq!(s.message, "Application startup complete.");
        let s = strip_prefix("[2026-11-29 13:53:57] INFO:     Started server process [412337]");
        assert_eq!(s.message, "Started server process [412337]");
        let s = strip_prefix("no prefix at all");
        assert_eq!(s.message, "no prefix at all");
    }
}
