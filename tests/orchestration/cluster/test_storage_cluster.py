"""No shared-filesystem assumption (issue 9 item 4): a sweep on a 2-node Ray cluster on this machine
whose worker node cannot see the driver's run directory at all.

What it proves: the head has no CPU (and too little memory for a trial's driver actor), so every
prepare task, Tune trial actor and Ray Train worker runs on the second node; that node runs in its own
mount namespace with an empty tmpfs mounted over the driver's runs_dir (run directory and default
prepare cache), its own --temp-dir, working directory and POXM_NODE_DIR. The sweep still finishes
with every grid point's rows in the driver's run directory, so prepared artifacts, checkpoints and
result files went through `resources.storage_path` (here a local folder both nodes see, standing in
for s3:// or gs://) and Ray's object store, never through the driver's paths; under both executors
(resources.executor: a Ray Train job's worker, or Ray Tune's trial process). It does not prove that a
remote filesystem URI works (pyarrow's, used the same way) or a second machine's network.

One cluster serves both executors' sweeps (started once: two `ray start`s fewer); each sweep has its own
name, seed (nothing of it prepared on the node before) and storage folder.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from tests.ray_cluster import Cluster, cluster_env

ROOT = Path(__file__).resolve().parents[3]
POXM = str(Path(sys.executable).with_name("poxm"))

CONFIG = {
    "name": "twonode", "seeds": [0], "device": "cpu",
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 300, "n_test": 100, "n_features": 40, "n_labels": 30},
                  "variants": [{"name": "A", "alpha": 0.5, "beta": 0.0, "T": 1.0}]}],
    "model": {"dim": 8, "epochs": 2, "n_candidates": 10, "slate_size": 3},
    "training": {"epochs": 2, "batch_size": 64, "hidden": 8, "mc_slates": 4},
    "group_by": "seed",
    "resources": {"cpus_per_trial": 1, "max_failures": 0},
    "methods": {"dm": {}, "poxm": {"p": [5], "lam": [0.9]}},
}


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The cluster, started once for both executors' sweeps: a head with no CPU and a worker node whose
    view of the driver's runs_dir is an empty tmpfs (its cwd and node dir its own)."""
    tmp = tmp_path_factory.mktemp("twonode")
    runs, node = tmp / "runs", tmp / "node"
    runs.mkdir()
    (runs / "marker").write_text("the driver's run dir\n")
    cl = Cluster(tmp / "ray")
    try:
        cl.start_head("--num-cpus", "0", "--num-gpus", "0", "--memory", str(10 * 1024 ** 2))
        work = tmp / "worker-cwd"
        work.mkdir()
        cl.add_node("worker", "--num-cpus", "2", "--num-gpus", "0",
                    env=cluster_env(POXM_NODE_DIR=str(node)),
                    shell_prefix=f"mount -t tmpfs none {runs} && test ! -e {runs}/marker && cd {work} && exec")
        yield SimpleNamespace(cl=cl, tmp=tmp, runs=runs, node=node)
    finally:
        cl.stop()


@pytest.mark.slow
@pytest.mark.skipif(not _can_unshare(), reason="needs `unshare -m` (root or user namespaces) to hide the run dir")
@pytest.mark.parametrize("executor", ["train", "tune"])
def test_sweep_on_two_nodes_exchanges_files_only_through_storage(two_nodes, executor):
    cl, runs, node = two_nodes.cl, two_nodes.runs, two_nodes.node
    store = two_nodes.tmp / f"store-{executor}"
    # each executor's sweep its own name and seed: its own run dir, and nothing prepared on the node before it
    cfg = {**CONFIG, "name": f"twonode-{executor}", "seeds": [["train", "tune"].index(executor)]}
    cfg_path = two_nodes.tmp / f"sweep-{executor}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    res, off_loopback = cl.run_watched(
        [POXM, "run", str(cfg_path), "--address", cl.address, "--runs-dir", str(runs),
         f"resources.storage_path={store}", f"resources.executor={executor}", "mlflow.enabled=false"],
        timeout=240, cwd=ROOT, env=cluster_env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # every socket of the cluster and of the driver stayed on 127.0.0.1 (the address given is the one used)
    assert off_loopback == [], "\n".join(off_loopback[:10])

    (run_dir,) = [p for p in runs.iterdir() if p.is_dir() and p.name.startswith(f"twonode-{executor}-")]
    rows = pd.read_csv(run_dir / "results" / "rows.csv")
    assert set(rows["method"]) >= {"dm", "poxm"} and rows["value"].notna().all()
    assert (run_dir / "results" / "prepare.csv").stat().st_size > 0
    (trial,) = json.loads((run_dir / "sweep.json").read_text())["trials"]
    done = json.loads((run_dir / "trials" / trial / "done.json").read_text())
    assert done["epoch"] == 2
    # the driver prepared nothing itself, and its run dir holds no trial working files (checkpoints)
    assert not (runs / "cache").exists()
    assert not (run_dir / "trials" / trial / "checkpoints").exists()
    # ... the worker node did, in its own folder, and exchanged them through storage
    sweep = run_dir.name
    # (clusters: the label clusters MIPS and OffCEM read, built by the trial beside its prepared variant)
    assert sorted(p.name for p in (node / "cache").iterdir()) == ["candidates", "clusters", "data", "model", "variant"]
    assert (node / "trials" / sweep / trial / "rows.csv").is_file()
    for level in ("data", "model", "candidates", "variant"):
        (h,) = list((store / sweep / "cache" / level).iterdir())
        man = json.loads((h / "manifest.json").read_text())
        assert man["content_sha256"] and man["hash"] == h.name
    assert (store / sweep / "trials" / trial / "done.json").is_file()
    if executor == "train":     # Ray Train's checkpoints, named as asked
        assert list((store / sweep / "ray").glob(f"train-{trial}/**/epoch_0002"))
    else:                       # Tune's, each naming its owner and epoch inside; no Ray Train run
        names = {f.read_text() for f in (store / sweep / "ray").glob(f"tune/{trial}/checkpoint_*/ray_checkpoint_name")}
        assert "epoch_0002" in names and not list((store / sweep / "ray").glob("train-*")), names
