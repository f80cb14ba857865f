#!/usr/bin/env bash
# The real-data benchmark on a GPU machine, one `poxm run` per dataset config (every variant, seeds 0-4,
# every method), trials packed into Ray Train jobs and 8 jobs sharing each GPU (gpus_per_trial 0.125; GPU_SHARE=F: F),
# heads of a trial trained as one batched step, under NVIDIA MPS (GPU_MPS=false: time-slicing). Run from the repository root on the GPU machine after
# Ray was unpacked into /tmp/site (benchmarks/gpu_sweep.sh's notes); the data under $POXM_DATA_ROOT.
#
#   benchmarks/gpu_real_data.sh run   DEADLINE_S DATASET...   start or continue each sweep until the deadline
#   benchmarks/gpu_real_data.sh bytecode                       compile the machine's packages (and /tmp/site) into
#                                                              $PYTHONPYCACHEPREFIX (default /tmp/pyc); then export it
#   benchmarks/gpu_real_data.sh pack  OUTDIR                   each sweep's final rows (.csv.gz) and its files
#                                                              (no per-epoch rows, checkpoints, figures) as one tar
#
# SEEDS='[0]' runs fewer seeds (default [0,1,2,3,4]); GPU_RUNS sets where the run directories and the
# prepare cache go (default /tmp/gpu-real-runs; a new folder starts from an empty cache); EXTRA_OVERRIDES
# adds config overrides (e.g. 'resources.startup_concurrency=0').
#
# A sweep cut by the deadline (SIGTERM: trials stop, exit 130) continues with the same command: the
# same config maps to the same run directory and finished trials are kept.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD"
export POXM_DATA_ROOT=${POXM_DATA_ROOT:-$PWD/.data}
RUNS=${GPU_RUNS:-/tmp/gpu-real-runs}
PY=${PYTHON:-python3}
cmd=$1; shift
if [ "$cmd" = bytecode ]; then
  # where Python writes no bytecode (PYTHONDONTWRITEBYTECODE=1, as on the device tool's machines) and the
  # packages ship without it, every process of a sweep compiles torch, numpy and Ray from source (import
  # torch 5.6 s there against 3.6-4.2 s). Compiled once into a folder of its own, as pip install does.
  export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pyc}
  site=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  "$PY" -m compileall -q -j "$(nproc)" "$site" /tmp/site > /dev/null 2>&1   # a few test files do not compile: ignored
  echo "bytecode in $PYTHONPYCACHEPREFIX: export PYTHONPYCACHEPREFIX=$PYTHONPYCACHEPREFIX before 'run'"; exit 0
fi
if [ "$cmd" = pack ]; then
  # small enough to come back from a machine that limits what it returns: each sweep's final rows (one
  # per grid point, seed, metric; results/rows.csv also holds every epoch's, 35 MB for real-data) as
  # <sweep>.final-rows.csv.gz, and its files without the per-epoch rows, the checkpoints, the figures and
  # the self-contained index.html (index.md and the tables stay)
  out=$1
  for d in "$RUNS"/*/; do
    [ -f "$d/results/rows.csv" ] || continue
    "$PY" -c 'import sys, pandas as pd; r = pd.read_csv(sys.argv[1]); r[r["final"]].to_csv(sys.argv[2], index=False)' \
      "$d/results/rows.csv" "$out/$(basename "$d").final-rows.csv.gz" || exit 1
  done
  tar czf "$out/real-data-runs.tgz" -C "$RUNS" --exclude=checkpoints --exclude='ray' --exclude=cache --exclude='*.pt' \
    --exclude=rows.csv --exclude=figures --exclude=index.html --exclude=mlartifacts --exclude=mlflow.db .
  ls -la "$out"; exit 0
fi
deadline=$(( $(date +%s) + $1 )); shift
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
OVR=(device=cuda "resources.gpus_per_trial=${GPU_SHARE:-0.125}" resources.cpus_per_trial=1 "seeds=${SEEDS:-[0,1,2,3,4]}" "resources.mps=${GPU_MPS:-true}"
     mlflow.enabled=false training.batched_heads=true ${EXTRA_OVERRIDES:-})
echo "== $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus; $(nproc) CPUs"
for ds in "$@"; do
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 30 ] || { echo "== $ds: no time left"; continue; }
  echo "== $ds ($left s left) $(date +%T)"
  t0=$(date +%s)
  timeout -s TERM "$left" "$PY" -m orchestration.cli run "configs/$ds.yaml" "${OVR[@]}" --runs-dir "$RUNS" 2>&1 | tail -25
  echo "== $ds: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
done
for d in "$RUNS"/*/; do [ -f "$d/sweep.json" ] && "$PY" -m orchestration.cli status "$d" | head -3; done
