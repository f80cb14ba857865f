"""Report tables per (dataset, variant): CSV, Markdown and LaTeX (booktabs).

  headline_<d>       test R@5 per method x variant under the run's criterion (the report's first table
                     after the claims)
  results_<d>_<v>    stochastic metrics R@k, nDCR@k, PSR@k (k = 3, 5) like the paper's Table 2,
                     with the paper's numbers as a second block where the logging policy matches
  greedy_<d>_<v>     greedy top-k metrics P@k, nDCG@k, PSP@k (k = 1, 3, 5)
  selection_<d>_<v>  criterion-selected (IS by default) vs oracle (p, lambda) and the test R@5 each gives
  *_snis_<d>_<v>     the same three under SNIS, the paper's criterion, when the run's criterion is another
  spearman_<d>       per variant and seed, Spearman rank correlation of every validation criterion
                     with test R@5 across the (p, lambda) grid points (pooled over grid methods, and
                     per method)
  logging_<d>        logging-policy statistics of prepare.csv per variant

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
from orchestration.report.table_format import (DAGGER, Table, tex_escape, to_latex,  # noqa: F401
                                               to_markdown, write_table)
from orchestration.selection import (DEFAULT_CRITERION, ORACLE_METRIC, PAPER_CRITERION, POINT, SELECT_SPLIT,
                              is_criterion, order_criteria, selection_label)

METHOD_ORDER = ["logging", "dm", "banditnet", "pm_banditnet", "poxm", "wpoxm", "dr_poxm", "skyline", "skyline_e2e"]
METHOD_NAMES = {"logging": "Logging policy", "dm": "Direct Method", "banditnet": "BanditNet",
                "pm_banditnet": "PM-BanditNet", "poxm": "POXM", "wpoxm": "wPOXM",
                "skyline": "Supervised skyline (frozen inputs)", "dr_poxm": "DR-POXM",
                "skyline_e2e": "Supervised skyline (end to end, the paper's)"}
FULL_INFORMATION = ("skyline", "skyline_e2e")
STOCHASTIC = ["R@3", "R@5", "nDCR@3", "nDCR@5", "PSR@3", "PSR@5"]
GREEDY = ["P@1", "P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5", "PSP@1", "PSP@3", "PSP@5"]
# A deterministic top-k slate has R@k = P@k, nDCR@k = nDCG@k, PSR@k = PSP@k.
GREEDY_TWIN = {"R@": "P@", "nDCR@": "nDCG@", "PSR@": "PSP@"}
NOT_TRAINED = ("logging",)   # the policy that produced the log: a reference row, never bold


def criterion_title(criterion: str) -> str:
    """'IS', or 'SNIS (the paper's criterion)': how tables name the criterion that chose (p, λ)."""
    return f"{criterion} (the paper's criterion)" if criterion == PAPER_CRITERION else criterion


def method_list(present: list[str]) -> list[str]:
    """The methods in `present` (those the sweep ran or expects), in the paper's order, then any other
    registered method, sorted. A method of the paper that the sweep never ran is not listed: a table or
    figure shows only the methods of its run."""
    have = set(present)
    return [m for m in METHOD_ORDER if m in have] + sorted(have - set(METHOD_ORDER))


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


def method_name(m: str) -> str:
    return METHOD_NAMES.get(m, m)


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


