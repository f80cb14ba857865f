"""The report of a sweep over logged feedback (datasets[].logged; docs/data.md, "Learning from a log").

A log has no labels: nothing here is a test metric. The learned policies' values are off-policy
estimates on the held-out test part of the log (split 'test') and on the target log (split 'target':
another policy's log over the same actions, OBD's Bernoulli TS), at the (p, lambda) that selection chose
on the validation log, beside each log's own on-policy click rate. Per dataset:

  ope_<d>         per variant and method: the chosen (p, lambda), the estimates (x 100, mean +- sd over
                  seeds), the mean 95 % interval half-width of the IS estimate, and the logs' own click rates
  ope_seeds_<d>   every seed's estimate with its standard error and interval (CSV beside it)
  phi_<d>         the share of each held-out log's clicks inside Phi^p, per variant (what a top-p keeps)
  ope_truth_<d>   the estimators checked against the truth on the dataset's logs (`truth_table`): the target
                  log's policy estimated from the log learned from (and the reverse where the config has a
                  target log) by every estimator of `poxm ope` (`poxm_core.bandit.logged_ope`), beside its
                  on-policy value; read from the data root at report time
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report import tables as T
from orchestration.report.index import render_html, render_markdown
from orchestration.selection import RunSelection, selected_rows, selection_label
from poxm_core.common.atomic import write_text
from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import default_data_root

__all__ = ["is_logged", "write_logged_report", "terminal_headline", "truth_frame", "truth_table", "EVAL_SPLITS",
           "SHOWN"]

EVAL_SPLITS = ("test", "target")
SHOWN = ("IS", "SNIS", "DR")      # the estimates in the main table (every estimator is in ope_seeds)
METHOD_ORDER = ["logging", "dm", "banditnet", "pm_banditnet", "poxm", "wpoxm", "dr_poxm"]


def is_logged(config: dict) -> bool:
    """Whether the run's datasets are logged feedback (its resolved config names `logged`)."""
    ds = config.get("datasets") if isinstance(config, dict) else None
    return any(isinstance(d, dict) and d.get("logged") for d in ds or [])


def _pct(v: float) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{100 * v:.3f}"


def _mean_sd(x: pd.Series) -> str:
    x = x.astype(float).dropna()
    if not len(x):
        return "—"
    return _pct(x.mean()) + (f" ± {100 * x.std(ddof=1):.3f}" if len(x) > 1 else "")


def _point(r) -> str:
    parts = ([f"p={int(r.p)}"] if r.p >= 0 else []) + ([f"λ={r.lam:g}"] if np.isfinite(r.lam) else [])
    return ", ".join(parts) or "—"


def _prepare_value(prepare: pd.DataFrame, d: str, metric: str) -> float:
    v = prepare[(prepare["dataset"] == d) & (prepare["metric"] == metric)]["value"].astype(float)
    return float(v.mean()) if len(v) else math.nan


def _order(methods) -> list[str]:
    methods = list(dict.fromkeys(methods))
    return [m for m in METHOD_ORDER if m in methods] + sorted(m for m in methods if m not in METHOD_ORDER)


def _selected_long(d: str, rows: pd.DataFrame, sel: pd.DataFrame, label: str) -> pd.DataFrame:
    """Dataset d's final rows of every evaluation split and 'val' at the selected heads (no loss), with
    each value's 95 % interval from its standard error."""
    per = []
    for split in (*EVAL_SPLITS, "val"):
        got = selected_rows(rows, sel, label, split=split)
        per.append(got[got["dataset"] == d])
    long = pd.concat(per, ignore_index=True)
    long = long[~long["metric"].isin(["loss"])]
    return long.assign(ci_low=long["value"] - 1.96 * long["stderr"], ci_high=long["value"] + 1.96 * long["stderr"])


