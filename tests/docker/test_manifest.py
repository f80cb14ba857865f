"""The KubeRay recipe (docker/kuberay-rayjob.yaml) against the image (docker/Dockerfile, .dockerignore)
and the docs (docker/README.md): what the manifest names exists in the image and is documented. No
Docker needed; scripts/test-image.sh (tests/docker/test_image_e2e.py) runs the image itself."""
from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from tests.docker import in_image

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = (DOCKER / "Dockerfile").read_text()
README = " ".join((DOCKER / "README.md").read_text().split())      # whitespace-normalised
SCRIPT = (REPO / "scripts" / "test-image.sh").read_text()
KUBERAY_PORTS = {"dashboard-agent": 52365, "dashboard": 8265}      # what KubeRay's injected probes ask


def docs() -> dict[str, dict]:
    return in_image.manifest_docs(str(DOCKER / "kuberay-rayjob.yaml"))


def ray_pods() -> dict[str, dict]:
    spec = docs()["RayJob"]["spec"]["rayClusterSpec"]
    pods = {"head": spec["headGroupSpec"]["template"]["spec"]}
    pods.update({w["groupName"]: w["template"]["spec"] for w in spec["workerGroupSpecs"]})
    return pods


def all_pods() -> dict[str, dict]:
    return {**ray_pods(), "mlflow": docs()["Deployment"]["spec"]["template"]["spec"]}


def mlflow_command() -> list[str]:
    return all_pods()["mlflow"]["containers"][0]["command"]


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def exposed() -> set[int]:
    return {int(p) for line in re.findall(r"^EXPOSE (.+)$", DOCKERFILE, re.M) for p in line.split()}


# ----------------------------------------------------------------------------------- entrypoint

def test_the_entrypoint_runs_in_the_image_as_the_docs_say():
    """`poxm` is the image's console script, run from the image's WORKDIR where its config is copied;
    docker/README.md shows the same entrypoint."""
    entry = docs()["RayJob"]["spec"]["entrypoint"]
    argv = shlex.split(entry)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert argv[:2] == ["poxm", "run"] and "poxm" in scripts
    workdir = re.search(r"^WORKDIR (\S+)$", DOCKERFILE, re.M).group(1)
    assert re.search(r"^COPY configs \./configs$", DOCKERFILE, re.M) and (REPO / argv[2]).is_file()
    assert {c["workingDir"] for p in ray_pods().values() for c in p["containers"]} == {workdir}
    assert entry in README, "docker/README.md shows the RayJob's entrypoint"


def test_overrides_go_right_after_the_config_as_the_docs_and_the_test_put_them():
    """`poxm run CONFIG [key=value ...] [options]`: overrides after the options are refused, so the docs
    and scripts/test-image.sh put them right after the config."""
    from orchestration.cli_parser import build_parser
    from poxm_core.common.errors import PoxmInputError
    argv = shlex.split(docs()["RayJob"]["spec"]["entrypoint"])
    a = build_parser().parse_args([*argv[1:3], "training.epochs=2", *argv[3:]])
    assert a.overrides == ["training.epochs=2"]
    with pytest.raises(PoxmInputError):
        build_parser().parse_args([*argv[1:], "training.epochs=2"])
    assert "right after the config" in README
    assert '"${ENTRYPOINT_ARGS[@]:0:3}" "${OVERRIDES[@]}" "${ENTRYPOINT_ARGS[@]:3}"' in SCRIPT


