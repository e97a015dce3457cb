#!/usr/bin/env bash
# Run a command inside a fresh, loopback-only network namespace.
#
#   tests/interop/in_netns.sh python3 tests/interop/smoke.py
#
# `unshare -n` gives the command a network namespace whose only interface is `lo`
# (brought up here); nothing in it can reach any non-loopback address. Every process
# of the harness (callback receiver / app, stub model, both peers, the driver) must run
# inside the same namespace, so run the whole thing under this script.
# Needs root (or unprivileged user namespaces: then `unshare -rn` is used).
set -euo pipefail
if (($# == 0)); then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi
if [[ "${SW_IN_NETNS:-}" == "1" ]]; then
  exec "$@"  # already inside one
fi
for tool in unshare ip; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "in_netns.sh: '$tool' missing (apt-get install -y util-linux iproute2)" >&2
    exit 127
  }
done
if [[ "$(id -u)" == "0" ]]; then
  UNSHARE=(unshare --net)
else
  UNSHARE=(unshare --map-root-user --net)
fi
export SW_IN_NETNS=1
exec "${UNSHARE[@]}" -- bash -c '
  set -e
  ip link set lo up
  # sanity: only loopback is present and up
  if ip -o link show | grep -v " lo:" | grep -q .; then
    echo "in_netns.sh: unexpected interfaces in the namespace" >&2; ip -o link show >&2; exit 1
  fi
  exec "$@"
' in_netns "$@"
