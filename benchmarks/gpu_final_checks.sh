#!/usr/bin/env bash
# The two single-GPU trial figures of docs/performance.md: p3_grid_seconds (bench_trial.py grid, lazy input
# layer as configs/amazon-670k.yaml) and bibtex_trial_seconds (configs/bibtex.yaml's trial A/0 through
# `poxm train`, alone on the card), with the machine's CPU. Run detached (benchmarks/detached.sh);
# results under $1 (default /tmp/final). Needs .data/bibtex (POXM_DATA_ROOT).
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-/tmp/final}
mkdir -p "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD" POXM_DATA_ROOT=${POXM_DATA_ROOT:-$PWD/.data}
PY=${PYTHON:-python3}
echo "== machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== bibtex trial $(date +%T)"
rm -rf /tmp/bib
GPU_TRIALS=/tmp/bib benchmarks/gpu_trials.sh start configs/bibtex.yaml "device=cuda resources.gpus_per_trial=0.125 resources.cpus_per_trial=1 seeds=[0,1,2,3,4] mlflow.enabled=false training.batched_heads=true" bibtex:A:0 \
  && GPU_TRIALS=/tmp/bib benchmarks/gpu_trials.sh wait 200 "$R" > "$R/bib.log" 2>&1
cp /tmp/bib/bibtex-A-s0/summary.json "$R/bib-summary.json" 2>/dev/null
"$PY" -c "import json; d=json.load(open('$R/bib-summary.json')); print('bibtex', d['seconds'], d['timing'])"
echo "== grid lazy $(date +%T)"
"$PY" benchmarks/bench_trial.py grid --batched-heads --input-adam lazy --out "$R/lazy" > "$R/grid-lazy.log" 2>&1
grep -E "epoch|timing" "$R/grid-lazy.log" | cut -c1-400
echo "== done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
