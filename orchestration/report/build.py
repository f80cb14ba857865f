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
the run header, coverage, per-dataset tables and other figures, selection; below the seeds a verdict
needs, the headline table and the line on how to get verdicts first, then the claims (first_screen.py).
The run's criterion (IS by default) selects; SNIS, the paper's criterion, is selected beside it, so its
tables and claims are always there.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report import claims as C
from orchestration.report import figures as F
from orchestration.report import first_screen as FS
from orchestration.report import tables as T
from orchestration.report.instance_moments import moment_source
from orchestration.report.aggregate import expected_from_config, expected_from_grid, expected_from_rows, seed_stats
from orchestration.report.blocks import claims_blocks, dataset_tables, figure_blocks, table_blocks
from orchestration.report.claims_family import family_of
from orchestration.report.coverage import coverage_notes
from orchestration.report.figure_pool import FigurePool
from orchestration.report.gap_share import gap_shares, gap_table
from orchestration.report.grid_edges import ORACLE, grid_edges, grid_edges_table
from orchestration.report.landscape import landscape_blocks
from orchestration.report.index import render_html, render_markdown
from orchestration.report.inputs import (read_config, read_grid, read_prepare, read_rows, run_protocol,  # noqa: F401  (read_rows: callers)
                                         selection_criterion, variant_params)
from orchestration.report.split_variance import split_variance_blocks
from orchestration.report.stability import stability, stability_table
from orchestration.report.sweep_table import sweep_table_blocks
from orchestration.rundir import write_selection
from orchestration.selection import PAPER_CRITERION, RunSelection, select_run, selected_rows, selection_label, val_criteria
from poxm_core.common.atomic import publish, write_text
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import INSTANCES

# the run's one selection file, from the report's folder (a published folder keeps it beside index.md:
# scripts/publish_results.py rewrites the link)
SELECTION_LINK = "../results/selection.csv"


def _ordered(values, preferred: list) -> list:
    values = list(dict.fromkeys(values))
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def _write_report(run_dir: Path, out: Path, chosen: RunSelection | None = None, moments=None) -> None:
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
    # the per-instance values' source, shared by the claims and the landscape (instance_moments.py): a
    # published folder's kept moments when given, else the run's arrays
    inst_file = run_dir / "results" / INSTANCES
    arrays = np.load(inst_file) if moments is None and inst_file.is_file() else None
    try:
        # the figures that do not depend on the selection first (most of the drawing: one estimator
        # figure per variant): the processes draw them while this one selects, aggregates and bootstraps
        covering = {d: pool.submit(F.covering_figure, prepare, rows_of[d], d, fdir) for d in datasets}
        estimators = {(d, v): pool.submit(F.estimator_figure, rows_of[d][rows_of[d]["variant"] == v], d, v, fdir)
                      for d in datasets for v in variants_of[d]}
        _selected_blocks(ReportInputs(run_dir, out, chosen, rows, prepare, config, grid, expected, source, datasets,
                                      variants_of, rows_of, tdir, fdir, pool, covering, estimators,
                                      moments if moments is not None else moment_source(arrays)))
    finally:
        pool.close()
        if arrays is not None:
            arrays.close()


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
    moments: object = None     # instance_moments source (None: the run kept no per-instance values)


@dataclasses.dataclass(frozen=True)
class Chosen:
    """The run's selection and what the report reads of it: the criterion's choices (`selection`) and
    the paper's beside them (`paper`, or None), their seed statistics at the chosen heads, the chosen
    heads' test rows, the criteria shown (the run's, then the paper's), the variants' config entries."""
    run: RunSelection
    protocol: str | None
    selection: pd.DataFrame
    paper: pd.DataFrame | None
    stats: pd.DataFrame
    paper_stats: pd.DataFrame | None
    chosen_test: pd.DataFrame
    shown: list[str]
    params: dict

    @property
    def criterion(self) -> str:
        return self.run.criterion

    @property
    def label(self) -> str:
        return selection_label(self.run.criterion)

    def pairs(self) -> list[tuple[str, pd.DataFrame | None]]:
        """(criterion, its choices) for the run's criterion, then the paper's (None when not beside it)."""
        return list(zip(self.shown, [self.selection, self.paper]))


