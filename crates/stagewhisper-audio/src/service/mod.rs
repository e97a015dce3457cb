//! [`AudioService`]: the pipeline behind the control API ([`stagewhisper_core::audio::Ears`]).
//!
//! - **Settings** in the settings store's `audio` section (`settings`), and the call being
//!   listened to in `audio_listening.json`, so listening resumes after a restart (or a crash)
//!   when that call is still live.
//! - **Status** ([`AudioStatus`](stagewhisper_core::audio::AudioStatus)): the state as a
//!   whole, each channel, the engine and the backlog, with a `detail` in plain words for the
//!   call bar; published as an `audio_status` live event on every change. The state and its
//!   status live with the pipeline's threads, which change them (`pipeline::status`).
//! - **Listen / stop**, one call at a time, one control request at a time. Changing a source or
//!   the engine while listening takes effect at once, without stopping the call: a channel
//!   whose source changed starts again (its turn in progress ends there); the next turn uses
//!   the new engine, and so does the backlog.
//! - **Test** (`sound_check`: record a few seconds of a channel and transcribe them) and
//!   **meters** (`levels`: levels without listening, for Settings).

mod detection;
mod engine_check;
mod levels;
mod settings;
mod silence;
mod sound_check;

pub use settings::{AudioSection, LISTENING_FILE, SETTINGS_FILE};

use crate::backlog::Backlog;
use crate::capture::{self, CaptureError, Source};
use crate::engine::EngineSettings;
use crate::pipeline::{self, capitalise, channel_words, ChannelState, ChannelWorker, Shared};
use crate::settings::AudioSettings;
use detection::Detection;
use levels::{run_meters, Meters, Ticker};
use settings::{check_named, newly_named, Saved};
use sound_check::record_and_transcribe;
use stagewhisper_core::assistants::BoxFuture;
use stagewhisper_core::audio::{
    AudioError, AudioTest, AudioTestResult, AudioUpdate, AudioView, Channel, Ears, EarsContext,
    EarsFactory, EngineUpdate, SourceView,
};
use stagewhisper_core::detect::{DetectionUpdate, DetectionView};
use stagewhisper_core::engine_check::EngineCheck;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long stopping waits for the turns in flight to be transcribed and stored.
pub const STOP_WAIT: Duration = Duration::from_secs(10);

/// The pipeline's factory for `Config::ears` (both binaries).
pub fn factory() -> EarsFactory {
    Box::new(|ctx: EarsContext| AudioService::start(ctx) as Arc<dyn Ears>)
}

/// One listening call.
struct Listening {
    call_id: String,
    workers: Vec<ChannelWorker>,
    ticker: Ticker,
}

struct Control {
    listening: Option<Listening>,
    meters: Option<Meters>,
}

/// The audio pipeline of the app.
pub struct AudioService {
    shared: Arc<Shared>,
    /// Where the settings and the call listened to are saved.
    saved: Saved,
    control: tokio::sync::Mutex<Control>,
    drainer: Mutex<Option<JoinHandle<()>>>,
    /// Call detection (`detection`).
    detection: Detection,
    /// Itself, for the threads it starts (call detection).
    me: Weak<AudioService>,
    /// "Transcribe again" (`crate::recording::again`).
    again: Arc<crate::recording::again::Transcriber>,
}

