//! Wiring: data dir, tokens, store, conversation, both listeners. Used by the headless mode and
//! by the desktop shell alike.

use crate::api::{ApiState, Assets, ControlApi};
use crate::assistants::delivery_queue::OutboxTiming;
use crate::assistants::kinds::incoming::timing::LinkSettings;
use crate::assistants::kinds::{ExtraKind, KindDeps, KindInfo, BUILT_IN};
use crate::assistants::CallbackTarget;
use crate::assistants::{AssistantContext, AssistantKind, Assistants};
use crate::clock::{SharedClock, SystemClock};
use crate::conversation::{Conversation, Settings};
use crate::datadir::{DataDirLock, LockError};
use crate::faults::Faults;
use crate::http::{serve, serve_service, AllowedHosts, Shutdown};
use crate::listener::{AuthGuard, CallbackListener};
use crate::settings::{SettingsError, SettingsStore};
use crate::store::{Durability, Store, StoreError};
use crate::tokens::{Secret, TokenError, CALLBACK_TOKEN_FILE, UI_TOKEN_FILE};
use crate::tunnel::{TunnelDeps, TunnelManager, TunnelSettings};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const DB_FILE: &str = "stagewhisper.db";
/// The UI listener's URL, written at start-up so local tools (`stagewhisper transcript replay`)
/// find the running app (with `ui_token`).
pub const UI_URL_FILE: &str = "ui_url";

pub struct Config {
    pub data_dir: PathBuf,
    pub callback_listen: SocketAddr,
    pub ui_listen: SocketAddr,
    pub settings: Settings,
    /// How far an acknowledged callback is guaranteed (see [`Durability`]).
    pub durability: Durability,
    pub assets: Option<Arc<dyn Assets>>,
    pub clock: SharedClock,
    /// Timing of the assistant link.
    pub link: LinkSettings,
    /// Test-only fault injection; off unless enabled through the environment in a debug build
    /// (see [`crate::faults`]).
    pub faults: Arc<Faults>,
    /// The optional tunnel's timing (and `NGROK_AUTHTOKEN`).
    pub tunnel: TunnelSettings,
    /// Assistant kinds besides the built-in ones ([`BUILT_IN`]): a test registers its own kind
    /// here, with its entry's info; the set is open.
    pub extra_kinds: Vec<ExtraKind>,
    /// The clawborrator hub link's timing (tests shorten it).
    pub hub_timing: crate::assistants::kinds::clawborrator::HubTiming,
    /// The audio pipeline (`stagewhisper-audio`), built once the core is up; `None`: the app
    /// cannot hear (the audio routes answer `503 audio_unavailable`).
    pub ears: Option<crate::audio::EarsFactory>,
    /// The speech model shelf (`stagewhisper-audio`), built once the core is up; `None`: the
    /// model routes answer `503 models_unavailable`.
    pub models: Option<crate::models::ModelsFactory>,
}

