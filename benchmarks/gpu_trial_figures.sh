#!/usr/bin/env bash
# The single-GPU trial figures of docs/performance.md in one go, on a GPU machine whose calls are
# time-limited (run it detached: benchmarks/detached.sh start DIR benchmarks/gpu_trial_figures.sh OUT PARTS...).
#
#   check     benchmarks/check_cuda_paths.py (the GPU fast paths against the plain ones; builds the
#             Triton kernels, so later parts find them compiled)
#   kernels   benchmarks/profile_batched_kernels.py: the batched step's GPU work per batch (grid, lazy
#             input layer, and Bibtex)
#   bibtex    bibtex_trial_seconds: configs/bibtex.yaml's trial A/0 through `poxm train` alone on the card
#             (benchmarks/gpu_trials.sh; needs .data/bibtex or POXM_DATA_ROOT)
#   busy      the same trial's GPU busy time by stage (benchmarks/profile_gpu_busy.py; after bibtex)
#   grid      p3_grid_seconds: bench_trial.py grid with the lazy input layer (as configs/amazon-670k.yaml)
#   dense     the same grid with the dense input layer (the heads' results beside the lazy ones)
#   eval      benchmarks/profile_trial.py --parts eval grid: the evaluation's stages
#
# Results under OUT (default /tmp/trial-figures); PARTS default: check bibtex grid.
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-/tmp/trial-figures}
shift || true
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(check bibtex grid)
mkdir -p "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD" POXM_DATA_ROOT=${POXM_DATA_ROOT:-$PWD/.data}
PY=${PYTHON:-python3}
echo "== machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for part in "${parts[@]}"; do
  echo "== $part $(date +%T)"
  case $part in
    check)
      "$PY" benchmarks/check_cuda_paths.py --out "$R/cuda" > "$R/cuda_paths.log" 2>&1
      grep -E "^adam" "$R/cuda_paths.log" | cut -c1-600;;
    kernels)
      "$PY" benchmarks/profile_batched_kernels.py --parts grid --set training.input_adam=lazy --top 30 \
        --json "$R/kernels-grid.json" > "$R/kernels-grid.log" 2>&1
      "$PY" benchmarks/profile_batched_kernels.py --parts bibtex --top 30 --json "$R/kernels-bibtex.json" \
        > "$R/kernels-bibtex.log" 2>&1
      grep -hE '"(part|busy_ms_per_batch|kernels_per_batch)' "$R"/kernels-*.log;;
    bibtex)
      rm -rf /tmp/bib
      GPU_TRIALS=/tmp/bib benchmarks/gpu_trials.sh start configs/bibtex.yaml "device=cuda resources.gpus_per_trial=0.125 resources.cpus_per_trial=1 seeds=[0,1,2,3,4] mlflow.enabled=false training.batched_heads=true" bibtex:A:0 \
        && GPU_TRIALS=/tmp/bib benchmarks/gpu_trials.sh wait 200 "$R" > "$R/bib.log" 2>&1
      cp /tmp/bib/bibtex-A-s0/summary.json "$R/bib-summary.json" 2>/dev/null
      "$PY" -c "import json; d=json.load(open('$R/bib-summary.json')); print('bibtex', d['seconds'], d['timing'])";;
    busy)
      "$PY" benchmarks/profile_gpu_busy.py configs/bibtex.yaml device=cuda training.batched_heads=true "seeds=[0]" \
        --cache-dir /tmp/bib/cache --dataset bibtex --variant A --seed 0 --json "$R/bib_busy.json" > "$R/bib_busy.log" 2>&1
      tail -c 600 "$R/bib_busy.log";;
    grid|dense)
      adam=$([ "$part" = grid ] && echo lazy || echo dense)
      "$PY" benchmarks/bench_trial.py grid --batched-heads --input-adam "$adam" --out "$R/$adam" > "$R/grid-$adam.log" 2>&1
      grep -E "epoch|timing" "$R/grid-$adam.log" | cut -c1-400;;
    eval)
      "$PY" benchmarks/profile_trial.py --parts eval grid --out "$R/profile" > "$R/profile.log" 2>&1
      grep -E "^\[|load" "$R/profile.log" | head -30;;
    *) echo "gpu_trial_figures.sh: unknown part '$part' (check kernels bibtex busy grid dense eval)" >&2; exit 2;;
  esac
done
echo "== done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
