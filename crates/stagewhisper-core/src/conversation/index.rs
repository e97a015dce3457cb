//! The session index: what the rules know of one session's stored messages, so a batch is
//! decided without reading the database in the common case — its dedupe keys (`message_id`s
//! and content keys of cleaned texts: the recent ones exactly, the older ones in a Bloom filter
//! backed by indexed look-ups) and the final texts of its recent scopes. Its size is bounded by
//! [`WINDOW`] plus about two bytes per older key, not by the session's history. The actor loads
//! a session's index before the first batch that needs it ([`Indexes::insert`]): the keys from
//! the dedupe indexes of the database (no row read) and the last rows; the rules keep it up to
//! date as they add rows; it is dropped again when too many (or too large) are cached and the
//! writer has nothing in flight (so the database holds exactly what a reload would rebuild).
//!
//! Content keys ([`hash_hex`]) are stored with each row; a restart derives the same ones.

use super::bloom::Bloom;
use crate::model::{MessageKind, MessageRow};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet, VecDeque};

pub(crate) fn hash_hex(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let d = h.finalize();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(32);
    for b in &d[..16] {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// A content key as the index holds it: the 128 bits it spells (every key [`hash_hex`] makes),
/// so the index stores 16 bytes instead of a string. Any other stored form is hashed to 128 bits.
pub(crate) fn key_digest(key: &str) -> u128 {
    match (key.len(), u128::from_str_radix(key, 16)) {
        (32, Ok(v)) => v,
        _ => {
            let d = Sha256::digest(key.as_bytes());
            u128::from_be_bytes(d[..16].try_into().expect("16 bytes"))
        }
    }
}

/// What the rules know of one session's stored messages, so batches decide without reading
/// the database for the common case: its recent dedupe keys exactly (a window of the last
/// [`WINDOW`] rows' keys, and every key of a row not yet committed), a Bloom filter of the older
/// ones, and the final texts of its most recent scopes.
///
/// A key is known when the window holds it or the actor found it in the database for this batch
/// ([`SessionIndex::found_id`]): before a batch, the actor asks the database about every key the
/// batch checks that the window lacks and the filter may hold ([`SessionIndex::needs_lookup_id`]);
/// a key the filter rules out was never stored (the filter has no false negatives, and it holds
/// every key that left the window). A key leaves the window only once its row is committed
/// (its unit is out of the writer's pipeline), so the database then answers for it.
#[derive(Debug, Default)]
pub(crate) struct SessionIndex {
    /// The recent keyed rows, oldest first: the unit that decided each, its keys.
    window: VecDeque<(u64, Option<String>, Option<u128>)>,
    /// The window's keys, with how many of its rows carry each.
    ids: HashMap<String, u32, FastHash>,
    contents: HashMap<u128, u32, FastHash>,
    /// Keys found in the database for the current batch (cleared by the next one).
    found_ids: HashSet<String, FastHash>,
    found_contents: HashSet<u128, FastHash>,
    /// Every key that left the window (and, after a load, every stored key).
    older: Bloom,
    /// The unit being decided, and the newest unit out of the writer's pipeline (copied from
    /// [`Indexes`] whenever the index is handed out).
    unit: u64,
    done: u64,
    /// Final texts by scope, each with the scope's position among the session's scopes. Only
    /// the last [`FINAL_SCOPES`] (at least) are kept: they answer whether a late stream part
    /// repeats a final text, which happens within a reply or two, not hundreds later (and a
    /// draft that settles on a final text is dropped by its content key anyway).
    finals: HashMap<String, (u64, Vec<String>), FastHash>,
    scopes: u64,
    last_used: u64,
}

/// Keyed rows per session whose keys are held exactly (more while their rows are in flight).
pub(crate) const WINDOW: usize = 2048;

/// Scopes whose final texts a session index keeps (it prunes at twice as many).
pub(crate) const FINAL_SCOPES: u64 = 1024;

fn count_up<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u32, FastHash>, k: K) {
    *m.entry(k).or_insert(0) += 1;
}

fn count_down<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u32, FastHash>, k: &K) {
    if let Some(n) = m.get_mut(k) {
        *n -= 1;
        if *n == 0 {
            m.remove(k);
        }
    }
}

impl SessionIndex {
    /// A stored key found by the scan of a session's keys when it is loaded.
    pub fn add_stored_id(&mut self, message_id: &str) {
        self.older.insert(message_id);
    }

