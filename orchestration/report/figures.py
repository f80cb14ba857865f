"""Report figures (matplotlib Agg), each written as PNG and PDF with a caption for the index.

  covering_<d>          paper Fig. 1: left, the share of true labels inside the top-k of rho vs k, per
                        variant (identical curves drawn once, labelled with every variant); right (its own axis: a different denominator), the logging policy's
                        expected R@5 per variant
  robustness_<d>        paper Fig. 2: the logging policy's expected R@5 per variant; POXM test R@5 per p;
                        the validation criterion (IS by default) per p that selection used; the
                        selected p is ringed by a hollow star (its grid point visible inside)
  estimators_<d>_<v>    beyond the paper (accuracy_figure.py): every validation estimator vs the true
                        deployed value, bias, spread and RMSE as p varies
  sharpness_<d>         beyond the paper: test R@5 of the selected policy of logging, dm, banditnet,
                        poxm, dr_poxm against the logging temperature T, variants with beta = 0

The data preparation (`*_data`) is pure and tested; the plotting functions only draw it. Error bars
appear only where at least two seeds contribute, and each caption says how many there are.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from orchestration.report.accuracy_figure import (PRUNED_ESTIMATORS, estimator_error_data,  # noqa: F401
                                                  estimator_figure)
from orchestration.report.figure_common import Figure, errorbar, mean_sd, mean_sd_by, p_axis, save, spread_note
from orchestration.report.method_names import method_name
from orchestration.selection import CRITERION_ORDER, DEFAULT_CRITERION, GROUP, POINT, selection_label

# Display order of the estimators; any other validation estimator present follows, sorted.
ESTIMATORS = CRITERION_ORDER
SHARPNESS_METHODS = ("logging", "dm", "banditnet", "poxm", "dr_poxm")


# --------------------------------------------------------------------------------------------
# (a) covering

def covering_data(prepare: pd.DataFrame, rows: pd.DataFrame, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve, r5): curve has variant, k, mean, sd, n of covering@k over seeds; r5 has variant,
    mean, sd, n of the logging policy's expected test R@5 (``logging_r5``)."""
    sub = prepare[(prepare["dataset"] == dataset) & prepare["metric"].str.startswith("covering@")]
    sub = sub.assign(k=sub["metric"].str.slice(len("covering@")).astype(int))
    curve = (mean_sd_by(sub, ["variant", "k"], "value")
             if not sub.empty else pd.DataFrame(columns=["variant", "k", "mean", "sd", "n"]))
    return curve, logging_r5(prepare, rows, dataset)