def metric_table(kind: str, dataset: str, variant: str, stats: pd.DataFrame, expected: pd.DataFrame,
                 selection: pd.DataFrame, show_paper: bool = False, criterion: str = DEFAULT_CRITERION,
                 params: dict | None = None) -> Table:
    """Table (a) kind='results' (stochastic metrics) or (b) kind='greedy' for one (dataset, variant).

    `stats` from ``aggregate.seed_stats`` of the criterion-selected test rows; `expected` the expected
    (dataset, variant, method, seed); `selection` from ``selection.select(rows, criterion)``.
    """
    label = selection_label(criterion)
    if kind not in ("results", "greedy"):
        raise ValueError(f"kind must be 'results' or 'greedy', got {kind!r}")
    metrics = STOCHASTIC if kind == "results" else GREEDY
    here = stats[(stats["dataset"] == dataset) & (stats["variant"] == variant)]
    exp_here = expected[(expected["dataset"] == dataset) & (expected["variant"] == variant)]
    methods = method_list(list(here["method"].unique()) + list(exp_here["method"].unique()))
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
    eligible = [m for m in methods if m not in FULL_INFORMATION and m not in NOT_TRAINED]
    best = best_cells(cells, metrics, eligible)

    columns = ["Method"] + metrics + ["p", "λ"]
    rows, bold, italic, recs = [], set(), set(), []
    chosen = _selected_pls(selection, dataset, variant, label)
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
            c = cells[(m, k)]
            # the CSV carries the interval where the table shows it (MIN_SEEDS seeds on), nowhere else
            lo, hi = (c.ci_lo, c.ci_hi) if c.has_interval else (math.nan, math.nan)
            rec.update({f"{k}_mean": 100 * c.mean, f"{k}_std": 100 * c.std, f"{k}_ci_lo": 100 * lo,
                        f"{k}_ci_hi": 100 * hi, f"{k}_n": c.n,
                        f"{k}_n_expected": c.n_expected, f"{k}_status": c.status,
                        f"{k}_best": (m, k) in best})
        rec.update({"p": p_txt, "lam": lam_txt})
        recs.append(rec)

    sections: dict[int, str] = {}
    notes = []
    if show_paper and kind == "results":
        sections[0] = f"This run ({criterion}-selected p, λ)"
        sections[len(rows)] = "Paper, Table 2 (Lopez et al., AAAI 2021)"
        for m in METHOD_ORDER:   # the paper's Table 2 whole (its numbers, never rows of "—")
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
        notes.append(f"Paper block: {paper.SOURCE}; AttentionXML is the paper's supervised skyline.")
    title_kind = ("Stochastic policies: expected reward metrics" if kind == "results"
                  else "Greedy top-k metrics")
    n_seeds = max((cells[(m, k)].n for m in methods for k in metrics), default=0)
    notes.insert(0, f"Values ×100, {seeds_wording(n_seeds)}, at the (p, λ) "
                    f"selected by the validation-log {criterion} estimate. p and λ: "
                    f"the value{'s' if n_seeds > 1 else ''} selected{' over seeds' if n_seeds > 1 else ''}. Bold: best mean among the trained bandit-feedback methods "
                    "(all of them when tied at this precision); the logging policy is never bold, the "
                    "supervised skyline (full labels) is italic. “—”: no result, or p/λ not used by the "
                    "method; (n=a/b): a of b expected seeds.")
    if twinned:
        notes.append(f"{DAGGER} greedy policy without stochastic rows: its P@k, nDCG@k, PSP@k are shown, which "
                     "equal R@k, nDCR@k, PSR@k for a deterministic slate.")
    return Table(name=f"{kind}_{dataset}_{variant}",
                 title=f"{title_kind} — {dataset}, variant {variant}; (p, λ) by {criterion_title(criterion)}",
                 columns=columns, rows=rows, bold=bold, italic_rows=italic, sections=sections,
                 notes=notes, frame=pd.DataFrame(recs))


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


SPEARMAN_COLUMNS = ["dataset", "variant", "seed", "scope", "criterion", "rho", "n"]
POOLED = "pooled"


def grid_methods(rows: pd.DataFrame, dataset: str | None = None) -> list[str]:
    """Methods with a (p, λ) grid: some final row uses p (>= 0) or λ (finite). Paper order first."""
    f = rows[rows["final"]] if dataset is None else rows[rows["final"] & (rows["dataset"] == dataset)]
    used = f[(f["p"] >= 0) | np.isfinite(f["lam"].to_numpy(dtype=float))]["method"].unique()
    return [m for m in method_list(list(used)) if m in set(used)]


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3:
        return math.nan, n
    x, y = x[ok], y[ok]
    if (x == x[0]).all() or (y == y[0]).all():   # a constant input has no rank correlation (scipy: nan)
        return math.nan, n
    # scipy.stats.spearmanr's statistic, computed as it does (the correlation matrix of the two rank
    # columns), without its p-value and argument handling: most of its time, thousands of calls a report
    ranks = np.column_stack((_average_ranks(x), _average_ranks(y)))
    return float(np.corrcoef(ranks, rowvar=False)[1, 0]), n


