"""`poxm ui` and what MLflow shows, in headless Chromium (Debian's `chromium`; skipped without it), on a
sweep's store made without Ray (fake_sweep.py):

- `poxm ui` says what it starts at once and its URL as soon as its proxy listens; a request made then
  waits for MLflow's server and gets its answer; one more line when the server answers;
- the chart view opens on the selection's estimate against p and the curves (sections selection,
  train, val; test folded), with the units in the section headers;
- a grid point's run page shows its own Duration (its trial's wall time, not its share of the compute)
  and its description with the units.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.orchestration.tracking.fake_sweep import fake_sweep

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
import check_mlflow_ui as ui_check  # noqa: E402  (scripts/ is no package)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(ui_check.browser() is None, reason="no chromium (apt-get install -y chromium)")]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return fake_sweep(tmp_path_factory.mktemp("ui") / "fake-sweep-0123456789ab")


@pytest.fixture(scope="module")
def served(sweep):
    """`poxm ui` on the sweep: (its lines with the seconds since start, the URL, the process)."""
    port = ui_check.free_port()
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "ui", str(sweep), "--port", str(port)],
                            cwd=REPO, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[tuple[float, str]] = []
    try:
        while not any(x.startswith("MLflow UI: ") for _, x in lines):
            line = proc.stdout.readline()
            assert line, "".join(x for _, x in lines)
            lines.append((time.time() - t0, line.rstrip("\n")))
        url = lines[-1][1].removeprefix("MLflow UI: ")
        with urllib.request.urlopen(url.split("/#/")[0] + "/health", timeout=300) as r:   # waits for the server
            assert r.status == 200
        lines.append((time.time() - t0, proc.stdout.readline().rstrip("\n")))
        yield lines, url, proc
    finally:
        ui_check.stop(proc)


def test_the_url_comes_at_once_and_a_request_waits_for_the_server(served):
    lines, url, _ = served
    said = [x for _, x in lines]
    assert said[0].startswith("poxm ui: starting MLflow's server on the store of fake-sweep-0123456789ab")
    assert said[1] == f"MLflow UI: {url}" and "workflowType=machine_learning" in url
    # the server answered only after the URL was out: the request made at the URL's line waited for it
    assert said[2].startswith("poxm ui: MLflow's server answers (") and lines[2][0] > lines[1][0]
    assert lines[1][0] - lines[0][0] < 20          # the store's copy and a process start, not MLflow's start-up


def _text(dom: str) -> str:
    """What the page shows: its text without tags, scripts (poxm ui's view state names every chart) or styles."""
    import html
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


def test_the_chart_view_opens_on_the_selection_and_the_curves(served, tmp_path):
    _, url, _ = served
    dom = ui_check.render(ui_check.browser(), url + "&compareRunsMode=CHART", tmp_path / "profile",
                          shot=tmp_path / "charts.png")
    sections = ui_check.chart_sections(dom)
    names = [n for n, _ in sections]
    assert names[:4] == ["selection: val/IS against p (reward per slate, 0–5)", "train",
                         "val: per epoch (reward per slate, 0–5; ESS in instances)",
                         "test: ×100 (R_at_5 = 23.40 is 23.40 %)"], sections
    assert dict(sections)[names[0]] == 2 and ui_check.charts_before_curves(sections) == 2
    text = _text(dom)
    assert "p vs. val/IS" in text and "train/loss" in text                 # the first charts drawn
    assert "test/PSP_at_1" not in text                                      # the 15 bar charts: folded
    assert sum(n.split(":")[0] == "val" for n in names) == 1                # no second 'val' of MLflow's own


def test_a_run_page_shows_its_own_duration_and_its_units(served, sweep, tmp_path):
    _, url, _ = served
    ml = json.loads((sweep / "mlflow_runs.json").read_text())
    from mlflow import MlflowClient
    base = url.split("/#/")[0]
    run = next(r for r in MlflowClient(base).search_runs([ml["experiment_id"]])
               if r.info.run_name == "A s0 poxm p20 λ.9")
    assert run.data.tags["head_seconds"] == "6.0" and run.data.tags["share_of_trial"] == "0.200"   # 30 s / 5 heads
    assert 345_000 <= run.info.end_time - run.info.start_time < 400_000       # its trial's wall time, 345 s
    text = _text(ui_check.render(ui_check.browser(), f"{base}/#/experiments/{ml['experiment_id']}/runs/"
                                 f"{run.info.run_id}", tmp_path / "profile", shot=tmp_path / "run.png"))
    assert "5.8min" in text, text[-3000:]                                  # MLflow's Duration: 345 s, not 6 s
    assert "Units." in text and "expected reward per slate of 5 labels" in text
