#!/usr/bin/env bash
# End-to-end test of the cluster image (docker/Dockerfile) and its KubeRay recipe
# (docker/kuberay-rayjob.yaml) on one machine, without a GPU and without Docker Hub:
#   1. a base image from `debootstrap --variant=minbase bookworm` (or $POXM_TEST_BASE); the image built
#      from it with the CPU torch wheel (served on 127.0.0.1 from the wheel on disk, else PyTorch's CPU
#      index) and this machine's extra CA certificates; the same build against an index that does not
#      answer must fail;
#   2. an MLflow server container (the manifest's command), a Ray head and a Ray worker container, all
#      on the host network with Ray pinned to 127.0.0.1 (tests/ray_loopback_start.py); KubeRay's probes
#      answer in them; MLflow answers the in-cluster host names and refuses others;
#   3. the quickstart sweep (made smaller) submitted with `ray job submit`, as the RayJob's entrypoint
#      (the manifest's, on configs/quickstart.yaml): it finishes, MLflow lists its runs, `poxm report`
#      rebuilds the report;
#   4. the same sweep in another runs folder, the worker container killed mid-sweep: it finishes with
#      the same rows;
#   all along, no TCP socket of any container is off 127.0.0.1 (`ss`, tests/docker/on_host.py watch).
# Prints the build time, the image size, each sweep's time and the total.
#
# Needs docker, python3, ss; a Docker daemon it can reach, or dockerd and root (then it starts a private
# one: its own data folder, no bridge, no iptables rules, gone at the end); debootstrap and root for the
# base. Leaves nothing behind: containers, images, the private daemon and the temp folder go at the end.
# Environment: POXM_TEST_BASE (a base image to use instead of debootstrap's), POXM_TEST_IMAGE (an image
# already built: skip step 1), POXM_IMAGE_TEST_KEEP=1 (keep the image), POXM_TEST_OVERRIDES (config
# overrides of both sweeps), POXM_EXTRA_CA_FILE (CA certificates, default the host's
# /usr/local/share/ca-certificates/*.crt), DEBIAN_MIRROR.
set -euo pipefail
{   # the whole script is read before it runs: editing it meanwhile cannot change a run in progress
cd "$(dirname "$0")/.."
REPO=$PWD
T0=$(date +%s)
RUN=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
PREFIX=pxi-$RUN-
WORK=$(mktemp -d /tmp/pxi.XXXXXX)
TORCH_VERSION=2.13.0
# the quickstart made smaller for a test: 4 of its methods, 2 epochs, a quarter of its data (the cluster
# path is the same; POXM_TEST_OVERRIDES= runs the whole quickstart)
SMALLER='training.epochs=2 datasets.0.synthetic.scale=0.25 methods={"logging":{},"dm":{},"poxm":{"p":[10,50],"lam":[0.9]},"skyline":{"lr":5.0e-3}}'
read -r -a OVERRIDES <<< "${POXM_TEST_OVERRIDES-$SMALLER}"
EPOCHS=$(printf '%s\n' "${OVERRIDES[@]}" | sed -n 's/^training\.epochs=//p' | tail -1)
EPOCHS=${EPOCHS:-5}        # configs/quickstart.yaml's
HOLD_EPOCH=1
say() { echo "test-image [$(( $(date +%s) - T0 ))s]: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
cannot() { say "cannot run here: $*"; exit 77; }     # tests/docker/test_image_e2e.py skips on 77
since() { echo $(( $(date +%s) - $1 )); }
OWN_DAEMON="" INDEX_PID="" WATCH_PID="" BASE_MADE="" IMAGES_BEFORE="" LISTED="" TAG="" BASE=""

cleanup() {
  local rc=$?
  set +e
  [ -n "$WATCH_PID" ] && { touch "$WORK/watch.stop"; wait "$WATCH_PID"; }
  local ids; ids=$(docker ps -aq --filter "name=^$PREFIX" 2>/dev/null)
  if [ "$rc" != 0 ]; then     # what the containers and the jobs said last
    for c in $(docker ps -a --filter "name=^$PREFIX" --format '{{.Names}}' 2>/dev/null); do
      echo "---- $c (docker logs, last lines)" >&2; docker logs "$c" 2>&1 | tail -15 >&2
    done
    for f in "$WORK"/job-*.log; do [ -f "$f" ] && { echo "---- $(basename "$f")" >&2; tail -30 "$f" >&2; }; done
  fi
  [ -n "$ids" ] && docker rm -f $ids > /dev/null
  # images: a private daemon's go with its folder; on another daemon, those this run made
  if [ -z "$OWN_DAEMON" ] && [ -z "${POXM_IMAGE_TEST_KEEP:-}" ] && [ -z "${POXM_TEST_IMAGE:-}" ]; then
    docker rmi -f "$TAG" > /dev/null 2>&1
  fi
  [ -z "$OWN_DAEMON" ] && [ -n "$BASE_MADE" ] && docker rmi -f "$BASE" > /dev/null 2>&1
  if [ -z "$OWN_DAEMON" ] && [ -n "$LISTED" ]; then     # the layers of the builds that tagged nothing (the failing build)
    comm -13 <(sort -u <<< "$IMAGES_BEFORE") <(docker images -aq --no-trunc | sort -u) \
      | xargs -r docker rmi -f > /dev/null 2>&1
  fi
  [ -n "$INDEX_PID" ] && kill "$INDEX_PID" 2> /dev/null
  if [ -n "$OWN_DAEMON" ]; then
    local pid cpid; pid=$(cat "$WORK/dockerd.pid" 2> /dev/null); cpid=$(cat "$WORK/x/containerd/containerd.pid" 2> /dev/null)
    for p in $pid $cpid; do      # the daemon stops its containerd; either left after 30 s is killed
      kill "$p" 2> /dev/null
      for _ in $(seq 60); do kill -0 "$p" 2> /dev/null || break; sleep 0.5; done
      kill -9 "$p" 2> /dev/null
    done
  fi
  # what is left mounted under the temp folder: the daemon's (the host's network namespace, layers), or
  # a debootstrap that failed half-way (its /proc, /sys)
  awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r | xargs -r -n1 umount -l
  rm -rf "$WORK"
  case $rc in 0) say "passed in $(since "$T0") s; nothing left behind" ;;
    77) ;; *) say "failed (exit $rc) in $(since "$T0") s; nothing left behind" ;; esac
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------------------------ the daemon
if ! docker info > /dev/null 2>&1; then
  command -v dockerd > /dev/null && [ "$(id -u)" = 0 ] || cannot "no Docker daemon answers, and dockerd cannot be started (needs dockerd and root)"
  OWN_DAEMON=1
  export DOCKER_HOST=unix://$WORK/docker.sock
  dockerd --data-root "$WORK/docker" --exec-root "$WORK/x" --pidfile "$WORK/dockerd.pid" -H "$DOCKER_HOST" \
    --bridge=none --iptables=false --ip-masq=false > "$WORK/dockerd.log" 2>&1 &
  for _ in $(seq 120); do docker info > /dev/null 2>&1 && break; sleep 0.5; done
  docker info > /dev/null 2>&1 || cannot "a private dockerd did not start: $(tail -3 "$WORK/dockerd.log" | tr '\n' ' ')"
  say "started a private Docker daemon (no bridge, no iptables rules) in $WORK"
