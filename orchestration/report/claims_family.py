"""The declared family of claims: which cells of the claims table are confirmatory (a verdict, Holm over
all of them at once) and which are exploratory (shown, no verdict).

A config declares its family before the run (docs/report.md, "The declared family"):

    claims:
      criterion: IS          # the selection criterion whose choices the verdicts test
      alpha: 0.05            # family-wise level: Holm over every cell of the family at once
      family:                # claim keys of claims_registry, each optionally restricted
        - {claim: poxm_vs_logging}                     # every dataset × variant of the run
        - {claim: poxm_vs_dm, variants: [P, A]}
        - {claim: ranking_poxm, datasets: [bibtex]}
        - {claim: p_grows, test: sign}                 # 'crossed_t' (default) or 'sign' (p_grows' default)

A run whose config has none gets the default family, written into its config.yaml when it starts
(`declare_claims`, called by the sweep's plan), so even the default is declared before any trial runs:
every registered claim, every dataset × variant, under selection.criterion, each claim's default test.
A report of a run directory whose config.yaml has no `claims:` (a run from before) reads the same
default family and says so. Cells under another criterion (SNIS, the paper's, shown beside the run's)
and cells the family does not name are exploratory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from orchestration.report.claims_registry import ALL_CLAIMS, CLAIM_ORDER, P_CLAIM, TESTS, claim_of
from orchestration.report.inference import ALPHA, MIN_SEEDS, TOO_FEW, holm, verdict_of
from orchestration.report.inputs import selection_criterion
from orchestration.selection import PAPER_CRITERION
from poxm_core.common.errors import PoxmInputError, nearest

DECLARED, DEFAULT, EXPLORATORY = "declared", "default", "exploratory"
BLOCK_KEYS = ("criterion", "alpha", "family")
ENTRY_KEYS = ("claim", "datasets", "variants", "test")


@dataclass(frozen=True)
class Entry:
    """One declared claim: its key, its test, and the datasets and variants it covers (None: all)."""
    claim: str
    test: str
    datasets: frozenset[str] | None = None
    variants: frozenset[str] | None = None

    def covers(self, dataset: str, variant: str) -> bool:
        return ((self.datasets is None or dataset in self.datasets)
                and (self.variants is None or variant in self.variants))


@dataclass(frozen=True)
class Family:
    """The declared family: its entries, the criterion whose cells it holds (None: every criterion but
    the paper's, for a report handed no config), its level, and where it came from (DECLARED or DEFAULT)."""
    entries: tuple[Entry, ...]
    criterion: str | None = None
    alpha: float = ALPHA
    source: str = DEFAULT

    def tests(self, criterion: str) -> bool:
        return criterion == self.criterion if self.criterion is not None else criterion != PAPER_CRITERION

    def entry(self, criterion: str, claim: str, dataset: str, variant: str) -> Entry | None:
        """The first entry covering this cell, or None (the cell is exploratory)."""
        if not self.tests(criterion):
            return None
        return next((e for e in self.entries if e.claim == claim and e.covers(dataset, variant)), None)


def default_family(criterion: str | None = None, source: str = DEFAULT) -> Family:
    return Family(tuple(Entry(c.key, c.default_test) for c in ALL_CLAIMS), criterion, ALPHA, source)


def default_block(criterion: str) -> dict:
    """The default family as a config's `claims:` block (what a run without one records when it starts)."""
    return {"criterion": criterion, "alpha": ALPHA,
            "family": [{"claim": c.key, "test": c.default_test} for c in ALL_CLAIMS]}


def _key(loc: tuple) -> str:
    return "config key '" + ".".join(str(x) for x in loc) + "'"


def _names(value, loc: tuple, where: Callable[[tuple], str]) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        raise PoxmInputError(f"{where(loc)}: expected a non-empty list of names, got {value!r}")
    return frozenset(value)


def _entry(item, loc: tuple, where: Callable[[tuple], str]) -> Entry:
    if not isinstance(item, dict) or "claim" not in item:
        raise PoxmInputError(f"{where(loc)}: expected a mapping with a 'claim' key, e.g. {{claim: poxm_vs_logging}}"
                             f", got {item!r}")
    for k in item:
        if k not in ENTRY_KEYS:
            raise PoxmInputError(f"{where(loc + (k,))}: unknown key '{k}'" + nearest(str(k), ENTRY_KEYS))
    claim = claim_of(str(item["claim"]))
    if claim is None:
        raise PoxmInputError(f"{where(loc + ('claim',))}: unknown claim '{item['claim']}'"
                             + nearest(str(item["claim"]), CLAIM_ORDER))
    test = item.get("test") or claim.default_test
    if test not in TESTS:
        raise PoxmInputError(f"{where(loc + ('test',))}: unknown test '{test}'" + nearest(str(test), TESTS))
    if claim is P_CLAIM and item.get("variants") is not None:
        raise PoxmInputError(f"{where(loc + ('variants',))}: {P_CLAIM.key} compares variants A and C of each dataset; "
                             "restrict it by datasets only")
    return Entry(claim.key, test, _names(item.get("datasets"), loc + ("datasets",), where),
                 _names(item.get("variants"), loc + ("variants",), where))


def parse_family(block, criterion: str, where: Callable[[tuple], str] = _key) -> Family:
    """A `claims:` block (a mapping as config.yaml holds it) as a Family under `criterion` where the block
    names none. A bad block is one PoxmInputError naming the key (`where(loc)`: 'config key
    'claims.family.1.claim'' or a file line) and, for a misspelt name, the nearest valid one."""
    if not isinstance(block, dict):
        raise PoxmInputError(f"{where(('claims',))}: expected a mapping (criterion, alpha, family), got {block!r}")
    for k in block:
        if k not in BLOCK_KEYS:
            raise PoxmInputError(f"{where(('claims', k))}: unknown key '{k}'" + nearest(str(k), BLOCK_KEYS))
    alpha = block.get("alpha", ALPHA)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise PoxmInputError(f"{where(('claims', 'alpha'))}: expected a level in (0, 1), got {alpha!r}")
    items = block.get("family")
    if items is None:
        entries = default_family().entries
    elif not isinstance(items, list) or not items:
        raise PoxmInputError(f"{where(('claims', 'family'))}: expected a non-empty list of claims, got {items!r}")
    else:
        entries = tuple(_entry(it, ("claims", "family", i), where) for i, it in enumerate(items))
    return Family(entries, str(block.get("criterion") or criterion), float(alpha), DECLARED)


def family_of(config: dict | None) -> Family:
    """The family a run declared in its config.yaml (`claims:`), or the default one under its criterion
    (source DEFAULT: a run from before declared families)."""
    config = config if isinstance(config, dict) else {}
    criterion = selection_criterion(config)
    block = config.get("claims")
    return default_family(criterion) if block is None else parse_family(block, criterion)


def with_verdicts(frame: pd.DataFrame, family: Family | None = None) -> pd.DataFrame:
    """Holm's adjusted p-values over the whole declared family at once (the rows whose `family` is not
    exploratory, cells with fewer than MIN_SEEDS seeds left out), and the verdicts they give at the
    family's level; exploratory rows get no adjusted p and the verdict 'exploratory'."""
    alpha = (family or default_family()).alpha
    f = frame.copy()
    f["p_holm"] = np.nan
    inside = (f["family"] != EXPLORATORY) & (f["n"] >= MIN_SEEDS)
    for _, idx in f[inside].groupby("criterion", sort=False).groups.items():   # a family holds one criterion
        f.loc[idx, "p_holm"] = holm(f.loc[idx, "p_value"].to_numpy(dtype=float))
    f["verdict"] = [TOO_FEW if n < MIN_SEEDS else EXPLORATORY if fam == EXPLORATORY else verdict_of(d, p, n, alpha)
                    for d, p, n, fam in zip(f["diff"], f["p_holm"], f["n"], f["family"])]
    return f


def family_size(frame: pd.DataFrame) -> int:
    """The cells Holm adjusted over (the declared family's cells with a verdict)."""
    return int(np.isfinite(pd.to_numeric(frame["p_holm"], errors="coerce")).sum()) if len(frame) else 0


def _config_where(cfg) -> Callable[[tuple], str]:
    locate = getattr(cfg, "_where", None)       # SweepConfig's Locator: file:line or the override
    return _key if locate is None else (lambda loc: f"{locate(loc, given=True)}: {_key(loc)}")


def _check_names(entry: Entry, i: int, variants_of: dict[str, list[str]], where) -> None:
    for name in sorted(entry.datasets or ()):
        if name not in variants_of:
            raise PoxmInputError(f"{where(('claims', 'family', i, 'datasets'))}: '{name}' is not a dataset of this "
                                 "config" + nearest(name, variants_of))
    have = sorted({v for d, vs in variants_of.items() if entry.datasets is None or d in entry.datasets for v in vs})
    for name in sorted(entry.variants or ()):
        if name not in have:
            raise PoxmInputError(f"{where(('claims', 'family', i, 'variants'))}: '{name}' is not a variant of "
                                 "the datasets it names" + nearest(name, have))


def declare_claims(cfg, fresh: bool):
    """The sweep's plan, before anything runs: a config's `claims:` checked against the claim registry
    and the run's datasets, variants and criterion (one line naming the key and the nearest valid name)
    and resolved (criterion, every entry's test, the family itself when omitted); for a run that starts
    now (`fresh`) without one, the default family put into the config it records. Returns the config."""
    from poxm_core.config.sweep_schema import ClaimsConfig

    criterion = cfg.selection.criterion
    if cfg.claims is None:
        return cfg.model_copy(update={"claims": ClaimsConfig.model_validate(default_block(criterion))}) if fresh else cfg
    where = _config_where(cfg)
    block = cfg.claims.model_dump(mode="json", exclude_none=True)
    fam = parse_family(block, criterion, where)
    if fam.criterion != criterion:
        raise PoxmInputError(f"{where(('claims', 'criterion'))}: '{fam.criterion}' is not this run's selection "
                             f"criterion '{criterion}' (the verdicts test the choices the run makes; set both, or "
                             f"leave claims.criterion out)")
    variants_of = {d.name: [v.name for v in d.variants] for d in cfg.datasets}
    for i, e in enumerate(fam.entries if block.get("family") is not None else ()):
        _check_names(e, i, variants_of, where)
    items = block.get("family") or [{"claim": e.claim} for e in fam.entries]
    resolved = {"criterion": criterion, "alpha": fam.alpha,
                "family": [{**it, "test": e.test} for it, e in zip(items, fam.entries)]}
    return cfg.model_copy(update={"claims": ClaimsConfig.model_validate(resolved)})
