"""`poxm ope`: off-policy evaluation against the truth on the Open Bandit Dataset (docs/results/obd/).

For each campaign, the Bernoulli TS policy's value is estimated from the uniform-random log and the
random policy's value from the TS log, by every applicable estimator of the registry (MIPS and OffCEM
over k-means clusters of the items' features, --clusters) and DM
(`poxm_core.bandit.logged_ope`), each beside the target's on-policy click rate in its own log. Writes
`ope.csv` (every number) and `ope.md` (the table, with a warning column: ope_truth.ope_warnings) into
--out (default runs/ope-obd). Everything is read and checked before
anything is written, so bad input leaves nothing behind.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from poxm_core.common.atomic import write_text
from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import default_data_root
from poxm_core.data.obd import OBD_CAMPAIGNS

__all__ = ["add_ope_parser", "cmd_ope"]

DEFAULT_OUT = Path("runs") / "ope-obd"      # under the runs folder (SweepConfig.runs_dir's default), not the checkout


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
    p.add_argument("--clusters", type=int, default=10,
                   help="k of the item clusters MIPS and OffCEM marginalise over (k-means of the items' features; "
                        "0: no cluster estimators)")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples of the mean relative error")
    p.add_argument("--seed", type=int, default=0, help="seed of the reward model's folds and the bootstrap")
    p.add_argument("--out", metavar="DIR", default=None,
                   help=f"where ope.csv and ope.md go (default: {DEFAULT_OUT}, in the runs folder `poxm run` uses)")


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PoxmInputError(f"--{what}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise PoxmInputError(f"--{what}: expected positive integers, got {text!r}")
    return vals


def cmd_ope(a: argparse.Namespace) -> int:
    # imported here, not with the parser: every poxm command builds it, and these bring torch and the report
    from orchestration.report.ope_truth import obd_ope_frame, ope_table, ope_warnings
    from orchestration.report.table_format import to_markdown
    data = Path(a.data) if a.data else default_data_root() / "obd"
    campaigns = tuple(x.strip() for x in a.campaigns.split(",") if x.strip())
    p_list = _ints(a.p, "p")
    if a.n_boot < 2:
        raise PoxmInputError(f"--n-boot: expected an int >= 2, got {a.n_boot}")
    if a.clusters < 0:
        raise PoxmInputError(f"--clusters: expected an int >= 0, got {a.clusters}")
    df = obd_ope_frame(data, campaigns, p_list, a.n_boot, a.seed, a.clusters)   # every read and check before any write
    out = Path(a.out) if a.out else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "ope.csv", df.to_csv(index=False, float_format="%.6g"))
    write_text(out / "ope.md", to_markdown(ope_table(df)))
    print(f"poxm ope: {len(df)} estimates over {len(campaigns)} campaign(s) -> {out}/ope.md, {out}/ope.csv")
    flagged = [w for w in (ope_warnings(r) for r in df.itertuples(index=False)) if w]
    if flagged:
        print(f"  {len(flagged)} of them with a warning (low ESS: a few rows carry the estimate; a rate outside "
              "[0, 1]): the table's last column says which")
    return 0
