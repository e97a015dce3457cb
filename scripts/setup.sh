# Shared set-up for ./run and ./run-tests: checks (and, as root, installs) what the app and its
# tests need on Debian 12. Sourced, not executed.

# Debian packages by purpose. The headless binary (crates/stagewhisper-headless) needs only a C
# toolchain (SQLite is compiled in); the desktop window adds WebKitGTK.
APT_BUILD_HEADLESS=(pkg-config build-essential)
# The Whisper engine: whisper.cpp (bundled by whisper-rs-sys) is built with cmake and g++; its
# Rust bindings come with the crate (.cargo/config.toml sets WHISPER_DONT_GENERATE_BINDINGS=1),
# so no libclang. About 3.5 extra minutes of a cold build on 2 cores.
APT_BUILD_HEADLESS+=(cmake)
APT_BUILD=("${APT_BUILD_HEADLESS[@]}" libwebkit2gtk-4.1-dev)
APT_TEST=(chromium xvfb xauth webkit2gtk-driver imagemagick)
# The desktop window test (tests/window/desktop.py): key presses and window state (xdotool,
# x11-utils), a private session bus with a notification server (dbus, python3-dbus/-gi).
APT_TEST+=(xdotool x11-utils dbus-daemon dbus-bin python3-dbus python3-gi)
# A small window manager in the test's X display, for dragging and resizing the undecorated overlay.
APT_TEST+=(openbox)
# The built-in speech engine: PocketSphinx and its US-English model, loaded at run time (the app
# runs without them; the engine then says how to install them). ./run installs them.
APT_RUN=(libpocketsphinx3 pocketsphinx-en-us)
# The speech tests and benchmark: the engine, and espeak-ng / sox to make the speech it hears
# (with what they pull in: 30 MB of downloads, 24 of them the model; 13 s to install here).
APT_TEST+=("${APT_RUN[@]}" espeak-ng sox)
# Hearing the call's tests (black-box and browser): a private PulseAudio per test (pactl, paplay
# from pulseaudio-utils).
APT_TEST+=(pulseaudio pulseaudio-utils)
# Call detection's tests run a second time on PipeWire's pulse server (pipewire-pulse, with
# WirePlumber in a D-Bus session of its own): they install beside PulseAudio and run only when a
# test starts them.
APT_TEST+=(pipewire pipewire-pulse wireplumber)
# What the peers' installers and the namespace tests would otherwise apt-get themselves
# (venvs, `ip`/`unshare`, TLS roots for the registries, ssh/sshd for the tunnel test). run-tests
# installs these in the foreground, before its background installs start, so that no two
# apt/dpkg runs ever overlap.
APT_TEST_TOOLS=(python3-venv iproute2 util-linux ca-certificates openssh-client openssh-server)

