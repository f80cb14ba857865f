#!/usr/bin/env bash
# Creates .venv (once) and installs poxm with its test extras: the ranges of pyproject.toml, at the exact
# versions of constraints.txt (docs/dependencies.md).
# Idempotent: a second call only re-installs when pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=.venv/.poxm-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[test]"
  touch "$stamp"
fi
