#!/usr/bin/env bash
# The GPU machine's runbooks (a machine lent for minutes a call, whose tree is copied in at each call),
# one subcommand each:
#
#   scripts/device.sh detached       start DIR CMD... | wait DIR DEADLINE_S: a command that outlives one call
#   scripts/device.sh publish        pack | stage PART | install | run DEADLINE_S CONFIG [k=v...] | fold RUN OUT: the published run
#   scripts/device.sh real-data      run DEADLINE_S DATASET... | bytecode | pack OUT: the real-data sweeps
#   scripts/device.sh sweep          pack | [k=v...]: one GPU sweep with its figures (Ray unpacked into /tmp/site)
#   scripts/device.sh trials         start CONFIG "OVERRIDES" D:V:S... | wait DEADLINE_S OUT: plain trials side by side
#   scripts/device.sh trial-figures  OUT PART...: the single-GPU trial figures (check kernels bibtex busy grid dense eval)
#   scripts/device.sh amazon         run|start DEADLINE_S | wait SECONDS | pack OUT: configs/amazon-670k.yaml on generated data
#   scripts/device.sh multi-gpu      [--out DIR] [--trials T] [--epochs E] [--fake-gpus N] [--tiny]: 1 GPU against all
#
# Each subcommand's own notes are at the top of its function below. Benchmarks that run in one call
# are `python -m benchmarks NAME`; the GPU checks `pytest -m gpu`.

# detached: (was benchmarks/detached.sh)
cmd_detached() (
# A command longer than one device call (10 minutes at most): `start` runs it in a session of its own
# (setsid), detached, so it outlives the call that started it on a machine kept warm between calls;
# `wait` returns when it has ended or at the deadline, with the tail of its log.
#
#   scripts/device.sh detached start DIR COMMAND [ARG...]    DIR/log, DIR/rc (exit status) when it ends
#   scripts/device.sh detached wait DIR DEADLINE_S
#
# `start` runs the command in a copy of the repository's code (DIR/tree: the packages, benchmarks,
# configs, pyproject.toml, and .data when there is one), started from there: a tool that copies the
# working tree onto the machine again at each call would otherwise replace the files under a running
# command (seen: an import failing half-way through such a copy).
set -uo pipefail
op=$1; dir=$2; shift 2
case $op in
  start)
    mkdir -p "$dir"
    repo=$(cd "$(dirname "$0")/.." && pwd)
    rm -rf "$dir/tree" && mkdir -p "$dir/tree"
    for p in poxm_core orchestration benchmarks studies scripts tests configs pyproject.toml .data; do
      [ -e "$repo/$p" ] && cp -r "$repo/$p" "$dir/tree/"
    done
    printf '%q ' "$@" > "$dir/cmd"
    setsid bash -c "cd $(printf %q "$dir/tree") && $(cat "$dir/cmd") > $(printf %q "$dir/log") 2>&1; echo \$? > $(printf %q "$dir/rc")" \
      < /dev/null > /dev/null 2>&1 &
    echo "started in $dir/tree: $(cat "$dir/cmd")";;
  wait)
    deadline=$(( $(date +%s) + $1 ))
    while [ ! -f "$dir/rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    tail -c 4000 "$dir/log"; echo; echo "rc: $(cat "$dir/rc" 2>/dev/null || echo running)";;
  *) echo "detached.sh: start or wait, got '$op'" >&2; exit 2;;
esac
)

