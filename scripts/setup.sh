# Shared set-up for ./run and ./run-tests: checks (and, as root, installs) what the app and its
# tests need on Debian 12. Sourced, not executed.

# Debian packages by purpose. The headless binary (crates/stagewhisper-headless) needs only a C
# toolchain (SQLite is compiled in); the desktop window adds WebKitGTK.
APT_BUILD_HEADLESS=(pkg-config build-essential)
APT_BUILD=("${APT_BUILD_HEADLESS[@]}" libwebkit2gtk-4.1-dev)
APT_TEST=(chromium xvfb xauth webkit2gtk-driver imagemagick)
# The desktop window test (tests/window/desktop.py): key presses and window state (xdotool,
# x11-utils), a private session bus with a notification server (dbus, python3-dbus/-gi).
APT_TEST+=(xdotool x11-utils dbus-daemon dbus-bin python3-dbus python3-gi)
# A small window manager in the test's X display, for dragging and resizing the undecorated overlay.
APT_TEST+=(openbox)

# Each step's heading carries the time since the start of the run ([min:sec]), so a CI log
# shows where the time went.
say() { printf '\033[1m==> [%d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

# ensure_apt PKG...: installs the missing packages when root, else prints the exact apt line.
ensure_apt() {
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
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
