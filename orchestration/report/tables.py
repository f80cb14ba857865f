"""Report tables per (dataset, variant): CSV, Markdown and LaTeX (booktabs).

  headline_<d>       test R@5 per method x variant under the run's criterion (the report's first table
                     after the claims)
  results_<d>_<v>    stochastic metrics R@k, nDCR@k, PSR@k (k = 3, 5) like the paper's Table 2,
                     with the paper's numbers as a second block where the logging policy matches
  greedy_<d>_<v>     greedy top-k metrics P@k, nDCG@k, PSP@k (k = 1, 3, 5)
  selection_<d>_<v>  criterion-selected (IS by default) vs oracle (p, lambda) and the test R@5 each gives
  *_snis_<d>_<v>     the same three under SNIS, the paper's criterion, when the run's criterion is another
  spearman_<d>       per variant and seed, Spearman rank correlation of every validation criterion
                     with test R@5 across the (p, lambda) grid points (spearman.py)
  logging_<d>        logging-policy statistics of prepare.csv per variant (logging_table.py)

Values are x100, mean ± sample std [bootstrap 95 % interval] over seeds at the criterion-selected
points (the interval from 3 seeds on, the std from 2; one seed: the value, and captions say so). Only
the methods the sweep ran (or expects) are rows. Bold: best mean per column among the *trained* bandit-feedback methods only; every such
method tied at the displayed precision is bold (ties: all). The logging policy (a reference, not a
learner) and the supervised skyline (full labels; italic, as in the paper) are never bold, so a
logging policy level with a trained method does not make or break a bold.
Pure functions of result rows; rendering and file writing: table_format.py.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestration.report import paper
from orchestration.report.aggregate import MISSING, Cell, best_cells, cell_grid, lam_set, p_set
from orchestration.report.inference import MIN_SEEDS
from orchestration.report.method_names import (METHOD_NAMES, METHOD_ORDER, criterion_title, method_list,  # noqa: F401
                                               method_name)
from orchestration.report.table_format import (DAGGER, Table, tex_escape, to_latex,  # noqa: F401
                                               to_markdown, write_table)
from orchestration.selection import DEFAULT_CRITERION, selection_label

FULL_INFORMATION = ("skyline", "skyline_e2e")
STOCHASTIC = ["R@3", "R@5", "nDCR@3", "nDCR@5", "PSR@3", "PSR@5"]
GREEDY = ["P@1", "P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5", "PSP@1", "PSP@3", "PSP@5"]
# A deterministic top-k slate has R@k = P@k, nDCR@k = nDCG@k, PSR@k = PSP@k.
GREEDY_TWIN = {"R@": "P@", "nDCR@": "nDCG@", "PSR@": "PSP@"}
NOT_TRAINED = ("logging",)   # the policy that produced the log: a reference row, never bold


def seeds_wording(n_seeds: int, intervals: bool = True) -> str:
    """How a caption names the spread of its cells, true at the number of seeds they hold (the most
    seeds of any cell): 'at one seed (the value itself: no std, no interval)', 'mean ± std over 2 seeds
    (no interval below 3 seeds)', or 'mean ± std [bootstrap 95 % interval of the mean] over 5 seeds'
    (without the interval when the table shows none: `intervals` False)."""
    if n_seeds <= 1:
        return "at one seed (the value itself: no std, no interval)"
    if not intervals:
        return f"mean ± std over {n_seeds} seeds"
    if n_seeds < MIN_SEEDS:
        return f"mean ± std over {n_seeds} seeds (no interval below {MIN_SEEDS} seeds)"
    return f"mean ± std [bootstrap 95 % interval of the mean] over {n_seeds} seeds"


def _twin(metric: str) -> str:
    for a, b in GREEDY_TWIN.items():
        if metric.startswith(a):
            return b + metric[len(a):]
    return metric


def _selected_pls(selection: pd.DataFrame, dataset: str, variant: str, which: str) -> dict[str, tuple[str, str]]:
    """method -> (p, λ) texts of the `which` selection's choices in (dataset, variant); a method without
    any is absent (its texts are '—', '—'). One pass over the selection for all of a table's methods."""
    s = selection[(selection["dataset"] == dataset) & (selection["variant"] == variant)
                  & (selection["selection"] == which)]
    return {m: (p_set(g["p"]), lam_set(g["lam"])) for m, g in s.groupby("method", sort=False)}


