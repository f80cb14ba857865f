"""The chart view `poxm ui` opens a sweep's runs page on (MLflow 3.17's runs-page state: its charts and
their sections, which the page otherwise generates one per metric, sections in alphabetical order: 18
bar charts of test metrics before the first training curve).

Sections, in this order (`isAccordionReordered` keeps it): 'selection' (the validation estimate the
selection uses against p, one point per run, and its curve over the epochs), 'train' (the loss curves),
'val' (the other estimates and the effective sample size, per epoch), then folded: 'test' (one bar per
run and metric), 'val_truth', and MLflow's own 'Model metrics' and 'System metrics'. The headers of the
sections whose scales differ name their units (`section_titles`: an estimate is a reward per slate, 0 to
the slate size; a test metric ×100; the ESS a number of instances): MLflow's chart titles are the metric
names and cannot be set. A metric no chart names here (a test metric of a plugin) still gets its chart
from MLflow, in a section named by its prefix.

The chart objects carry the fields of MLflow's own chart classes (RunsChartsLineCardConfig,
RunsChartsScatterCardConfig, RunsChartsBarCardConfig in its JavaScript bundle); a test renders the view
in headless Chromium (tests/orchestration/tracking/test_ui_browser.py).
"""
from __future__ import annotations

from poxm_core.common.results import mlflow_name

MODEL_SECTION, SYSTEM_SECTION = "Model metrics", "System metrics"     # MLflow's own section names
TEST_METRICS = [f"{m}@{k}" for m in ("R", "nDCR", "PSR") for k in (1, 3, 5)] + \
               [f"{m}@{k}" for m in ("P", "nDCG", "PSP") for k in (1, 3, 5)]
VAL_ESTIMATES = ("IS", "sIS", "SNIS", "DR", "PIS", "MIPS", "OffCEM")
# (key, unfolded): 'selection' is poxm's own; the others are the metric prefixes MLflow files charts under
SECTIONS = (("selection", True), ("train", True), ("val", True), ("test", False), ("val_truth", False),
            (MODEL_SECTION, False), (SYSTEM_SECTION, False))


def section_titles(criterion: str, slate_size: int) -> dict[str, str]:
    """The headers that carry the units (a section's header is its name; MLflow's chart titles are
    metric names and cannot be set)."""
    reward = f"reward per slate, 0–{slate_size}"
    return {"selection": f"selection: val/{mlflow_name(criterion)} against p ({reward})",
            "val": f"val: per epoch ({reward}; ESS in instances)",
            "test": "test: ×100 (R_at_5 = 23.40 is 23.40 %)"}


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


def chart_view(criterion: str = "IS", slate_size: int = 5) -> tuple[list[dict], list[dict]]:
    """(compareRunSections, compareRunCharts) of the sweep's chart view; `criterion`: the validation
    estimate the selection uses; `slate_size`: the k of a slate (an estimate lies in [0, k]). Every
    chart of a section renamed here (val, test) is named here too: MLflow files a chart it makes itself
    under the section whose name is the metric's prefix, and would open a second 'val' or 'test'."""
    titles = section_titles(criterion, slate_size)
    sec = {name: f"poxm-section-{name.replace(' ', '-').lower()}" for name, _ in SECTIONS}
    sections = [{"uuid": sec[name], "name": titles.get(name, name), "display": unfolded, "isReordered": True,
                 "deleted": False, "isGenerated": False} for name, unfolded in SECTIONS]
    crit = mlflow_name(criterion)
    charts = [scatter_chart("poxm-selection-p", sec["selection"], "p", f"val/{crit}", f"val/{crit} against p"),
              line_chart("poxm-selection-curve", sec["selection"], f"val/{crit}", f"val/{crit} per epoch"),
              line_chart("poxm-train-loss", sec["train"], "train/loss", "train/loss per epoch")]
    val = [f"val/{mlflow_name(e)}" for e in VAL_ESTIMATES if e != criterion] + ["val/ESS"]
    val += [f"val/{mlflow_name(e)}_se" for e in VAL_ESTIMATES]
    charts += [line_chart(f"poxm-{m.replace('/', '-')}", sec["val"], m, m) for m in val]
    charts += [bar_chart(f"poxm-test-{mlflow_name(m)}", sec["test"], f"test/{mlflow_name(m)}",
                         f"test/{mlflow_name(m)}") for m in TEST_METRICS]
    return sections, charts
