"""Figure estimators_<d>_<v> (beyond the paper): every validation estimator present (IS, sIS, SNIS,
DR, PIS, ...) against the trained heads' true deployed value — bias, spread and RMSE as p varies.
The caption reads the data (which way the bias moves with p) instead of asserting a direction."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from orchestration.report.figure_common import Figure, log_offset, p_axis, save, spread_note, style
from orchestration.selection import POINT, is_criterion, order_criteria

PRUNED_ESTIMATORS = ("IS", "sIS", "SNIS", "DR")


def estimator_error_data(rows: pd.DataFrame, dataset: str, variant: str,
                         methods: tuple[str, ...] = ("poxm",)) -> pd.DataFrame:
    """Per (estimator, p): bias = mean(estimate - V_true), sd = std of the error (ddof=1),
    rmse = sqrt(mean(error^2)), n = heads (lambda, seed, method) at that p.

    Estimates: every final 'val' estimator present (IS, sIS, SNIS, DR, PIS, ...: all 'val' metrics
    except ESS, loss and *_se, not a fixed list); truth: final 'val_truth' rows 'V_true' of the
    same head. Columns: estimator, p, bias, sd, rmse, n."""
    f = rows[(rows["dataset"] == dataset) & (rows["variant"] == variant) & rows["final"]
             & rows["method"].isin(methods) & (rows["p"] >= 0)]
    est = f[(f["split"] == "val") & f["metric"].map(is_criterion)][POINT + ["metric", "value"]]
    truth = f[(f["split"] == "val_truth") & (f["metric"] == "V_true")][POINT + ["value"]]
    truth = truth.drop_duplicates(POINT, keep="last").rename(columns={"value": "truth"})
    est = est.drop_duplicates(POINT + ["metric"], keep="last")
    j = est.merge(truth, on=POINT, how="inner")
    cols = ["estimator", "p", "bias", "sd", "rmse", "n"]
    if j.empty:
        return pd.DataFrame(columns=cols)
    j = j.assign(err=j["value"] - j["truth"])
    j = j[np.isfinite(j["err"].to_numpy(dtype=float))]
    g = j.groupby(["metric", "p"])["err"]
    out = pd.DataFrame({"bias": g.mean(), "sd": g.std(ddof=1), "rmse": g.apply(lambda e: float(np.sqrt(np.mean(e ** 2)))),
                        "n": g.size()}).reset_index().rename(columns={"metric": "estimator"})
    return out[cols]


def bias_trend(data: pd.DataFrame, order: list[str]) -> str:
    """What the figure shows about bias against p, read from the data: per estimator, its bias at
    the smallest and the largest p, and whether |bias| grows or shrinks between them."""
    parts = []
    for e in order:
        d = data[data["estimator"] == e].sort_values("p")
        d = d[np.isfinite(d["bias"].to_numpy(dtype=float))]
        if len(d) < 2:
            continue
        a, b = d.iloc[0], d.iloc[-1]
        move = ("grows" if abs(b.bias) > abs(a.bias) else "shrinks" if abs(b.bias) < abs(a.bias) else "stays")
        parts.append(f"{e} {a.bias:+.3g} at p = {int(a.p)} → {b.bias:+.3g} at p = {int(b.p)} (|bias| {move})")
    return ("Measured bias from the smallest to the largest p: " + "; ".join(parts) + ". ") if parts else ""


def _and_list(names: list[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def target_note(order: list[str]) -> str:
    """What each estimator targets (DESIGN §5): the pruned ones are not estimates of V_true, PIS is."""
    pruned = [e for e in order if e in PRUNED_ESTIMATORS]
    out = ""
    if pruned:
        out += (f"The pruned estimators ({', '.join(pruned)}) weight the j-th pick alone, so they target a "
                "different quantity than the deployed slate value V_true — a mixed slate whose prefix is drawn from "
                "the logging policy ρ and only its j-th pick from π, which exceeds the deployed value when ρ is flat "
                "(DESIGN §5): part of their error here is that gap in target, not noise, and it need not shrink "
                "as p grows. ")
    if "PIS" in order:
        out += ("PIS (prefix-product weights over the whole prefix) targets the deployed slate value itself and is "
                "unbiased for it where ρ covers π's support. ")
    if "SNIS-LB" in order:
        out += ("SNIS-LB is a selection criterion, SNIS less a width z/(2√ESS) per position, biased low by design. ")
    return out


def estimator_figure(rows: pd.DataFrame, dataset: str, variant: str, out_dir, methods: tuple[str, ...] = ("poxm",)
                     ) -> Figure | None:
    data = estimator_error_data(rows, dataset, variant, methods)
    if data.empty:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    order = order_criteria(data["estimator"].unique())
    for i, e in enumerate(order):
        d = data[data["estimator"] == e].sort_values("p")
        x = d["p"].to_numpy(dtype=float) * log_offset(i, len(order))   # coinciding lines (IS, sIS) stay visible
        kw = dict(style(i), label=e, linewidth=1.4)
        sem = np.where(d["n"] > 1, d["sd"] / np.sqrt(d["n"]), 0.0)
        axes[0].errorbar(x, d["bias"], yerr=sem if np.any(sem > 0) else None, capsize=3, **kw)
        axes[1].plot(x, d["sd"], **kw)
        axes[2].plot(x, d["rmse"], **kw)
    axes[0].axhline(0, color="k", linewidth=0.8)
    titles = ("Bias: mean(estimate − true value)", "Spread: std of (estimate − true value)",
              "RMSE: sqrt(mean (estimate − true value)²)")
    ylabels = ("bias (reward per logged slate)", "std of error (reward per logged slate)",
               "RMSE (reward per logged slate)")
    for ax, t, yl in zip(axes, titles, ylabels):
        p_axis(ax, data["p"])
        ax.set_xlabel(r"p (size of the action selector $\Phi^p$, log scale)")
        ax.set_ylabel(yl)
        ax.set_title(t, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Estimator accuracy on the validation log — {dataset}, variant {variant} "
                 f"({'/'.join(methods)} heads)", y=1.02)
    fig.tight_layout()
    name = f"estimators_{dataset}_{variant}"
    caption = (f"{dataset}, variant {variant}: {_and_list(order)} estimates of each trained {'/'.join(methods)} "
               "head's value on the validation log, against its true deployed slate value on the same validation "
               "instances (split val_truth, V_true = expected reward of the slates π deploys, computed from their "
               "labels — used for this figure only). Each head (λ, seed) at a given p is one sample: left the mean "
               "error, middle the spread over heads, right the root mean squared error. "
               + spread_note(data["n"], "heads", "±1 standard error of the mean error") + " "
               "Lines are offset slightly along p and styled apart so that coinciding estimators (IS and sIS "
               "once Φ^p holds the whole support) stay visible. " + bias_trend(data, order)
               + target_note(order)).rstrip()
    return Figure(name, f"Estimator accuracy — {dataset}, {variant}", caption, save(fig, out_dir, name))
