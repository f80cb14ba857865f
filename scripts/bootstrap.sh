#!/usr/bin/env bash
# Creates .venv (once) and installs poxm with its test extras from pyproject.toml.
# Idempotent: a second call only re-installs the project itself (fast).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=.venv/.poxm-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q -e ".[test]"
  touch "$stamp"
fi