impl AudioService {
    /// Starts the service: settings and backlog read, the engine loading, the backlog's
    /// drainer running, and listening resumed if it was on for a call that is still live.
    pub fn start(ctx: EarsContext) -> Arc<AudioService> {
        let (saved, settings, listening) = Saved::open(
            ctx.settings.clone(),
            &ctx.data_dir,
            &crate::models::models_dir(&ctx.data_dir),
        );
        let backlog = Backlog::open(&ctx.data_dir).unwrap_or_else(|e| {
            tracing::error!(error = %e, "the backlog folder cannot be used: waiting turns are kept in memory only");
            Backlog::in_memory()
        });
        let again = crate::recording::again::Transcriber::new(
            ctx.clone(),
            crate::models::models_dir(&ctx.data_dir),
        );
        let shared = Arc::new(Shared::new(ctx, &settings, backlog));
        let drainer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sw-backlog".into())
                .spawn(move || pipeline::drain(shared))
                .expect("spawn the backlog thread")
        };
        let service = Arc::new_cyclic(|me| AudioService {
            shared,
            saved,
            control: tokio::sync::Mutex::new(Control {
                listening: None,
                meters: None,
            }),
            drainer: Mutex::new(Some(drainer)),
            detection: Detection::new(),
            me: me.clone(),
            again,
        });
        service.switch_detection();
        if let Some(call) = listening {
            let s = service.clone();
            service.shared.rt.spawn(async move { s.resume(call).await });
        }
        service
    }

    /// Listening was on for `call` when the app stopped: on again if the call is still live.
    async fn resume(self: Arc<Self>, call: String) {
        let live = match self.shared.ctx.conversation.sessions().await {
            Ok(sessions) => sessions
                .iter()
                .any(|s| s.session_id == call && s.is_call && s.ended_at.is_none()),
            Err(e) => {
                tracing::error!(error = %e, "cannot tell whether the call listened to is still live");
                false
            }
        };
        if live {
            tracing::info!(call_id = %call, "listening resumes after a restart");
            if let Err(e) = self.listen_to(&call).await {
                tracing::error!(error = %e, "listening could not resume");
            }
        } else {
            let settings = self.shared.settings();
            let _ = self.saved.save(&settings, None);
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, AudioError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| AudioError::internal("internal_error", e.to_string()))
    }

    async fn listen_to(&self, call_id: &str) -> Result<(), AudioError> {
        let mut c = self.control.lock().await;
        if c.listening.as_ref().is_some_and(|l| l.call_id == call_id) {
            return Ok(());
        }
        if let Some(l) = c.listening.take() {
            self.stop_listening(l).await;
        }
        let settings = self.shared.settings();
        stagewhisper_core::recordings::apply_default(
            &self.shared.ctx.data_dir,
            call_id,
            settings.keep_audio,
        );
        self.saved.save(&settings, Some(call_id))?;
        // Levels come from the listening channels now.
        c.meters = None;
        {
            let mut st = self.shared.state.lock().unwrap();
            st.listening = Some(call_id.to_string());
            st.channels.clear();
        }
        let mut workers = Vec::new();
        for ch in Channel::BOTH {
            let choice = settings.source(ch).clone();
            if !choice.is_off() {
                self.shared
                    .state
                    .lock()
                    .unwrap()
                    .channels
                    .insert(ch, ChannelState::Starting);
                workers.push(ChannelWorker::start(&self.shared, call_id, ch, choice));
            }
        }
        let on = self.shared.clone();
        let silence = silence::Silence::new(call_id, self.shared.now_ms());
        let ticker = Ticker::watching(
            &self.shared,
            move |ch| {
                matches!(
                    on.state.lock().unwrap().channels.get(&ch),
                    Some(ChannelState::Recording(_))
                )
            },
            Some(silence),
        );
        c.listening = Some(Listening {
            call_id: call_id.to_string(),
            workers,
            ticker,
        });
        tracing::info!(%call_id, "listening");
        self.shared.changed();
        Ok(())
    }

    /// Stops a listening call's channels and waits (at most [`STOP_WAIT`]) for the turns in
    /// flight to be transcribed and stored (or kept in the backlog).
    async fn stop_listening(&self, l: Listening) {
        let Listening {
            call_id,
            workers,
            ticker,
        } = l;
        drop(ticker);
        let shared = self.shared.clone();
        let _ = self
            .blocking(move || {
                let recognizers: Vec<_> = workers.into_iter().filter_map(|w| w.stop()).collect();
                let deadline = Instant::now() + STOP_WAIT;
                for r in recognizers {
                    while !r.is_finished() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    if r.is_finished() {
                        let _ = r.join();
                    } else {
                        tracing::warn!(
                            "a turn is still being transcribed; it will be stored when done"
                        );
                    }
                }
                let mut st = shared.state.lock().unwrap();
                st.listening = None;
                st.channels.clear();
            })
            .await;
        tracing::info!(%call_id, "stopped listening");
        self.shared.changed();
        self.speaker_pass(&call_id).await;
    }

    /// The end-of-call speaker pass (`crate::speakers`): the stored turns whose speaker
    /// changed with the whole call in view are relabelled.
    async fn speaker_pass(&self, call_id: &str) {
        let (shared, id) = (self.shared.clone(), call_id.to_string());
        let turns = self
            .blocking(move || shared.speakers.finish(&id))
            .await
            .unwrap_or_default();
        if turns.is_empty() {
            return;
        }
        let change = stagewhisper_core::conversation::SpeakerChange::Turns(turns);
        match self
            .shared
            .ctx
            .conversation
            .set_speakers(call_id, change)
            .await
        {
            Ok(n) => tracing::info!(%call_id, relabelled = n, "speakers after the call"),
            Err(e) => {
                tracing::warn!(%call_id, error = %e, "the end-of-call speaker pass was not stored")
            }
        }
    }

    /// A source newly named must exist when the server can tell.
    async fn check_sources(
        &self,
        current: &AudioSettings,
        next: &AudioSettings,
    ) -> Result<(), AudioError> {
        let named = newly_named(current, next);
        if !named.is_empty() {
            match self.list().await {
                Ok(list) => check_named(&named, &list)?,
                // Without a server the name is kept as chosen: it is used when it appears.
                Err(e) => tracing::info!(error = %e, "a source name saved unchecked"),
            }
        }
        Ok(())
    }

    /// The next turn uses the new engine, and so does the backlog.
    async fn change_engine(&self, settings: &EngineSettings) {
        let generation = self.shared.replace_engine(settings.clone());
        tracing::info!(
            kind = settings.kind(),
            generation,
            "the speech engine changed"
        );
        // Built now, so Settings shows at once whether it can run here.
        let shared = self.shared.clone();
        let _ = self.blocking(move || shared.engine().map(|_| ())).await;
    }

    /// The channels of the call listened to whose source changed start again.
    async fn restart_sources(
        &self,
        l: &mut Listening,
        current: &AudioSettings,
        next: &AudioSettings,
    ) {
        let mut restart = Vec::new();
        for ch in Channel::BOTH {
            if next.source(ch) != current.source(ch) {
                restart.push(ch);
            }
        }
        if restart.is_empty() {
            return;
        }
        let mut old = Vec::new();
        let mut keep = Vec::new();
        for w in l.workers.drain(..) {
            if restart.contains(&w.channel) {
                old.push(w);
            } else {
                keep.push(w);
            }
        }
        l.workers = keep;
        // The old capture ends its turn in progress; its recognizer finishes alone.
        let _ = self
            .blocking(move || {
                for w in old {
                    let _ = w.stop();
                }
            })
            .await;
        for ch in restart {
            let choice = next.source(ch).clone();
            let mut st = self.shared.state.lock().unwrap();
            if choice.is_off() {
                st.channels.remove(&ch);
            } else {
                st.channels.insert(ch, ChannelState::Starting);
                drop(st);
                l.workers
                    .push(ChannelWorker::start(&self.shared, &l.call_id, ch, choice));
            }
        }
    }

    /// The sources, or `503 audio_unavailable` with the reason.
    async fn list(&self) -> Result<Vec<Source>, AudioError> {
        self.blocking(capture::sources)
            .await?
            .map_err(|e| AudioError::unavailable(unavailable_words(&e)))
    }
}