fi
IMAGES_BEFORE=$(docker images -aq --no-trunc); LISTED=1

# -------------------------------------------------------------------------------- 1. the image
build_base() {
  if [ -n "${POXM_TEST_BASE:-}" ]; then BASE=$POXM_TEST_BASE; return; fi
  BASE=poxm-test-base:$RUN
  command -v debootstrap > /dev/null && [ "$(id -u)" = 0 ] || cannot "the local base needs debootstrap and root (or set POXM_TEST_BASE)"
  local t=$(date +%s)
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
    > "$WORK/debootstrap.log" 2>&1 || fail "debootstrap: $(tail -5 "$WORK/debootstrap.log")"
  tar -C "$WORK/rootfs" -c . | docker import - "$BASE" > /dev/null
  BASE_MADE=1
  rm -rf "$WORK/rootfs"
  say "base image $BASE (Debian bookworm, minbase) in $(since "$t") s"
}

# The CPU wheel of torch on this machine's disk (pip's find-links, where scripts/bootstrap.sh finds it),
# served as an index on 127.0.0.1; else PyTorch's CPU index. The debootstrap base has Python 3.11.
torch_index() {
  local dirs wheel="" d
  dirs="${POXM_TORCH_WHEEL_DIR:-} ${PIP_FIND_LINKS:-} $( (python3 -m pip config get global.find-links || .venv/bin/python -m pip config get global.find-links) 2> /dev/null)"
  for d in $dirs; do
    d=${d#file://}
    for f in "$d"/torch-$TORCH_VERSION+cpu-cp311-cp311-*x86_64.whl; do [ -f "$f" ] && wheel=$f && break 2; done
  done
  if [ -z "$wheel" ] || [ -n "${POXM_TEST_BASE:-}" ]; then TORCH_INDEX=https://download.pytorch.org/whl/cpu; return; fi
  mkdir -p "$WORK/index/torch"
  ln -s "$wheel" "$WORK/index/torch/"
  local name; name=$(basename "$wheel")
  echo "<html><body><a href=\"${name//+/%2B}\">$name</a></body></html>" > "$WORK/index/torch/index.html"
  local port; port=$(python3 tests/docker/on_host.py free-ports 1)
  python3 -m http.server "$port" --bind 127.0.0.1 --directory "$WORK/index" > "$WORK/index.log" 2>&1 &
  INDEX_PID=$!
  TORCH_INDEX=http://127.0.0.1:$port
}

build_image() {
  build_base
  torch_index
  local ca="" t
  if [ -n "${POXM_EXTRA_CA_FILE:-}" ]; then ca=$(cat "$POXM_EXTRA_CA_FILE")
  elif compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then ca=$(cat /usr/local/share/ca-certificates/*.crt); fi
  BUILD_ARGS=(--network host --force-rm -f docker/Dockerfile --build-arg "CUDA_BASE=$BASE" --build-arg "EXTRA_CA_CERTS=$ca")
  say "building the image from $BASE, torch from $TORCH_INDEX"
  t=$(date +%s)
  docker build "${BUILD_ARGS[@]}" --build-arg "TORCH_INDEX=$TORCH_INDEX" -t "$TAG" . > "$WORK/build.log" 2>&1 \
    || fail "docker build: $(tail -30 "$WORK/build.log")"
  BUILD_S=$(since "$t")
  say "built $TAG in $BUILD_S s ($(grep -m1 'Sending build context' "$WORK/build.log" || echo 'BuildKit'))"
  # the same build with an index that does not answer must stop at pip's upgrade
  local dead; dead=$(python3 tests/docker/on_host.py free-ports 1)
  if docker build "${BUILD_ARGS[@]}" --build-arg "PIP_INDEX_URL=http://127.0.0.1:$dead/simple" . > "$WORK/dead.log" 2>&1; then
    fail "the build succeeded with an index that does not answer"
  fi
  # the message as the failing step printed it (the URL expanded), not the step's echoed command
  grep -q "could not come from http://127.0.0.1:$dead/simple" "$WORK/dead.log" \
    || fail "the build without an index failed elsewhere: $(tail -5 "$WORK/dead.log")"
  say "without an index the build stops at pip's upgrade: 'pip and setuptools ... could not come from http://127.0.0.1:$dead/simple'"
}

if [ -n "${POXM_TEST_IMAGE:-}" ]; then TAG=$POXM_TEST_IMAGE; BUILD_S=""
else TAG=poxm-test:$RUN; build_image; fi
SIZE=$(docker image inspect -f '{{.Size}}' "$TAG")
docker run --rm --name "${PREFIX}look" --network none "$TAG" bash -c '
  command -v wget gcc tini git > /dev/null || { echo "missing a tool"; exit 1; }
  test -f "$(python -c "import sysconfig; print(sysconfig.get_paths()[\"include\"])")/Python.h" || { echo "no Python.h"; exit 1; }
  for p in runs .git .venv; do test ! -e /opt/poxm/$p || { echo "/opt/poxm/$p is in the image"; exit 1; }; done
  pip check > /dev/null' || fail "the image lacks what the cluster needs"
say "image $TAG: $(( SIZE / 1000000 )) MB; wget, gcc, Python.h, tini present; no runs/, .git, .venv"


# ---------------------------------------------------- 2. MLflow server, Ray head and worker containers
read -r MLP GCS DASH AGH AGW CLIENT <<< "$(python3 tests/docker/on_host.py free-ports 6)"
mkdir -p "$WORK/shared" "$WORK/mlflow" "$WORK/auth"
python3 -c "import secrets; print(secrets.token_hex(32), end='')" > "$WORK/auth/token"
chmod 600 "$WORK/auth/token"
# every container: the host's network (no bridge), this user, `mlflow` naming 127.0.0.1 as the Service's
# DNS name does in the cluster, Ray's token authentication, the shared folder at /shared
COMMON=(--network host --user "$(id -u):$(id -g)" -e HOME=/tmp --add-host mlflow:127.0.0.1
        -e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN_PATH=/auth/token -v "$WORK/auth:/auth:ro"
        -v "$WORK/shared:/shared" -w /opt/poxm)
# from here on, every socket of every container of this test is watched
python3 tests/docker/on_host.py watch "$PREFIX" "$WORK/sockets" "$WORK/watch.stop" &
WATCH_PID=$!

in_image() {   # NAME ARGS...: tests/docker/in_image.py in a container of the image
  local name=$1; shift
  docker run --rm --name "$PREFIX$name" "${COMMON[@]}" -v "$REPO/tests/docker/in_image.py:/opt/test/in_image.py:ro" \
    -v "$REPO/docker/kuberay-rayjob.yaml:/opt/test/kuberay-rayjob.yaml:ro" "$TAG" python /opt/test/in_image.py "$@"
}
parts=$(in_image manifest manifest /opt/test/kuberay-rayjob.yaml "$MLP") || fail "reading the manifest: $parts"
eval "$parts"
[ "${ENTRYPOINT_ARGS[*]:0:3}" = "poxm run configs/quickstart.yaml" ] || fail "unexpected entrypoint: ${ENTRYPOINT_ARGS[*]}"

# the three start side by side: MLflow, the Ray head, then the worker once the head answers
docker run -d --name "${PREFIX}mlflow" "${COMMON[@]}" ${MLFLOW_ENV[@]+"${MLFLOW_ENV[@]}"} -v "$WORK/mlflow:/mlflow" \
  "$TAG" "${MLFLOW_ARGS[@]}" > /dev/null
wait_for() {   # WHAT SECONDS COMMAND...: until COMMAND succeeds
  local what=$1 end=$(( $(date +%s) + $2 )); shift 2
  while [ "$(date +%s)" -lt "$end" ]; do "$@" > /dev/null 2>&1 && return 0; sleep 1; done
  fail "$what did not answer in $2 s"
}

RAY_START=(python /opt/test/ray_loopback_start.py start --block --node-ip-address 127.0.0.1 --num-gpus 0
           --object-store-memory 300000000)
NODE=(--shm-size 1g -v "$REPO/tests/ray_loopback_start.py:/opt/test/ray_loopback_start.py:ro")
# The driver runs on the head: every trial it starts waits after epoch $HOLD_EPOCH while /shared/hold
# exists (POXM_INJECT_HOLD, which poxm hands its workers); only the second sweep makes that file.
docker run -d --name "${PREFIX}head" "${COMMON[@]}" "${HEAD_ENV[@]}" -e "POXM_INJECT_HOLD=$HOLD_EPOCH:/shared/hold" \
  "${NODE[@]}" "$TAG" "${RAY_START[@]}" --head \
  --port "$GCS" --dashboard-host 127.0.0.1 --dashboard-port "$DASH" --dashboard-agent-listen-port "$AGH" \
  --ray-client-server-port "$CLIENT" --num-cpus 1 > /dev/null
# KubeRay's probes (the exec form; releases for Ray >= 2.53 ask /api/healthz over HTTP)
probe() {   # CONTAINER AGENT_PORT [DASHBOARD_PORT]
  local cmd="wget --tries 1 -T 2 -q -O- http://localhost:$2/api/local_raylet_healthz | grep success"
  [ -n "${3:-}" ] && cmd="$cmd && wget --tries 1 -T 2 -q -O- http://localhost:$3/api/gcs_healthz | grep success"
  docker exec "$1" bash -c "$cmd && wget --tries 1 -T 2 -q -O /dev/null http://localhost:$2/api/healthz"
}
wait_for "the Ray head's probes" 600 probe "${PREFIX}head" "$AGH" "$DASH"
start_worker() {
  docker run -d --name "${PREFIX}worker" "${COMMON[@]}" "${WORKER_ENV[@]}" "${NODE[@]}" "$TAG" "${RAY_START[@]}" \
    --address "127.0.0.1:$GCS" --dashboard-agent-listen-port "$AGW" --num-cpus 2 > /dev/null
  wait_for "the Ray worker's probe" 600 probe "${PREFIX}worker" "$AGW"
}
start_worker
say "Ray head (1 CPU) and worker (2 CPUs) up on 127.0.0.1:$GCS; KubeRay's liveness/readiness probes pass in both"
# the Deployment's readiness probe (GET /health), then the Host headers the cluster's clients send
wait_for "MLflow's /health" 600 docker exec "${PREFIX}mlflow" wget -q -O- "http://127.0.0.1:$MLP/health"
api="http://127.0.0.1:$MLP/api/2.0/mlflow/experiments/search?max_results=1"
for host in "mlflow:$MLP" "mlflow.poxm.svc.cluster.local:$MLP" "10.12.0.7:$MLP" "127.0.0.1:$MLP"; do
  docker exec "${PREFIX}mlflow" wget -q -O /dev/null --header "Host: $host" "$api" || fail "MLflow refused Host: $host"
done
docker exec "${PREFIX}mlflow" wget -q -O /dev/null --header "Host: mlflow.attacker.example" "$api" 2> /dev/null \
  && fail "MLflow answered Host: mlflow.attacker.example"
say "MLflow server up (the manifest's command on 127.0.0.1:$MLP): /health answers; the Service's names and pod IPs allowed, others refused"

# ------------------------------------------------------------------------------------- 3. the sweep
ray_cli() { docker run --rm --name "$PREFIX$1" "${COMMON[@]}" "$TAG" ray job "$2" --address "http://127.0.0.1:$DASH" "${@:3}"; }
# submit ID RUNS_DIR: the RayJob's entrypoint (and runtime env, if it has one) as KubeRay's submitter sends them
submit() {
  local id=$1 runs=$2 i
  # the overrides right after the config (`poxm run CONFIG [key=value ...] [options]`)
  local args=("${ENTRYPOINT_ARGS[@]:0:3}" "${OVERRIDES[@]}" "${ENTRYPOINT_ARGS[@]:3}") env=()
  for i in "${!args[@]}"; do [ "${args[$i]}" = --runs-dir ] && args[$((i + 1))]=$runs; done
  [ "$RUNTIME_ENV" != "{}" ] && env=(--runtime-env-json "$RUNTIME_ENV")
  ray_cli "submit-$id" submit --no-wait --submission-id "$id" ${env[@]+"${env[@]}"} -- "${args[@]}" \
    > "$WORK/submit-$id.log" 2>&1 || fail "ray job submit: $(tail -5 "$WORK/submit-$id.log")"
  ray_cli "logs-$id" logs --follow "$id" > "$WORK/job-$id.log" 2>&1 &
  FOLLOW_PID=$!
}
# finish ID: waits for the job's end; 0 if it succeeded
finish() {
  wait "$FOLLOW_PID" || true
  ray_cli "status-$1" status "$1" > "$WORK/status-$1.log" 2>&1 || true
  grep -q "Job '$1' succeeded" "$WORK/status-$1.log"      # `ray job status` says SUCCEEDED so
}
run_dir() { local d=("$WORK"/shared/"$1"/quickstart-*); [ -d "${d[0]}" ] || fail "no run directory in $1"; echo "${d[0]}"; }

t=$(date +%s)
submit clean /shared/runs
finish clean || fail "the sweep's job did not succeed: $(tail -40 "$WORK/job-clean.log")"
SWEEP_S=$(since "$t")
CLEAN=$(run_dir runs)
say "the quickstart sweep ($(printf '%s ' "${OVERRIDES[@]}")) finished in $SWEEP_S s: $(grep -c . "$CLEAN/results/rows.csv") rows"
in_image mlflow-runs mlflow-runs "/shared/runs/$(basename "$CLEAN")" "http://mlflow:$MLP" >&2 || fail "MLflow"
cp "$CLEAN/results/rows.csv" "$WORK/shared/rows-before-report.csv"
rm -rf "$CLEAN/report" "$CLEAN/results"
docker run --rm --name "${PREFIX}report" "${COMMON[@]}" -e "MLFLOW_TRACKING_URI=http://mlflow:$MLP" "$TAG" \
  poxm report "/shared/runs/$(basename "$CLEAN")" > "$WORK/report.log" 2>&1 || fail "poxm report: $(tail -20 "$WORK/report.log")"
in_image report-rebuilt report-rebuilt "/shared/runs/$(basename "$CLEAN")" /shared/rows-before-report.csv >&2 \
  || fail "the rebuilt report"

# ------------------------------------------------------ 4. the same sweep, the worker killed mid-sweep
# Every trial waits after epoch 1 while /shared/hold exists (POXM_INJECT_HOLD): whatever the machine's
# load, two trials are mid-training when the worker dies, so at least one is on it (the head has 1 CPU).
t=$(date +%s)
touch "$WORK/shared/hold"
submit lost /shared/runs-lost
for _ in $(seq 900); do
  [ "$(python3 tests/docker/on_host.py training-now "$WORK/shared/runs-lost" "$EPOCHS")" -ge 2 ] && break
  kill -0 "$FOLLOW_PID" 2> /dev/null || break
  sleep 1
done
[ "$(python3 tests/docker/on_host.py training-now "$WORK/shared/runs-lost" "$EPOCHS")" -ge 2 ] \
  || fail "two trials never trained at once: $(tail -20 "$WORK/job-lost.log")"
docker kill "${PREFIX}worker" > /dev/null
rm -f "$WORK/shared/hold"
say "killed the worker container with two trials mid-training"
if ! finish lost; then
  # as KubeRay's user would: the same RayJob again (docker/README.md, "Launch, watch, resume")
  say "the job ended: $(grep -o "Job 'lost' [a-z ]*" "$WORK/status-lost.log" | head -1); submitting it again"
  submit lost-again /shared/runs-lost
  finish lost-again || fail "the sweep did not finish after losing its worker: $(tail -40 "$WORK/job-lost-again.log")"
fi
LOST_S=$(since "$t")
LOST=$(run_dir runs-lost)
tries=$(python3 tests/docker/on_host.py max-tries "$LOST")
[ "$tries" -ge 2 ] || fail "no trial ran again after the worker died (most tries $tries)"
in_image same-rows same-rows "/shared/runs-lost/$(basename "$LOST")" "/shared/runs/$(basename "$CLEAN")" >&2 \
  || fail "rows after losing the worker"
say "the sweep that lost its worker finished in $LOST_S s (a trial took $tries tries)"

# ----------------------------------------------------------------------------------- loopback only
touch "$WORK/watch.stop"; wait "$WATCH_PID"; WATCH_PID=""
[ -s "$WORK/sockets" ] && fail "sockets off 127.0.0.1: $(cat "$WORK/sockets")"
say "no container socket off 127.0.0.1 ($(cat "$WORK/sockets.done"))"
say "measured: build ${BUILD_S:-(not built)} s, image $(( SIZE / 1000000 )) MB, sweep $SWEEP_S s, sweep with a lost worker $LOST_S s, total $(since "$T0") s"
exit 0
}
