//! A private sound server per test, and speech to play into it.
//!
//! [`Pulse::start`] runs a PulseAudio of its own (as root too: never `--system`, which refuses
//! module loading) in a temporary `XDG_RUNTIME_DIR`, with:
//! - a null sink `call` (stereo, 48 kHz): what plays there is the call's other side, heard on
//!   its monitor `call.monitor` ("Them");
//! - a null sink `micfeed` (mono) and a remapped source `mic` on its monitor: what plays into
//!   `micfeed` is heard on `mic`, a microphone ("You").
//!
//! `call` is the default output and `mic` the default input. The app under test is started with
//! `PULSE_SERVER` pointing at the server ([`Pulse::env`]). Speech comes from `espeak-ng`
//! ([`speech`]) and is played with `paplay`. The server is stopped by its PID when the value is
//! dropped.
//!
//! The tools are Debian's `pulseaudio pulseaudio-utils espeak-ng` (scripts/setup.sh installs
//! them). [`tools`] says whether they are here: a test that needs them FAILS when
//! `SW_AUDIO_REQUIRE=1` (run-tests sets it) and they are missing, and is skipped with the
//! reason printed otherwise.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The programs the audio tests run.
const TOOLS: [&str; 6] = ["pulseaudio", "pactl", "paplay", "parec", "espeak-ng", "sox"];

