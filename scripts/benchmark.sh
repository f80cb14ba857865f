#!/usr/bin/env bash
# Regenerates the exploratory real-data benchmark (docs/results/real-data/ and its per-dataset pages
# docs/results/{bibtex,delicious,stackex-cooking,corel5k}/) on this machine, in the published format:
#   1. `poxm run docs/results/real-data/config.yaml runs_dir=runs device=cpu [overrides]` (no GPU share): the published
#      sweep's own resolved config (ten seeds, variant P, every method on the paper's grids: many CPU-hours;
#      the published run was a GPU job, scripts/device.sh publish; docs/results/README.md says how it ran);
#   2. the run folded as a device stage is (`scripts/device.sh publish fold`: config, final rows, logging
#      statistics, selection, the selected heads' per-instance values) and published from what the folder
#      keeps (`scripts/publish_results.py`: Markdown and CSV tables, PNG figures, rows and values at the
#      published precision), so `python scripts/rebuild_results.py --check` agrees with it afterwards;
#   3. each dataset's page (`publish_results.py docs/results/real-data --dataset D`), linking to the sweep's files.
#
#   ./scripts/benchmark.sh [key=value ...]    e.g. 'methods.poxm.p=[10,50]' to shrink the grids: a CPU
#                                              convenience, never what is published (the config says so)
# A sweep that already finished is not recomputed (`poxm run` continues the same run directory), so running
# this again only republishes. The confirmatory run (the headline) is a GPU job in stages: docs/results/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
PY=.venv/bin/python
cfg=docs/results/real-data/config.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$cfg" "$tmp/config.yaml"     # the published folder is rewritten below: run from a copy
CPU=(device=cpu resources.gpus_per_trial=0 resources.mps=false)   # it ran on GPUs: here on CPUs
.venv/bin/poxm run "$tmp/config.yaml" runs_dir=runs "${CPU[@]}" "$@"
run_dir=runs/$("$PY" -c "import sys; from poxm_core.config.schema import load_config; from orchestration.rundir import sweep_id; print(sweep_id(load_config(sys.argv[1], sys.argv[2:])))" "$tmp/config.yaml" runs_dir=runs "${CPU[@]}" "$@")
PYTHON=$PY scripts/device.sh publish fold "$run_dir" "$tmp/real-data" > /dev/null
"$PY" scripts/publish_results.py "$tmp/real-data" --out docs/results/real-data
# once more from itself: its index.md then names the command that rebuilds it from the folder (not $tmp)
"$PY" scripts/publish_results.py docs/results/real-data --out docs/results/real-data
for ds in bibtex delicious stackex-cooking corel5k; do
  "$PY" scripts/publish_results.py docs/results/real-data --dataset "$ds" --out "docs/results/$ds"
done
echo "reports in docs/results/{real-data,bibtex,delicious,stackex-cooking,corel5k}/index.md"
