#!/usr/bin/env bash
# Install Debian packages quietly where this machine allows it (root and apt): install, and if that
# fails (no package lists yet on a fresh machine) update the lists once and try again.
# Exit status: 0 when installed, non-zero when it cannot be done here.
set -euo pipefail
[ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 || exit 1
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "$@" >/dev/null 2>&1 \
  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$@" >/dev/null 2>&1; }
