//! [`AudioService`]: the pipeline behind the control API ([`stagewhisper_core::audio::Ears`]).
//!
//! - **Settings** in `<data_dir>/audio.json` (mode 0600: it may hold an API key; written to a
//!   temporary file, fsynced, renamed), with the call being listened to, so listening resumes
//!   after a restart (or a crash) when that call is still live.
//! - **Status** ([`AudioStatus`](stagewhisper_core::audio::AudioStatus)): the state as a
//!   whole, each channel, the engine and the backlog, with a `detail` in plain words for the
//!   call bar; published as an `audio_status` live event on every change. The state and its
//!   status live with the pipeline's threads, which change them (`pipeline::status`).
//! - **Listen / stop**, one call at a time, one control request at a time. Changing a source or
//!   the engine while listening takes effect at once, without stopping the call: a channel
//!   whose source changed starts again (its turn in progress ends there); the next turn uses
//!   the new engine, and so does the backlog.
//! - **Test** (record a few seconds of a channel and transcribe them) and **meters** (levels
//!   without listening, for Settings).

use crate::backlog::Backlog;
use crate::capture::{self, CaptureError, Source};
use crate::pcm::Resampler;
use crate::pipeline::{
    self, capitalise, channel_words, engine_words, lower_first, ChannelState, ChannelWorker, Shared,
};
use serde::{Deserialize, Serialize};
use stagewhisper_core::assistants::BoxFuture;
use stagewhisper_core::audio::{
    AudioError, AudioSettings, AudioTest, AudioTestResult, AudioUpdate, AudioView, Channel, Ears,
    EarsContext, EarsFactory, SourceChoice, SourceView,
};
use stagewhisper_core::events::Change;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The settings file under the data dir.
pub const SETTINGS_FILE: &str = "audio.json";
/// How long stopping waits for the turns in flight to be transcribed and stored.
pub const STOP_WAIT: Duration = Duration::from_secs(10);
/// How often levels are published.
const LEVEL_EVERY: Duration = Duration::from_millis(100);

/// The pipeline's factory for `Config::ears` (both binaries).
pub fn factory() -> EarsFactory {
    Box::new(|ctx: EarsContext| AudioService::start(ctx) as Arc<dyn Ears>)
}

// ---------------------------------------------------------------------------------------------
// The settings file
// ---------------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct SavedFile {
    #[serde(flatten)]
    settings: AudioSettings,
    /// The call being listened to (resumed after a restart while it is live).
    #[serde(default)]
    listening: Option<String>,
}

fn load_settings(path: &Path) -> (AudioSettings, Option<String>) {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice::<SavedFile>(&bytes) {
            Ok(f) => (f.settings, f.listening),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "the audio settings cannot be read: defaults used, the file kept as .bad");
                let _ = std::fs::rename(path, path.with_extension("json.bad"));
                (AudioSettings::default(), None)
            }
        },
        Err(_) => (AudioSettings::default(), None),
    }
}

fn save_settings(
    path: &Path,
    settings: &AudioSettings,
    listening: Option<&str>,
) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(&SavedFile {
        settings: settings.clone(),
        listening: listening.map(str::to_string),
    })
    .expect("serializable");
    let tmp = path.with_extension("json.tmp");
    // A leftover temporary file would keep its own mode: start afresh (0600).
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/// One listening call.
struct Listening {
    call_id: String,
    workers: Vec<ChannelWorker>,
    ticker: Ticker,
}

/// Levels published about ten times a second while it lives.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(shared: &Arc<Shared>, on: impl Fn(Channel) -> bool + Send + 'static) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, shared) = (stop.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("sw-levels".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    std::thread::sleep(LEVEL_EVERY);
                    let level = |ch: Channel| -> Option<f32> {
                        let v = shared.levels.take(ch);
                        on(ch).then(|| (v * 1000.0).round() / 1000.0)
                    };
                    let (mic, system) = (level(Channel::Mic), level(Channel::System));
                    shared.ctx.publish_live(Change::AudioLevel { mic, system });
                }
            })
            .expect("spawn the levels thread");
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Levels without listening: captures that only measure, until a deadline.
struct Meters {
    until: Arc<AtomicI64>,
    thread: JoinHandle<()>,
}

struct Control {
    listening: Option<Listening>,
    meters: Option<Meters>,
}

/// The audio pipeline of the app.
pub struct AudioService {
    shared: Arc<Shared>,
    control: tokio::sync::Mutex<Control>,
    drainer: Mutex<Option<JoinHandle<()>>>,
}

