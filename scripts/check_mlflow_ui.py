#!/usr/bin/env python
"""Open a sweep's MLflow UI in a real browser and check what a researcher sees without a click.

    .venv/bin/python scripts/check_mlflow_ui.py RUN_DIR [--shots DIR] [--port N]

Starts `poxm ui RUN_DIR`, renders its pages in headless Chromium (Debian's `chromium`: its JavaScript
run, then the page's DOM dumped and a screenshot taken, each with a fresh browser profile) and checks:

- the runs table: every grid point's run is listed under the sweep's run (unfolded), its name not cut
  (the name column is wide enough for the longest), and the columns method, variant, p, lam, seed,
  the validation estimate and test/R_at_5 are there, inside the first screen (no scrolling, no click);
  the p and λ of a POXM point are in its row;
- the chart view: no more than MAX_CHARTS_BEFORE_CURVES charts before the first training curve
  (train/loss).

With --shots DIR, the screenshots are kept there: mlflow_runs.png, mlflow_charts.png, mlflow_run.png.
Exit status 0 when every check passes, 1 otherwise (each failure one line); 2 without chromium.
"""
from __future__ import annotations

import argparse
import html as htmllib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_CHARTS_BEFORE_CURVES = 20
WINDOW = (1600, 900)           # the screen the checks hold for (a laptop's browser window)
NAME_PX = 7.5                  # width of one character of a run name in MLflow's table font, generously
COLUMNS = ("params.`method`", "params.`variant`", "params.`p`", "params.`lam`", "params.`seed`",
           "metrics.`test/R_at_5`")


def browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def render(exe: str, url: str, profile: Path, size=WINDOW, shot: Path | None = None) -> str:
    """The page's DOM after its JavaScript ran (and a screenshot when `shot`)."""
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
            f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=25000", "--hide-scrollbars"]
    if shot is not None:
        subprocess.run(base + [f"--screenshot={shot}", url], capture_output=True, timeout=240)
    out = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=240)
    return out.stdout


def cells(dom: str, col: str) -> list[tuple[int, int, str]]:
    """(left px, width px, text) of the table's cells (the header first) in column `col`."""
    out = []
    for m in re.finditer(r'col-id="' + re.escape(col) + r'"[^>]*?style="left: (\d+)px; width: (\d+)px;"', dom):
        rest = dom[m.end():m.end() + 4000]
        rest = rest[rest.find(">") + 1:]
        ends = [i for i in (rest.find('<div class="ag-cell '), rest.find('role="gridcell"'),
                            rest.find('role="columnheader"'), rest.find('role="row"')) if i >= 0]
        rest = rest[:min(ends)] if ends else rest
        rest = rest[:rest.rfind("<")] if rest.rstrip().endswith('"') else rest
        text = re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]*>?", " ", rest))).strip()
        out.append((int(m.group(1)), int(m.group(2)), text))
    return out


def chart_sections(dom: str) -> list[tuple[str, int]]:
    """The chart view's sections in order: (name, number of charts)."""
    text = re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", " | ", dom)))
    text = re.sub(r"\|[ |]*\|", "|", text)
    return [(m.group(1).strip(), int(m.group(2)))
            for m in re.finditer(r"\| ([^|]{1,200}?) \| \((\d+)\) \| Add chart", text)]


