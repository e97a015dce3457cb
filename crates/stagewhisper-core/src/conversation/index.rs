//! The session index: what the rules know of one session's stored messages, so a batch is
//! decided without reading the database — its dedupe keys (`message_id`s and content keys of
//! cleaned texts, every one, exactly, as 128-bit digests: [`KeySet`]) and the final texts of its
//! recent scopes. The actor loads a session's index from its stored rows before the first batch
//! that needs it ([`Indexes::insert`]); the rules keep it up to date as they add rows; it is
//! dropped again when too many (or too large) are cached and the writer has nothing in flight
//! (so the database holds exactly what a reload would rebuild).
//!
//! An index costs about 32 bytes a keyed message (two 16-byte digests) plus the recent finals,
//! so a 100,000-message chat's is about 3 MiB. The database is never asked about a key: a
//! look-up index on the messages table would cost every insert a B-tree write at a random place
//! (measured: half the ingest throughput with two of them).
//!
//! Content keys ([`super::keys`]) are stored with each row; a restart derives the same ones.

use super::keys::{id_digest, key_digest, FastHash};
use super::keyset::KeySet;
use crate::model::{MessageKind, MessageRow};
use std::collections::HashMap;

/// What the rules know of one session's stored messages, so batches decide without reading
/// the database: the dedupe keys, and the final texts of its most recent scopes. Loaded on
/// first use.
#[derive(Debug, Default)]
pub(crate) struct SessionIndex {
    message_ids: KeySet,
    content_keys: KeySet,
    /// Final texts by scope, each with the scope's position among the session's scopes. Only
    /// the last [`FINAL_SCOPES`] (at least) are kept: they answer whether a late stream part
    /// repeats a final text, which happens within a reply or two, not hundreds later (and a
    /// draft that settles on a final text is dropped by its content key anyway).
    finals: HashMap<String, (u64, Vec<String>), FastHash>,
    /// [`SessionIndex::approx_bytes`]'s share of `finals`, kept as they change (weighing the
    /// indexes after every batch must not walk thousands of texts).
    finals_bytes: usize,
    scopes: u64,
    last_used: u64,
}

fn scope_bytes(scope: &str) -> usize {
    scope.len() + 64
}

fn text_bytes(text: &str) -> usize {
    text.len() + 24
}

/// Scopes whose final texts a session index keeps (it prunes at twice as many).
pub(crate) const FINAL_SCOPES: u64 = 1024;

/// Final rows a load reads (the newest): the recent scopes' finals, without reading the texts
/// of the whole history.
pub(crate) const RECENT_FINALS: i64 = 2 * FINAL_SCOPES as i64;

impl SessionIndex {
    pub fn add(&mut self, row: &MessageRow) {
        self.add_keys(row.message_id.as_deref(), row.content_key.as_deref());
        self.add_final(row);
    }

    /// A stored row's dedupe keys (what a load reads of every row).
    pub fn add_keys(&mut self, message_id: Option<&str>, content_key: Option<&str>) {
        if let Some(m) = message_id {
            self.message_ids.insert(id_digest(m));
        }
        if let Some(k) = content_key {
            self.content_keys.insert(key_digest(k));
        }
    }

    /// A row's text when it is a final one of its scope (a load reads only the recent ones:
    /// [`RECENT_FINALS`]).
    pub fn add_final(&mut self, row: &MessageRow) {
        if !row.draft && matches!(row.kind, MessageKind::Assistant | MessageKind::Notice) {
            if let Some(scope) = &row.scope {
                self.scopes += 1;
                let at = self.scopes;
                self.finals_bytes += text_bytes(&row.text);
                match self.finals.get_mut(scope.as_str()) {
                    Some((seen, texts)) => {
                        *seen = at;
                        texts.push(row.text.clone());
                    }
                    None => {
                        self.finals_bytes += scope_bytes(scope);
                        self.finals
                            .insert(scope.clone(), (at, vec![row.text.clone()]));
                        if self.finals.len() as u64 > 2 * FINAL_SCOPES {
                            let keep_after = at - FINAL_SCOPES;
                            self.finals.retain(|_, (seen, _)| *seen > keep_after);
                            self.finals_bytes = self
                                .finals
                                .iter()
                                .map(|(k, (_, v))| {
                                    scope_bytes(k) + v.iter().map(|t| text_bytes(t)).sum::<usize>()
                                })
                                .sum();
                        }
                    }
                }
            }
        }
    }

    /// A row of the session has this `message_id`.
    pub fn has_id(&self, message_id: &str) -> bool {
        self.message_ids.contains(id_digest(message_id))
    }