def _seed_table(d: str, long: pd.DataFrame) -> T.Table:
    seeds = long[["variant", "method", "p", "lam", "seed", "split", "metric", "value", "stderr", "ci_low", "ci_high"]]
    seeds = seeds.sort_values(["variant", "method", "seed", "split", "metric"], kind="stable").reset_index(drop=True)
    return T.Table(name=f"ope_seeds_{d}", title=f"{d}: every seed's estimates at the selected heads",
                   columns=list(seeds.columns), rows=[[str(x) for x in r] for r in seeds.itertuples(index=False)],
                   frame=seeds)


def _ope_row(v: str, m: str, g: pd.DataFrame, pts: pd.DataFrame, have: set, criterion: str) -> tuple[list, dict]:
    """One (variant, method)'s summary row and CSV record: its choices, then per evaluation split the
    shown estimates (mean ± sd over seeds) and the IS interval's half-width, then the criterion's value."""
    row = [v, m, "; ".join(_point(r) for r in pts.itertuples()), str(pts["seed"].nunique())]
    rec = {"variant": v, "method": m, "n_seeds": int(pts["seed"].nunique())}
    for s in EVAL_SPLITS:
        if s not in have:
            continue
        for met in SHOWN:
            x = g[(g["split"] == s) & (g["metric"] == met)]["value"]
            row.append(_mean_sd(x))
            rec[f"{s}_{met}_mean"] = float(x.mean()) if len(x) else math.nan
            rec[f"{s}_{met}_sd"] = float(x.std(ddof=1)) if len(x) > 1 else math.nan
        se = g[(g["split"] == s) & (g["metric"] == "IS")]["stderr"].astype(float)
        row.append(_pct(1.96 * se.mean()) if len(se) else "—")
        rec[f"{s}_IS_ci_halfwidth"] = float(1.96 * se.mean()) if len(se) else math.nan
    x = g[(g["split"] == "val") & (g["metric"] == criterion)]["value"]
    row.append(_mean_sd(x))
    rec[f"val_{criterion}_mean"] = float(x.mean()) if len(x) else math.nan
    return row, rec


def _on_policy_row(prepare: pd.DataFrame, d: str, have: set) -> tuple[list, list[dict]]:
    """The logs' own click rates: the logging policy's on its held-out rows, the target policy's on its log."""
    onp, recs = ["on-policy", "the log's own click rate", "", ""], []
    for s in EVAL_SPLITS:
        if s in have:
            rate, se = (_prepare_value(prepare, d, f"data/reward_rate_{s}"),
                        _prepare_value(prepare, d, f"data/reward_rate_{s}_se"))
            onp += [_pct(rate), "", "", _pct(1.96 * se)]
            recs.append({"variant": "on-policy", "method": s, f"{s}_IS_mean": rate, f"{s}_IS_ci_halfwidth": 1.96 * se})
    return onp + [""], recs


