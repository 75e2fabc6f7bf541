//! A level's prompt pool: built up front (every body serialised once), or, for a random
//! dataset whose pool would be large, made one prompt at a time as requests go out.
//!
//! A spec may ask for 2,000 prompts of 128 Ki tokens (4 GiB as the budget counts them,
//! `fleetbench_proto::budget`): built up front, that memory is taken before the first request
//! and held for the level. Above [`LAZY_ABOVE`] the pool keeps only what makes a prompt (the
//! seed, the lengths, the word list) and builds prompt `i` when request `i` goes out, from the
//! seed and `i` alone, exactly as the eager pool builds it: each random prompt draws from an
//! RNG of its own index ([`index_rng`]) in both. The one difference: an eager pool shaped with
//! a tokenizer checks each prompt's count and trims a rare merge of two words; a lazy one sends
//! the words as drawn (each one token after the first word, chosen with that tokenizer), so
//! the same seed gives the same text unless the eager pool had to trim. Building a large prompt
//! when its request goes out counts as that request's client-side queueing (a 128 Ki-token body
//! takes about a millisecond, against seconds of prefill).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{PromptSpec, Shaper, body, build, mark_start};
use crate::config::{Api, DatasetSpec};
use crate::error::LoadgenError;

/// Bytes a prompt token is counted at (as `fleetbench_proto::budget` counts it).
pub(crate) const PROMPT_BYTES_PER_TOKEN: u64 = 16;
/// A random pool estimated above this many bytes is made lazily.
pub(crate) const LAZY_ABOVE: u64 = 64 << 20;

/// The RNG prompt `index` of a random dataset draws from (its lengths, then its words).
pub(crate) fn index_rng(seed: u64, index: u64) -> StdRng {
    // splitmix64 of the index, so neighbouring indices share no state.
    let mut z = index.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    StdRng::seed_from_u64(seed ^ z ^ (z >> 31))
}

/// What makes prompt `i` of a random dataset, without the prompts.
#[derive(Debug)]
pub(crate) struct LazyRandom {
    words: Vec<&'static str>,
    base: u32,
    seed: u64,
    input: (u32, u32),
    output: (u32, u32),
    mark: u8,
    api: Api,
    model: String,
    ignore_eos: bool,
}

impl LazyRandom {
    /// Prompt `index` of the dataset (the same as the eager pool's prompt `index`).
    fn prompt(&self, index: u64) -> super::Prompt {
        let mut rng = index_rng(self.seed, index);
        let len = rng.random_range(self.input.0..=self.input.1);
        let olen = rng.random_range(self.output.0..=self.output.1);
        let text = super::shape::unchecked_prompt(&self.words, self.base, len, &mut rng);
        let (text, marks) = mark_start(text, self.mark);
        let spec = PromptSpec {
            text,
            input_len: Some(len),
            output_len: olen,
            arrival: None,
            marks,
            reusable: Some(0),
        };
        body(self.api, &self.model, &spec, self.ignore_eos)
    }
}

/// The prompts one part of a level cycles through (measured requests, or the warm-up).
#[derive(Debug)]
pub(crate) enum Pool {
    /// Every body built once.
    Eager(Vec<super::Prompt>),
    /// Prompts `first..first + len` of the dataset, each built when asked for.
    Lazy {
        maker: Arc<LazyRandom>,
        first: u64,
        len: u64,
    },
}

