//! Call detection in the service: the detector switched on and off with its setting, its
//! offers answered (accept, not now, never for this app), and a call started from an offer
//! offered to end (or ended after the grace period) when its application lets go of the
//! microphone.

use super::AudioService;
use crate::detect::{self, Closed, DetectState, Detector, Hooks};
use crate::pipeline::Shared;
use stagewhisper_core::audio::AudioError;
use stagewhisper_core::clock::fmt_time;
use stagewhisper_core::detect::{
    not_offered, DetectionStatus, DetectionUpdate, DetectionView, EndOffer, Offer, MAX_IGNORED,
};
use stagewhisper_core::events::Change;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The service's part of call detection.
pub(super) struct Detection {
    state: Arc<Mutex<DetectState>>,
    /// Calls started from an offer whose application let go of the microphone.
    ends: Arc<Mutex<Vec<EndOffer>>>,
    detector: Mutex<Option<Detector>>,
}

impl Detection {
    pub fn new() -> Detection {
        Detection {
            state: DetectState::new(),
            ends: Arc::default(),
            detector: Mutex::new(None),
        }
    }
}

/// The detector's hooks: the service, held weakly (the detector lives inside it).
struct ServiceHooks {
    service: Weak<AudioService>,
    shared: Arc<Shared>,
}

impl AudioService {
    /// Starts or stops the detector to match the settings.
    pub(super) fn switch_detection(&self) {
        let enabled = self.shared.settings().detection.enabled;
        let mut d = self.detection.detector.lock().unwrap();
        match (enabled, d.is_some()) {
            (true, false) => {
                let hooks = Arc::new(ServiceHooks {
                    service: self.me.clone(),
                    shared: self.shared.clone(),
                });
                *d = Some(Detector::start(self.detection.state.clone(), hooks));
            }
            (false, true) => {
                // Joined off the lock's holders: the thread's last reports take the state.
                let old = d.take();
                drop(d);
                drop(old);
                let mut st = self.detection.state.lock().unwrap();
                st.status = detect::off();
                let gone = st.tracker.withdraw(&|_| true);
                drop(st);
                for app in gone {
                    self.publish_closed(&app, None, None);
                }
                self.publish_status();
            }
            _ => {}
        }
    }

    /// Stops the detector (its thread joined off the async workers).
    pub(super) async fn stop_detection(&self) {
        let d = self.detection.detector.lock().unwrap().take();
        if let Some(d) = d {
            let _ = self.blocking(move || drop(d)).await;
        }
    }

    pub(super) fn detection_view(&self) -> DetectionView {
        let settings = self.shared.settings().detection;
        let st = self.detection.state.lock().unwrap();
        let listening = self.shared.state.lock().unwrap().listening.clone();
        DetectionView {
            enabled: settings.enabled,
            offers: st.tracker.offers(),
            ignored_apps: settings.ignored_apps,
            end_after_secs: settings.end_after_secs,
            end_offers: self
                .detection
                .ends
                .lock()
                .unwrap()
                .iter()
                .filter(|e| listening.as_deref() == Some(e.call_id.as_str()))
                .cloned()
                .collect(),
            status: st.status.clone(),
        }
    }

    pub(super) async fn update_detection(
        &self,
        update: DetectionUpdate,
    ) -> Result<DetectionView, AudioError> {
        self.save_detection(|d| *d = d.apply(&update)).await?;
        Ok(self.detection_view())
    }

    /// Saves the detection settings after `change`, then withdraws what they now forbid.
    async fn save_detection(
        &self,
        change: impl FnOnce(&mut stagewhisper_core::detect::DetectionSettings),
    ) -> Result<(), AudioError> {
        let _c = self.control.lock().await;
        let mut next = self.shared.settings();
        change(&mut next.detection);
        let listening = self.shared.state.lock().unwrap().listening.clone();
        self.saved.save(&next, listening.as_deref())?;
        self.shared.state.lock().unwrap().settings = next.clone();
        let gone = self
            .detection
            .state
            .lock()
            .unwrap()
            .tracker
            .withdraw(&|app| next.detection.ignores(app, None));
        for app in gone {
            self.publish_closed(&app, None, None);
        }
        self.switch_detection();
        Ok(())
    }

    pub(super) fn accepted(&self, app: &str, call_id: &str) {
        let tied = self
            .detection
            .state
            .lock()
            .unwrap()
            .tracker
            .accept(app, call_id);
        if tied {
            self.publish_closed(app, None, None);
        }
    }

