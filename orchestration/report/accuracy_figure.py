"""Figure estimators_<d>_<v> (beyond the paper): every validation estimator present (IS, sIS, SNIS,
DR, PIS, ...) against the trained heads' true deployed value — bias, spread and RMSE as p varies.
The caption reads the data (which way the bias moves with p) instead of asserting a direction."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from orchestration.report.figure_common import Figure, log_offset, p_axis, save, spread_note, style
from orchestration.selection import POINT, is_criterion, order_criteria

PRUNED_ESTIMATORS = ("IS", "sIS", "SNIS", "DR", "MIPS", "OffCEM")   # per-position (pruned) weights


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
    the smallest and the largest p (named once when every estimator spans the same p)."""
    ends = []
    for e in order:
        d = data[data["estimator"] == e].sort_values("p")
        d = d[np.isfinite(d["bias"].to_numpy(dtype=float))]
        if len(d) >= 2:
            ends.append((e, d.iloc[0], d.iloc[-1]))
    if not ends:
        return ""
    spans = {(int(a.p), int(b.p)) for _, a, b in ends}
    if len(spans) == 1:   # estimators with the same displayed values are named together ("IS = sIS")
        lo, hi = spans.pop()
        shown: dict[str, list[str]] = {}
        for e, a, b in ends:
            shown.setdefault(f"{a.bias:+.2f} → {b.bias:+.2f}", []).append(e)
        return f"Bias at p = {lo} → {hi}: " + ", ".join(f"{' = '.join(es)} {v}" for v, es in shown.items()) + ". "
    return "Bias from the smallest to the largest p: " + ", ".join(
        f"{e} {a.bias:+.2f} (p = {int(a.p)}) → {b.bias:+.2f} (p = {int(b.p)})" for e, a, b in ends) + ". "


def target_note(order: list[str]) -> str:
    """What each estimator targets (docs/estimators.md): the pruned ones are not estimates of V_true, PIS is."""
    pruned = [e for e in order if e in PRUNED_ESTIMATORS]
    out = ""
    if pruned:
        out += f"{', '.join(pruned)} target a prefix-from-ρ slate, not V_true"
    if "PIS" in order:
        out += ("; " if out else "") + "PIS targets V_true"
    if "SNIS-LB" in order:
        out += ("; " if out else "") + "SNIS-LB is low by design"
    return (out + ". ") if out else ""


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
    fig.suptitle(f"Estimator accuracy on the validation log — {dataset}, variant {variant} "
                 f"({'/'.join(methods)} heads)", y=1.02)
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 8),
               fontsize=8, frameon=False)   # below the panels, never over the data
    name = f"estimators_{dataset}_{variant}"
    caption = (f"{dataset}, variant {variant}: validation estimate minus the true deployed value V_true of each "
               f"{'/'.join(methods)} head (λ, seed) against p: bias (mean error, ±1 s.e.), spread, RMSE. "
               + bias_trend(data, order) + target_note(order)
               + spread_note(data["n"], "heads", "±1 standard error of the mean error")
               + " Lines offset along p so that coinciding ones stay visible.")
    return Figure(name, f"Estimator accuracy — {dataset}, {variant}", caption, save(fig, out_dir, name))
