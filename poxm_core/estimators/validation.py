"""Every reported estimator of the registry on one validation log: what the trainer writes as the
'val' rows of a head (and so what MLflow and the report's estimator figure show).

    validation_estimates(logpi, q, r, aux, arrays) -> {label: Estimate}, in registry order
    needed_arrays() -> the names every reported estimator's `needs` declares (what a caller gathers)
    crossfit_values([per-fold {label: Estimate}]) -> {label: mean value over the folds}

`logpi` maps a support ("policy": the head's test-time support S; "selector": Phi^p(x)) to the
(n, ell) log conditionals log pi_A(y_ij | x_i, y_i,<j) of the logged actions; each estimator gets the
importance weights (`weights.importance_weights`, pruned or prefix as its class says) of its support,
and the auxiliary arrays it names (`aux_names`, e.g. DR's dm_term and rhat_logged). An estimator
whose support or auxiliary arrays are not given is skipped: DR needs a fitted reward model, which the
per-epoch reports do not have. `arrays` holds the extra arrays estimators declare in `needs` (per-action
arrays, per-log tables); an estimator whose needs are not all there is skipped the same way, and one
that overrides `weights_on` makes its own weights from them. Nothing here names an estimator: a
registered one appears by itself.
"""
from __future__ import annotations

import numpy as np

from poxm_core.estimators.base import Estimate, ValidationLog
from poxm_core.estimators.registry import ESTIMATORS

__all__ = ["validation_estimates", "reported_labels", "needed_arrays", "crossfit_values"]


def reported_labels() -> list[str]:
    """The metric names the validation rows can carry, in registry (display) order."""
    return [cls.label for cls in ESTIMATORS.values() if cls.reported]


def needed_arrays() -> set[str]:
    """Every name a reported estimator of the registry declares in `needs`: what a caller gathers
    into `validation_estimates(arrays=...)` (an array nobody needs is not built)."""
    return {k for cls in ESTIMATORS.values() if cls.reported for k in cls.needs}


def validation_estimates(logpi: dict[str, np.ndarray], q: np.ndarray, r: np.ndarray,
                         aux: dict[str, np.ndarray] | None = None,
                         arrays: dict[str, np.ndarray] | None = None) -> dict[str, Estimate]:
    log = ValidationLog(logpi, np.asarray(q, dtype=np.float64), np.asarray(r, dtype=np.float64),
                        aux or {}, arrays or {})
    out: dict[str, Estimate] = {}
    for cls in ESTIMATORS.values():
        if (not cls.reported or cls.support not in logpi
                or not (cls.aux_from_arrays or all(k in log.aux for k in cls.aux_names))
                or not all(k in log.arrays for k in cls.needs)):
            continue
        out[cls.label] = cls().estimate_on(log)     # weights of one (support, kind) made once per log
    return out


def crossfit_values(per_fold) -> dict[str, float]:
    """Cross-fitted criterion: for each label every fold reports, the plain mean of its value over the
    folds (fold f's estimate is of the copy trained without fold f, on fold f). Labels missing from a
    fold are left out."""
    per_fold = list(per_fold)
    if not per_fold:
        raise ValueError("per_fold: expected the estimates of at least one fold, got none")
    labels = [k for k in per_fold[0] if all(k in d for d in per_fold[1:])]
    return {k: float(np.mean([d[k].value for d in per_fold])) for k in labels}