    pub fn add_stored_content(&mut self, content_key: &str) {
        self.older.insert(&key_digest(content_key));
    }

    pub fn add(&mut self, row: &MessageRow) {
        let content = row.content_key.as_deref().map(key_digest);
        if row.message_id.is_some() || content.is_some() {
            if let Some(m) = &row.message_id {
                count_up(&mut self.ids, m.clone());
            }
            if let Some(c) = content {
                count_up(&mut self.contents, c);
            }
            self.window
                .push_back((self.unit, row.message_id.clone(), content));
            self.trim();
        }
        if !row.draft && matches!(row.kind, MessageKind::Assistant | MessageKind::Notice) {
            if let Some(scope) = &row.scope {
                self.scopes += 1;
                let at = self.scopes;
                match self.finals.get_mut(scope.as_str()) {
                    Some((seen, texts)) => {
                        *seen = at;
                        texts.push(row.text.clone());
                    }
                    None => {
                        self.finals
                            .insert(scope.clone(), (at, vec![row.text.clone()]));
                        if self.finals.len() as u64 > 2 * FINAL_SCOPES {
                            let keep_after = at - FINAL_SCOPES;
                            self.finals.retain(|_, (seen, _)| *seen > keep_after);
                        }
                    }
                }
            }
        }
    }

    /// Moves the oldest committed rows' keys out of the window into the filter.
    fn trim(&mut self) {
        while self.window.len() > WINDOW {
            match self.window.front() {
                Some((unit, _, _)) if *unit <= self.done => {}
                _ => break,
            }
            let (_, id, content) = self.window.pop_front().expect("checked above");
            if let Some(id) = id {
                count_down(&mut self.ids, &id);
                self.older.insert(id.as_str());
            }
            if let Some(c) = content {
                count_down(&mut self.contents, &c);
                self.older.insert(&c);
            }
        }
    }

    /// A row of the session has this `message_id` (see the type's docs for when this is exact).
    pub fn has_id(&self, message_id: &str) -> bool {
        self.ids.contains_key(message_id) || self.found_ids.contains(message_id)
    }

    /// A row of the session has this content key.
    pub fn has_content(&self, content_key: &str) -> bool {
        let c = key_digest(content_key);
        self.contents.contains_key(&c) || self.found_contents.contains(&c)
    }

    /// Some key of the session is not in the window (only then may a look-up be needed).
    pub fn has_older(&self) -> bool {
        !self.older.is_empty()
    }

    /// Only the database can tell whether a row has this `message_id`.
    pub fn needs_lookup_id(&self, message_id: &str) -> bool {
        !self.has_id(message_id) && self.older.maybe(message_id)
    }

    pub fn needs_lookup_content(&self, content_key: &str) -> bool {
        !self.has_content(content_key) && self.older.maybe(&key_digest(content_key))
    }

    /// The database has a row with this `message_id` (for this batch).
    pub fn found_id(&mut self, message_id: &str) {
        self.found_ids.insert(message_id.to_string());
    }

    pub fn found_content(&mut self, content_key: &str) {
        self.found_contents.insert(key_digest(content_key));
    }

    /// A final text of the scope starts with `text`: a draft of it is redundant.
    pub fn final_extends(&self, scope: &str, text: &str) -> bool {
        self.finals
            .get(scope)
            .is_some_and(|(_, v)| v.iter().any(|f| f.starts_with(text)))
    }

    /// About what the index holds in memory, in bytes.
    pub fn approx_bytes(&self) -> usize {
        let ids: usize = self.ids.keys().map(|k| k.len() + 56).sum();
        ids + self.contents.len() * 40
            + self.window.len() * 48
            + self.older.bytes()
            + self.finals.len() * 96
    }

    fn hand_out(&mut self, unit: u64, done: u64) {
        self.unit = unit;
        if done != self.done {
            self.done = done;
            self.trim();
        }
    }
}

/// The hasher of the rules' maps keyed by ids (session ids, message ids, scopes): seeded per
/// process, several times faster than SipHash on them. Keys come only from token holders.
pub(crate) type FastHash = foldhash::fast::RandomState;

/// Sessions whose index stays in memory between batches.
const INDEX_CACHE: usize = 64;
/// Bytes the cached indexes may hold together (about); past it the least recently used go.
const INDEX_BYTES: usize = 24 << 20;