# publish: (was benchmarks/gpu_publish.sh)
cmd_publish() (
# The published benchmark on a GPU machine of the device tool (1 or 2 cards here), in few calls:
#
#   scripts/device.sh publish stage PART_DIR       copy one carried part of the wheels into /tmp/stage
#                                                  (parts: `scripts/device.sh publish pack` here)
#   scripts/device.sh publish install              unpack the parts, install them into /tmp/site
#   scripts/device.sh publish run DEADLINE_S CONFIG [key=value ...]
#                                                  `poxm run CONFIG` on every card until the deadline; the
#                                                  same command continues a cut sweep (finished trials kept)
#   scripts/device.sh publish reduce CONFIG OUT DATASET:VARIANT...
#                                                  CONFIG reduced to those (dataset, variant) cells (a stage
#                                                  of a declared run: nothing else changes), written to OUT
#   scripts/device.sh publish stages DEADLINE_S CONFIG NAME=DATASET:VARIANT[+DATASET:VARIANT]...
#                                                  stages of a declared run one after another, each reduced,
#                                                  run and folded into /tmp/stages/NAME.tgz as soon as it
#                                                  ends (start it detached; each `detached wait` call copies
#                                                  the finished ones to $OUT: a machine lost later keeps
#                                                  what came back)
#   scripts/device.sh publish rundir RUNS          the run directory under RUNS (the one with sweep.json, not
#                                                  the cache beside it)
#   scripts/device.sh publish fold RUN_DIR OUTDIR  a published-folder twin of the run (config.yaml, every final
#                                                  row: rows-<dataset>.csv.xz, prepare.csv, the selected heads' per-instance
#                                                  values instances/<dataset>.npz, the report's tables) for
#                                                  scripts/publish_results.py here (which keeps the rows the tables read)
#   scripts/device.sh publish pack                 HERE: the wheels the machine lacks (Ray, pydantic, ...)
#                                                  into .devpack-aa, -ab, -ac (parts of 29 MB: each call also carries the working tree, 27 MB)
#
# Each call carries the working tree (docs/results alone is about 57 MB since the ten-seed publish) plus
# what `carry` names, 64 MiB at most: move docs/results out of the checkout while the calls run (it is
# tracked: `git checkout docs/results` or moving it back restores it), then the parts and .data fit.
# Measured 2026-11-28 on 2 x H200: the published run (40 trials of 60 heads) 395 s; see docs/results/README.md.
# The datasets travel in .data (an ignored folder: bibtex, delicious, mldr_misc from ../shared/data) and
# are copied to /tmp/data by `stage`. GPU_SHARE (default 0.125: 8 trials a card, under MPS) and
# GPU_RUNS (default /tmp/gpu-publish-runs) as in gpu_real_data.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export POXM_DATA_ROOT=${POXM_DATA_ROOT:-/tmp/data}
RUNS=${GPU_RUNS:-/tmp/gpu-publish-runs}
PY=${PYTHON:-python3}
cmd=$1; shift
case "$cmd" in
  pack)
    grep -qx '/.devpack-\*/' .git/info/exclude 2>/dev/null || echo '/.devpack-*/' >> .git/info/exclude
    grep -qx '/.data/' .git/info/exclude 2>/dev/null || echo '/.data/' >> .git/info/exclude
    tmp=$(mktemp -d)
    # what the machine's image lacks (it has numpy, scipy, pandas, pyarrow, matplotlib, tqdm, pyyaml)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$tmp/whl" ray==2.60.0 pydantic pydantic-core annotated-types typing-inspection jsonschema \
      jsonschema-specifications referencing rpds-py tensorboardX
    tar cf "$tmp/all.tar" -C "$tmp" whl
    rm -rf .devpack-*
    ( cd "$tmp" && split -b 29m all.tar part. )
    for p in "$tmp"/part.*; do s=${p##*.}; mkdir -p ".devpack-$s"; mv "$p" ".devpack-$s/"; done
    rm -rf .data && mkdir -p .data && cp -r ../shared/data/bibtex ../shared/data/delicious ../shared/data/mldr_misc .data/
    ls -d .devpack-* .data; exit 0 ;;
  stage)
    mkdir -p /tmp/stage && cp "$1"/part.* /tmp/stage/
    if [ -d .data ]; then mkdir -p /tmp/data && cp -r .data/* /tmp/data/; fi
    ls /tmp/stage /tmp/data 2>/dev/null; exit 0 ;;
  install)
    cat /tmp/stage/part.* > /tmp/stage/all.tar && tar xf /tmp/stage/all.tar -C /tmp/stage &&
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/stage/whl/*.whl || exit 1
    "$PY" -c "import ray, pydantic, ray.tune, ray.train.torch; print('ray', ray.__version__, 'pydantic', pydantic.__version__)"
    exit $? ;;
  run)
    deadline=$(( $(date +%s) + $1 )); shift
    config=$1; shift
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    echo "== $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus; $(nproc) CPUs; $(date +%T)"
    timeout -s TERM $(( deadline - $(date +%s) )) "$PY" -m orchestration.cli run "$config" device=cuda \
      "resources.gpus_per_trial=${GPU_SHARE:-0.125}" resources.cpus_per_trial=1 resources.mps=true \
      mlflow.enabled=false training.batched_heads=true "$@" --runs-dir "$RUNS" 2>&1 | tail -40
    echo "== exit ${PIPESTATUS[0]} at $(date +%T)"
    for d in "$RUNS"/*/; do [ -f "$d/sweep.json" ] && "$PY" -m orchestration.cli status "$d" | head -4; done
    exit 0 ;;
  reduce)
    # one stage of a declared run (configs/confirmatory.yaml): its datasets and variants reduced to the
    # cells named, everything else as declared, so that publish_results.py --join accepts the stage
    "$PY" - "$@" <<'PY' || exit 2
import sys
import yaml
src, out, cells = sys.argv[1], sys.argv[2], [c.split(":", 1) for c in sys.argv[3:]]
cfg = yaml.safe_load(open(src))
known = {(d["name"], v["name"]) for d in cfg["datasets"] for v in d["variants"]}
bad = [f"{d}:{v}" for d, v in (c if len(c) == 2 else (c[0], "?") for c in cells) if (d, v) not in known]
if not cells or bad:
    sys.exit(f"publish reduce: {', '.join(bad) or 'no cell named'} is not a DATASET:VARIANT of {src} "
             f"(it has {', '.join(sorted(f'{d}:{v}' for d, v in known))})")
