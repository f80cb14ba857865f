#!/usr/bin/env bash
# From a fresh clone: create .venv (scripts/bootstrap.sh), then run the tests (pytest).
#   ./scripts/test.sh              the fast tier: every test not marked `slow` (about 1,245 tests; 120 s of pytest on
#                                  2 quiet CPU cores; the set-up from a pip cache 123 s; README.md says the same
#                                  and has the other conditions measured)
#   ./scripts/test.sh --all        everything in one pytest run (what .ci/run runs): the fast tier first, then the
#                                  slow one (Ray, MLflow servers, `poxm` subprocesses, longer training runs: about
#                                  115 tests), which runs only when no fast test failed
#   ./scripts/test.sh --slow       the slow tier only
# Other arguments go to pytest, e.g. `./scripts/test.sh tests/orchestration/test_cli.py` or `./scripts/test.sh --all -k resume`.
# Every run ends with its 25 slowest tests (set-up, call and tear-down each), so where the time goes is in the log.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=(-m "not slow")
args=()
for a in "$@"; do
  case "$a" in
    --all) tier=(--fast-first) ;;
    --slow) tier=(-m slow) ;;
    *) args+=("$a") ;;
  esac
done
./scripts/bootstrap.sh
exec .venv/bin/python -m pytest -q --durations=25 ${tier[@]+"${tier[@]}"} ${args[@]+"${args[@]}"}
