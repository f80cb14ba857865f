"""What can be checked of docker/ without a Docker engine: pins, YAML, the entrypoint command."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


def pyproject_pins() -> dict[str, str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for d in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^,;\s]+)", d.strip())
        if m:
            pins[m.group(1).lower()] = m.group(3)
    return pins


def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def test_dockerfile_base_and_torch_pin():
    text = dockerfile()
    base = re.search(r"^ARG CUDA_BASE=(\S+)", text, re.M).group(1)
    assert base.startswith(("nvidia/cuda:", "pytorch/pytorch:", "nvcr.io/nvidia/pytorch:")), base
    assert re.search(r"^FROM \$\{CUDA_BASE\}", text, re.M)
    torch = re.search(r"^ARG TORCH_VERSION=(\S+)", text, re.M).group(1)
    assert torch == pyproject_pins()["torch"]
    index = re.search(r"^ARG TORCH_INDEX=(\S+)", text, re.M).group(1)
    assert re.fullmatch(r"https://download\.pytorch\.org/whl/cu\d+", index), "the CUDA build of torch"
    assert 'pip install --index-url ${TORCH_INDEX} "torch==${TORCH_VERSION}"' in text


def test_dockerfile_installs_exactly_pyproject_pins():
    """Every other dependency comes from `pip install .` (pyproject.toml); any version written in the
    Dockerfile must equal pyproject's pin."""
    text = dockerfile()
    assert re.search(r"^COPY pyproject.toml", text, re.M)
    assert re.search(r"pip install \.( |$)", text, re.M)
    pins = pyproject_pins()
    for name in ("ray", "mlflow"):
        assert name in pins, f"pyproject.toml should pin {name}"
    for name, ver in re.findall(r"\b([a-z][a-z0-9_-]*)(?:\[[^\]]*\])?==([0-9][0-9A-Za-z.+]*[0-9A-Za-z])", text):
        if name in pins:
            assert ver == pins[name], f"Dockerfile pins {name}=={ver}, pyproject.toml {pins[name]}"
    assert "requirements" not in text        # no second list of dependencies that could drift


def test_dockerfile_python_meets_requires_python():
    req = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    low = tuple(int(x) for x in re.search(r">=\s*(\d+\.\d+)", req).group(1).split("."))
    base = re.search(r"^ARG CUDA_BASE=(\S+)", dockerfile(), re.M).group(1)
    ubuntu_python = {"ubuntu22.04": (3, 10), "ubuntu24.04": (3, 12)}
    distro = next(k for k in ubuntu_python if k in base)
    assert ubuntu_python[distro] >= low


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all((DOCKER / "kuberay-rayjob.yaml").read_text()) if d]


def test_kuberay_recipe_parses_and_is_consistent():
    docs = _docs()
    kinds = {d["kind"]: d for d in docs}
    assert {"RayJob", "Deployment", "Service", "PersistentVolumeClaim"} <= set(kinds)
    job = kinds["RayJob"]
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == pyproject_pins()["ray"]
    pvcs = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert any("ReadWriteMany" in d["spec"]["accessModes"] for d in pvcs), "shared storage for the run directory"
    spec = job["spec"]["rayClusterSpec"]
    pods = [spec["headGroupSpec"]["template"]["spec"]] + [w["template"]["spec"] for w in spec["workerGroupSpecs"]]
    for pod in pods:
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert "poxm-shared" in claims
        c = pod["containers"][0]
        assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/shared"}
        assert {"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow:5000"} in c["env"]
    gpu = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" in gpu
    mlflow = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert mlflow[:2] == ["mlflow", "server"] and "--backend-store-uri" in mlflow
    assert kinds["Service"]["metadata"]["name"] == "mlflow"
    images = {c["image"] for p in pods for c in p["containers"]} | {
        kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"]}
    assert len(images) == 1


def test_rayjob_entrypoint_is_a_valid_poxm_command(tmp_path):
    from orchestration.cli import build_parser
    from orchestration.stages.sweep import plan_sweep
    from poxm_core.config.schema import load_config

    job = next(d for d in _docs() if d["kind"] == "RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "poxm"
    a = build_parser().parse_args(argv[1:])
    assert a.command == "run" and a.mlflow_uri == "http://mlflow:5000" and a.runs_dir.startswith("/shared/")
    cfg_path = REPO / a.config                # relative to the image's WORKDIR, /opt/poxm = the repository
    assert cfg_path.is_file()
    plan_sweep(load_config(cfg_path, a.overrides), runs_dir=tmp_path, check_data=False)
    assert "WORKDIR /opt/poxm" in dockerfile() and "COPY configs ./configs" in dockerfile()
    assert all(c["workingDir"] == "/opt/poxm" for c in
               [job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]])


def test_image_holds_every_package_and_runs_the_declared_entry_point(capsys):
    """Every package pyproject.toml installs is copied into the image (a package left out imports here
    and fails only in the image, e.g. a new one such as poxm_core/accel outside the copied folders),
    and the image's smoke command and CMD run the console script pyproject declares, whose target
    answers --help listing every command."""
    import importlib
    import json

    text = dockerfile()
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())
    tops = {p.rstrip("*").rstrip(".") for p in proj["tool"]["setuptools"]["packages"]["find"]["include"]}
    packages = {p.parent.relative_to(REPO).parts[0] for p in REPO.glob("*/**/__init__.py")
                if p.relative_to(REPO).parts[0] in tops}
    assert packages == tops
    copied = set(re.findall(r"^COPY (\S+) \./(\S+)$", text, re.M))
    assert {(p, p) for p in packages} <= copied, f"not copied into the image: {packages - {a for a, _ in copied}}"
    scripts = proj["project"]["scripts"]
    smoke = re.search(r"&& (\S+) --help > /dev/null\s*$", text, re.M).group(1)
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert smoke in scripts and cmd[0] in scripts
    module, func = scripts[smoke].split(":")
    main = getattr(importlib.import_module(module), func)
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("prepare", "train", "run", "resume", "status", "ui", "report"))
