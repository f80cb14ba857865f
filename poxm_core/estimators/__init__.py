"""Estimators of a ranking policy's value from logged slates (docs/estimators.md); see docs/estimators.md.

- Plackett-Luce conditionals log pi_A(y_j | x, y_<j) on a support A and importance weights
  (pruned per position, or product), NumPy + Torch twins.
- Estimators IS, sIS, SNIS, translated, DR, prefix-product IS (`pis`), SNIS lower bound (`snis_lb`): frozen dataclasses in the
  registry `ESTIMATORS`, `.estimate(w, r, ...) -> Estimate`, `.value_torch(w, r, ...)` differentiable;
  the class attribute `weights` ("pruned" or "prefix") says which importance weights to pass,
  `support` ("policy" or "selector") with which support A, `label` the metric name of its rows.
- `validation_estimates`: every reported estimator of the registry on one validation log (what the
  trainer writes); `register_estimator(cls)` adds one (a plugin), nothing else lists them. An estimator
  that needs more than the weights declares extra arrays (`needs`) and overrides
  `weights_on(log: ValidationLog)`.
"""
from poxm_core.estimators.base import BaseEstimator, Estimate, ValidationLog, effective_sample_size
from poxm_core.estimators.dr import DR, dr_value_torch
from poxm_core.estimators.ips import IS, SIS, is_value_torch
from poxm_core.estimators.plackett_luce import (pl_conditional_table_torch, pl_expectations, pl_expectations_torch,
                                                pl_log_conditionals, pl_log_conditionals_full_torch,
                                                pl_log_conditionals_torch)
from poxm_core.estimators.prefix import PrefixIS
from poxm_core.estimators.registry import ESTIMATORS, get_estimator, register_estimator
from poxm_core.estimators.snis import SNIS, snis_value_torch
from poxm_core.estimators.snis_lb import SNISLowerBound, snis_lb_width
from poxm_core.estimators.translated import Translated, translated_value_torch
from poxm_core.estimators.validation import needed_arrays, reported_labels, validation_estimates
from poxm_core.estimators.selector import phi, selector_pos
from poxm_core.estimators.weights import importance_weights, importance_weights_torch, sis_weights, sis_weights_torch

__all__ = [
    "pl_log_conditionals", "pl_log_conditionals_torch", "pl_log_conditionals_full_torch",
    "pl_expectations", "pl_expectations_torch", "pl_conditional_table_torch",
    "importance_weights", "importance_weights_torch", "phi", "selector_pos", "sis_weights", "sis_weights_torch",
    "Estimate", "BaseEstimator", "ValidationLog", "effective_sample_size", "ESTIMATORS", "get_estimator",
    "register_estimator", "validation_estimates", "reported_labels", "needed_arrays",
    "IS", "SIS", "SNIS", "Translated", "DR", "PrefixIS", "SNISLowerBound", "snis_lb_width",
    "is_value_torch", "snis_value_torch", "translated_value_torch", "dr_value_torch",
]
