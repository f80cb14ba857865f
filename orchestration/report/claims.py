"""The claims table: what the benchmark says about each claim, per dataset and variant (the report's
first table, the end of `poxm run` / `poxm report`, and the sweep's MLflow parent run).

A claim compares two methods at their selected heads on one test metric:

  poxm_vs_logging, poxm_vs_dm, poxm_vs_banditnet, poxm_vs_pm_banditnet   POXM > the other (R@5; the paper's)
  wpoxm_vs_poxm      wPOXM > POXM on PSR@5 (the paper's)
  dr_poxm_vs_poxm    DR-POXM > POXM on R@5 (ours: the paper leaves DR-POXM to future work)
  dm_vs_logging      DM > the logging policy (R@5; a row the paper leaves out)
  poxm_vs_logging_greedy   POXM's R@5 > the logging policy's greedy ranking's P@5 (would deploying the
                     logging policy's top-5, the logging model's own ranking where beta = 0, have done better?)

and, per dataset, p_grows: POXM's selected p at variant C minus at variant A (the paper: the more
stochastic the logging policy, the larger the selected p).

For each claim and seed, the paired difference d_s = value(first) − value(second) at the heads the
criterion selected for that seed (×100 like the report's metrics; p as it is), with, where the run
kept them (results/test_instances.npz), each test instance's difference too. Reported
(``inference.paired_inference``): the mean of d_s over the n seeds where both exist, a 95 % interval
that covers seed variation and test-set sampling (a t-interval on the sum of a seed term and an
instance term, Welch–Satterthwaite df; the seed term alone for p and for runs without per-instance
values), the per-seed sign count, the raw p-value and Holm's adjusted one within each claim (all
datasets × variants of that claim and criterion), and a verdict from the adjusted p: holds,
fails, undecided, or "too few seeds" below ``inference.MIN_SEEDS``. A claim whose methods or
variants the run lacks has no row. Pure functions of result rows, a selection frame
(``selection.select``) and the per-instance values.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report.inference import (ALPHA, MIN_SEEDS, SEEDS_AND_INSTANCES, TOO_FEW, holm, paired_inference,
                                            verdict_of)
from orchestration.report.table_format import Table
from orchestration.selection import PAPER_CRITERION, selected_rows, selection_label


@dataclass(frozen=True)
class Claim:
    key: str
    text: str
    first: str       # method keys (poxm_core.methods.registry)
    second: str
    metric: str
    source: str      # 'paper' or 'ours'
    second_metric: str | None = None   # the second method's metric where it differs (a greedy ranking's P@5)


CLAIMS = (
    Claim("poxm_vs_logging", "POXM > logging policy", "poxm", "logging", "R@5", "paper"),
    Claim("poxm_vs_dm", "POXM > DM", "poxm", "dm", "R@5", "paper"),
    Claim("poxm_vs_banditnet", "POXM > BanditNet", "poxm", "banditnet", "R@5", "paper"),
    Claim("poxm_vs_pm_banditnet", "POXM > PM-BanditNet", "poxm", "pm_banditnet", "R@5", "paper"),
    Claim("wpoxm_vs_poxm", "wPOXM > POXM", "wpoxm", "poxm", "PSR@5", "paper"),
    Claim("dr_poxm_vs_poxm", "DR-POXM > POXM", "dr_poxm", "poxm", "R@5", "ours"),
    Claim("dm_vs_logging", "DM > logging policy", "dm", "logging", "R@5", "ours"),
    Claim("poxm_vs_supervised_logs", "POXM > supervised on the logs", "poxm", "supervised_logs", "R@5", "ours"),
    Claim("poxm_vs_logging_greedy", "POXM > logging policy's greedy top-5", "poxm", "logging", "R@5", "ours",
          second_metric="P@5"),
)
P_CLAIM = Claim("p_grows", "POXM's selected p grows from A to C", "poxm", "poxm", "p", "paper")
P_FROM, P_TO = "A", "C"
P_VARIANT = f"{P_FROM}→{P_TO}"
SCALE = 100.0
VERDICT_SCORE = {"holds": 1, "undecided": 0, "fails": -1, TOO_FEW: 0}
CLAIM_COLUMNS = ["criterion", "paper_criterion", "dataset", "variant", "claim", "claim_text", "source",
                 "metric", "diff", "ci_lo", "ci_hi", "verdict", "n", "seeds", "signs", "positive", "negative",
                 "se", "df", "p_value", "p_holm", "interval", "m", "v_seed", "v_inst"]
# a deterministic slate has R@k = P@k ...: a greedy method written without stochastic rows uses its twin
_TWIN = {"R@": "P@", "nDCR@": "nDCG@", "PSR@": "PSP@"}


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


def instance_key(dataset, variant, seed, method, p, lam, metric) -> str:
    """The key of one head's per-instance values in results/test_instances.npz (training/reporting.py)."""
    p = -1 if p is None or (isinstance(p, float) and math.isnan(p)) else int(p)
    lam = "nan" if lam is None or (isinstance(lam, float) and math.isnan(lam)) else repr(float(lam))
    return f"{dataset}|{variant}|{int(seed)}|{method}|{p}|{lam}|{metric}"