def ope_tables(d: str, rows: pd.DataFrame, selection: pd.DataFrame, label: str, prepare: pd.DataFrame,
               criterion: str, target_name: str) -> tuple[T.Table, T.Table]:
    """(the summary table, the per-seed table) of dataset d at the selected heads."""
    sel = selection[(selection["selection"] == label) & (selection["dataset"] == d)]
    long = _selected_long(d, rows, sel, label)
    have = {s for s in EVAL_SPLITS if (long["split"] == s).any()}
    cols = ["variant", "method", f"selected by {criterion} (per seed)", "seeds"]
    for s in EVAL_SPLITS:
        if s in have:
            cols += [f"{s} {m}" for m in SHOWN] + [f"{s} IS ±95 %"]
    cols.append(f"val {criterion}")
    out, frame = [], []
    for v in dict.fromkeys(sel["variant"].astype(str)):
        sv = long[long["variant"] == v]
        for m in _order(sv["method"]):
            pts = sel[(sel["variant"] == v) & (sel["method"] == m)].sort_values("seed")
            row, rec = _ope_row(v, m, sv[sv["method"] == m], pts, have, criterion)
            out.append(row)
            frame.append(rec)
    onp, recs = _on_policy_row(prepare, d, have)
    out.append(onp)
    frame += recs
    notes = [f"Click rates × 100 (per shown action). Each estimate is at the (p, λ) that {criterion} chose on the "
             "validation log, per seed; mean ± sd over seeds. test: the held-out test rows of the log learned from; "
             f"target: {target_name}. ±95 %: the mean over seeds of 1.96 × the IS estimate's standard error "
             "(its own CLT interval). The last row is each log's own click rate (the logging policy's value on the "
             "test rows; the target policy's value on its log) with its 95 % half-width: a learned policy's "
             "estimate above the first beats the logging policy; the second is the target policy's value, "
             "measured on its own log. DR uses the trial's reward model (DM); no row here reads a label."]
    summary = T.Table(name=f"ope_{d}", title=f"{d}: off-policy estimates of the learned policies", columns=cols,
                      rows=out, italic_rows={len(out) - 1}, notes=notes, frame=pd.DataFrame(frame))
    return summary, _seed_table(d, long)


def phi_table(d: str, prepare: pd.DataFrame, n_actions: float) -> T.Table | None:
    sub = prepare[(prepare["dataset"] == d) & prepare["metric"].str.startswith("phi/reward_share_")]
    if not len(sub):
        return None
    sub = sub.assign(split=sub["metric"].str.extract(r"share_(\w+)@")[0],
                     p=sub["metric"].str.extract(r"@(\d+)")[0].astype(int))
    g = sub.groupby(["variant", "split", "p"])["value"].mean().reset_index()
    ps = sorted(g["p"].unique())
    cols = ["variant", "log"] + [f"p={p}" for p in ps]
    rows = []
    for (v, s), h in g.groupby(["variant", "split"], sort=False):
        vals = dict(zip(h["p"], h["value"]))
        rows.append([str(v), str(s)] + [f"{100 * vals[p]:.1f}" if p in vals else "—" for p in ps])
    if np.isfinite(n_actions):
        rows.append(["p / A", "(an arbitrary set on a uniform log)"] + [f"{100 * p / n_actions:.1f}" for p in ps])
    return T.Table(name=f"phi_{d}", title=f"{d}: share of each held-out log's clicks inside Φ^p (%)", columns=cols,
                   rows=rows, frame=g,
                   notes=["Φ^p = the first p actions of C(x) in the variant's order (selector: logging = the logging "
                          "policy's marginal at the row's slot, ties by smaller id; reward = a reward model fitted on "
                          "the fit rows). Averaged over seeds."])


TRUTH_P = (10, 20)       # sIS's p in the truth table, as `poxm ope`'s default
TRUTH_N_BOOT = 200       # bootstrap resamples of its mean relative error, as `poxm ope`'s default


