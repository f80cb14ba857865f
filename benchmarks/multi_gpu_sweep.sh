#!/usr/bin/env bash
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
#   benchmarks/multi_gpu_sweep.sh [--out DIR] [--trials T] [--epochs E] [--fake-gpus N] [--tiny]
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
# repository root: `benchmarks/multi_gpu_sweep.sh --out $OUT`. Ray heads are this script's own (own
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
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
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
# written by benchmarks/multi_gpu_sweep.sh
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
       "command": "benchmarks/multi_gpu_sweep.sh " + sys.argv[7]}
(out / "multi_gpu_sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
print(f"speedup {speedup:.2f}x on {n} card(s) ({cards}); 1 GPU {res['one']['tune_s']:.1f} s, "
      f"{n} GPUs {res['all']['tune_s']:.1f} s for {trials} trials; GPUs used in phase 2: {res['all']['gpus_used']}")
print(f"-> {out / 'multi_gpu_sweep.json'}")
sys.exit(0 if ok_spread else 6)
EOF