fn unavailable_words(e: &CaptureError) -> String {
    match e {
        CaptureError::Unavailable(why) => capitalise(why) + ".",
        CaptureError::Server(why) => format!("The sound server did not answer: {why}."),
    }
}

impl Ears for AudioService {
    fn sources(&self) -> BoxFuture<'_, Result<Vec<SourceView>, AudioError>> {
        Box::pin(async move { Ok(self.list().await?.iter().map(Source::view).collect()) })
    }

    fn view(&self) -> AudioView {
        let mut view = self.shared.settings().view(self.shared.status());
        (view.speakers.available, view.speakers.detail) = self.shared.speakers.availability();
        view
    }

    fn update(&self, update: AudioUpdate) -> BoxFuture<'_, Result<AudioView, AudioError>> {
        Box::pin(async move {
            let mut c = self.control.lock().await;
            let current = self.shared.settings();
            let next = current.apply(&update);
            self.check_sources(&current, &next).await?;
            let listening = self.shared.state.lock().unwrap().listening.clone();
            self.saved.save(&next, listening.as_deref())?;
            self.shared.state.lock().unwrap().settings = next.clone();
            if next.engine != current.engine {
                self.change_engine(&next.engine).await;
            }
            // Sources: a channel whose choice changed starts again at once.
            if let Some(l) = c.listening.as_mut() {
                self.restart_sources(l, &current, &next).await;
            }
            drop(c);
            self.shared.changed();
            Ok(self.view())
        })
    }

    fn listen(&self, call_id: &str) -> BoxFuture<'_, Result<(), AudioError>> {
        let call_id = call_id.to_string();
        Box::pin(async move { self.listen_to(&call_id).await })
    }

    fn stop(&self, call_id: Option<&str>) -> BoxFuture<'_, ()> {
        let call_id = call_id.map(str::to_string);
        Box::pin(async move {
            let mut c = self.control.lock().await;
            let matches = c
                .listening
                .as_ref()
                .is_some_and(|l| call_id.as_deref().is_none_or(|id| id == l.call_id));
            if !matches {
                return;
            }
            let l = c.listening.take().expect("checked");
            self.stop_listening(l).await;
            let settings = self.shared.settings();
            if let Err(e) = self.saved.save(&settings, None) {
                tracing::error!(error = %e, "cannot save that listening stopped");
            }
        })
    }

    fn rename_speaker(
        &self,
        call_id: &str,
        label: &str,
        name: &str,
    ) -> Option<stagewhisper_core::audio::SpeakerPrint> {
        self.shared.speakers.rename(call_id, label, name)
    }

    fn listening(&self) -> Option<String> {
        self.shared.state.lock().unwrap().listening.clone()
    }

    fn transcribe_again(
        &self,
        call_id: &str,
        request: stagewhisper_core::recordings::TranscribeRequest,
    ) -> BoxFuture<'_, Result<stagewhisper_core::recordings::TranscribeView, AudioError>> {
        let r = self.again.start(call_id, request);
        Box::pin(async move { r })
    }

    fn transcribing(&self, call_id: &str) -> Option<stagewhisper_core::recordings::TranscribeView> {
        self.again.latest(call_id)
    }

    fn test(&self, test: AudioTest) -> BoxFuture<'_, Result<AudioTestResult, AudioError>> {
        Box::pin(async move {
            let channel = test.channel.unwrap_or(Channel::Mic);
            let seconds = test.seconds.unwrap_or(3).clamp(1, 10);
            let settings = self.shared.settings();
            let choice = settings.source(channel).clone();
            if choice.is_off() {
                return Err(AudioError::bad(
                    "channel_off",
                    format!(
                        "{} is off: choose a source for it first",
                        capitalise(channel_words(channel))
                    ),
                ));
            }
            // One application's sound is not a source to record on its own: it is heard only
            // while a call listens (it follows the app's streams).
            if let stagewhisper_core::audio::SourceChoice::App(app) = &choice {
                return Err(AudioError {
                    status: 409,
                    code: "app_only",
                    message: format!(
                        "{} is set to hear only “{app}”, which is heard while a call listens: \
                         choose a device for the test",
                        capitalise(channel_words(channel))
                    ),
                });
            }
            let list = self.list().await?;
            let src = capture::resolve(channel, &choice, &list).map_err(|why| AudioError {
                status: 503,
                code: "source_unavailable",
                message: capitalise(&why) + ".",
            })?;
            // The call hears the same sources: what a test records would also become turns of
            // the call's transcript.
            if self.listening().is_some() {
                return Err(AudioError {
                    status: 409,
                    code: "listening",
                    message: "A call is being listened to: what a test records would go into \
                              its transcript. Watch the call bar's meters, or stop listening \
                              to test."
                        .into(),
                });
            }
            let shared = self.shared.clone();
            self.blocking(move || record_and_transcribe(&shared, channel, &choice, src, seconds))
                .await?
        })
    }

    fn check_engine(
        &self,
        engine: Option<EngineUpdate>,
    ) -> BoxFuture<'_, Result<EngineCheck, AudioError>> {
        Box::pin(async move {
            let settings = engine_check::settings_to_try(&self.shared, engine);
            let shared = self.shared.clone();
            self.blocking(move || engine_check::try_engine(&shared, settings))
                .await
        })
    }

    fn meters(&self, seconds: u32) -> BoxFuture<'_, Result<(), AudioError>> {
        Box::pin(async move {
            let mut c = self.control.lock().await;
            let until = self.shared.now_ms() + seconds as i64 * 1000;
            if c.listening.is_some() {
                return Ok(());
            }
            if let Some(m) = &c.meters {
                if !m.thread.is_finished() {
                    m.until.fetch_max(until, Ordering::SeqCst);
                    return Ok(());
                }
            }
            // Says at once when there is no sound server to measure.
            self.list().await?;
            let settings = self.shared.settings();
            let until = Arc::new(AtomicI64::new(until));
            let (shared, u) = (self.shared.clone(), until.clone());
            let thread = std::thread::Builder::new()
                .name("sw-meters".into())
                .spawn(move || run_meters(&shared, &settings, &u))
                .map_err(|e| AudioError::internal("internal_error", e.to_string()))?;
            c.meters = Some(Meters { until, thread });
            Ok(())
        })
    }

    fn detection(&self) -> Result<DetectionView, AudioError> {
        Ok(self.detection_view())
    }

    fn set_detection(
        &self,
        update: DetectionUpdate,
    ) -> BoxFuture<'_, Result<DetectionView, AudioError>> {
        Box::pin(self.update_detection(update))
    }

    fn offer_accepted(&self, app: &str, call_id: &str) {
        self.accepted(app, call_id);
    }

    fn dismiss_offer(
        &self,
        app: &str,
        never: bool,
    ) -> BoxFuture<'_, Result<DetectionView, AudioError>> {
        let app = app.to_string();
        Box::pin(async move { self.dismiss(&app, never).await })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.stop_detection().await;
            let mut c = self.control.lock().await;
            c.meters = None;
            if let Some(l) = c.listening.take() {
                // Listening stays on in the settings: it resumes at the next start.
                self.stop_listening(l).await;
            }
            self.shared.stopping.store(true, Ordering::SeqCst);
            self.shared.finals.kick();
            let drainer = self.drainer.lock().unwrap().take();
            if let Some(d) = drainer {
                let _ = self
                    .blocking(move || {
                        let deadline = Instant::now() + Duration::from_secs(5);
                        while !d.is_finished() && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    })
                    .await;
            }
        })
    }
}
