"""The report's index blocks (orchestration.report.index renders them): each table stamped with the
run's protocol, written (csv, md, tex) and shown with its links; each figure with its files; a
dataset's tables, built by the report's worker processes; the claims that open the report."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from orchestration.report import claims as C
from orchestration.report import figures as F
from orchestration.report import paper
from orchestration.report import tables as T
from orchestration.report.inference import MIN_SEEDS
from orchestration.report.logging_table import logging_stats_table
from orchestration.report.spearman import spearman_data, spearman_table
from orchestration.selection import PAPER_CRITERION, selection_label


def stamp_table(t: T.Table, protocol: str | None) -> T.Table:
    """Name the protocol in the table's caption (title) and CSV."""
    if protocol:
        t.title = f"{t.title} (protocol: {protocol})"
        if len(t.frame.columns):
            t.frame = t.frame.assign(protocol=protocol)
    return t


def stamp_figure(fig: F.Figure, protocol: str | None) -> F.Figure:
    return dataclasses.replace(fig, caption=f"{fig.caption} Protocol: {protocol}.") if protocol else fig


def table_blocks(t: T.Table, protocol: str | None, tdir: Path, out: Path) -> list[tuple]:
    """A table stamped with the protocol, written (csv, md, tex), and its index blocks."""
    t = stamp_table(t, protocol)
    return [("table", t), ("links", [(ext.upper(), str(p.relative_to(out))) for ext, p in T.write_table(t, tdir).items()])]


def dataset_tables(d: str, variants: list[str], stats: pd.DataFrame, expected: pd.DataFrame, selection: pd.DataFrame,
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
            blocks += table_blocks(t, protocol, tdir, out)
        if snis is not None:
            blocks.append(("p", f"(p, λ) selected by {PAPER_CRITERION}, the paper's criterion:"))
            for t in _paper_tables(d, v, snis[0], snis[1], expected, show_paper, params.get((d, v))):
                blocks += table_blocks(t, protocol, tdir, out)
        parts.append(blocks)
    blocks = []
    sp = spearman_data(rows_d, d)   # both read only the dataset's final rows
    if len(sp):
        blocks += [("h3", f"{d}: selection criteria against test R@5")] + table_blocks(spearman_table(d, sp, criterion),
                                                                                     protocol, tdir, out)
    if (prepare["dataset"] == d).any():
        blocks += [("h3", f"{d}: logging policy")] + table_blocks(logging_stats_table(d, prepare, rows_d),
                                                                  protocol, tdir, out)
    parts.append(blocks)
    return parts


def claims_blocks(frame: pd.DataFrame, criteria: list[str], tdir: Path, out: Path,
                   protocol: str | None) -> list[tuple]:
    """The report's opening: a sentence, then the claims table (tables/claims.{csv,md,tex})."""
    names = " and ".join(C.criterion_name(c) for c in criteria)
    if frame.empty:
        return [("p", "Claims: none can be checked here (no claim has both of its methods, or both "
                      "variants A and C, in this run's results).")]
    t = stamp_table(C.claims_table(frame, criteria), protocol)
    paths = T.write_table(t, tdir)
    n = pd.to_numeric(frame["n"], errors="coerce").max() if "n" in frame else float("nan")
    enough = bool(n >= MIN_SEEDS)            # below it no cell has an interval or a verdict (claims.py)
    how = ("a 95 % interval that covers seed variation and test-set sampling, the seeds that agree, and a "
           "verdict from Holm's correction over the run's whole declared family of claims" if enough else
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


def figure_blocks(fig: F.Figure | None, protocol: str | None, out: Path) -> list[tuple]:
    """A figure stamped with the protocol and its index block (its first file shown, every file linked)."""
    if fig is None:
        return []
    fig = stamp_figure(fig, protocol)
    return [("figure", str(fig.paths[0].relative_to(out)), fig.title, fig.caption,
             [(p.suffix[1:].upper(), str(p.relative_to(out))) for p in fig.paths])]