def _chosen(inp: ReportInputs) -> Chosen:
    """The run's selection (made here, once, and kept beside the rows when the report is built on its
    own: library use) and the statistics every part of the report reads."""
    run = inp.chosen
    if run is None:
        run = select_run(inp.rows, selection_criterion(inp.config))
        write_selection(inp.run_dir, run.frame())
    chosen_test = selected_rows(inp.rows, run.selection, selection_label(run.criterion))
    paper_stats = (None if run.paper is None else
                   seed_stats(selected_rows(inp.rows, run.paper, selection_label(PAPER_CRITERION))))
    return Chosen(run=run, protocol=run_protocol(inp.config), selection=run.selection, paper=run.paper,
                  stats=seed_stats(chosen_test), paper_stats=paper_stats, chosen_test=chosen_test,
                  shown=[run.criterion] + ([PAPER_CRITERION] if run.paper is not None else []),
                  params=variant_params(inp.config, inp.prepare))


def _claim_frame(inp: ReportInputs, ch: Chosen) -> pd.DataFrame:
    """The claims under each criterion shown, on the per-instance values when the run kept them."""
    family = family_of(inp.config)   # the run's declared `claims:` (or the default family, declared at its start)
    frames = [f for f in (C.claims(inp.rows, s, c, inp.moments, family=family) for c, s in ch.pairs()) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=C.CLAIM_COLUMNS)


def propensity_note(config: dict) -> str:
    """' Logging propensities: **estimated** ...' naming the datasets run with `logging_propensities:
    estimated` (their importance weights are a fitted model's, not the log's records); '' for none."""
    est = [str(d.get("name")) for d in (config.get("datasets") or []) if isinstance(d, dict)
           and d.get("logging_propensities") == "estimated"]
    return (f" Logging propensities: **estimated** on {', '.join(est)} (every importance weight from a model of "
            "the logging policy cross-fitted on the training log, not the recorded propensities; "
            "docs/estimators.md, \"Logs without propensities\")." if est else "")


def _run_blocks(inp: ReportInputs, ch: Chosen) -> tuple[list[tuple], list[tuple]]:
    """(the warning that opens the report when the criterion has no validation rows, or nothing; the
    'Run' section: the header, that warning, the coverage notes)."""
    config, rows = inp.config, inp.rows
    folds = (config.get("selection") or {}).get("cross_fit") if isinstance(config.get("selection"), dict) else None
    where = f"cross-fitted over {folds} folds of the whole log" if folds else "validation log"
    header = (f"Run directory `{inp.run_dir.name}`. {len(rows)} result rows, {int(rows['final'].sum())} final. "
              f"Selection criterion: **{ch.criterion}** ({where}); "
              + (f"protocol: **{ch.protocol}**. " if ch.protocol else "protocol: not recorded in config.yaml. ")
              + f"Regenerate with `poxm report {_shown(inp.run_dir)}`." + propensity_note(config))
    run: list[tuple] = [("h2", "Run"), ("p", header)]
    criteria = val_criteria(rows)
    warn: list[tuple] = []
    if criteria and ch.criterion not in criteria and (rows["final"] & (rows["split"] == "val")).any():
        warn = [("p", f"**The selection criterion {ch.criterion} has no validation rows** (present: "
                      f"{', '.join(criteria)}): methods with several grid points are not selected.")]
    run += warn + [("h2", "Coverage of the sweep"),
                   ("ul", coverage_notes(rows, ch.selection, inp.expected, inp.grid, inp.source, criterion=ch.criterion))]
    return warn, run