def truth_frame(logged: dict, data_root, *, p_list=TRUTH_P, n_boot: int = TRUTH_N_BOOT,
                seed: int = 0) -> pd.DataFrame | None:
    """The estimators against the truth on the logs of one logged dataset (its config's `logged` entry), the rows of
    `poxm ope` (`orchestration.report.ope_truth.ope_rows`, i.e. `evaluate_against_truth`): the other policy's value estimated
    from the log learned from, then, where the config has a target log, the log's own policy estimated from the
    target log. OBD: the other policy is the target (default: the other one of random / bts; with `target: none`
    still the other policy's log of the campaign, read only for its truth). A table without a target: None (no
    truth to check against). Reads the logs from `data_root` (as prepare does); raises PoxmInputError."""
    from orchestration.report.ope_truth import ope_rows
    from poxm_core.config.data_schema import LoggedConfig
    from poxm_core.data.logged_dataset import read_logged

    try:
        lcfg = LoggedConfig.model_validate(logged)
    except Exception as exc:   # an old run's config: the report still builds, without this table
        raise PoxmInputError(f"datasets.<i>.logged: {exc}".splitlines()[0]) from None
    if lcfg.source == "obd":
        policy, has_target = lcfg.obd_policy, lcfg.obd_target is not None
        other = lcfg.obd_target or ("bts" if policy == "random" else "random")
        log, target = read_logged(lcfg.model_copy(update={"target": other}), Path(data_root))
        campaign, names = lcfg.campaign or "all", (policy, other)
    else:
        if lcfg.target is None:
            return None
        log, target = read_logged(lcfg, Path(data_root))
        campaign, names, has_target = "—", (Path(lcfg.path).name, Path(lcfg.target).name), True
    rows = ope_rows(log, target, campaign=campaign, target=names[1], log=names[0], p_list=p_list, n_boot=n_boot,
                    seed=seed)
    if has_target:
        rows += ope_rows(target, log, campaign=campaign, target=names[0], log=names[1], p_list=p_list,
                         n_boot=n_boot, seed=seed)
    return pd.DataFrame(rows)


def truth_table(d: str, logged: dict, data_root, **kw) -> T.Table | None:
    """`ope_truth_<d>`: `truth_frame` as `poxm ope`'s table (`orchestration.report.ope_truth.ope_table`): per direction and
    estimator the estimate, its interval, the on-policy value, the relative error and whether the interval
    covers it. None where `truth_frame` is None."""
    from orchestration.report.ope_truth import ope_table

    df = truth_frame(logged, data_root, **kw)
    if df is None:
        return None
    t = ope_table(df, name=f"ope_truth_{d}", title=f"{d}: the estimators against the truth on its logs")
    t.notes = [("Each log whole (every row, not the sweep's test part), as `poxm ope`: the policy of the log on the "
                "left of ← is estimated from the log on the right, context-free (its position marginals), and "
                "compared with its own click rate in its own log (on-policy); rel. error = |estimate − on-policy| / "
                "on-policy; covers: whether the 95 % interval holds the on-policy value. Values × 100. No learned "
                "policy here: this is how far each estimator can be trusted on these logs.")] + t.notes
    return t


def write_logged_report(run_dir: Path, out: Path, chosen: RunSelection, rows: pd.DataFrame, prepare: pd.DataFrame,
                        config: dict, coverage: list[str], shown_dir: str, protocol: str | None) -> None:
    tdir = out / "tables"
    tdir.mkdir(parents=True, exist_ok=True)
    criterion = chosen.criterion
    label = selection_label(criterion)
    name = str(config.get("name", run_dir.name))
    blocks: list[tuple] = [("h1", f"poxm report — {name}"),
                           ("p", "Off-policy learning on a real log. A log has no labels, so this report has no test "
                                 "metric: every value is an off-policy estimate of a learned policy on rows no "
                                 "gradient step and no selection saw (docs/data.md, \"Learning from a log\").")]

    def table(t: T.Table) -> list[tuple]:
        paths = T.write_table(t, tdir)
        return [("table", t), ("links", [(e.upper(), str(p.relative_to(out))) for e, p in paths.items()])]

    for dcfg in config.get("datasets", []) or []:
        d = str(dcfg.get("name"))
        lg = dcfg.get("logged") or {}
        tgt = lg.get("target") or ("bts" if (lg.get("policy") or "random") == "random" else "random") \
            if lg.get("source") == "obd" else lg.get("target")
        target_name = (f"the {tgt} policy's log of the same campaign, every row" if lg.get("source") == "obd"
                       else f"the log {tgt}, every row") if tgt and tgt != "none" else "none"
        if not (rows["dataset"] == d).any():
            blocks += [("h2", f"Dataset {d}"), ("p", "No results yet.")]
            continue
        summary, seeds = ope_tables(d, rows, chosen.selection, label, prepare, criterion, target_name)
        blocks += [("h2", f"Dataset {d}: off-policy estimates of the learned policies")]
        blocks += table(summary)
        phi = phi_table(d, prepare, _prepare_value(prepare, d, "data/L"))
        if phi is not None:
            blocks += [("h3", f"{d}: what Φ^p keeps")] + table(phi)
        blocks += [("h3", f"{d}: the estimators against the truth")]
        try:
            truth = truth_table(d, lg, config.get("data_root") or default_data_root())
        except (PoxmInputError, OSError) as exc:
            truth, why = None, f"Not computed: {exc}"
        else:
            why = "No target log: nothing to check the estimators against." if truth is None else ""
        blocks += table(truth) if truth is not None else [("p", why)]
        paths = T.write_table(seeds, tdir)
        blocks.append(("links", [("every seed's estimates (CSV)", str(paths["csv"].relative_to(out)))]))
    blocks += [("h2", "Run"),
               ("p", f"Run directory `{run_dir.name}`. {len(rows)} result rows, {int(rows['final'].sum())} final. "
                     f"Selection criterion: **{criterion}** (validation log); "
                     + (f"protocol: **{protocol}**. " if protocol else "")
                     + f"Regenerate with `poxm report {shown_dir}`."),
               ("h2", "Coverage of the sweep"), ("ul", coverage),
               ("h2", "Selection"),
               ("p", f"Per (dataset, variant, method, seed): the (p, λ) with the highest {criterion} estimate on the "
                     "validation log (ties → smaller p, then smaller λ); selection.csv lists them.")]
    blocks.append(("links", [("selection.csv", "../results/selection.csv")]))
    write_text(out / "index.md", render_markdown(blocks))
    write_text(out / "index.html", render_html(blocks, f"poxm report — {name}", out))


