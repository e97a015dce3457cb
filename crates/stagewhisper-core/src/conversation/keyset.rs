//! An exact set of 128-bit dedupe keys in about 16 bytes a key: a sorted run of the older keys
//! and a small hash set of the newest, merged into the run when the set grows past an eighth
//! of it (so a merge's cost, one pass over the run, is spread over that many inserts).
//!
//! A session's `message_id`s enter as the first 128 bits of their SHA-256, content keys as the
//! 128 bits they already spell ([`super::keys`]): the index holds no strings, and two different
//! keys share a digest with a probability of about one in 2^128 per pair, as content keys
//! always did.

use super::keys::FastHash;
use std::collections::HashSet;

/// Newest keys held in the hash set before they are merged into the sorted run (at least).
const RECENT_MIN: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct KeySet {
    /// Sorted, no repeats.
    sorted: Vec<u128>,
    /// Keys not in `sorted`.
    recent: HashSet<u128, FastHash>,
}

impl KeySet {
    /// A set of the given keys (repeats allowed), built in place: what a load of a session's
    /// stored keys makes, without the merges of key-by-key inserts.
    pub fn from_keys(mut keys: Vec<u128>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        keys.shrink_to_fit();
        KeySet {
            sorted: keys,
            recent: HashSet::default(),
        }
    }

    pub fn contains(&self, key: u128) -> bool {
        self.recent.contains(&key) || self.sorted.binary_search(&key).is_ok()
    }

    pub fn insert(&mut self, key: u128) {
        if self.contains(key) {
            return;
        }
        self.recent.insert(key);
        if self.recent.len() > RECENT_MIN.max(self.sorted.len() / 8) {
            self.compact();
        }
    }

    /// Merges the newest keys into the sorted run (which then holds every key).
    pub fn compact(&mut self) {
        if self.recent.is_empty() {
            return;
        }
        let mut recent: Vec<u128> = self.recent.drain().collect();
        recent.sort_unstable();
        let mut merged = Vec::with_capacity(self.sorted.len() + recent.len());
        let (mut a, mut b) = (self.sorted.iter().peekable(), recent.iter().peekable());
        while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
            if x < y {
                merged.push(x);
                a.next();
            } else {
                merged.push(y);
                b.next();
            }
        }
        merged.extend(a);
        merged.extend(b);
        self.sorted = merged;
        self.recent = HashSet::default();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }

    /// About what the set holds in memory, in bytes.
    pub fn bytes(&self) -> usize {
        self.sorted.capacity() * 16 + self.recent.capacity() * 17
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::id_digest;
    use super::*;

    #[test]
    fn holds_every_key_exactly_in_about_sixteen_bytes_each() {
        let mut s = KeySet::default();
        let n = 100_000u32;
        for i in 0..n {
            s.insert(id_digest(&format!("m{i}")));
            // A repeat is not a second key.
            s.insert(id_digest(&format!("m{}", i / 2)));
        }
        assert_eq!(s.len(), n as usize);
        for i in 0..n {
            assert!(s.contains(id_digest(&format!("m{i}"))), "m{i}");
            assert!(!s.contains(id_digest(&format!("other-{i}"))), "other-{i}");
        }
        // Sorted run plus at most an eighth of it (and its hash set's slack).
        assert!(s.bytes() < 24 * n as usize, "{} bytes", s.bytes());
        s.compact();
        assert_eq!(s.len(), n as usize);
        assert!(
            s.sorted.windows(2).all(|w| w[0] < w[1]),
            "sorted, no repeats"
        );
        assert_eq!(s.bytes(), 16 * n as usize);
        assert!(s.contains(id_digest("m99999")) && !s.contains(id_digest("m100000")));
    }

    #[test]
    fn a_set_built_from_loaded_keys_is_the_set_of_those_keys() {
        let keys: Vec<u128> = (0..5000u32)
            .map(|i| id_digest(&format!("m{}", i % 3000)))
            .collect();
        let mut s = KeySet::from_keys(keys);
        assert_eq!(s.len(), 3000);
        assert_eq!(s.bytes(), 16 * 3000);
        assert!(s.contains(id_digest("m2999")) && !s.contains(id_digest("m3000")));
        // Inserts after a load go on as before.
        s.insert(id_digest("m3000"));
        s.insert(id_digest("m1"));
        assert_eq!(s.len(), 3001);
        assert!(s.contains(id_digest("m3000")));
    }

    #[test]
    fn a_message_id_digest_is_its_sha256_prefix() {
        // Restarts and other builds must derive the same digests.
        assert_eq!(
            format!("{:032x}", id_digest("abc")),
            "ba7816bf8f01cfea414140de5dae2223"
        );
        assert_ne!(id_digest("m1"), id_digest("m1 "));
    }
}
