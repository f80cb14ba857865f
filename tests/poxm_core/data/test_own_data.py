"""Datasets declared in the config alone (format + files, or one file + split) and plugins.

Fast tests read small generated files; the slow ones run `poxm run` (and kill -> resume -> report with a
plugin-registered dataset and method) through real Ray, with 1 epoch on tiny data.
"""
from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from poxm_process import POXM, REPO, poxm_env, poxm_in_process, run_until_first_trial_then_kill
import scipy.sparse as sp
import yaml

from poxm_core.config.schema import MethodConfig, config_hash, load_config, resolved_dict
from poxm_core.data import load_dataset, propensity_params, read_xy_npz, save_xy_npz
from poxm_core.common.errors import PoxmInputError



def _make(n: int, seed: int, D: int = 40, L: int = 12):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    X.data[:] = np.round(X.data, 3) + 0.001
    Y = sp.random(n, L, density=0.2, format="csr", random_state=rng)
    Y.data[:] = 1.0
    X, Y = X.tolil(), Y.astype(np.float32).tolil()
    Y[:, 0] = 1.0           # every row has a label; label 0 is frequent
    X[:, D - 1] = 1.0       # D and L are reached by every file
    Y[:, L - 1] = 1.0
    return X.tocsr(), Y.tocsr()


def write_xc(path: Path, X, Y) -> None:
    with open(path, "w") as f:
        f.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for i in range(X.shape[0]):
            labs = ",".join(map(str, Y[i].indices))
            feats = " ".join(f"{j}:{v:g}" for j, v in zip(X[i].indices, X[i].data))
            f.write(f"{labs} {feats}\n")