def greedy_logging_name(params: dict | None) -> str:
    """What the greedy table's logging row is: the top-k of rho. With beta = 0 rho keeps the logging
    model's order (only T changes, and T does not reorder), so the row is the logging model's ranking;
    with beta > 0 the frozen Gumbel noise reorders it, so the row is the policy's own ranking."""
    beta = math.nan
    if isinstance(params, dict):
        try:
            beta = float(params.get("beta"))
        except (TypeError, ValueError):
            pass
    if beta == 0.0:
        return "Logging model (ρ's top-k = the model's ranking, β = 0)"
    if math.isfinite(beta):
        return f"Logging policy ρ (its top-k, reordered by noise, β = {beta:g})"
    return "Logging policy ρ (its top-k)"


def _metric_cells(kind: str, here: pd.DataFrame, exp_here: pd.DataFrame, dataset: str, variant: str,
                  methods: list[str], metrics: list[str]) -> tuple[dict, set[str]]:
    """The cells of (dataset, variant), and the methods shown by their greedy twins: in the results
    table, a greedy policy without stochastic rows shows P@k, nDCG@k, PSP@k (= R@k, nDCR@k, PSR@k for
    a deterministic slate)."""
    # cell_grid reads only (dataset, variant)'s rows: hand it those, not the whole run's
    cells = cell_grid(here, exp_here, dataset, variant, methods, metrics)
    twinned: set[str] = set()
    if kind == "results":
        twins = cell_grid(here, exp_here, dataset, variant, methods, [_twin(k) for k in metrics])
        for m in methods:
            if all(cells[(m, k)].n == 0 for k in metrics) and any(twins[(m, _twin(k))].n > 0 for k in metrics):
                twinned.add(m)
                for k in metrics:
                    cells[(m, k)] = twins[(m, _twin(k))]
    return cells, twinned


def _cell_record(k: str, c: Cell, best: bool) -> dict:
    """A cell's CSV columns (×100): mean, std, the interval where the table shows it (MIN_SEEDS seeds
    on, nowhere else), seeds present and expected, status, whether it is bold."""
    lo, hi = (c.ci_lo, c.ci_hi) if c.has_interval else (math.nan, math.nan)
    return {f"{k}_mean": 100 * c.mean, f"{k}_std": 100 * c.std, f"{k}_ci_lo": 100 * lo,
            f"{k}_ci_hi": 100 * hi, f"{k}_n": c.n, f"{k}_n_expected": c.n_expected, f"{k}_status": c.status,
            f"{k}_best": best}


def _paper_block(dataset: str, variant: str, metrics: list[str], rows: list, italic: set, recs: list) -> None:
    """The paper's Table 2 whole, appended after this run's rows (its numbers, never rows of "—")."""
    for m in METHOD_ORDER:
        vals = paper.paper_row(dataset, m)
        if vals is None:
            continue
        label = ("AttentionXML (skyline)" if m == "skyline_e2e" else method_name(m))
        if m in FULL_INFORMATION:
            italic.add(len(rows))
        rows.append([label] + [f"{vals[k]:.2f}" for k in metrics] + ["", ""])
        rec = {"dataset": dataset, "variant": variant, "source": "paper", "method": m,
               "method_name": label, "greedy_twin": False, "p": "", "lam": ""}
        rec.update({f"{k}_mean": vals[k] for k in metrics})
        recs.append(rec)


def _metric_notes(criterion: str, n_seeds: int, twinned: set[str]) -> list[str]:
    notes = [f"Values ×100, {seeds_wording(n_seeds)}, at the (p, λ) "
             f"selected by the validation-log {criterion} estimate. p and λ: "
             f"the value{'s' if n_seeds > 1 else ''} selected{' over seeds' if n_seeds > 1 else ''}. Bold: best mean among the trained bandit-feedback methods "
             "(all of them when tied at this precision); the logging policy is never bold, the "
             "supervised skyline (full labels) is italic. “—”: no result, or p/λ not used by the "
             "method; (n=a/b): a of b expected seeds."]
    if twinned:
        notes.append(f"{DAGGER} greedy policy without stochastic rows: its P@k, nDCG@k, PSP@k are shown, which "
                     "equal R@k, nDCR@k, PSR@k for a deterministic slate.")
    return notes


