//! Turns → speakers, from their embeddings: each turn to the nearest voice heard so far as it
//! comes ([`Labeller::assign`]), and once more over the whole call at its end
//! ([`Labeller::recluster`]).
//!
//! **Online.** A turn of at least [`Config::short_ms`] goes to the speaker whose voiceprint
//! (the mean of their turns' embeddings, weighted by length) is the most similar, when the
//! cosine similarity reaches [`Config::threshold`]; otherwise it is a new speaker. A shorter
//! turn is too short to be sure of: it goes to the nearest speaker (a new one only when there is
//! none yet), is marked **tentative** and does not move the voiceprint. A turn too short for an
//! embedding at all takes the previous turn's speaker (tentative).
//!
//! **Known voices.** Voiceprints of people named in earlier calls ([`Known`]) are compared with
//! each speaker's voiceprint: at [`Config::known_threshold`] or more the speaker is that person,
//! **unconfirmed** ("Dana?") until [`Config::confirm_ms`] of their long turns agree. A person is
//! given to one speaker at most (the most similar).
//!
//! **At the end of the call** the long turns are clustered again, all at once (agglomerative,
//! average linkage, stopping below the same threshold); short turns go to the nearest cluster.
//! Each cluster keeps the number of the online speaker it shares the most speech with, so a
//! name given during the call stays; the turns whose speaker changed are returned.
//!
//! Speakers are numbered from 0 in order of first appearance.

use crate::embed::{cosine, normalise};

/// The thresholds (tuned on the real calls of `tests/fixtures/speakers`).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The least cosine similarity of a turn to a speaker's voiceprint for the same speaker.
    pub threshold: f32,
    /// Turns shorter than this are tentative and never start a new speaker (but the first).
    pub short_ms: u64,
    /// The least similarity of a speaker to a known person's voiceprint.
    pub known_threshold: f32,
    /// Speech (long turns) that confirms a known person.
    pub confirm_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            threshold: 0.55,
            short_ms: 1_500,
            known_threshold: 0.6,
            confirm_ms: 6_000,
        }
    }
}

/// A person's voiceprint from earlier calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    pub id: String,
    pub name: String,
    /// Of unit length.
    pub embedding: Vec<f32>,
}

/// Who a speaker is, when a known voice matched.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownMatch {
    pub id: String,
    pub name: String,
    /// `false`: "Dana?" (matched, not yet confirmed).
    pub confirmed: bool,
}

/// A turn's speaker.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    /// From 0, in order of first appearance.
    pub speaker: usize,
    /// A short turn: may change.
    pub tentative: bool,
    /// The known person the speaker is, if any.
    pub known: Option<KnownMatch>,
}

#[derive(Debug, Clone)]
struct Speaker {
    sum: Vec<f32>,
    long_ms: u64,
    known: Option<(usize, f32)>,
}

impl Speaker {
    fn print(&self) -> Vec<f32> {
        normalise(self.sum.clone())
    }
}

#[derive(Debug, Clone)]
struct Turn {
    embedding: Option<Vec<f32>>,
    ms: u64,
    speaker: usize,
    tentative: bool,
}

/// The speakers of one call.
#[derive(Debug, Clone)]
pub struct Labeller {
    cfg: Config,
    known: Vec<Known>,
    speakers: Vec<Speaker>,
    turns: Vec<Turn>,
}

impl Labeller {
    pub fn new(cfg: Config, known: Vec<Known>) -> Labeller {
        Labeller {
            cfg,
            known,
            speakers: Vec::new(),
            turns: Vec::new(),
        }
    }

    /// Speakers so far.
    pub fn speakers(&self) -> usize {
        self.speakers.len()
    }

    /// A speaker's voiceprint (unit length): what is kept when they are named.
    pub fn voiceprint(&self, speaker: usize) -> Option<Vec<f32>> {
        self.speakers
            .get(speaker)
            .filter(|s| s.sum.iter().any(|v| *v != 0.0))
            .map(Speaker::print)
    }

    /// The labels of every turn so far, in order.
    pub fn labels(&self) -> Vec<Label> {
        self.turns.iter().map(|t| self.label_of(t)).collect()
    }

