//! What call detection decides, from the streams seen alone (no sound server, no clock of its
//! own: the times come in), so every rule is tested directly.
//!
//! Per application (by `application.name`): its microphone streams open now, and where its
//! offer stands. An application is offered once it has held a microphone for [`HOLD`] and the
//! service allows it (detection on, the app not ignored, no call running); it is not offered
//! again until it has let go of every microphone stream and takes one anew.

use crate::capture::MicStream;
use stagewhisper_core::detect::{label, Offer};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How long an application holds a microphone before it is offered.
pub const HOLD: Duration = Duration::from_secs(2);

/// Where an application's offer stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stand {
    /// Not yet held long enough.
    Waiting,
    Offered(Offer),
    /// "Not now", or not allowed when it was due (a call running, ignored, detection off).
    Quiet,
    /// A call was started from its offer.
    Accepted(String),
}

/// An application that let go of every microphone stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub app: String,
    /// It was offered (the banner must go).
    pub was_offered: bool,
    /// The call started from its offer.
    pub call_id: Option<String>,
}

struct Open {
    stream: MicStream,
    at: Instant,
    at_ms: i64,
}

#[derive(Default)]
pub struct Tracker {
    streams: HashMap<u32, Open>,
    apps: BTreeMap<String, Stand>,
}

impl Tracker {
    pub fn opened(&mut self, s: MicStream, at: Instant, at_ms: i64) {
        self.apps.entry(s.app.clone()).or_insert(Stand::Waiting);
        self.streams.insert(
            s.index,
            Open {
                stream: s,
                at,
                at_ms,
            },
        );
    }

    /// The stream `index` closed; the application's closing when it was its last.
    pub fn closed(&mut self, index: u32) -> Option<Closed> {
        let app = self.streams.remove(&index)?.stream.app;
        if self.streams.values().any(|o| o.stream.app == app) {
            return None;
        }
        let stand = self.apps.remove(&app)?;
        Some(Closed {
            was_offered: matches!(stand, Stand::Offered(_)),
            call_id: match stand {
                Stand::Accepted(c) => Some(c),
                _ => None,
            },
            app,
        })
    }

    /// Every stream gone (the server went away).
    pub fn clear(&mut self) -> Vec<Closed> {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        ids.into_iter().filter_map(|i| self.closed(i)).collect()
    }

    /// The applications due now (held a microphone for [`HOLD`], not yet decided), with their
    /// binary: each is then [decided](Tracker::decide).
    pub fn due(&self, now: Instant) -> Vec<(String, Option<String>)> {
        self.apps
            .iter()
            .filter(|(_, s)| **s == Stand::Waiting)
            .filter_map(|(app, _)| {
                let first = self.first_open(app)?;
                (now >= first.at + HOLD).then(|| (app.clone(), first.stream.binary.clone()))
            })
            .collect()
    }

    /// Offers `app` (the new offer) when `allowed`, else it goes quiet; nothing when it is no
    /// longer waiting (it let go meanwhile).
    pub fn decide(&mut self, app: &str, allowed: bool) -> Option<Offer> {
        if self.apps.get(app) != Some(&Stand::Waiting) {
            return None;
        }
        let first = self.first_open(app)?;
        let binary = first.stream.binary.clone();
        let offer = allowed.then(|| Offer {
            label: label(app, binary.as_deref()),
            app: app.to_string(),
            binary,
            since: stagewhisper_core::clock::fmt_time(
                chrono::DateTime::from_timestamp_millis(first.at_ms).unwrap_or_default(),
            ),
        });
        let stand = offer.clone().map_or(Stand::Quiet, Stand::Offered);
        self.apps.insert(app.to_string(), stand);
        offer
    }

    fn first_open(&self, app: &str) -> Option<&Open> {
        self.streams
            .values()
            .filter(|o| o.stream.app == app)
            .min_by_key(|o| o.at)
    }

    /// When the next application waiting is due.
    pub fn wake_at(&self) -> Option<Instant> {
        self.apps
            .iter()
            .filter(|(_, s)| **s == Stand::Waiting)
            .filter_map(|(a, _)| self.first_open(a).map(|o| o.at + HOLD))
            .min()
    }

    pub fn offers(&self) -> Vec<Offer> {
        self.apps
            .values()
            .filter_map(|s| match s {
                Stand::Offered(o) => Some(o.clone()),
                _ => None,
            })
            .collect()
    }

    /// Whether `app` holds a microphone now.
    pub fn holds(&self, app: &str) -> bool {
        self.apps.contains_key(app)
    }

    /// A call was started for `app` (offered, or holding the microphone again while its call
    /// was offered to end). `false`: it does not hold a microphone.
    pub fn accept(&mut self, app: &str, call_id: &str) -> bool {
        match self.apps.get_mut(app) {
            Some(s) => {
                *s = Stand::Accepted(call_id.to_string());
                true
            }
            None => false,
        }
    }

