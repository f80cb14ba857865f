#!/usr/bin/env bash
# GPU smoke benchmark of the orchestration: `poxm run configs/gpu-smoke.yaml`, a Ray Tune sweep of two
# Ray Train GPU jobs that share one GPU (resources.gpus_per_trial: 0.5). Prints the card, each trial's
# Ray start-up cost (TorchTrainer.fit wall time minus loading and run_trial compute) and the results.
#
# Two modes (see ../shared/notes/ray-on-device.md for how Ray reaches the GPU machine):
#   benchmarks/gpu_sweep.sh pack       HERE, from the repository root: pack Ray (+ what poxm needs beyond
#                                      torch/numpy) into .devpack-aa, -ab, ... (one part per device call)
#   benchmarks/gpu_sweep.sh [key=value ...]   ON THE GPU MACHINE, from the repository root, after the
#                                      parts were unpacked into /tmp/site (the notes' step 4); extra
#                                      arguments are config overrides, e.g. training.epochs=3
# Results go to $OUT/gpu-sweep/ when $OUT is set (the device tool brings that folder back), else /tmp.
# GPU_SWEEP_CPU=1 rehearses the script on a CPU machine (tiny data, 1 epoch, no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "pack" ]; then
  # poxm's imports beyond what the GPU machine has (Python 3.12 + torch + numpy): scipy, tqdm, and
  # matplotlib for the report. MLflow (dozens of wheels) is left out: the sweep then runs with
  # mlflow.enabled=false unless mlflow is importable there.
  exec ../shared/tools/device-ray-pack scipy tqdm matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing
fi

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -d /tmp/site ]; then export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"; else export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"; fi
PY=${PYTHON:-python3}
OUTDIR=${OUT:-/tmp}/gpu-sweep
RUNS=${TMPDIR:-/tmp}/gpu-sweep-runs   # scratch on the GPU machine
mkdir -p "$OUTDIR"

echo "== card"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

echo "== python modules"
overrides=()
"$PY" - <<'EOF' || exit 3
import importlib, sys
need = ["torch", "numpy", "scipy", "pandas", "pydantic", "yaml", "tqdm", "ray", "ray.tune", "ray.train.torch"]
missing = []
for m in need:
    try:
        mod = importlib.import_module(m)
        print(f"  {m:16s} {getattr(mod, '__version__', '')}")
    except Exception as exc:  # noqa: BLE001
        missing.append(f"{m} ({type(exc).__name__}: {exc})")
import torch
print(f"  cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
import os
if missing or (not torch.cuda.is_available() and os.environ.get("GPU_SWEEP_CPU") != "1"):
    print("missing: " + "; ".join(missing) + " (pack them: benchmarks/gpu_sweep.sh pack)" if missing else "no CUDA device")
    sys.exit(3)
EOF
"$PY" -c "import mlflow" 2>/dev/null || { echo "  mlflow: absent -> mlflow.enabled=false"; overrides+=(mlflow.enabled=false); }
"$PY" -c "import matplotlib" 2>/dev/null || echo "  matplotlib: absent -> no figures (the report is skipped)"

if [ "${GPU_SWEEP_CPU:-}" = "1" ]; then
  overrides+=(device=cpu resources.gpus_per_trial=0 resources.cpus_per_trial=1 training.epochs=1
              datasets.0.synthetic.scale=0.1 model.epochs=2)
fi

echo "== sweep"
rm -rf "$RUNS"
t0=$(date +%s.%N)
"$PY" -m orchestration.cli run configs/gpu-smoke.yaml --runs-dir "$RUNS" "${overrides[@]}" "$@" 2>&1 \
  | tr '\r' '\n' | grep -v '^\s*$' | grep -v '^trials:' | tee "$OUTDIR/run.log" | tail -25 || true
t1=$(date +%s.%N)

echo "== figures"
RUNS="$RUNS" WALL=$("$PY" -c "print($t1 - $t0)") "$PY" - <<'EOF' | tee "$OUTDIR/figures.txt"
import glob, json, os
from pathlib import Path
import pandas as pd
run = Path(sorted(glob.glob(os.environ["RUNS"] + "/gpu-smoke-*"))[0])
summ = json.loads((run / "results/sweep_summary.json").read_text()); summ.pop("history", None)
print(f"run dir {run}")
print(f"wall {float(os.environ['WALL']):.1f} s (poxm run, Ray start included); sweep summary: {summ}")
for t in json.loads((run / "sweep.json").read_text())["trials"]:
    d = run / "trials" / t
    done = json.loads((d / "done.json").read_text())
    att = json.loads((d / "timing.json").read_text())["attempts"]
    load = sum(a["load_s"] for a in att); comp = sum(a["run_trial_s"] for a in att)
    dev = json.loads((d / "summary.json").read_text())["device"]
    if done.get("job", t) != t:    # a pack (resources.trials_per_job): fit_s also holds the job's earlier trials
        print(f"trial {t}: device {dev}, job {done['job']}, load {load:.1f} s + run_trial {comp:.1f} s ({len(att)} attempt(s))")
        continue
    print(f"trial {t}: device {dev}, TorchTrainer.fit {done['fit_s']:.1f} s = start-up "
          f"{done['fit_s'] - load - comp:.1f} s + load {load:.1f} s + run_trial {comp:.1f} s ({len(att)} attempt(s))")
from poxm_core.training.train_command import final_table
rows = pd.read_csv(run / "results/rows.csv")
with pd.option_context("display.width", 160, "display.float_format", "{:.3f}".format):
    for v, g in rows.groupby("variant"):
        print(f"\nvariant {v}: final validation SNIS and test metrics (x100)")
        print(final_table(g).to_string())
sel = run / "results/selection.csv"
if sel.exists():
    print("\nselection (SNIS) and oracle (test R@5):")
    print(pd.read_csv(sel).to_string(index=False))
EOF
RUN=$(ls -d "$RUNS"/gpu-smoke-* | head -1)
echo "== orchestration share"
"$PY" benchmarks/orchestration_share.py "$RUN" | tee -a "$OUTDIR/figures.txt" || true
cp -r "$RUN/results" "$OUTDIR/" 2>/dev/null || true
[ -d "$RUN/report" ] && cp -r "$RUN/report" "$OUTDIR/" || true
