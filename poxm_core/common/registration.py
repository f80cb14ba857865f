"""Adding an entry to one of the registries (datasets, methods, estimators): the one rule they share.

    add(registry, kind, name, entry, same=...)   -> entry

A name not yet taken is filed. A name taken by an entry that `same(old, new)` accepts is re-filed (a
plugin module imported twice registers its classes twice: not an error); any other taken name is a
ValueError naming the kind, the name and what holds it. Each registry keeps its own type checks.
"""
from __future__ import annotations

from typing import Callable, TypeVar

__all__ = ["add"]

T = TypeVar("T")


def _never(old, new) -> bool:
    return False


def add(registry: dict, kind: str, name: str, entry: T, same: Callable[[object, object], bool] = _never) -> T:
    have = registry.get(name)
    if have is not None and not same(have, entry):
        held = have.__name__ if isinstance(have, type) else type(have).__name__
        raise ValueError(f"{kind} '{name}' is already registered ({held})")
    registry[name] = entry
    return entry