def _instance_lookup(sel: pd.DataFrame, instances):
    """lookup(dataset, variant, method, seed, metric) -> the selected head's (n_test,) values or None."""
    if instances is None:
        return lambda *a: None
    heads = {(str(r.dataset), str(r.variant), str(r.method), int(r.seed)): (r.p, r.lam)
             for r in sel.itertuples(index=False)}

    def lookup(dataset, variant, method, seed, metric):
        pl = heads.get((dataset, variant, method, int(seed)))
        if pl is None:
            return None
        for m in (metric, _twin(metric)):
            k = instance_key(dataset, variant, seed, method, pl[0], pl[1], m)
            if k in instances:
                return np.asarray(instances[k], dtype=float)
        return None
    return lookup


def _record(criterion: str, dataset: str, variant: str, claim: Claim, a: pd.Series, b: pd.Series,
            scale: float, inst=None) -> dict | None:
    seeds = sorted(set(a.index) & set(b.index))
    if not seeds:
        return None
    diffs = scale * (a.loc[seeds].to_numpy(dtype=float) - b.loc[seeds].to_numpy(dtype=float))
    per = None
    if inst is not None:
        xs = [inst(dataset, variant, claim.first, s, claim.metric) for s in seeds]
        ys = [inst(dataset, variant, claim.second, s, claim.second_metric or claim.metric) for s in seeds]
        if all(x is not None for x in xs + ys) and len({len(x) for x in xs + ys}) == 1:
            per = scale * (np.stack(xs) - np.stack(ys))
    r = paired_inference(diffs, per)
    return {"criterion": criterion, "paper_criterion": criterion == PAPER_CRITERION, "dataset": dataset,
            "variant": variant, "claim": claim.key, "claim_text": claim.text, "source": claim.source,
            "metric": claim.metric if claim.second_metric is None else f"{claim.metric} vs {claim.second_metric}",
            **r, "signs": f"{r['positive']}/{r['n']}", "seeds": " ".join(str(int(s)) for s in seeds)}


def with_verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    """Holm's adjusted p-values within each (criterion, claim) over its datasets × variants (cells with
    fewer than MIN_SEEDS seeds left out of the family), and the verdicts they give."""
    f = frame.copy()
    f["p_holm"] = np.nan
    for _, idx in f.groupby(["criterion", "claim"], sort=False).groups.items():
        sub = f.loc[idx]
        p = sub["p_value"].where(sub["n"] >= MIN_SEEDS)
        f.loc[idx, "p_holm"] = holm(p.to_numpy(dtype=float))
    f["verdict"] = [verdict_of(d, p, n) for d, p, n in zip(f["diff"], f["p_holm"], f["n"])]
    return f