    fn label_of(&self, t: &Turn) -> Label {
        Label {
            speaker: t.speaker,
            tentative: t.tentative,
            known: self.known_of(t.speaker),
        }
    }

    /// The speech (long turns, ms) a speaker's voiceprint is made from.
    pub fn speech_ms(&self, speaker: usize) -> u64 {
        self.speakers.get(speaker).map_or(0, |s| s.long_ms)
    }

    /// The known person a speaker is, if any.
    pub fn known_of(&self, speaker: usize) -> Option<KnownMatch> {
        let s = self.speakers.get(speaker)?;
        let (k, _) = s.known?;
        let k = &self.known[k];
        Some(KnownMatch {
            id: k.id.clone(),
            name: k.name.clone(),
            confirmed: s.long_ms >= self.cfg.confirm_ms,
        })
    }

    fn new_speaker(&mut self) -> usize {
        self.speakers.push(Speaker {
            sum: Vec::new(),
            long_ms: 0,
            known: None,
        });
        self.speakers.len() - 1
    }

    fn nearest(&self, e: &[f32]) -> Option<(usize, f32)> {
        self.speakers
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.sum.is_empty())
            .map(|(i, s)| (i, cosine(e, &s.print())))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The next turn: its embedding (`None` when too short for one) and its length.
    pub fn assign(&mut self, embedding: Option<Vec<f32>>, ms: u64) -> Label {
        let short = ms < self.cfg.short_ms || embedding.is_none();
        let speaker = match &embedding {
            None => self
                .turns
                .last()
                .map(|t| t.speaker)
                .unwrap_or_else(|| self.new_speaker()),
            Some(e) => match self.nearest(e) {
                Some((i, sim)) if short || sim >= self.cfg.threshold => i,
                // Only speakers heard too briefly for a voice: the last one gets it.
                None if !self.speakers.is_empty() => self.turns.last().map_or(0, |t| t.speaker),
                _ => self.new_speaker(),
            },
        };
        if let (Some(e), false) = (&embedding, short) {
            let s = &mut self.speakers[speaker];
            if s.sum.is_empty() {
                s.sum = vec![0.0; e.len()];
            }
            for (a, b) in s.sum.iter_mut().zip(e) {
                *a += b * ms as f32;
            }
            s.long_ms += ms;
            self.match_known();
        } else if let Some(e) = &embedding {
            // A first speaker from a short turn still needs a voice to compare with.
            let s = &mut self.speakers[speaker];
            if s.sum.is_empty() {
                s.sum = e.iter().map(|v| v * ms as f32).collect();
            }
        }
        self.turns.push(Turn {
            embedding,
            ms,
            speaker,
            tentative: short,
        });
        self.label_of(self.turns.last().expect("just pushed"))
    }

    /// Gives each known person to the most similar speaker at the threshold or above.
    fn match_known(&mut self) {
        for s in &mut self.speakers {
            s.known = None;
        }
        let mut pairs: Vec<(f32, usize, usize)> = Vec::new();
        for (si, s) in self.speakers.iter().enumerate() {
            if s.long_ms == 0 {
                continue;
            }
            let p = s.print();
            for (ki, k) in self.known.iter().enumerate() {
                let sim = cosine(&p, &k.embedding);
                if sim >= self.cfg.known_threshold {
                    pairs.push((sim, si, ki));
                }
            }
        }
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut taken = vec![false; self.known.len()];
        for (sim, si, ki) in pairs {
            if taken[ki] || self.speakers[si].known.is_some() {
                continue;
            }
            taken[ki] = true;
            self.speakers[si].known = Some((ki, sim));
        }
    }

    /// The pass over the whole call (at its end): the turns whose label changed, as
    /// `(turn index, new label)`.
    pub fn recluster(&mut self) -> Vec<(usize, Label)> {
        let long: Vec<usize> = (0..self.turns.len())
            .filter(|&i| !self.turns[i].tentative && self.turns[i].embedding.is_some())
            .collect();
        if long.len() < 2 {
            return Vec::new();
        }
        let clusters = agglomerate(
            &long
                .iter()
                .map(|&i| {
                    self.turns[i]
                        .embedding
                        .clone()
                        .expect("long turns have one")
                })
                .collect::<Vec<_>>(),
            self.cfg.threshold,
        );
        let to = self.owners(&clusters, &long);
        let before: Vec<Label> = self.labels();
        let mut new_speaker = vec![None; self.turns.len()];
        for (c, members) in clusters.iter().enumerate() {
            for &m in members {
                new_speaker[long[m]] = Some(to[c]);
            }
        }
        self.rebuild(new_speaker);
        let after = self.labels();
        before
            .into_iter()
            .zip(after)
            .enumerate()
            .filter(|(_, (b, a))| b != a)
            .map(|(i, (_, a))| (i, a))
            .collect()
    }