    pub(super) async fn dismiss(
        &self,
        app: &str,
        never: bool,
    ) -> Result<DetectionView, AudioError> {
        let was_offered = self.detection.state.lock().unwrap().tracker.dismiss(app);
        let kept_call = {
            let mut ends = self.detection.ends.lock().unwrap();
            let n = ends.len();
            ends.retain(|e| e.app != app);
            ends.len() != n
        };
        if was_offered {
            self.publish_closed(app, None, None);
        }
        if never {
            let d = self.shared.settings().detection;
            if !d.ignores(app, None) && d.ignored_apps.len() >= MAX_IGNORED {
                return Err(AudioError::bad(
                    "invalid_field",
                    format!(
                        "at most {MAX_IGNORED} apps are never offered: take one off the list in \
                         Settings first"
                    ),
                ));
            }
            self.save_detection(|d| d.ignore(app)).await?;
        } else if !was_offered && !kept_call {
            return Err(not_offered(app));
        }
        Ok(self.detection_view())
    }

    fn publish_closed(&self, app: &str, call_id: Option<String>, ends_at: Option<String>) {
        self.shared.ctx.publish_live(Change::CallOfferClosed {
            app: app.to_string(),
            call_id,
            ends_at,
        });
    }

    fn publish_status(&self) {
        // The detection status shows in `GET /api/audio/detection`; views refresh on this.
        let st = self.detection.state.lock().unwrap().status.clone();
        tracing::info!(state = %st.state, detail = %st.detail, "call detection");
    }

    /// The application of a call started from its offer let go of the microphone.
    fn app_closed(self: &Arc<Self>, c: Closed) {
        let listening = self.shared.state.lock().unwrap().listening.clone();
        let call_id = c.call_id.filter(|id| listening.as_deref() == Some(id));
        let Some(call_id) = call_id else {
            if c.was_offered {
                self.publish_closed(&c.app, None, None);
            }
            return;
        };
        let grace = self.shared.settings().detection.end_after_secs;
        let ends_at = grace.map(|s| {
            fmt_time(
                chrono::DateTime::from_timestamp_millis(self.shared.now_ms() + s as i64 * 1000)
                    .unwrap_or_default(),
            )
        });
        let end = EndOffer {
            app: c.app.clone(),
            call_id: call_id.clone(),
            ends_at: ends_at.clone(),
        };
        {
            let mut ends = self.detection.ends.lock().unwrap();
            ends.retain(|e| e.app != c.app);
            ends.push(end.clone());
        }
        tracing::info!(app = %c.app, %call_id, "the call's app let go of the microphone");
        self.publish_closed(&c.app, Some(call_id), ends_at);
        if let Some(secs) = grace {
            let me = self.clone();
            self.shared.rt.spawn(async move {
                tokio::time::sleep(Duration::from_secs(secs as u64)).await;
                me.end_after_grace(end).await;
            });
        }
    }

    async fn end_after_grace(&self, end: EndOffer) {
        let still = {
            let mut ends = self.detection.ends.lock().unwrap();
            let n = ends.len();
            ends.retain(|e| *e != end);
            ends.len() != n
        };
        if !still {
            return;
        }
        use stagewhisper_core::audio::Ears;
        self.stop(Some(&end.call_id)).await;
        match self.shared.ctx.conversation.end_call(&end.call_id).await {
            Ok(_) => {
                tracing::info!(call_id = %end.call_id, "the call ended after its app let go of the microphone")
            }
            Err(e) => tracing::warn!(error = %e, "the call could not end by itself"),
        }
    }

    /// `app` holds a microphone again: a call offered to end goes on, tied to it.
    fn app_back(&self, app: &str) {
        let end = {
            let mut ends = self.detection.ends.lock().unwrap();
            let i = ends.iter().position(|e| e.app == app);
            i.map(|i| ends.remove(i))
        };
        if let Some(end) = end {
            self.detection
                .state
                .lock()
                .unwrap()
                .tracker
                .accept(app, &end.call_id);
            self.publish_closed(app, None, None);
        }
    }
}

impl Hooks for ServiceHooks {
    fn allow(&self, app: &str, binary: Option<&str>) -> bool {
        let d = self.shared.settings().detection;
        if !d.enabled || d.ignores(app, binary) {
            return false;
        }
        if self.shared.state.lock().unwrap().listening.is_some() {
            return false;
        }
        // No call running (a live call that does not listen counts too).
        match self
            .shared
            .rt
            .block_on(self.shared.ctx.conversation.sessions())
        {
            Ok(s) => !s.iter().any(|s| s.is_call && s.ended_at.is_none()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether a call is running: no offer");
                false
            }
        }
    }

    fn offered(&self, offer: &Offer) {
        self.shared.ctx.publish_live(Change::CallOffered {
            app: offer.app.clone(),
            binary: offer.binary.clone(),
            label: offer.label.clone(),
        });
    }

    fn closed(&self, closed: Closed) {
        if let Some(s) = self.service.upgrade() {
            s.app_closed(closed);
        }
    }

    fn reopened(&self, app: &str) {
        if let Some(s) = self.service.upgrade() {
            s.app_back(app);
        }
    }

    fn status(&self, _status: DetectionStatus) {
        if let Some(s) = self.service.upgrade() {
            s.publish_status();
        }
    }

    fn now_ms(&self) -> i64 {
        self.shared.now_ms()
    }
}
