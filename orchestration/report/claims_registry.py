"""The claims the report can check: one registry, whose keys are what a config's `claims:` family names.

A claim compares two methods at their selected heads on one test metric (×100), first − second:

  poxm_vs_logging, poxm_vs_dm, poxm_vs_banditnet, poxm_vs_pm_banditnet   POXM > the other (R@5; the paper's)
  wpoxm_vs_poxm      wPOXM > POXM on PSR@5 (the paper's)
  dr_poxm_vs_poxm    DR-POXM > POXM on R@5 (ours: the paper leaves DR-POXM to future work)
  dm_vs_logging      DM > the logging policy (R@5; a row the paper leaves out)
  poxm_vs_supervised_logs, poxm_vs_potec   POXM > the baselines trained on the same logs (R@5; ours)
  poxm_vs_logging_greedy   POXM's R@5 > the logging policy's greedy ranking's P@5 (would deploying the
                     logging policy's top-5, the logging model's own ranking where beta = 0, have done better?)
  ranking_<method>   <method>'s greedy ranking (the top-5 of its scores at its selected head: P@5) > the
                     logging model's greedy ranking (P@5), for every learned method (ours): has the method
                     learned anything from the feedback beyond the ranking it was logged with?

and, per dataset, p_grows: POXM's selected p at variant C minus at variant A (the paper: the more
stochastic the logging policy, the larger the selected p). Each claim has the test its verdict uses by
default: the t-test on the crossed variance ('crossed_t'), the exact sign test ('sign') for p, whose
per-seed differences are grid steps, not a continuous quantity.
"""
from __future__ import annotations

from dataclasses import dataclass

CROSSED_T, SIGN = "crossed_t", "sign"
TESTS = (CROSSED_T, SIGN)


@dataclass(frozen=True)
class Claim:
    key: str
    text: str
    first: str       # method keys (poxm_core.methods.registry)
    second: str
    metric: str
    source: str      # 'paper' or 'ours'
    second_metric: str | None = None   # the second method's metric where it differs (a greedy ranking's P@5)

    @property
    def default_test(self) -> str:
        return SIGN if self.metric == "p" else CROSSED_T


# every learned method, by the name its ranking claim shows
RANKED = {"dm": "DM", "banditnet": "BanditNet", "pm_banditnet": "PM-BanditNet", "poxm": "POXM", "wpoxm": "wPOXM",
          "dr_poxm": "DR-POXM", "supervised_logs": "Supervised on the logs", "potec": "POTEC"}


def _ranking(method: str) -> Claim:
    return Claim(f"ranking_{method}", f"Ranking: {RANKED[method]} > the logging model", method, "logging", "P@5", "ours")


CLAIMS = (
    Claim("poxm_vs_logging", "POXM > logging policy", "poxm", "logging", "R@5", "paper"),
    Claim("poxm_vs_dm", "POXM > DM", "poxm", "dm", "R@5", "paper"),
    Claim("poxm_vs_banditnet", "POXM > BanditNet", "poxm", "banditnet", "R@5", "paper"),
    Claim("poxm_vs_pm_banditnet", "POXM > PM-BanditNet", "poxm", "pm_banditnet", "R@5", "paper"),
    Claim("wpoxm_vs_poxm", "wPOXM > POXM", "wpoxm", "poxm", "PSR@5", "paper"),
    Claim("dr_poxm_vs_poxm", "DR-POXM > POXM", "dr_poxm", "poxm", "R@5", "ours"),
    Claim("dm_vs_logging", "DM > logging policy", "dm", "logging", "R@5", "ours"),
    Claim("poxm_vs_supervised_logs", "POXM > supervised on the logs", "poxm", "supervised_logs", "R@5", "ours"),
    Claim("poxm_vs_potec", "POXM > POTEC", "poxm", "potec", "R@5", "ours"),
    Claim("poxm_vs_logging_greedy", "POXM > logging policy's greedy top-5", "poxm", "logging", "R@5", "ours",
          second_metric="P@5"),
    *(_ranking(m) for m in RANKED),
)
P_CLAIM = Claim("p_grows", "POXM's selected p grows from A to C", "poxm", "poxm", "p", "paper")
P_FROM, P_TO = "A", "C"
P_VARIANT = f"{P_FROM}→{P_TO}"
ALL_CLAIMS = CLAIMS + (P_CLAIM,)
CLAIM_ORDER = [c.key for c in ALL_CLAIMS]
SCALE = 100.0

# a claims frame (claims.claims, tables/claims.csv): one row per (criterion, dataset, variant, claim).
# `p_value` is the raw p of the cell's test (`test`), `p_holm` its Holm adjustment over the declared family
# (nan where the row is exploratory: `family`), `p_sign` the exact sign test every cell carries, `alpha`
# the family's level the verdicts used.
CLAIM_COLUMNS = ["criterion", "paper_criterion", "dataset", "variant", "claim", "claim_text", "source",
                 "metric", "diff", "ci_lo", "ci_hi", "verdict", "n", "seeds", "signs", "positive", "negative",
                 "se", "df", "p_value", "p_holm", "interval", "m", "v_seed", "v_inst",
                 "test", "family", "p_sign", "v_int", "alpha"]
# the columns of claims tables written before the declared family (read back with the rest filled in)
LEGACY_COLUMNS = CLAIM_COLUMNS[:CLAIM_COLUMNS.index("test")]

# a deterministic slate has R@k = P@k ...: a greedy method written without stochastic rows uses its twin
_TWIN = {"R@": "P@", "nDCR@": "nDCG@", "PSR@": "PSP@"}


def _twin(metric: str) -> str:
    for a, b in _TWIN.items():
        if metric.startswith(a):
            return b + metric[len(a):]
    return metric


def claim_of(key: str) -> Claim | None:
    return next((c for c in ALL_CLAIMS if c.key == key), None)