impl AudioService {
    /// Starts the service: settings and backlog read, the engine loading, the backlog's
    /// drainer running, and listening resumed if it was on for a call that is still live.
    pub fn start(ctx: EarsContext) -> Arc<AudioService> {
        let settings_path = ctx.data_dir.join(SETTINGS_FILE);
        let (settings, listening) = load_settings(&settings_path);
        let backlog = Backlog::open(&ctx.data_dir).unwrap_or_else(|e| {
            tracing::error!(error = %e, "the backlog folder cannot be used: waiting turns are kept in memory only");
            Backlog::in_memory()
        });
        let shared = Arc::new(Shared::new(ctx, &settings, backlog, settings_path));
        let drainer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sw-backlog".into())
                .spawn(move || pipeline::drain(shared))
                .expect("spawn the backlog thread")
        };
        let service = Arc::new(AudioService {
            shared,
            control: tokio::sync::Mutex::new(Control {
                listening: None,
                meters: None,
            }),
            drainer: Mutex::new(Some(drainer)),
        });
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
            let _ = save_settings(&self.shared.settings_path, &settings, None);
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
        save_settings(&self.shared.settings_path, &settings, Some(call_id)).map_err(|e| {
            AudioError::internal(
                "config_write_failed",
                format!("the audio settings cannot be saved: {e}"),
            )
        })?;
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
        let ticker = Ticker::start(&self.shared, move |ch| {
            matches!(
                on.state.lock().unwrap().channels.get(&ch),
                Some(ChannelState::Recording(_))
            )
        });
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
        AudioView::new(&self.shared.settings(), self.shared.status())
    }

    fn update(&self, update: AudioUpdate) -> BoxFuture<'_, Result<AudioView, AudioError>> {
        Box::pin(async move {
            let mut c = self.control.lock().await;
            let current = self.shared.settings();
            let next = current.apply(&update);
            // A source newly named must exist when the server can tell.
            let named: Vec<(&str, String)> = [("mic", Channel::Mic), ("system", Channel::System)]
                .into_iter()
                .filter_map(|(field, ch)| match next.source(ch) {
                    SourceChoice::Named(n) if next.source(ch) != current.source(ch) => {
                        Some((field, n.clone()))
                    }
                    _ => None,
                })
                .collect();
            if !named.is_empty() {
                match self.list().await {
                    Ok(list) => {
                        for (field, name) in &named {
                            if !list.iter().any(|s| &s.name == name) {
                                return Err(AudioError::bad(
                                    "unknown_source",
                                    format!(
                                        "`{field}`: the sound server has no source “{name}” \
                                         (it has: {})",
                                        list.iter()
                                            .map(|s| s.name.as_str())
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    ),
                                ));
                            }
                        }
                    }
                    // Without a server the name is kept as chosen: it is used when it appears.
                    Err(e) => tracing::info!(error = %e, "a source name saved unchecked"),
                }
            }
            let listening = self.shared.state.lock().unwrap().listening.clone();
            save_settings(&self.shared.settings_path, &next, listening.as_deref()).map_err(
                |e| {
                    AudioError::internal(
                        "config_write_failed",
                        format!("the audio settings cannot be saved: {e}"),
                    )
                },
            )?;
            self.shared.state.lock().unwrap().settings = next.clone();
            if next.engine != current.engine {
                let generation = self.shared.replace_engine(next.engine.clone());
                tracing::info!(
                    kind = next.engine.kind(),
                    generation,
                    "the speech engine changed"
                );
                // Built now, so Settings shows at once whether it can run here.
                let shared = self.shared.clone();
                let _ = self.blocking(move || shared.engine().map(|_| ())).await;
            }
            // Sources: a channel whose choice changed starts again at once.
            if let Some(l) = c.listening.as_mut() {
                let mut restart = Vec::new();
                for ch in Channel::BOTH {
                    if next.source(ch) != current.source(ch) {
                        restart.push(ch);
                    }
                }
                if !restart.is_empty() {
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
                            l.workers.push(ChannelWorker::start(
                                &self.shared,
                                &l.call_id,
                                ch,
                                choice,
                            ));
                        }
                    }
                }
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
            if let Err(e) = save_settings(&self.shared.settings_path, &settings, None) {
                tracing::error!(error = %e, "cannot save that listening stopped");
            }
        })
    }

    fn listening(&self) -> Option<String> {
        self.shared.state.lock().unwrap().listening.clone()
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
            let list = self.list().await?;
            let src = capture::resolve(channel, &choice, &list).map_err(|why| AudioError {
                status: 503,
                code: "source_unavailable",
                message: capitalise(&why) + ".",
            })?;
            let shared = self.shared.clone();
            self.blocking(move || record_and_transcribe(&shared, channel, &choice, src, seconds))
                .await?
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

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
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

impl Drop for Meters {
    fn drop(&mut self) {
        self.until.store(0, Ordering::SeqCst);
    }
}

/// Measures both channels until `until` (Unix ms), publishing levels.
fn run_meters(shared: &Arc<Shared>, settings: &AudioSettings, until: &AtomicI64) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let on: Arc<Mutex<HashMap<Channel, bool>>> = Arc::default();
    for ch in Channel::BOTH {
        let choice = settings.source(ch).clone();
        if choice.is_off() {
            continue;
        }
        let (shared, stop, on) = (shared.clone(), stop.clone(), on.clone());
        threads.push(std::thread::spawn(move || {
            capture::run(ch, &choice, &stop, &mut |ev| match ev {
                capture::Event::Opened(_) => {
                    on.lock().unwrap().insert(ch, true);
                }
                capture::Event::Down(_) => {
                    on.lock().unwrap().insert(ch, false);
                }
                capture::Event::Audio { samples, .. } => {
                    let peak = samples.iter().fold(0f32, |m, s| m.max(s.abs()));
                    shared.levels.record(ch, peak);
                }
            })
        }));
    }
    let o = on.clone();
    let ticker = Ticker::start(shared, move |ch| {
        o.lock().unwrap().get(&ch).copied().unwrap_or(false)
    });
    while shared.now_ms() < until.load(Ordering::SeqCst) && !shared.stopping.load(Ordering::SeqCst)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(ticker);
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
}