impl Pool {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Pool::Eager(v) => v.len() as u64,
            Pool::Lazy { len, .. } => *len,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Prompt `i` (below [`Pool::len`]).
    pub(crate) fn get(&self, i: u64) -> Cow<'_, super::Prompt> {
        match self {
            Pool::Eager(v) => Cow::Borrowed(&v[i as usize]),
            Pool::Lazy { maker, first, .. } => Cow::Owned(maker.prompt(first + i)),
        }
    }

    /// Prompt tokens of prompt `i` the workload designs to be served from a cache (0 where it
    /// states none; a lazy pool is random, fresh by design).
    pub(crate) fn reusable(&self, i: u64) -> u32 {
        match self {
            Pool::Eager(v) => v[i as usize].reusable.unwrap_or(0),
            Pool::Lazy { .. } => 0,
        }
    }

    /// Whether every prompt states the reuse it designs (a trace with its own texts does not).
    pub(crate) fn states_reuse(&self) -> bool {
        match self {
            Pool::Eager(v) => v.iter().all(|p| p.reusable.is_some()),
            Pool::Lazy { .. } => true,
        }
    }

    /// The arrival offsets of a trace's prompts (a lazy pool has none).
    pub(crate) fn arrivals(&self) -> Vec<Duration> {
        match self {
            Pool::Eager(v) => v.iter().filter_map(|p| p.arrival).collect(),
            Pool::Lazy { .. } => Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_lazy(&self) -> bool {
        matches!(self, Pool::Lazy { .. })
    }

    /// Bytes the pool holds now (bodies and their pieces; a lazy pool: its word list).
    #[cfg(test)]
    pub(crate) fn resident_bytes(&self) -> u64 {
        match self {
            Pool::Eager(v) => v
                .iter()
                .map(|p| {
                    p.body.len()
                        + p.pieces
                            .as_ref()
                            .map_or(0, |x| x.pieces.iter().map(|b| b.len()).sum())
                })
                .sum::<usize>() as u64,
            Pool::Lazy { maker, .. } => {
                (std::mem::size_of::<LazyRandom>() + maker.words.len() * 16 + maker.model.len())
                    as u64
            }
        }
    }
}

/// What a level's pools are built from.
pub(crate) struct PoolSpec<'a> {
    pub dataset: &'a DatasetSpec,
    /// Measured prompts (before they repeat).
    pub measured: usize,
    pub warmup: usize,
    pub seed: u64,
    /// Words of each request marker (0: none).
    pub mark: u8,
    pub api: Api,
    pub model: &'a str,
    pub ignore_eos: bool,
    /// Estimated bytes above which a random pool is made lazily ([`LAZY_ABOVE`]).
    pub lazy_above: u64,
}

