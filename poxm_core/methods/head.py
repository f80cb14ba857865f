"""One grid point of a method: `HeadSpec(method, p, lam)`, the unit the trainer trains (a head).

It lives with the methods because a method's (p, lam) grid is made of them (`registry.head_grid`); the
trial layer (`training.spec.TrialSpec`) groups them into trials. Imports nothing above poxm_core.common.errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from poxm_core.common.errors import PoxmInputError

__all__ = ["HeadSpec"]


def _fmt(v) -> str:
    return "none" if v is None else repr(v)


@dataclass(frozen=True)
class HeadSpec:
    """One grid point of a method: p (action-selector size) and lam (reward translation), None where unused."""
    method: str
    p: int | None = None
    lam: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise TypeError(f"method: expected a method name, got {self.method!r}")
        if self.p is not None and (isinstance(self.p, bool) or not isinstance(self.p, int) or self.p < 1):
            raise PoxmInputError(f"p: expected a positive int or None, got {self.p!r}")
        if self.lam is not None:
            if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not math.isfinite(self.lam):
                raise PoxmInputError(f"lam: expected a finite float or None, got {self.lam!r}")
            object.__setattr__(self, "lam", float(self.lam))

    @property
    def key(self) -> str:
        """'poxm/p=10/lam=0.9' ('none' where unused): the prefix of its metric names."""
        return f"{self.method}/p={_fmt(self.p)}/lam={_fmt(self.lam)}"

    def to_dict(self) -> dict:
        return {"method": self.method, "p": self.p, "lam": self.lam}