want = {tuple(c) for c in cells}
cfg["datasets"] = [{**d, "variants": [v for v in d["variants"] if (d["name"], v["name"]) in want]}
                   for d in cfg["datasets"] if any(d["name"] == w[0] for w in want)]
with open(out, "w") as fh:
    yaml.safe_dump(cfg, fh, sort_keys=False)
print(out, [(d["name"], [v["name"] for v in d["variants"]]) for d in cfg["datasets"]])
PY
    exit 0 ;;
  rundir)
    for d in "$1"/*/; do [ -f "$d/sweep.json" ] && { echo "${d%/}"; exit 0; }; done
    echo "publish rundir: no run directory (with sweep.json) under $1" >&2; exit 1 ;;
  stages)
    deadline=$(( $(date +%s) + $1 )); config=$2; shift 2
    mkdir -p /tmp/stages
    for spec in "$@"; do
      name=${spec%%=*}; cells=${spec#*=}
      "$0" publish reduce "$config" "/tmp/stages/$name.yaml" ${cells//+/ } || exit 2
      GPU_RUNS=/tmp/stages/runs-$name "$0" publish run $(( deadline - $(date +%s) )) "/tmp/stages/$name.yaml"
      run=$("$0" publish rundir "/tmp/stages/runs-$name") || continue
      "$0" publish fold "$run" "/tmp/stages/out/$name" > /dev/null &&
        tar czf "/tmp/stages/.$name.tgz" -C /tmp/stages/out "$name" && mv "/tmp/stages/.$name.tgz" "/tmp/stages/$name.tgz" &&
        echo "== stage $name folded: /tmp/stages/$name.tgz $(date +%T)"
    done
    exit 0 ;;
  fold)
    run=$1; out=$2; mkdir -p "$out"
    cp "$run/config.yaml" "$out/" && cp "$run/results/prepare.csv" "$run/results/selection.csv" "$out/" || exit 1
    "$PY" - "$run" "$out" <<'PY' || exit 1
import sys
from pathlib import Path
import pandas as pd
from orchestration.report.instances import write_rows, write_selected
run, out = Path(sys.argv[1]), Path(sys.argv[2])
rows = pd.read_csv(run / "results" / "rows.csv")
write_rows(rows[rows["final"]], out)
n = write_selected(run / "results" / "test_instances.npz", pd.read_csv(run / "results" / "selection.csv"),
                   out / "instances")
print(f"{out}: {int(rows['final'].sum())} final rows, {n} per-instance arrays")
PY
    cp -r "$run/report/tables" "$out/tables" 2>/dev/null; cp "$run/report/index.md" "$out/" 2>/dev/null
    cp "$run/results/sweep_summary.json" "$out/" 2>/dev/null
    ls -la "$out"; exit 0 ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
)

# real-data: (was benchmarks/gpu_real_data.sh)
cmd_real_data() (
# The real-data benchmark on a GPU machine, one `poxm run` per dataset config (every variant, seeds 0-4,
# every method), trials packed into Ray Train jobs and 8 jobs sharing each GPU (gpus_per_trial 0.125; GPU_SHARE=F: F),
# heads of a trial trained as one batched step, under NVIDIA MPS (GPU_MPS=false: time-slicing). Run from the repository root on the GPU machine after
# Ray was unpacked into /tmp/site (scripts/device.sh sweep's notes); the data under $POXM_DATA_ROOT.
#
#   scripts/device.sh real-data run   DEADLINE_S DATASET...   start or continue each sweep until the deadline
#   scripts/device.sh real-data bytecode                       compile the machine's packages (and /tmp/site) into
#                                                              $PYTHONPYCACHEPREFIX (default /tmp/pyc); then export it
#   scripts/device.sh real-data pack  OUTDIR                   each sweep's final rows (.csv.gz) and its files
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
)

# sweep: (was benchmarks/gpu_sweep.sh)
cmd_sweep() (
# GPU smoke benchmark of the orchestration: `poxm run configs/gpu-smoke.yaml`, a Ray Tune sweep of two
# Ray Train GPU jobs that share one GPU (resources.gpus_per_trial: 0.5). Prints the card, each trial's
# Ray start-up cost (TorchTrainer.fit wall time minus loading and run_trial compute) and the results.
#
# Two modes (see ../shared/notes/ray-on-device.md for how Ray reaches the GPU machine):
#   scripts/device.sh sweep pack       HERE, from the repository root: pack Ray (+ what poxm needs beyond
#                                      torch/numpy) into .devpack-aa, -ab, ... (one part per device call)
#   scripts/device.sh sweep [key=value ...]   ON THE GPU MACHINE, from the repository root, after the
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
    print("missing: " + "; ".join(missing) + " (pack them: scripts/device.sh sweep pack)" if missing else "no CUDA device")
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
)

# trials: (was benchmarks/gpu_trials.sh)
cmd_trials() (
# Chosen trials of one sweep config, trained side by side on a GPU machine with `poxm train` (no Ray):
# the trials' dataset is prepared once (configs/<dataset>.yaml, same settings as the sweep's, so the
# same content-addressed cache entries), then every trial runs as its own process in its own session
# (setsid), so it outlives the command that started it on a machine whose commands are time-limited.
# Used to complete a sweep whose run directory is gone (docs/results/README.md) and to time one trial.
#
#   scripts/device.sh trials start CONFIG "OVERRIDES" DATASET:VARIANT:SEED ...   prepare, start, return
#   scripts/device.sh trials wait  DEADLINE_S OUTDIR         until every trial ended or the deadline;
#                                                            rows, summaries, logs as OUTDIR/trials.tgz
# Each trial writes $GPU_TRIALS/<dataset>-<variant>-s<seed>/ (rows.csv, summary.json) and a .log beside.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD"
export POXM_DATA_ROOT=${POXM_DATA_ROOT:-$PWD/.data}
DIR=${GPU_TRIALS:-/tmp/gpu-trials}
PY=${PYTHON:-python3}
cmd=$1; shift
if [ "$cmd" = start ]; then
  config=$1; read -r -a ovr <<< "$2"; shift 2      # overrides: space-separated, none with a space inside
  mkdir -p "$DIR"
  for t in "$@"; do      # a folder left by an earlier start would be resumed from its checkpoints, maybe of other settings
    IFS=: read -r ds v s <<< "$t"
    if [ -e "$DIR/$ds-$v-s$s" ] || [ -e "$DIR/$ds-$v-s$s.rc" ]; then
      echo "gpu_trials.sh: $DIR/$ds-$v-s$s exists (an earlier start): remove it or set GPU_TRIALS to another folder" >&2
      exit 2
    fi
  done
  # one prepare per dataset, seeds of the trials only
  for ds in $(printf '%s\n' "$@" | cut -d: -f1 | sort -u); do
    seeds=$(printf '%s\n' "$@" | awk -F: -v d="$ds" '$1 == d {print $3}' | sort -nu | paste -sd,)
    echo "== prepare $ds seeds [$seeds] $(date +%T)"
    "$PY" -m orchestration.cli prepare "configs/$ds.yaml" "${ovr[@]}" "seeds=[$seeds]" --cache-dir "$DIR/cache" \
      > "$DIR/prepare-$ds.log" 2>&1 || { tail -5 "$DIR/prepare-$ds.log"; exit 1; }
  done
  n=$#; threads=$(( $(nproc) / n )); [ "$threads" -ge 1 ] || threads=1
  for t in "$@"; do
    IFS=: read -r ds v s <<< "$t"
    name="$ds-$v-s$s"
    echo "== start $name $(date +%T)"
    args=$(printf '%q ' "$PY" -m orchestration.cli train "$config" "${ovr[@]}" --dataset "$ds" --variant "$v" \
      --seed "$s" --cache-dir "$DIR/cache" --out "$DIR/$name")
    OMP_NUM_THREADS=$threads setsid bash -c "$args > $(printf %q "$DIR/$name.log") 2>&1; echo \$? > $(printf %q "$DIR/$name.rc")" \
      < /dev/null > /dev/null 2>&1 &
  done
  exit 0
fi
if [ "$cmd" = wait ]; then
  deadline=$(( $(date +%s) + $1 )); out=$2
  while [ "$(date +%s)" -lt "$deadline" ]; do
    running=0
    for l in "$DIR"/*.log; do case $l in */prepare-*) continue;; esac
      [ -f "${l%.log}.rc" ] || running=$((running + 1)); done
    [ "$running" -eq 0 ] && break
    sleep 10
  done
  for l in "$DIR"/*.log; do case $l in */prepare-*) continue;; esac
    n=${l%.log}; echo "== $(basename "$n"): rc $(cat "$n.rc" 2>/dev/null || echo running)"; tail -3 "$l"; done
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  tar czf "$out/trials.tgz" -C "$DIR" --exclude=cache --exclude=checkpoints --exclude='*.pt' .
  exit 0
