"""What a sweep's MLflow runs are called and what they hold: the tags that find them, a grid point's
identity and run name, metric names and the values shown, the config and a point's settings as params,
MLflow's own tags (orchestration.tracking.runs re-exports every name here)."""
from __future__ import annotations

import math
import os
from typing import Mapping

from poxm_core.common.results import mlflow_name

ROLE_TAG, SWEEP_TAG, POINT_TAG, TRIAL_TAG = "poxm.role", "poxm.sweep", "poxm.point", "poxm.trial"
PARENT_TAG = "mlflow.parentRunId"
GRID = ("dataset", "variant", "method", "p", "lam", "seed")


def point_key(p: Mapping) -> str:
    """'dataset|variant|method|p|lam|seed' with p/lam 'none' where unused: the point's identity tag."""
    def f(v):
        return "none" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(v)
    return "|".join([str(p["dataset"]), str(p["variant"]), str(p["method"]), f(p["p"]), f(p["lam"]), str(p["seed"])])


def _short(v) -> str:
    """A number as short as it reads: 0.9 -> '.9', 0.05 -> '.05', 1.0 -> '1', 50 -> '50'."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    t = f"{v:g}" if isinstance(v, float) else str(v)
    return t[1:] if t.startswith("0.") else ("-" + t[2:] if t.startswith("-0.") else t)


def point_name(p: Mapping, with_dataset: bool = True) -> str:
    """A run's name, short enough for the UI's run-name column (~25 characters) and leading with
    what differs between the runs of a sweep: variant, seed, method, p, λ, then the dataset
    ('A s0 poxm p50 λ.9 bibtex'; 'B s1 dm bibtex'). `with_dataset=False` (a one-dataset sweep)
    leaves the dataset out: it is in the run's tags and params anyway."""
    parts = [str(p["variant"]), f"s{p['seed']}", str(p["method"])]
    if p["p"] is not None:
        parts.append(f"p{p['p']}")
    if p["lam"] is not None and not (isinstance(p["lam"], float) and math.isnan(p["lam"])):
        parts.append(f"λ{_short(p['lam'])}")
    if with_dataset:
        parts.append(str(p["dataset"]))
    return " ".join(parts)


def metric_name(key: str, split: str | None = None) -> str:
    """MLflow metric name with its split prefix, so the UI groups the charts: per-epoch 'loss' ->
    'train/loss', an estimate 'SNIS' -> 'val/SNIS'; final rows by their split: 'test/R_at_5'."""
    key = mlflow_name(key)
    if split is None:
        split = "train" if key in ("loss", "loss_se") else "val"
    return f"{split}/{key}"


PERCENT_SPLITS = ("test",)


def point_note(slate_size: int = 5) -> str:
    """A grid point's run description (mlflow.note.content): the units of its metrics, whose scales
    differ, and what its Duration and cost tags measure."""
    return (f"**Units.** `val/<estimator>` (IS, sIS, SNIS, DR, ...): the estimated expected reward per slate of "
            f"{slate_size} labels on the validation log (0 to {slate_size}; not a rate), `_se` its standard error; "
            "`val/ESS`: the effective sample size, in instances; `train/loss`: the method's own training loss; "
            "`test/<metric>` (R_at_k, nDCR_at_k, PSR_at_k, P_at_k, ...): test metrics ×100, the report's scale "
            "(`test/R_at_5` = 23.40 is R@5 = 23.40 %); `train/gpu_memory_*_mb`: MiB.\n\n"
            "**Time.** Duration: this run's own, from its trial's start (tag `started_at`) to its last value "
            "(`ended_at`); the heads of a trial train together, so they share it. Its share of the trial's "
            "compute: `head_seconds` (of `trial_seconds`, among `trial_heads` heads; `share_of_trial`).")


def ui_value(split: str, metric: str, value: float) -> float:
    """A value as MLflow shows it: the test metrics (R@k, nDCR@k, PSR@k, P@k, ...: rates) ×100, the
    report's and the terminal's scale, rounded to 4 decimals; validation estimates, ESS and the loss in
    their own units (an estimate is an expected reward per slate, not a rate)."""
    if split in PERCENT_SPLITS and "@" in metric:
        return round(100.0 * float(value), 4)
    return float(value)


def _flat(prefix: str, d: Mapping) -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flat(key, v))
        else:
            out[key] = "none" if v is None else str(v)
    return out


MAX_PARAM_VALUE = 6000   # MLflow 3's limit on a param value's length


def flat_params(d, prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: mappings and lists of mappings by key path
    ('datasets.0.variants.1.T'), other lists as their text ('[10, 20]'), None as 'none'. A key MLflow
    would reject is spelt as mlflow_name spells metrics ('...match.logging_to_skyline_R_at_5')."""
    out: dict[str, str] = {}
    items = d.items() if isinstance(d, Mapping) else enumerate(d)
    for k, v in items:
        key = f"{prefix}.{mlflow_name(str(k))}" if prefix else mlflow_name(str(k))
        if isinstance(v, Mapping) or (isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v)):
            out.update(flat_params(v, key))
        else:
            text = "none" if v is None else str(v)
            out[key] = text if len(text) <= MAX_PARAM_VALUE else text[:MAX_PARAM_VALUE - 3] + "..."
    return out


def standard_tags(git_commit: str | None = None, source: str = "poxm") -> dict[str, str]:
    """MLflow's own tags, which the UI shows as User, Source and Version columns."""
    import getpass
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    tags = {"mlflow.user": user, "mlflow.source.name": source, "mlflow.source.type": "LOCAL"}
    sha = (git_commit or "").split("+")[0]
    if sha and sha != "unknown":
        tags["mlflow.source.git.commit"] = sha
    return tags


def point_params(cfg_dict: Mapping, point: Mapping, trial: str) -> dict[str, str]:
    """Every grid coordinate and training setting of a grid point, as MLflow params (strings)."""
    ds = next(d for d in cfg_dict["datasets"] if d["name"] == point["dataset"])
    var = next(v for v in ds["variants"] if v["name"] == point["variant"])
    params = {k: "none" if point[k] is None else str(point[k]) for k in GRID}
    # a variant matched to a logging quality has no T in the config (prepare solves it): its target instead
    T = str(var["T"]) if var.get("T") is not None else "solved: " + ", ".join(
        f"{k}={v}" for k, v in (var.get("match") or {}).items())
    params.update({"alpha": str(var["alpha"]), "beta": str(var["beta"]), "T": T,
                   "val_fraction": str(ds["val_fraction"]), "trial": trial, "device": str(cfg_dict["device"]),
                   "group_by": str(cfg_dict["group_by"])})
    try:   # the protocol the run ran under: 'paper' or 'paper+<the ablated settings>'
        from poxm_core.config.schema import TrainingConfig, protocol_name
        params["protocol"] = protocol_name(TrainingConfig(**cfg_dict["training"]))
    except Exception:
        params["protocol"] = "unknown"
    mc = dict(cfg_dict["methods"].get(point["method"], {}) or {})
    mc.pop("p", None)
    mc.pop("lam", None)
    if mc.get("lr") is None:   # the protocol's rate of the method's group, as the trainer resolves it
        from poxm_core.methods import get_method
        group = get_method(point["method"]).lr_group
        mc["lr"] = cfg_dict["training"]["lr_is" if group == "is" else "lr_supervised"]
    params.update(_flat("method", mc))
    params.update(_flat("training", cfg_dict["training"]))
    params.update(_flat("model", cfg_dict["model"]))
    if ds.get("synthetic"):
        params.update(_flat("synthetic", {k: v for k, v in ds["synthetic"].items() if v is not None}))
    return params
