#!/usr/bin/env bash
# From a fresh clone: create .venv (scripts/bootstrap.sh), then run the whole test suite.
# Extra arguments go to pytest, e.g. `./scripts/test.sh -m "not slow"` or `./scripts/test.sh tests/test_cli.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/python -m pytest -q "$@"
