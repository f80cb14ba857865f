#!/usr/bin/env bash
# Regenerates the committed real-data benchmark report (docs/results/): the Bibtex and Delicious
# sweeps (paper's EUR-Lex variants A/B/C, 3 seeds, every method, the paper's (p, lambda) grids),
# then copies each sweep's report into docs/results/<dataset>/.
# A sweep that already finished is not recomputed (`poxm run` continues the same run directory), so
# running this again only rebuilds the reports. About 45 minutes from scratch on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
for ds in bibtex delicious; do
  .venv/bin/poxm run "configs/$ds.yaml" "$@"
  # the run directory is named by the config's content hash (orchestration/rundir.py)
  run_dir=runs/$(.venv/bin/python -c "import sys; from poxm_core.config import load_config; from orchestration.rundir import sweep_id; print(sweep_id(load_config(sys.argv[1], sys.argv[2:])))" "configs/$ds.yaml" "$@")
  .venv/bin/poxm report "$run_dir"
  mkdir -p docs/results && rm -rf "docs/results/$ds.tmp" && cp -r "$run_dir/report" "docs/results/$ds.tmp"
  gzip -9 -c "$run_dir/results/rows.csv" > "docs/results/$ds.tmp/rows.csv.gz"   # every row, per-epoch ones too
  cp "$run_dir/results/prepare.csv" "docs/results/$ds.tmp/"
  rm -rf "docs/results/$ds" && mv "docs/results/$ds.tmp" "docs/results/$ds"
done
echo "reports in docs/results/{bibtex,delicious}/index.md"