fi
echo "usage: $0 start CONFIG \"OVERRIDES\" DATASET:VARIANT:SEED ... | wait DEADLINE_S OUTDIR" >&2; exit 2
)

# trial-figures: (was benchmarks/gpu_trial_figures.sh)
cmd_trial_figures() (
# The single-GPU trial figures of docs/performance.md in one go, on a GPU machine whose calls are
# time-limited (run it detached: scripts/device.sh detached start DIR scripts/device.sh trial-figures OUT PARTS...).
#
#   check     tests/poxm_core/accel/test_cuda_paths.py (pytest -m gpu) (the GPU fast paths against the plain ones; builds the
#             Triton kernels, so later parts find them compiled)
#   kernels   -m benchmarks.profile batched-kernels: the batched step's GPU work per batch (grid, lazy
#             input layer, and Bibtex)
#   bibtex    bibtex_trial_seconds: configs/bibtex.yaml's trial A/0 through `poxm train` alone on the card
#             (scripts/device.sh trials; needs .data/bibtex or POXM_DATA_ROOT)
#   busy      the same trial's GPU busy time by stage (-m benchmarks.profile gpu-busy; after bibtex)
#   grid      p3_grid_seconds: bench_trial.py grid with the lazy input layer (as configs/amazon-670k.yaml)
#   dense     the same grid with the dense input layer (the heads' results beside the lazy ones)
#   eval      -m benchmarks.profile trial --parts eval grid: the evaluation's stages
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
      "$PY" -m pytest -q -m gpu tests/poxm_core/accel/test_cuda_paths.py > "$R/cuda_paths.log" 2>&1
      grep -E "^adam" "$R/cuda_paths.log" | cut -c1-600;;
    kernels)
      "$PY" -m benchmarks.profile batched-kernels --parts grid --set training.input_adam=lazy --top 30 \
        --json "$R/kernels-grid.json" > "$R/kernels-grid.log" 2>&1
      "$PY" -m benchmarks.profile batched-kernels --parts bibtex --top 30 --json "$R/kernels-bibtex.json" \
        > "$R/kernels-bibtex.log" 2>&1
      grep -hE '"(part|busy_ms_per_batch|kernels_per_batch)' "$R"/kernels-*.log;;
    bibtex)
      rm -rf /tmp/bib
      GPU_TRIALS=/tmp/bib scripts/device.sh trials start configs/bibtex.yaml "device=cuda resources.gpus_per_trial=0.125 resources.cpus_per_trial=1 seeds=[0,1,2,3,4] mlflow.enabled=false training.batched_heads=true" bibtex:A:0 \
        && GPU_TRIALS=/tmp/bib scripts/device.sh trials wait 200 "$R" > "$R/bib.log" 2>&1
      cp /tmp/bib/bibtex-A-s0/summary.json "$R/bib-summary.json" 2>/dev/null
      "$PY" -c "import json; d=json.load(open('$R/bib-summary.json')); print('bibtex', d['seconds'], d['timing'])";;
    busy)
      "$PY" -m benchmarks.profile gpu-busy configs/bibtex.yaml device=cuda training.batched_heads=true "seeds=[0]" \
        --cache-dir /tmp/bib/cache --dataset bibtex --variant A --seed 0 --json "$R/bib_busy.json" > "$R/bib_busy.log" 2>&1
      tail -c 600 "$R/bib_busy.log";;
    grid|dense)
      adam=$([ "$part" = grid ] && echo lazy || echo dense)
      "$PY" benchmarks/bench_trial.py grid --batched-heads --input-adam "$adam" --out "$R/$adam" > "$R/grid-$adam.log" 2>&1
      grep -E "epoch|timing" "$R/grid-$adam.log" | cut -c1-400;;
    eval)
      "$PY" -m benchmarks.profile trial --parts eval grid --out "$R/profile" > "$R/profile.log" 2>&1
      grep -E "^\[|load" "$R/profile.log" | head -30;;
    *) echo "gpu_trial_figures.sh: unknown part '$part' (check kernels bibtex busy grid dense eval)" >&2; exit 2;;
  esac
