//! A growing Bloom filter of the dedupe keys a session index no longer holds exactly: it answers
//! "certainly never seen" (no false negatives) or "maybe" (then the database is asked). It grows
//! by adding layers, each twice the size of the last, so it never needs the keys again; about
//! two bytes per key, so a session of 100,000 messages costs under half a MiB.

use std::hash::{BuildHasher, Hash};

/// Bits per key of a layer (at its capacity): with [`PROBES`] probes a layer answers a wrong
/// "maybe" about once in 2,000 keys.
const BITS_PER_KEY: usize = 16;
const PROBES: u32 = 11;
/// The first layer's capacity, in keys.
const FIRST_LAYER: usize = 4096;

#[derive(Debug)]
struct Layer {
    bits: Vec<u64>,
    keys: usize,
    capacity: usize,
}

impl Layer {
    fn new(capacity: usize) -> Self {
        let words = (capacity * BITS_PER_KEY).div_ceil(64);
        Layer {
            bits: vec![0; words],
            keys: 0,
            capacity,
        }
    }

    fn positions(&self, h: (u64, u64)) -> impl Iterator<Item = usize> + '_ {
        let n = (self.bits.len() * 64) as u64;
        (0..PROBES as u64).map(move |i| (h.0.wrapping_add(i.wrapping_mul(h.1)) % n) as usize)
    }

    fn insert(&mut self, h: (u64, u64)) {
        let n = (self.bits.len() * 64) as u64;
        for i in 0..PROBES as u64 {
            let p = (h.0.wrapping_add(i.wrapping_mul(h.1)) % n) as usize;
            self.bits[p / 64] |= 1 << (p % 64);
        }
        self.keys += 1;
    }

    fn maybe(&self, h: (u64, u64)) -> bool {
        self.positions(h)
            .all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
}

/// A Bloom filter of strings and 128-bit keys (seeded per filter).
#[derive(Debug, Default)]
pub(crate) struct Bloom {
    layers: Vec<Layer>,
    seeds: (foldhash::fast::RandomState, foldhash::fast::RandomState),
}

impl Bloom {
    fn hashes<K: Hash + ?Sized>(&self, key: &K) -> (u64, u64) {
        (self.seeds.0.hash_one(key), self.seeds.1.hash_one(key) | 1)
    }

    pub fn insert<K: Hash + ?Sized>(&mut self, key: &K) {
        let h = self.hashes(key);
        let full = self.layers.last().is_none_or(|l| l.keys >= l.capacity);
        if full {
            let capacity = self.layers.last().map_or(FIRST_LAYER, |l| 2 * l.capacity);
            self.layers.push(Layer::new(capacity));
        }
        self.layers.last_mut().expect("pushed above").insert(h);
    }

    /// `false`: the key was never inserted. `true`: it may have been.
    pub fn maybe<K: Hash + ?Sized>(&self, key: &K) -> bool {
        if self.layers.is_empty() {
            return false;
        }
        let h = self.hashes(key);
        self.layers.iter().any(|l| l.maybe(h))
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Keys inserted (repeats counted).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.layers.iter().map(|l| l.keys).sum()
    }

    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.bits.len() * 8).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_forgets_a_key_and_rarely_claims_one() {
        let mut b = Bloom::default();
        assert!(!b.maybe("m1"), "an empty filter knows nothing");
        let n = 50_000u32;
        for i in 0..n {
            b.insert(format!("m{i}").as_str());
            b.insert(&(u128::from(i) << 64 | 7));
        }
        assert_eq!(b.len(), 2 * n as usize);
        for i in 0..n {
            assert!(b.maybe(format!("m{i}").as_str()), "m{i}");
            assert!(b.maybe(&(u128::from(i) << 64 | 7)));
        }
        let wrong = (0..n)
            .filter(|i| b.maybe(format!("other-{i}").as_str()))
            .count();
        // Five layers of about 1/2000 each: a few dozen wrong "maybe"s in 50,000, not hundreds.
        assert!(wrong < 250, "{wrong} false positives in {n}");
        // About two bytes a key (the last layer is at most half full).
        assert!(b.bytes() < 8 * 2 * n as usize, "{} bytes", b.bytes());
    }
}
