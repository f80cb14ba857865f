#!/usr/bin/env bash
# Regenerates the committed real-data benchmark (docs/results/) on this machine's CPUs (many CPU-hours:
# the published run is a GPU job, scripts/device.sh publish; docs/results/README.md says how it ran):
#   docs/results/<dataset>/       configs/<dataset>.yaml with its variants set to the matched variant P
#                                 (ten seeds, every method on the paper's grids): Bibtex, Delicious,
#                                 StackEx-cooking, Corel5k
#   the earlier runs (five seeds, CPU, warm start, legacy protocol) left docs/results; their configs stay
#                                 in tests/golden/published-configs/ and rerun into runs/ with `./scripts/benchmark.sh --earlier`
# then copies each sweep's report into docs/results/<name>/. The run ids of the committed folders are
# pinned in tests/poxm_core/config/test_config.py.
# A sweep that already finished is not recomputed (`poxm run` continues the same run directory), so
# running this again only rebuilds the reports.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
publish() {   # publish CONFIG OUT_NAME [overrides...]   (CONFIG: a dataset name under configs/, or a file)
  local ds=$1 out=$2; shift 2
  local cfg="configs/$ds.yaml"; [ -f "$ds" ] && cfg=$ds
  .venv/bin/poxm run "$cfg" runs_dir=runs "$@"
  run_dir=runs/$(.venv/bin/python -c "import sys; from poxm_core.config.schema import load_config; from orchestration.rundir import sweep_id; print(sweep_id(load_config(sys.argv[1], sys.argv[2:])))" "$cfg" runs_dir=runs "$@")
  .venv/bin/poxm report "$run_dir"
  mkdir -p docs/results && rm -rf "docs/results/$out.tmp" && cp -r "$run_dir/report" "docs/results/$out.tmp"
  gzip -9 -c "$run_dir/results/rows.csv" > "docs/results/$out.tmp/rows.csv.gz"   # every row, per-epoch ones too
  cp "$run_dir/results/prepare.csv" "$run_dir/results/selection.csv" "docs/results/$out.tmp/"
  sed -i 's|](../results/selection.csv)|](selection.csv)|' "docs/results/$out.tmp/index.md"   # the folder is flat
  if [ -f "$run_dir/results/test_instances.npz" ]; then   # the selected heads' per-instance values (claims)
    .venv/bin/python -c "import sys, pandas as pd; from pathlib import Path; from orchestration.report.instances import write_selected; write_selected(Path(sys.argv[1]), pd.read_csv(sys.argv[2]), Path(sys.argv[3]))" \
      "$run_dir/results/test_instances.npz" "$run_dir/results/selection.csv" "docs/results/$out.tmp/instances"
  fi
  # index.html embeds every figure as base64 (for MLflow's sandboxed view; it stays in the run directory):
  # in git it would duplicate figures/ at 0.8-2 MB a report, so docs/results keeps index.md + figures/.
  rm -f "docs/results/$out.tmp/index.html"
  sed "s|^runs_dir: .*|runs_dir: runs|" "$run_dir/config.yaml" > "docs/results/$out.tmp/config.yaml"   # no machine paths
  rm -rf "docs/results/$out" && mv "docs/results/$out.tmp" "docs/results/$out"
}
P='datasets.0.variants=[{name: P, alpha: 0.2, beta: 0.0, match: {logging_to_skyline_R@5: 0.51}}]'
for ds in bibtex delicious stackex-cooking corel5k; do   # mldr_misc: two save_npz pairs, declared in the configs
  publish "$ds" "$ds" "$P"
done
if [ "${1:-}" = --earlier ]; then   # the superseded runs, each from its own config (docs/results/README.md)
  for cfg in tests/golden/published-configs/*.yaml; do   # reports stay in runs/<id>/report (not published)
    .venv/bin/poxm run "$cfg" runs_dir=runs
  done
fi
echo "reports in docs/results/{bibtex,delicious,stackex-cooking,corel5k}/index.md"