    /// "Not now": `false` when `app` was not offered.
    pub fn dismiss(&mut self, app: &str) -> bool {
        match self.apps.get_mut(app) {
            Some(s @ Stand::Offered(_)) => {
                *s = Stand::Quiet;
                true
            }
            _ => false,
        }
    }

    /// The offers withdrawn (detection switched off, or `app` now ignored): they go quiet.
    pub fn withdraw(&mut self, which: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut gone = Vec::new();
        for (app, s) in self.apps.iter_mut() {
            if matches!(s, Stand::Offered(_)) && which(app) {
                *s = Stand::Quiet;
                gone.push(app.clone());
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decides every application due at `now` with `allow`.
    fn settle(
        t: &mut Tracker,
        now: Instant,
        allow: &mut dyn FnMut(&str, Option<&str>) -> bool,
    ) -> Vec<Offer> {
        let due = t.due(now);
        due.iter()
            .filter_map(|(a, b)| {
                let ok = allow(a, b.as_deref());
                t.decide(a, ok)
            })
            .collect()
    }

    fn mic(index: u32, app: &str) -> MicStream {
        MicStream {
            index,
            app: app.into(),
            binary: Some(app.to_lowercase()),
        }
    }

    #[test]
    fn an_app_holding_the_microphone_two_seconds_is_offered_once() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let mut yes = |_: &str, _: Option<&str>| true;
        t.opened(mic(7, "zoom"), t0, 1_000);
        assert_eq!(t.wake_at(), Some(t0 + HOLD));
        assert!(settle(&mut t, t0 + Duration::from_millis(1999), &mut yes).is_empty());
        let o = settle(&mut t, t0 + HOLD, &mut yes);
        assert_eq!(o.len(), 1);
        assert_eq!(
            (o[0].app.as_str(), o[0].binary.as_deref()),
            ("zoom", Some("zoom"))
        );
        assert_eq!(o[0].since, "1970-01-01T00:00:01.000000Z");
        assert_eq!(t.offers(), o);
        assert_eq!(t.wake_at(), None, "nothing more to wait for");
        // A second stream of the same app: no second offer; the offer closes with the last.
        t.opened(mic(8, "zoom"), t0 + HOLD, 3_000);
        assert!(settle(&mut t, t0 + HOLD * 3, &mut yes).is_empty());
        assert_eq!(t.closed(7), None);
        let c = t.closed(8).unwrap();
        assert_eq!(
            (c.app.as_str(), c.was_offered, c.call_id),
            ("zoom", true, None)
        );
        assert!(t.offers().is_empty());
    }

    #[test]
    fn a_short_grab_a_refusal_and_not_now_offer_nothing() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        // Opened and closed within the hold: never offered, closing says nothing was.
        t.opened(mic(1, "slack"), t0, 0);
        let c = t.closed(1).unwrap();
        assert!(!c.was_offered);
        assert_eq!(t.wake_at(), None);
        // Not allowed when due (a call running, ignored): quiet until it lets go.
        t.opened(mic(2, "teams"), t0, 0);
        assert!(settle(&mut t, t0 + HOLD, &mut |_, _| false).is_empty());
        assert!(settle(&mut t, t0 + HOLD * 2, &mut |_, _| true).is_empty());
        t.closed(2);
        // Taken anew: offered; "not now" withdraws it; accepting ties the call to it.
        t.opened(mic(3, "teams"), t0 + HOLD * 3, 0);
        assert_eq!(settle(&mut t, t0 + HOLD * 4, &mut |_, _| true).len(), 1);
        assert!(t.dismiss("teams"));
        assert!(!t.dismiss("teams"));
        assert!(t.offers().is_empty());
        assert!(t.accept("teams", "call-1"));
        assert_eq!(t.closed(3).unwrap().call_id.as_deref(), Some("call-1"));
        assert!(
            !t.accept("teams", "call-1"),
            "no longer holds the microphone"
        );
    }

    #[test]
    fn the_server_going_closes_everything_and_withdraw_quiets_offers() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        t.opened(mic(1, "zoom"), t0, 0);
        t.opened(mic(2, "discord"), t0, 0);
        assert_eq!(settle(&mut t, t0 + HOLD, &mut |_, _| true).len(), 2);
        assert_eq!(t.withdraw(&|a| a == "discord"), ["discord"]);
        assert_eq!(t.offers().len(), 1);
        let mut closed = t.clear();
        closed.sort_by(|a, b| a.app.cmp(&b.app));
        assert_eq!(closed.len(), 2);
        assert!(!closed[0].was_offered && closed[1].was_offered);
        assert!(!t.holds("zoom"));
    }
}