def claims(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str, instances=None) -> pd.DataFrame:
    """Every claim the run can check, under the honest selection by `criterion` in `selection`.

    `rows`: result rows (``selection.check_rows``); `selection`: from ``selection.select(rows,
    criterion)`` (other labels in it are ignored); `instances`: a mapping of per-instance test values
    (results/test_instances.npz opened with np.load) or None. Columns ``CLAIM_COLUMNS``; one row per
    (dataset, variant, claim) with at least one seed where both methods have a value.
    """
    label = selection_label(criterion)
    sel = selection[selection["selection"] == label]
    if sel.empty:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    test = selected_rows(rows, sel, label, split="test")
    values = _last_values(test)
    inst = _instance_lookup(sel, instances)
    recs = []
    for d in sorted(sel["dataset"].astype(str).unique()):
        variants = sorted(sel[sel["dataset"] == d]["variant"].astype(str).unique())
        for c in CLAIMS:
            for v in variants:
                r = _record(criterion, d, v, c, _per_seed(values, d, v, c.first, c.metric),
                            _per_seed(values, d, v, c.second, c.second_metric or c.metric), SCALE, inst)
                if r is not None:
                    recs.append(r)
        if P_FROM in variants and P_TO in variants:
            ps = sel[(sel["dataset"] == d) & (sel["method"] == P_CLAIM.first) & (sel["p"] >= 0)]
            at = {v: ps[ps["variant"] == v].drop_duplicates("seed").set_index("seed")["p"].astype(float)
                  for v in (P_FROM, P_TO)}
            r = _record(criterion, d, P_VARIANT, P_CLAIM, at[P_TO], at[P_FROM], 1.0)
            if r is not None:
                recs.append(r)
    frame = pd.DataFrame(recs, columns=[c for c in CLAIM_COLUMNS if c != "p_holm"] + ["p_holm"])
    return with_verdicts(frame)[CLAIM_COLUMNS] if len(frame) else pd.DataFrame(columns=CLAIM_COLUMNS)


# --------------------------------------------------------------------------------------------
# display: the report's table, the terminal's summary, MLflow metric names

def _num(v: float, p: bool) -> str:
    return f"{v:+.1f}" if p else f"{v:+.2f}"


def _p_text(p: float) -> str:
    if not math.isfinite(p):
        return "—"
    # three significant digits: a p of 0.0504 must not print as "0.050" beside an undecided verdict
    return "<0.001" if p < 0.001 else f"{p:.3g}"


def cell_text(r) -> str:
    """'+10.77 [+10.70, +10.85]' (mean paired difference [95 % interval]); below MIN_SEEDS seeds the
    value alone (two seeds cannot say how much a third would differ)."""
    p = r["metric"] == "p"
    s = _num(r["diff"], p)
    enough = not math.isfinite(float(r.get("n", MIN_SEEDS))) or int(r.get("n", MIN_SEEDS)) >= MIN_SEEDS
    if enough and math.isfinite(r["ci_lo"]) and math.isfinite(r["ci_hi"]):
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
        columns += [f"{h}: Δ [95 % CI]", f"{h}: seeds > 0", f"{h}: Holm p", f"{h}: verdict"]
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
                    row += [cell_text(r), str(r["signs"]), _p_text(r["p_holm"]), r["verdict"]]
                    if r["verdict"] in ("holds", "fails"):
                        bold.add((len(rows), len(row) - 1))
                else:
                    row += ["—", "—", "—", "—"]
            row.append("/".join(sorted({str(int(here.loc[c, "n"])) for c in criteria if c in here.index})))
            rows.append(row)
    notes = ["Δ: mean over seeds of the paired difference first − second method (test metric ×100 at the "
             "heads each criterion selected on the validation log; p as it is). "
             "95 % CI: a t-interval whose variance adds the seed-to-seed variance of the per-seed differences "
             "and the test-set sampling variance of the seed-averaged per-instance differences (every seed "
             "shares one test set), degrees of freedom by Welch–Satterthwaite; for p, and for runs without "
             "per-instance values, the paired t-interval over seeds. Seeds > 0: seeds whose difference is "
             "positive, of those paired. Holm p: the two-sided p-value adjusted (Holm) within each claim over "
             "its datasets × variants. " + (
                 f"Verdict: holds (Holm p < {ALPHA} and Δ > 0), fails (Holm p < {ALPHA} and Δ < 0), undecided "
                 f"(otherwise), {TOO_FEW} (fewer than {MIN_SEEDS} seeds: no verdict and no interval, not in the "
                 "Holm family); the unadjusted interval may exclude 0 where the adjusted verdict is undecided. "
                 if len(f) and (f["n"] >= MIN_SEEDS).any() else
                 f"Verdict: {TOO_FEW} in every row: a verdict and an interval need at least {MIN_SEEDS} seeds "
                 "(add seeds with `poxm resume RUN_DIR --add-seeds ...`). ")
             + f"Criteria: {', '.join(criterion_name(c) for c in criteria)}. Test labels choose nothing."]
    if len(f) and (f["interval"] != SEEDS_AND_INSTANCES).any() and (f["metric"] != "p").any():
        notes.append("Some rows have no per-instance test values (a run from before they were kept): their "
                     "interval covers the seeds only and is narrower than it should be.")
    return Table(name="claims", title="Claims: what this benchmark says", columns=columns, rows=rows,
                 bold=bold, sections=sections, notes=notes, frame=frame.reset_index(drop=True))