/// The measured and warm-up pools, and whether prompts carry markers. The warm-up prompts are
/// the last `warmup` of `measured + warmup` (a trace's: its first ones, which it also measures).
pub(crate) async fn pools(
    s: &PoolSpec<'_>,
    shaper: &mut Shaper,
) -> Result<(Pool, Pool, bool), LoadgenError> {
    let count = s.measured.saturating_add(s.warmup);
    if let DatasetSpec::Random {
        input_len,
        output_len,
        range_ratio,
    } = s.dataset
    {
        let estimate = (count as u64)
            .saturating_mul(u64::from(*input_len))
            .saturating_mul(PROMPT_BYTES_PER_TOKEN);
        if estimate > s.lazy_above && count > 0 {
            let low = ((*input_len as f64 * range_ratio).floor() as u32).clamp(1, *input_len);
            let out_low = ((*output_len as f64 * range_ratio).floor() as u32).clamp(1, *output_len);
            let maker = Arc::new(LazyRandom {
                words: shaper.words(),
                base: shaper.base(),
                seed: s.seed,
                input: (low, *input_len),
                output: (out_low, *output_len),
                mark: s.mark,
                api: s.api,
                model: s.model.to_string(),
                ignore_eos: s.ignore_eos,
            });
            tracing::info!(
                prompts = count,
                estimate_mib = estimate >> 20,
                "prompt pool made per request (lazily): it would take more than {} MiB up front",
                s.lazy_above >> 20
            );
            let measured = (count - s.warmup.min(count)).max(1) as u64;
            let count = count as u64;
            let marked = s.mark != 0;
            return Ok((
                Pool::Lazy {
                    maker: maker.clone(),
                    first: 0,
                    len: measured,
                },
                Pool::Lazy {
                    maker,
                    first: measured,
                    len: count - measured,
                },
                marked,
            ));
        }
    }
    let specs = build(s.dataset, count, s.seed, shaper, s.mark).await?;
    let marked = specs.iter().any(|p| !p.marks.is_empty());
    let mut prompts: Vec<super::Prompt> = specs
        .iter()
        .map(|p| body(s.api, s.model, p, s.ignore_eos))
        .collect();
    let warmup = if matches!(s.dataset, DatasetSpec::Trace { .. }) {
        prompts.iter().take(s.warmup).cloned().collect()
    } else {
        prompts.split_off(
            prompts
                .len()
                .saturating_sub(s.warmup)
                .max(1.min(prompts.len())),
        )
    };
    Ok((Pool::Eager(prompts), Pool::Eager(warmup), marked))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(d: &DatasetSpec, measured: usize, warmup: usize, lazy_above: u64) -> PoolSpec<'_> {
        PoolSpec {
            dataset: d,
            measured,
            warmup,
            seed: 42,
            mark: 5,
            api: Api::Completions,
            model: "m",
            ignore_eos: true,
            lazy_above,
        }
    }

    fn same(a: &super::super::Prompt, b: &super::super::Prompt) -> bool {
        let pieces = |p: &super::super::Prompt| {
            p.pieces
                .as_ref()
                .map(|x| (x.pieces.clone(), x.slots.clone()))
        };
        a.body == b.body
            && pieces(a) == pieces(b)
            && a.input_len == b.input_len
            && a.output_len == b.output_len
    }

    /// The same seed gives the same prompts whether the pool is built up front or per request,
    /// measured and warm-up alike.
    #[tokio::test]
    async fn lazy_and_eager_pools_yield_identical_prompts() {
        let d = DatasetSpec::Random {
            input_len: 60,
            output_len: 20,
            range_ratio: 0.5,
        };
        let mut shaper = Shaper::new(None).await.unwrap();
        let (em, ew, emark) = pools(&spec(&d, 40, 7, u64::MAX), &mut shaper)
            .await
            .unwrap();
        let (lm, lw, lmark) = pools(&spec(&d, 40, 7, 0), &mut shaper).await.unwrap();
        assert!(!em.is_lazy() && lm.is_lazy() && lw.is_lazy());
        assert_eq!(emark, lmark);
        for (e, l) in [(&em, &lm), (&ew, &lw)] {
            assert_eq!(e.len(), l.len());
            for i in 0..e.len() {
                assert!(same(&e.get(i), &l.get(i)), "prompt {i} differs");
                // Asked twice, a lazy prompt is the same.
                assert!(same(&l.get(i), &l.get(i)));
            }
        }
        assert_eq!((em.len(), ew.len()), (40, 7));
        // Lengths vary (the range ratio) and another seed gives other prompts.
        let lens: std::collections::BTreeSet<_> = (0..40).map(|i| lm.get(i).input_len).collect();
        assert!(lens.len() > 1, "{lens:?}");
        let other = PoolSpec {
            seed: 43,
            ..spec(&d, 40, 7, 0)
        };
        let (om, _, _) = pools(&other, &mut shaper).await.unwrap();
        assert_ne!(om.get(0).body, lm.get(0).body);
    }

    /// A pool of 2,000 prompts of 128 Ki tokens (the most the budget allows, 4 GiB as counted)
    /// is made per request: building it allocates next to nothing, and a prompt asked for has
    /// its full length. A small pool is still built up front.
    #[tokio::test]
    async fn a_large_random_pool_is_lazy_and_holds_no_prompts() {
        let d = DatasetSpec::Random {
            input_len: 131_072,
            output_len: 16,
            range_ratio: 1.0,
        };
        let mut shaper = Shaper::new(None).await.unwrap();
        let (m, w, _) = pools(&spec(&d, 2_000, 100, LAZY_ABOVE), &mut shaper)
            .await
            .unwrap();
        assert!(m.is_lazy() && w.is_lazy());
        assert_eq!((m.len(), w.len()), (2_000, 100));
        assert!(
            m.resident_bytes() < 64 << 10,
            "a lazy pool holds {} bytes",
            m.resident_bytes()
        );
        let last = w.get(99);
        assert_eq!(last.input_len, Some(131_072));
        assert!(last.body.len() > 131_072 * 2, "{}", last.body.len());

        let small = DatasetSpec::Random {
            input_len: 1_024,
            output_len: 16,
            range_ratio: 1.0,
        };
        let (m, _, _) = pools(&spec(&small, 1_000, 10, LAZY_ABOVE), &mut shaper)
            .await
            .unwrap();
        assert!(!m.is_lazy(), "16 MiB as counted is built up front");
        assert!(m.resident_bytes() > 1_000 * 1_024 * 2);
    }
}
