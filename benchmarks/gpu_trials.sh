#!/usr/bin/env bash
# Chosen trials of one sweep config, trained side by side on a GPU machine with `poxm train` (no Ray):
# the trials' dataset is prepared once (configs/<dataset>.yaml, same settings as the sweep's, so the
# same content-addressed cache entries), then every trial runs as its own process in its own session
# (setsid), so it outlives the command that started it on a machine whose commands are time-limited.
# Used to complete a sweep whose run directory is gone (docs/results/README.md) and to time one trial.
#
#   benchmarks/gpu_trials.sh start CONFIG "OVERRIDES" DATASET:VARIANT:SEED ...   prepare, start, return
#   benchmarks/gpu_trials.sh wait  DEADLINE_S OUTDIR         until every trial ended or the deadline;
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