    /// Each cluster (of `long` turns' indexes) → the online speaker it shares the most speech
    /// with (greedy, largest overlap first); the rest → new speakers.
    fn owners(&mut self, clusters: &[Vec<usize>], long: &[usize]) -> Vec<usize> {
        let mut overlap: Vec<(u64, usize, usize)> = Vec::new();
        for (c, members) in clusters.iter().enumerate() {
            let mut per = std::collections::HashMap::<usize, u64>::new();
            for &m in members {
                let t = &self.turns[long[m]];
                *per.entry(t.speaker).or_default() += t.ms;
            }
            overlap.extend(per.into_iter().map(|(s, ms)| (ms, c, s)));
        }
        overlap.sort_by(|a, b| b.cmp(a));
        let mut to = vec![None; clusters.len()];
        let mut used = vec![false; self.speakers.len()];
        for (_, c, s) in overlap {
            if to[c].is_none() && !used[s] {
                to[c] = Some(s);
                used[s] = true;
            }
        }
        let mut fresh = self.speakers.len();
        let to: Vec<usize> = to
            .into_iter()
            .map(|t| {
                t.unwrap_or_else(|| {
                    fresh += 1;
                    fresh - 1
                })
            })
            .collect();
        while self.speakers.len() < fresh {
            self.new_speaker();
        }
        to
    }

    /// The long turns' new speakers (`Some`) → the voiceprints again; then the other turns to
    /// the nearest voiceprint; then the known voices.
    fn rebuild(&mut self, new_speaker: Vec<Option<usize>>) {
        for s in &mut self.speakers {
            s.sum.iter_mut().for_each(|v| *v = 0.0);
            s.long_ms = 0;
        }
        for (i, sp) in new_speaker.iter().enumerate() {
            if let Some(sp) = sp {
                let t = &self.turns[i];
                let e = t.embedding.as_ref().expect("long turns have one");
                let s = &mut self.speakers[*sp];
                if s.sum.is_empty() {
                    s.sum = vec![0.0; e.len()];
                }
                for (a, b) in s.sum.iter_mut().zip(e) {
                    *a += b * t.ms as f32;
                }
                s.long_ms += t.ms;
            }
        }
        for (i, sp) in new_speaker.into_iter().enumerate() {
            let t = &self.turns[i];
            let sp = match (sp, &t.embedding) {
                (Some(sp), _) => sp,
                (None, Some(e)) => self.nearest(e).map_or(t.speaker, |(s, _)| s),
                (None, None) => t.speaker,
            };
            self.turns[i].speaker = sp;
        }
        self.match_known();
    }
}

