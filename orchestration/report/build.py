"""`build_report(run_dir)`: read a run directory's result rows, select, aggregate, write the report.

Reads (layout written by orchestration):
  results/rows.csv      long-form rows (poxm_core.common.results.COLUMNS), required
  results/prepare.csv   dataset, variant, seed, metric, value (covering@k, logging statistics), optional
  config.yaml           resolved sweep config (name, seeds, datasets/variants, methods,
                        selection.criterion, training.protocol), optional
  sweep.json            expected grid: list of {dataset, variant, method, p, lam, seed}, optional
Writes run_dir/report/ atomically (built in a temporary sibling, then swapped in):
  tables/*.{csv,md,tex}, figures/*.{png,pdf}, index.md, index.html
and, when it selects on its own (no selection handed in), results/selection.csv (orchestration.rundir.write_selection)
index order: title, claims table, headline R@5 table, the paper's figures (covering, robustness), then
the run header, coverage, per-dataset tables and other figures, selection.
The run's criterion (IS by default) selects; SNIS, the paper's criterion, is selected beside it, so its
tables and claims are always there.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from orchestration.report import claims as C
from orchestration.report import figures as F
from orchestration.report import paper
from orchestration.report import tables as T
from orchestration.report.aggregate import (EXPECT_KEYS, expected_from_config, expected_from_grid,
                                            expected_from_rows, seed_stats)
from orchestration.report.figure_pool import FigurePool
from orchestration.report.index import render_html, render_markdown
from orchestration.report.inference import MIN_SEEDS
from orchestration.report.gap_share import gap_shares, gap_table
from orchestration.report.grid_edges import grid_edges, grid_edges_table
from orchestration.report.stability import stability, stability_table
from orchestration.rundir import write_selection
from orchestration.selection import (DEFAULT_CRITERION, PAPER_CRITERION, POINT, RunSelection, check_criterion,
                              check_rows, select_run, selected_rows, selection_label, val_criteria)
from poxm_core.common.atomic import publish, write_text
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import COLUMNS, INSTANCES, PREPARE_COLUMNS

# the run's one selection file, from the report's folder (a published folder keeps it beside index.md:
# scripts/publish_results.py rewrites the link)
SELECTION_LINK = "../results/selection.csv"


# --------------------------------------------------------------------------------------------
# inputs

def read_rows(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise PoxmInputError(f"{path}: result rows not found (run the sweep, or check the run directory)")
    try:
        df = pd.read_csv(path, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return check_rows(pd.DataFrame(columns=COLUMNS))
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise PoxmInputError(f"{path}:1: expected columns {COLUMNS}, missing {missing}")
    try:
        return check_rows(df, name=str(path))
    except (ValueError, TypeError) as exc:
        raise PoxmInputError(f"{path}: {exc}") from None


def read_prepare(path: Path) -> pd.DataFrame:
    if not path.exists():
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else "object") for c in PREPARE_COLUMNS})
    df = pd.read_csv(path)
    missing = [c for c in PREPARE_COLUMNS if c not in df.columns]
    if missing:
        raise PoxmInputError(f"{path}:1: expected columns {PREPARE_COLUMNS}, missing {missing}")
    df = df[PREPARE_COLUMNS].copy()
    for c in ("dataset", "variant", "metric"):
        df[c] = df[c].astype(str)
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    return df


def read_config(path: Path) -> dict:
    """The resolved config as plain data (not re-validated: a report of an old run must still build)."""
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PoxmInputError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    return data if isinstance(data, dict) else {}


def read_grid(path: Path) -> list[dict] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PoxmInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    grid = data.get("grid") if isinstance(data, dict) else data
    if not isinstance(grid, list):
        raise PoxmInputError(f"{path}: expected a list of grid points (or {{'grid': [...]}}), got {type(grid).__name__}")
    for i, g in enumerate(grid):
        if not isinstance(g, dict) or any(k not in g for k in EXPECT_KEYS):
            raise PoxmInputError(f"{path}: grid point {i} must be an object with keys {POINT}, got {g!r}")
    return grid


def _variant_params(config: dict, prepare: pd.DataFrame | None = None) -> dict[tuple[str, str], dict]:
    """(dataset, variant) -> the variant's config entry; a matched variant's T (solved at prepare time,
    per seed) shown from results/prepare.csv as 'solved: mean [min–max], ratio r for target t'."""
    out = {}
    for d in config.get("datasets", []) or []:
        for v in d.get("variants", []) or []:
            if isinstance(d, dict) and isinstance(v, dict) and "name" in d and "name" in v:
                out[(str(d["name"]), str(v["name"]))] = dict(v)
    if prepare is not None and len(prepare) and "metric" in prepare:
        for (ds, vn), entry in out.items():
            if entry.get("T") is not None or not entry.get("match"):
                continue
            here = prepare[(prepare["dataset"].astype(str) == ds) & (prepare["variant"].astype(str) == vn)]
            T = here[here["metric"] == "variant/T"]["value"].astype(float)
            r = here[here["metric"] == "match/ratio"]["value"].astype(float)
            t = here[here["metric"] == "match/target"]["value"].astype(float)
            if len(T):
                span = f" [{T.min():.3g}–{T.max():.3g}]" if len(T) > 1 else ""
                entry["T"] = (f"{T.mean():.3g}{span} solved: ratio {r.mean():.3f} for target {t.mean():.2f}"
                              if len(r) and len(t) else f"{T.mean():.3g}{span} solved")
    return out


def selection_criterion(config: dict) -> str:
    """config['selection']['criterion'] when present (read defensively: an old run's config has no
    such key), else the default, 'IS'. A value that cannot be a criterion is an input error."""
    sel = config.get("selection") if isinstance(config, dict) else None
    crit = sel.get("criterion") if isinstance(sel, dict) else None
    if crit is None or (isinstance(crit, str) and not crit.strip()):
        return DEFAULT_CRITERION
    try:
        return check_criterion(crit)
    except ValueError as exc:
        raise PoxmInputError(f"config.yaml: selection.criterion: {exc}") from None


def run_protocol(config: dict) -> str | None:
    """The training protocol the run recorded (config['training']['protocol'], e.g. 'paper' or
    'paper+init=logging'; a top-level 'protocol' is accepted too), or None when the config has none."""
    if not isinstance(config, dict):
        return None
    tr = config.get("training")
    for v in ((tr.get("protocol") if isinstance(tr, dict) else None), config.get("protocol")):
        if v is not None and not isinstance(v, (dict, list)) and str(v).strip():
            return str(v).strip()
    if isinstance(tr, dict):   # a resolved config: the protocol follows from its training settings
        from poxm_core.config.schema import TrainingConfig, protocol_name
        try:
            return protocol_name(TrainingConfig(**{k: v for k, v in tr.items() if k in TrainingConfig.model_fields}))
        except Exception:   # an older run's config (e.g. training.lr): the protocol was not recorded
            return None
    return None


def _stamp_table(t: T.Table, protocol: str | None) -> T.Table:
    """Name the protocol in the table's caption (title) and CSV."""
    if protocol:
        t.title = f"{t.title} (protocol: {protocol})"
        if len(t.frame.columns):
            t.frame = t.frame.assign(protocol=protocol)
    return t


