"""The lines `poxm run`, `poxm resume` and `poxm report` end with: what the run shows, the headline
table (test R@5 ×100 of the selected heads), the notes on numbers that look like bugs, then either the
claims with their verdicts or, below the seeds a verdict needs, one line on how to get verdicts and one
line on where the claims are (the report's claims table); then where the report is.

The same sentences as the report's first screen (orchestration/report/first_screen.py)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

from orchestration.cli_parser import poxm_command


def headline(run_dir: Path) -> str | None:
    """The end-of-run table, in the report's units and order: test R@5 x100 of the (p, lambda) each
    method's selection criterion chose on validation, mean over seeds, one row per dataset x method
    (the report's method order and names), one column per variant."""
    import pandas as pd

    from orchestration.report.tables import method_list, method_name
    f = Path(run_dir) / "results" / "selection.csv"
    if not f.is_file():
        return None
    from orchestration.selection import RunSelection
    sel = RunSelection.from_frame(pd.read_csv(f)).honest()
    if sel.empty or "test_R@5" not in sel or sel["test_R@5"].isna().all():     # a logged sweep has no R@5
        return None
    t = sel.pivot_table(index=["dataset", "method"], columns="variant", values="test_R@5", aggfunc="mean") * 100
    order = method_list(sorted(sel["method"].astype(str).unique()))
    t = t.reindex(sorted(((d, m) for d in t.index.get_level_values(0).unique() for m in order if (d, m) in t.index),
                         key=lambda dm: (dm[0], order.index(dm[1]))))
    t.index = [f"{d}  {method_name(m)}" for d, m in t.index]
    t.columns.name = None
    crit = ", ".join(sorted(sel["criterion"].astype(str).unique()))
    n = sel["seed"].nunique()
    return (f"test R@5 (x100) of the selected (p, lambda) (by {crit} on validation; mean of {n} seed(s)):\n"
            + t.to_string(float_format=lambda v: f"{v:.2f}", na_rep="-"))


def wrapped(text: str, indent: str = "  ") -> str:
    """A long sentence folded to the terminal's width (at most 110 columns), its later lines indented."""
    width = min(max(shutil.get_terminal_size((100, 24)).columns, 60), 110)
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_on_hyphens=False)


def shown(run_dir) -> str:
    """The run directory as typed back: relative to the working directory when inside it."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(run_dir)


def lead_lines(run_dir: Path) -> list[str]:
    """What the run shows, the headline table and the notes under it (a learner below the logging
    policy), as printed lines; [] for a run without test R@5 (a logged sweep)."""
    from orchestration.report import first_screen as FS
    from orchestration.report.inputs import read_prepare
    table = headline(run_dir)
    frame = FS.selection_frame(run_dir)
    if table is None or frame is None:
        return []
    prepare = read_prepare(Path(run_dir) / "results" / "prepare.csv")
    return ([wrapped(x) for x in FS.phenomenon_lines(frame)] + ["", table]
            + [wrapped("note: " + x) for x in FS.below_logging_notes(frame, prepare)])


def claims_lines(run_dir: Path, report: Path | None) -> list[str]:
    """With verdicts: the report's claims, compact (claims_display.summary_text). Below the seeds a
    verdict needs: how to get verdicts (`poxm resume RUN --add-seeds ...`) and where the claims'
    differences are, two lines instead of a table of 'too few seeds'."""
    from orchestration.report import first_screen as FS
    from orchestration.report.claims import read_claims, summary_from_report
    frame = read_claims(report) if report is not None else None
    if not FS.needs_seeds(frame):
        text = summary_from_report(report) if report is not None else None
        return ([text, "(intervals, seeds > 0 and Holm-adjusted p-values: the report's claims table)"]
                if text else [])
    out = []
    line = FS.verdict_line(shown(run_dir), FS.run_seeds(run_dir), command=poxm_command(), merged=FS.is_merged(run_dir))
    if line:
        out.append(wrapped(line))
    if frame is not None and len(frame):
        first = frame[frame["criterion"] == frame["criterion"].iloc[0]]
        out.append(wrapped(f"claims: {len(first)} compared (the mean paired difference over seeds, no verdict "
                           "yet): the report's claims table"))
    return out


def print_end(run_dir: Path, report: Path | None) -> None:
    """The end of `poxm run` / `resume` / `report`: the lead, then the claims or how to get verdicts; a
    logged sweep's off-policy estimates instead of the R@5 table."""
    lead = lead_lines(run_dir)
    if not lead and report is not None:      # a logged sweep: the off-policy estimates instead
        from orchestration.report.logged import terminal_headline
        table = terminal_headline(Path(report))
        lead = [table] if table else []
    if lead:
        print("\n" + "\n".join(lead))
    claims = claims_lines(run_dir, report)
    if claims:
        print("\n" + "\n".join(claims))
    print()


def complete_line(plan) -> str | None:
    """`poxm resume` on a finished sweep: the line saying so (every trial done and the report built), or
    None when there is something to resume."""
    from orchestration.stages.trial_files import done_trials
    rd = plan.rd
    done = done_trials(rd.root, plan.names)
    if len(done) < len(plan.names) or not (rd.root / "report" / "index.md").is_file():
        return None
    return (f"poxm: {shown(rd.root)} is complete: all {len(done)} trial(s) done and the report built; nothing to "
            f"resume (rebuild the report with `{poxm_command()} report {shown(rd.root)}`).")
