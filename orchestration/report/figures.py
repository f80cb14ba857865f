"""Report figures (matplotlib Agg), each written as PNG and PDF with a caption for the index.

  covering_<d>          paper Fig. 1: share of true labels inside the top-k of rho vs k, per variant,
                        with the logging policy's expected R@5 as a dashed line
  robustness_<d>        paper Fig. 2: logging statistics per variant; POXM test R@5 per p; the
                        validation criterion (SNIS by default) per p that selection used; the
                        selected p is starred
  estimators_<d>_<v>    beyond the paper: every validation estimator present (IS, sIS, SNIS, DR, PIS,
                        ...) vs the policy's true deployed value, bias, spread and RMSE as p varies
  sharpness_<d>         beyond the paper: test R@5 of the selected policy of logging, dm, banditnet,
                        poxm, dr_poxm against the logging temperature T, variants with beta = 0

The data preparation (`*_data`) is pure and tested; the plotting functions only draw it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from orchestration.report.tables import method_name  # noqa: E402
from orchestration.selection import (CRITERION_ORDER, DEFAULT_CRITERION, GROUP, POINT, is_criterion,  # noqa: E402
                                     order_criteria, selection_label)

# Display order of the estimators; any other validation estimator present follows, sorted.
ESTIMATORS = CRITERION_ORDER
PRUNED_ESTIMATORS = ("IS", "sIS", "SNIS", "DR")
SHARPNESS_METHODS = ("logging", "dm", "banditnet", "poxm", "dr_poxm")
ROBUSTNESS_STAT_PREFIXES = ("logging_policy/", "rho/")
ROBUSTNESS_COVERING = ("covering@10", "covering@20")


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    caption: str
    paths: tuple[Path, ...]


def _save(fig, out_dir: Path, name: str) -> tuple[Path, ...]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / f"{name}.png", out_dir / f"{name}.pdf")
    fig.savefig(paths[0], dpi=130, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def _mean_sd(v: pd.Series) -> pd.Series:
    v = v[np.isfinite(v.to_numpy(dtype=float))]
    return pd.Series({"mean": v.mean() if len(v) else math.nan,
                      "sd": v.std(ddof=1) if len(v) > 1 else math.nan, "n": len(v)})


def _p_axis(ax, ps) -> None:
    ps = sorted(set(int(p) for p in ps))
    if len(ps) > 1 and ps[0] > 0:
        ax.set_xscale("log")
    ax.set_xticks(ps)
    ax.set_xticklabels([str(p) for p in ps])
    ax.minorticks_off()


def _errorbar(ax, x, mean, sd, n, **kw):
    """A line with error bars (±1 std over seeds) where more than one seed contributes."""
    yerr = np.where(np.asarray(n) > 1, np.nan_to_num(np.asarray(sd, dtype=float)), 0.0)
    return ax.errorbar(x, mean, yerr=yerr if np.any(yerr > 0) else None, capsize=3, **kw)


# --------------------------------------------------------------------------------------------
# (a) covering

def covering_data(prepare: pd.DataFrame, rows: pd.DataFrame, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve, r5): curve has variant, k, mean, sd, n of covering@k over seeds; r5 has variant,
    mean, sd, n of the logging policy's expected R@5 (prepare's 'logging_policy/R@5', else the
    test R@5 of method 'logging')."""
    sub = prepare[(prepare["dataset"] == dataset) & prepare["metric"].str.startswith("covering@")]
    sub = sub.assign(k=sub["metric"].str.slice(len("covering@")).astype(int))
    curve = (sub.groupby(["variant", "k"])["value"].apply(_mean_sd).unstack().reset_index()
             if not sub.empty else pd.DataFrame(columns=["variant", "k", "mean", "sd", "n"]))
    r5 = prepare[(prepare["dataset"] == dataset) & (prepare["metric"] == "logging_policy/R@5")]
    if r5.empty:
        r5 = rows[(rows["dataset"] == dataset) & (rows["method"] == "logging") & rows["final"]
                  & (rows["split"] == "test") & (rows["metric"] == "R@5")]
    r5s = (r5.groupby("variant")["value"].apply(_mean_sd).unstack().reset_index()
           if not r5.empty else pd.DataFrame(columns=["variant", "mean", "sd", "n"]))
    return curve, r5s