def _average_ranks(a: np.ndarray) -> np.ndarray:
    """scipy.stats.rankdata(a): ranks 1..n, tied values share their mean rank (whole or half numbers,
    exact in floating point, so these are scipy's numbers)."""
    order = np.argsort(a, kind="mergesort")
    inv = np.empty(len(a), dtype=np.intp)
    inv[order] = np.arange(len(a))
    s = a[order]
    first = np.r_[True, s[1:] != s[:-1]]
    dense = first.cumsum()[inv]
    bounds = np.r_[np.nonzero(first)[0], len(a)]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def spearman_data(rows: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Rank correlation of each validation criterion with test R@5 across the (p, λ) grid points.

    For each (variant, seed) and each criterion (every final split-'val' metric except ESS, loss and
    *_se: ``selection.val_criteria``), the Spearman correlation (scipy.stats.spearmanr) between the
    criterion's value and the test R@5 of the same grid point, over the points of the methods with a
    grid (``grid_methods``): pooled over those methods (scope 'pooled') and per method (scope = the
    method). A point counts where both values are finite; rho is NaN with fewer than 3 points (or a
    constant input). Columns ``SPEARMAN_COLUMNS``: dataset, variant, seed, scope, criterion, rho, n.
    """
    f = rows[rows["final"] & (rows["dataset"] == dataset)]
    methods = grid_methods(f)
    f = f[f["method"].isin(methods)]
    val = f[(f["split"] == SELECT_SPLIT) & f["metric"].map(is_criterion)]
    criteria = order_criteria(val["metric"].unique())
    r5 = f[(f["split"] == ORACLE_METRIC[0]) & (f["metric"] == ORACLE_METRIC[1])]
    if not criteria or r5.empty:
        return pd.DataFrame(columns=SPEARMAN_COLUMNS)
    last = lambda d: d.sort_values("epoch", kind="stable").drop_duplicates(POINT + ["metric"], keep="last")  # noqa: E731
    # set_index/unstack, not pivot_table: keys with a NaN λ must survive, and no key combination
    # that never ran may appear
    wide = last(val).set_index(POINT + ["metric"])["value"].unstack("metric").reindex(columns=criteria)
    r5 = last(r5).set_index(POINT)["value"].rename("_R5")
    pts = wide.join(r5, how="outer").reset_index()
    recs = []
    for (v, seed), grp in pts.groupby(["variant", "seed"], sort=True):
        # numpy columns and masks once per (variant, seed): not a frame filtered per scope and criterion
        meth, y = grp["method"].to_numpy(), grp["_R5"].to_numpy(dtype=float)
        crit = {c: grp[c].to_numpy(dtype=float) for c in criteria}
        scopes = [(POOLED, np.ones(len(grp), dtype=bool))] + [(m, meth == m) for m in methods if (meth == m).any()]
        for scope, at in scopes:
            for c in criteria:
                rho, n = _spearman(crit[c][at], y[at])
                recs.append({"dataset": dataset, "variant": str(v), "seed": int(seed), "scope": scope,
                             "criterion": c, "rho": rho, "n": n})
    return pd.DataFrame(recs, columns=SPEARMAN_COLUMNS)


def _rho_text(v: float) -> str:
    return f"{v:+.2f}" if math.isfinite(v) else MISSING


def spearman_table(dataset: str, data: pd.DataFrame, criterion: str = DEFAULT_CRITERION) -> Table:
    """Per variant: pooled rows per seed, their mean ± std over seeds, then per grid method the
    mean ± std over seeds; one column per criterion (the run's selection criterion marked).
    The CSV holds every (variant, seed, scope, criterion) value (`spearman_data`), per seed."""
    d = data[data["dataset"] == dataset] if len(data) else data
    criteria = order_criteria(d["criterion"].unique()) if len(d) else []
    marks = {c: [w for w, on in (("selection", c == criterion), ("paper's", c == PAPER_CRITERION)) if on]
             for c in criteria}
    columns = ["Grid points", "points"] + [c + (f" ({', '.join(marks[c])})" if marks[c] else "") for c in criteria]
    rows: list[list[str]] = []
    sections: dict[int, str] = {}
    for v in sorted(d["variant"].unique()) if len(d) else []:
        dv = d[d["variant"] == v]
        seeds = sorted(dv["seed"].unique())
        sections[len(rows)] = f"variant {v}"
        # the variant's rows grouped once (positions, in row order), not filtered per seed, scope and criterion
        by_seed = dv.groupby(["scope", "seed"], sort=False).indices
        by_criterion = dv.groupby(["scope", "criterion"], sort=False).indices
        rho, n_points, crit = dv["rho"].to_numpy(dtype=float), dv["n"].to_numpy(), dv["criterion"].to_numpy()
        for s in seeds:
            at = by_seed.get((POOLED, s), [])
            ps = dict(zip(crit[at], rho[at]))
            rows.append([f"all grid methods, seed {s}", str(int(n_points[at].max())) if len(at) else "0"]
                        + [_rho_text(float(ps[c])) if c in ps else MISSING for c in criteria])
        scopes = [POOLED] + [m for m in method_list(list(dv["scope"].unique())) if m in set(dv["scope"]) and m != POOLED]
        for scope in scopes:
            if scope == POOLED and len(seeds) < 2:
                continue
            cells = []
            for c in criteria:
                vals = rho[by_criterion.get((scope, c), [])]
                fin = vals[np.isfinite(vals)]
                cell = Cell(float(fin.mean()) if len(fin) else math.nan,
                            float(fin.std(ddof=1)) if len(fin) > 1 else math.nan, len(fin), len(seeds))
                cells.append(cell.text(scale=1.0))
            per_seed = [int(n_points[at].max()) for (sc, _), at in by_seed.items() if sc == scope]
            lo, hi = (min(per_seed), max(per_seed)) if per_seed else (0, 0)
            npts = str(hi) if lo == hi else f"{lo}–{hi}"
            label = "all grid methods" if scope == POOLED else method_name(scope)
            rows.append([f"{label}, mean over seeds", npts] + cells)
    notes = [f"Spearman rank correlation, across the finished (p, λ) grid points, between each criterion — "
             "the trained policy's value estimated on the held-out validation slice of the logged data — and "
             "the test R@5 of the same point: +1 means the criterion orders the grid exactly as test R@5 does. "
             "“All grid methods”: the points of every method with a grid (p or λ used) pooled, per seed; "
             "“mean over seeds”: mean ± std of the per-seed correlations; points: grid points per seed. "
             "“—”: fewer than 3 points (or a constant criterion). "
             f"Selection reads only the validation log (criterion: {criterion}); test R@5 is used here only to "
             "measure how well each criterion would select. Per-seed values of every method: the CSV."]
    if not rows:
        notes.append("No method with a (p, λ) grid and both validation estimates and test R@5 here.")
    frame = d.assign(rho=d["rho"].astype(float)) if len(d) else pd.DataFrame(columns=SPEARMAN_COLUMNS)
    return Table(name=f"spearman_{dataset}",
                 title=f"Rank correlation of each selection criterion with test R@5 across the grid — {dataset} "
                       f"(selection: {criterion_title(criterion)})",
                 columns=columns, rows=rows, sections=sections, notes=notes, frame=frame)


def _stat_text(vals: np.ndarray, scale: float, counts: bool) -> str:
    """'20000' for a count (every seed an integer), '20000 ± 12' over seeds; else '%.2f' values."""
    mean, sd = scale * vals.mean(), (scale * vals.std(ddof=1) if len(vals) > 1 else math.nan)
    if counts and mean == round(mean):
        return f"{int(round(mean))}" + (f" ± {sd:.0f}" if len(vals) > 1 and sd > 0 else "")
    if counts:
        return f"{mean:.1f}" + (f" ± {sd:.1f}" if len(vals) > 1 else "")
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if len(vals) > 1 else "")


LOGGING_POLICY_PREFIX = "logging_policy/"


def logging_policy_values(prepare: pd.DataFrame, rows: pd.DataFrame | None) -> pd.DataFrame:
    """prepare.csv with its 'logging_policy/<metric>' values replaced, per (dataset, variant, seed),
    by the logging method's final test row of that metric where one exists.

    Both are the expected test reward of rho's slates, but computed by two evaluations (the prepare
    stage's and the logging trial's); they can differ (e.g. an exact value against a Monte-Carlo one
    from a cache written by an older evaluation). The results tables show the trial's, so every place
    of the report shows that one value."""
    if rows is None or rows.empty or prepare.empty:
        return prepare
    lg = rows[(rows["method"] == "logging") & rows["final"] & (rows["split"] == "test")]
    if lg.empty:
        return prepare
    lg = lg.sort_values("epoch", kind="stable").drop_duplicates(["dataset", "variant", "seed", "metric"], keep="last")
    lg = lg.assign(metric=LOGGING_POLICY_PREFIX + lg["metric"].astype(str), seed=lg["seed"].astype("int64"))
    keys = ["dataset", "variant", "seed", "metric"]
    base = prepare.assign(seed=pd.to_numeric(prepare["seed"], errors="coerce"))
    is_lp = base["metric"].str.startswith(LOGGING_POLICY_PREFIX)
    ours = lg[lg["metric"].isin(set(base.loc[is_lp, "metric"]))][keys + ["value"]]
    merged = base.merge(ours.rename(columns={"value": "_trial"}), on=keys, how="left")
    merged["value"] = merged["_trial"].where(merged["_trial"].notna(), merged["value"])
    extra = ours.merge(base[keys], on=keys, how="left", indicator=True)
    extra = extra[extra["_merge"] == "left_only"].drop(columns="_merge")
    return pd.concat([merged.drop(columns="_trial"), extra], ignore_index=True)[list(prepare.columns)]


AS_IS_STATS = ("variant/T", "match/n_heldout")


def logging_stats_table(dataset: str, prepare: pd.DataFrame, rows: pd.DataFrame | None = None) -> Table:
    """Logging-policy statistics (prepare.csv) per variant: every metric, mean ± std over seeds.

    Values in [0, 1] are shown x100; others (e.g. entropies) as they are. With `rows`, the
    logging_policy/* metrics are the logging method's test rows (``logging_policy_values``)."""
    prepare = logging_policy_values(prepare[prepare["dataset"] == dataset], rows)
    sub = prepare[prepare["dataset"] == dataset]
    variants = sorted(sub["variant"].unique())
    cov = sub[sub["metric"].str.startswith("covering@")]
    other = sorted(set(sub["metric"]) - set(cov["metric"]))
    ks = sorted(int(m.split("@")[1]) for m in cov["metric"].unique())
    show_cov = [f"covering@{k}" for k in ks if k in (1, 5, 10, 20, 50, 100) or k == ks[-1]]
    metrics = other + show_cov
    columns = ["Statistic"] + [f"variant {v}" for v in variants]
    rows, recs = [], []
    at = sub.groupby(["variant", "metric"], sort=False).indices     # (variant, metric) -> its rows, in order
    values = sub["value"].to_numpy(dtype=float)
    for k in metrics:
        row = [k]
        for v in variants:
            vals = values[at.get((v, k), [])]
            vals = vals[np.isfinite(vals)]
            if not len(vals):
                row.append(MISSING)
                continue
            # data/* are dataset facts (sizes, propensity A/B), never rates: shown as they are
            # a temperature (variant/T) or a count is never a rate, whatever its range: shown as it is
            frac = (not k.startswith("data/") and k not in AS_IS_STATS
                    and bool(np.all((vals >= 0) & (vals <= 1))))
            sc = 100.0 if frac else 1.0
            txt = _stat_text(vals, sc, counts=not frac and bool(np.all(vals == np.round(vals))))
            row.append(txt)
            recs.append({"dataset": dataset, "variant": v, "metric": k, "scale": sc,
                         "mean": sc * vals.mean(), "std": sc * vals.std(ddof=1) if len(vals) > 1 else math.nan,
                         "n": len(vals)})
        rows.append(row)
    notes = ["Rates and fractions ×100, dataset facts (data/*) as they are, counts as integers (mean ± std over "
             "seeds where there are several); covering@k: share of test instances' true labels "
             "inside the top-k of ρ; logging_model/*: greedy ranking of the logging model; logging_policy/*: "
             "expected test reward of ρ's slates, the logging trial's values (as in the results tables) where it "
             "ran. “—”: not recorded for that variant. Full covering curve: the covering figure and the CSV."]
    return Table(name=f"logging_{dataset}", title=f"Logging policy statistics — {dataset}",
                 columns=columns, rows=rows, notes=notes, frame=pd.DataFrame(recs))
