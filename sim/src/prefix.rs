//! A prefix cache in the way SGLang's radix cache (and vLLM's block hashing) behaves for a
//! client: a prompt's leading tokens that an earlier prompt already had are served from the
//! cache, not prefilled. Tokens are the simulator's words; prefixes are kept in blocks of
//! [`BLOCK`] words, each identified by the hash of everything up to its end, so two prompts
//! share exactly their common leading whole blocks. `--disable-radix-cache` turns it off;
//! `POST /flush_cache` empties it.

use std::collections::HashSet;

/// Words per cached block.
pub const BLOCK: usize = 16;

/// The cached prefixes, bounded by the KV pool (whole blocks).
#[derive(Debug)]
pub struct PrefixCache {
    blocks: HashSet<u64>,
    capacity: usize,
}

fn fnv(h: u64, bytes: &[u8]) -> u64 {
    let mut h = h;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl PrefixCache {
    /// A cache holding at most `capacity_tokens` tokens' worth of blocks.
    pub fn new(capacity_tokens: u64) -> Self {
        PrefixCache {
            blocks: HashSet::new(),
            capacity: (capacity_tokens as usize / BLOCK).max(1),
        }
    }

    /// Tokens of `text` served from the cache; the prompt's blocks are cached afterwards.
    /// When the cache is full it is emptied first (a crude eviction: what a sweep needs is
    /// that nothing is served that was not sent before).
    pub fn lookup_insert(&mut self, text: &str) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut hashes = Vec::new();
        for (i, w) in text.split_whitespace().enumerate() {
            h = fnv(h, w.as_bytes());
            h = fnv(h, b" ");
            if (i + 1) % BLOCK == 0 {
                hashes.push(h);
            }
        }
        let hit = hashes
            .iter()
            .take_while(|b| self.blocks.contains(*b))
            .count();
        if self.blocks.len() + hashes.len() > self.capacity {
            self.blocks.clear();
        }
        self.blocks.extend(hashes);
        (hit * BLOCK) as u32
    }

    /// Empties the cache (`POST /flush_cache`).
    pub fn flush(&mut self) {
        self.blocks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(prefix: &str, n: usize, tail: &str) -> String {
        let mut s = String::new();
        for i in 0..n {
            s.push_str(&format!("{prefix}{i} "));
        }
        s + tail
    }

    #[test]
    fn common_leading_blocks_are_served_and_a_flush_forgets_them() {
        let mut c = PrefixCache::new(1 << 20);
        let a = words("p", 40, "x y z");
        assert_eq!(c.lookup_insert(&a), 0, "a first prompt is prefilled whole");
        assert_eq!(c.lookup_insert(&a), 32, "its two whole blocks come back");
        let b = words("p", 40, "other end");
        assert_eq!(
            c.lookup_insert(&b),
            32,
            "a shared 40-word prefix: two blocks"
        );
        let d = words("q", 40, "");
        assert_eq!(c.lookup_insert(&d), 0, "a different start shares nothing");
        c.flush();
        assert_eq!(c.lookup_insert(&a), 0);
    }
}