def _stamp_figure(fig: F.Figure, protocol: str | None) -> F.Figure:
    return dataclasses.replace(fig, caption=f"{fig.caption} Protocol: {protocol}.") if protocol else fig


def _ordered(values, preferred: list) -> list:
    values = list(dict.fromkeys(values))
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


# --------------------------------------------------------------------------------------------
# coverage notes: what is missing or partial, never silently dropped

def _grid_frame(grid: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame([{k: g.get(k) for k in POINT} for g in grid], columns=POINT)
    df["p"] = pd.to_numeric(df["p"].fillna(-1)).astype("int64")
    df["lam"] = pd.to_numeric(df["lam"]).astype("float64")
    df["seed"] = df["seed"].astype("int64")
    for c in ("dataset", "variant", "method"):
        df[c] = df[c].astype(str)
    return df.drop_duplicates()


def coverage_notes(rows: pd.DataFrame, selection: pd.DataFrame, expected: pd.DataFrame,
                   grid: list[dict] | None, source: str, limit: int = 40,
                   criterion: str = DEFAULT_CRITERION) -> list[str]:
    notes = [f"Expected trials taken from {source}."]
    snis = selection[selection["selection"] == selection_label(criterion)]
    have = set(map(tuple, snis[EXPECT_KEYS].to_numpy()))
    missing = [t for t in map(tuple, expected[EXPECT_KEYS].to_numpy()) if t not in have]
    if missing:
        by: dict[tuple, list] = {}
        for d, v, m, s in missing:
            by.setdefault((d, v, m), []).append(int(s))
        n_exp = expected.groupby(["dataset", "variant", "method"])["seed"].nunique().to_dict()
        items = []
        for (d, v, m), seeds in sorted(by.items()):
            kind = "missing" if len(seeds) == n_exp[(d, v, m)] else "partial"
            items.append(f"{kind}: {d} / {v} / {m}: no selected result for seed(s) {sorted(seeds)} "
                         f"({n_exp[(d, v, m)] - len(seeds)}/{n_exp[(d, v, m)]} seeds present)")
        notes += items[:limit] + ([f"... and {len(items) - limit} more"] if len(items) > limit else [])
    else:
        notes.append("Every expected (dataset, variant, method, seed) has a selected result.")
    if grid is not None:
        g = _grid_frame(grid)
        final = rows[rows["final"]][POINT].drop_duplicates()
        done = g.merge(final.assign(_done=True), on=POINT, how="left")
        todo = done[done["_done"].isna()]
        if len(todo):
            short = (todo.groupby(["dataset", "variant", "method", "seed"]).size().rename("n_missing")
                     .reset_index().merge(g.groupby(["dataset", "variant", "method", "seed"]).size()
                                          .rename("n_grid").reset_index()))
            notes.append(f"{len(todo)} of {len(g)} grid points have no final result; selection ran over "
                         "the finished points only:")
            lines = [f"{r.dataset} / {r.variant} / {r.method} / seed {r.seed}: "
                     f"{r.n_grid - r.n_missing}/{r.n_grid} grid points finished" for r in short.itertuples()]
            notes += lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
        else:
            notes.append(f"All {len(g)} grid points of sweep.json finished.")
    extra = sorted(set(map(tuple, snis[EXPECT_KEYS].to_numpy())) - set(map(tuple, expected[EXPECT_KEYS].to_numpy())))
    if extra:
        notes.append(f"{len(extra)} result(s) outside the expected grid are included, e.g. {extra[0]}.")
    return notes


# --------------------------------------------------------------------------------------------
# build

def _write_report(run_dir: Path, out: Path, chosen: RunSelection | None = None) -> None:
    rows = read_rows(run_dir / "results" / "rows.csv")
    prepare = read_prepare(run_dir / "results" / "prepare.csv")
    config = read_config(run_dir / "config.yaml")
    grid = read_grid(run_dir / "sweep.json")
    if grid is not None:
        expected, source = expected_from_grid(grid), "sweep.json"
    elif (exp := expected_from_config(config)) is not None:
        expected, source = exp, "config.yaml (datasets × variants × methods × seeds)"
    else:
        expected, source = expected_from_rows(rows[rows["final"]]), \
            "the results themselves (no sweep.json or config.yaml: every method seen is expected for every seed seen)"

    from orchestration.report.logged import is_logged, write_logged_report
    if is_logged(config):   # logged feedback: no labels, off-policy estimates on held-out logs (report/logged.py)
        if chosen is None:    # a report built on its own: select here, once, and keep it beside the rows
            chosen = select_run(rows, selection_criterion(config))
            write_selection(run_dir, chosen.frame())
        notes = coverage_notes(rows, chosen.selection, expected, grid, source, criterion=chosen.criterion)
        write_logged_report(run_dir, out, chosen, rows, prepare, config, notes, _shown(run_dir), run_protocol(config))
        return
    conf_ds = [str(d.get("name")) for d in config.get("datasets", []) or [] if isinstance(d, dict)]
    # sets of names: the distinct values first (iterating every row's string takes seconds in a large run)
    datasets = _ordered(list(expected["dataset"].unique()) + list(rows["dataset"].unique())
                        + list(prepare["dataset"].unique()), conf_ds)
    dv = sorted({(d, v) for f in (expected, rows)
                 for d, v in f[["dataset", "variant"]].drop_duplicates().itertuples(index=False)})
    variants_of = {d: [v for (dd, v) in dv if dd == d] for d in datasets}

    tdir, fdir = out / "tables", out / "figures"
    tdir.mkdir(parents=True)
    fdir.mkdir(parents=True)
    # figures and each dataset's tables are built by worker processes (figure_pool); each function
    # reads only its dataset's final rows (and variant's), so they are handed only those, not every
    # epoch's rows too (the real-data benchmark: 72,000 final of 440,000 rows, all pickled for a
    # worker); ("pending", ...) figures and ("pending blocks", ...) tables are resolved in order below
    final = rows[rows["final"]]
    rows_of = {d: final[final["dataset"] == d] for d in datasets}
    pool = FigurePool(expected=4 * len(datasets) + sum(len(v) for v in variants_of.values()))
    try:
        # the figures that do not depend on the selection first (most of the drawing: one estimator
        # figure per variant): the processes draw them while this one selects, aggregates and bootstraps
        covering = {d: pool.submit(F.covering_figure, prepare, rows_of[d], d, fdir) for d in datasets}
        estimators = {(d, v): pool.submit(F.estimator_figure, rows_of[d][rows_of[d]["variant"] == v], d, v, fdir)
                      for d in datasets for v in variants_of[d]}
        _selected_blocks(ReportInputs(run_dir, out, chosen, rows, prepare, config, grid, expected, source, datasets,
                                      variants_of, rows_of, tdir, fdir, pool, covering, estimators))
    finally:
        pool.close()


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """What _write_report has read and started when the selection-dependent part begins: the run's
    files (rows, prepare statistics, config, grid, the expected cells and where they came from), the
    datasets and their variants, each dataset's final rows, the output folders, and the figure pool
    with the selection-free figures already submitted to it (covering, estimators)."""
    run_dir: Path
    out: Path
    chosen: RunSelection | None
    rows: pd.DataFrame
    prepare: pd.DataFrame
    config: dict
    grid: list[dict] | None
    expected: pd.DataFrame
    source: str
    datasets: list[str]
    variants_of: dict
    rows_of: dict
    tdir: Path
    fdir: Path
    pool: FigurePool
    covering: dict
    estimators: dict


def _selected_blocks(inp: ReportInputs) -> None:
    """The rest of _write_report, once the selection-free figures are being drawn: selection,
    aggregation, claims, the tables and the other figures, index.md and index.html."""
    run_dir, out, chosen, rows, prepare, config = inp.run_dir, inp.out, inp.chosen, inp.rows, inp.prepare, inp.config
    grid, expected, source, datasets, variants_of = inp.grid, inp.expected, inp.source, inp.datasets, inp.variants_of
    rows_of, tdir, fdir, pool, covering, estimators = (inp.rows_of, inp.tdir, inp.fdir, inp.pool, inp.covering,
                                                       inp.estimators)
    if chosen is None:    # a report built on its own (library use): select here, once, and keep it beside the rows
        chosen = select_run(rows, selection_criterion(config))
        write_selection(run_dir, chosen.frame())
    criterion = chosen.criterion
    protocol = run_protocol(config)
    label = selection_label(criterion)
    selection = chosen.selection
    chosen_test = selected_rows(rows, selection, label)
    stats = seed_stats(chosen_test)
    params = _variant_params(config, prepare)
    criteria = val_criteria(rows)
    # the paper's criterion beside the run's: its choices, tables and claims stay in every report
    paper_sel = chosen.paper
    if paper_sel is not None:
        paper_stats = seed_stats(selected_rows(rows, paper_sel, selection_label(PAPER_CRITERION)))
    shown = [criterion] + ([PAPER_CRITERION] if paper_sel is not None else [])
    inst_file = run_dir / "results" / INSTANCES
    with (np.load(inst_file) if inst_file.is_file() else contextlib.nullcontext()) as instances:
        claim_frames = [f for f in (C.claims(rows, s, c, instances) for c, s in zip(shown, [selection, paper_sel]))
                        if len(f)]
    claim_frame = pd.concat(claim_frames, ignore_index=True) if claim_frames else pd.DataFrame(columns=C.CLAIM_COLUMNS)

    name = str(config.get("name", run_dir.name))
    folds = (config.get("selection") or {}).get("cross_fit") if isinstance(config.get("selection"), dict) else None
    where = f"cross-fitted over {folds} folds of the whole log" if folds else "validation log"
    header = (f"Run directory `{run_dir.name}`. {len(rows)} result rows, {int(rows['final'].sum())} final. "
              f"Selection criterion: **{criterion}** ({where}); "
              + (f"protocol: **{protocol}**. " if protocol else "protocol: not recorded in config.yaml. ")
              + f"Regenerate with `poxm report {_shown(run_dir)}`.")
    # Order: title, claims, headline R@5 table, the paper's figures (covering, robustness), then the rest.
    blocks: list[tuple] = [("h1", f"poxm report — {name}")]
    blocks += _claims_blocks(claim_frame, shown, tdir, out, protocol)
    rest: list[tuple] = [("h2", "Run"), ("p", header)]
    if criteria and criterion not in criteria and (rows["final"] & (rows["split"] == "val")).any():
        warn = ("p", f"**The selection criterion {criterion} has no validation rows** (present: "
                     f"{', '.join(criteria)}): methods with several grid points are not selected.")
        blocks.append(warn)
        rest.append(warn)
    rest += [("h2", "Coverage of the sweep"),
             ("ul", coverage_notes(rows, selection, expected, grid, source, criterion=criterion))]

    def figure(fig: F.Figure | None) -> list[tuple]:
        if fig is None:
            return []
        fig = _stamp_figure(fig, protocol)
        return [("figure", str(fig.paths[0].relative_to(out)), fig.title, fig.caption,
                 [(p.suffix[1:].upper(), str(p.relative_to(out))) for p in fig.paths])]

    # the tables next: the processes take work in the order it is asked for
    sections = {d: pool.submit(_dataset_tables, d, variants_of[d], stats, expected, selection, criterion,
                               params, (paper_stats, paper_sel) if paper_sel is not None else None,
                               rows_of[d], prepare, protocol, tdir, out)
                for d in datasets}
    blocks.append(("h2", "Headline: test R@5"))
    for d in datasets:
        if variants_of[d]:
            blocks += _table_blocks(T.headline_table(d, variants_of[d], stats, expected, criterion, params),
                                    protocol, tdir, out)
    gaps = gap_shares(rows, selection, criterion)
    if len(gaps):
        blocks.append(("h2", "Share of the logging → skyline gap closed"))
        blocks += _table_blocks(gap_table(gaps), protocol, tdir, out)
    blocks.append(("h2", "The paper's figures"))
    for d in datasets:
        blocks += [("pending", covering[d]),
                   ("pending", pool.submit(F.robustness_figure, rows_of[d], selection, prepare, d, fdir,
                                           criterion=criterion))]
    blocks += rest
    for d in datasets:
        blocks.append(("h2", f"Dataset {d}"))
        for i, v in enumerate(variants_of[d]):
            blocks.append(("pending blocks", sections[d], i))
            blocks.append(("pending", estimators[(d, v)]))
        blocks.append(("pending blocks", sections[d], len(variants_of[d])))
        blocks.append(("pending", pool.submit(F.sharpness_figure, chosen_test, params, d, fdir, criterion=criterion)))
    resolved = []
    for blk in blocks:
        if blk[0] == "pending":
            resolved += figure(blk[1].result())
        elif blk[0] == "pending blocks":
            resolved += blk[1].result()[blk[2]]
        else:
            resolved.append(blk)
    blocks = resolved
    blocks += [("h2", "Selection"),
               ("p", f"Per (dataset, variant, method, seed): the (p, λ) with the highest {criterion} estimate on the "
                     f"validation log (selection='{label}'; criterion from config.yaml `selection.criterion`, "
                     "default IS; ties → smaller p, then smaller λ)"
                     + (f"; beside it the paper's criterion {PAPER_CRITERION} (selection="
                        f"'{selection_label(PAPER_CRITERION)}')" if paper_sel is not None else "")
                     + ", and apart, the oracle choice by test R@5 (selection='oracle', uses test labels, "
                       "never used by the tables)."),
               ("links", [("selection.csv", SELECTION_LINK)])]
    blocks += _table_blocks(stability_table([stability(s, c) for c, s in zip(shown, [selection, paper_sel])], shown),
                            protocol, tdir, out)
    edges = [grid_edges(rows, s, c) for c, s in zip(shown, [selection, paper_sel])]
    if any(len(e) for e in edges):
        blocks += _table_blocks(grid_edges_table(edges, shown), protocol, tdir, out)
    write_text(out / "index.md", render_markdown(blocks))
    write_text(out / "index.html", render_html(blocks, f"poxm report — {name}", out))


def _table_blocks(t: T.Table, protocol: str | None, tdir: Path, out: Path) -> list[tuple]:
    """A table stamped with the protocol, written (csv, md, tex), and its index blocks."""
    t = _stamp_table(t, protocol)
    return [("table", t), ("links", [(ext.upper(), str(p.relative_to(out))) for ext, p in T.write_table(t, tdir).items()])]


def _dataset_tables(d: str, variants: list[str], stats: pd.DataFrame, expected: pd.DataFrame, selection: pd.DataFrame,
                    criterion: str, params: dict, snis: tuple | None, rows_d: pd.DataFrame, prepare: pd.DataFrame,
                    protocol: str | None, tdir: Path, out: Path) -> list[list[tuple]]:
    """A dataset's tables, written, as index blocks: one list per variant (its heading, the results,
    greedy and selection tables, and the same under the paper's criterion when `snis` = (its seed
    statistics, its selection)), then one for the dataset's criteria-against-test and logging-policy
    tables. Run by the report's worker processes (figure_pool), one dataset each."""
    parts = []
    for v in variants:
        blocks: list[tuple] = [("h3", f"{d}, variant {v}")]
        show_paper = paper.matches_paper(d, v, params.get((d, v)))
        if d in paper.TABLE2 and not show_paper:
            blocks.append(("p", f"The paper's Table 2 used logging policy (α, β, T) = "
                                f"{paper.PAPER_LOGGING[d]}; this variant differs, so its numbers are not shown."))
        for t in (T.metric_table("results", d, v, stats, expected, selection, show_paper, criterion=criterion),
                  T.metric_table("greedy", d, v, stats, expected, selection, criterion=criterion,
                                 params=params.get((d, v))),
                  T.selection_table(d, v, selection, expected, criterion=criterion)):
            blocks += _table_blocks(t, protocol, tdir, out)
        if snis is not None:
            blocks.append(("p", f"(p, λ) selected by {PAPER_CRITERION}, the paper's criterion:"))
            for t in _paper_tables(d, v, snis[0], snis[1], expected, show_paper, params.get((d, v))):
                blocks += _table_blocks(t, protocol, tdir, out)
        parts.append(blocks)
    blocks = []
    sp = T.spearman_data(rows_d, d)   # both read only the dataset's final rows
    if len(sp):
        blocks += [("h3", f"{d}: selection criteria against test R@5")] + _table_blocks(T.spearman_table(d, sp, criterion),
                                                                                     protocol, tdir, out)
    if (prepare["dataset"] == d).any():
        blocks += [("h3", f"{d}: logging policy")] + _table_blocks(T.logging_stats_table(d, prepare, rows_d),
                                                                  protocol, tdir, out)
    parts.append(blocks)
    return parts


def _claims_blocks(frame: pd.DataFrame, criteria: list[str], tdir: Path, out: Path,
                   protocol: str | None) -> list[tuple]:
    """The report's opening: a sentence, then the claims table (tables/claims.{csv,md,tex})."""
    names = " and ".join(C.criterion_name(c) for c in criteria)
    if frame.empty:
        return [("p", "Claims: none can be checked here (no claim has both of its methods, or both "
                      "variants A and C, in this run's results).")]
    t = _stamp_table(C.claims_table(frame, criteria), protocol)
    paths = T.write_table(t, tdir)
    n = pd.to_numeric(frame["n"], errors="coerce").max() if "n" in frame else float("nan")
    enough = bool(n >= MIN_SEEDS)            # below it no cell has an interval or a verdict (claims.py)
    how = ("a 95 % interval that covers seed variation and test-set sampling, the seeds that agree, and a "
           "verdict from a test corrected for multiplicity within each claim (Holm)" if enough else
           f"the seeds that agree; no interval and no verdict below {MIN_SEEDS} seeds")
    return [("p", f"What this benchmark says about each claim of the paper (and rows of ours), per dataset and "
                  f"variant: the mean paired difference over seeds at the selected heads, {how}, under {names}."),
            ("table", t), ("links", [(ext.upper(), str(p.relative_to(out))) for ext, p in paths.items()])]


def _paper_tables(d: str, v: str, stats: pd.DataFrame, paper_sel: pd.DataFrame, expected: pd.DataFrame,
                  show_paper: bool, params: dict | None = None) -> list[T.Table]:
    """The results, greedy and selection tables of (d, v) under SNIS, named *_snis_<d>_<v>."""
    out = [T.metric_table("results", d, v, stats, expected, paper_sel, show_paper, criterion=PAPER_CRITERION),
           T.metric_table("greedy", d, v, stats, expected, paper_sel, criterion=PAPER_CRITERION, params=params),
           T.selection_table(d, v, paper_sel, expected, criterion=PAPER_CRITERION)]
    for t in out:
        kind, rest = t.name.split("_", 1)
        t.name = f"{kind}_{selection_label(PAPER_CRITERION)}_{rest}"
    return out


def build_report(run_dir: str | os.PathLike, selection: RunSelection | None = None) -> Path:
    """Build run_dir/report/ from run_dir/results/*.csv; returns the report directory.

    `selection`: the run's selection (`orchestration.selection.select_run`, computed once by the run
    with its validated config's criterion); without it (a report built on its own) the report selects
    with the criterion of run_dir/config.yaml.

    Built in a temporary directory beside it, then swapped in, so a failed build leaves the old
    report untouched and no half-written report looks complete.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PoxmInputError(f"{run_dir}: run directory not found")
    final = run_dir / "report"
    tmp = Path(tempfile.mkdtemp(prefix=".report.tmp-", dir=run_dir))
    try:
        _write_report(run_dir, tmp, selection)
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=".report.old-", dir=run_dir))
            publish(final, old / "report")
        publish(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.filename and Path(exc.filename).is_relative_to(tmp):
            exc.filename = str(final / Path(exc.filename).relative_to(tmp))    # the file the report was writing
        raise
    return final


def _shown(run_dir: Path) -> str:
    """The run directory as the reader would type it: relative to the working directory when inside
    it (reports get committed; machine-specific absolute paths must not leak into them)."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return f"<runs_dir>/{Path(run_dir).name}"