/// Agglomerative clustering of unit vectors, average linkage on cosine similarity, merging
/// while the most similar pair of clusters is at `threshold` or above. Clusters as lists of
/// indexes, in order of their first member.
pub fn agglomerate(items: &[Vec<f32>], threshold: f32) -> Vec<Vec<usize>> {
    let n = items.len();
    let mut sim = vec![vec![0f32; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            let s = cosine(&items[i], &items[j]);
            sim[i][j] = s;
            sim[j][i] = s;
        }
    }
    let mut clusters: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    loop {
        let mut best = (f32::MIN, 0, 0);
        for a in 0..clusters.len() {
            for b in a + 1..clusters.len() {
                let mut total = 0f32;
                for &i in &clusters[a] {
                    for &j in &clusters[b] {
                        total += sim[i][j];
                    }
                }
                let avg = total / (clusters[a].len() * clusters[b].len()) as f32;
                if avg > best.0 {
                    best = (avg, a, b);
                }
            }
        }
        if clusters.len() < 2 || best.0 < threshold {
            break;
        }
        let merged = clusters.remove(best.2);
        clusters[best.1].extend(merged);
    }
    for c in &mut clusters {
        c.sort_unstable();
    }
    clusters.sort_by_key(|c| c[0]);
    clusters
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit vector near axis `k` of 8 (a "voice"), turned a little by `jitter`.
    fn voice(k: usize, jitter: f32) -> Vec<f32> {
        let mut v = vec![0.1f32; 8];
        v[k] = 1.0;
        v[(k + 1) % 8] += jitter;
        normalise(v)
    }

    #[test]
    fn speakers_in_order_of_first_appearance() {
        let mut l = Labeller::new(Config::default(), Vec::new());
        let got: Vec<usize> = [(3, 0.0), (5, 0.1), (3, 0.2), (1, 0.0), (5, 0.0)]
            .into_iter()
            .map(|(k, j)| l.assign(Some(voice(k, j)), 3_000).speaker)
            .collect();
        assert_eq!(got, vec![0, 1, 0, 2, 1]);
        assert_eq!(l.speakers(), 3);
    }

    #[test]
    fn short_turns_are_tentative_and_start_no_one() {
        let mut l = Labeller::new(Config::default(), Vec::new());
        assert_eq!(l.assign(Some(voice(0, 0.0)), 3_000).speaker, 0);
        let short = l.assign(Some(voice(4, 0.0)), 900);
        assert_eq!((short.speaker, short.tentative), (0, true));
        let none = l.assign(None, 300);
        assert_eq!((none.speaker, none.tentative), (0, true));
        assert_eq!(l.speakers(), 1);
        // A first turn that is short still makes Speaker 1.
        let mut l = Labeller::new(Config::default(), Vec::new());
        assert_eq!(l.assign(None, 300).speaker, 0);
        assert_eq!(l.assign(Some(voice(2, 0.0)), 3_000).speaker, 0);
    }

    #[test]
    fn a_known_voice_is_unconfirmed_then_confirmed() {
        let dana = Known {
            id: "vp1".into(),
            name: "Dana".into(),
            embedding: voice(2, 0.05),
        };
        let mut l = Labeller::new(Config::default(), vec![dana]);
        assert_eq!(l.assign(Some(voice(0, 0.0)), 3_000).known, None);
        let first = l.assign(Some(voice(2, 0.0)), 3_000);
        assert_eq!(first.speaker, 1);
        let k = first.known.unwrap();
        assert_eq!((k.name.as_str(), k.confirmed), ("Dana", false));
        let again = l.assign(Some(voice(2, 0.1)), 4_000);
        assert!(again.known.unwrap().confirmed);
    }

    #[test]
    fn the_end_of_call_pass_fixes_an_early_mistake() {
        // A voice half way between two: online it starts a third speaker; with the whole call
        // in view it joins the nearer one.
        let mut l = Labeller::new(
            Config {
                threshold: 0.8,
                ..Config::default()
            },
            Vec::new(),
        );
        let a = voice(0, 0.0);
        let b = voice(4, 0.0);
        let mid = normalise(a.iter().zip(&voice(0, 0.9)).map(|(x, y)| x + y).collect());
        for e in [&a, &b, &mid, &a, &b, &a] {
            l.assign(Some(e.clone()), 3_000);
        }
        let before = l.speakers();
        let changed = l.recluster();
        let labels: Vec<usize> = l.labels().iter().map(|x| x.speaker).collect();
        assert_eq!(labels[0], labels[3]);
        assert_eq!(labels[1], labels[4]);
        assert_eq!(labels[0], labels[5]);
        assert!(before >= 2);
        assert!(changed.iter().all(|(i, _)| *i < 6));
    }

    #[test]
    fn agglomeration_stops_at_the_threshold() {
        let items = vec![voice(0, 0.0), voice(5, 0.0), voice(0, 0.2), voice(5, 0.1)];
        assert_eq!(agglomerate(&items, 0.7), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(
            agglomerate(&items, 0.9999),
            vec![vec![0], vec![1], vec![2], vec![3]]
        );
        assert_eq!(agglomerate(&items, -1.0).len(), 1);
    }
}
