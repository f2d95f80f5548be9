#!/usr/bin/env bash
# Install tcmalloc (Debian's libtcmalloc-minimal4) for `./dev bench` where it can: as root, with apt.
# Optional: without it the benchmarks run on the C library's malloc and say so in their report.
set -euo pipefail
if ldconfig -p 2>/dev/null | grep -q 'libtcmalloc_minimal\.so\.4 '; then
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" libtcmalloc-minimal4 \
  || { echo "ensure-tcmalloc: tcmalloc is not installed and cannot be installed here (needs root and apt); the C library's malloc is used" >&2; exit 1; }