def _submit_dataset_tables(inp: ReportInputs, ch: Chosen) -> dict:
    """Each dataset's tables, handed to the worker processes (they take work in the order it is asked for)."""
    snis = (ch.paper_stats, ch.paper) if ch.paper is not None else None
    return {d: inp.pool.submit(dataset_tables, d, inp.variants_of[d], ch.stats, inp.expected, ch.selection,
                               ch.criterion, ch.params, snis, inp.rows_of[d], inp.prepare, ch.protocol, inp.tdir,
                               inp.out)
            for d in inp.datasets}


def _headline_blocks(inp: ReportInputs, ch: Chosen, verdict: str | None = None) -> list[tuple]:
    """The headline R@5 table per dataset, led by what the run shows (logging policy, POXM, skyline) and
    each with the notes on a learner below the logging policy; the line on how to get verdicts (a run
    with too few seeds: `verdict`); then the share of the logging -> skyline gap closed."""
    blocks: list[tuple] = [("h2", "Headline: test R@5")]
    tables = [T.headline_table(d, inp.variants_of[d], ch.stats, inp.expected, ch.criterion, ch.params)
              for d in inp.datasets if inp.variants_of[d]]
    if tables:
        blocks += [("p", line) for line in FS.phenomenon_lines(pd.concat([t.frame for t in tables]))]
    for t in tables:
        t.notes += FS.below_logging_notes(t.frame, inp.prepare)
        blocks += table_blocks(t, ch.protocol, inp.tdir, inp.out)
    if verdict:
        blocks.append(("p", f"**{FS.VERDICT_LEAD}**{verdict[len(FS.VERDICT_LEAD):]}"))
    gaps = gap_shares(inp.rows, ch.selection, ch.criterion)
    if len(gaps):
        blocks.append(("h2", "Share of the logging → skyline gap closed"))
        blocks += table_blocks(gap_table(gaps), ch.protocol, inp.tdir, inp.out)
    return blocks


def _paper_figure_blocks(inp: ReportInputs, ch: Chosen) -> list[tuple]:
    """The paper's figures per dataset (covering, already drawing; robustness), as pending blocks."""
    blocks: list[tuple] = [("h2", "The paper's figures")]
    for d in inp.datasets:
        blocks += [("pending", inp.covering[d]),
                   ("pending", inp.pool.submit(F.robustness_figure, inp.rows_of[d], ch.selection, inp.prepare, d,
                                               inp.fdir, criterion=ch.criterion))]
    return blocks


def _dataset_blocks(inp: ReportInputs, ch: Chosen, sections: dict) -> list[tuple]:
    """Per dataset: each variant's tables and estimator figure, the dataset's own tables, its sharpness figure."""
    blocks: list[tuple] = []
    for d in inp.datasets:
        blocks.append(("h2", f"Dataset {d}"))
        for i, v in enumerate(inp.variants_of[d]):
            blocks.append(("pending blocks", sections[d], i))
            blocks.append(("pending", inp.estimators[(d, v)]))
        blocks.append(("pending blocks", sections[d], len(inp.variants_of[d])))
        blocks.append(("pending", inp.pool.submit(F.sharpness_figure, ch.chosen_test, ch.params, d, inp.fdir,
                                                  criterion=ch.criterion)))
    return blocks


def _resolved(blocks: list[tuple], protocol: str | None, out: Path) -> list[tuple]:
    """The pending figures and tables, waited for in order, as their index blocks."""
    resolved: list[tuple] = []
    for blk in blocks:
        if blk[0] == "pending":
            resolved += figure_blocks(blk[1].result(), protocol, out)
        elif blk[0] == "pending blocks":
            resolved += blk[1].result()[blk[2]]
        else:
            resolved.append(blk)
    return resolved


