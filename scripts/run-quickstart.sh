#!/usr/bin/env bash
# From a fresh clone: create .venv (scripts/bootstrap.sh), then run the quickstart sweep
# (configs/quickstart.yaml: generated data, every method, a few minutes on 2 CPU cores).
# Extra arguments go to `poxm run`, e.g. `./scripts/run-quickstart.sh training.epochs=5`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/poxm run configs/quickstart.yaml "$@"