def metric_table(kind: str, dataset: str, variant: str, stats: pd.DataFrame, expected: pd.DataFrame,
                 selection: pd.DataFrame, show_paper: bool = False, criterion: str = DEFAULT_CRITERION,
                 params: dict | None = None) -> Table:
    """Table (a) kind='results' (stochastic metrics) or (b) kind='greedy' for one (dataset, variant).

    `stats` from ``aggregate.seed_stats`` of the criterion-selected test rows; `expected` the expected
    (dataset, variant, method, seed); `selection` from ``selection.select(rows, criterion)``.
    """
    if kind not in ("results", "greedy"):
        raise ValueError(f"kind must be 'results' or 'greedy', got {kind!r}")
    metrics = STOCHASTIC if kind == "results" else GREEDY
    here = stats[(stats["dataset"] == dataset) & (stats["variant"] == variant)]
    exp_here = expected[(expected["dataset"] == dataset) & (expected["variant"] == variant)]
    methods = method_list(list(here["method"].unique()) + list(exp_here["method"].unique()))
    cells, twinned = _metric_cells(kind, here, exp_here, dataset, variant, methods, metrics)
    best = best_cells(cells, metrics, [m for m in methods if m not in FULL_INFORMATION and m not in NOT_TRAINED])

    rows, bold, italic, recs = [], set(), set(), []
    chosen = _selected_pls(selection, dataset, variant, selection_label(criterion))
    for i, m in enumerate(methods):
        p_txt, lam_txt = chosen.get(m, (MISSING, MISSING))
        name = method_name(m) + (DAGGER if m in twinned else "")
        if kind == "greedy" and m == "logging":
            name = greedy_logging_name(params)
        rows.append([name] + [cells[(m, k)].text() for k in metrics] + [p_txt, lam_txt])
        bold |= {(i, 1 + j) for j, k in enumerate(metrics) if (m, k) in best}
        if m in FULL_INFORMATION:
            italic.add(i)
        rec = {"dataset": dataset, "variant": variant, "source": "ours", "method": m,
               "method_name": name.rstrip(DAGGER), "greedy_twin": m in twinned}
        for k in metrics:
            rec.update(_cell_record(k, cells[(m, k)], (m, k) in best))
        recs.append({**rec, "p": p_txt, "lam": lam_txt})

    sections: dict[int, str] = {}
    n_seeds = max((cells[(m, k)].n for m in methods for k in metrics), default=0)
    notes = _metric_notes(criterion, n_seeds, twinned)
    if show_paper and kind == "results":
        sections[0] = f"This run ({criterion}-selected p, λ)"
        sections[len(rows)] = "Paper, Table 2 (Lopez et al., AAAI 2021)"
        _paper_block(dataset, variant, metrics, rows, italic, recs)
        notes.insert(1, f"Paper block: {paper.SOURCE}; AttentionXML is the paper's supervised skyline.")
    title_kind = "Stochastic policies: expected reward metrics" if kind == "results" else "Greedy top-k metrics"
    return Table(name=f"{kind}_{dataset}_{variant}",
                 title=f"{title_kind} — {dataset}, variant {variant}; (p, λ) by {criterion_title(criterion)}",
                 columns=["Method"] + metrics + ["p", "λ"], rows=rows, bold=bold, italic_rows=italic,
                 sections=sections, notes=notes, frame=pd.DataFrame(recs))


HEADLINE_METRIC = "R@5"


def headline_table(dataset: str, variants: list[str], stats: pd.DataFrame, expected: pd.DataFrame,
                   criterion: str = DEFAULT_CRITERION, params: dict | None = None) -> Table:
    """The report's headline: test R@5 (x100, mean ± std over seeds; one seed: the value) per method (rows) and variant
    (columns) at the (p, λ) the run's criterion selected, the same cells as the results tables.
    A greedy method without stochastic rows shows P@5 (= R@5 for a deterministic slate), marked †.
    Bold: best trained bandit-feedback method per variant (as in the results tables)."""
    k, twin = HEADLINE_METRIC, _twin(HEADLINE_METRIC)
    here = stats[stats["dataset"] == dataset]
    exp_here = expected[expected["dataset"] == dataset]
    methods = method_list(list(here["method"].unique()) + list(exp_here["method"].unique()))
    cells: dict[tuple[str, str], Cell] = {}
    twinned: set[str] = set()
    for v in variants:
        g = cell_grid(here, exp_here, dataset, v, methods, [k, twin])   # the dataset's rows suffice
        for m in methods:
            c = g[(m, k)]
            if c.n == 0 and g[(m, twin)].n > 0:
                c = g[(m, twin)]
                twinned.add(m)
            # the headline shows mean ± std only (the results tables carry the intervals)
            cells[(m, v)] = Cell(c.mean, c.std, c.n, c.n_expected)
    eligible = [m for m in methods if m not in FULL_INFORMATION and m not in NOT_TRAINED]
    best = best_cells(cells, variants, eligible)
    rows, bold, italic, recs = [], set(), set(), []
    for i, m in enumerate(methods):
        rows.append([method_name(m) + (DAGGER if m in twinned else "")] + [cells[(m, v)].text() for v in variants])
        bold |= {(i, 1 + j) for j, v in enumerate(variants) if (m, v) in best}
        if m in FULL_INFORMATION:
            italic.add(i)
        for v in variants:
            c = cells[(m, v)]
            recs.append({"dataset": dataset, "variant": v, "method": m, "metric": twin if m in twinned else k,
                         "mean": 100 * c.mean, "std": 100 * c.std, "n": c.n, "n_expected": c.n_expected,
                         "best": (m, v) in best})
    prm = params or {}
    described = [f"{v} (α {prm[(dataset, v)].get('alpha')}, β {prm[(dataset, v)].get('beta')}, "
                 f"T {prm[(dataset, v)].get('T')})" for v in variants if isinstance(prm.get((dataset, v)), dict)]
    n_seeds = max((c.n for c in cells.values()), default=0)
    where = (" (intervals: the results tables below)" if n_seeds >= MIN_SEEDS
             else f" (no interval below {MIN_SEEDS} seeds)" if n_seeds > 1 else "")
    notes = [f"Test R@5 ×100, {seeds_wording(n_seeds, intervals=False)}, at the (p, λ) selected by the "
             f"validation-log {criterion} estimate{where}. Bold: best trained bandit-feedback method per "
             "variant; the supervised skylines (full labels) are italic. “—”: no result."]
    if twinned:
        notes.append(f"{DAGGER} greedy policy: P@5, equal to R@5 for a deterministic slate.")
    if described:
        notes.append("Logging policy of each variant: " + ", ".join(described) + ".")
    return Table(name=f"headline_{dataset}",
                 title=f"Test R@5 per method and variant — {dataset}; (p, λ) by {criterion_title(criterion)}",
                 columns=["Method"] + [f"variant {v}" for v in variants], rows=rows, bold=bold,
                 italic_rows=italic, notes=notes, frame=pd.DataFrame(recs))