done
echo "== done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
)

# amazon: (was benchmarks/gpu_amazon_full.sh)
cmd_amazon() (
# configs/amazon-670k.yaml end to end on a GPU machine, on generated data of Amazon-670K's shape
# (synthetic preset amazon670k: 490,449 train / 153,025 test instances, D 135,909, L 670,091), one seed,
# every method, full grids: the config as it is with only the dataset swapped for the generated one
# (same propensity constants and logging variant) and seeds [0]. One trial a card by default
# (GPU_SHARE=1; 0.5 puts two under NVIDIA MPS, but two 16-head trials filled an 80 GB card), the CPUs
# split between them. Run from the repository root after Ray was unpacked into /tmp/site
# (scripts/device.sh sweep's notes).
#
#   scripts/device.sh amazon run   DEADLINE_S  `poxm run`, or `poxm resume` of the run directory
#                                                   when one exists, until the deadline (SIGINT: the
#                                                   trials stop at a checkpoint, exit 130)
#   scripts/device.sh amazon start DEADLINE_S  `run` detached (setsid; log in $GPU_RUNS/run.log), for
#                                                   machines that end a command's processes when it returns
#                                                   but keep detached ones: one sweep across several commands
#   scripts/device.sh amazon wait  SECONDS     wait for a started run to end, at most SECONDS; print its
#                                                   status, the log's end and the GPUs' memory
#   scripts/device.sh amazon pack  OUTDIR      the run's files without checkpoints, per-epoch rows
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
  GPU_RUNS="$RUNS" exec "$0" real-data pack "$1"
fi
if [ "$cmd" = start ]; then
  GPU_RUNS="$RUNS" setsid nohup "$0" amazon run "$1" > "$RUNS/run.log" 2>&1 < /dev/null &
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
)

