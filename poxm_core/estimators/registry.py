"""The estimator registry: name -> estimator class. Adding one is one module and one line here."""
from __future__ import annotations

from poxm_core.errors import PoxmInputError, nearest
from poxm_core.estimators.base import BaseEstimator
from poxm_core.estimators.dr import DR
from poxm_core.estimators.ips import IS, SIS
from poxm_core.estimators.prefix import PrefixIS
from poxm_core.estimators.snis import SNIS
from poxm_core.estimators.translated import Translated

__all__ = ["ESTIMATORS", "get_estimator"]


class _Registry(dict):
    """A dict whose missing key is a one-line PoxmInputError naming the valid estimators."""

    def __missing__(self, name):
        raise PoxmInputError(f"estimator: unknown name {name!r}{nearest(str(name), self.keys())}; "
                             f"valid: {', '.join(sorted(self))}")


ESTIMATORS: dict[str, type[BaseEstimator]] = _Registry(
    {cls.name: cls for cls in (IS, SIS, SNIS, Translated, DR, PrefixIS)})


def get_estimator(name: str, **settings) -> BaseEstimator:
    """An estimator instance by registry name, e.g. get_estimator('translated', lam=0.9)."""
    return ESTIMATORS[name](**settings)
