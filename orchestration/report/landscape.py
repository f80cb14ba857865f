"""The logging-quality landscape: where learning from the bandit feedback beats the logging model's own ranking.

A run whose β = 0 variants span several α (how much of the training set the logging model saw, i.e.
how good its ranking is) or several T (how random ρ is around that ranking, a matched variant's T
solved at prepare time) separates the two. Per (dataset, variant, method) at the heads the criterion
selected, per seed s:

  greedy      d_s = P@5 of the method's greedy ranking − the logging model's greedy P@5
  stochastic  d_s = R@5 of the method's test-time policy − the logging model's greedy P@5

(×100). The bar, the logging model's greedy P@5, is the logging trial's greedy P@5 of the same
variant and seed (at β = 0 the top-5 of ρ is the logging model's ranking: T does not reorder), else
prepare.csv's logging_model/P@5. The mean over seeds, a 95 % interval (``inference.paired_inference``:
the seed term, plus the test-set term where the run kept per-instance values; none below MIN_SEEDS
seeds) and the sign count. A deterministic method (every seed's R@5 equal to its P@5) has no
stochastic row; the logging policy has no greedy one (its greedy ranking is the bar).

α, β and T come from the variants of config.yaml, a matched variant's T from prepare.csv's variant/T
(mean over seeds), never from variant names. Shown only for datasets with at least two distinct α or
two distinct T at β = 0 (a matched T counts as a value of its own). The intervals are per cell, not
corrected for multiplicity: an exploratory map, not a verdict.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestration.report.claims import instance_key
from orchestration.report.inference import MIN_SEEDS, paired_inference
from orchestration.report.instance_moments import moment_source, pair_moments
from orchestration.report.method_names import method_list, method_name
from orchestration.report.table_format import Table
from orchestration.selection import selected_rows, selection_label

SCALE = 100.0
BAR_METRIC = "P@5"
POLICIES = {"greedy": "P@5", "stochastic": "R@5"}
# what trains on full labels or nothing: shown for reference, never "learning from the feedback"
NOT_LEARNED = ("logging", "skyline", "skyline_e2e")
VARIANT_COLUMNS = ["variant", "alpha", "T", "matched"]
LANDSCAPE_COLUMNS = ["criterion", "dataset", "variant", "alpha", "T", "matched", "method", "policy", "metric", "bar",
                     "value", "diff", "ci_lo", "ci_hi", "n", "positive", "interval"]


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def landscape_variants(config: dict, prepare: pd.DataFrame | None, dataset: str) -> pd.DataFrame:
    """The β = 0 variants of `dataset` with their α and T (a matched variant's T: prepare.csv's
    variant/T, mean over seeds; nan when prepare has none). Columns VARIANT_COLUMNS, sorted by α, then
    the declared T values, then the matched variant."""
    recs = []
    for d in (config or {}).get("datasets", []) or []:
        if not isinstance(d, dict) or str(d.get("name")) != dataset:
            continue
        for v in d.get("variants", []) or []:
            if not isinstance(v, dict) or "name" not in v:
                continue
            alpha, beta = _float(v.get("alpha")), _float(v.get("beta", 0.0))
            if not math.isfinite(alpha) or beta != 0.0:
                continue
            matched = bool(v.get("match")) and v.get("T") is None
            T = _solved_T(prepare, dataset, str(v["name"])) if matched else _float(1.0 if v.get("T") is None else v["T"])
            recs.append({"variant": str(v["name"]), "alpha": alpha, "T": T, "matched": matched})
    out = pd.DataFrame(recs, columns=VARIANT_COLUMNS)
    return out.sort_values(["alpha", "matched", "T"], kind="stable").reset_index(drop=True)


def _solved_T(prepare: pd.DataFrame | None, dataset: str, variant: str) -> float:
    if prepare is None or prepare.empty:
        return math.nan
    here = prepare[(prepare["dataset"].astype(str) == dataset) & (prepare["variant"].astype(str) == variant)
                   & (prepare["metric"] == "variant/T")]["value"].astype(float)
    here = here[np.isfinite(here)]
    return float(here.mean()) if len(here) else math.nan


def spans_landscape(variants: pd.DataFrame) -> bool:
    """At least two distinct α, or two distinct T (a matched T one value of its own), among the β = 0 variants."""
    ts = {"matched" if m else t for t, m in zip(variants["T"], variants["matched"])}
    return len(variants) >= 2 and (variants["alpha"].nunique() >= 2 or len(ts) >= 2)


def _last_values(test: pd.DataFrame) -> dict:
    """(variant, method, metric) -> Series seed -> value of the last epoch's finite row."""
    last = test.sort_values("epoch", kind="stable").drop_duplicates(["variant", "method", "metric", "seed"], keep="last")
    last = last[np.isfinite(last["value"].to_numpy(dtype=float))]
    return {k: pd.Series(g["value"].to_numpy(dtype=float), index=g["seed"].astype(int).to_numpy())
            for k, g in last.groupby(["variant", "method", "metric"], sort=False)}


