"""The claims table: what the benchmark says about each claim, per dataset and variant (the report's
first table, the end of `poxm run` / `poxm report`, and metrics of the sweep's MLflow parent run).

A claim compares two methods at their selected heads on one test metric:

  poxm_vs_logging, poxm_vs_dm, poxm_vs_banditnet, poxm_vs_pm_banditnet   POXM > the other (R@5; the paper's)
  wpoxm_vs_poxm      wPOXM > POXM on PSR@5 (the paper's)
  dr_poxm_vs_poxm    DR-POXM > POXM on R@5 (ours: the paper leaves DR-POXM to future work)

and, per dataset, p_grows: POXM's selected p at variant C minus at variant A (the paper: the more
stochastic the logging policy, the larger the selected p).

For each claim and seed the paired difference d_s = value(first) − value(second) at the heads the
criterion selected for that seed (×100 like the report's metrics; p as it is). Reported: the mean
of d_s over the n seeds where both exist, the paired 95 % percentile bootstrap interval of that mean
(``aggregate.bootstrap_ci``: seeds resampled with replacement, B = 10,000, seeded so a report
rebuilds identically) and a verdict: holds (interval above 0), fails (interval below 0), undecided
(the interval contains 0, or one seed: no interval). With 3 seeds the percentile interval is the
range of the d_s, so "holds" then means every seed agrees. A claim whose methods or variants the run
lacks has no row. Pure functions of result rows and a selection frame (``selection.select``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report.aggregate import bootstrap_ci
from orchestration.report.table_format import Table
from orchestration.stages.selection import PAPER_CRITERION, selected_rows, selection_label


@dataclass(frozen=True)
class Claim:
    key: str
    text: str
    first: str       # method keys (poxm_core.methods.registry)
    second: str
    metric: str
    source: str      # 'paper' or 'ours'


CLAIMS = (
    Claim("poxm_vs_logging", "POXM > logging policy", "poxm", "logging", "R@5", "paper"),
    Claim("poxm_vs_dm", "POXM > DM", "poxm", "dm", "R@5", "paper"),
    Claim("poxm_vs_banditnet", "POXM > BanditNet", "poxm", "banditnet", "R@5", "paper"),
    Claim("poxm_vs_pm_banditnet", "POXM > PM-BanditNet", "poxm", "pm_banditnet", "R@5", "paper"),
    Claim("wpoxm_vs_poxm", "wPOXM > POXM", "wpoxm", "poxm", "PSR@5", "paper"),
    Claim("dr_poxm_vs_poxm", "DR-POXM > POXM", "dr_poxm", "poxm", "R@5", "ours"),
)
P_CLAIM = Claim("p_grows", "POXM's selected p grows from A to C", "poxm", "poxm", "p", "paper")
P_FROM, P_TO = "A", "C"
P_VARIANT = f"{P_FROM}→{P_TO}"
SCALE = 100.0
VERDICT_SCORE = {"holds": 1, "undecided": 0, "fails": -1}
CLAIM_COLUMNS = ["criterion", "paper_criterion", "dataset", "variant", "claim", "claim_text", "source",
                 "metric", "diff", "ci_lo", "ci_hi", "verdict", "n", "seeds"]
# a deterministic slate has R@k = P@k ...: a greedy method written without stochastic rows uses its twin
_TWIN = {"R@": "P@", "nDCR@": "nDCG@", "PSR@": "PSP@"}


def verdict(lo: float, hi: float) -> str:
    """'holds' when the interval lies above 0, 'fails' below 0, else (or without an interval) 'undecided'."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undecided"
    if lo > 0:
        return "holds"
    if hi < 0:
        return "fails"
    return "undecided"


def paired(diffs) -> dict:
    """Mean, bootstrap 95 % interval (nan with one seed), verdict and n of per-seed paired differences."""
    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    if not len(d):
        return {"diff": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "verdict": "undecided", "n": 0}
    lo, hi = bootstrap_ci(d)
    return {"diff": float(d.mean()), "ci_lo": lo, "ci_hi": hi, "verdict": verdict(lo, hi), "n": int(len(d))}


def _twin(metric: str) -> str:
    for a, b in _TWIN.items():
        if metric.startswith(a):
            return b + metric[len(a):]
    return metric