# multi-gpu: (was benchmarks/multi_gpu_sweep.sh)
cmd_multi_gpu() (
# Sweep throughput on one GPU vs all N GPUs of a node, in one go on one machine.
#
# The same Amazon-670K-shaped synthetic sweep (preset amazon670k: 490,449 train instances, L 670,091,
# D 135,909; dim 256, K 100, slates of 5, one POXM head p=100 lam=0.9 per trial) with T trials (T
# variants of one logging model, so prepare runs once and is shared through --cache-dir) runs twice:
#   1. on a Ray head started with 1 GPU (CUDA_VISIBLE_DEVICES=<first card>, --num-gpus 1)
#   2. on a Ray head started with all N GPUs
# each with `poxm run --address` and resources.gpus_per_trial=1, cpus_per_trial = cores / N in both.
# Throughput = trials / Tune seconds (results/sweep_summary.json: tune_s, i.e. every trial's Ray start-up,
# loading, training and evaluation; prepare is done before either timing starts). The JSON written:
#   <out>/multi_gpu_sweep.json  {multi_gpu_speedup, multi_gpu_count, cards, per-phase tune_s, trials/s,
#                                the GPU ids each trial got (all N must appear in phase 2), date, command}
#
#   scripts/device.sh multi-gpu [--out DIR] [--trials T] [--epochs E] [--fake-gpus N] [--tiny]
#                                 [--scratch DIR] [--phases one,all] [key=value ...]
#     --out DIR       where the JSON and logs go (default $OUT, else /tmp/multi-gpu-sweep)
#     --trials T      trials per phase (default 2 x N: two waves on N cards, 2N in a row on one)
#     --epochs E      training epochs per trial (default 2; the issue's P3 trial is 10)
#     --fake-gpus N   rehearsal on a CPU machine: Ray heads get N (then 1) 'GPU' resources that no card
#                     backs; the trials run on CPU (device=cpu) but are scheduled exactly as on GPUs
#     --tiny          a small synthetic dataset instead of Amazon-670K's shape (rehearsal)
#     --scratch DIR   keep the sweep's config, prepared cache and run dirs in DIR (short path: Ray's
#                     sockets live under it) instead of a temporary folder removed at the end, so that
#                     the phases can run in separate commands on one machine (a 600 s command limit:
#                     `--scratch /tmp/mgs --phases one`, then the same with `--phases all`)
#     --phases LIST   which phases to run now (default one,all); the JSON is written once both
#                     phases' runs exist in the scratch folder
#   Extra key=value arguments are config overrides for both phases. Trials run one per Ray Train job
#   (resources.trials_per_job=1, as when the published figure was measured) unless an override says
#   otherwise: with the default packing the 1-GPU phase would run fewer, longer jobs than the N-GPU one.
#
# On the GPU machine (Ray through ../shared/notes/ray-on-device.md, /tmp/site on PYTHONPATH) from the
# repository root: `scripts/device.sh multi-gpu --out $OUT`. Ray heads are this script's own (own
# port and temp dir), stopped by killing their process groups; no other Ray on the machine is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ARGS="$*"
OUTDIR=${OUT:-/tmp/multi-gpu-sweep}; TRIALS=""; EPOCHS=2; FAKE=""; TINY=0; overrides=(); KEEP=""; PHASES=one,all
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUTDIR=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --fake-gpus) FAKE=$2; shift 2 ;;
    --tiny) TINY=1; shift ;;
    --scratch) KEEP=$2; shift 2 ;;
    --phases) PHASES=$2; shift 2 ;;
    -h|--help) sed -n '/^cmd_multi_gpu() (/,/^cd /p' "$0"; exit 0 ;;
    *=*) overrides+=("$1"); shift ;;
    *) echo "multi_gpu_sweep.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case " ${overrides[*]-} " in *" resources.trials_per_job="*) ;; *) overrides+=("resources.trials_per_job=1") ;; esac

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RAY_AUTH_MODE=token          # Ray >= 2.59: `ray start --head` uses token auth; the driver must agree
# A fresh machine (the GPU one) has no ~/.ray/auth_token, and `ray start` then refuses to start: give the
# heads, the driver and the trials (they inherit the environment) one token of this run's own.
if [ -z "${RAY_AUTH_TOKEN:-}" ] && [ ! -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]; then
  RAY_AUTH_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n'); export RAY_AUTH_TOKEN
