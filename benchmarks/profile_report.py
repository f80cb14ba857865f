"""Where the sweep's final stage spends its time: gather rows, selection and the report
(`orchestration.stages.gather.gather_rows` + `select_and_report`, as the end of `orchestration.stages.sweep.execute`
calls them), part by part, without Ray or training.

  python -m benchmarks.profile report [--run-dir DIR | --from docs/results/real-data] [--out DIR]
      [--epochs 20] [--repeat 1] [--cprofile] [--procs 1]

--run-dir: an existing run directory (sweep.json, config.yaml, trials/*/rows.csv + done.json,
results/prepare.csv); its results/ and report/ are rewritten. Without it a run directory is
assembled under --out (default: a temporary folder) from --from, a published folder holding a sweep's
config.yaml, prepare.csv.xz and rows-<dataset>.csv.xz (docs/results/real-data/: the 4-dataset real-data benchmark):
  trials/<dataset>-<variant>-s<seed>/rows.csv + done.json   one trial per (dataset, variant, seed)
  sweep.json       trial names and the grid (every final grid point of the rows)
  config.yaml      as given; results/prepare.csv from prepare.csv.xz
The published rows are only the final ones (5 MB of CSV); the real run's results/rows.csv also had every
epoch's rows (about 35 MB). --epochs N (default 20; 0: none) adds them back: per trained grid point and
epoch 1..N a 'train' loss row and the 'val' estimates but DR (what poxm_core.training.reporting.
epoch_report writes), final=False, values derived from the final ones. The report reads only final rows,
so these change reading and filtering times (and the header's row count), not the numbers.

Prints seconds per part (exclusive: a part's time excludes the parts called inside it), the total and
what is left over ('other'); --cprofile adds cProfile's top 25 by own time. PDF files carry a creation
date: SOURCE_DATE_EPOCH is fixed (0 unless set) so two builds can be compared byte for byte, e.g.

  python -m benchmarks.profile report --out /tmp/a && python -m benchmarks.profile report --out /tmp/b
  diff -r /tmp/a/real-data-profile/report /tmp/b/real-data-profile/report

Figures: POXM_REPORT_PROCS (--procs, default 1: drawn in this process, so each figure's time is
counted here; with a pool the figure parts time only the waiting).
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import math
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN_NAME = "real-data-profile"


# --------------------------------------------------------------------------------------------
# a run directory from a published folder (config.yaml, prepare.csv.xz, rows-<dataset>.csv.xz)

def _epoch_rows(final, epochs: int):
    """The per-epoch rows a trial writes besides its final ones (see the module docstring)."""
    import numpy as np
    import pandas as pd

    trained = final[(final["epoch"] > 0) & (final["split"] == "val") & (final["metric"] != "DR")]
    keys = ["dataset", "variant", "method", "p", "lam", "seed"]
    loss = trained.drop_duplicates(keys).assign(split="train", metric="loss", value=0.5, stderr=math.nan)
    base = pd.concat([loss, trained], ignore_index=True)
    frames = []
    for e in range(1, epochs + 1):
        # values approach the final ones over the epochs (any number would do: the report reads final rows)
        frames.append(base.assign(value=base["value"] * (0.5 + 0.5 * e / epochs), epoch=e, final=False))
    out = pd.concat(frames, ignore_index=True)
    out["stderr"] = np.where(out["split"] == "train", math.nan, out["stderr"])
    return out


def assemble(src: Path, root: Path, epochs: int) -> list[str]:
    """Write a run directory at `root` from `src`; returns the trial names (gather's order)."""
    import pandas as pd

    from poxm_core.common.results import COLUMNS

    from orchestration.report.instances import read_rows

    # a published folder: rows-<dataset>.csv.xz (rows.csv.gz before) and prepare.csv.xz (prepare.csv before)
    rows = read_rows(src)[COLUMNS]
    root.mkdir(parents=True, exist_ok=True)
    (root / "results").mkdir(exist_ok=True)
    (root / "config.yaml").write_text((src / "config.yaml").read_text())
    prepare = next(f for f in (src / "prepare.csv.xz", src / "prepare.csv") if f.is_file())
    pd.read_csv(prepare).to_csv(root / "results" / "prepare.csv", index=False)
    names, grid = [], []
    for (d, v, s), final in rows.groupby(["dataset", "variant", "seed"], sort=False):   # the rows' order
        name = f"{d}-{v}-s{int(s)}"
        names.append(name)
        tdir = root / "trials" / name
        tdir.mkdir(parents=True, exist_ok=True)
        per_epoch = _epoch_rows(final, epochs) if epochs else final.iloc[:0]
        # a trial's rows.csv: every epoch's rows, then the final ones
        pd.concat([per_epoch.sort_values("epoch", kind="stable"), final], ignore_index=True).to_csv(
            tdir / "rows.csv", index=False, columns=COLUMNS)
        (tdir / "done.json").write_text(json.dumps({"name": name}) + "\n")
        for r in final[["method", "p", "lam"]].drop_duplicates().itertuples(index=False):
            grid.append({"dataset": d, "variant": v, "method": r.method, "p": None if r.p < 0 else int(r.p),
                         "lam": None if math.isnan(r.lam) else float(r.lam), "seed": int(s), "trial": name})
    (root / "sweep.json").write_text(json.dumps({"name": root.name, "trials": names, "grid": grid}, indent=1) + "\n")
    return names


# --------------------------------------------------------------------------------------------
# timing: wrap the functions of each part; nested wrapped calls are subtracted (exclusive seconds)

class Timer:
    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []     # per active part: [start, time spent in nested parts]

    def wrap(self, module, attr: str, part: str) -> None:
        fn = getattr(module, attr)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._stack.append([time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                start, nested = self._stack.pop()
                total = time.perf_counter() - start
                self.seconds[part] += total - nested
                self.calls[part] += 1
                if self._stack:
                    self._stack[-1][1] += total
        setattr(module, attr, timed)


def instrument(timer: Timer, pool: bool = False) -> None:
    """Time the report's parts. With a pool (POXM_REPORT_PROCS > 1) the figure functions are pickled to
    its processes, so they are left as they are and the time spent waiting for them is its own part."""
    import orchestration.stages.gather as G
    import orchestration.report.blocks as K
    import orchestration.report.build as B
    import orchestration.report.claims as C
    import orchestration.report.figures as F
    import orchestration.report.tables as T
    import orchestration.selection as SEL

    # the names as the callers look them up (module attributes at call time)
    parts = [
        (G, "read_trial_rows", "gather: read trial rows"),
        (B, "read_rows", "report: read results/rows.csv"),
        (B, "read_prepare", "report: read prepare/config/grid"),
        (B, "read_config", "report: read prepare/config/grid"),
        (B, "read_grid", "report: read prepare/config/grid"),
        (SEL, "select", "selection (select)"),
        (B, "selected_rows", "selected_rows"),
        (C, "selected_rows", "selected_rows"),
        (B, "seed_stats", "aggregation (seed_stats)"),
        (B, "val_criteria", "selection (select)"),
        (C, "claims", "claims (bootstrap intervals)"),
        (C, "claims_table", "tables: claims"),
        (B, "coverage_notes", "coverage notes"),
        (T, "headline_table", "tables: headline"),
        (T, "metric_table", "tables: results/greedy"),
        (T, "selection_table", "tables: selection"),
        (K, "spearman_data", "tables: spearman"),
        (K, "spearman_table", "tables: spearman"),
        (K, "logging_stats_table", "tables: logging"),
        (T, "write_table", "tables: write csv/md/tex"),
        (B, "stability", "tables: stability"),
        (B, "stability_table", "tables: stability"),
        (B, "render_markdown", "index.md"),
        (B, "render_html", "index.html"),
    ]
    if pool:
        from orchestration.report.figure_pool import _Figure
        parts.append((_Figure, "result", "figures: waiting for the pool"))
    else:
        parts += [(F, "covering_figure", "figure: covering"), (F, "robustness_figure", "figure: robustness"),
                  (F, "estimator_figure", "figure: estimators"), (F, "sharpness_figure", "figure: sharpness")]
    for mod, attr, part in parts:
        timer.wrap(mod, attr, part)


def run_stage(rd, names: list[str], say=print):
    """What the end of orchestration.stages.sweep.execute runs."""
    from orchestration.stages.gather import gather_rows, select_and_report
    from orchestration.report.build import read_config, selection_criterion

    criterion = selection_criterion(read_config(rd.config))
    rows = gather_rows(rd, names)
    return select_and_report(rd, criterion, rows, say)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, help="an existing run directory (its results/ and report/ are rebuilt)")
    ap.add_argument("--from", dest="src", type=Path, default=ROOT / "docs" / "results" / "real-data",
                    help="a published folder: config.yaml, prepare.csv.xz, rows-<dataset>.csv.xz (default: %(default)s)")
    ap.add_argument("--out", type=Path, help=f"where to assemble the run directory ({RUN_NAME}/ inside; kept)")
    ap.add_argument("--epochs", type=int, default=20, help="per-epoch rows added per trained point (0: none)")
    ap.add_argument("--repeat", type=int, default=1, help="build this many times; the table shows the fastest")
    ap.add_argument("--procs", default="1", help="POXM_REPORT_PROCS (default 1: figures drawn here)")
    ap.add_argument("--cprofile", action="store_true", help="also print cProfile's top 25 functions (own time)")
    ap.add_argument("--cprofile-out", type=Path, help="with --cprofile: also dump the stats there (pstats/snakeviz)")
    a = ap.parse_args(argv)

    os.environ["POXM_REPORT_PROCS"] = str(a.procs)
    os.environ.setdefault("SOURCE_DATE_EPOCH", "0")     # PDFs without the build's date: comparable files
    from orchestration.rundir import RunDir

    t0 = time.perf_counter()
    if a.run_dir is not None:
        rd = RunDir(a.run_dir.resolve())
        names = json.loads(rd.sweep.read_text())["trials"]
    else:
        base = a.out if a.out is not None else Path(tempfile.mkdtemp(prefix="poxm-profile-report-"))
        rd = RunDir((base / RUN_NAME).resolve())
        names = assemble(a.src, rd.root, a.epochs)
    print(f"run directory {rd.root} ({len(names)} trials; assembled in {time.perf_counter() - t0:.1f} s)")

    import matplotlib
    matplotlib.use("Agg")
    import orchestration.report.build  # noqa: F401  (imports outside the timed region)

    timer = Timer()
    instrument(timer, pool=str(a.procs) != "1")
    best: tuple[float, dict, dict] | None = None
    prof = None
    for i in range(a.repeat):
        timer.seconds.clear()
        timer.calls.clear()
        prof = cProfile.Profile() if a.cprofile else None
        start = time.perf_counter()
        if prof is not None:
            prof.enable()
        report = run_stage(rd, names)
        if prof is not None:
            prof.disable()
        total = time.perf_counter() - start
        if best is None or total < best[0]:
            best = (total, dict(timer.seconds), dict(timer.calls))
        print(f"build {i + 1}: {total:.2f} s -> {report}")

    total, seconds, calls = best
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(f"\nseconds per part (fastest of {a.repeat}; POXM_REPORT_PROCS={a.procs}; {os.cpu_count()} CPUs; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")
    print(f"{'part':<36}{'calls':>7}{'seconds':>10}{'share':>8}")
    for part, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"{part:<36}{calls[part]:>7}{s:>10.2f}{s / total:>8.1%}")
    other = total - sum(seconds.values())
    print(f"{'other (glue, pandas outside parts)':<36}{'':>7}{other:>10.2f}{other / total:>8.1%}")
    print(f"{'total':<36}{'':>7}{total:>10.2f}")
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        if a.cprofile_out is not None:
            prof.dump_stats(a.cprofile_out)
        print("\ncProfile of the last build, top 25 by own time:")
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
