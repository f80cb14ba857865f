#!/usr/bin/env bash
# configs/amazon-670k.yaml end to end on a GPU machine, on generated data of Amazon-670K's shape
# (synthetic preset amazon670k: 490,449 train / 153,025 test instances, D 135,909, L 670,091), one seed,
# every method, full grids: the config as it is with only the dataset swapped for the generated one
# (same propensity constants and logging variant) and seeds [0]. One trial a card by default
# (GPU_SHARE=1; 0.5 puts two under NVIDIA MPS, but two 16-head trials filled an 80 GB card), the CPUs
# split between them. Run from the repository root after Ray was unpacked into /tmp/site
# (benchmarks/gpu_sweep.sh's notes).
#
#   benchmarks/gpu_amazon_full.sh run   DEADLINE_S  `poxm run`, or `poxm resume` of the run directory
#                                                   when one exists, until the deadline (SIGINT: the
#                                                   trials stop at a checkpoint, exit 130)
#   benchmarks/gpu_amazon_full.sh start DEADLINE_S  `run` detached (setsid; log in $GPU_RUNS/run.log), for
#                                                   machines that end a command's processes when it returns
#                                                   but keep detached ones: one sweep across several commands
#   benchmarks/gpu_amazon_full.sh wait  SECONDS     wait for a started run to end, at most SECONDS; print its
#                                                   status, the log's end and the GPUs' memory
#   benchmarks/gpu_amazon_full.sh pack  OUTDIR      the run's files without checkpoints, per-epoch rows
#                                                   and figures, as one tar, plus its final rows
#
# Each `run` prints the GPU memory peak seen by nvidia-smi (sampled every 2 s) of that invocation and,
# once the sweep has a summary, benchmarks/orchestration_share.py's figures of its run directory.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD"
RUNS=${GPU_RUNS:-/tmp/gpu-amazon-runs}
PY=${PYTHON:-python3}
mkdir -p "$RUNS"
cmd=$1; shift
if [ "$cmd" = pack ]; then   # the same packing as the real-data benchmark's, of this script's runs
  GPU_RUNS="$RUNS" exec benchmarks/gpu_real_data.sh pack "$1"
fi
if [ "$cmd" = start ]; then
  GPU_RUNS="$RUNS" setsid nohup "$0" run "$1" > "$RUNS/run.log" 2>&1 < /dev/null &
  echo "== started (pid $!); log $RUNS/run.log"; exit 0
fi
if [ "$cmd" = wait ]; then
  end=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$end" ] && pgrep -f "gpu_amazon_full.sh run" > /dev/null; do sleep 15; done
  pgrep -f "gpu_amazon_full.sh run" > /dev/null && echo "== still running $(date +%T)" || echo "== ended $(date +%T)"
  tail -40 "$RUNS/run.log"
  for d in "$RUNS"/*/; do [ -f "$d/sweep.json" ] && "$PY" -m orchestration.cli status "$d" | head -24; done
  nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader; exit 0
fi
deadline=$(( $(date +%s) + $1 ))
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
share=${GPU_SHARE:-1}
cpus=$("$PY" -c "import os, sys; g, s = int(sys.argv[1]), float(sys.argv[2]); print(max(1, int(os.cpu_count() // max(1, round(g / s)))))" "$gpus" "$share")
CFG=$RUNS/amazon-670k-generated.yaml
"$PY" - "$CFG" "$share" "$cpus" <<'EOF'
import sys, yaml
cfg = yaml.safe_load(open("configs/amazon-670k.yaml"))
ds = cfg["datasets"][0]
cfg["datasets"] = [{"name": "synthetic", "synthetic": {"preset": "amazon670k"}, "propensity_A": ds["propensity_A"],
                    "propensity_B": ds["propensity_B"], "variants": ds["variants"]}]
cfg["name"], cfg["seeds"] = "amazon-670k-generated", [0]
cfg["resources"].update(gpus_per_trial=float(sys.argv[2]), cpus_per_trial=int(sys.argv[3]), mps=float(sys.argv[2]) < 1)
cfg["mlflow"] = {"enabled": False}          # the GPU machine has no MLflow
cfg["training"]["batched_heads"] = True
yaml.safe_dump(cfg, open(sys.argv[1], "w"), sort_keys=False)
EOF
echo "== $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus; $(nproc) CPUs; $share of a card and $cpus CPUs a trial"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 2000 > "$RUNS/memory.log" 2>/dev/null &
smi=$!
run_dir=$(ls -d "$RUNS"/amazon-670k-generated-*/ 2>/dev/null | head -1)
left=$(( deadline - $(date +%s) ))
t0=$(date +%s)
if [ -n "$run_dir" ] && [ -f "$run_dir/sweep.json" ]; then
  echo "== poxm resume $run_dir ($left s left) $(date +%T)"
  timeout -s INT "$left" "$PY" -m orchestration.cli resume "$run_dir" 2>&1 | tail -30
else
  echo "== poxm run $CFG ($left s left) $(date +%T)"
  timeout -s INT "$left" "$PY" -m orchestration.cli run "$CFG" --runs-dir "$RUNS" 2>&1 | tail -30
fi
echo "== exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
kill "$smi" 2>/dev/null
"$PY" -c 'import sys
peak = {}
for line in open(sys.argv[1]):
    try:
        i, m = (int(x) for x in line.split(","))
    except ValueError:
        continue
    peak[i] = max(peak.get(i, 0), m)
print("== GPU memory peak (MiB) by card:", peak)' "$RUNS/memory.log"
for d in "$RUNS"/*/; do [ -f "$d/sweep.json" ] && "$PY" -m orchestration.cli status "$d" | head -24; done
for d in "$RUNS"/amazon-670k-generated-*/; do   # the figures of the issue's table: wall, share, job start-up
  [ -f "$d/results/sweep_summary.json" ] && "$PY" benchmarks/orchestration_share.py "$d"
done