def _bar(values: dict, prepare: pd.DataFrame | None, dataset: str, variant: str) -> tuple[pd.Series, bool]:
    """(seed -> the logging model's greedy P@5, whether it is the logging trial's: per-instance values exist)."""
    s = values.get((variant, "logging", BAR_METRIC))
    if s is not None and len(s):
        return s, True
    if prepare is None or prepare.empty:
        return pd.Series(dtype=float), False
    here = prepare[(prepare["dataset"].astype(str) == dataset) & (prepare["variant"].astype(str) == variant)
                   & (prepare["metric"] == f"logging_model/{BAR_METRIC}")]
    here = here[np.isfinite(here["value"].to_numpy(dtype=float))].drop_duplicates("seed", keep="last")
    return pd.Series(here["value"].to_numpy(dtype=float), index=here["seed"].astype(int).to_numpy()), False


def _instances(src, heads: dict, dataset: str, variant: str, seeds, method: str, metric: str):
    """The keys of `method`'s selected heads' per-instance values over `seeds` (instance_moments), or None
    where any is missing."""
    if src is None:
        return None
    out = []
    for s in seeds:
        pl = heads.get((variant, method, int(s)))
        k = None if pl is None else instance_key(dataset, variant, s, method, pl[0], pl[1], metric)
        if k is None or not src.has(k):
            return None
        out.append(k)
    return out


def _cell(a: pd.Series, bar: pd.Series, inst_a, inst_bar, src=None) -> dict | None:
    seeds = sorted(set(a.index) & set(bar.index))
    if not seeds:
        return None
    d = SCALE * (a.loc[seeds].to_numpy(dtype=float) - bar.loc[seeds].to_numpy(dtype=float))
    per = None
    if inst_a is not None and inst_bar is not None and len(inst_a) == len(inst_bar):
        per = pair_moments(src, inst_a, inst_bar, SCALE)
    r = paired_inference(d, per)
    lo, hi = (r["ci_lo"], r["ci_hi"]) if r["n"] >= MIN_SEEDS else (math.nan, math.nan)
    return {"bar": SCALE * float(bar.loc[seeds].mean()), "value": SCALE * float(a.loc[seeds].mean()), "diff": r["diff"],
            "ci_lo": lo, "ci_hi": hi, "n": r["n"], "positive": r["positive"], "interval": r["interval"]}


def _policies(values: dict, variant: str, method: str) -> list[str]:
    """The policies a method is shown by: the logging policy stochastic only (its greedy ranking is the
    bar); a deterministic method (R@5 = P@5 on every seed) greedy only."""
    if method == "logging":
        return ["stochastic"]
    g, s = values.get((variant, method, "P@5")), values.get((variant, method, "R@5"))
    if g is not None and s is not None and set(g.index) == set(s.index) and np.array_equal(g.sort_index(), s.sort_index()):
        return ["greedy"]
    return [p for p in POLICIES if values.get((variant, method, POLICIES[p])) is not None]


def landscape_data(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str, config: dict,
                   prepare: pd.DataFrame | None = None, instances=None) -> pd.DataFrame:
    """Every landscape cell of every dataset that spans one (module docstring). Columns LANDSCAPE_COLUMNS
    (bar, value, diff, ci_lo, ci_hi ×100); empty when no dataset spans a landscape."""
    label = selection_label(criterion)
    sel = selection[selection["selection"] == label]
    instances = moment_source(instances)
    recs = []
    for dataset in sorted(sel["dataset"].astype(str).unique()):
        variants = landscape_variants(config, prepare, dataset)
        variants = variants[variants["variant"].isin(set(sel.loc[sel["dataset"] == dataset, "variant"].astype(str)))]
        if not spans_landscape(variants):
            continue
        here = sel[(sel["dataset"] == dataset) & sel["variant"].isin(list(variants["variant"]))]
        values = _last_values(selected_rows(rows, here, label, split="test"))
        heads = {(str(r.variant), str(r.method), int(r.seed)): (r.p, r.lam) for r in here.itertuples(index=False)}
        for v in variants.itertuples(index=False):
            recs += _variant_cells(values, heads, prepare, instances, dataset, v, here, criterion)
    return pd.DataFrame(recs, columns=LANDSCAPE_COLUMNS)


