"""What one trial trains: `TrialSpec(dataset, variant, seed, heads)`, each head a `HeadSpec(method, p, lam)`.

A trial is one pass of the trainer over one prepared (dataset, variant, seed); its heads are trained
side by side on the same mini-batches (docs/training.md). `trial_specs(cfg, group_by)` enumerates
the sweep's grid as trials: "method" gives one trial per (dataset, variant, seed, method) holding
that method's whole (p, lam) grid; "seed" one trial per (dataset, variant, seed) with every head.
"""
from __future__ import annotations

from dataclasses import dataclass

from poxm_core.common.errors import PoxmInputError
from poxm_core.methods import head_grid
from poxm_core.methods.head import HeadSpec   # re-exported: a trial is made of heads

__all__ = ["HeadSpec", "TrialSpec", "trial_specs"]


@dataclass(frozen=True)
class TrialSpec:
    """One trial: a prepared (dataset, variant, seed) and the heads trained on it together."""
    dataset: str
    variant: str
    seed: int
    heads: tuple[HeadSpec, ...]

    def __post_init__(self) -> None:
        heads = tuple(self.heads)
        if not heads or not all(isinstance(h, HeadSpec) for h in heads):
            raise TypeError(f"heads: expected a non-empty tuple of HeadSpec, got {self.heads!r}")
        keys = [h.key for h in heads]
        if len(set(keys)) != len(keys):
            raise PoxmInputError(f"heads: a head appears twice in {keys}")
        object.__setattr__(self, "heads", heads)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed: expected an int, got {self.seed!r}")

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h.method for h in self.heads))

    @property
    def name(self) -> str:
        """Stable identity (no timestamp): 'eurlex-4k-A-s0-poxm' or '...-s0-all' for many methods."""
        m = self.methods
        return f"{self.dataset}-{self.variant}-s{self.seed}-{m[0] if len(m) == 1 else 'all'}"

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "variant": self.variant, "seed": self.seed,
                "heads": [h.to_dict() for h in self.heads]}

    @classmethod
    def from_dict(cls, d: dict) -> "TrialSpec":
        return cls(d["dataset"], d["variant"], int(d["seed"]), tuple(HeadSpec(**h) for h in d["heads"]))


def trial_specs(cfg, group_by: str | None = None) -> list[TrialSpec]:
    """Every trial of a sweep config, in config order (datasets, variants, seeds, methods).

    group_by: "method" (default cfg.group_by) -> one trial per (dataset, variant, seed, method) with
    all its (p, lam) heads; "seed" -> one trial per (dataset, variant, seed) with every method's heads.
    """
    group_by = cfg.group_by if group_by is None else group_by
    if group_by not in ("method", "seed"):
        raise PoxmInputError(f"group_by: expected 'method' or 'seed', got {group_by!r}")
    grids = {name: head_grid(name, mc) for name, mc in cfg.methods.items()}
    out: list[TrialSpec] = []
    for d in cfg.datasets:
        for v in d.variants:
            for s in cfg.seeds:
                if group_by == "seed":
                    out.append(TrialSpec(d.name, v.name, s, tuple(h for g in grids.values() for h in g)))
                else:
                    out.extend(TrialSpec(d.name, v.name, s, tuple(g)) for g in grids.values())
    return out
