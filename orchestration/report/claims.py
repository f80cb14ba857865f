"""The claims table: what the benchmark says about each claim, per dataset and variant (the report's
first table, the end of `poxm run` / `poxm report`, and the sweep's MLflow parent run).

The claims are those of the registry (claims_registry.py): POXM against the logging policy, DM,
BanditNet, PM-BanditNet and the baselines on the same logs, wPOXM and DR-POXM against POXM, DM against
the logging policy, POXM's R@5 against the logging policy's greedy top-5, every learned method's
greedy ranking against the logging model's (`ranking_<method>`), and, per dataset, p_grows.

For each claim and seed, the paired difference d_s = value(first) − value(second) at the heads the
criterion selected for that seed (×100 like the report's metrics; p as it is), with, where the run
kept them (results/test_instances.npz), each test instance's difference too. Reported
(``inference.paired_inference``): the mean of d_s over the n seeds where both exist, a 95 % interval
that covers seed variation and test-set sampling (the crossed variance; the seed term alone for p and
for runs without per-instance values), the per-seed sign count and its exact sign test, the raw
p-value of the cell's declared test and its Holm adjustment over the run's whole declared family
(claims_family.py), and a verdict: holds, fails, undecided, "too few seeds" below
``inference.MIN_SEEDS``, or "exploratory" for a row outside the family (any row under the paper's SNIS
beside the run's criterion). A claim whose methods or variants the run lacks has no row. Pure functions
of result rows, a selection frame (``selection.select``), the per-instance values and the family.

The display (table, terminal summary, MLflow names, reading claims.csv back) is claims_display.py; its
names are importable from here as before.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestration.report.claims_display import (VERDICT_SCORE, _num, _p_text, cell_text, claims_markdown,  # noqa: F401
                                                 claims_table, column_name, criteria_of, criterion_name,
                                                 mlflow_metrics, read_claims, summary_from_report, summary_text)
from orchestration.report.claims_family import EXPLORATORY, Family, default_family, with_verdicts
from orchestration.report.claims_registry import (CLAIM_COLUMNS, CLAIMS, P_CLAIM, P_FROM, P_TO,  # noqa: F401
                                                  P_VARIANT, SCALE, SIGN, Claim, _twin)
from orchestration.report.inference import paired_inference
from orchestration.report.instance_moments import moment_source, pair_moments
from orchestration.selection import PAPER_CRITERION, selected_rows, selection_label

HEAD = ["dataset", "variant", "method"]


def _last_values(test: pd.DataFrame):
    """Each (dataset, variant, method, metric)'s values per seed: the row of the largest epoch (the last
    such row), kept where finite. Returns lookup(dataset, variant, method, metric) -> Series seed -> value
    (None where there is none). Grouped once: a claim looks up hundreds of them."""
    last = test.sort_values("epoch", kind="stable").drop_duplicates(HEAD + ["metric", "seed"], keep="last")
    last = last[np.isfinite(last["value"].to_numpy(dtype=float))]
    at = last.groupby(HEAD + ["metric"], sort=False).indices
    seeds, values = last["seed"].to_numpy(), last["value"].to_numpy(dtype=float)

    def lookup(*key) -> pd.Series | None:
        pos = at.get(key)
        return None if pos is None else pd.Series(values[pos], index=pd.Index(seeds[pos], name="seed"))
    return lookup


def _per_seed(lookup, dataset: str, variant: str, method: str, metric: str) -> pd.Series:
    """seed -> value of `metric` (its greedy twin where the method has none) at the selected head."""
    for m in (metric, _twin(metric)):
        s = lookup(dataset, variant, method, m)
        if s is not None:
            return s
    return pd.Series(dtype=float)


def instance_key(dataset, variant, seed, method, p, lam, metric) -> str:
    """The key of one head's per-instance values in results/test_instances.npz (training/reporting.py)."""
    p = -1 if p is None or (isinstance(p, float) and math.isnan(p)) else int(p)
    lam = "nan" if lam is None or (isinstance(lam, float) and math.isnan(lam)) else repr(float(lam))
    return f"{dataset}|{variant}|{int(seed)}|{method}|{p}|{lam}|{metric}"


def _instance_lookup(sel: pd.DataFrame, src):
    """lookup(dataset, variant, method, seed, metric) -> the key of the selected head's per-instance
    values in `src` (instance_moments: its twin metric's where it has none), or None."""
    if src is None:
        return lambda *a: None
    heads = {(str(r.dataset), str(r.variant), str(r.method), int(r.seed)): (r.p, r.lam)
             for r in sel.itertuples(index=False)}

    def lookup(dataset, variant, method, seed, metric):
        pl = heads.get((dataset, variant, method, int(seed)))
        if pl is None:
            return None
        for m in (metric, _twin(metric)):
            k = instance_key(dataset, variant, seed, method, pl[0], pl[1], m)
            if src.has(k):
                return k
        return None
    return lookup