# Each step's heading carries the time since the start of the run ([min:sec]), so a CI log
# shows where the time went.
say() { printf '\033[1m==> [%d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

# ensure_apt PKG...: installs the missing packages when root, else prints the exact apt line.
ensure_apt() {
  # Never two apt runs at once: a background apt job (prefetch apt) is waited for first.
  wait_prefetch apt
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    if [ -z "${SW_APT_UPDATED:-}" ]; then
      apt-get update -qq
      export SW_APT_UPDATED=1
    fi
    # These are tools for building and testing: none of their services (sshd, the system bus) is
    # started. An install cut short earlier (a cancelled run) is finished first.
    local policy_created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy_created=1
    fi
    local rc=0
    if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
      DEBIAN_FRONTEND=noninteractive dpkg --configure -a >/dev/null || true
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null || rc=$?
    [ "$policy_created" = 1 ] && rm -f /usr/sbin/policy-rc.d
    return "$rc"
  else
    echo "Missing Debian packages. Install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
}

ensure_tools() {
  local t
  for t in cargo node npm; do
    command -v "$t" >/dev/null || { echo "$t is required (Rust via rustup, Node.js >= 20 with npm)" >&2; return 1; }
  done
}

# ensure_tauri_driver: the WebDriver bridge for the real-window test (tauri-driver 2.x).
ensure_tauri_driver() {
  command -v tauri-driver >/dev/null && return 0
  say "installing tauri-driver 2.x (cargo install)"
  cargo install tauri-driver --version '^2' --locked --quiet
}

# ensure_ui: installs the UI's npm packages (from the lock file) and builds ui/dist.
ensure_ui() {
  if [ ! -d ui/node_modules ] || [ ui/package-lock.json -nt ui/node_modules/.package-lock.json ]; then
    say "installing UI packages (npm ci)"
    (cd ui && npm ci --no-audit --no-fund --loglevel=error)
  fi
  say "building the UI (ui/dist)"
  (cd ui && npm run --silent build >/dev/null)
}

# ---------------------------------------------------------------------------- prefetch
# Background installs (network-bound: pip, npm, apt downloads) that run while the build keeps
# the CPU busy. `prefetch NAME CMD...` starts CMD in its own process group (niced, stdin from
# /dev/null), logging to target/prefetch/NAME.log; `wait_prefetch NAME` waits for it. A failed
# prefetch is reported (the tail of its log) and never fails the run by itself: every step
# runs its own idempotent installer again in the foreground, which then installs what is
# missing or reports the real error. `stop_prefetch` (run-tests' EXIT trap) ends the jobs
# still running.
PREFETCH_DIR="${PREFETCH_DIR:-target/prefetch}"
declare -gA PREFETCH_PID=()
PREFETCH_OWNER=""

prefetch() {
  local name=$1 log
  shift
  mkdir -p "$PREFETCH_DIR"
  log="$PREFETCH_DIR/$name.log"
  rm -f "$PREFETCH_DIR/$name.rc"
  PREFETCH_OWNER=$BASHPID
  # Job control on for the launch only: the job gets a process group of its own, so that
  # stop_prefetch ends its children (pip, npm, dpkg) too.
  set -m
  (
    start=$SECONDS
    rc=0
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
    "$@" </dev/null >"$log" 2>&1 || rc=$?
    echo "$rc $((SECONDS - start))" >"$PREFETCH_DIR/$name.rc"
  ) </dev/null &
  PREFETCH_PID[$name]=$!
  set +m
  say "prefetch $name started in the background (log: $log)"
}

# wait_prefetch NAME: waits for the job when it is still running; returns 0 whatever its end.
# A no-op when no such job was started (or in a shell other than the one that started it).
wait_prefetch() {
  local name=$1 pid rc secs
  pid=${PREFETCH_PID[$name]:-}
  [ -n "$pid" ] && [ "$BASHPID" = "$PREFETCH_OWNER" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    say "waiting for prefetch $name"
  fi
  wait "$pid" 2>/dev/null || true
  unset "PREFETCH_PID[$name]"
  read -r rc secs <"$PREFETCH_DIR/$name.rc" 2>/dev/null || { rc=killed; secs='?'; }
  if [ "$rc" = 0 ]; then
    echo "prefetch $name: done in $secs s" >&2
  else
    echo "prefetch $name: FAILED (exit $rc after $secs s); the last lines of $PREFETCH_DIR/$name.log:" >&2
    tail -n 25 "$PREFETCH_DIR/$name.log" 2>/dev/null | sed 's/^/  | /' >&2
    echo "prefetch $name: the step installs it again itself" >&2
  fi
  return 0
}

stop_prefetch() {
  local name pid
  [ "$BASHPID" = "$PREFETCH_OWNER" ] || return 0
  for name in "${!PREFETCH_PID[@]}"; do
    pid=${PREFETCH_PID[$name]}
    if kill -0 "$pid" 2>/dev/null; then
      echo "prefetch $name: still running at exit; stopping it" >&2
      kill -TERM -- "-$pid" 2>/dev/null || true
    fi
  done
  # A few seconds for them to go (apt, pip and npm clean up on SIGTERM), then SIGKILL.
  for name in "${!PREFETCH_PID[@]}"; do
    pid=${PREFETCH_PID[$name]}
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 -- "-$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  PREFETCH_PID=()
}