def covering_figure(prepare: pd.DataFrame, rows: pd.DataFrame, dataset: str, out_dir: Path) -> Figure | None:
    curve, r5 = covering_data(prepare, rows, dataset)
    if curve.empty:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    colors = {}
    for i, (v, c) in enumerate(curve.groupby("variant", sort=True)):
        c = c.sort_values("k")
        color = f"C{i}"
        colors[v] = color
        ax.plot(c["k"], 100 * c["mean"], color=color, marker="." if len(c) <= 30 else None,
                label=f"variant {v}: covering@k")
        if (c["n"] > 1).any():
            ax.fill_between(c["k"], 100 * (c["mean"] - c["sd"].fillna(0)), 100 * (c["mean"] + c["sd"].fillna(0)),
                            color=color, alpha=0.2, linewidth=0)
    for r in r5.itertuples(index=False):
        color = colors.get(r.variant, "k")
        ax.axhline(100 * r.mean, color=color, linestyle="--", linewidth=1.2,
                   label=f"variant {r.variant}: expected R@5 of ρ ({100 * r.mean:.1f}%)")
    kmax = int(curve["k"].max())
    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= kmax] or [kmax]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlim(1, kmax)
    ax.set_ylim(0, 100)
    ax.set_xlabel("k (top-k actions of the logging policy ρ, log scale)")
    ax.set_ylabel("true labels covered / R@5 (%)")
    ax.set_title(f"Covering of true labels by top-k of ρ — {dataset}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    name = f"covering_{dataset}"
    caption = (f"{dataset}: share of the test instances' true labels that lie inside the top-k actions of "
               "the logging policy ρ, as k grows (a CDF over rank; solid lines, one per variant; band ±1 std "
               "over seeds). Dashed: the logging policy's expected R@5, the reward of its own slates. "
               "A small p covers most of what ρ can find (paper Fig. 1).")
    return Figure(name, f"Covering — {dataset}", caption, _save(fig, out_dir, name))


# --------------------------------------------------------------------------------------------
# (b) robustness

def per_p_data(rows: pd.DataFrame, dataset: str, method: str = "poxm",
               criterion: str = DEFAULT_CRITERION) -> pd.DataFrame:
    """Per (variant, p): test R@5 and the validation criterion (mean, sd, n over seeds), where for
    each (variant, seed, p) lambda is the one the validation criterion (SNIS by default) picks among
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
    g = chosen.groupby(["variant", "p"])
    out = pd.concat([g["R5"].apply(_mean_sd).unstack().add_prefix("R5_"),
                     g["val"].apply(_mean_sd).unstack().add_prefix("val_")], axis=1).reset_index()
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


def logging_stats_data(prepare: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Logging statistics that are fractions in [0, 1] for every variant (bar chart, x100):
    all 'logging_policy/*' and 'rho/*' metrics, plus covering@10 and covering@20.
    Columns: variant, metric, mean, sd, n."""
    sub = prepare[prepare["dataset"] == dataset]
    keep = sub["metric"].str.startswith(ROBUSTNESS_STAT_PREFIXES) | sub["metric"].isin(ROBUSTNESS_COVERING)
    sub = sub[keep]
    if sub.empty:
        return pd.DataFrame(columns=["variant", "metric", "mean", "sd", "n"])
    frac = sub.groupby("metric")["value"].agg(lambda v: bool(((v >= 0) & (v <= 1)).all()))
    sub = sub[sub["metric"].isin(frac[frac].index)]
    return sub.groupby(["variant", "metric"])["value"].apply(_mean_sd).unstack().reset_index()


def robustness_figure(rows: pd.DataFrame, selection: pd.DataFrame, prepare: pd.DataFrame, dataset: str,
                      out_dir: Path, method: str = "poxm", criterion: str = DEFAULT_CRITERION) -> Figure | None:
    per_p = per_p_data(rows, dataset, method, criterion)
    stats = logging_stats_data(prepare, dataset)
    if per_p.empty and stats.empty:
        return None
    chosen = selected_p(selection, dataset, method, criterion)
    variants = sorted(set(per_p["variant"]) | set(stats["variant"]))
    color = {v: f"C{i}" for i, v in enumerate(variants)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))

    ax = axes[0]
    if not stats.empty:
        metrics = sorted(stats["metric"].unique(), key=lambda m: (m.startswith("covering"), m))
        width = 0.8 / max(1, len(variants))
        x = np.arange(len(metrics))
        for i, v in enumerate(variants):
            s = stats[stats["variant"] == v].set_index("metric").reindex(metrics)
            yerr = np.where(s["n"].fillna(0) > 1, s["sd"].fillna(0), 0) * 100
            ax.bar(x + (i - (len(variants) - 1) / 2) * width, 100 * s["mean"], width, color=color[v],
                   yerr=yerr if np.any(yerr > 0) else None, capsize=2, label=f"variant {v}")
        ax.set_xticks(x)
        ax.set_xticklabels(metrics, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no logging statistics (prepare.csv)", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("value (%)")
    ax.set_title("Logging policy statistics")

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
            _errorbar(ax, d["p"], scale * d[f"{col}_mean"], scale * d[f"{col}_sd"], d[f"{col}_n"],
                      color=color[v], marker="o", label=f"variant {v}")
            if v in chosen and chosen[v] in set(d["p"]):
                y = scale * d.loc[d["p"] == chosen[v], f"{col}_mean"].iloc[0]
                ax.plot([chosen[v]], [y], marker="*", markersize=16, color=color[v], markeredgecolor="k",
                        linestyle="none", label=None if starred else f"{criterion}-selected p")
                starred = True
        if not per_p.empty:
            _p_axis(ax, per_p["p"])
            ax.legend(fontsize=8)
        ax.set_xlabel(r"p (size of the action selector $\Phi^p$, log scale)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Robustness of p selection — {dataset}", y=1.02)
    fig.tight_layout()
    name = f"robustness_{dataset}"
    caption = (f"{dataset} (paper Fig. 2). Left: logging-policy statistics per variant (prepare.csv, fractions "
               f"×100; covering@k = share of true labels in the top-k of ρ). Middle: {method} test R@5 for each "
               f"p; at each p, λ is the one the validation {criterion} picks (test labels never choose). Right: that "
               f"validation {criterion} estimate, the quantity selection maximises. Star: the p the {criterion} "
               "selection chose (most frequent over seeds). Error bars: ±1 std over seeds.")
    return Figure(name, f"Robustness — {dataset}", caption, _save(fig, out_dir, name))


# --------------------------------------------------------------------------------------------
# (c) estimator accuracy

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


def estimator_figure(rows: pd.DataFrame, dataset: str, variant: str, out_dir: Path,
                     methods: tuple[str, ...] = ("poxm",)) -> Figure | None:
    data = estimator_error_data(rows, dataset, variant, methods)
    if data.empty:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    order = order_criteria(data["estimator"].unique())
    for i, e in enumerate(order):
        d = data[data["estimator"] == e].sort_values("p")
        sem = d["sd"] / np.sqrt(d["n"])
        _errorbar(axes[0], d["p"], d["bias"], sem, d["n"], color=f"C{i}", marker="o", label=e)
        axes[1].plot(d["p"], d["sd"], color=f"C{i}", marker="o", label=e)
        axes[2].plot(d["p"], d["rmse"], color=f"C{i}", marker="o", label=e)
    axes[0].axhline(0, color="k", linewidth=0.8)
    titles = ("Bias: mean(estimate − true value)", "Spread: std of (estimate − true value)",
              "RMSE: sqrt(mean (estimate − true value)²)")
    ylabels = ("bias (reward per logged slate)", "std of error (reward per logged slate)",
               "RMSE (reward per logged slate)")
    for ax, t, yl in zip(axes, titles, ylabels):
        _p_axis(ax, data["p"])
        ax.set_xlabel(r"p (size of the action selector $\Phi^p$, log scale)")
        ax.set_ylabel(yl)
        ax.set_title(t, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    n_heads = int(data["n"].max())
    fig.suptitle(f"Estimator accuracy on the validation log — {dataset}, variant {variant} "
                 f"({'/'.join(methods)} heads, up to {n_heads} per p)", y=1.02)
    fig.tight_layout()
    name = f"estimators_{dataset}_{variant}"
    caption = (f"{dataset}, variant {variant}: {_and_list(order)} estimates of each trained {'/'.join(methods)} "
               "head's value on the validation log, against its true deployed slate value on the same validation "
               "instances (split val_truth, V_true = expected reward of the slates π deploys, computed from their "
               "labels — used for this figure only). Each head (λ, seed) at a given p is one sample: left the mean "
               "error with ±1 standard error bars, middle the spread over heads, right the root mean squared error. "
               "sIS restricts IS to Φ^p (paper Theorem 1: bias shrinks and variance grows with p). "
               + _target_note(order)).rstrip()
    return Figure(name, f"Estimator accuracy — {dataset}, {variant}", caption, _save(fig, out_dir, name))


def _and_list(names: list[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _target_note(order: list[str]) -> str:
    """What each estimator targets: the pruned ones are not estimates of V_true, PIS is."""
    pruned = [e for e in order if e in PRUNED_ESTIMATORS]
    out = ""
    if pruned:
        out += (f"The pruned estimators ({', '.join(PRUNED_ESTIMATORS)}) weight the j-th pick alone, so they target a "
                "mixed quantity — the slate's prefix drawn from the logging policy ρ, only its j-th pick from π — "
                "which differs from the deployed slate value: part of their error here is that gap in target, "
                "not noise. ")
    if "PIS" in order:
        out += ("PIS (prefix-product weights over the whole prefix) targets the deployed slate value itself and is "
                "unbiased for it where ρ covers π's support. ")
    return out


# --------------------------------------------------------------------------------------------
# (d) logging sharpness

def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def beta0_variants(params: dict, dataset: str) -> dict[str, dict]:
    """{variant: its parameters} for the variants of `dataset` (config.yaml datasets[].variants,
    ``build._variant_params``) with beta = 0 and a finite temperature T > 0."""
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
        st = _mean_sd(vals)
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
        _errorbar(ax, d["T"], 100 * d["mean"], 100 * d["sd"], d["n"], color=f"C{i}", marker="o", label=label)
    ts = sorted(set(data["T"]))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts)
    ax.set_xticklabels([f"{t:g}" for t in ts])
    ax.minorticks_off()
    ax.set_xlabel("logging temperature T (log2 scale; larger T = flatter ρ)")
    ax.set_ylabel("test R@5 (%)")
    ax.set_title(f"Logging sharpness — {dataset} (β = 0)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    name = f"sharpness_{dataset}"
    vs = data.drop_duplicates("variant").sort_values("T")
    var_txt = ", ".join(f"{r.variant} (α={r.alpha:g}, T={r.T:g})" for r in vs.itertuples())
    caption = (f"{dataset}: test R@5 ×100 of the policy each method selects (by the validation-log {criterion}; "
               f"methods with one grid point as they are) against the logging temperature T, for the variants "
               f"with β = 0: {var_txt}. Mean ± std over seeds. A greedy method without stochastic rows shows P@5 "
               "(= R@5 for a deterministic slate).")
    return Figure(name, f"Logging sharpness — {dataset}", caption, _save(fig, out_dir, name))