fi
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}" || export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${PYTHON:-}" ]; then [ -x "$ROOT/.venv/bin/python" ] && PYTHON=$ROOT/.venv/bin/python || PYTHON=python3; fi
mkdir -p "$OUTDIR"
if [ -n "$KEEP" ]; then mkdir -p "$KEEP"; SCRATCH=$(cd "$KEEP" && pwd); else
  SCRATCH=$(mktemp -d /tmp/mgs-XXXXXX); fi   # short: Ray's socket paths under --temp-dir must fit 107 bytes
HEAD_PID=""
stop_head() {
  if [ -n "$HEAD_PID" ]; then
    kill -TERM -- "-$HEAD_PID" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$HEAD_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$HEAD_PID" 2>/dev/null || true
    HEAD_PID=""
  fi
}
trap 'stop_head; [ -n "$KEEP" ] || rm -rf "$SCRATCH"' EXIT

# --- the cards
if [ -n "$FAKE" ]; then
  N=$FAKE; CARDS=$(printf 'fake-gpu%.0s,' $(seq "$N")); CARDS=${CARDS%,}; DEVICE=cpu
else
  command -v nvidia-smi >/dev/null || { echo "multi_gpu_sweep.sh: no nvidia-smi (use --fake-gpus N to rehearse on CPU)" >&2; exit 3; }
  N=$(nvidia-smi -L | wc -l)
  CARDS=$(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -)
  FIRST=$(nvidia-smi --query-gpu=index --format=csv,noheader | head -1)
  DEVICE=cuda
fi
[ "$N" -ge 1 ] || { echo "multi_gpu_sweep.sh: no GPU found" >&2; exit 3; }
TRIALS=${TRIALS:-$((2 * N))}
CORES=$(nproc)
CPUS_PER_TRIAL=$(( CORES / N > 0 ? CORES / N : 1 ))
echo "== $N card(s): $CARDS; $TRIALS trials per phase, $EPOCHS epoch(s), $CPUS_PER_TRIAL CPU(s) per trial"

# --- the sweep: T variants (same alpha: one logging model, candidates and data; cheap variant levels)
VARIANTS=$("$PYTHON" -c "import sys; t=int(sys.argv[1]); print('[' + ', '.join('{name: V%d, alpha: 0.2, beta: 0.0, T: 2}' % i for i in range(t)) + ']')" "$TRIALS")
CFG=$SCRATCH/sweep.yaml
if [ "$TINY" = 1 ]; then
  DATA='{name: synthetic, synthetic: {n_train: 400, n_test: 100, n_features: 60, n_labels: 40}}'
  MODEL='{dim: 8, epochs: 1, n_candidates: 20, slate_size: 5}'; HIDDEN=8; P=10
else
  DATA='{name: synthetic, synthetic: {preset: amazon670k}}'
  MODEL='{dim: 256, epochs: 1, n_candidates: 100, slate_size: 5, topk_chunk_mb: 1024}'; HIDDEN=128; P=100
fi
cat > "$CFG" <<EOF
# written by scripts/device.sh multi-gpu
name: multi-gpu
seeds: [0]
device: $DEVICE
datasets:
  - $DATA
model: $MODEL
training: {epochs: $EPOCHS, batch_size: 256, hidden: $HIDDEN, mc_slates: 32}
group_by: seed
resources: {cpus_per_trial: $CPUS_PER_TRIAL, gpus_per_trial: 1, max_failures: 0}
mlflow: {enabled: false}
methods:
  poxm: {p: [$P], lam: [0.9]}
EOF
"$PYTHON" - "$CFG" "$VARIANTS" <<'EOF'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1])); cfg["datasets"][0]["variants"] = yaml.safe_load(sys.argv[2])
yaml.safe_dump(cfg, open(sys.argv[1], "w"), sort_keys=False)
EOF

