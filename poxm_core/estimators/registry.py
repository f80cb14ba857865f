"""The estimator registry: name -> estimator class. Adding one is one module and one line here
(or, from a plugin, `register_estimator(cls)`). Every list of estimators is this dict: the trainer's
validation rows (`estimators.validation`), hence MLflow and the report's estimator figure, read it."""
from __future__ import annotations

from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.common.registration import add
from poxm_core.estimators.base import BaseEstimator
from poxm_core.estimators.dr import DR
from poxm_core.estimators.ips import IS, SIS
from poxm_core.estimators.mips import MIPS
from poxm_core.estimators.offcem import OffCEM
from poxm_core.estimators.prefix import PrefixIS
from poxm_core.estimators.snis import SNIS
from poxm_core.estimators.snis_lb import SNISLowerBound
from poxm_core.estimators.translated import Translated

__all__ = ["ESTIMATORS", "get_estimator", "register_estimator"]


class _Registry(dict):
    """A dict whose missing key is a one-line PoxmInputError naming the valid estimators."""

    def __missing__(self, name):
        raise PoxmInputError(f"estimator: unknown name {name!r}{nearest(str(name), self.keys())}; "
                             f"valid: {', '.join(sorted(self))}")


# The order is the display order of the validation estimators (IS, sIS, SNIS, DR, PIS, SNIS-LB, MIPS,
# OffCEM; translated is the training objective, not reported).
ESTIMATORS: dict[str, type[BaseEstimator]] = _Registry(
    {cls.name: cls for cls in (IS, SIS, SNIS, Translated, DR, PrefixIS, SNISLowerBound, MIPS, OffCEM)})


def get_estimator(name: str, **settings) -> BaseEstimator:
    """An estimator instance by registry name, e.g. get_estimator('translated', shift=0.1)."""
    return ESTIMATORS[name](**settings)


def register_estimator(cls: type[BaseEstimator]) -> type[BaseEstimator]:
    """Add an estimator class under `cls.name` (usable as a class decorator in a plugin module).
    Registering the same class again is a no-op (a plugin imported twice); another class under a
    taken name, or a reported estimator without a label, is an error."""
    if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)) or not cls.name:
        raise TypeError(f"estimator: expected a BaseEstimator subclass with a name, got {cls!r}")
    if cls.reported and not cls.label:
        raise TypeError(f"estimator '{cls.name}': a reported estimator needs a `label` (its metric name)")
    if cls.support not in ("policy", "selector") or cls.weights not in ("pruned", "prefix"):
        raise TypeError(f"estimator '{cls.name}': support must be 'policy' or 'selector' and weights "
                        f"'pruned' or 'prefix', got {cls.support!r}, {cls.weights!r}")
    if not isinstance(cls.needs, tuple) or not all(isinstance(k, str) and k for k in cls.needs):
        raise TypeError(f"estimator '{cls.name}': needs must be a tuple of array names, got {cls.needs!r}")
    return add(ESTIMATORS, "estimator", cls.name, cls, same=lambda old, new: old is new)
