#!/usr/bin/env bash
# Ensure `promtool` (Prometheus rule/config checker) is available.
#
# If promtool is already on PATH and runs, do nothing. Otherwise install Debian's
# `prometheus` package (which ships /usr/bin/promtool) non-interactively, as root.
#
# The package's post-install script tries to enable/start the prometheus service.
# There is no systemd (nor any init) on CI/dev machines, so we install a temporary
# /usr/sbin/policy-rc.d that denies service starts (exit 101) when none exists, and
# we tolerate a failing post-install as long as the promtool binary itself works.
#
# Exit status: 0 when `promtool --version` works afterwards, non-zero otherwise.
set -euo pipefail

log() { printf 'ensure-promtool: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

promtool_ok() {
    hash -r 2>/dev/null || true
    command -v promtool >/dev/null 2>&1 && promtool --version >/dev/null 2>&1
}

if promtool_ok; then
    log "promtool already available: $(command -v promtool) ($(promtool --version 2>&1 | head -n1))"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "promtool is missing and installing it needs root (apt-get install prometheus); run this script as root."
command -v apt-get >/dev/null 2>&1 || die "promtool is missing and apt-get is not available; install promtool (Prometheus) by other means."

export DEBIAN_FRONTEND=noninteractive
export NEEDRESTART_MODE=a

# Deny service (re)starts during the install unless the machine already has a policy.
POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if [ "$created_policy" -eq 1 ]; then
        rm -f "$POLICY"
    fi
}
trap cleanup EXIT
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\n# temporary, written by .ci/ensure-promtool.sh\nexit 101\n' >"$POLICY"
    chmod 0755 "$POLICY"
    created_policy=1
fi

APT_OPTS=(-o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

start=$(date +%s)
log "promtool not found; installing Debian package 'prometheus' (apt-get update + install)..."
apt-get "${APT_OPTS[@]}" update -q || die "apt-get update failed; cannot install promtool."

if ! apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends prometheus; then
    # Most likely the post-install failed trying to start the service. The binaries
    # are unpacked at that point; try to finish configuration, then judge by promtool.
    log "apt-get install returned non-zero (post-install service start?); trying 'dpkg --configure -a'."
    dpkg --force-confdef --force-confold --configure -a || log "dpkg --configure -a also failed; checking promtool anyway."
fi

if ! promtool_ok; then
    if [ -x /usr/bin/promtool ] && /usr/bin/promtool --version >/dev/null 2>&1; then
        die "promtool was installed at /usr/bin/promtool but /usr/bin is not on PATH ($PATH)."
    fi
    die "promtool is still not usable after installing the 'prometheus' package ('promtool --version' failed)."
fi

log "installed $(command -v promtool) in $(( $(date +%s) - start ))s: $(promtool --version 2>&1 | head -n1)"