phase() {   # phase NAME GPUS [CUDA_VISIBLE_DEVICES]
  local name=$1 gpus=$2 visible=${3:-} port
  port=$("$PYTHON" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  rm -rf "$SCRATCH/ray-$name" "$SCRATCH/runs-$name"     # a phase re-run starts afresh
  mkdir -p "$SCRATCH/ray-$name"
  if [ -n "$visible" ]; then export CUDA_VISIBLE_DEVICES=$visible; else unset CUDA_VISIBLE_DEVICES; fi
  setsid "$PYTHON" -m ray.scripts.scripts start --head --port "$port" --num-gpus "$gpus" --num-cpus "$CORES" \
    --include-dashboard=false --temp-dir "$SCRATCH/ray-$name" --block > "$OUTDIR/ray-$name.log" 2>&1 &
  HEAD_PID=$!
  disown "$HEAD_PID"     # stopped by signal on purpose: no 'Killed' line from the shell
  for _ in $(seq 120); do grep -q "block forever" "$OUTDIR/ray-$name.log" && break; sleep 0.5; done
  grep -q "block forever" "$OUTDIR/ray-$name.log" || { echo "ray head ($name) did not start:"; tail -20 "$OUTDIR/ray-$name.log"; exit 4; }
  echo "== phase $name: $gpus GPU(s)${visible:+ (CUDA_VISIBLE_DEVICES=$visible)}"
  "$PYTHON" -m orchestration.cli run "$CFG" --address "127.0.0.1:$port" --runs-dir "$SCRATCH/runs-$name" \
    --cache-dir "$SCRATCH/cache" --quiet ${overrides[@]+"${overrides[@]}"} > "$OUTDIR/run-$name.log" 2>&1 \
    || { echo "poxm run ($name) failed:"; tail -30 "$OUTDIR/run-$name.log"; exit 5; }
  # kept as soon as the phase ends: a later phase cut off by a time limit must not take this one's timing with it
  cp "$SCRATCH"/runs-"$name"/multi-gpu-*/results/sweep_summary.json "$OUTDIR/summary-$name.json"
  echo "   tune_s $("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))['tune_s'])" "$OUTDIR/summary-$name.json")"
  stop_head
  unset CUDA_VISIBLE_DEVICES
}

# prepare once, outside both timings (the sweeps then find it in the shared cache)
echo "== prepare"
"$PYTHON" -m orchestration.cli prepare "$CFG" --cache-dir "$SCRATCH/cache" ${overrides[@]+"${overrides[@]}"} > "$OUTDIR/prepare.log" 2>&1 \
  || { echo "poxm prepare failed:"; tail -30 "$OUTDIR/prepare.log"; exit 5; }
case ",$PHASES," in *,one,*) phase one 1 "${FIRST:-}" ;; esac
case ",$PHASES," in *,all,*) phase all "$N" ;; esac
if ! ls -d "$SCRATCH"/runs-one/multi-gpu-* "$SCRATCH"/runs-all/multi-gpu-* >/dev/null 2>&1; then
  echo "== phases done: $PHASES (the JSON needs both phases' runs in $SCRATCH)"; exit 0
fi

"$PYTHON" - "$SCRATCH" "$OUTDIR" "$N" "$CARDS" "$TRIALS" "$EPOCHS" "$ARGS" <<'EOF'
import datetime, glob, json, sys
from pathlib import Path
scratch, out, n, cards, trials, epochs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
res = {}
for name in ("one", "all"):
    (run,) = glob.glob(f"{scratch}/runs-{name}/multi-gpu-*")
    s = json.loads(Path(run, "results/sweep_summary.json").read_text())
    gpus = []
    for t in json.loads(Path(run, "sweep.json").read_text())["trials"]:
        for a in json.loads(Path(run, "trials", t, "timing.json").read_text())["attempts"]:
            gpus.append(a.get("gpu_ids") or [])
    used = sorted({g for ids in gpus for g in ids})
    res[name] = {"trials_done": s["done"], "tune_s": s["tune_s"], "wall_s": s["wall_s"],
                 "trials_per_s": round(s["done"] / s["tune_s"], 5), "max_concurrent_trials": s["max_concurrent_trials"],
                 "gpu_ids_per_trial": gpus, "gpus_used": used}
    assert s["done"] == trials and s["errored"] == 0, (name, s)
ok_spread = len(res["all"]["gpus_used"]) == n
speedup = res["all"]["trials_per_s"] / res["one"]["trials_per_s"]
doc = {"multi_gpu_speedup": round(speedup, 3), "multi_gpu_count": n, "cards": cards.split(","),
       "every_gpu_used": ok_spread, "trials": trials, "epochs": epochs, "one_gpu": res["one"], "all_gpus": res["all"],
       "date": datetime.date.today().isoformat(),
       "command": "scripts/device.sh multi-gpu " + sys.argv[7]}
(out / "multi_gpu_sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
print(f"speedup {speedup:.2f}x on {n} card(s) ({cards}); 1 GPU {res['one']['tune_s']:.1f} s, "
      f"{n} GPUs {res['all']['tune_s']:.1f} s for {trials} trials; GPUs used in phase 2: {res['all']['gpus_used']}")
print(f"-> {out / 'multi_gpu_sweep.json'}")
sys.exit(0 if ok_spread else 6)
EOF
)

sub=${1:-}; [ $# -gt 0 ] && shift
case "$sub" in
  detached) cmd_detached "$@" ;;
  publish) cmd_publish "$@" ;;
  real-data) cmd_real_data "$@" ;;
  sweep) cmd_sweep "$@" ;;
  trials) cmd_trials "$@" ;;
  trial-figures) cmd_trial_figures "$@" ;;
  amazon) cmd_amazon "$@" ;;
  multi-gpu) cmd_multi_gpu "$@" ;;
  *) sed -n '2,/^$/p' "$0" >&2; echo "scripts/device.sh: unknown subcommand '$sub'" >&2; exit 2 ;;
esac
