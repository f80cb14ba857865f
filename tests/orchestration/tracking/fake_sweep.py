"""A run directory with a sweep's MLflow store as poxm writes it, made without Ray or training: the
experiment, the parent run and one run per grid point (2 variants × logging, DM, POXM at three p), each
with per-epoch train/loss and val/IS, val/SNIS, val/ESS and the final test metrics, logged by the
worker's own logger (tracking.PointLogger). For the tests of `poxm ui` and of what MLflow shows."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from orchestration.tracking import runs as tracking
from poxm_core.common.results import make_row, to_frame

NAME = "fake-sweep"
CFG = {"name": NAME, "seeds": [0], "device": "cpu", "group_by": "seed", "selection": {"criterion": "IS"},
       "datasets": [{"name": "d", "val_fraction": 0.1, "synthetic": {"n_train": 10, "preset": None},
                     "variants": [{"name": v, "alpha": 0.2, "beta": 0.0, "T": 2.0} for v in ("A", "B")]}],
       "methods": {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [10, 20, 50], "lam": [0.9], "lr": None}},
       "training": {"epochs": 3, "lr_is": 0.001, "lr_supervised": 0.002}, "model": {"dim": 8, "slate_size": 5}}
TEST_METRICS = [f"{m}@{k}" for m in ("R", "nDCR", "PSR") for k in (3, 5)] + \
               [f"{m}@{k}" for m in ("P", "nDCG", "PSP") for k in (1, 3, 5)]


def points() -> list[dict]:
    out = []
    for v in ("A", "B"):
        out += [{"dataset": "d", "variant": v, "method": m, "p": None, "lam": None, "seed": 0} for m in ("logging", "dm")]
        out += [{"dataset": "d", "variant": v, "method": "poxm", "p": p, "lam": 0.9, "seed": 0} for p in (10, 20, 50)]
    return out


def _head(pt: dict) -> str:
    return pt["method"] if pt["p"] is None else f"{pt['method']}/p={pt['p']}/lam={pt['lam']}"


def _final_rows(pt: dict, quality: float):
    kw = dict(dataset="d", variant=pt["variant"], method=pt["method"], p=pt["p"], lam=pt["lam"], seed=0, epoch=3,
              final=True)
    rows = [make_row(split="test", metric=m, value=quality * (0.9 + 0.01 * i), stderr=0.001, **kw)
            for i, m in enumerate(TEST_METRICS)]
    rows += [make_row(split="val", metric=c, value=2.0 + 5 * quality, stderr=0.1, **kw) for c in ("IS", "SNIS")]
    return rows


def fake_sweep(root: Path, trial_seconds: float = 30.0, trial_wall_s: float = 345.0) -> Path:
    """`root` made a run directory (config.yaml, sweep.json, mlflow.db, mlflow_runs.json); returns it. Each
    trial's compute is `trial_seconds`, its wall time (start of training to its last value) `trial_wall_s`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(yaml.safe_dump(CFG))
    (root / "sweep.json").write_text(json.dumps({"trials": ["d-A-s0-all", "d-B-s0-all"]}))
    uri = f"sqlite:///{root}/mlflow.db"
    exp = tracking.init_store(uri, root.name, root / "mlartifacts")
    parent = tracking.ensure_parent(uri, exp, NAME, {}, params=tracking.flat_params({"name": NAME}),
                                    description="the sweep")
    pts = points()
    ids = tracking.ensure_points(uri, exp, parent, NAME, CFG, [(p, f"d-{p['variant']}-s0-all") for p in pts], {})
    for v in ("A", "B"):
        mine = [p for p in pts if p["variant"] == v]
        heads = {_head(p): ids[tracking.point_key(p)] for p in mine}
        log = tracking.PointLogger(uri, heads)
        log.start()
        log.started -= trial_wall_s          # as if the trial had begun training its heads that long ago
        for e in (1, 2, 3):
            metrics = {}
            for i, p in enumerate(mine):
                pre = _head(p).replace("=", "_eq_") + "/"
                metrics.update({pre + "loss": 1.0 / (e + i), pre + "IS": 2.0 + 0.3 * e + 0.2 * i,
                                pre + "SNIS": 2.1 + 0.3 * e, pre + "ESS": 400.0 + 10 * e})
            log.log_epoch(e, metrics)
        rows = to_frame([r for i, p in enumerate(mine) for r in _final_rows(p, 0.05 + 0.05 * i)])
        log.log_final(rows, {(p["method"], p["p"], p["lam"]): ids[tracking.point_key(p)] for p in mine},
                      seconds=trial_seconds)
    tracking.client(uri).set_terminated(parent, "FINISHED")
    (root / "mlflow_runs.json").write_text(json.dumps(
        {"tracking_uri": "sqlite:///mlflow.db", "experiment_id": exp, "parent_run_id": parent, "points": ids}))
    return root