HEAD = ["dataset", "variant", "method"]


def _last_values(test: pd.DataFrame):
    """Each (dataset, variant, method, metric)'s values per seed: the row of the largest epoch (the last
    such row), kept where finite. Returns lookup(dataset, variant, method, metric) -> Series seed -> value
    (None where there is none). Grouped once: a claim looks up hundreds of them."""
    last = test.sort_values("epoch", kind="stable").drop_duplicates(HEAD + ["metric", "seed"], keep="last")
    last = last[np.isfinite(last["value"].to_numpy(dtype=float))]
    at = last.groupby(HEAD + ["metric"], sort=False).indices
    seeds, values = last["seed"].to_numpy(), last["value"].to_numpy(dtype=float)

    def lookup(*key) -> pd.Series | None:
        pos = at.get(key)
        return None if pos is None else pd.Series(values[pos], index=pd.Index(seeds[pos], name="seed"))
    return lookup


def _per_seed(lookup, dataset: str, variant: str, method: str, metric: str) -> pd.Series:
    """seed -> value of `metric` (its greedy twin where the method has none) at the selected head."""
    for m in (metric, _twin(metric)):
        s = lookup(dataset, variant, method, m)
        if s is not None:
            return s
    return pd.Series(dtype=float)


def _record(criterion: str, dataset: str, variant: str, claim: Claim, a: pd.Series, b: pd.Series,
            scale: float) -> dict | None:
    seeds = sorted(set(a.index) & set(b.index))
    if not seeds:
        return None
    diffs = scale * (a.loc[seeds].to_numpy(dtype=float) - b.loc[seeds].to_numpy(dtype=float))
    return {"criterion": criterion, "paper_criterion": criterion == PAPER_CRITERION, "dataset": dataset,
            "variant": variant, "claim": claim.key, "claim_text": claim.text, "source": claim.source,
            "metric": claim.metric, **paired(diffs), "seeds": " ".join(str(int(s)) for s in seeds)}