_LETTER = {"holds": "H", "fails": "F", "undecided": "?", TOO_FEW: "n"}


def summary_text(frame: pd.DataFrame, criteria: list[str]) -> str | None:
    """The terminal's compact form: per dataset one line per claim, one column per variant, each cell
    the difference under the first criterion and the verdict letter under each criterion."""
    f = frame[frame["criterion"].isin(criteria)] if len(frame) else frame
    if f is None or f.empty:
        return None
    main = criteria[0]
    if (f["n"] >= MIN_SEEDS).any():
        head = (f"claims: mean paired difference over seeds (x100; p as is) under {main}; verdicts "
                + "/".join(criteria) + f" (H holds, F fails, ? undecided, n too few seeds (< {MIN_SEEDS}); "
                "Holm-adjusted within each claim)")
    else:       # no verdict anywhere: say so, and name no verdict the run cannot give
        head = (f"claims: mean paired difference over seeds (x100; p as is) under {main}; no verdicts: "
                f"too few seeds (n; {MIN_SEEDS} are needed) under " + "/".join(criteria))
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
    lines = [f"| claim ({criterion}; H holds, F fails, ? undecided, n too few seeds; Holm) | dataset | "
             + " | ".join(variants) + " |",
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
    """'claims/<criterion>/<dataset>/<claim>/<variant>/{diff,lo,hi,p_holm,verdict,n}' (verdict +1 holds, 0
    undecided or too few seeds, -1 fails); names use only what MLflow accepts (no '@', no '='), a missing
    interval is left out."""
    out: dict[str, float] = {}
    for r in frame.itertuples(index=False):
        v = "A_to_C" if r.variant == P_VARIANT else r.variant
        base = "/".join(["claims"] + [_name(x) for x in (r.criterion, r.dataset, r.claim, v)])
        vals = {"diff": r.diff, "lo": r.ci_lo, "hi": r.ci_hi, "p_holm": r.p_holm, "verdict": VERDICT_SCORE[r.verdict],
                "n": r.n}
        out.update({f"{base}/{k}": float(x) for k, x in vals.items() if math.isfinite(float(x))})
    return out


def read_claims(report_dir) -> pd.DataFrame | None:
    """The report's tables/claims.csv (None when the report has none)."""
    f = Path(report_dir) / "tables" / "claims.csv"
    if not f.is_file():
        return None
    try:
        df = pd.read_csv(f, dtype={"dataset": str, "variant": str, "seeds": str, "signs": str})
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