def terminal_headline(report_dir: Path | None) -> str | None:
    """The end-of-run lines of a logged sweep (`poxm run`/`resume`), from the report's ope_<d>.csv: per
    dataset, variant and method, the IS estimate (x 100, mean over seeds) on each held-out log with the
    mean 95 % half-width, then each log's own click rate. None when the report has no such table."""
    if report_dir is None:
        return None
    blocks = []
    for f in sorted((Path(report_dir) / "tables").glob("ope_*.csv")):
        if f.name.startswith(("ope_seeds_", "ope_truth_")):
            continue
        df = pd.read_csv(f)
        splits = [s for s in EVAL_SPLITS if f"{s}_IS_mean" in df]
        if df.empty or not splits:
            continue
        crit = next((c[len("val_"):-len("_mean")] for c in df.columns if c.startswith("val_") and c.endswith("_mean")), "")
        learned = df[df["variant"] != "on-policy"]
        onp = df[df["variant"] == "on-policy"].set_index("method")
        index, lines = [], []
        for r in learned.itertuples(index=False):
            index.append(f"{r.variant}  {T.method_name(str(r.method))}")
            lines.append([x for s in splits for x in (_pct(getattr(r, f"{s}_IS_mean")),
                                                      _pct(getattr(r, f"{s}_IS_ci_halfwidth")))])
        index.append("the log's own click rate")
        lines.append([x for s in splits for x in ((_pct(onp.at[s, f"{s}_IS_mean"]), _pct(onp.at[s, f"{s}_IS_ci_halfwidth"]))
                                                  if s in onp.index else ("—", "—"))])
        table = pd.DataFrame(lines, index=index, columns=[x for s in splits for x in (f"{s} IS", "±95 %")])
        n = int(learned["n_seeds"].max()) if learned["n_seeds"].notna().any() else 0
        blocks.append(f"{f.stem[len('ope_'):]}: off-policy IS estimates (click rate x100, ±95 %: mean half-width) of the "
                      f"heads selected by {crit or 'the criterion'} on validation (mean of {n} seed(s)):\n"
                      + table.to_string())
    return "\n\n".join(blocks) or None