def _variant_cells(values, heads, prepare, instances, dataset, v, sel, criterion) -> list[dict]:
    bar, from_trial = _bar(values, prepare, dataset, v.variant)
    if bar.empty:
        return []
    bar_inst = (_instances(instances, heads, dataset, v.variant, sorted(bar.index), "logging", BAR_METRIC)
                if from_trial else None)
    out = []
    for m in method_list(list(sel.loc[sel["variant"] == v.variant, "method"].astype(str).unique())):
        for policy in _policies(values, v.variant, m):
            a = values.get((v.variant, m, POLICIES[policy]))
            seeds = sorted(set(a.index) & set(bar.index))
            inst = _instances(instances, heads, dataset, v.variant, seeds, m, POLICIES[policy])
            ib = None if bar_inst is None or seeds != sorted(bar.index) else bar_inst
            c = _cell(a, bar, inst, ib, instances)
            if c is not None:
                out.append({"criterion": criterion, "dataset": dataset, "variant": v.variant, "alpha": v.alpha,
                            "T": v.T, "matched": v.matched, "method": m, "policy": policy,
                            "metric": POLICIES[policy], **c})
    return out


def variant_label(alpha: float, T: float, matched: bool) -> str:
    """'α 0.05, T 2' or 'α 0.2, matched T 1.37' (a matched variant whose prepare recorded no T: 'matched T ?')."""
    t = f"{T:.3g}" if math.isfinite(T) else "?"
    return f"α {alpha:g}, " + (f"matched T {t}" if matched else f"T {t}")


def _num(x: float) -> str:
    return f"{x:+.2f}"


def cell_text(r) -> str:
    """'+1.23 [+0.45, +2.01]' (difference ×100 [95 % interval]); the difference alone below MIN_SEEDS seeds."""
    s = _num(r["diff"])
    if math.isfinite(r["ci_lo"]) and math.isfinite(r["ci_hi"]):
        s += f" [{_num(r['ci_lo'])}, {_num(r['ci_hi'])}]"
    return s


def landscape_table(frame: pd.DataFrame, dataset: str) -> Table:
    """One dataset's landscape: a row per (method, policy), a column per variant (α, then T); the first
    row the bar itself. Bold: the interval lies above 0 (beats the logging model's ranking)."""
    f = frame[frame["dataset"] == dataset]
    vs = f.drop_duplicates("variant").sort_values(["alpha", "matched", "T"], kind="stable")
    order = list(vs["variant"])
    columns = ["Method", "Policy (metric)"] + [variant_label(r.alpha, r.T, r.matched) for r in vs.itertuples()]
    bars = f.groupby("variant")["bar"].first()
    rows = [["Logging model (the bar)", "greedy (P@5), ×100"] + [f"{bars[v]:.2f}" for v in order]]
    bold = set()
    for m in method_list(list(f["method"].unique())):
        for policy in POLICIES:
            here = f[(f["method"] == m) & (f["policy"] == policy)].set_index("variant")
            if here.empty:
                continue
            row = [method_name(m), f"{policy} ({POLICIES[policy]} − bar)"]
            for v in order:
                row.append(cell_text(here.loc[v]) if v in here.index else "—")
                if v in here.index and here.loc[v, "ci_lo"] > 0:
                    bold.add((len(rows), len(row) - 1))
            rows.append(row)
    n = sorted(set(f["n"].astype(int)))
    notes = [f"Each method's test metric at its {f['criterion'].iloc[0]}-selected heads minus the logging model's greedy "
             "P@5 (the top-5 of the model ρ is built on, trained with full labels on a fraction α of the training "
             "rows), paired by seed, ×100: mean [95 % interval: seeds, plus the test set where the run kept "
             "per-instance values; unadjusted, an exploratory map]. greedy: the method's top-5 ranking (P@5); "
             "stochastic: its test-time policy (R@5). Bold: the interval lies above 0. Variants at β = 0; α and T "
             "from config.yaml, a matched variant's T solved at prepare time (mean over seeds). "
             f"Seeds per cell: {n[0] if len(n) == 1 else f'{n[0]}–{n[-1]}'}."]
    return Table(name=f"landscape_{dataset}", title=f"Logging-quality landscape — {dataset}: test metric minus the "
                 "logging model's greedy P@5", columns=columns, rows=rows, bold=bold, notes=notes,
                 frame=f.reset_index(drop=True))