def logging_r5(prepare: pd.DataFrame, rows: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """variant, mean, sd, n of the logging policy's expected test R@5: the logging method's final test
    R@5 (the value the results tables show), else prepare's 'logging_policy/R@5'."""
    r5 = rows[(rows["dataset"] == dataset) & (rows["method"] == "logging") & rows["final"]
              & (rows["split"] == "test") & (rows["metric"] == "R@5")]
    r5 = r5.sort_values("epoch", kind="stable").drop_duplicates(["variant", "seed"], keep="last")
    if r5.empty:
        r5 = prepare[(prepare["dataset"] == dataset) & (prepare["metric"] == "logging_policy/R@5")]
    return (mean_sd_by(r5, ["variant"], "value")
            if not r5.empty else pd.DataFrame(columns=["variant", "mean", "sd", "n"]))


def coinciding_groups(curve: pd.DataFrame, tol: float = 1e-9) -> list[list[str]]:
    """Variants whose covering curves are identical (same k, means within `tol`), in variant order:
    variants that share rho's ranking (e.g. beta = 0 variants, whose order does not depend on T)."""
    groups: list[tuple[pd.Series, list[str]]] = []
    for v, c in curve.groupby("variant", sort=True):
        m = c.set_index("k")["mean"].astype(float).sort_index()
        for ref, names in groups:
            if ref.index.equals(m.index) and np.allclose(ref.to_numpy(), m.to_numpy(), atol=tol, rtol=0):
                names.append(str(v))
                break
        else:
            groups.append((m, [str(v)]))
    return [names for _, names in groups]


def _at(curve: pd.DataFrame, variant: str, k: int) -> float:
    c = curve[(curve["variant"] == variant) & (curve["k"] == k)]
    return float(c["mean"].iloc[0]) if len(c) else math.nan


def covering_caption(curve: pd.DataFrame, groups: list[list[str]]) -> str:
    """What the left panel shows, read from the data: covering at k = 10 and 50 per line, and which
    variants' lines coincide."""
    ks = [k for k in (10, 50) if k in set(curve["k"])] or [int(curve["k"].max())]
    parts = []
    for names in groups:
        vals = " / ".join(f"{100 * _at(curve, names[0], k):.0f} %" for k in ks)
        parts.append(f"{' = '.join(names)} {vals}")
    out = f"At k = {' / '.join(map(str, ks))}: " + "; ".join(parts) + "."
    same = [g for g in groups if len(g) > 1]
    if same:
        out += (" Lines coincide for " + "; ".join(", ".join(g) for g in same)
                + " (the same ranking of ρ, e.g. β = 0 variants: T does not reorder).")
    return out


def covering_figure(prepare: pd.DataFrame, rows: pd.DataFrame, dataset: str, out_dir: Path) -> Figure | None:
    curve, r5 = covering_data(prepare, rows, dataset)
    if curve.empty:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9.5, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
    variants = sorted(set(curve["variant"]) | set(r5["variant"]))
    color = {v: f"C{i}" for i, v in enumerate(variants)}
    groups = coinciding_groups(curve)
    for names in groups:   # one line per group of identical curves, labelled with every variant in it
        c = curve[curve["variant"] == names[0]].sort_values("k")
        ax.plot(c["k"], 100 * c["mean"], color=color[names[0]], marker="." if len(c) <= 30 else None,
                label=" = ".join(names))
        if (c["n"] > 1).any():
            ax.fill_between(c["k"], 100 * (c["mean"] - c["sd"].fillna(0)), 100 * (c["mean"] + c["sd"].fillna(0)),
                            color=color[names[0]], alpha=0.2, linewidth=0)
    kmax = int(curve["k"].max())
    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= kmax] or [kmax]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlim(1, kmax)
    ax.set_ylim(0, 100)
    ax.set_xlabel("k (top-k actions of the logging policy ρ, log scale)")
    ax.set_ylabel("true labels inside the top-k of ρ\n(% of all true labels)")
    ax.set_title("Covering of true labels by the top-k of ρ", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, title="variant", title_fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=min(len(groups), 4), frameon=False)
    if not r5.empty:
        _logging_r5_bars(bx, r5, color)
    else:
        bx.text(0.5, 0.5, "no logging R@5", ha="center", va="center", transform=bx.transAxes)
    bx.set_xlabel("variant")
    bx.set_ylabel("expected test R@5 of ρ (%)")
    bx.set_title("Logging policy's own slates", fontsize=10)
    bx.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Covering — {dataset}", y=1.02)
    fig.tight_layout()
    name = f"covering_{dataset}"
    caption = (f"{dataset} (paper Fig. 1). Left: share of the test instances' true labels inside the top-k of "
               f"ρ against k. {covering_caption(curve, groups)} Right, own axis (per slate position): "
               "ρ's expected test R@5. " + spread_note(list(curve["n"]) + list(r5["n"]), "seeds", "±1 std"))
    return Figure(name, f"Covering — {dataset}", caption, save(fig, out_dir, name))


# --------------------------------------------------------------------------------------------
# (b) robustness

def per_p_data(rows: pd.DataFrame, dataset: str, method: str = "poxm",
               criterion: str = DEFAULT_CRITERION) -> pd.DataFrame:
    """Per (variant, p): test R@5 and the validation criterion (mean, sd, n over seeds), where for
    each (variant, seed, p) lambda is the one the validation criterion (IS by default) picks among
    that p's lambdas (ties -> smaller lambda). Test values never choose lambda.

    Columns: variant, p, R5_mean, R5_sd, R5_n, val_mean, val_sd, val_n (val_*: the criterion).
    """
    f = rows[(rows["dataset"] == dataset) & (rows["method"] == method) & rows["final"] & (rows["p"] >= 0)]
    crit = f[(f["split"] == "val") & (f["metric"] == criterion)][POINT + ["value"]].rename(columns={"value": "val"})
    r5 = f[(f["split"] == "test") & (f["metric"] == "R@5")][POINT + ["value"]].rename(columns={"value": "R5"})
    pts = crit.merge(r5, on=POINT, how="outer")
    cols = ["variant", "p", "R5_mean", "R5_sd", "R5_n", "val_mean", "val_sd", "val_n"]
    if pts.empty:
        return pd.DataFrame(columns=cols)
    pts = pts.assign(_neg=-pts["val"].fillna(-np.inf), _lam=pts["lam"].fillna(np.inf))
    chosen = pts.sort_values(GROUP + ["p", "_neg", "_lam"], kind="stable").drop_duplicates(GROUP + ["p"])
    keys = ["variant", "p"]
    out = pd.concat([mean_sd_by(chosen, keys, "R5", "R5_"),
                     mean_sd_by(chosen, keys, "val", "val_").drop(columns=keys)], axis=1)
    return out[cols]


