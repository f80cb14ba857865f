"""Off-policy evaluation against the truth on the Open Bandit Dataset, as rows and as a report table:
each policy's value estimated from the other policy's log by every applicable estimator of the registry
and DM (`poxm_core.bandit.logged_ope`), beside its on-policy click rate in its own log. Used by `poxm ope`
(orchestration/ope.py) and by the report of a logged sweep (report/logged.py).
"""
from __future__ import annotations

import math

import pandas as pd

from poxm_core.bandit.logged_ope import evaluate_against_truth
from poxm_core.common.errors import PoxmInputError
from poxm_core.data.obd import OBD_CAMPAIGNS, read_obd
from orchestration.report.table_format import Table

__all__ = ["DIRECTIONS", "obd_ope_frame", "ope_rows", "ope_table"]

DIRECTIONS = (("bts", "random"), ("random", "bts"))   # (target policy, the log it is estimated from)


def ope_rows(eval_log, target_log, *, campaign: str, target: str, log: str, p_list=(10, 20), n_boot: int = 200,
             seed: int = 0, clusters=None) -> list[dict]:
    """The rows of one direction: the policy of `target_log` (named `target`) estimated from `eval_log` (named
    `log`) by every estimator `evaluate_against_truth` applies, beside its on-policy value (the columns of
    `obd_ope_frame`)."""
    return [{"campaign": campaign, "target": target, "log": log, "estimator": r.estimator,
             "value": r.value, "stderr": r.stderr, "ci_low": r.ci_low, "ci_high": r.ci_high,
             "ess": r.ess, "truth": r.truth, "truth_stderr": r.truth_stderr,
             "rel_error": r.rel_error, "rel_error_boot": r.rel_error_boot, "covers": r.covers,
             "z": r.z, "n": eval_log.n}
            for r in evaluate_against_truth(eval_log, target_log, p_list=p_list, n_boot=n_boot, seed=seed,
                                            clusters=clusters)]


def obd_ope_frame(data, campaigns=OBD_CAMPAIGNS, p_list=(10, 20), n_boot: int = 200, seed: int = 0,
                  clusters: int = 0) -> pd.DataFrame:
    """Long-form rows: campaign, target, log, estimator, value, stderr, ci_low, ci_high, ess, truth,
    truth_stderr, rel_error, rel_error_boot, covers, z, n. `clusters` = k > 0: the items grouped by k-means
    of their features (`prepare.clusters.fit_label_clusters`, seed `seed`), for MIPS and OffCEM."""
    for c in campaigns:
        if c not in OBD_CAMPAIGNS:
            raise PoxmInputError(f"--campaigns: expected some of {', '.join(OBD_CAMPAIGNS)}, got {c!r}")
    rows = []
    for c in campaigns:
        logs = {pol: read_obd(data, pol, c) for pol in ("random", "bts")}
        groups = item_clusters(logs["random"], clusters, seed) if clusters else None
        for target, source in DIRECTIONS:
            rows += ope_rows(logs[source], logs[target], campaign=c, target=target, log=source, p_list=p_list,
                             n_boot=n_boot, seed=seed, clusters=groups)
    return pd.DataFrame(rows)


def item_clusters(log, k: int, seed: int):
    """(A,) cluster id of each action: k-means of the log's action features (OBD: the items' features)."""
    from poxm_core.prepare.clusters import fit_label_clusters

    if log.action_features is None:
        raise PoxmInputError(f"{log.source}: --clusters needs the actions' features (OBD: item_context.csv)")
    if not 1 <= k <= log.n_actions:
        raise PoxmInputError(f"--clusters: expected an int in [1, {log.n_actions}] (the actions), got {k}")
    return fit_label_clusters(log.action_features, k, seed)


def _pct(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{100 * v:.3f}"


LOW_ESS_SHARE = 0.01      # an effective sample size below this share of the log's rows is flagged


def ope_warnings(r) -> str:
    """What makes a row's numbers unsafe to read as they stand, '' for none: an effective sample size
    below LOW_ESS_SHARE of the log's rows (a few rows with large weights carry the estimate; its normal
    interval, and so 'covers', assume many), an estimate or an interval outside [0, 1] (a click rate)."""
    out = []
    n = float(getattr(r, "n", math.nan))
    if math.isfinite(r.ess) and math.isfinite(n) and r.ess < LOW_ESS_SHARE * n:
        out.append(f"low ESS ({r.ess:,.0f} < {LOW_ESS_SHARE * n:,.0f})")
    if math.isfinite(r.value) and not 0.0 <= r.value <= 1.0:
        out.append("estimate < 0" if r.value < 0 else "estimate > 1")
    if math.isfinite(r.ci_low) and (r.ci_low < 0.0 or r.ci_high > 1.0):
        out.append("interval leaves [0, 1]")
    return "; ".join(out)


def ope_table(df: pd.DataFrame, name: str = "ope",
              title: str = "Off-policy estimates against the on-policy value (Open Bandit Dataset sample)") -> Table:
    """The Markdown table: values in % (click rate per shown action x 100)."""
    cols = ["campaign", "target ← log", "estimator", "estimate %", "95 % interval %", "on-policy % (± se)",
            "rel. error", "boot rel. error", "covers", "z", "ESS", "warning"]
    rows = []
    for _, r in df.iterrows():
        ci = "—" if not math.isfinite(r.ci_low) else f"[{_pct(r.ci_low)}, {_pct(r.ci_high)}]"
        cov = "—" if r.covers is None or (isinstance(r.covers, float) and math.isnan(r.covers)) else (
            "yes" if r.covers else "no")
        rows.append([r.campaign, f"{r.target} ← {r.log}", r.estimator, _pct(r.value), ci,
                     f"{_pct(r.truth)} (± {_pct(r.truth_stderr)})", f"{r.rel_error:.3f}",
                     f"{r.rel_error_boot:.3f}", cov, "—" if not math.isfinite(r.z) else f"{r.z:+.2f}",
                     "—" if not math.isfinite(r.ess) else f"{r.ess:,.0f}", ope_warnings(r)])
    return Table(name=name, title=title, columns=cols, rows=rows, frame=df,
                 notes=["Interval: each estimator's own normal interval over per-row terms (CLT; SNIS by the "
                        "delta method). DM has none (its error is the reward model's, not the rows' spread).",
                        "z: (estimate - on-policy) / sqrt(se² + se_on-policy²); the on-policy value is itself a "
                        "mean over one log of 10,000 rows.",
                        "boot rel. error: mean over bootstrap resamples of the evaluation log of "
                        "|estimate - on-policy| / on-policy (the dataset paper's statistic).",
                        f"warning: low ESS: an effective sample size below {100 * LOW_ESS_SHARE:g} % of the log's rows: "
                        "a few rows with large weights carry the estimate, and its normal interval (so 'covers') "
                        "does not hold there; estimate < 0 or an interval leaving [0, 1]: a click rate lies in "
                        "[0, 1], and a normal interval (or DR's model correction) does not know it."])