def _where(r) -> str:
    return f"{r['dataset']} at {variant_label(r['alpha'], r['T'], r['matched'])}"


def _by_method(cells: pd.DataFrame, what: str) -> str:
    """'POXM in 3 cells (most: d at α 0.05, T 2, +1.23 [+0.45, +2.01]), DM in 1 cell (...)' by `what`."""
    parts = []
    for m in method_list(list(cells["method"].unique())):
        c = cells[cells["method"] == m]
        top = c.loc[c["diff"].idxmax()]
        parts.append(f"{method_name(m)} in {len(c)} cell{'s' if len(c) > 1 else ''} "
                     f"(most: {_where(top)}, {cell_text(top)})")
    return f"{what}: " + "; ".join(parts)


def landscape_sentence(frame: pd.DataFrame) -> str:
    """Where any method learned from the feedback beats the logging model's greedy P@5 (its interval above
    0), and by how much; or that none does, with the closest cell. Below MIN_SEEDS seeds: the cells whose
    mean is above the bar, said to carry no interval."""
    learned = frame[~frame["method"].isin(NOT_LEARNED)]
    if learned.empty:
        return "No method that learns from the feedback ran in this landscape."
    cells = learned.drop_duplicates(["dataset", "variant"]).shape[0]
    if not (learned["n"] >= MIN_SEEDS).any():
        above = learned[learned["diff"] > 0]
        head = (f"With {int(learned['n'].max())} seeds no cell has an interval (at least {MIN_SEEDS} are needed); "
                f"over {cells} (dataset, α, T) cells, ")
        if above.empty:
            return head + "no method's mean is above the logging model's greedy P@5."
        return head + "the mean is above the logging model's greedy P@5 for " + "; ".join(
            _by_method(above[above["policy"] == p], f"{p} ({POLICIES[p]})") for p in POLICIES
            if (above["policy"] == p).any()) + "."
    beats = learned[learned["ci_lo"] > 0]
    if beats.empty:
        g = learned[learned["policy"] == "greedy"]
        best = (g if len(g) else learned).loc[(g if len(g) else learned)["diff"].idxmax()]
        return (f"Nowhere in this landscape does learning from the feedback beat the logging model's own ranking: "
                f"in none of {cells} (dataset, α, T) cells does any method's 95 % interval, greedy or stochastic, lie "
                f"above the logging model's greedy P@5. Closest: {method_name(best['method'])}'s "
                f"{'greedy ranking' if best['policy'] == 'greedy' else 'stochastic policy'} on {_where(best)}, {cell_text(best)} points.")
    n_beat = beats.drop_duplicates(["dataset", "variant"]).shape[0]
    out = [f"Learning from the feedback beats the logging model's own ranking (its greedy P@5; a 95 % interval "
           f"above 0, unadjusted) in {n_beat} of {cells} (dataset, α, T) cells; differences ×100 [95 % interval]."]
    out += [_by_method(beats[beats["policy"] == p], f"By the {p} {'ranking' if p == 'greedy' else 'policy'} "
                       f"({POLICIES[p]})") + "." for p in POLICIES if (beats["policy"] == p).any()]
    return " ".join(out + ["Elsewhere no interval lies above the bar."])


def landscape_blocks(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str, config: dict,
                     prepare: pd.DataFrame | None, instances, protocol: str | None, tdir, fdir, out) -> list[tuple]:
    """The report's landscape section (heading, the sentence, the figure, a table per dataset); [] when no
    dataset spans a landscape. `instances`: the per-instance values' source (instance_moments) or None."""
    from pathlib import Path

    from orchestration.report.blocks import figure_blocks, table_blocks
    from orchestration.report.landscape_figure import landscape_figure
    frame = landscape_data(rows, selection, criterion, config, prepare, instances)
    if frame.empty:
        return []
    blocks: list[tuple] = [("h2", "Logging-quality landscape"), ("p", landscape_sentence(frame))]
    blocks += figure_blocks(landscape_figure(frame, Path(fdir), criterion), protocol, Path(out))
    for d in sorted(frame["dataset"].unique()):
        blocks += table_blocks(landscape_table(frame, d), protocol, Path(tdir), Path(out))
    return blocks
