"""`poxm ope`: off-policy evaluation against the truth on the Open Bandit Dataset (docs/results/obd/).

For each campaign, the Bernoulli TS policy's value is estimated from the uniform-random log and the
random policy's value from the TS log, by every applicable estimator of the registry and DM
(`poxm_core.bandit.logged_ope`), each beside the target's on-policy click rate in its own log. Writes
`ope.csv` (every number) and `ope.md` (the table) into --out. Everything is read and checked before
anything is written, so bad input leaves nothing behind.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from poxm_core.bandit.logged_ope import evaluate_against_truth
from poxm_core.common.atomic import write_text
from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import default_data_root
from poxm_core.data.logged import OBD_CAMPAIGNS, read_obd
from orchestration.report.table_format import Table, to_markdown

__all__ = ["add_ope_parser", "cmd_ope", "obd_ope_frame", "ope_rows", "ope_table"]

DIRECTIONS = (("bts", "random"), ("random", "bts"))   # (target policy, the log it is estimated from)


def add_ope_parser(sub) -> None:
    p = sub.add_parser("ope", help="off-policy evaluation against the truth on the Open Bandit Dataset",
                       description="Estimate the Bernoulli TS policy's value from the uniform-random log (and "
                                   "the reverse) with every applicable estimator, beside the on-policy click rate; "
                                   "writes ope.csv and ope.md into --out.")
    p.add_argument("--data", metavar="PATH", help="obp's archive, a folder holding it (original/obp-*.tar.gz), "
                                                   "or an OBD folder with random/ and bts/ "
                                                   "(default: <data root>/obd)")
    p.add_argument("--campaigns", default=",".join(OBD_CAMPAIGNS), help="comma-separated campaigns")
    p.add_argument("--p", default="10,20", help="comma-separated p of sIS (Phi^p: top-p of the logging policy)")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples of the mean relative error")
    p.add_argument("--seed", type=int, default=0, help="seed of the reward model's folds and the bootstrap")
    p.add_argument("--out", metavar="DIR", default="ope-obd", help="where ope.csv and ope.md go")


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PoxmInputError(f"--{what}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise PoxmInputError(f"--{what}: expected positive integers, got {text!r}")
    return vals


def ope_rows(eval_log, target_log, *, campaign: str, target: str, log: str, p_list=(10, 20), n_boot: int = 200,
             seed: int = 0) -> list[dict]:
    """The rows of one direction: the policy of `target_log` (named `target`) estimated from `eval_log` (named
    `log`) by every estimator `evaluate_against_truth` applies, beside its on-policy value (the columns of
    `obd_ope_frame`)."""
    return [{"campaign": campaign, "target": target, "log": log, "estimator": r.estimator,
             "value": r.value, "stderr": r.stderr, "ci_low": r.ci_low, "ci_high": r.ci_high,
             "ess": r.ess, "truth": r.truth, "truth_stderr": r.truth_stderr,
             "rel_error": r.rel_error, "rel_error_boot": r.rel_error_boot, "covers": r.covers,
             "z": r.z, "n": eval_log.n}
            for r in evaluate_against_truth(eval_log, target_log, p_list=p_list, n_boot=n_boot, seed=seed)]


def obd_ope_frame(data, campaigns=OBD_CAMPAIGNS, p_list=(10, 20), n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """Long-form rows: campaign, target, log, estimator, value, stderr, ci_low, ci_high, ess, truth,
    truth_stderr, rel_error, rel_error_boot, covers, z, n."""
    for c in campaigns:
        if c not in OBD_CAMPAIGNS:
            raise PoxmInputError(f"--campaigns: expected some of {', '.join(OBD_CAMPAIGNS)}, got {c!r}")
    rows = []
    for c in campaigns:
        logs = {pol: read_obd(data, pol, c) for pol in ("random", "bts")}
        for target, source in DIRECTIONS:
            rows += ope_rows(logs[source], logs[target], campaign=c, target=target, log=source, p_list=p_list,
                             n_boot=n_boot, seed=seed)
    return pd.DataFrame(rows)


def _pct(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{100 * v:.3f}"


def ope_table(df: pd.DataFrame, name: str = "ope",
              title: str = "Off-policy estimates against the on-policy value (Open Bandit Dataset sample)") -> Table:
    """The Markdown table: values in % (click rate per shown action x 100)."""
    cols = ["campaign", "target ← log", "estimator", "estimate %", "95 % interval %", "on-policy % (± se)",
            "rel. error", "boot rel. error", "covers", "z", "ESS"]
    rows = []
    for _, r in df.iterrows():
        ci = "—" if not math.isfinite(r.ci_low) else f"[{_pct(r.ci_low)}, {_pct(r.ci_high)}]"
        cov = "—" if r.covers is None or (isinstance(r.covers, float) and math.isnan(r.covers)) else (
            "yes" if r.covers else "no")
        rows.append([r.campaign, f"{r.target} ← {r.log}", r.estimator, _pct(r.value), ci,
                     f"{_pct(r.truth)} (± {_pct(r.truth_stderr)})", f"{r.rel_error:.3f}",
                     f"{r.rel_error_boot:.3f}", cov, "—" if not math.isfinite(r.z) else f"{r.z:+.2f}",
                     "—" if not math.isfinite(r.ess) else f"{r.ess:,.0f}"])
    return Table(name=name, title=title, columns=cols, rows=rows, frame=df,
                 notes=["Interval: each estimator's own normal interval over per-row terms (CLT; SNIS by the "
                        "delta method). DM has none (its error is the reward model's, not the rows' spread).",
                        "z: (estimate - on-policy) / sqrt(se² + se_on-policy²); the on-policy value is itself a "
                        "mean over one log of 10,000 rows.",
                        "boot rel. error: mean over bootstrap resamples of the evaluation log of "
                        "|estimate - on-policy| / on-policy (the dataset paper's statistic)."])


def cmd_ope(a: argparse.Namespace) -> int:
    data = Path(a.data) if a.data else default_data_root() / "obd"
    campaigns = tuple(x.strip() for x in a.campaigns.split(",") if x.strip())
    p_list = _ints(a.p, "p")
    if a.n_boot < 2:
        raise PoxmInputError(f"--n-boot: expected an int >= 2, got {a.n_boot}")
    df = obd_ope_frame(data, campaigns, p_list, a.n_boot, a.seed)     # every read and check before any write
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "ope.csv", df.to_csv(index=False, float_format="%.6g"))
    write_text(out / "ope.md", to_markdown(ope_table(df)))
    print(f"poxm ope: {len(df)} estimates over {len(campaigns)} campaign(s) -> {out}/ope.md, {out}/ope.csv")
    return 0