def write_split(px: Path, py: Path, X, Y) -> None:
    for path, M, col in ((px, X, X.shape[1]), (py, Y, Y.shape[1])):
        with open(path, "w") as f:
            f.write(f"{M.shape[0]} {col}\n")
            for i in range(M.shape[0]):
                f.write(" ".join(f"{j}:{v:g}" for j, v in zip(M[i].indices, M[i].data)) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    (d / "data").mkdir()
    tr, te = _make(80, 1), _make(30, 2)
    write_xc(d / "data" / "mine_train.txt", *tr)
    write_xc(d / "data" / "mine_test.txt", *te)
    save_xy_npz(d / "data" / "train.npz", *tr)
    save_xy_npz(d / "data" / "test.npz", *te)
    write_split(d / "data" / "trn_X_Xf.txt", d / "data" / "trn_X_Y.txt", *tr)
    write_split(d / "data" / "tst_X_Xf.txt", d / "data" / "tst_X_Y.txt", *te)
    from sklearn.datasets import dump_svmlight_file
    dump_svmlight_file(tr[0], tr[1], str(d / "data" / "train.svm"), multilabel=True, zero_based=True)
    dump_svmlight_file(te[0], te[1], str(d / "data" / "test.svm"), multilabel=True, zero_based=True)
    return d, tr, te


def cfg_file(d: Path, datasets: list[dict], name: str = "own", **top) -> Path:
    cfg = {"name": name, "datasets": datasets, "methods": {"logging": {}}, **top}
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def ds(name: str, fmt: str, train, test=None, **kw) -> dict:
    d = {"name": name, "format": fmt, "train": train, **({"test": test} if test is not None else {}),
         "propensity_A": 0.5, "propensity_B": 0.4, "variants": [{"name": "A", "alpha": 0.3}]}
    d.update(kw)
    return d


@pytest.mark.parametrize("fmt,train,test", [
    ("xc", "data/mine_train.txt", "data/mine_test.txt"),
    ("npz", "data/train.npz", "data/test.npz"),
    ("svmlight", "data/train.svm", "data/test.svm"),
    ("split", ["data/trn_X_Xf.txt", "data/trn_X_Y.txt"], ["data/tst_X_Xf.txt", "data/tst_X_Y.txt"]),
])
def test_each_format_reads_the_same_data(files, fmt, train, test):
    d, (Xtr, Ytr), (Xte, Yte) = files
    cfg = load_config(cfg_file(d, [ds("mine", fmt, train, test)]))
    dcfg = cfg.datasets[0]
    assert Path(dcfg.train if isinstance(dcfg.train, str) else dcfg.train[0]).is_absolute()   # config-relative
    data = load_dataset(dcfg, d)
    assert data.stats()["N_train"] == 80 and data.stats()["N_test"] == 30
    assert (data.n_features, data.n_labels) == (40, 12)
    assert abs(data.train.X - Xtr).max() < 1e-6 and abs(data.test.Y - Yte).max() == 0
    assert propensity_params(dcfg) == (0.5, 0.4)


def test_one_file_plus_split_and_default_propensity_warns(files, caplog):
    d, (Xtr, Ytr), _ = files
    spec = ds("mine", "npz", "data/train.npz", split={"test_fraction": 0.25, "seed": 3}, propensity="default")
    del spec["propensity_A"], spec["propensity_B"]
    dcfg = load_config(cfg_file(d, [spec])).datasets[0]
    data = load_dataset(dcfg, d)
    assert (data.train.n, data.test.n) == (60, 20)
    assert abs(data.train.X - load_dataset(dcfg, d).train.X).max() == 0          # the split is seeded
    from poxm_core.data import registry
    registry._WARNED.discard("mine")
    with caplog.at_level("WARNING"):
        assert propensity_params(dcfg) == (0.55, 1.5)
    assert "propensity: default" in caplog.text


@pytest.mark.parametrize("change,match", [
    ({"propensity_A": None, "propensity_B": None}, "propensity_A and propensity_B"),
    ({"split": {"test_fraction": 0.2}}, "'test' and 'split' together: set split.from: union"),
    ({"test": None}, "needs 'test' \\(a test file\\) or 'split'"),
    ({"format": "split"}, "list of two files"),
    ({"name": "bibtex"}, "registered dataset"),
])
def test_declared_dataset_errors_are_one_line(files, change, match):
    d, _, _ = files
    spec = {k: v for k, v in {**ds("mine", "xc", "data/mine_train.txt", "data/mine_test.txt"), **change}.items()
            if v is not None}
    with pytest.raises(PoxmInputError, match=match):
        dcfg = load_config(cfg_file(d, [spec])).datasets[0]
        load_dataset(dcfg, d)


def test_missing_file_fails_at_plan_time(files, tmp_path):
    from orchestration.stages.sweep import plan_sweep
    d, _, _ = files
    cfg = load_config(cfg_file(d, [ds("mine", "xc", "data/nope.txt", "data/mine_test.txt")]))
    with pytest.raises(PoxmInputError, match=r"nope.txt: file not found \(datasets\.0\.train\)"):
        plan_sweep(cfg, tmp_path)


def test_npz_layout_dense_arrays_too(tmp_path):
    X, Y = _make(10, 0)
    np.savez(tmp_path / "dense.npz", X=X.toarray(), Y=Y.toarray())
    X2, Y2 = read_xy_npz(tmp_path / "dense.npz")
    assert abs(X2 - X).max() == 0 and abs(Y2 - Y).max() == 0
    np.savez(tmp_path / "bad.npz", A=np.zeros(3))
    with pytest.raises(PoxmInputError, match="expected arrays X_data"):
        read_xy_npz(tmp_path / "bad.npz")


def test_unset_new_keys_keep_old_hashes():
    """Configs without the new keys dump (and hash) as before: run directories keep their names."""
    from orchestration.rundir import sweep_id
    cfg = load_config(REPO / "tests" / "golden" / "published-configs" / "bibtex-cpu.yaml")    # written before those keys
    dumped = cfg.model_dump(mode="json")
    assert "plugins" not in dumped and "format" not in dumped["datasets"][0]
    assert sweep_id(cfg) == "bibtex-43a671178bb8"


# --------------------------------------------------------------------------------------------
# plugins

PLUGIN = '''
"""A user's plugin: a dataset (generated by a reader) and a method (DM under another name)."""
import numpy as np
import scipy.sparse as sp

from poxm_core.data import DatasetSpec, PaperVariant, XMCData, XMCSplit, register_dataset
from pydantic import Field

from poxm_core.config.schema import MethodConfig
from poxm_core.methods import register_method
from poxm_core.methods.dm import DirectMethod


def _read(dcfg, data_root, seed):
    rng = np.random.default_rng(7)
    def split(n):
        X = sp.random(n, 30, density=0.3, format="csr", random_state=rng, dtype=np.float32)
        Y = sp.random(n, 10, density=0.3, format="lil", random_state=rng).astype(np.float32)
        Y[:, 0] = 1.0
        Y = Y.tocsr()
        Y.data[:] = 1.0
        return XMCSplit(X.tocsr(), Y)
    return XMCData(dcfg.name, split(120), split(40))


class MyOptions(MethodConfig):
    """A setting only my-dm has (DM reads none: it shows that the config accepts it for my-dm only)."""
    temperature: float = Field(1.0, gt=0, description="a plugin's own option")


class MyDM(DirectMethod):
    name = "my-dm"
    Options = MyOptions


register_dataset(DatasetSpec(name="plug-data", folder="", description="from a plugin", A=0.6, B=2.0,
                             variants=(PaperVariant("A", 0.3, 0.0, 2.0),), reader=_read))
register_method(MyDM())
'''


def write_plugin(d: Path, module: str = "my_poxm_plugin") -> None:
    (d / "plugins").mkdir(exist_ok=True)
    (d / "plugins" / f"{module}.py").write_text(textwrap.dedent(PLUGIN))


def test_plugin_imported_by_config(tmp_path):
    write_plugin(tmp_path, "plug_fast")
    path = cfg_file(tmp_path, [{"name": "plug-data", "variants": [{"name": "A", "alpha": 0.3}]}],
                    plugins=["plug_fast"], plugin_path=["plugins"])
    path.write_text(path.read_text().replace("logging: {}", "my-dm: {}"))
    cfg = load_config(path)
    assert cfg.plugin_path == [str((tmp_path / "plugins").resolve())]
    from poxm_core.methods import get_method
    assert get_method("my-dm").name == "my-dm" and propensity_params(cfg.datasets[0]) == (0.6, 2.0)
    # its own options class: the new key is accepted for my-dm only, dumped only when set (ids keep)
    my = get_method("my-dm")
    assert type(my.validate(cfg.methods["my-dm"])).__name__ == "MyOptions"
    assert resolved_dict(cfg)["methods"]["my-dm"] == resolved_dict(MethodConfig())   # today's keys, defaults
    hot = load_config(path, ["methods.my-dm.temperature=2.5"])
    opts = my.validate(hot.methods["my-dm"])
    assert opts.temperature == 2.5 and resolved_dict(hot)["methods"]["my-dm"]["temperature"] == 2.5
    assert resolved_dict(opts) == resolved_dict(hot)["methods"]["my-dm"]      # trial setup's dump = the config's
    assert config_hash(hot) != config_hash(cfg) and load_config(data=resolved_dict(hot)) == hot
    with pytest.raises(PoxmInputError, match=r"methods\.dm\.temperature: method 'dm' has no option 'temperature'"):
        get_method("dm").validate(load_config(path, ["methods.dm.temperature=2.5"]).methods["dm"])
    bad = cfg_file(tmp_path, [{"name": "plug-data", "variants": [{"name": "A", "alpha": 0.3}]}], name="bad",
                   plugins=["no_such_plugin_xyz"])
    with pytest.raises(PoxmInputError, match="cannot import plugin 'no_such_plugin_xyz'"):
        load_config(bad)


# --------------------------------------------------------------------------------------------
# end to end (Ray)

TINY = {"seeds": [0], "model": {"dim": 8, "epochs": 1, "n_candidates": 6, "slate_size": 3},
        "training": {"epochs": 1, "mc_slates": 2, "batch_size": 64}, "group_by": "seed",
        "resources": {"cpus_per_trial": 1, "max_failures": 0}}




@pytest.mark.slow
def test_run_on_xc_and_npz_pairs_declared_in_config(fresh_ray, files, tmp_path, capsys, monkeypatch):
    # a Ray of its own: once, on the shared one, a reused worker's `import torch` in the prepare task stopped
    # half-way (torch partially initialised), a failure of that worker, not of this run
    d, _, _ = files
    path = cfg_file(d, [ds("mine-xc", "xc", "data/mine_train.txt", "data/mine_test.txt"),
                        ds("mine-npz", "npz", "data/train.npz", "data/test.npz")],
                    name="own-e2e", **TINY, mlflow={"enabled": False})
    path.write_text(path.read_text().replace("logging: {}", "logging: {}\n  dm: {lr: 0.01}"))
    runs = tmp_path / "runs"
    # run from another folder: the data paths are relative to the config file, not the cwd
    monkeypatch.chdir(tmp_path)
    res = poxm_in_process(capsys, "run", path, "--runs-dir", runs, "--quiet")        # on this test's own Ray
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = next(runs.glob("own-e2e-*"))
    rows = pd.read_csv(run_dir / "results" / "rows.csv")
    assert set(rows.dataset) == {"mine-xc", "mine-npz"} and set(rows.method) == {"logging", "dm"}
    fin = rows[rows.final & (rows.split == "test") & (rows.metric == "R@3")]
    # the same numbers from the same data, whichever file format held it
    a = fin[fin.dataset == "mine-xc"].sort_values("method")["value"].to_numpy()
    b = fin[fin.dataset == "mine-npz"].sort_values("method")["value"].to_numpy()
    assert len(a) == 2 and np.allclose(a, b, atol=1e-3)
    prep = poxm_in_process(capsys, "prepare", path, "--cache-dir", runs / "cache")
    assert prep.returncode == 0, prep.stderr[-2000:]
    assert "mine-npz: N_train=80, N_test=30, D=40, L=12" in prep.stdout


@pytest.mark.slow
def test_plugin_method_run_kill_resume_report(tmp_path, capsys):
    write_plugin(tmp_path)
    cfg = {"name": "plug-e2e", "plugins": ["my_poxm_plugin"], "plugin_path": ["plugins"],
           "datasets": [{"name": "plug-data", "variants": [{"name": "A", "alpha": 0.3},
                                                          {"name": "B", "alpha": 0.3, "beta": 1, "T": 4}]}],
           "methods": {"logging": {}, "my-dm": {"lr": 0.01}}, **TINY}
    path = tmp_path / "plug.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    runs = tmp_path / "runs"
    first = run_until_first_trial_then_kill(path, runs)
    run_dir = first.parent.parent
    time.sleep(1)
    # resume and report run from the repository, where the plugin is not on sys.path: a run directory's
    # plugins are imported only when the user names them, from the user's folder
    mine = ["--plugins", "my_poxm_plugin", "--plugin-path", str(tmp_path / "plugins")]
    res = poxm_in_process(capsys, "resume", run_dir, "--quiet")
    assert res.returncode == 2 and "--plugins my_poxm_plugin" in res.stderr, res.stderr[-3000:]
    res = subprocess.run(POXM + ["resume", str(run_dir), "--quiet", *mine], cwd=REPO, env=poxm_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rep = subprocess.run(POXM + ["report", str(run_dir), *mine], cwd=REPO, env=poxm_env(), capture_output=True,
                         text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (run_dir / "report" / "index.md").is_file()
    rows = pd.read_csv(run_dir / "results" / "rows.csv")
    assert set(rows.method) == {"logging", "my-dm"} and set(rows.variant) == {"A", "B"}
    prep = pd.read_csv(run_dir / "results" / "prepare.csv")
    assert set(prep.dataset) == {"plug-data"}
    sweep = json.loads((run_dir / "sweep.json").read_text())
    assert all((run_dir / "trials" / t / "done.json").is_file() for t in sweep["trials"])