def selected_p(selection: pd.DataFrame, dataset: str, method: str = "poxm",
               criterion: str = DEFAULT_CRITERION) -> dict[str, int]:
    """Per variant, the p the criterion's selection chose for most seeds (ties -> smaller p)."""
    s = selection[(selection["dataset"] == dataset) & (selection["method"] == method)
                  & (selection["selection"] == selection_label(criterion)) & (selection["p"] >= 0)]
    out = {}
    for v, sub in s.groupby("variant"):
        counts = sub["p"].astype(int).value_counts()
        out[str(v)] = int(min(p for p, c in counts.items() if c == counts.max()))
    return out


def robustness_figure(rows: pd.DataFrame, selection: pd.DataFrame, prepare: pd.DataFrame, dataset: str,
                      out_dir: Path, method: str = "poxm", criterion: str = DEFAULT_CRITERION) -> Figure | None:
    per_p = per_p_data(rows, dataset, method, criterion)
    r5 = logging_r5(prepare, rows, dataset)
    if per_p.empty and r5.empty:
        return None
    chosen = selected_p(selection, dataset, method, criterion)
    variants = sorted(set(per_p["variant"]) | set(r5["variant"]))
    color = {v: f"C{i}" for i, v in enumerate(variants)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))

    ax = axes[0]
    if not r5.empty:
        _logging_r5_bars(ax, r5, color)
    else:
        ax.text(0.5, 0.5, "no logging R@5 (prepare.csv)", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("variant")
    ax.set_ylabel("expected R@5 of ρ on test (%)")
    ax.set_title("Logging policy per variant")
    ax.grid(True, axis="y", alpha=0.3)

    for ax, col, ylabel, title, scale in (
            (axes[1], "R5", "test R@5 (%)", f"{method.upper() if method == 'poxm' else method}: test R@5 per p", 100),
            (axes[2], "val", f"{criterion} estimate of V(π)\n(reward per logged slate)",
             f"Validation {criterion} per p (selection)", 1)):
        if per_p.empty:
            ax.text(0.5, 0.5, f"no {method} results", ha="center", va="center", transform=ax.transAxes)
        starred = False
        for v in variants:
            d = per_p[per_p["variant"] == v].sort_values("p")
            d = d[np.isfinite(d[f"{col}_mean"].to_numpy(dtype=float))]
            if d.empty:
                continue
            errorbar(ax, d["p"], scale * d[f"{col}_mean"], scale * d[f"{col}_sd"], d[f"{col}_n"],
                      color=color[v], marker="o", label=f"variant {v}")
            if v in chosen and chosen[v] in set(d["p"]):
                y = scale * d.loc[d["p"] == chosen[v], f"{col}_mean"].iloc[0]
                # a hollow star around the point, not a filled one over it: the grid point stays visible
                ax.plot([chosen[v]], [y], marker="*", markersize=20, markerfacecolor="none", markeredgecolor="k",
                        markeredgewidth=1.3, linestyle="none", zorder=3,
                        label=None if starred else f"{criterion}-selected p")
                starred = True
        if not per_p.empty:
            p_axis(ax, per_p["p"])
        ax.set_xlabel(r"p (size of the action selector $\Phi^p$, log scale)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Robustness of p selection — {dataset}", y=1.02)
    fig.tight_layout()
    handles, labels = axes[1].get_legend_handles_labels()
    if handles:   # one legend for the line panels, below them: never over the data
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 8),
                   fontsize=8, frameon=False)
    name = f"robustness_{dataset}"
    caption = (f"{dataset} (paper Fig. 2). Left: ρ's expected test R@5 per variant. Middle: {method} test R@5 "
               f"against p, λ chosen at each p by validation {criterion}. Right: that validation {criterion}. "
               f"Hollow star: the p selection chose (most seeds), drawn around that point. "
               + spread_note(list(per_p["R5_n"]) + list(per_p["val_n"]) + list(r5["n"]), "seeds", "±1 std"))
    return Figure(name, f"Robustness — {dataset}", caption, save(fig, out_dir, name))


# --------------------------------------------------------------------------------------------
# (d) logging sharpness

def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def beta0_variants(params: dict, dataset: str) -> dict[str, dict]:
    """{variant: its parameters} for the variants of `dataset` (config.yaml datasets[].variants,
    ``inputs.variant_params``) with beta = 0 and a finite temperature T > 0."""
    out = {}
    for (d, v), prm in params.items():
        if d != dataset or not isinstance(prm, dict):
            continue
        beta, t = _float(prm.get("beta")), _float(prm.get("T"))
        if beta == 0.0 and math.isfinite(t) and t > 0:
            out[str(v)] = prm
    return out


