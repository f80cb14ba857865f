"""The logging-quality landscape figure (landscape.py's cells): a panel per (dataset, method), x the
logging temperature T, a colour per α; each method's greedy ranking (solid, filled) and stochastic
policy (dashed, hollow) minus the logging model's greedy P@5, the matched variant a star at its solved
T, 95 % intervals as error bars, 0 (the logging model's own ranking) drawn black. The skylines (full
labels) are left to the table: the figure asks where learning from the feedback pays."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from orchestration.report.figure_common import Figure, log_offset, save
from orchestration.report.inference import MIN_SEEDS
from orchestration.report.method_names import method_list, method_name

NOT_DRAWN = ("skyline", "skyline_e2e")
POLICY_STYLE = {"greedy": {"linestyle": "-", "fill": True}, "stochastic": {"linestyle": "--", "fill": False}}


def _yerr(g: pd.DataFrame):
    """Half-widths of the intervals (0 where a cell has none); None when no cell has one."""
    half = (g["ci_hi"] - g["diff"]).to_numpy(dtype=float)
    half = np.where(np.isfinite(half), half, 0.0)
    return half if np.any(half > 0) else None


def _series(ax, g: pd.DataFrame, color: str, policy: str, offset: float) -> None:
    st = POLICY_STYLE[policy]
    face = color if st["fill"] else "none"
    fixed = g[~g["matched"].astype(bool) & np.isfinite(g["T"].to_numpy(dtype=float))].sort_values("T")
    if len(fixed):
        ax.errorbar(fixed["T"] * offset, fixed["diff"], yerr=_yerr(fixed), color=color, marker="o", markersize=5,
                    markerfacecolor=face, linestyle=st["linestyle"], capsize=2, linewidth=1.3)
    matched = g[g["matched"].astype(bool) & np.isfinite(g["T"].to_numpy(dtype=float))]
    if len(matched):
        ax.errorbar(matched["T"] * offset, matched["diff"], yerr=_yerr(matched), color=color, marker="*",
                    markersize=11, markerfacecolor=face, linestyle="none", capsize=2)


def _panel(ax, cells: pd.DataFrame, alphas: list[float]) -> None:
    ax.axhline(0.0, color="k", linewidth=0.9)
    count = len(alphas) * len(POLICY_STYLE)
    for i, a in enumerate(alphas):
        for j, policy in enumerate(POLICY_STYLE):
            g = cells[(cells["alpha"] == a) & (cells["policy"] == policy)]
            if len(g):
                _series(ax, g, f"C{i % 10}", policy, log_offset(2 * i + j, count, 0.03))
    ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)


def _t_ticks(ax, frame: pd.DataFrame) -> None:
    ts = sorted({float(t) for t, m in zip(frame["T"], frame["matched"]) if not m and math.isfinite(float(t))})
    if ts:
        ax.set_xticks(ts)
        ax.set_xticklabels([f"{t:g}" for t in ts])
    ax.minorticks_off()


def _legend(fig, alphas: list[float], has_matched: bool) -> None:
    handles = [Line2D([], [], color=f"C{i % 10}", linewidth=3, label=f"α = {a:g}") for i, a in enumerate(alphas)]
    handles += [Line2D([], [], color="grey", marker="o", linestyle="-", label="greedy ranking (P@5)"),
                Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="--",
                       label="stochastic policy (R@5)")]
    if has_matched:
        handles.append(Line2D([], [], color="grey", marker="*", markersize=11, linestyle="none",
                              label="matched variant (its solved T)"))
    handles.append(Line2D([], [], color="k", linewidth=0.9, label="logging model's greedy P@5"))
    fig.legend(handles=handles, loc="upper center", ncol=math.ceil(len(handles) / 2), frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 1.0))


def landscape_figure(frame: pd.DataFrame, out_dir: Path, criterion: str) -> Figure | None:
    """landscape.png/pdf from ``landscape.landscape_data``'s cells; None when there are none."""
    frame = frame[~frame["method"].isin(NOT_DRAWN)]
    if frame.empty:
        return None
    datasets = sorted(frame["dataset"].unique())
    methods = method_list(list(frame["method"].unique()))
    alphas = sorted(frame["alpha"].astype(float).unique())
    fig, axes = plt.subplots(len(datasets), len(methods), figsize=(2.5 * len(methods) + 0.8, 2.3 * len(datasets) + 0.9),
                             sharey="row", squeeze=False)
    for i, d in enumerate(datasets):
        for j, m in enumerate(methods):
            ax = axes[i][j]
            _panel(ax, frame[(frame["dataset"] == d) & (frame["method"] == m)], alphas)
            _t_ticks(ax, frame[frame["dataset"] == d])
            if i == 0:
                ax.set_title(method_name(m), fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{d}\nminus logging model's P@5 (×100)", fontsize=8)
            if i == len(datasets) - 1:
                ax.set_xlabel("logging temperature T", fontsize=8)
            ax.tick_params(labelsize=7)
    _legend(fig, alphas, bool(frame["matched"].astype(bool).any()))
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    n = sorted(set(frame["n"].astype(int)))
    bars = (f"error bars: 95 % intervals (unadjusted) where at least {MIN_SEEDS} seeds" if n[-1] >= MIN_SEEDS
            else f"no error bars: fewer than {MIN_SEEDS} seeds")
    caption = (f"Each method's test metric at its {criterion}-selected heads minus the logging model's greedy P@5, ×100 "
               "points (above 0: better than the logging model's own ranking), against the logging temperature T "
               "(log scale), one colour per α (β = 0); solid filled: the greedy ranking (P@5), dashed hollow: the "
               "stochastic policy (R@5); a star: the matched variant at the T prepare solved. Mean over "
               f"{n[0] if len(n) == 1 else f'{n[0]}–{n[-1]}'} seeds; {bars}. The numbers: the landscape tables.")
    return Figure("landscape", "Logging-quality landscape: where learning from the feedback beats the logging "
                  "model's ranking", caption, save(fig, out_dir, "landscape"))