    /// A row of the session has this content key.
    pub fn has_content(&self, content_key: &str) -> bool {
        self.content_keys.contains(key_digest(content_key))
    }

    /// An index of a session's stored keys, as a load reads them: the digests of its
    /// `message_id`s ([`id_digest`]) and of its content keys ([`key_digest`]), repeats allowed.
    /// Its finals are added after ([`SessionIndex::add_final`]).
    pub fn from_digests(message_ids: Vec<u128>, content_keys: Vec<u128>) -> Self {
        SessionIndex {
            message_ids: KeySet::from_keys(message_ids),
            content_keys: KeySet::from_keys(content_keys),
            ..SessionIndex::default()
        }
    }

    /// The keys in their compact form (what a load builds directly).
    #[cfg(test)]
    pub fn loaded(&mut self) {
        self.message_ids.compact();
        self.content_keys.compact();
    }

    /// About what the index holds in memory, in bytes.
    pub fn approx_bytes(&self) -> usize {
        self.message_ids.bytes() + self.content_keys.bytes() + self.finals_bytes
    }

    /// A final text of the scope starts with `text`: a draft of it is redundant.
    pub fn final_extends(&self, scope: &str, text: &str) -> bool {
        self.finals
            .get(scope)
            .is_some_and(|(_, v)| v.iter().any(|f| f.starts_with(text)))
    }
}

/// Sessions whose index stays in memory between batches.
const INDEX_CACHE: usize = 64;
/// Bytes the cached indexes may hold together (about); past it the least recently used go.
const INDEX_BYTES: usize = 32 << 20;

/// The indexes in memory, by session, with the batch that last used each.
#[derive(Debug)]
pub(crate) struct Indexes {
    map: HashMap<String, SessionIndex, FastHash>,
    batch_no: u64,
    /// [`INDEX_BYTES`], smaller in tests.
    budget: usize,
}

impl Default for Indexes {
    fn default() -> Self {
        Indexes {
            map: HashMap::default(),
            batch_no: 0,
            budget: INDEX_BYTES,
        }
    }
}

impl Indexes {
    /// A new batch starts: what it touches counts as used by it.
    pub fn next_batch(&mut self) {
        self.batch_no += 1;
    }

    /// Marks a session's index used by this batch; `false` when it is not in memory.
    pub fn touch(&mut self, session_id: &str) -> bool {
        let batch = self.batch_no;
        match self.map.get_mut(session_id) {
            Some(i) => {
                i.last_used = batch;
                true
            }
            None => false,
        }
    }

    /// Adds a session's index (loaded from its rows, or empty for a new session).
    pub fn insert(&mut self, session_id: String, mut index: SessionIndex) {
        index.last_used = self.batch_no;
        self.map.insert(session_id, index);
    }

    pub fn remove(&mut self, session_id: &str) {
        self.map.remove(session_id);
    }

    pub fn get(&self, session_id: &str) -> Option<&SessionIndex> {
        self.map.get(session_id)
    }

    pub fn get_mut(&mut self, session_id: &str) -> Option<&mut SessionIndex> {
        self.map.get_mut(session_id)
    }

    /// Keeps the most recently used half when more than [`INDEX_CACHE`] are cached, and the
    /// most recently used that fit in half of [`INDEX_BYTES`] when they hold more (the one
    /// used last stays, whatever its size). Only when the writer has nothing in flight: an
    /// index in memory may hold rows not yet committed.
    pub fn evict(&mut self) {
        if self.map.len() > INDEX_CACHE {
            let mut ages: Vec<u64> = self.map.values().map(|i| i.last_used).collect();
            ages.sort_unstable();
            let cutoff = ages[ages.len() - INDEX_CACHE / 2];
            self.map.retain(|_, i| i.last_used >= cutoff);
        }
        let mut by_age: Vec<(u64, usize)> = self
            .map
            .values()
            .map(|i| (i.last_used, i.approx_bytes()))
            .collect();
        if by_age.iter().map(|a| a.1).sum::<usize>() <= self.budget {
            return;
        }
        by_age.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
        let (mut kept, mut cutoff) = (0, by_age[0].0);
        for (age, bytes) in by_age {
            if kept > 0 && kept + bytes > self.budget / 2 {
                break;
            }
            kept += bytes;
            cutoff = age;
        }
        self.map.retain(|_, i| i.last_used >= cutoff);
    }

