#!/usr/bin/env bash
# System libraries a fresh Debian machine may lack: libsodium (ristretto255 backend) and
# WordNet (an optional public pool for the retrieval inverter) and the fortunes (an optional
# second corpus), and Chromium (the join page's browser tests drive it headless).
set -euo pipefail
need=()
ldconfig -p | grep -q 'libsodium\.so\.23' || need+=(libsodium23)
[ -d /usr/share/wordnet ] || need+=(wordnet-base)
[ -d /usr/share/games/fortunes ] || need+=(fortunes)
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" \
      || echo "warning: could not install ${need[*]}" >&2
  else
    echo "warning: missing system packages ${need[*]} (run as root with apt-get to install)" >&2
  fi
fi