/// `true` when the tools are here; otherwise prints why the test is skipped and returns
/// `false`, or panics when `SW_AUDIO_REQUIRE=1`.
pub fn tools(test: &str) -> bool {
    const PIPEWIRE: [&str; 4] = [
        "pipewire",
        "pipewire-pulse",
        "wireplumber",
        "dbus-run-session",
    ];
    let pipewire = std::env::var("SW_SOUND_SERVER").is_ok_and(|v| v == "pipewire");
    let missing: Vec<&str> = TOOLS
        .iter()
        .chain(if pipewire { &PIPEWIRE[..] } else { &[] })
        .copied()
        .filter(|t| !on_path(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "{test}: needs {} (apt-get install pulseaudio pulseaudio-utils espeak-ng sox{})",
        missing.join(", "),
        if pipewire {
            " pipewire pipewire-pulse wireplumber"
        } else {
            ""
        }
    );
    if std::env::var("SW_AUDIO_REQUIRE").is_ok_and(|v| v == "1") {
        panic!("SW_AUDIO_REQUIRE=1 and {why}");
    }
    eprintln!("SKIPPED {why}");
    false
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// A private PulseAudio.
pub struct Pulse {
    dir: tempfile::TempDir,
    child: Child,
    /// `unix:<dir>/native`
    pub server: String,
    /// The child leads a process group to stop whole (PipeWire's three daemons).
    group: bool,
}

impl Pulse {
    /// A private sound server: PulseAudio, or PipeWire's pulse server when
    /// `SW_SOUND_SERVER=pipewire` ([`Pulse::start_pipewire`]).
    pub fn start() -> Pulse {
        if std::env::var("SW_SOUND_SERVER").is_ok_and(|v| v == "pipewire") {
            return Pulse::start_pipewire();
        }
        Pulse::start_pulseaudio()
    }

    /// PipeWire, WirePlumber and pipewire-pulse (Debian's `pipewire pipewire-pulse wireplumber`)
    /// in a D-Bus session of their own (`dbus-run-session`: WirePlumber needs a bus), in a
    /// process group of their own that is stopped by its id; the same devices loaded through
    /// `pactl` as PulseAudio's.
    pub fn start_pipewire() -> Pulse {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::Builder::new()
            .prefix("sw-pipewire-")
            .tempdir()
            .expect("a temp dir");
        let d = dir.path();
        let log = std::fs::File::create(d.join("pulseaudio.log")).unwrap();
        let child = Command::new("dbus-run-session")
            .args([
                "--",
                "sh",
                "-c",
                "pipewire & sleep 0.5; wireplumber & pipewire-pulse & wait",
            ])
            .env("XDG_RUNTIME_DIR", d)
            .env("HOME", d)
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env_remove("DISPLAY")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("PULSE_SERVER")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start pipewire (dbus-run-session)");
        let socket = d.join("pulse/native");
        let p = Pulse {
            server: format!("unix:{}", socket.display()),
            dir,
            child,
            group: true,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(socket.exists() && p.try_pactl(&["info"]).is_ok()) {
            assert!(
                Instant::now() < deadline,
                "pipewire-pulse did not answer within 20 s:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        for m in [
            "module-null-sink sink_name=call rate=48000 channels=2",
            "module-null-sink sink_name=micfeed rate=48000 channels=1",
            "module-remap-source master=micfeed.monitor source_name=mic",
        ] {
            let args: Vec<&str> = std::iter::once("load-module").chain(m.split(' ')).collect();
            p.pactl(&args);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !p.sources().iter().any(|s| s == "mic") {
            assert!(Instant::now() < deadline, "no source mic:\n{}", p.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        p.pactl(&["set-default-sink", "call"]);
        p.pactl(&["set-default-source", "mic"]);
        p
    }

    fn start_pulseaudio() -> Pulse {
        let dir = tempfile::Builder::new()
            .prefix("sw-pulse-")
            .tempdir()
            .expect("a temp dir");
        let d = dir.path();
        let socket = d.join("native");
        let log = std::fs::File::create(d.join("pulseaudio.log")).unwrap();
        let child = Command::new("pulseaudio")
            .args([
                "-n",
                "--daemonize=no",
                "--use-pid-file=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--disable-shm",
                "--log-target=stderr",
                "-L",
                &format!(
                    "module-native-protocol-unix socket={} auth-anonymous=1",
                    socket.display()
                ),
                "-L",
                "module-null-sink sink_name=call rate=48000 channels=2",
                "-L",
                "module-null-sink sink_name=micfeed rate=48000 channels=1",
                "-L",
                "module-remap-source master=micfeed.monitor source_name=mic",
            ])
            .env("XDG_RUNTIME_DIR", d)
            .env("HOME", d)
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env_remove("DISPLAY")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start pulseaudio");
        let mut p = Pulse {
            server: format!("unix:{}", socket.display()),
            dir,
            child,
            group: false,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("pulseaudio exited ({status}):\n{}", p.log());
            }
            if socket.exists() && p.try_pactl(&["set-default-sink", "call"]).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "pulseaudio did not answer within 20 s:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p.pactl(&["set-default-source", "mic"]);
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pulseaudio.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What the app needs to find this server.
    /// The app's environment: this server, and a home without a PulseAudio cookie, as on a
    /// machine where no libpulse client ever ran (the server accepts anonymous clients; the app
    /// must still send a cookie of the right length, or it is kicked).
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.dir.path().join("app-home");
        std::fs::create_dir_all(&home).unwrap();
        vec![
            ("PULSE_SERVER".into(), self.server.clone()),
            ("HOME".into(), home.display().to_string()),
            (
                "PULSE_COOKIE".into(),
                home.join("no-cookie").display().to_string(),
            ),
        ]
    }

    fn tool(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("PULSE_SERVER", &self.server)
            .env("HOME", self.dir.path())
            .env("XDG_RUNTIME_DIR", self.dir.path())
            .stdin(Stdio::null());
        c
    }

    fn try_pactl(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .tool("pactl")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `pactl ARGS…` (must succeed).
    pub fn pactl(&self, args: &[&str]) -> String {
        self.try_pactl(args)
            .unwrap_or_else(|e| panic!("pactl {args:?}: {e}\n--- pulseaudio ---\n{}", self.log()))
    }

    /// Plays a WAV file into `sink` and waits for it to end.
    pub fn play(&self, sink: &str, wav: &Path) {
        let status = self
            .tool("paplay")
            .args(["-d", sink])
            .arg(wav)
            .status()
            .expect("run paplay");
        assert!(status.success(), "paplay -d {sink} {}", wav.display());
    }

    /// Plays a WAV file into `sink` in the background.
    pub fn play_bg(&self, sink: &str, wav: &Path) -> Child {
        self.tool("paplay")
            .args(["-d", sink])
            .arg(wav)
            .spawn()
            .expect("run paplay")
    }

    /// A fake meeting application: `parec` recording from `source` as `app` (its
    /// `application.name` and binary), its samples thrown away. Kill it to let go.
    pub fn record_as(&self, app: &str, source: &str) -> Child {
        self.tool("parec")
            .args(["-d", source, "--raw"])
            .arg(format!("--property=application.name={app}"))
            .arg(format!("--property=application.process.binary={app}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("run parec")
    }

    /// Plays a WAV file into `sink` as the application `app`, in the background.
    pub fn play_as(&self, app: &str, sink: &str, wav: &Path) -> Child {
        self.tool("paplay")
            .args(["-d", sink])
            .arg(format!("--property=application.name={app}"))
            .arg(format!("--property=application.process.binary={app}"))
            .arg(wav)
            .spawn()
            .expect("run paplay")
    }

    /// Unloads the module that made `name` (a sink or a source): the device is gone.
    pub fn unplug(&self, module: &str, arg: &str) {
        let list = self.pactl(&["list", "short", "modules"]);
        let index = list
            .lines()
            .find(|l| l.contains(module) && l.contains(arg))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no module {module} with {arg}:\n{list}"))
            .to_string();
        self.pactl(&["unload-module", &index]);
    }

    /// The microphone removed (its remap source unloaded).
    pub fn unplug_mic(&self) {
        self.unplug("module-remap-source", "source_name=mic");
    }

    /// The microphone back.
    pub fn plug_mic(&self) {
        self.pactl(&[
            "load-module",
            "module-remap-source",
            "master=micfeed.monitor",
            "source_name=mic",
        ]);
    }

    /// The server's source names.
    pub fn sources(&self) -> Vec<String> {
        self.pactl(&["list", "short", "sources"])
            .lines()
            .filter_map(|l| l.split('\t').nth(1).map(str::to_string))
            .collect()
    }
}

impl Drop for Pulse {
    fn drop(&mut self) {
        // Stopped by its PID (never by name: other tests run servers of their own); PipeWire's
        // daemons by the process group this child leads.
        if self.group {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", self.child.id())])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Speech made by `espeak-ng` into `<dir>/<name>.wav` (22.05 kHz mono), with `voice` (e.g.
/// `en-us`, `en+m3`).
pub fn speech(dir: &Path, name: &str, voice: &str, text: &str) -> PathBuf {
    let path = dir.join(format!("{name}.wav"));
    let status = Command::new("espeak-ng")
        .args(["-v", voice, "-w"])
        .arg(&path)
        .arg(text)
        .stdin(Stdio::null())
        .status()
        .expect("run espeak-ng");
    assert!(status.success(), "espeak-ng failed for {text:?}");
    path
}