def test_the_image_test_submits_the_manifests_entrypoint_and_server():
    """scripts/test-image.sh takes the entrypoint, runtime env and MLflow command from the manifest
    (tests/docker/in_image.py), changing only the config, MLflow's port and its listening address."""
    d = docs()
    entry = in_image.entrypoint_args(d, 5123)
    want = shlex.split(d["RayJob"]["spec"]["entrypoint"].replace("mlflow:5000", "mlflow:5123"))
    assert entry == [in_image.TEST_CONFIG if a == in_image.MANIFEST_CONFIG else a for a in want]
    assert entry[:3] == ["poxm", "run", "configs/quickstart.yaml"]
    server = in_image.mlflow_args(d, 5123)
    original = mlflow_command()
    changed = [i for i, (a, b) in enumerate(zip(server, original)) if a != b]
    assert [server[i] for i in changed] == ["127.0.0.1", "5123"] and len(server) == len(original)
    assert "in_image manifest manifest /opt/test/kuberay-rayjob.yaml" in SCRIPT
    # the MLflow container's env too: no job runner (8 more processes importing MLflow), as `poxm ui`
    mlflow_env = in_image.pod_env(d["Deployment"]["spec"]["template"], 5123)
    assert mlflow_env == ["-e", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"]
    assert '${MLFLOW_ENV[@]+"${MLFLOW_ENV[@]}"}' in SCRIPT.split('--name "${PREFIX}mlflow"')[1].splitlines()[0]


def test_the_jobs_runtime_env_leaves_poxms_worker_variables_to_poxm():
    """`poxm run` hands its workers the allow-listed variables through ray.init's runtime env, and Ray
    refuses a job whose own runtime env names one of them (\"Failed to merge the Job's runtime env\"):
    the pods' env carries them instead."""
    from orchestration.cluster.ray_setup import WORKER_ENV_ALLOW
    named = set(in_image.runtime_env(docs(), 5000).get("env_vars", {}))
    assert not named & set(WORKER_ENV_ALLOW)
    for pod in ray_pods().values():
        assert "POXM_DATA_ROOT" in {e["name"] for e in pod["containers"][0]["env"]}


# ---------------------------------------------------------------------------------------- ports

def test_every_port_the_manifest_names_is_exposed_and_served():
    d = docs()
    named = {p["containerPort"] for pod in all_pods().values() for c in pod["containers"] for p in c.get("ports", [])}
    assert named <= exposed(), f"ports not EXPOSEd by the image: {named - exposed()}"
    assert set(KUBERAY_PORTS.values()) <= exposed()
    mlflow = all_pods()["mlflow"]["containers"][0]
    port = int(flag(mlflow_command(), "--port"))
    assert [p["containerPort"] for p in mlflow["ports"]] == [port]
    assert mlflow["readinessProbe"]["httpGet"]["port"] == port
    assert d["Service"]["spec"]["ports"][0]["targetPort"] == port
    assert all(e["value"] == f"http://mlflow:{d['Service']['spec']['ports'][0]['port']}"
               for pod in ray_pods().values() for e in pod["containers"][0]["env"] if e["name"] == "MLFLOW_TRACKING_URI")
    for port in (*KUBERAY_PORTS.values(), 5000):
        assert str(port) in README, f"docker/README.md names port {port}"


# --------------------------------------------------------------------------------------- probes

def test_the_probes_have_what_they_run_in_the_image():
    """KubeRay's injected probes run `bash -c "wget ... | grep success"` in the Ray containers; the MLflow
    Deployment's readiness probe asks /health, which MLflow answers whatever the Host header."""
    from mlflow.server.security_utils import HEALTH_ENDPOINTS
    apt = re.search(r"apt-get install[^;]*", DOCKERFILE).group(0).split()
    assert {"wget", "bash"} <= set(apt)
    assert mlflow_command()[:2] == ["mlflow", "server"]
    assert all_pods()["mlflow"]["containers"][0]["readinessProbe"]["httpGet"]["path"] in HEALTH_ENDPOINTS
    for path in ("api/local_raylet_healthz", "api/gcs_healthz", "api/healthz"):
        assert path in SCRIPT, f"scripts/test-image.sh asks KubeRay's probe path {path}"


def test_mlflow_answers_the_in_cluster_names_only():
    """The server's --allowed-hosts take the Service's names, a port-forward and pod IPs; another name (a
    DNS-rebinding page) is refused. Checked with MLflow's own matcher (the pinned version)."""
    from mlflow.server.security_utils import is_allowed_host_header
    hosts = flag(mlflow_command(), "--allowed-hosts").split(",")
    for ok in ("mlflow", "mlflow:5000", "mlflow.poxm.svc:5000", "mlflow.poxm.svc.cluster.local:5000",
               "mlflow.default.svc.cluster.local", "localhost:5000", "127.0.0.1:5000", "10.8.3.4:5000",
               "172.20.0.9:5000", "192.168.5.6:5000"):
        assert is_allowed_host_header(hosts, ok), ok
    for bad in ("mlflow.attacker.example", "attacker.example:5000", "mlflowx:5000", "203.0.113.7:5000",
                "172.32.0.1:5000"):
        assert not is_allowed_host_header(hosts, bad), bad


# -------------------------------------------------------------------------------------- volumes

def test_every_pod_has_shared_memory_and_its_mounts_have_volumes():
    for name, pod in all_pods().items():
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for c in pod["containers"] for m in c["volumeMounts"]}
        assert set(mounts.values()) <= set(volumes), f"{name}: a mount without a volume"
        assert "/dev/shm" in mounts, f"{name} has no /dev/shm volume"
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"


def test_the_shared_paths_are_mounted_and_made_in_the_image():
    """Data, run directories, the prepare cache and Ray's state are on the shared claim in every Ray pod;
    the image makes the folders and points POXM_DATA_ROOT at the same place as the pods."""
    d = docs()
    argv = shlex.split(d["RayJob"]["spec"]["entrypoint"])
    paths = [flag(argv, "--runs-dir"), flag(argv, "--cache-dir")]
    for pod in ray_pods().values():
        c = pod["containers"][0]
        shared = [m["mountPath"] for m in c["volumeMounts"]
                  if "persistentVolumeClaim" in {v["name"]: v for v in pod["volumes"]}[m["name"]]]
        env = {e["name"]: e["value"] for e in c["env"]}
        for p in [*paths, *(env[k] for k in ("POXM_DATA_ROOT", "POXM_STATE_DIR") if k in env)]:
            assert any(p.startswith(s + "/") for s in shared), f"{p} is not on a shared volume"
        assert env["POXM_DATA_ROOT"] == re.search(r"^ENV POXM_DATA_ROOT=(\S+)$", DOCKERFILE, re.M).group(1)
    assert "mkdir -p /shared/data /shared/runs" in DOCKERFILE
    store = flag(mlflow_command(), "--backend-store-uri").removeprefix("sqlite:///")
    mlflow_mounts = [m["mountPath"] for m in all_pods()["mlflow"]["containers"][0]["volumeMounts"]]
    for p in (store, flag(mlflow_command(), "--artifacts-destination")):
        assert any(p.startswith(m + "/") for m in mlflow_mounts if m != "/dev/shm"), p