def _instance_diffs(inst, src, dataset: str, variant: str, claim: Claim, seeds: list, scale: float):
    """The crossed moments of the claim's two heads' per-instance differences over `seeds`, or None
    where any is missing."""
    if inst is None or src is None:
        return None
    xs = [inst(dataset, variant, claim.first, s, claim.metric) for s in seeds]
    ys = [inst(dataset, variant, claim.second, s, claim.second_metric or claim.metric) for s in seeds]
    if any(k is None for k in xs + ys):
        return None
    return pair_moments(src, xs, ys, scale)


def _record(criterion: str, dataset: str, variant: str, claim: Claim, a: pd.Series, b: pd.Series,
            scale: float, family: Family, inst=None, src=None) -> dict | None:
    seeds = sorted(set(a.index) & set(b.index))
    if not seeds:
        return None
    diffs = scale * (a.loc[seeds].to_numpy(dtype=float) - b.loc[seeds].to_numpy(dtype=float))
    r = paired_inference(diffs, _instance_diffs(inst, src, dataset, variant, claim, seeds, scale))
    entry = family.entry(criterion, claim.key, dataset, variant)
    test = entry.test if entry is not None else claim.default_test
    return {"criterion": criterion, "paper_criterion": criterion == PAPER_CRITERION, "dataset": dataset,
            "variant": variant, "claim": claim.key, "claim_text": claim.text, "source": claim.source,
            "metric": claim.metric if claim.second_metric is None else f"{claim.metric} vs {claim.second_metric}",
            **r, "p_value": r["p_sign"] if test == SIGN else r["p_value"], "test": test,
            "family": family.source if entry is not None else EXPLORATORY, "alpha": family.alpha,
            "signs": f"{r['positive']}/{r['n']}", "seeds": " ".join(str(int(s)) for s in seeds)}


def _p_record(criterion: str, d: str, sel: pd.DataFrame, family: Family) -> dict | None:
    """p_grows of dataset `d`: POXM's selected p at C minus at A, per seed."""
    ps = sel[(sel["dataset"] == d) & (sel["method"] == P_CLAIM.first) & (sel["p"] >= 0)]
    at = {v: ps[ps["variant"] == v].drop_duplicates("seed").set_index("seed")["p"].astype(float)
          for v in (P_FROM, P_TO)}
    return _record(criterion, d, P_VARIANT, P_CLAIM, at[P_TO], at[P_FROM], 1.0, family)


def claims(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str, instances=None,
           family: Family | None = None) -> pd.DataFrame:
    """Every claim the run can check, under the honest selection by `criterion` in `selection`.

    `rows`: result rows (``selection.check_rows``); `selection`: from ``selection.select(rows,
    criterion)`` (other labels in it are ignored); `instances`: a mapping of per-instance test values
    (results/test_instances.npz opened with np.load), an instance_moments source (a published folder's
    moments, or one shared by the report's parts) or None; `family`: the run's declared family
    (``claims_family.family_of(config)``), None for the default one (every claim under any criterion but
    the paper's). Columns ``CLAIM_COLUMNS``; one row per (dataset, variant, claim) with at least one seed
    where both methods have a value; the verdicts Holm over the family's rows of this frame.
    """
    family = family if family is not None else default_family()
    label = selection_label(criterion)
    sel = selection[selection["selection"] == label]
    if sel.empty:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    values = _last_values(selected_rows(rows, sel, label, split="test"))
    src = moment_source(instances)
    inst = _instance_lookup(sel, src)
    recs = []
    for d in sorted(sel["dataset"].astype(str).unique()):
        variants = sorted(sel[sel["dataset"] == d]["variant"].astype(str).unique())
        for c in CLAIMS:
            for v in variants:
                recs.append(_record(criterion, d, v, c, _per_seed(values, d, v, c.first, c.metric),
                                    _per_seed(values, d, v, c.second, c.second_metric or c.metric), SCALE,
                                    family, inst, src))
        if P_FROM in variants and P_TO in variants:
            recs.append(_p_record(criterion, d, sel, family))
    recs = [r for r in recs if r is not None]
    if not recs:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    frame = pd.DataFrame(recs, columns=[c for c in CLAIM_COLUMNS if c not in ("p_holm", "verdict")])
    return with_verdicts(frame, family)[CLAIM_COLUMNS]
