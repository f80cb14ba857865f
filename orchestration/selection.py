"""Selection of (p, lambda): honest by construction (docs/protocol.md).

For each (dataset, variant, method, seed), among the grid points (p, lambda) that finished (rows with
``final`` True), the chosen point is the one whose trained policy has the highest estimate, by the
selection *criterion*, on the held-out validation slice of the *logged* data (split 'val', metric
= the criterion; 'IS' by default; 'SNIS' is the paper's criterion; any other validation estimator
the trials write, e.g. 'sIS', 'DR', 'PIS', if the run's config says ``selection: {criterion: ...}``).
Test rows are never read by that choice. The honest choice is labelled ``selection=<criterion in
lower case>`` ('is' by default, 'snis' for the paper's); the oracle choice (highest test R@5) is
computed apart and labelled ``selection='oracle'`` so the report can show what honest selection costs.

Ties (equal values, compared exactly) go to the smaller p, then the smaller lambda (missing lambda
last), so the choice does not depend on row order. A group with a single grid point (logging, dm,
skyline) is selected trivially, even without a criterion row. Grid points without a finite criterion
value cannot be chosen; a group where no point has one (and more than one point exists) gets no
honest row and shows as missing in the tables.

Everything here is a pure function of result rows (``poxm_core.common.results.COLUMNS``).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from poxm_core.common.results import COLUMNS

GROUP = ["dataset", "variant", "method", "seed"]
POINT = GROUP + ["p", "lam"]
DEFAULT_CRITERION = "IS"
# The paper's criterion: every report shows its choices beside the run's criterion.
PAPER_CRITERION = "SNIS"
SELECT_SPLIT = "val"
SELECT_METRIC = (SELECT_SPLIT, DEFAULT_CRITERION)
PAPER_METRIC = (SELECT_SPLIT, PAPER_CRITERION)
ORACLE_METRIC = ("test", "R@5")
ORACLE = "oracle"
# Final validation metrics that are not estimates of the policy's value (never criteria).
NOT_CRITERIA = ("ESS", "loss")
# Display order of the criteria; any other validation estimator follows, sorted.
CRITERION_ORDER = ["IS", "sIS", "SNIS", "DR", "PIS", "SNIS-LB"]
# val_criterion: the chosen point's value of its row's criterion; val_SNIS is kept (the paper's
# criterion, NaN where a point has none) so older readers of selection.csv keep working.
SELECTION_COLUMNS = GROUP + ["selection", "criterion", "p", "lam", "val_criterion", "val_SNIS", "test_R@5",
                             "n_points"]


def check_criterion(criterion) -> str:
    """The criterion as a validation metric name; ValueError for what cannot be one."""
    if not isinstance(criterion, str) or not criterion.strip():
        raise ValueError(f"selection criterion must be a validation metric name such as 'IS', got {criterion!r}")
    c = criterion.strip()
    if c in NOT_CRITERIA or c.endswith("_se") or c.lower() == ORACLE:
        raise ValueError(f"selection criterion {c!r} is not a value estimate; use one of the validation "
                         f"estimators, e.g. {', '.join(CRITERION_ORDER)}")
    return c


def selection_label(criterion: str = DEFAULT_CRITERION) -> str:
    """The ``selection`` value of the honest choice by `criterion`: 'is' for IS, 'snis' for SNIS."""
    return check_criterion(criterion).lower()


def is_criterion(metric: str) -> bool:
    return metric not in NOT_CRITERIA and not metric.endswith("_se")


def order_criteria(names) -> list[str]:
    names = list(dict.fromkeys(str(n) for n in names))
    return [c for c in CRITERION_ORDER if c in names] + sorted(c for c in names if c not in CRITERION_ORDER)


def val_criteria(rows: pd.DataFrame) -> list[str]:
    """Every criterion present: final split-'val' metrics except ESS, loss and standard errors (*_se),
    in the order IS, sIS, SNIS, DR, PIS, SNIS-LB, then any other sorted. Not a fixed list: a new estimator the
    trials write appears here by itself."""
    if rows.empty:
        return []
    f = rows[rows["final"].astype(bool) & (rows["split"] == SELECT_SPLIT)]
    return order_criteria(m for m in f["metric"].astype(str).unique() if is_criterion(m))


def check_rows(rows: pd.DataFrame, name: str = "rows") -> pd.DataFrame:
    """Validate and normalise a long-form result frame (dtypes of p, lam, seed, final)."""
    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame of result rows, got {type(rows).__name__}")
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"{name} lacks result columns {missing}; expected poxm_core.common.results.COLUMNS")
    out = rows[COLUMNS].copy()
    out["p"] = pd.to_numeric(out["p"]).astype("int64")
    out["lam"] = pd.to_numeric(out["lam"]).astype("float64")
    out["seed"] = pd.to_numeric(out["seed"]).astype("int64")
    out["value"] = pd.to_numeric(out["value"]).astype("float64")
    out["stderr"] = pd.to_numeric(out["stderr"]).astype("float64")
    out["epoch"] = pd.to_numeric(out["epoch"]).astype("int64")
    if out["final"].dtype != bool:
        out["final"] = out["final"].map(_as_bool).astype(bool)
    for c in ("dataset", "variant", "method", "split", "metric"):
        out[c] = out[c].astype(str)
    return out


def _as_bool(v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    s = str(v).strip().lower()
    if s in ("true", "1", "1.0"):
        return True
    if s in ("false", "0", "0.0", "", "nan"):
        return False
    raise ValueError(f"rows column 'final' must be boolean, got {v!r}")


def _point_metric(final: pd.DataFrame, split: str, metric: str) -> pd.DataFrame:
    """One value per grid point: the final row of (split, metric) with the largest epoch."""
    sub = final[(final["split"] == split) & (final["metric"] == metric)]
    sub = sub.sort_values("epoch", kind="stable").drop_duplicates(POINT, keep="last")
    return sub[POINT + ["value"]]


def _lam_key(lam: pd.Series) -> pd.Series:
    return lam.fillna(math.inf)


def _argmax(points: pd.DataFrame, col: str) -> pd.DataFrame:
    """Per group, the row with the largest finite `col`; ties -> smaller p, then smaller lam."""
    ok = points[np.isfinite(points[col].to_numpy(dtype=float))]
    ordered = ok.assign(_neg=-ok[col], _lam=_lam_key(ok["lam"])).sort_values(
        GROUP + ["_neg", "p", "_lam"], kind="stable")
    return ordered.drop_duplicates(GROUP, keep="first").drop(columns=["_neg", "_lam"])


def select(rows: pd.DataFrame, criterion: str = DEFAULT_CRITERION) -> pd.DataFrame:
    """Criterion-selected and oracle grid point per (dataset, variant, method, seed).

    `criterion`: the validation metric to maximise (split 'val'), 'IS' by default.
    Returns one row per group and selection kind, columns ``SELECTION_COLUMNS``:
    dataset, variant, method, seed, selection (``selection_label(criterion)``, e.g. 'is', | 'oracle'),
    criterion, p, lam, val_criterion (the chosen point's validation value of the criterion), val_SNIS
    (its validation SNIS), test_R@5 (its test R@5, for display only), n_points (grid points of the
    group that finished).
    """
    criterion = check_criterion(criterion)
    label = selection_label(criterion)
    rows = check_rows(rows)
    final = rows[rows["final"]]
    points = final[POINT].drop_duplicates().reset_index(drop=True)
    if points.empty:
        return pd.DataFrame(columns=SELECTION_COLUMNS)
    n_points = points.groupby(GROUP, dropna=False).size().rename("n_points").reset_index()
    points = points.merge(n_points, on=GROUP)
    crit = _point_metric(final, SELECT_SPLIT, criterion).rename(columns={"value": "val_criterion"})
    snis = _point_metric(final, *PAPER_METRIC).rename(columns={"value": "val_SNIS"})
    r5 = _point_metric(final, *ORACLE_METRIC).rename(columns={"value": "test_R@5"})
    points = (points.merge(crit, on=POINT, how="left").merge(snis, on=POINT, how="left")
              .merge(r5, on=POINT, how="left").assign(criterion=criterion))

    single = points[points["n_points"] == 1]
    multi = points[points["n_points"] > 1]
    # The honest choice sees only validation columns: test_R@5 is dropped before the argmax.
    by_crit = _argmax(multi.drop(columns=["test_R@5"]), "val_criterion").merge(
        multi[POINT + ["test_R@5"]], on=POINT, how="left")
    by_oracle = _argmax(multi, "test_R@5")
    unselected = set(map(tuple, multi[GROUP].drop_duplicates().to_numpy())) - set(
        map(tuple, by_crit[GROUP].to_numpy()))
    if unselected:
        warnings.warn(f"no finite validation {criterion} for {len(unselected)} group(s) with several grid "
                      f"points, e.g. {sorted(unselected)[0]}: not selected", stacklevel=2)
    out = pd.concat([single.assign(selection=label), by_crit.assign(selection=label),
                     single.assign(selection=ORACLE), by_oracle.assign(selection=ORACLE)],
                    ignore_index=True)
    out = out[SELECTION_COLUMNS].sort_values(["selection"] + GROUP, kind="stable",
                                             key=lambda s: s.map({label: 0, ORACLE: 1}) if s.name == "selection" else s)
    return out.reset_index(drop=True)


def selected_rows(rows: pd.DataFrame, selection: pd.DataFrame, which: str = selection_label(DEFAULT_CRITERION),
                  split: str = "test") -> pd.DataFrame:
    """The final rows of `split` (default 'test') at the chosen grid points of `which` selection:
    'oracle', or the honest label of the criterion the selection used ('is', 'snis', 'pis', ...)."""
    default = {selection_label(DEFAULT_CRITERION), ORACLE}
    labels = default | set(selection["selection"].astype(str)) if "selection" in selection else default
    if which not in labels:
        raise ValueError(f"which must be one of {sorted(labels)} (a selection label of this frame), got {which!r}")
    rows = check_rows(rows)
    chosen = selection[selection["selection"] == which][POINT].copy()
    chosen["p"] = chosen["p"].astype("int64")
    chosen["lam"] = chosen["lam"].astype("float64")
    chosen["seed"] = chosen["seed"].astype("int64")
    picked = rows[rows["final"] & (rows["split"] == split)]
    # merge matches NaN lam to NaN lam (methods without lambda).
    return picked.merge(chosen, on=POINT, how="inner").reset_index(drop=True)


@dataclass(frozen=True)
class RunSelection:
    """A run's one selection: its criterion's choices with the oracle's (`selection`) and, beside them
    when the run's criterion is not the paper's and the rows have the paper's criterion, the paper
    criterion's choices (`paper`, its oracle rows dropped: they are the same as `selection`'s)."""
    criterion: str
    selection: pd.DataFrame
    paper: pd.DataFrame | None = None

    def frame(self) -> pd.DataFrame:
        """Every choice in one frame, told apart by its `criterion` and `selection` columns: what
        results/selection.csv holds."""
        if self.paper is None:
            return self.selection
        return pd.concat([self.selection, self.paper[self.paper["selection"] != ORACLE]], ignore_index=True)

    def honest(self) -> pd.DataFrame:
        """The run's criterion's own choices (no oracle, no paper rows)."""
        return self.selection[self.selection["selection"] == selection_label(self.criterion)]

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> RunSelection:
        """The selection back from its frame (results/selection.csv, or a published folder's
        selection.csv): the run's criterion is the one criterion of its rows, or the one that is not the
        paper's when there are two."""
        crits = list(dict.fromkeys(frame["criterion"].astype(str)))
        if not crits:
            return cls(DEFAULT_CRITERION, frame, None)
        criterion = crits[0] if len(crits) == 1 else next((c for c in crits if c != PAPER_CRITERION), crits[0])
        own = frame["criterion"].astype(str) == criterion
        paper = frame[~own & (frame["criterion"].astype(str) == PAPER_CRITERION)].reset_index(drop=True)
        return cls(criterion, frame[own].reset_index(drop=True), paper if len(paper) else None)


def select_run(rows: pd.DataFrame, criterion: str = DEFAULT_CRITERION) -> RunSelection:
    """The selection of a run, computed once: `select(rows, criterion)` and, beside it, the paper's
    criterion when it differs and the rows have it (every report shows the paper's choices too)."""
    criterion = check_criterion(criterion)
    paper = None
    if criterion != PAPER_CRITERION and PAPER_CRITERION in val_criteria(rows):
        paper = select(rows, PAPER_CRITERION)
    return RunSelection(criterion, select(rows, criterion), paper)
