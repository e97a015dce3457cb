#!/usr/bin/env bash
# The packages: builds the .deb and .rpm with the Tauri bundler (the CLI from npm, pinned in
# ui/package.json), checks what they hold (the binary, the desktop entry, the icons), installs the
# .deb with dpkg (+ apt-get -f install for its dependencies), launches the installed binary
# headless (ready line, a callback accepted, the UI served), runs the real-window test against
# the installed binary, then removes the package.
#
#   tests/package/run.sh            # bundles target/debug/stagewhisper (builds it if missing)
#   SW_PACKAGE_PROFILE=release tests/package/run.sh   # from a release build (slow on 2 cores)
#
# CI bundles the debug build (`tauri bundle --debug`: the binary `cargo test` already built, so
# no second compilation); the release packages are `npx tauri build --bundles deb,rpm` (README).
# Installing needs root: without it (and without `sudo -n`) only the bundle contents are checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PROFILE="${SW_PACKAGE_PROFILE:-debug}"
TAURI="$ROOT/ui/node_modules/.bin/tauri"
say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
fail() { echo "package test: FAIL: $*" >&2; exit 1; }

[ -x "$TAURI" ] || fail "the Tauri CLI is missing: (cd ui && npm ci)"
# The ONNX Runtime library the speaker separation loads is shipped in the packages
# (/usr/lib/stagewhisper/libonnxruntime.so, tauri.conf.json's bundle files): fetched first.
tests/speakers/install.sh >/dev/null
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"

if [ "$PROFILE" = release ]; then
  say "tauri build --bundles deb,rpm (release)"
  start=$(date +%s)
  "$TAURI" build --bundles deb,rpm
  BUNDLE=target/release/bundle
else
  say "cargo build --bin stagewhisper (a no-op after cargo test), then tauri bundle --debug"
  npm --prefix ui run --silent build >/dev/null
  cargo build --quiet --bin stagewhisper
  start=$(date +%s)
  "$TAURI" bundle --debug --bundles deb,rpm
  BUNDLE=target/debug/bundle
fi
say "bundled in $(( $(date +%s) - start )) s"

