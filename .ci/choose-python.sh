#!/usr/bin/env bash
# Print the interpreter `./dev` builds .venv from.
#
#   $PYTHON, when set: the caller's choice, used as it is;
#   else the distribution's CPython 3.11 (/usr/bin/python3.11), when it can make a virtual
#     environment and has its C headers (for the compiled core); as root with apt, Debian's
#     python3.11-venv and python3.11-dev are installed first where they are missing;
#   else python3.11 on PATH, else python3.
#
# Why the distribution's: Debian builds its interpreter with profile-guided optimisation and
# link-time optimisation; the 1M-event load took 12-16 % less loading-thread CPU on it than on a
# source build without them (what pyenv makes by default, and the python3.11 first on PATH on this
# project's machines; docs/performance.md). The deploy image's python:3.11-slim is an optimised build too.
# EDGELEDGER_SYSTEM_PYTHON=0 skips the distribution's interpreter.
set -euo pipefail

if [ -n "${PYTHON:-}" ]; then
  printf '%s\n' "$PYTHON"
  exit 0
fi

SYSTEM=/usr/bin/python3.11

usable() {
  # A venv with pip (ensurepip) and the headers mypyc compiles against.
  "$SYSTEM" - <<'EOF' >/dev/null 2>&1
import ensurepip, os, sysconfig, venv
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
EOF
}

if [ "${EDGELEDGER_SYSTEM_PYTHON:-1}" != 0 ] && [ -x "$SYSTEM" ]; then
  if usable || { bash "$(dirname "$0")/apt-install.sh" python3.11-venv python3.11-dev && usable; }; then
    printf '%s\n' "$SYSTEM"
    exit 0
  fi
fi
if command -v python3.11 >/dev/null 2>&1; then
  printf '%s\n' python3.11
else
  printf '%s\n' python3
fi