def claims(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """Every claim the run can check, under the honest selection by `criterion` in `selection`.

    `rows`: result rows (``selection.check_rows``); `selection`: from ``selection.select(rows,
    criterion)`` (other labels in it are ignored). Columns ``CLAIM_COLUMNS``; one row per (dataset,
    variant, claim) with at least one seed where both methods have a value.
    """
    label = selection_label(criterion)
    sel = selection[selection["selection"] == label]
    if sel.empty:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    test = selected_rows(rows, sel, label, split="test")
    values = _last_values(test)
    recs = []
    for d in sorted(sel["dataset"].astype(str).unique()):
        variants = sorted(sel[sel["dataset"] == d]["variant"].astype(str).unique())
        for c in CLAIMS:
            for v in variants:
                r = _record(criterion, d, v, c, _per_seed(values, d, v, c.first, c.metric),
                            _per_seed(values, d, v, c.second, c.metric), SCALE)
                if r is not None:
                    recs.append(r)
        if P_FROM in variants and P_TO in variants:
            ps = sel[(sel["dataset"] == d) & (sel["method"] == P_CLAIM.first) & (sel["p"] >= 0)]
            at = {v: ps[ps["variant"] == v].drop_duplicates("seed").set_index("seed")["p"].astype(float)
                  for v in (P_FROM, P_TO)}
            r = _record(criterion, d, P_VARIANT, P_CLAIM, at[P_TO], at[P_FROM], 1.0)
            if r is not None:
                recs.append(r)
    return pd.DataFrame(recs, columns=CLAIM_COLUMNS)


# --------------------------------------------------------------------------------------------
# display: the report's table, the terminal's summary, MLflow metric names

def _num(v: float, p: bool) -> str:
    return f"{v:+.1f}" if p else f"{v:+.2f}"


def cell_text(r) -> str:
    """'+10.77 [+10.70, +10.85]' (mean paired difference [95 % interval]); one seed: the value alone."""
    p = r["metric"] == "p"
    s = _num(r["diff"], p)
    if math.isfinite(r["ci_lo"]) and math.isfinite(r["ci_hi"]):
        s += f" [{_num(r['ci_lo'], p)}, {_num(r['ci_hi'], p)}]"
    return s


def criterion_name(criterion: str) -> str:
    return f"{criterion} (the paper's criterion)" if criterion == PAPER_CRITERION else criterion


def column_name(criterion: str) -> str:
    """A criterion in a column header: 'IS', "SNIS (paper's)"."""
    return f"{criterion} (paper's)" if criterion == PAPER_CRITERION else criterion


def claims_table(frame: pd.DataFrame, criteria: list[str]) -> Table:
    """One row per (dataset, claim, variant); per criterion (the run's first, then the paper's SNIS)
    the difference [interval] and the verdict; the number of paired seeds last."""
    columns = ["Claim", "Variant", "Metric"]
    for c in criteria:
        h = column_name(c)
        columns += [f"{h}: Δ [95 % CI]", f"{h}: verdict"]
    columns.append("seeds")
    order = [c.key for c in CLAIMS] + [P_CLAIM.key]
    rows, sections, bold = [], {}, set()
    f = frame[frame["criterion"].isin(criteria)]
    for d in sorted(f["dataset"].unique()):
        fd = f[f["dataset"] == d]
        sections[len(rows)] = f"Dataset {d}"
        keys = sorted({(k, v) for k, v in zip(fd["claim"], fd["variant"])},
                      key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[1]))
        for k, v in keys:
            here = fd[(fd["claim"] == k) & (fd["variant"] == v)].set_index("criterion")
            first = here.iloc[0]
            text = first["claim_text"] + (" (ours)" if first["source"] == "ours" else "")
            row = [text, v, first["metric"] + (" ×100" if first["metric"] != "p" else "")]
            for c in criteria:
                if c in here.index:
                    r = here.loc[c]
                    row += [cell_text(r), r["verdict"]]
                    if r["verdict"] != "undecided":
                        bold.add((len(rows), len(row) - 1))
                else:
                    row += ["—", "—"]
            row.append("/".join(sorted({str(int(here.loc[c, "n"])) for c in criteria if c in here.index})))
            rows.append(row)
    notes = ["Δ: mean over seeds of the paired difference first − second method (test metric ×100 at the "
             "heads each criterion selected on the validation log; p as it is). 95 % CI: percentile "
             "bootstrap over seeds (seeds resampled with replacement, 10,000 resamples, fixed seed). "
             "Verdict: holds (interval above 0), fails (below 0), undecided (contains 0, or one seed). "
             f"Criteria: {', '.join(criterion_name(c) for c in criteria)}. Test labels choose nothing."]
    if len(f) and int(f["n"].max()) <= 3:
        notes.append("With 3 seeds or fewer the interval is the range of the per-seed differences: "
                     "holds means every seed agrees.")
    return Table(name="claims", title="Claims: what this benchmark says", columns=columns, rows=rows,
                 bold=bold, sections=sections, notes=notes, frame=frame.reset_index(drop=True))


_LETTER = {"holds": "H", "fails": "F", "undecided": "?"}


def summary_text(frame: pd.DataFrame, criteria: list[str]) -> str | None:
    """The terminal's compact form: per dataset one line per claim, one column per variant, each cell
    the difference under the first criterion and the verdict letter under each criterion."""
    f = frame[frame["criterion"].isin(criteria)] if len(frame) else frame
    if f is None or f.empty:
        return None
    main = criteria[0]
    head = (f"claims: mean paired difference over seeds (x100; p as is) under {main}; verdicts "
            + "/".join(criteria) + " (H holds, F fails, ? undecided: the 95 % interval contains 0)")
    out = [head]
    order = [c.key for c in CLAIMS] + [P_CLAIM.key]
    for d in sorted(f["dataset"].unique()):
        fd = f[f["dataset"] == d]
        variants = sorted(v for v in fd["variant"].unique() if v != P_VARIANT)
        names = {r.claim: (f"POXM's p grows {P_FROM}->{P_TO}" if r.claim == P_CLAIM.key
                           else f"{r.claim_text} ({r.metric})" + (" ours" if r.source == "ours" else ""))
                 for r in fd.itertuples(index=False)}
        width = max(len(t) for t in names.values()) + 2
        out.append(f"{d:<{width}}" + "".join(f"{v:>16}" for v in variants))
        for k in [k for k in order if k in names] + sorted(set(names) - set(order)):
            fk = fd[fd["claim"] == k]
            cells = []
            for v in ([P_VARIANT] if k == P_CLAIM.key else variants):
                here = fk[fk["variant"] == v].set_index("criterion")
                if main not in here.index:
                    cells.append("-")
                    continue
                r = here.loc[main]
                letters = "/".join(_LETTER[here.loc[c, "verdict"]] if c in here.index else "-" for c in criteria)
                cells.append(f"{_num(r['diff'], r['metric'] == 'p')} {letters}")
            out.append(f"{names[k]:<{width}}" + "".join(f"{c:>16}" for c in cells))
    return "\n".join(out)