    /// Bytes the cached indexes hold (about).
    #[cfg(test)]
    pub fn approx_bytes(&self) -> usize {
        self.map.values().map(SessionIndex::approx_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::hash_hex;
    use super::*;

    #[test]
    fn a_session_index_keeps_the_final_texts_of_its_recent_scopes() {
        let final_row = |n: u64| MessageRow {
            message_id: Some(format!("m{n}")),
            scope: Some(format!("u{n}")),
            content_key: Some(hash_hex(&[&n.to_string()])),
            ..MessageRow::new(
                n as i64,
                "s",
                MessageKind::Assistant,
                format!("The answer to question {n}."),
                "2026-11-29T12:00:00Z".into(),
                n as i64,
            )
        };
        let mut idx = SessionIndex::default();
        let total = 5 * FINAL_SCOPES;
        for n in 1..=total {
            idx.add(&final_row(n));
        }
        assert!(idx.finals.len() as u64 <= 2 * FINAL_SCOPES);
        // A second final of a scope it has.
        idx.add(&MessageRow {
            message_id: None,
            text: "A second part.".into(),
            ..final_row(total)
        });
        // The weight kept as they came and went is what walking them gives.
        let walked: usize = idx
            .finals
            .iter()
            .map(|(k, (_, v))| scope_bytes(k) + v.iter().map(|t| text_bytes(t)).sum::<usize>())
            .sum();
        assert_eq!(idx.finals_bytes, walked);
        assert!(walked > 0);
        // The recent scopes answer; a prefix of their final is redundant, other text is not.
        for n in total - FINAL_SCOPES + 1..=total {
            assert!(
                idx.final_extends(&format!("u{n}"), "The answer"),
                "scope u{n}"
            );
        }
        assert!(!idx.final_extends(&format!("u{total}"), "Another answer"));
        assert!(!idx.final_extends("u1", "The answer"), "long forgotten");
        // A scope that gets another final stays recent.
        idx.add(&MessageRow {
            text: "A second final.".into(),
            ..final_row(total - FINAL_SCOPES)
        });
        for n in total + 1..total + FINAL_SCOPES {
            idx.add(&final_row(n));
        }
        assert!(idx.final_extends(&format!("u{}", total - FINAL_SCOPES), "A second"));
        // Dedupe keys are never forgotten.
        assert_eq!(idx.message_ids.len() as u64, total + FINAL_SCOPES - 1);
        for n in 1..total + FINAL_SCOPES {
            assert!(idx.has_id(&format!("m{n}")), "m{n}");
            assert!(idx.has_content(&hash_hex(&[&n.to_string()])), "content {n}");
        }
        assert!(!idx.has_id("m0") && !idx.has_content(&hash_hex(&["0"])));
    }
}

#[cfg(test)]
mod eviction_tests {
    use super::super::keys::hash_hex;
    use super::*;

    fn keyed_row(session: &str, n: u64) -> MessageRow {
        MessageRow {
            message_id: Some(format!("{session}-m{n}")),
            content_key: Some(hash_hex(&[session, &n.to_string()])),
            ..MessageRow::new(
                n as i64,
                session,
                MessageKind::User,
                format!("Question {n}"),
                "2026-11-29T12:00:00Z".into(),
                n as i64,
            )
        }
    }

    #[test]
    fn the_cached_indexes_stay_within_their_byte_budget_keeping_the_recent_ones() {
        // A budget of a tenth of the app's, and sessions of a tenth of the size: twelve
        // sessions of 10,000 keyed messages, about 320 kB an index (32 bytes a message).
        let budget = INDEX_BYTES / 10;
        let mut indexes = Indexes {
            budget,
            ..Indexes::default()
        };
        for s in 0..12 {
            indexes.next_batch();
            let mut idx = SessionIndex::default();
            for n in 0..10_000 {
                idx.add(&keyed_row(&format!("s{s}"), n));
            }
            idx.loaded();
            assert!(idx.approx_bytes() <= 330_000, "{}", idx.approx_bytes());
            indexes.insert(format!("s{s}"), idx);
            indexes.evict();
            assert!(indexes.approx_bytes() <= budget, "after s{s}");
        }
        assert!(indexes.get("s11").is_some() && indexes.get("s10").is_some());
        assert!(indexes.get("s0").is_none(), "the least recently used went");
        // One index larger than the whole budget stays while it is the one in use.
        indexes.next_batch();
        let mut big = SessionIndex::default();
        for n in 0..120_000 {
            big.add(&keyed_row("big", n));
        }
        big.loaded();
        indexes.insert("big".into(), big);
        indexes.evict();
        assert!(indexes.get("big").is_some_and(|i| i.has_id("big-m119999")));
        assert!(indexes.get("s11").is_none());
    }
}