def charts_before_curves(sections: list[tuple[str, int]]) -> int | None:
    """Charts shown before the section of the training curves ('train'); None without one."""
    n = 0
    for name, count in sections:
        if name.split("/")[0] == "train" or name == "train":
            return n
        n += count
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(run_dir: Path, port: int) -> tuple[subprocess.Popen, str]:
    poxm = REPO / ".venv" / "bin" / "poxm"
    cmd = [str(poxm)] if poxm.exists() else [sys.executable, "-m", "orchestration.cli"]
    proc = subprocess.Popen(cmd + ["ui", str(run_dir), "--port", str(port)], cwd=REPO, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("MLflow UI: "):
            return proc, line.split("MLflow UI: ", 1)[1].strip()
    stop(proc)
    raise RuntimeError("poxm ui did not print its URL")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def check(run_dir: Path, shots: Path | None = None, port: int | None = None, say=print) -> list[str]:
    """Every failed check, one line each (empty: all pass)."""
    exe = browser()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install -y chromium)")
    run_dir = Path(run_dir).resolve()
    ml = json.loads((run_dir / "mlflow_runs.json").read_text())
    exp_id = str(ml["experiment_id"])
    port = port or free_port()
    proc, url = start_ui(run_dir, port)
    base = url.split("/#/")[0]
    fails: list[str] = []
    try:
        from mlflow import MlflowClient
        runs = MlflowClient(base).search_runs([exp_id], max_results=5000)
        points = [r for r in runs if r.data.tags.get("poxm.role") == "point"]
        criterion = "IS"
        with tempfile.TemporaryDirectory(prefix="poxm-ui-check-") as tmp:
            tmp = Path(tmp)
            shot = (shots / "mlflow_runs.png") if shots else None
            dom = render(exe, url, tmp / "p1", shot=shot)
            # every point rendered: a window tall enough for every row (the table draws what is on screen)
            tall = render(exe, url, tmp / "p2", size=(WINDOW[0], 200 + 40 * (len(runs) + 2)))
            names = [c[2] for c in cells(tall, "attributes.`Run Name`")[1:]]   # '#<colour> <name>'
            missing = sorted(r.info.run_name for r in points
                             if not any(n == r.info.run_name or n.endswith(" " + r.info.run_name) for n in names))
            if missing:
                fails.append(f"runs table: {len(missing)} grid point(s) not listed, e.g. {missing[:3]}")
            head = cells(dom, "attributes.`Run Name`")
            longest = max((len(r.info.run_name) for r in points), default=0)
            if not head or head[0][1] < 60 + NAME_PX * longest:
                fails.append(f"runs table: the name column ({head[0][1] if head else 0} px) cuts names of "
                             f"{longest} characters")
            crit_col = next((c for c in (f"metrics.`val/{criterion}`", "metrics.`val/IS`") if cells(dom, c)), None)
            for col in COLUMNS + ((crit_col,) if crit_col else ("metrics.`val/IS`",)):
                got = cells(dom, col)
                if not got:
                    fails.append(f"runs table: no column {col}")
                elif got[0][0] + got[0][1] > WINDOW[0] - 250 - (head[0][1] if head else 0):
                    fails.append(f"runs table: column {col} is off the first screen (left {got[0][0]} px)")
            pts = {c[2] for c in cells(tall, "params.`p`")[1:]} - {"none", "-", ""}
            lams = {c[2] for c in cells(tall, "params.`lam`")[1:]} - {"none", "-", ""}
            if not pts or not lams:
                fails.append("runs table: no p or λ value in the rows")
            r5 = [c[2] for c in cells(tall, "metrics.`test/R_at_5`")[1:] if c[2] not in ("-", "")]
            if not r5:
                fails.append("runs table: no test/R_at_5 value in the rows")
            chart_url = url + ("&" if "?" in url else "?") + "compareRunsMode=CHART"
            cdom = render(exe, chart_url, tmp / "p3", shot=(shots / "mlflow_charts.png") if shots else None)
            secs = chart_sections(cdom)
            before = charts_before_curves(secs)
            if before is None:
                fails.append(f"chart view: no training curves (sections: {secs[:8]})")
            elif before > MAX_CHARTS_BEFORE_CURVES:
                fails.append(f"chart view: {before} charts before the first training curve "
                             f"(at most {MAX_CHARTS_BEFORE_CURVES}; sections {secs[:8]})")
            if shots and points:
                one = next((r for r in points if r.data.tags.get("method") == "poxm"), points[0])
                render(exe, f"{base}/#/experiments/{exp_id}/runs/{one.info.run_id}", tmp / "p4",
                       shot=shots / "mlflow_run.png")
            say(f"runs table: {len(points)} grid points, {len(points) - len(missing)} listed; p {sorted(pts)[:4]}, "
                f"λ {sorted(lams)[:4]}; test/R_at_5 e.g. {r5[:2]}; chart sections {secs[:6]}; "
                f"{before} chart(s) before the first training curve")
    finally:
        stop(proc)
    return fails


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--shots", type=Path, default=None, help="keep the screenshots in this folder")
    ap.add_argument("--port", type=int, default=None)
    a = ap.parse_args(argv)
    if browser() is None:
        print("check_mlflow_ui: no chromium on PATH (apt-get install -y chromium)", file=sys.stderr)
        return 2
    if a.shots:
        a.shots.mkdir(parents=True, exist_ok=True)
    fails = check(a.run_dir, a.shots, a.port)
    for f in fails:
        print(f"FAIL {f}")
    print("ok" if not fails else f"{len(fails)} check(s) failed")
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
