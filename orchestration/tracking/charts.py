"""The chart view `poxm ui` opens a sweep's runs page on (MLflow 3.17's runs-page state: its charts and
their sections, which the page otherwise generates one per metric, sections in alphabetical order: 18
bar charts of test metrics before the first training curve).

Sections, in this order (`isAccordionReordered` keeps it): 'selection' (the validation estimate the
selection uses against p, one point per run, and its curve over the epochs), 'train' (the loss curves),
'val' (the other estimates and the effective sample size, per epoch), then folded: 'test' (one bar per
run and metric), 'val_truth'; a section for any other prefix (unfolded), and MLflow's own 'Model metrics'
and 'System metrics' (folded); a chart for every metric the sweep's store holds (store_keys). The headers of the
sections whose scales differ name their units (`section_titles`: an estimate is a reward per slate, 0 to
the slate size; a test metric ×100; the ESS a number of instances): MLflow's chart titles are the metric
names and cannot be set. A metric logged after the page was opened (a sweep still running) gets its
chart from MLflow, in a section named by its prefix.

The chart objects carry the fields of MLflow's own chart classes (RunsChartsLineCardConfig,
RunsChartsScatterCardConfig, RunsChartsBarCardConfig in its JavaScript bundle); a test renders the view
in headless Chromium (tests/orchestration/tracking/test_ui_browser.py).
"""
from __future__ import annotations

from pathlib import Path

from poxm_core.common.results import mlflow_name

MODEL_SECTION, SYSTEM_SECTION = "Model metrics", "System metrics"     # MLflow's own section names
# the metrics a sweep logs when the store cannot be read for them (a chart of a metric no run has is hidden)
TEST_METRICS = [f"{m}@{k}" for m in ("R", "nDCR", "PSR") for k in (1, 3, 5)] + \
               [f"{m}@{k}" for m in ("P", "nDCG", "PSP") for k in (1, 3, 5)]
VAL_ESTIMATES = ("IS", "sIS", "SNIS", "DR", "PIS", "MIPS", "OffCEM")
# (key, unfolded): 'selection' is poxm's own; the others are the metric prefixes MLflow files charts under
SECTIONS = (("selection", True), ("train", True), ("val", True), ("test", False), ("val_truth", False))
LAST = ((MODEL_SECTION, False), (SYSTEM_SECTION, False))


def section_titles(criterion: str, slate_size: int) -> dict[str, str]:
    """The headers that carry the units (a section's header is its name; MLflow's chart titles are
    metric names and cannot be set)."""
    reward = f"reward per slate, 0–{slate_size}"
    return {"selection": f"selection: val/{mlflow_name(criterion)} against p ({reward})",
            "val": f"val: per epoch ({reward}; ESS in instances)",
            "test": "test: ×100 (R_at_5 = 23.40 is 23.40 %)"}


def default_keys(criterion: str = "IS") -> dict[str, int]:
    """{metric: its last step} a sweep logs, when its store cannot be read: per epoch (step ≥ 1) the loss,
    the estimates and their standard errors, the ESS; once (step 0) the test metrics."""
    keys = {"train/loss": 1, "val/ESS": 1}
    keys.update({f"val/{mlflow_name(e)}{se}": 1 for e in VAL_ESTIMATES for se in ("", "_se")})
    keys.update({f"test/{mlflow_name(m)}": 0 for m in TEST_METRICS})
    return keys


def store_keys(db: Path, experiment_id: str) -> dict[str, int] | None:
    """{metric: the largest last step of any run} of an experiment in a SQLite MLflow store, read-only;
    None when it cannot be read (another store's schema, a damaged file)."""
    import sqlite3
    try:
        con = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT m.key, MAX(m.step) FROM latest_metrics m JOIN runs r ON m.run_uuid = "
                               "r.run_uuid WHERE r.experiment_id = ? GROUP BY m.key", (int(experiment_id),)).fetchall()
        finally:
            con.close()
    except (sqlite3.Error, ValueError, OSError):
        return None
    return {str(k): int(step) for k, step in rows}


def _card(kind: str, uuid: str, section: str, title: str) -> dict:
    return {"uuid": uuid, "type": kind, "runsCountToCompare": 100, "metricSectionId": section, "deleted": False,
            "isGenerated": False, "displayName": title}


def line_chart(uuid: str, section: str, metric: str, title: str) -> dict:
    """A metric's curve over the epochs (step), one line per run."""
    return {**_card("LINE", uuid, section, title), "metricKey": metric, "selectedMetricKeys": [metric],
            "lineSmoothness": 0, "xAxisScaleType": "linear", "scaleType": "linear",
            "range": {"xMin": None, "xMax": None, "yMin": None, "yMax": None}, "xAxisKey": "step",
            "selectedXAxisMetricKey": "", "yAxisKey": "metric", "yAxisExpressions": [], "ignoreOutliers": False,
            "useGlobalXaxisKey": True, "useGlobalLineSmoothing": True}


def bar_chart(uuid: str, section: str, metric: str, title: str) -> dict:
    """A metric logged once: one bar per run."""
    return {**_card("BAR", uuid, section, title), "metricKey": metric, "selectedMetricKeys": [metric]}


def scatter_chart(uuid: str, section: str, x_param: str, y_metric: str, title: str) -> dict:
    """One point per run: a parameter (x) against a metric's last value (y)."""
    return {**_card("SCATTER", uuid, section, title), "xaxis": {"key": x_param, "type": "PARAM"},
            "yaxis": {"key": y_metric, "type": "METRIC"}}


def chart_view(criterion: str = "IS", slate_size: int = 5,
               keys: dict[str, int] | None = None) -> tuple[list[dict], list[dict]]:
    """(compareRunSections, compareRunCharts) of the sweep's chart view. `criterion`: the validation
    estimate the selection uses; `slate_size`: the k of a slate (an estimate lies in [0, k]); `keys`: the
    sweep's metrics with their last step (store_keys; default_keys when None). Every metric gets its
    chart here, in the section of its prefix (a prefix of no section here: a section of its own, unfolded,
    before MLflow's): MLflow files a chart it makes itself under the section named as the prefix, and
    would open a second 'val' or 'test' beside the ones renamed with their units. A metric logged at an
    epoch (step ≥ 1) is a curve, one logged once a bar (MLflow's own rule)."""
    keys = default_keys(criterion) if keys is None else keys
    titles = section_titles(criterion, slate_size)
    order = [*SECTIONS, *[(k, True) for k in sorted({m.split("/")[0] for m in keys} - {n for n, _ in SECTIONS})], *LAST]
    sec = {name: f"poxm-section-{name.replace(' ', '-').lower()}" for name, _ in order}
    sections = [{"uuid": sec[name], "name": titles.get(name, name), "display": unfolded, "isReordered": True,
                 "deleted": False, "isGenerated": False} for name, unfolded in order]
    crit = f"val/{mlflow_name(criterion)}"
    charts = [scatter_chart("poxm-selection-p", sec["selection"], "p", crit, f"{crit} against p"),
              line_chart("poxm-selection-curve", sec["selection"], crit, f"{crit} per epoch")]
    for m in sorted(keys, key=lambda m: (m != "train/loss", m)):
        if m == crit or "/" not in m:
            continue
        make = line_chart if keys[m] >= 1 else bar_chart
        charts.append(make(f"poxm-{m}", sec[m.split("/")[0]], m, m))
    return sections, charts
