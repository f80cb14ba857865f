#!/usr/bin/env bash
# From a fresh clone: create .venv (scripts/bootstrap.sh), then run the tests (pytest).
#   ./scripts/test.sh              the fast tier: every test not marked `slow` (about 1,060 tests, 133 s of pytest on
#                                  2 CPU cores with other tests beside it; the set-up from a pip cache 123 s; README.md
#                                  says the same)
#   ./scripts/test.sh --all        everything, the slow tier included (Ray, MLflow servers, `poxm` subprocesses,
#                                  longer training runs: about 100 tests, 17.7 min on 2 shared CPU cores)
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
