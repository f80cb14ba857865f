#!/usr/bin/env bash
# From a fresh clone: create .venv (scripts/bootstrap.sh), then run the tests (pytest).
#   ./scripts/test.sh              the fast tier: every test not marked `slow` (about 1,250 tests; 98 s of pytest on
#                                  2 quiet CPU cores in 2 worker processes; the set-up from a pip cache 123 s;
#                                  README.md says the same and has the other conditions measured)
#   ./scripts/test.sh --all        both tiers (what .ci/run runs): the fast one, then the slow one (Ray, MLflow
#                                  servers, `poxm` subprocesses, longer training runs: about 120 tests) only when
#                                  no fast test failed
#   ./scripts/test.sh --slow       the slow tier only
# Other arguments go to pytest, e.g. `./scripts/test.sh tests/orchestration/test_cli.py` or `./scripts/test.sh --all -k resume`.
# Every pytest run ends with its 25 slowest tests (set-up, call and tear-down each), so where the time goes is in the log.
#
# The fast tier runs in POXM_TEST_WORKERS processes (pytest-xdist; default: the CPU count, at most 4), a test
# file's tests together in one of them (--dist loadfile: a module's fixtures are built once). The slow tier
# runs in POXM_SLOW_WORKERS (default 2 where there are 2 CPUs or more: on 2 cores 3 were no faster; README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=fast
args=()
for a in "$@"; do
  case "$a" in
    --all) tier=all ;;
    --slow) tier=slow ;;
    *) args+=("$a") ;;
  esac
done
./scripts/bootstrap.sh
cpus=$(nproc 2>/dev/null || echo 2)
fast_n=${POXM_TEST_WORKERS:-$(( cpus < 4 ? cpus : 4 ))}
slow_n=${POXM_SLOW_WORKERS:-$(( cpus < 2 ? 1 : 2 ))}
workers() { if [ "$1" -gt 1 ]; then echo "-n $1 --dist loadfile"; fi; }
# pytest's exit 5 (no test collected, e.g. `-k` matching only the other tier) is not a failure of a tier
tier_run() {
  local rc=0
  # shellcheck disable=SC2046  # the worker options split on purpose
  .venv/bin/python -m pytest -q --durations=25 $(workers "$1") -m "$2" ${args[@]+"${args[@]}"} || rc=$?
  return "$rc"
}
case $tier in
  fast) tier_run "$fast_n" "not slow" ;;
  slow) tier_run "$slow_n" slow ;;
  all)
    rc=0; tier_run "$fast_n" "not slow" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
      echo "test.sh: the fast tier failed (exit $rc): the slow tier was not run" >&2
      exit "$rc"
    fi
    rc_slow=0; tier_run "$slow_n" slow || rc_slow=$?
    if [ "$rc_slow" -eq 5 ] && [ "$rc" -eq 0 ]; then exit 0; fi
    exit "$rc_slow" ;;
esac
