#!/usr/bin/env bash
# The single-GPU speed figures of docs/performance.md in one go (run detached: benchmarks/detached.sh):
# the Amazon-670K-shaped 16-head grid with the lazy and the dense input layer (p3_grid_seconds, and the
# heads' results under both), the Bibtex trial through `poxm train` (bibtex_trial_seconds) and its GPU
# busy time by stage, the evaluation's stages (profile_trial.py), check_cuda_paths.py first.
# Results under $1 (default /tmp/speed); DENSE=1 adds the grid with the dense input layer.
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-/tmp/speed}
mkdir -p "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD" POXM_DATA_ROOT=${POXM_DATA_ROOT:-$PWD/.data}
PY=${PYTHON:-python3}
echo "== check_cuda_paths $(date +%T)"
"$PY" benchmarks/check_cuda_paths.py --out "$R/cuda" > "$R/cuda_paths.log" 2>&1
tail -4 "$R/cuda_paths.log" | cut -c1-400
echo "== grid lazy $(date +%T)"
"$PY" benchmarks/bench_trial.py grid --batched-heads --input-adam lazy --out "$R/lazy" > "$R/grid-lazy.log" 2>&1
tail -2 "$R/grid-lazy.log"
echo "== bibtex trial $(date +%T)"
rm -rf /tmp/bib
GPU_TRIALS=/tmp/bib benchmarks/gpu_trials.sh start configs/bibtex.yaml "device=cuda resources.gpus_per_trial=0.125 resources.cpus_per_trial=1 seeds=[0,1,2,3,4] mlflow.enabled=false training.batched_heads=true" bibtex:A:0 \
  && GPU_TRIALS=/tmp/bib benchmarks/gpu_trials.sh wait 200 "$R" > "$R/bib.log" 2>&1
cp /tmp/bib/bibtex-A-s0/summary.json "$R/bib-summary.json" 2>/dev/null
echo "== bibtex busy $(date +%T)"
"$PY" benchmarks/profile_gpu_busy.py configs/bibtex.yaml device=cuda training.batched_heads=true "seeds=[0]" \
  --cache-dir /tmp/bib/cache --dataset bibtex --variant A --seed 0 --json "$R/bib_busy.json" > "$R/bib_busy.log" 2>&1
echo "== evaluation profile $(date +%T)"
"$PY" benchmarks/profile_trial.py --parts eval grid --out "$R/profile" > "$R/profile.log" 2>&1
grep -E "^\[|load" "$R/profile.log" | head -30
if [ -n "${DENSE:-}" ]; then
  echo "== grid dense $(date +%T)"
  "$PY" benchmarks/bench_trial.py grid --batched-heads --input-adam dense --out "$R/dense" > "$R/grid-dense.log" 2>&1
  tail -2 "$R/grid-dense.log"
fi
echo "== done $(date +%T)"