/// The indexes in memory, by session, with the batch that last used each.
#[derive(Debug, Default)]
pub(crate) struct Indexes {
    map: HashMap<String, SessionIndex, FastHash>,
    batch_no: u64,
    /// The writer unit being decided, and the newest one out of the writer's pipeline.
    unit: u64,
    done: u64,
}

impl Indexes {
    /// A new batch starts; it becomes writer unit `unit`, and every unit up to `done` is out of
    /// the pipeline (committed or failed). What the batch touches counts as used by it.
    pub fn next_batch(&mut self, unit: u64, done: u64) {
        self.batch_no += 1;
        self.unit = unit;
        self.done = done;
    }

    /// Marks a session's index used by this batch; `false` when it is not in memory.
    pub fn touch(&mut self, session_id: &str) -> bool {
        let batch = self.batch_no;
        match self.map.get_mut(session_id) {
            Some(i) => {
                if i.last_used != batch {
                    i.found_ids.clear();
                    i.found_contents.clear();
                }
                i.last_used = batch;
                true
            }
            None => false,
        }
    }

    /// Adds a session's index (loaded from its rows, or empty for a new session).
    pub fn insert(&mut self, session_id: String, mut index: SessionIndex) {
        index.last_used = self.batch_no;
        index.unit = self.unit;
        index.done = self.done;
        self.map.insert(session_id, index);
    }

    pub fn remove(&mut self, session_id: &str) {
        self.map.remove(session_id);
    }

    pub fn get(&self, session_id: &str) -> Option<&SessionIndex> {
        self.map.get(session_id)
    }

    pub fn get_mut(&mut self, session_id: &str) -> Option<&mut SessionIndex> {
        let (unit, done) = (self.unit, self.done);
        let i = self.map.get_mut(session_id)?;
        i.hand_out(unit, done);
        Some(i)
    }