def _mean_std_text(vals: np.ndarray, n_expected: int) -> str:
    vals = vals[np.isfinite(vals)]
    return Cell(float(vals.mean()) if len(vals) else math.nan,
                float(vals.std(ddof=1)) if len(vals) > 1 else math.nan,
                len(vals), max(n_expected, len(vals))).text()


def selection_table(dataset: str, variant: str, selection: pd.DataFrame,
                    expected: pd.DataFrame | None = None, criterion: str = DEFAULT_CRITERION) -> Table:
    """Table (c): for methods with a (p, lambda) grid, criterion-selected vs oracle points and test R@5."""
    label = selection_label(criterion)
    c = criterion
    sel = selection[(selection["dataset"] == dataset) & (selection["variant"] == variant)]
    multi = sel[sel["n_points"] > 1]
    methods = [m for m in method_list(list(multi["method"].unique())) if m in set(multi["method"])]
    columns = ["Method", "seeds", f"{c} p", f"{c} λ", f"{c}: test R@5", "oracle p", "oracle λ",
               "oracle: test R@5", f"oracle − {c}"]
    rows, recs = [], []
    # the frames split once per table, not filtered again per method
    parts = dict(iter(multi.groupby(["method", "selection"], sort=False)))
    if expected is not None:
        e = expected[(expected["dataset"] == dataset) & (expected["variant"] == variant)]
        n_expected = e.groupby("method")["seed"].nunique().to_dict()
    n_seeds = 0
    for m in methods:
        s = parts.get((m, label), multi.iloc[:0]).set_index("seed")
        o = parts.get((m, "oracle"), multi.iloc[:0]).set_index("seed")
        seeds = sorted(set(s.index) | set(o.index))
        n = len(seeds)
        n_seeds = max(n_seeds, n)
        if expected is not None:
            n = max(n, int(n_expected.get(m, 0)))
        common = sorted(set(s.index) & set(o.index))
        gap = (o.loc[common, "test_R@5"] - s.loc[common, "test_R@5"]).to_numpy(dtype=float)
        row = [method_name(m), f"{len(seeds)}/{n}" if len(seeds) < n else str(n), p_set(s["p"]), lam_set(s["lam"]),
               _mean_std_text(s["test_R@5"].to_numpy(dtype=float), n), p_set(o["p"]), lam_set(o["lam"]),
               _mean_std_text(o["test_R@5"].to_numpy(dtype=float), n), _mean_std_text(gap, n)]
        rows.append(row)
        recs.append(dict(zip(["dataset", "variant", "method"] + columns[1:], [dataset, variant, m] + row[1:])))
    notes = [f"Test R@5 ×100, {seeds_wording(n_seeds, intervals=False)}. {c}: (p, λ) chosen by the validation-log {c} "
             "estimate (what the results tables use). Oracle: chosen by test R@5 — uses test labels, "
             "shown only to measure the cost of honest selection. Per-seed choices: selection.csv."]
    if not rows:
        notes.append("No method with more than one finished grid point here.")
    return Table(name=f"selection_{dataset}_{variant}",
                 title=f"Selection of (p, λ): {criterion_title(c)} vs oracle — {dataset}, variant {variant}",
                 columns=columns, rows=rows, notes=notes, frame=pd.DataFrame(recs))