DEB=$(ls -t "$BUNDLE"/deb/*.deb | head -1)
RPM=$(ls -t "$BUNDLE"/rpm/*.rpm | head -1)
[ -s "$DEB" ] || fail "no .deb under $BUNDLE/deb"
[ -s "$RPM" ] || fail "no .rpm under $BUNDLE/rpm"
PKG=$(dpkg-deb -f "$DEB" Package)
say "$DEB (package $PKG, $(du -h "$DEB" | cut -f1)); $RPM ($(du -h "$RPM" | cut -f1))"

# What the .deb holds.
contents=$(dpkg-deb -c "$DEB")
for f in usr/bin/stagewhisper usr/share/applications/StageWhisper.desktop \
  usr/share/icons/hicolor/128x128/apps/stagewhisper.png usr/share/icons/hicolor/32x32/apps/stagewhisper.png; do
  grep -q " $f\$" <<<"$contents" || fail "$f is not in the .deb:
$contents"
done
grep -q " usr/lib/stagewhisper/libonnxruntime.so\$" <<<"$contents" || fail "libonnxruntime.so is not in the .deb"
deps=$(dpkg-deb -f "$DEB" Depends)
grep -q libwebkit2gtk-4.1 <<<"$deps" || fail "the .deb does not depend on WebKitGTK 4.1: $deps"
# The built-in speech engine (loaded at run time): PocketSphinx and its US-English model.
for dep in libpocketsphinx3 pocketsphinx-en-us; do
  grep -qw "$dep" <<<"$deps" || fail "the .deb does not depend on $dep: $deps"
done
entry=$(dpkg-deb --fsys-tarfile "$DEB" | tar -xO usr/share/applications/StageWhisper.desktop)
for line in 'Exec=stagewhisper' 'Icon=stagewhisper' 'Type=Application' 'Categories=Office;'; do
  grep -qx "$line" <<<"$entry" || fail "desktop entry without \`$line\`:
$entry"
done
# The .rpm: a valid RPM lead and the same payload (rpm itself is not needed on Debian).
[ "$(head -c 4 "$RPM" | od -An -tx1 | tr -d ' \n')" = edabeedb ] || fail "$RPM is not an RPM file"
if command -v rpm >/dev/null; then
  rpm -qlp "$RPM" | grep -qx /usr/bin/stagewhisper || fail "/usr/bin/stagewhisper is not in the .rpm"
  rpm -qRp "$RPM" | grep -qF 'libpocketsphinx.so.3()(64bit)' || fail "the .rpm does not require libpocketsphinx.so.3"
  rpm -qlp "$RPM" | grep -qx /usr/lib/stagewhisper/libonnxruntime.so || fail "libonnxruntime.so is not in the .rpm"
fi
say "bundle contents: binary, desktop entry, icons, WebKitGTK and PocketSphinx dependencies: ok"

if [ "$(id -u)" -eq 0 ]; then
  AS_ROOT=()
elif sudo -n true 2>/dev/null; then
  AS_ROOT=(sudo -n)
else
  say "not root and no sudo: the bundle contents were checked; install/launch/remove skipped"
  exit 0
fi
if dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q "install ok installed"; then
  fail "$PKG is already installed on this machine; not touching it"
fi

cleanup() {
  [ -n "${APP_PID:-}" ] && kill "$APP_PID" 2>/dev/null || true
  "${AS_ROOT[@]}" dpkg -r "$PKG" >/dev/null 2>&1 || true
  rm -rf "${TMP:-}"
}
trap cleanup EXIT
TMP=$(mktemp -d)

say "dpkg -i $DEB"
if ! "${AS_ROOT[@]}" dpkg -i "$DEB" >/dev/null 2>"$TMP/dpkg.err"; then
  say "dpkg -i needs dependencies: apt-get -f install"
  "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -f install -y -qq >/dev/null
fi
dpkg-query -W -f='${Status}' "$PKG" | grep -q "install ok installed" || fail "$PKG is not installed: $(cat "$TMP/dpkg.err")"
BIN=$(command -v stagewhisper)
[ "$BIN" = /usr/bin/stagewhisper ] || fail "the installed binary is not /usr/bin/stagewhisper: $BIN"

say "the installed binary, headless: ready line, a callback, the UI, speaker separation"
# The speaker model in the data dir: the packaged ONNX Runtime must be found without help.
mkdir -p "$TMP/data/models/speakers"
cp tests/fixtures/speakers/campplus-fp16w.onnx "$TMP/data/models/speakers/campplus.onnx"
env -u ORT_DYLIB_PATH "$BIN" --headless --data-dir "$TMP/data" >"$TMP/out" 2>"$TMP/err" &
APP_PID=$!
for _ in $(seq 100); do [ -s "$TMP/out" ] && break; sleep 0.2; done
python3 - "$TMP/out" <<'EOF' || fail "headless run of the installed binary: $(tail -20 "$TMP/err")"
import json, sys, urllib.request, uuid
ready = json.loads(open(sys.argv[1]).readline())
assert ready["event"] == "ready", ready
def req(url, body=None, token=None):
    r = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method="GET" if body is None else "POST",
                               headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(r, timeout=20) as resp:
        return resp.status, resp.read()
st, body = req(ready["ui_url"] + "api/calls", {"title": "package"}, ready["ui_token"])
assert st == 201, (st, body)
sid = json.loads(body)["session_id"]
st, body = req(f"{ready['callback_url'].rstrip('/')}/tasks/{uuid.uuid4()}",
               {"session_id": sid, "status": "message", "reply_text": "from the package test", "message_id": str(uuid.uuid4())}, ready["callback_token"])
assert st == 200 and json.loads(body).get("ok"), (st, body)
st, page = req(ready["ui_url"])
assert st == 200 and b'id="app"' in page, (st, page[:200])
r = urllib.request.Request(ready["ui_url"] + "api/audio", headers={"Authorization": f"Bearer {ready['ui_token']}"})
with urllib.request.urlopen(r, timeout=30) as resp:
    speakers = json.loads(resp.read())["speakers"]
assert speakers["available"], speakers
print("ready line, callback accepted, UI served, speaker separation available", file=sys.stderr)
EOF
kill -TERM "$APP_PID"
wait "$APP_PID" || fail "the installed binary did not exit 0 on SIGTERM: $(tail -20 "$TMP/err")"
APP_PID=

say "the real-window test against the installed binary"
python3 tests/window/run.py --bin "$BIN"

say "dpkg -r $PKG"
"${AS_ROOT[@]}" dpkg -r "$PKG" >/dev/null
[ ! -e /usr/bin/stagewhisper ] || fail "/usr/bin/stagewhisper is still there after dpkg -r"
trap - EXIT
rm -rf "$TMP"
say "package test: PASS"
