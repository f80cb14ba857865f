#!/usr/bin/env bash
# Creates .venv (once) and installs poxm with its test extras: the ranges of pyproject.toml, at the exact
# versions of constraints.txt (docs/dependencies.md).
# Idempotent: a second call only re-installs when pyproject.toml or constraints.txt changed.
# Says what it installs and how long it took; pip's own output stays quiet (-q).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
t0=$(date +%s)
say() { echo "bootstrap: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1) ($PY)"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=.venv/.poxm-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  say "installing poxm and its dependencies into .venv at the versions of constraints.txt:"
  say "  torch (CPU build), ray[tune,train], mlflow, numpy, scipy, pandas, matplotlib, pytest, ..."
  say "  (a fresh machine downloads them from PyPI: minutes; .venv ends up at about 2 GB)"
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[test]"
  touch "$stamp"
  say "installed in $(( $(date +%s) - t0 )) s; $(.venv/bin/python -m pip list 2>/dev/null | tail -n +3 | wc -l) packages in .venv"
else
  say ".venv is up to date (constraints.txt and pyproject.toml unchanged since the last install)"
fi
