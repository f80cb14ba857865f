#!/usr/bin/env bash
# The Amazon-670K-shaped 16-head grid on one GPU: the batched step's kernels per batch
# (profile_batched_kernels.py, lazy input layer) and the whole trial (bench_trial.py grid,
# p3_grid_seconds), check_cuda_paths.py first. Run detached (benchmarks/detached.sh); results under
# $1 (default /tmp/grid).
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-/tmp/grid}
mkdir -p "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD"
PY=${PYTHON:-python3}
echo "== check_cuda_paths $(date +%T)"
"$PY" benchmarks/check_cuda_paths.py --out "$R/cuda" > "$R/cuda_paths.log" 2>&1
grep -E "^adam" "$R/cuda_paths.log" | cut -c1-600
echo "== kernels $(date +%T)"
"$PY" benchmarks/profile_batched_kernels.py --parts grid --set training.input_adam=lazy --top 30 \
  --json "$R/kernels.json" > "$R/kernels.log" 2>&1
grep -E '"(epoch|busy|wall|kernels)' "$R/kernels.log"
echo "== grid lazy $(date +%T)"
"$PY" benchmarks/bench_trial.py grid --batched-heads --input-adam lazy --out "$R/lazy" > "$R/grid-lazy.log" 2>&1
grep -E "epoch|timing" "$R/grid-lazy.log" | cut -c1-400
echo "== done $(date +%T)"
