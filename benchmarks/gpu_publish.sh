#!/usr/bin/env bash
# The published benchmark on a GPU machine of the device tool (1 or 2 cards here), in few calls:
#
#   benchmarks/gpu_publish.sh stage PART_DIR       copy one carried part of the wheels into /tmp/stage
#                                                  (parts: `benchmarks/gpu_publish.sh pack` here)
#   benchmarks/gpu_publish.sh install              unpack the parts, install them into /tmp/site
#   benchmarks/gpu_publish.sh run DEADLINE_S CONFIG [key=value ...]
#                                                  `poxm run CONFIG` on every card until the deadline; the
#                                                  same command continues a cut sweep (finished trials kept)
#   benchmarks/gpu_publish.sh fold RUN_DIR OUTDIR  a published-folder twin of the run (config.yaml, final
#                                                  rows-<dataset>.csv.gz, prepare.csv, the selected heads' per-instance
#                                                  values instances/<dataset>.npz, the report's tables) for
#                                                  scripts/publish_results.py here
#   benchmarks/gpu_publish.sh pack                 HERE: the wheels the machine lacks (Ray, pydantic, ...)
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
