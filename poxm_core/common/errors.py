"""One error type for bad user input, so the CLI can print one line and exit non-zero.

Messages name the file and line, or the config key and the nearest valid one, or the argument:
``PoxmInputError("data/train.txt:17: expected 'feature:value', got 'abc'")``.
"""
from __future__ import annotations

import difflib
from typing import Iterable


class PoxmInputError(ValueError):
    """A user-facing input problem (file, config key, argument). Printed as one line by the CLI."""


class DivergedError(RuntimeError):
    """A head's parameters became NaN or infinite during training (poxm_core.training.trainer.check_finite):
    raised at the end of that epoch, before anything is evaluated, naming the heads. A NaN policy would
    otherwise score like padding (weight 0), report estimates of 0 and fail only later, without saying
    which head broke. Printed as one line by the CLI (exit 1: not an input problem)."""


def nearest(name: str, valid: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest valid name, or the list of valid names."""
    valid = sorted(valid)
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return f" (valid: {', '.join(valid)})"