def claims_markdown(frames: list[pd.DataFrame | None], criterion: str = "IS") -> str:
    """One Markdown table over several reports' claims (e.g. one report per dataset): a row per (claim,
    dataset), a column per variant, each cell the difference under `criterion` and its verdict letter;
    the seeds behind each row in brackets (a range where variants differ)."""
    c = pd.concat([f for f in frames if f is not None], ignore_index=True)
    c = c[c["criterion"] == criterion]
    variants = list(dict.fromkeys(c["variant"]))
    lines = [f"| claim ({criterion}; H holds, F fails, ? undecided) | dataset | " + " | ".join(variants) + " |",
             "|---|---|" + "---|" * len(variants)]
    for claim in dict.fromkeys(c["claim_text"]):
        for d in dict.fromkeys(c["dataset"]):
            sub = c[(c["claim_text"] == claim) & (c["dataset"] == d)].set_index("variant")
            if sub.empty:
                continue
            n = sorted(set(sub["n"].astype(int)))
            seeds = str(n[0]) if len(n) == 1 else f"{n[0]}–{n[-1]}"
            cells = [f"{_num(sub.at[v, 'diff'], sub.at[v, 'metric'] == 'p')} {_LETTER[sub.at[v, 'verdict']]}"
                     if v in sub.index else "" for v in variants]
            lines.append(f"| {claim} | {d} ({seeds}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_NAME_BAD = re.compile(r"[^A-Za-z0-9_\-. :/]")


def _name(part: str) -> str:
    return _NAME_BAD.sub("_", str(part).replace("/", "_"))


def mlflow_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """'claims/<criterion>/<dataset>/<claim>/<variant>/{diff,lo,hi,verdict,n}' (verdict +1 holds, 0
    undecided, -1 fails); names use only what MLflow accepts (no '@', no '='), a missing interval is left out."""
    out: dict[str, float] = {}
    for r in frame.itertuples(index=False):
        v = "A_to_C" if r.variant == P_VARIANT else r.variant
        base = "/".join(["claims"] + [_name(x) for x in (r.criterion, r.dataset, r.claim, v)])
        vals = {"diff": r.diff, "lo": r.ci_lo, "hi": r.ci_hi, "verdict": VERDICT_SCORE[r.verdict], "n": r.n}
        out.update({f"{base}/{k}": float(x) for k, x in vals.items() if math.isfinite(float(x))})
    return out


def read_claims(report_dir) -> pd.DataFrame | None:
    """The report's tables/claims.csv (None when the report has none)."""
    f = Path(report_dir) / "tables" / "claims.csv"
    if not f.is_file():
        return None
    try:
        df = pd.read_csv(f, dtype={"dataset": str, "variant": str, "seeds": str})
    except pd.errors.EmptyDataError:
        return None
    return df if set(CLAIM_COLUMNS) <= set(df.columns) else None


def criteria_of(frame: pd.DataFrame) -> list[str]:
    """The criteria of a claims frame: the run's first, the paper's SNIS last."""
    cs = list(dict.fromkeys(frame["criterion"].astype(str)))
    return [c for c in cs if c != PAPER_CRITERION] + [c for c in cs if c == PAPER_CRITERION]


def summary_from_report(report_dir) -> str | None:
    """`summary_text` of a built report's claims.csv, or None."""
    df = read_claims(report_dir)
    return summary_text(df, criteria_of(df)) if df is not None and len(df) else None