def sharpness_data(selected: pd.DataFrame, params: dict, dataset: str,
                   methods: tuple[str, ...] = SHARPNESS_METHODS) -> pd.DataFrame:
    """Test R@5 of each method's selected policy against the logging temperature T.

    `selected`: the final test rows at the chosen points (``selection.selected_rows``); `params`:
    {(dataset, variant): {name, alpha, beta, T}}. Only variants with beta = 0 (``beta0_variants``).
    A method without an R@5 row falls back to P@5 (equal for a deterministic slate; greedy = True).
    Columns: variant, T, alpha, method, mean, sd, n (over seeds, fractions), greedy."""
    cols = ["variant", "T", "alpha", "method", "mean", "sd", "n", "greedy"]
    var = beta0_variants(params, dataset)
    sub = selected[(selected["dataset"] == dataset) & selected["variant"].isin(list(var))
                   & selected["method"].isin(list(methods)) & (selected["split"] == "test")]
    recs = []
    for (v, m), g in sub.groupby(["variant", "method"], sort=True):
        greedy = not (g["metric"] == "R@5").any()
        vals = g[g["metric"] == ("P@5" if greedy else "R@5")]
        vals = vals.sort_values("epoch", kind="stable").drop_duplicates("seed", keep="last")["value"]
        if vals.empty:
            continue
        st = mean_sd(vals)
        if st["n"] == 0:
            continue
        recs.append({"variant": v, "T": _float(var[v].get("T")), "alpha": _float(var[v].get("alpha")), "method": m,
                     "mean": st["mean"], "sd": st["sd"], "n": int(st["n"]), "greedy": greedy})
    return pd.DataFrame(recs, columns=cols).sort_values(["method", "T"], kind="stable").reset_index(drop=True)


def sharpness_figure(selected: pd.DataFrame, params: dict, dataset: str, out_dir: Path,
                     criterion: str = DEFAULT_CRITERION, methods: tuple[str, ...] = SHARPNESS_METHODS) -> Figure | None:
    """Drawn only when at least two beta = 0 variants of `dataset` have results."""
    data = sharpness_data(selected, params, dataset, methods)
    if data["variant"].nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    present = [m for m in methods if m in set(data["method"])]
    for i, m in enumerate(present):
        d = data[data["method"] == m].sort_values("T")
        label = method_name(m) + (" (P@5)" if d["greedy"].any() else "")
        errorbar(ax, d["T"], 100 * d["mean"], 100 * d["sd"], d["n"], color=f"C{i}", marker="o", label=label)
    ts = sorted(set(data["T"]))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts)
    ax.set_xticklabels([f"{t:g}" for t in ts])
    ax.minorticks_off()
    ax.set_xlabel("logging temperature T (log2 scale; larger T = flatter ρ)")
    ax.set_ylabel("test R@5 (%)")
    ax.set_title(f"Logging sharpness — {dataset} (β = 0)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    name = f"sharpness_{dataset}"
    vs = data.drop_duplicates("variant").sort_values("T")
    var_txt = ", ".join(f"{r.variant} (α={r.alpha:g}, T={r.T:g})" for r in vs.itertuples())
    caption = (f"{dataset}: test R@5 of each method's {criterion}-selected policy against the logging "
               f"temperature T, β = 0 variants: {var_txt}. Mean over seeds; "
               + spread_note(data["n"], "seeds", "±1 std")
               + (" (P@5): a greedy method, P@5 = R@5 for a deterministic slate." if data["greedy"].any() else ""))
    return Figure(name, f"Logging sharpness — {dataset}", caption, save(fig, out_dir, name))


def _logging_r5_bars(ax, r5, color: dict) -> None:
    """Bars of the logging policy's expected R@5 per variant (mean over seeds x100, error bars only
    where n >= 2 seeds), each labelled with its value at the tables' precision (two decimals)."""
    r5 = r5.sort_values("variant")
    x = np.arange(len(r5))
    mean = 100 * r5["mean"].astype(float)
    sd = np.where(r5["n"].astype(float) > 1, 100 * r5["sd"].astype(float).fillna(0), 0.0)
    ax.bar(x, mean, color=[color.get(v, "k") for v in r5["variant"]], yerr=sd if np.any(sd > 0) else None, capsize=3)
    for xi, m in zip(x, mean):
        ax.annotate(f"{m:.2f}", (xi, m), ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x)
    ax.set_xticklabels([str(v) for v in r5["variant"]], fontsize=8, rotation=30, ha="right")
    ax.set_ylim(0, max(5.0, 1.2 * float(mean.max())))
