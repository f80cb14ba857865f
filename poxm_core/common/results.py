"""Long-form result rows: what a trial writes and what selection and the report read.

One row per (grid point, split, metric, epoch). Columns (all present in every row):
  dataset, variant, method, p, lam, seed   grid coordinates (p = -1 / lam = nan where unused)
  split     'val' (estimates on the validation log) | 'test' (metrics on test labels) | 'train'
  metric    'R@5', 'nDCR@3', 'PSR@1', 'P@5', 'nDCG@5', 'PSP@5', 'IS', 'sIS', 'SNIS', 'DR', 'ESS', 'loss', ...
  value     float; metrics are fractions in [0, 1] (the report multiplies by 100)
  stderr    float (Monte-Carlo or CLT standard error; nan where none)
  epoch     int (>= 1 per-epoch rows; 0 = untrained / logging; final rows carry the last epoch)
  final     bool: True for the rows of the finished trial (what selection and tables read)
"""
from __future__ import annotations

import math
from typing import Iterable

import pandas as pd

COLUMNS = ["dataset", "variant", "method", "p", "lam", "seed", "split", "metric", "value", "stderr", "epoch", "final"]


def make_row(*, dataset: str, variant: str, method: str, p: int | None, lam: float | None, seed: int,
             split: str, metric: str, value: float, stderr: float = math.nan, epoch: int = 0,
             final: bool = False) -> dict:
    return {"dataset": dataset, "variant": variant, "method": method,
            "p": -1 if p is None else int(p), "lam": math.nan if lam is None else float(lam),
            "seed": int(seed), "split": split, "metric": metric, "value": float(value),
            "stderr": float(stderr), "epoch": int(epoch), "final": bool(final)}


def to_frame(rows: Iterable[dict]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=COLUMNS)
    return df.astype({"p": "int64", "seed": "int64", "epoch": "int64", "final": "bool"})


def mlflow_name(metric: str) -> str:
    """MLflow rejects '@' and '=': 'R@5' -> 'R_at_5'."""
    return metric.replace("@", "_at_").replace("=", "_eq_")

# the cut-offs k of every reported metric (R@k, P@k, ...): the trials' and the prepare stage's
KS = (1, 3, 5)
# results/prepare.csv: the prepare stage's statistics, long form (orchestration/stages/gather.py)
PREPARE_COLUMNS = ["dataset", "variant", "seed", "metric", "value"]

# a trial's (and, gathered, a run's results/) per-instance test values of every head: np.savez arrays
# keyed 'dataset|variant|seed|method|p|lam|metric', (n_test,) float32 each (training/reporting.py)
INSTANCES = "test_instances.npz"
