//! A level's memory and time budget, computed from the whole request: every field of a spec
//! can be in range while their product is not. `input_len = 1048576, requests = 1000000,
//! warmup = 100000` once passed every per-field bound and made the agent build prompts up front
//! until it aborted (0.38 to 3.96 GB in 15 s), and the controller then killed the next host's
//! agent with the same trial. So the controller's spec validation (including `--dry-run`) and
//! the agent, before it builds a prompt, both refuse a level whose prompt pool would take more
//! than [`MAX_PROMPT_BYTES`] or whose work would take more than [`MAX_LEVEL_TOKENS`], with a
//! message naming the budget and the fields that multiply into it.
//!
//! The load generator builds `requests + warmup` prompts for a level bounded by requests, and
//! [`DURATION_POOL`] + `warmup` for one bounded by time, each up to the longest prompt the
//! dataset allows. Datasets read from files (ShareGPT, JSONL, traces) are bounded by their file.

/// Bytes a prompt token is counted at in the agent's memory: its text (words average under 6
/// bytes with their space), the request body serialised from it, and the copy kept while the
/// pool is built. Counted high on purpose: the budget must hold on the worst tokenizer.
pub const PROMPT_BYTES_PER_TOKEN: u64 = 16;
/// The most memory one level's prompts may take on the agent, as counted above (4 GiB: 268
/// million prompt tokens, e.g. 2,000 prompts of 128 Ki tokens).
pub const MAX_PROMPT_BYTES: u64 = 4 << 30;
/// Prompts the load generator builds for a level bounded by time (it cycles through them).
pub const DURATION_POOL: u64 = 1_000;
/// Tokens (prompt and output) one level bounded by requests may ask the engine to process:
/// seven days (`limits::MAX_LEVEL_S`) at 1,000,000 tokens per second, beyond any one host.
pub const MAX_LEVEL_TOKENS: u64 = 604_800_000_000;

/// What one level asks of the agent, with the names the caller gives its fields.
#[derive(Debug, Clone, Copy)]
pub struct LevelDemand<'a> {
    /// Measured requests; `None` when the level is bounded by time.
    pub requests: Option<u64>,
    pub warmup: u64,
    /// Tokens of the longest prompt the dataset builds.
    pub input_tokens: u64,
    /// Tokens of the longest output asked for.
    pub output_tokens: u64,
    /// Field names for the message: requests, warmup, input length(s), output length.
    pub names: [&'a str; 4],
}

/// Why a level is over budget; its text names the budget and the fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    #[error(
        "the level's prompts need about {need} of agent memory (({pool}) prompts x {input} \
         {input_tokens} tokens x {PROMPT_BYTES_PER_TOKEN} bytes), over the memory budget of \
         {budget} per level; lower {fields}",
        need = bytes(*need),
        budget = bytes(MAX_PROMPT_BYTES)
    )]
    Memory {
        need: u64,
        pool: String,
        input: String,
        input_tokens: u64,
        fields: String,
    },
    #[error(
        "the level asks the engine for {need} tokens (({requests}) requests x ({tokens}) \
         tokens), over the time budget of {MAX_LEVEL_TOKENS} tokens per level (7 days at \
         1,000,000 tokens per second); lower {fields}"
    )]
    Time {
        need: u64,
        requests: String,
        tokens: String,
        fields: String,
    },
}

/// Checks one level against the memory and time budgets.
pub fn check_level(d: &LevelDemand<'_>) -> Result<(), OverBudget> {
    let [req_name, warm_name, in_name, out_name] = d.names;
    let (pool, pool_text) = match d.requests {
        Some(n) => (
            n.saturating_add(d.warmup),
            format!("{req_name} {n} + {warm_name} {}", d.warmup),
        ),
        None => (
            DURATION_POOL.saturating_add(d.warmup),
            format!(
                "{DURATION_POOL} for a level bounded by time + {warm_name} {}",
                d.warmup
            ),
        ),
    };
    let need = pool
        .saturating_mul(d.input_tokens)
        .saturating_mul(PROMPT_BYTES_PER_TOKEN);
    if need > MAX_PROMPT_BYTES {
        let fields = match d.requests {
            Some(_) => format!("{req_name}, {warm_name} or {in_name}"),
            None => format!("{warm_name} or {in_name}"),
        };
        return Err(OverBudget::Memory {
            need,
            pool: pool_text,
            input: in_name.to_string(),
            input_tokens: d.input_tokens,
            fields,
        });
    }
    if let Some(n) = d.requests {
        let tokens = d.input_tokens.saturating_add(d.output_tokens);
        let need = pool.saturating_mul(tokens);
        if need > MAX_LEVEL_TOKENS {
            return Err(OverBudget::Time {
                need,
                requests: format!("{req_name} {n} + {warm_name} {}", d.warmup),
                tokens: format!(
                    "{in_name} {} + {out_name} {}",
                    d.input_tokens, d.output_tokens
                ),
                fields: format!("{req_name}, {warm_name}, {in_name} or {out_name}"),
            });
        }
    }
    Ok(())
}

/// `16.0 TiB`, `4.0 GiB`, `512 B`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 4] = ["requests", "warmup", "input_len", "output_len"];

    fn demand(requests: Option<u64>, warmup: u64, input: u64, output: u64) -> LevelDemand<'static> {
        LevelDemand {
            requests,
            warmup,
            input_tokens: input,
            output_tokens: output,
            names: NAMES,
        }
    }

    #[test]
    fn the_in_range_memory_bomb_is_over_the_memory_budget() {
        let e = check_level(&demand(Some(1_000_000), 100_000, 1_048_576, 256)).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, OverBudget::Memory { need, .. } if need == 1_100_000 * 1_048_576 * 16));
        for part in [
            "16.8 TiB",
            "memory budget of 4.0 GiB",
            "requests 1000000 + warmup 100000",
            "input_len 1048576",
            "lower requests, warmup or input_len",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
    }

    #[test]
    fn real_experiments_fit_and_the_edges_hold() {
        // 10,000 requests of 8 Ki tokens; 2,000 of 128 Ki; a long run bounded by time.
        assert!(check_level(&demand(Some(10_000), 1_000, 8_192, 1_024)).is_ok());
        assert!(check_level(&demand(Some(2_000), 0, 131_072, 1_024)).is_ok());
        assert!(check_level(&demand(None, 100, 131_072, 1_048_576)).is_ok());
        // Exactly the memory budget fits; one token more per prompt does not.
        let tokens = MAX_PROMPT_BYTES / PROMPT_BYTES_PER_TOKEN / 1_024;
        assert!(check_level(&demand(Some(1_000), 24, tokens, 1)).is_ok());
        assert!(check_level(&demand(Some(1_000), 24, tokens + 1, 1)).is_err());
        // Time bounded: the memory of DURATION_POOL + warmup prompts counts.
        let e = check_level(&demand(None, 100_000, 4_096, 1)).unwrap_err();
        assert!(
            e.to_string()
                .contains("1000 for a level bounded by time + warmup 100000"),
            "{e}"
        );
    }

    #[test]
    fn short_prompts_with_huge_outputs_are_over_the_time_budget() {
        let e = check_level(&demand(Some(1_000_000), 0, 1, 1_048_576)).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, OverBudget::Time { .. }), "{text}");
        assert!(
            text.contains("time budget of 604800000000 tokens")
                && text.contains("output_len 1048576")
                && text.contains("lower requests, warmup, input_len or output_len"),
            "{text}"
        );
    }
}
