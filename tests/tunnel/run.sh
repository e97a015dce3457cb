#!/usr/bin/env bash
# The real end-to-end test of the callback tunnel with a remote assistant host — one command:
#
#   tests/tunnel/run.sh                 # as root; builds target/debug/stagewhisper if needed
#   STAGEWHISPER_BIN=path/to/stagewhisper tests/tunnel/run.sh --hermes no
#
# Two network namespaces created here (desktop, remote assistant host) joined by a private
# veth pair (10.203.0.1/30 <-> 10.203.0.2/30, addresses only inside the namespaces, no routes
# anywhere else: nothing can leave the machine). sshd (Debian's openssh-server) runs in the
# remote namespace; the desktop's ssh client opens the reverse tunnel the remote assistant
# posts callbacks through. See e2e.py for the checks. Bounded in time (E2E_TIMEOUT, default
# 300 s); the namespaces, sshd and every process started here are removed on exit.
#
# Options are passed to e2e.py: --hermes auto|yes|no (the real Hermes adapter as a second
# remote assistant; `auto` = when tests/interop/install_peers.sh has installed it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [[ "$(id -u)" != "0" ]]; then
  echo "run.sh: needs root (network namespaces, sshd)" >&2
  exit 2
fi

# --- tools (apt only when missing; keep openssh-server from starting a system sshd) --------
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if ((${#need[@]})); then
  echo "run.sh: installing ${need[*]}" >&2
  policy_created=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    policy_created=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  ((policy_created)) && rm -f /usr/sbin/policy-rc.d
fi

# --- the binary ---------------------------------------------------------------------------------
bin="${STAGEWHISPER_BIN:-}"
if [[ -z "$bin" ]]; then
  (cd "$repo" && cargo build --bin stagewhisper)
  bin="${CARGO_TARGET_DIR:-$repo/target}/debug/stagewhisper"
fi
[[ -x "$bin" ]] || { echo "run.sh: no binary at $bin" >&2; exit 2; }

# --- namespaces -------------------------------------------------------------------------------
id="$$"
desk="swt-desk-$id"
remote="swt-remote-$id"
work="$(mktemp -d -t sw-tunnel-e2e.XXXXXX)"
chmod 755 "$work"

cleanup() {
  local rc=$?
  for ns in "$desk" "$remote"; do
    if ip netns list | grep -qw "$ns"; then
      # Only processes in the namespaces created above (all started by this run).
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
      sleep 0.5
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  if [[ -n "${SW_KEEP_E2E_DIR:-}" || $rc -ne 0 ]]; then
    echo "run.sh: logs kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit $rc
}
trap cleanup EXIT INT TERM

ip netns add "$desk"
ip netns add "$remote"
# The veth pair is created directly inside the two namespaces.
ip link add "swtd$id" netns "$desk" type veth peer name "swtr$id" netns "$remote"
ip -n "$desk" addr add 10.203.0.1/30 dev "swtd$id"
ip -n "$remote" addr add 10.203.0.2/30 dev "swtr$id"
for ns in "$desk" "$remote"; do
  ip -n "$ns" link set lo up
done
ip -n "$desk" link set "swtd$id" up
ip -n "$remote" link set "swtr$id" up

timeout --kill-after=10 "${E2E_TIMEOUT:-300}" \
  ip netns exec "$desk" python3 "$here/e2e.py" --bin "$bin" --remote-ns "$remote" --workdir "$work" "$@"
