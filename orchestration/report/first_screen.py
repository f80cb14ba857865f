"""What the first screen of a run says, wherever it is shown (the report, the end of `poxm run`, the
MLflow parent run): the phenomenon the run measures, how to get verdicts when it has too few seeds for
any, and the explanation of a number that looks like a bug (a learner below the logging policy).

All of it reads a headline frame: one row per (dataset, variant, method) with `mean`, the test R@5 ×100
at the selected heads, mean over seeds (the report's headline table's frame, or `selection_frame`
from results/selection.csv), and, for the explanations, the prepare statistics (results/prepare.csv:
`data/L`, `data/labels_per_instance`). Pure functions; the callers place the lines.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from orchestration.report.inference import MIN_SEEDS
from orchestration.report.method_names import method_name

SKYLINES = ("skyline_e2e", "skyline")       # the paper's end-to-end skyline first (gap_share.py's choice)
LEARNER = "poxm"
NEAR_UNIFORM = 2.0       # a mean at most this many times the uniform draw's R@5 reads as a uniform-like policy
NOT_LEARNERS = ("logging", "skyline", "skyline_e2e")
VERDICT_LEAD = "No verdicts yet"


def verdict_seeds(have: Iterable[int], need: int = MIN_SEEDS) -> list[int]:
    """The smallest non-negative seeds not in `have` that bring the run to `need` seeds ([] when it has them)."""
    have = {int(s) for s in have}
    out: list[int] = []
    s = 0
    while len(have) + len(out) < need:
        if s not in have:
            out.append(s)
        s += 1
    return out


def verdict_line(run: str, have: Iterable[int], command: str = "poxm", merged: bool = False) -> str | None:
    """One line on how to get verdicts ('None' when the run has MIN_SEEDS seeds): the seeds it has, the
    seeds to add and the command that adds them in place (`poxm resume RUN --add-seeds 1,2`); a report
    merged from several runs names `poxm report` over runs of other seeds instead."""
    have = sorted({int(s) for s in have})
    add = verdict_seeds(have)
    if not add:
        return None
    n = len(have)
    seeds = ", ".join(map(str, have)) or "none"
    how = (f"run the config with other seeds and merge them (`{command} report {run} RUN_B ...`)" if merged else
           f"add seed{'s' if len(add) > 1 else ''} {', '.join(map(str, add))} with `{command} resume {run} --add-seeds "
           f"{','.join(map(str, add))}` (the new seeds' trials run, then the report covers every seed)")
    return (f"{VERDICT_LEAD}: a claim's verdict needs {MIN_SEEDS} seeds, this run has {n} (seed{'s' if n != 1 else ''} "
            f"{seeds}); {how}.")


def needs_seeds(claims: pd.DataFrame | None) -> bool:
    """Whether the run's claims wait for seeds: it has claims, and none with MIN_SEEDS seeds (no verdict
    anywhere). A run without claims (none checkable, a logged sweep) waits for nothing."""
    if claims is None or not len(claims) or "n" not in claims:
        return False
    return not bool(pd.to_numeric(claims["n"], errors="coerce").max() >= MIN_SEEDS)


def _means(frame: pd.DataFrame, dataset: str, variant: str) -> dict[str, float]:
    f = frame[(frame["dataset"].astype(str) == dataset) & (frame["variant"].astype(str) == variant)]
    f = f[pd.to_numeric(f["mean"], errors="coerce").notna()]
    return {str(m): float(v) for m, v in zip(f["method"], f["mean"])}


def _cells(frame: pd.DataFrame) -> list[tuple[str, str]]:
    return list(dict.fromkeys(zip(frame["dataset"].astype(str), frame["variant"].astype(str))))


def phenomenon_lines(frame: pd.DataFrame) -> list[str]:
    """Per dataset, one line with what the run exists to show: the logging policy, POXM (learning from
    that policy's logged feedback alone) and the supervised skyline (full labels) on test R@5 ×100, and
    the share of the logging → skyline gap POXM closes, per variant. Nothing for a dataset without
    the three."""
    out = []
    for d in dict.fromkeys(frame["dataset"].astype(str)):
        parts = []
        for dd, v in _cells(frame):
            m = _means(frame, dd, v) if dd == d else {}
            sky = next((s for s in SKYLINES if s in m), None)
            if sky is None or "logging" not in m or LEARNER not in m:
                continue
            lo, hi, x = m["logging"], m[sky], m[LEARNER]
            share = f"; POXM closes {100 * (x - lo) / (hi - lo):.0f} % of the gap" if hi - lo > 1e-9 else ""
            parts.append(f"variant {v}: logging policy {lo:.2f} → POXM {x:.2f} (skyline {hi:.2f}{share})")
        if parts:
            out.append(f"What the run shows on {d} (test R@5 ×100): " + "; ".join(parts) + ". POXM learns from the logging policy's "
                       "clicks alone; the skyline is trained on every true label.")
    return out


def uniform_level(prepare: pd.DataFrame | None, dataset: str) -> tuple[float, float, float] | None:
    """(labels per instance, L, the R@5 ×100 of a uniform draw over all L labels = labels per instance / L)
    from prepare.csv's data statistics; None without them."""
    if prepare is None or not len(prepare):
        return None
    p = prepare[prepare["dataset"].astype(str) == dataset]
    vals = {m: pd.to_numeric(p[p["metric"] == m]["value"], errors="coerce").mean()
            for m in ("data/labels_per_instance", "data/L")}
    k, L = vals["data/labels_per_instance"], vals["data/L"]
    if not (k > 0 and L > 0):
        return None
    return float(k), float(L), 100.0 * float(k) / float(L)


def _why_uniform(method: str, k: float, L: float, level: float) -> str:
    why = (" BanditNet's policy is a softmax over all L labels and its gradient reaches only the logged labels "
           "of each instance, so a few epochs leave that softmax nearly flat: the paper's point about BanditNet "
           "at large L, not a broken run (docs/data.md)." if method == "banditnet" else
           " Its policy stayed near-uniform: too few epochs or too small a rate for this loss (docs/data.md).")
    return (f"about what a uniform draw over all {L:,.0f} labels scores ({k:.2f} true labels per instance / "
            f"{L:,.0f} = {level:.2f}).{why}")


def below_logging_notes(frame: pd.DataFrame, prepare: pd.DataFrame | None = None) -> list[str]:
    """One note per learner whose test R@5 is below the logging policy's (the policy that collected
    the log) in some variant: the values, and why where the data says (a uniform-like policy: its
    R@5 within NEAR_UNIFORM times a uniform draw's over all L labels)."""
    below: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
    for d, v in _cells(frame):
        m = _means(frame, d, v)
        if "logging" not in m:
            continue
        for meth, x in m.items():
            if meth not in NOT_LEARNERS and x < m["logging"]:
                below.setdefault((d, meth), []).append((v, x, m["logging"]))
    notes = []
    for (d, meth), cells in below.items():
        vals = ", ".join(f"{v} {x:.2f} against {lo:.2f}" for v, x, lo in cells)
        uni = uniform_level(prepare, d)
        near = uni is not None and all(x <= NEAR_UNIFORM * uni[2] for _, x, _ in cells)
        what = (_why_uniform(meth, *uni) if near else
                "learning from this log did not beat the policy that collected it here (too few epochs, "
                "a grid without a good point, or the method's limit on this data: its selection and results "
                "tables below).")
        notes.append(f"{method_name(meth)} is below the logging policy ({d}: {vals}): {what}")
    return notes


def selection_frame(run_dir: Path) -> pd.DataFrame | None:
    """The headline frame from results/selection.csv: test R@5 ×100 of each method's heads selected by
    the run's criterion, mean over seeds (columns dataset, variant, method, mean, n); None without it."""
    f = Path(run_dir) / "results" / "selection.csv"
    if not f.is_file():
        return None
    from orchestration.selection import RunSelection
    sel = RunSelection.from_frame(pd.read_csv(f)).honest()
    if sel.empty or "test_R@5" not in sel or sel["test_R@5"].isna().all():
        return None
    g = sel.groupby(["dataset", "variant", "method"], sort=True)
    out = g["test_R@5"].mean().mul(100).rename("mean").to_frame()
    out["n"] = g["seed"].nunique()
    return out.reset_index().astype({"dataset": str, "variant": str, "method": str})


def run_seeds(run_dir: Path) -> list[int]:
    """The seeds of a run: its results' (results/selection.csv), else its config's."""
    f = Path(run_dir) / "results" / "selection.csv"
    if f.is_file():
        seeds = pd.read_csv(f, usecols=lambda c: c == "seed")
        if "seed" in seeds and len(seeds):
            return sorted({int(s) for s in seeds["seed"].dropna()})
    from orchestration.report.inputs import read_config
    return sorted({int(s) for s in (read_config(Path(run_dir) / "config.yaml").get("seeds") or [])})


def is_merged(run_dir: Path) -> bool:
    """A report merged from several runs (sweep.json's merged_from): not a sweep `poxm resume` continues."""
    import json
    try:
        return bool(json.loads((Path(run_dir) / "sweep.json").read_text()).get("merged_from"))
    except (OSError, ValueError, AttributeError):
        return False


def shown_run(run_dir) -> str:
    """The run directory as a reader types it: relative to the working directory when inside it, else
    '<runs_dir>/<name>' (no machine's absolute path in a report or a tracking store)."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return f"<runs_dir>/{Path(run_dir).name}"