    /// Keeps the most recently used half when more than [`INDEX_CACHE`] are cached, and the
    /// most recently used that fit in half of [`INDEX_BYTES`] when they hold more. Only when the
    /// writer has nothing in flight: an index in memory may hold rows not yet committed.
    pub fn evict(&mut self) {
        if self.map.len() > INDEX_CACHE {
            let mut ages: Vec<u64> = self.map.values().map(|i| i.last_used).collect();
            ages.sort_unstable();
            let cutoff = ages[ages.len() - INDEX_CACHE / 2];
            self.map.retain(|_, i| i.last_used >= cutoff);
        }
        let total: usize = self.map.values().map(SessionIndex::approx_bytes).sum();
        if total > INDEX_BYTES {
            let mut by_age: Vec<(u64, usize)> = self
                .map
                .values()
                .map(|i| (i.last_used, i.approx_bytes()))
                .collect();
            by_age.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
            let (mut kept, mut cutoff) = (0, u64::MAX);
            for (age, bytes) in by_age {
                if kept + bytes > INDEX_BYTES / 2 {
                    break;
                }
                kept += bytes;
                cutoff = age;
            }
            self.map.retain(|_, i| i.last_used >= cutoff);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h_bytes(parts: &[&str]) -> Vec<u8> {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0u8]);
        }
        h.finalize().to_vec()
    }

    #[test]
    fn a_session_index_keeps_the_final_texts_of_its_recent_scopes() {
        let final_row = |n: u64| MessageRow {
            id: n as i64,
            session_id: "s".into(),
            kind: MessageKind::Assistant,
            text: format!("The answer to question {n}."),
            message_id: Some(format!("m{n}")),
            task_id: None,
            user_message_id: None,
            scope: Some(format!("u{n}")),
            error_code: None,
            occurred_at: None,
            received_at: "2026-11-29T12:00:00Z".into(),
            sort_key: n as i64,
            draft: false,
            hidden: false,
            content_key: Some(hash_hex(&[&n.to_string()])),
            draft_key: None,
            speaker: None,
            delivery: None,
            delivery_error: None,
            permission: None,
        };
        let mut idx = SessionIndex::default();
        let total = 5 * FINAL_SCOPES;
        for n in 1..=total {
            idx.add(&final_row(n));
        }
        assert!(idx.finals.len() as u64 <= 2 * FINAL_SCOPES);
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
        // Dedupe keys are never forgotten: the recent ones exactly, the others by the filter.
        for n in 1..total + FINAL_SCOPES {
            let m = format!("m{n}");
            assert!(idx.has_id(&m) || idx.needs_lookup_id(&m), "{m}");
        }
    }

    fn keyed_row(n: u64) -> MessageRow {
        MessageRow {
            id: n as i64,
            session_id: "s".into(),
            kind: MessageKind::User,
            text: format!("Question {n}"),
            message_id: Some(format!("m{n}")),
            task_id: None,
            user_message_id: None,
            scope: None,
            error_code: None,
            occurred_at: None,
            received_at: "2026-11-29T12:00:00Z".into(),
            sort_key: n as i64,
            draft: false,
            hidden: false,
            content_key: Some(hash_hex(&[&n.to_string()])),
            draft_key: None,
            speaker: None,
            delivery: None,
            delivery_error: None,
            permission: None,
        }
    }

    #[test]
    fn the_window_keeps_the_recent_keys_and_the_filter_the_older_ones() {
        let mut all = Indexes::default();
        all.next_batch(1, 0);
        all.insert("s".into(), SessionIndex::default());
        let total = 3 * WINDOW as u64;
        // Unit 1 decides everything while unit 0 only is out of the pipeline: nothing can leave
        // the window (its rows are not in the database yet).
        for n in 1..=total {
            all.get_mut("s").unwrap().add(&keyed_row(n));
        }
        let idx = all.get("s").unwrap();
        assert_eq!(
            idx.window.len() as u64,
            total,
            "in flight: all held exactly"
        );
        assert!(idx.has_id("m1") && idx.has_content(&hash_hex(&["1"])));
        // Unit 1 commits: the next add trims the window to its size; the older keys go to the
        // filter, which only the database can confirm.
        all.next_batch(2, 1);
        all.get_mut("s").unwrap().add(&keyed_row(total + 1));
        let idx = all.get("s").unwrap();
        assert_eq!(idx.window.len(), WINDOW);
        assert_eq!(idx.ids.len(), WINDOW);
        assert_eq!(idx.contents.len(), WINDOW);
        for n in 1..=total + 1 {
            let (m, c) = (format!("m{n}"), hash_hex(&[&n.to_string()]));
            let recent = n > total + 1 - WINDOW as u64;
            assert_eq!(idx.has_id(&m), recent, "{m}");
            assert_eq!(idx.has_content(&c), recent, "{m}");
            assert_eq!(idx.needs_lookup_id(&m), !recent, "{m}");
            assert_eq!(idx.needs_lookup_content(&c), !recent, "{m}");
        }
        // A key the database confirmed is known for this batch only.
        all.get_mut("s").unwrap().found_id("m1");
        assert!(all.get("s").unwrap().has_id("m1"));
        all.next_batch(3, 2);
        assert!(all.touch("s"));
        assert!(!all.get("s").unwrap().has_id("m1"));
        // Bounded: the window, about two bytes per older key, not a copy of every key.
        assert!(all.get("s").unwrap().approx_bytes() < 512 << 10);
    }

    #[test]
    fn too_large_a_cache_drops_the_least_recently_used() {
        let mut all = Indexes::default();
        // Few sessions, but each holds 1 MiB (one very long key): the byte budget decides.
        let sessions = (INDEX_BYTES >> 20) as u64 + 8;
        for s in 0..sessions {
            all.next_batch(s + 1, s + 1);
            let mut idx = SessionIndex::default();
            idx.add(&MessageRow {
                message_id: Some(format!("{s}-{}", "x".repeat(1 << 20))),
                ..keyed_row(s)
            });
            all.insert(format!("s{s}"), idx);
        }
        all.evict();
        let kept: usize = all.map.values().map(SessionIndex::approx_bytes).sum();
        assert!(kept <= INDEX_BYTES / 2, "{kept}");
        assert!(kept > 0);
        assert!(
            all.get(&format!("s{}", sessions - 1)).is_some(),
            "the most recent stays"
        );
        assert!(all.get("s0").is_none(), "the oldest goes");
    }

    #[test]
    fn content_hashes_keep_their_stored_form() {
        // Stored rows carry these keys; a restart must derive the same ones.
        let parts = ["task", "Caf\u{e9} \u{25c9}", ""];
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0u8]);
        }
        let expected: String = h.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hash_hex(&parts), expected);
        assert_eq!(hash_hex(&parts).len(), 32);
        // The index holds the same 128 bits; other forms get a digest of their own.
        assert_eq!(
            key_digest(&expected),
            u128::from_be_bytes(h_bytes(&parts)[..16].try_into().unwrap())
        );
        assert_ne!(key_digest("not-hex"), key_digest("not-hex."));
    }
}
