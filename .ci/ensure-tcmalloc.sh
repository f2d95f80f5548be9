#!/usr/bin/env bash
# Install tcmalloc (Debian's libtcmalloc-minimal4) for `./dev bench` where it can: as root, with apt.
# Optional: without it the benchmarks run on the C library's malloc and say so in their report.
set -euo pipefail
if ldconfig -p 2>/dev/null | grep -q 'libtcmalloc_minimal\.so\.4 '; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-tcmalloc: tcmalloc is not installed and cannot be installed here (needs root and apt); the C library's malloc is used" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1 \
  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1; } \
  || { echo "ensure-tcmalloc: apt-get install libtcmalloc-minimal4 failed; the C library's malloc is used" >&2; exit 1; }