def _selection_blocks(inp: ReportInputs, ch: Chosen) -> list[tuple]:
    """How the heads were chosen, the link to selection.csv, the stability and grid-edge tables."""
    blocks: list[tuple] = [
        ("h2", "Selection"),
        ("p", f"Per (dataset, variant, method, seed): the (p, λ) with the highest {ch.criterion} estimate on the "
              f"validation log (selection='{ch.label}'; criterion from config.yaml `selection.criterion`, "
              "default IS; ties → smaller p, then smaller λ)"
              + (f"; beside it the paper's criterion {PAPER_CRITERION} (selection="
                 f"'{selection_label(PAPER_CRITERION)}')" if ch.paper is not None else "")
              + ", and apart, the oracle choice by test R@5 (selection='oracle', uses test labels, "
                "never used by the tables)."),
        ("links", [("selection.csv", SELECTION_LINK)])]
    blocks += table_blocks(stability_table([stability(s, c) for c, s in ch.pairs()], ch.shown),
                           ch.protocol, inp.tdir, inp.out)
    edges = [grid_edges(inp.rows, s, c) for c, s in ch.pairs()] + [grid_edges(inp.rows, ch.selection, ORACLE)]
    if any(len(e) for e in edges):
        blocks += table_blocks(grid_edges_table(edges, ch.shown), ch.protocol, inp.tdir, inp.out)
    return blocks


def _selected_blocks(inp: ReportInputs) -> None:
    """The rest of _write_report, once the selection-free figures are being drawn: selection,
    aggregation, claims, the tables and the other figures, index.md and index.html. Order: title,
    claims, headline R@5 table, the paper's figures (covering, robustness), then the rest; below the seeds
    a verdict needs, the headline table and how to get verdicts come before the claims."""
    ch = _chosen(inp)
    name = str(inp.config.get("name", inp.run_dir.name))
    warn, run = _run_blocks(inp, ch)
    blocks: list[tuple] = [("h1", f"poxm report — {name}")]
    frame = _claim_frame(inp, ch)
    claims = claims_blocks(frame, ch.shown, inp.tdir, inp.out, ch.protocol) + warn
    sections = _submit_dataset_tables(inp, ch)
    if not FS.needs_seeds(frame):
        blocks += claims + _headline_blocks(inp, ch)
    else:
        blocks += _headline_blocks(inp, ch, FS.verdict_line(_shown(inp.run_dir), inp.rows["seed"].unique(),
                                                            merged=FS.is_merged(inp.run_dir))) + claims
    blocks += _paper_figure_blocks(inp, ch)
    # beyond the paper: the logging-quality landscape, the variance a re-drawn split adds (each only where the run has one)
    blocks += landscape_blocks(inp.rows, ch.selection, ch.criterion, inp.config, inp.prepare,
                               inp.moments, ch.protocol, inp.tdir, inp.fdir, inp.out)
    blocks += split_variance_blocks(frame, ch.stats, inp.config, ch.criterion, ch.protocol, inp.tdir, inp.out)
    blocks += run + sweep_table_blocks(inp.run_dir, ch.protocol, inp.tdir, inp.out) + _dataset_blocks(inp, ch, sections)
    blocks = _resolved(blocks, ch.protocol, inp.out) + _selection_blocks(inp, ch)
    write_text(inp.out / "index.md", render_markdown(blocks))
    write_text(inp.out / "index.html", render_html(blocks, f"poxm report — {name}", inp.out))


def build_report(run_dir: str | os.PathLike, selection: RunSelection | None = None, moments=None) -> Path:
    """Build run_dir/report/ from run_dir/results/*.csv; returns the report directory.

    `selection`: the run's selection (`orchestration.selection.select_run`, computed once by the run
    with its validated config's criterion); without it (a report built on its own) the report selects
    with the criterion of run_dir/config.yaml. `moments`: where the claims' per-instance terms come from
    (an instance_moments source: a published folder's); by default run_dir/results/test_instances.npz.

    Built in a temporary directory beside it, then swapped in, so a failed build leaves the old
    report untouched and no half-written report looks complete.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PoxmInputError(f"{run_dir}: run directory not found")
    final = run_dir / "report"
    tmp = Path(tempfile.mkdtemp(prefix=".report.tmp-", dir=run_dir))
    try:
        _write_report(run_dir, tmp, selection, moments)
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