/// `POST /api/audio/test`: records `seconds` of `channel` and transcribes them.
fn record_and_transcribe(
    shared: &Arc<Shared>,
    channel: Channel,
    choice: &SourceChoice,
    src: Source,
    seconds: u32,
) -> Result<AudioTestResult, AudioError> {
    let stop = AtomicBool::new(false);
    let mut pcm: Vec<i16> = Vec::new();
    let mut resampler: Option<(u32, Resampler)> = None;
    let mut peak = 0f32;
    let mut recorded = 0f64;
    let mut used = src.name.clone();
    let mut down: Option<String> = None;
    let deadline = Instant::now() + Duration::from_secs(seconds as u64 + 5);
    let want = seconds as f64;
    capture::run(channel, choice, &stop, &mut |ev| {
        match ev {
            capture::Event::Opened(s) => used = s.name.clone(),
            capture::Event::Down(d) => down = Some(d.reason().to_string()),
            capture::Event::Audio { samples, rate } => {
                if resampler.as_ref().map(|(r, _)| *r) != Some(rate) {
                    if let Some((_, mut r)) = resampler.take() {
                        r.flush(&mut pcm);
                    }
                    resampler = Resampler::new(rate).ok().map(|r| (rate, r));
                }
                let take =
                    (((want - recorded) * rate as f64).ceil().max(0.0) as usize).min(samples.len());
                let part = &samples[..take];
                peak = part.iter().fold(peak, |m, s| m.max(s.abs()));
                if let Some((_, r)) = resampler.as_mut() {
                    r.push(part, &mut pcm);
                }
                recorded += take as f64 / rate as f64;
            }
        }
        if recorded >= want || Instant::now() >= deadline {
            stop.store(true, Ordering::SeqCst);
        }
    });
    if let Some((_, mut r)) = resampler.take() {
        r.flush(&mut pcm);
    }
    if recorded < want * 0.5 {
        return Err(AudioError {
            status: 503,
            code: "source_unavailable",
            message: format!(
                "Could not record from “{}”: {}.",
                src.description,
                down.unwrap_or_else(|| "it sent no audio".into())
            ),
        });
    }
    let text = shared
        .engine()
        .and_then(|e| {
            let mut u = e.begin()?;
            u.push(&pcm)?;
            u.finish()
        })
        .map_err(|e| {
            AudioError::engine(format!(
                "The speech engine: {}",
                lower_first(&engine_words(&e))
            ))
        })?;
    Ok(AudioTestResult {
        channel,
        source: used,
        seconds: (recorded * 10.0).round() / 10.0,
        peak: (peak.min(1.0) * 1000.0).round() / 1000.0,
        text: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::audio::EngineSettings;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn settings_are_saved_private_and_whole_with_the_call_listened_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SETTINGS_FILE);
        assert_eq!(load_settings(&path), (AudioSettings::default(), None));
        let mut s = AudioSettings {
            mic: SourceChoice::Named("usb".into()),
            system: SourceChoice::Off,
            ..AudioSettings::default()
        };
        s.engine = EngineSettings::Openai {
            base_url: "https://asr.example".into(),
            model: "whisper-1".into(),
            api_key: Some("sk-secret".into()),
        };
        save_settings(&path, &s, Some("call-1")).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_settings(&path), (s.clone(), Some("call-1".into())));
        save_settings(&path, &s, None).unwrap();
        assert_eq!(load_settings(&path).1, None);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
        // A damaged file: defaults, and the file kept aside for a person to look at.
        std::fs::write(&path, b"{\"mic\": ").unwrap();
        assert_eq!(load_settings(&path), (AudioSettings::default(), None));
        assert!(path.with_extension("json.bad").exists());
    }
}