# ------------------------------------------------------------------------------------ resources

def test_a_worker_pod_holds_the_configs_trials_and_the_docs_say_how():
    """The entrypoint's config asks per trial what one GPU worker pod has (GPUs requested as limits,
    as Kubernetes requires); the head's Ray CPUs fit its pod; docker/README.md explains both."""
    from poxm_core.config.schema import load_config
    argv = shlex.split(docs()["RayJob"]["spec"]["entrypoint"])
    res = load_config(REPO / argv[2]).resources
    spec = docs()["RayJob"]["spec"]["rayClusterSpec"]
    for w in spec["workerGroupSpecs"]:
        r = w["template"]["spec"]["containers"][0]["resources"]
        gpus, cpus = float(r["limits"]["nvidia.com/gpu"]), float(r["limits"]["cpu"])
        assert r["requests"]["nvidia.com/gpu"] == r["limits"]["nvidia.com/gpu"]
        assert 0 < res.gpus_per_trial <= gpus
        assert int(gpus / res.gpus_per_trial) * res.cpus_per_trial <= cpus, "the trials a GPU pod holds need more CPUs"
        assert any(t["key"] == "nvidia.com/gpu" for t in w["template"]["spec"]["tolerations"])
    head = spec["headGroupSpec"]
    assert float(head["rayStartParams"]["num-cpus"]) <= float(head["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"])
    for word in ("nvidia.com/gpu", "gpus_per_trial", "cpus_per_trial", "ReadWriteMany", "postgresql://"):
        assert word in README, f"docker/README.md explains {word}"


# ---------------------------------------------------------------------------- the build context

def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or a folder above it decides; `!` keeps."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    out = False
    for raw in patterns:
        keep = raw.startswith("!")
        pat = raw.lstrip("!")
        pats = {pat, pat.removeprefix("**/")}
        if any(fnmatch.fnmatchcase(p, q) for p in prefixes for q in pats):
            out = not keep
    return out


def test_the_build_context_holds_what_the_image_copies_and_nothing_big():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    copied = [src for srcs in re.findall(r"^COPY (.+) \S+$", DOCKERFILE, re.M) for src in srcs.split()]
    assert copied and not [c for c in copied if dockerignored(c, patterns) or not (REPO / c).exists()]
    assert not dockerignored("poxm_core/training/trainer.py", patterns)
    for left_out in ("runs/x/trials/t/ckpt.pt", ".git/HEAD", ".venv/bin/python", "poxm_core/__pycache__/a.pyc",
                     "__pycache__/x.pyc", "tests/conftest.py", "configs/examples/data/x.txt", "mlflow.db"):
        assert dockerignored(left_out, patterns), left_out


def test_the_image_installs_at_the_constraints_for_its_python():
    """pip, torch and the rest install under both constraint files (the image's own pins are packages
    constraints.txt lacks), ray[default] at pyproject's Ray pin, pip at a pinned version (its upgrade
    then fails the build when no index answers)."""
    def pins(path: Path) -> dict[str, str]:
        return {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in
                re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", path.read_text(), re.M)}
    base, image = pins(REPO / "constraints.txt"), pins(DOCKER / "constraints-image.txt")
    assert not set(base) & set(image) and {"pip", "setuptools", "aiohttp-cors", "py-spy"} <= set(image)
    constraint = re.search(r'^ARG PIP_CONSTRAINT="([^"]+)"$', DOCKERFILE, re.M).group(1).split()
    assert constraint == ["/opt/poxm/constraints.txt", "/opt/poxm/docker/constraints-image.txt"]
    assert "COPY constraints.txt ./" in DOCKERFILE and "COPY docker/constraints-image.txt ./docker/" in DOCKERFILE
    first_pip = DOCKERFILE.index("RUN pip install")
    assert DOCKERFILE.index("ARG PIP_CONSTRAINT") < first_pip and "RUN pip install --upgrade pip setuptools" in DOCKERFILE
    ray = re.search(r'"ray\[default,tune,train\]==(\S+)"', DOCKERFILE).group(1)
    assert ray == base["ray"] == docs()["RayJob"]["spec"]["rayClusterSpec"]["rayVersion"]
    for arg in ("CUDA_BASE", "TORCH_INDEX", "PIP_INDEX_URL", "EXTRA_CA_CERTS"):
        assert re.search(rf"^ARG {arg}=", DOCKERFILE, re.M) and arg in README