impl Config {
    pub fn new(data_dir: PathBuf) -> Config {
        Config {
            data_dir,
            callback_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ui_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            settings: Settings::default(),
            durability: Durability::default(),
            assets: None,
            clock: Arc::new(SystemClock),
            link: LinkSettings::default(),
            faults: Arc::new(Faults::from_env()),
            tunnel: TunnelSettings::from_env(),
            extra_kinds: Vec::new(),
            hub_timing: crate::assistants::kinds::clawborrator::HubTiming::default(),
            ears: None,
            models: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another process holds the data dir (or its lock could not be taken).
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Mcp(#[from] crate::mcp::McpError),
    /// The settings document cannot be read (or was written by a newer version).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot open the database: {0}")]
    Store(#[from] StoreError),
    #[error(
        "{0} must be a loopback address (127.0.0.1, ::1): the listeners never face the network"
    )]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running app.
pub struct App {
    pub callback_url: String,
    pub ui_url: String,
    pub data_dir: PathBuf,
    /// Every setting the app reads, in one document (`settings.json`; see [`crate::settings`]).
    pub settings: SettingsStore,
    pub callback_token: Arc<Secret>,
    pub ui_token: Arc<Secret>,
    pub conversation: Conversation,
    pub api: Arc<ControlApi>,
    pub callback_hosts: Arc<AllowedHosts>,
    /// Where the assistant posts replies (a tunnel may change the URL: `set_url`).
    pub callback_target: Arc<CallbackTarget>,
    /// The assistants: every registered kind, one active (`incoming` = `POST /v1/incoming`).
    pub link: Assistants,
    /// The optional tunnel for the callback listener (ngrok or an external URL).
    pub tunnel: TunnelManager,
    /// The audio pipeline, when the app can hear.
    pub ears: Option<Arc<dyn crate::audio::Ears>>,
    /// The speech model shelf, when the app has one.
    pub models: Option<Arc<dyn crate::models::Models>>,
    shutdown: Shutdown,
    servers: Vec<JoinHandle<()>>,
    /// One process per data dir, for as long as this app lives (see [`crate::datadir`]).
    _data_dir_lock: DataDirLock,
}

/// Platform default: `$STAGEWHISPER_DATA_DIR`, `$XDG_DATA_HOME/stagewhisper`,
/// `~/.local/share/stagewhisper`.
pub fn default_data_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("STAGEWHISPER_DATA_DIR") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_DATA_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("stagewhisper");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| ".".into());
    home.join(".local").join("share").join("stagewhisper")
}

fn ensure_dir(path: &Path) -> Result<(), StartError> {
    std::fs::create_dir_all(path).map_err(|source| StartError::DataDir {
        path: path.to_path_buf(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// A loopback listener on `addr` and the address it got (the port, when `addr` asked for 0).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    if !addr.ip().is_loopback() {
        return Err(StartError::NotLoopback(addr));
    }
    // A backlog of 4,096 (not the default 1,024): a burst of handshakes waits, not dropped.
    let bound = crate::conns::listen(addr)
        .and_then(|l| l.local_addr().map(|at| (l, at)))
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok(bound)
}

fn origin(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("http://{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("http://[{}]:{}", a.ip(), a.port()),
    }
}

/// Every assistant kind, the built-in ones first, behind the generic outbox.
async fn start_assistants(
    ctx: Arc<AssistantContext>,
    deps: KindDeps,
    extra_kinds: Vec<ExtraKind>,
) -> Assistants {
    let mut kinds: Vec<(KindInfo, Arc<dyn AssistantKind>)> = BUILT_IN
        .iter()
        .map(|e| (e.info.clone(), (e.start)(ctx.clone(), &deps)))
        .collect();
    kinds.extend(
        extra_kinds
            .into_iter()
            .map(|k| (k.info, (k.start)(ctx.clone()))),
    );
    let link = deps.link;
    let timing = OutboxTiming {
        backoff_initial: link.backoff_initial,
        backoff_max: link.backoff_max,
        min_session_gap: link.min_session_gap,
    };
    Assistants::start(ctx, kinds, timing).await
}

/// Both listeners served until `shutdown`, each draining its in-flight requests for up to 15 s.
fn serve_both(
    callback: (TcpListener, Arc<CallbackListener>),
    ui: (TcpListener, Arc<ControlApi>),
    shutdown: &Shutdown,
) -> Vec<JoinHandle<()>> {
    let drain = Duration::from_secs(15);
    let (cb_listener, listener) = callback;
    let (ui_listener, api) = ui;
    vec![
        tokio::spawn(serve_service(
            cb_listener,
            listener.router(),
            shutdown.clone(),
            drain,
        )),
        tokio::spawn(serve(
            ui_listener,
            move |req| api.clone().handle(req),
            shutdown.clone(),
            drain,
        )),
    ]
}

/// The data dir as start-up opens it: locked before anything in it is read or written (a
/// second instance touches nothing), then its two tokens.
struct Opened {
    lock: DataDirLock,
    data_dir: PathBuf,
    settings: SettingsStore,
    callback_token: Arc<Secret>,
    ui_token: Arc<Secret>,
}

fn open_data_dir(dir: &Path) -> Result<Opened, StartError> {
    ensure_dir(dir)?;
    let lock = DataDirLock::acquire(dir)?;
    let data_dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    Ok(Opened {
        lock,
        settings: SettingsStore::open(&data_dir)?,
        callback_token: Arc::new(Secret::load(data_dir.join(CALLBACK_TOKEN_FILE))?),
        ui_token: Arc::new(Secret::load(data_dir.join(UI_TOKEN_FILE))?),
        data_dir,
    })
}

/// Both listeners bound, with the origins they advertise.
struct Bound {
    callback: TcpListener,
    callback_addr: SocketAddr,
    callback_url: String,
    ui: TcpListener,
    ui_addr: SocketAddr,
    ui_url: String,
}

/// Binds both listeners and writes the UI's URL beside the data (for transcript replay).
async fn bind_both(config: &Config, data_dir: &Path) -> Result<Bound, StartError> {
    // Two listeners of up to 1,024 connections need more than the usual soft 1,024
    // descriptors (crate::conns).
    let nofile = crate::conns::raise_fd_limit();
    tracing::debug!(nofile, "descriptor limit");
    let (callback, callback_addr) = bind(config.callback_listen).await?;
    let (ui, ui_addr) = bind(config.ui_listen).await?;
    let ui_url = format!("{}/", origin(ui_addr));
    if let Err(e) = crate::tokens::write_secret(&data_dir.join(UI_URL_FILE), &ui_url) {
        tracing::warn!(error = %e, "cannot write the ui_url file (transcript replay needs --ui-url)");
    }
    Ok(Bound {
        callback,
        callback_addr,
        callback_url: origin(callback_addr),
        ui,
        ui_addr,
        ui_url,
    })
}

/// The callback target every kind advertises, and the tunnel that changes it: the tunnel
/// connects in the background (never blocks start-up); while it is up the assistant is told its
/// origin, and the callback listener accepts its Host.
fn start_tunnel(
    opened: &Opened,
    bound: &Bound,
    callback_hosts: &Arc<AllowedHosts>,
    shutdown: &Shutdown,
    settings: TunnelSettings,
) -> (Arc<CallbackTarget>, TunnelManager) {
    let target = Arc::new(CallbackTarget::new(
        bound.callback_url.clone(),
        opened.callback_token.clone(),
    ));
    let tunnel = TunnelManager::start(
        TunnelDeps {
            data_dir: opened.data_dir.clone(),
            settings: opened.settings.clone(),
            callback_addr: bound.callback_addr,
            local_callback_url: bound.callback_url.clone(),
            callback_token: opened.callback_token.clone(),
            hosts: callback_hosts.clone(),
            shutdown: shutdown.clone(),
        },
        settings,
    );
    let t = target.clone();
    tunnel.on_callback_url(move |url| t.set_url(url));
    (target, tunnel)
}

impl App {
    pub async fn start(config: Config) -> Result<App, StartError> {
        let opened = open_data_dir(&config.data_dir)?;
        let (data_dir, callback_token) = (opened.data_dir.clone(), opened.callback_token.clone());
        let (store, writer) = Store::open(&data_dir.join(DB_FILE), config.durability).await?;
        let conversation =
            Conversation::start(store, writer, config.clock.clone(), config.settings).await?;
        let bound = bind_both(&config, &data_dir).await?;
        let (callback_url, ui_url) = (bound.callback_url.clone(), bound.ui_url.clone());
        let callback_hosts = Arc::new(AllowedHosts::for_addr(bound.callback_addr));
        let shutdown = Shutdown::new();
        let (callback_target, tunnel) =
            start_tunnel(&opened, &bound, &callback_hosts, &shutdown, config.tunnel);
        let ctx = AssistantContext::new(
            conversation.clone(),
            callback_target.clone(),
            data_dir.clone(),
            opened.settings.clone(),
            shutdown.clone(),
        )
        .await;
        let link = start_assistants(
            ctx,
            KindDeps {
                link: config.link,
                hub_timing: config.hub_timing,
            },
            config.extra_kinds,
        )
        .await;
        let ears = config.ears.map(|make| {
            make(crate::audio::EarsContext {
                conversation: conversation.clone(),
                link: link.clone(),
                data_dir: data_dir.clone(),
                settings: opened.settings.clone(),
                shutdown: shutdown.clone(),
                clock: config.clock.clone(),
            })
        });
        let models = config.models.map(|make| {
            let hub = conversation.clone();
            make(crate::models::ModelsContext {
                data_dir: data_dir.clone(),
                publish: Arc::new(move |change| hub.hub().publish_live(change)),
            })
        });

        let mcp = Arc::new(crate::mcp::Mcp::open(
            &data_dir,
            opened.settings.clone(),
            &ui_url,
            conversation.clone(),
        )?);
        let listener = Arc::new(CallbackListener {
            conversation: conversation.clone(),
            token: callback_token.clone(),
            hosts: callback_hosts.clone(),
            guard: AuthGuard::default(),
            clock: config.clock.clone(),
            faults: config.faults.clone(),
            probes: tunnel.probes(),
            assistants: Some(link.clone()),
        });
        let api = Arc::new(ControlApi::new(ApiState {
            conversation: conversation.clone(),
            callback_token: callback_token.clone(),
            ui_token: opened.ui_token.clone(),
            hosts: Arc::new(AllowedHosts::for_addr(bound.ui_addr)),
            callback_url: callback_url.clone(),
            data_dir: data_dir.clone(),
            settings: opened.settings.clone(),
            assets: config.assets.clone(),
            shutdown: shutdown.clone(),
            link: link.clone(),
            faults: config.faults.clone(),
            tunnel: tunnel.clone(),
            ears: ears.clone(),
            models: models.clone(),
            mcp: mcp.clone(),
        }));
        let servers = serve_both(
            (bound.callback, listener),
            (bound.ui, api.clone()),
            &shutdown,
        );
        tracing::info!(%callback_url, %ui_url, data_dir = %data_dir.display(), "StageWhisper is ready");
        Ok(App {
            callback_url,
            ui_url,
            data_dir,
            settings: opened.settings,
            callback_token,
            ui_token: opened.ui_token,
            conversation,
            api,
            callback_hosts,
            callback_target,
            link,
            tunnel,
            ears,
            models,
            shutdown,
            servers,
            _data_dir_lock: opened.lock,
        })
    }

    /// The one line the headless mode prints when ready.
    pub fn ready_line(&self) -> String {
        #[derive(serde::Serialize)]
        struct Ready<'a> {
            event: &'a str,
            callback_url: &'a str,
            callback_token: String,
            ui_url: &'a str,
            ui_token: String,
            data_dir: String,
        }
        serde_json::to_string(&Ready {
            event: "ready",
            callback_url: &self.callback_url,
            callback_token: self.callback_token.get(),
            ui_url: &self.ui_url,
            ui_token: self.ui_token.get(),
            data_dir: self.data_dir.display().to_string(),
        })
        .expect("serializable")
    }

    pub fn shutdown_signal(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Stops accepting, lets in-flight requests finish, then returns. Everything acknowledged
    /// was committed before its answer, so nothing is left to flush.
    pub async fn shutdown(self) {
        self.shutdown.trigger();
        if let Some(ears) = &self.ears {
            ears.shutdown().await;
        }
        if let Some(models) = &self.models {
            models.shutdown().await;
        }
        self.tunnel.shutdown().await;
        for s in self.servers {
            let _ = s.await;
        }
        // Let the writer finish the batch it may be committing.
        let _ = self.conversation.typing("").await;
    }
}
