"""How a claims frame (claims.claims, tables/claims.csv) is shown: the report's table, the terminal's
summary, one Markdown table over several reports, MLflow metric names, and claims.csv read back."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from orchestration.report.claims_family import DEFAULT, EXPLORATORY, family_size
from orchestration.report.claims_registry import (CLAIM_COLUMNS, CLAIM_ORDER, LEGACY_COLUMNS, P_CLAIM, P_FROM, P_TO,
                                                  P_VARIANT, SIGN)
from orchestration.report.inference import ALPHA, MIN_SEEDS, SEEDS_AND_INSTANCES, TOO_FEW
from orchestration.report.table_format import Table
from orchestration.selection import PAPER_CRITERION

VERDICT_SCORE = {"holds": 1, "undecided": 0, "fails": -1, TOO_FEW: 0, EXPLORATORY: 0}
_LETTER = {"holds": "H", "fails": "F", "undecided": "?", TOO_FEW: "n", EXPLORATORY: "e"}


def _num(v: float, p: bool) -> str:
    return f"{v:+.1f}" if p else f"{v:+.2f}"


def _p_text(p) -> str:
    p = pd.to_numeric(p, errors="coerce")       # a frame built by hand may hold None
    if p is None or not math.isfinite(p):
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


def _alpha(f: pd.DataFrame) -> float:
    a = pd.to_numeric(f.get("alpha", pd.Series(dtype=float)), errors="coerce").dropna()
    return float(a.iloc[0]) if len(a) else ALPHA


def _legend(f: pd.DataFrame, criteria: list[str]) -> list[str]:
    """The table's notes: what each column is, the family the verdicts are Holm over, what is exploratory."""
    alpha, k = _alpha(f), family_size(f)
    notes = ["Δ: mean over seeds of the paired difference first − second method (test metric ×100 at the "
             "heads each criterion selected on the validation log; p as it is). "
             "95 % CI: a t-interval on the crossed variance of seeds and test instances (every seed shares one "
             "test set): seed term + instance term − the seed × instance interaction they both count, degrees of "
             "freedom by Satterthwaite; for p, and for runs without per-instance values, the paired t-interval "
             "over seeds. Seeds > 0: seeds whose difference is positive, of those paired; sign p: the exact "
             "two-sided sign test on them (ties dropped). Holm p: the cell's declared test (t on the crossed "
             "variance; the sign test where declared, as for p) adjusted by Holm over the whole declared family "
             f"at once ({k} cells here). " + (
                 f"Verdict: holds (Holm p < {alpha:g} and Δ > 0), fails (Holm p < {alpha:g} and Δ < 0), undecided "
                 f"(otherwise), {TOO_FEW} (fewer than {MIN_SEEDS} seeds: no verdict and no interval, not in the "
                 f"family), {EXPLORATORY} (a row the family does not declare, and every row under a criterion beside "
                 "the run's: shown, no verdict); the unadjusted interval may exclude 0 where the adjusted verdict is "
                 "undecided. " if len(f) and (f["n"] >= MIN_SEEDS).any() else
                 f"Verdict: {TOO_FEW} in every row: a verdict and an interval need at least {MIN_SEEDS} seeds "
                 "(add seeds with `poxm resume RUN_DIR --add-seeds ...`). ")
             + f"Criteria: {', '.join(criterion_name(c) for c in criteria)}. Test labels choose nothing."]
    if len(f) and (f["family"] == DEFAULT).any():
        notes.append("No declared `claims:` family was read for this report (a run from before families were "
                     "declared): the verdicts are Holm over the default family, every claim above over every dataset × "
                     "variant under the run's criterion, the family a run records when it starts without declaring "
                     "one; here it is applied after the fact.")
    if len(f) and (f["interval"] != SEEDS_AND_INSTANCES).any() and (f["metric"] != "p").any():
        notes.append("Some rows have no per-instance test values (a run from before they were kept, or a published "
                     "folder that kept only other claims' values): their interval covers the seeds only and is "
                     "narrower than it should be.")
    return notes


def _cells(here: pd.DataFrame, c: str) -> list[str]:
    if c not in here.index:
        return ["—"] * 5
    r = here.loc[c]
    return [cell_text(r), str(r["signs"]), _p_text(r["p_sign"]), _p_text(r["p_holm"]), r["verdict"]]


def claims_table(frame: pd.DataFrame, criteria: list[str]) -> Table:
    """One row per (dataset, claim, variant); per criterion (the run's first, then the paper's SNIS)
    the difference [interval], the sign count and its test, the Holm p and the verdict; the number of
    paired seeds last."""
    columns = ["Claim", "Variant", "Metric"]
    for c in criteria:
        h = column_name(c)
        columns += [f"{h}: Δ [95 % CI]", f"{h}: seeds > 0", f"{h}: sign p", f"{h}: Holm p", f"{h}: verdict"]
    columns.append("seeds")
    rows, sections, bold = [], {}, set()
    f = frame[frame["criterion"].isin(criteria)]
    for d in sorted(f["dataset"].unique()):
        fd = f[f["dataset"] == d]
        sections[len(rows)] = f"Dataset {d}"
        keys = sorted({(k, v) for k, v in zip(fd["claim"], fd["variant"])},
                      key=lambda kv: (CLAIM_ORDER.index(kv[0]) if kv[0] in CLAIM_ORDER else len(CLAIM_ORDER), kv[1]))
        for k, v in keys:
            here = fd[(fd["claim"] == k) & (fd["variant"] == v)].set_index("criterion")
            first = here.iloc[0]
            text = first["claim_text"] + (" (ours)" if first["source"] == "ours" else "")
            test = " (sign test)" if first["test"] == SIGN else ""
            row = [text, v, first["metric"] + (" ×100" if first["metric"] != "p" else "") + test]
            for c in criteria:
                row += _cells(here, c)
                if c in here.index and here.loc[c, "verdict"] in ("holds", "fails"):
                    bold.add((len(rows), len(row) - 1))
            row.append("/".join(sorted({str(int(here.loc[c, "n"])) for c in criteria if c in here.index})))
            rows.append(row)
    return Table(name="claims", title="Claims: what this benchmark says", columns=columns, rows=rows,
                 bold=bold, sections=sections, notes=_legend(f, criteria), frame=frame.reset_index(drop=True))


def summary_text(frame: pd.DataFrame, criteria: list[str]) -> str | None:
    """The terminal's compact form: per dataset one line per claim, one column per variant, each cell
    the difference under the first criterion and the verdict letter under each criterion."""
    f = frame[frame["criterion"].isin(criteria)] if len(frame) else frame
    if f is None or f.empty:
        return None
    main = criteria[0]
    if (f["n"] >= MIN_SEEDS).any():
        head = (f"claims: mean paired difference over seeds (x100; p as is) under {main}; verdicts "
                + "/".join(criteria) + f" (H holds, F fails, ? undecided, n too few seeds (< {MIN_SEEDS}), "
                "e exploratory; Holm over the declared family)")
    else:       # no verdict anywhere: say so, and name no verdict the run cannot give
        head = (f"claims: mean paired difference over seeds (x100; p as is) under {main}; no verdicts: "
                f"too few seeds (n; {MIN_SEEDS} are needed) under " + "/".join(criteria))
    out = [head]
    for d in sorted(f["dataset"].unique()):
        fd = f[f["dataset"] == d]
        variants = sorted(v for v in fd["variant"].unique() if v != P_VARIANT)
        names = {r.claim: (f"POXM's p grows {P_FROM}->{P_TO}" if r.claim == P_CLAIM.key
                           else f"{r.claim_text} ({r.metric})" + (" ours" if r.source == "ours" else ""))
                 for r in fd.itertuples(index=False)}
        width = max(len(t) for t in names.values()) + 2
        out.append(f"{d:<{width}}" + "".join(f"{v:>16}" for v in variants))
        for k in [k for k in CLAIM_ORDER if k in names] + sorted(set(names) - set(CLAIM_ORDER)):
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
    lines = [f"| claim ({criterion}; H holds, F fails, ? undecided, n too few seeds, e exploratory; Holm over "
             "each report's declared family) | dataset | " + " | ".join(variants) + " |",
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


# how a confirmatory verdict reads against the exploratory one of the same (claim, dataset, variant)
REPLICATION = {("holds", "holds"): "replicates", ("fails", "fails"): "replicates",
               ("undecided", "undecided"): "undecided in both", ("holds", "fails"): "reversed",
               ("fails", "holds"): "reversed", ("holds", "undecided"): "not confirmed",
               ("fails", "undecided"): "not confirmed", ("undecided", "holds"): "newly decided",
               ("undecided", "fails"): "newly decided"}


def claims_replication(confirmatory: pd.DataFrame, exploratory: list[pd.DataFrame | None],
                       criterion: str = "IS") -> str:
    """One Markdown table: every (claim, dataset, variant) the confirmatory frame and an exploratory frame
    both hold under `criterion`, their differences and verdicts side by side (each frame's own family),
    and how the confirmatory verdict reads against the exploratory one (REPLICATION; a cell without a
    verdict in either, e.g. too few seeds, reads "no verdict"). A dataset the exploratory runs never had
    (a re-drawn split) has no row; the first exploratory frame holding a cell gives it."""
    conf = confirmatory[confirmatory["criterion"] == criterion]
    key = ["claim", "dataset", "variant"]
    expl = pd.concat([f[f["criterion"] == criterion] for f in exploratory if f is not None], ignore_index=True)
    expl = expl.drop_duplicates(key)
    both = conf.merge(expl, on=key, suffixes=("_c", "_e"))
    lines = [f"| claim ({criterion}) | dataset, variant | exploratory: Δ, verdict (seeds) | confirmatory: Δ, verdict "
             "(seeds) | reading |", "|---|---|---|---|---|"]
    for r in both.itertuples(index=False):
        p = r.metric_c == "p"
        reading = REPLICATION.get((r.verdict_e, r.verdict_c), "no verdict")
        lines.append(f"| {r.claim_text_c} | {r.dataset} {r.variant} | {_num(r.diff_e, p)} {r.verdict_e} ({int(r.n_e)}) "
                     f"| {_num(r.diff_c, p)} {r.verdict_c} ({int(r.n_c)}) | {reading} |")
    return "\n".join(lines)


_NAME_BAD = re.compile(r"[^A-Za-z0-9_\-. :/]")


def _name(part: str) -> str:
    return _NAME_BAD.sub("_", str(part).replace("/", "_"))


def mlflow_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """'claims/<criterion>/<dataset>/<claim>/<variant>/{diff,lo,hi,p_holm,p_sign,verdict,n}' (verdict +1
    holds, 0 undecided, too few seeds or exploratory, -1 fails); names use only what MLflow accepts (no
    '@', no '='), a missing value is left out."""
    out: dict[str, float] = {}
    for r in frame.itertuples(index=False):
        v = "A_to_C" if r.variant == P_VARIANT else r.variant
        base = "/".join(["claims"] + [_name(x) for x in (r.criterion, r.dataset, r.claim, v)])
        vals = {"diff": r.diff, "lo": r.ci_lo, "hi": r.ci_hi, "p_holm": r.p_holm, "p_sign": r.p_sign,
                "verdict": VERDICT_SCORE[r.verdict], "n": r.n}
        out.update({f"{base}/{k}": float(x) for k, x in vals.items() if math.isfinite(float(x))})
    return out


def read_claims(report_dir) -> pd.DataFrame | None:
    """The report's tables/claims.csv (None when the report has none); one written before declared
    families (no test, family, p_sign, v_int, alpha) is read with those filled in as then: the t-test,
    the per-claim family taken as the default one, the level 0.05."""
    f = Path(report_dir) / "tables" / "claims.csv"
    if not f.is_file():
        return None
    try:
        df = pd.read_csv(f, dtype={"dataset": str, "variant": str, "seeds": str, "signs": str})
    except pd.errors.EmptyDataError:
        return None
    if not set(LEGACY_COLUMNS) <= set(df.columns):
        return None
    for col, value in (("test", "crossed_t"), ("family", DEFAULT), ("p_sign", math.nan), ("v_int", math.nan),
                       ("alpha", ALPHA)):
        if col not in df.columns:
            df[col] = value
    return df[CLAIM_COLUMNS + [c for c in df.columns if c not in CLAIM_COLUMNS]]


def criteria_of(frame: pd.DataFrame) -> list[str]:
    """The criteria of a claims frame: the run's first, the paper's SNIS last."""
    cs = list(dict.fromkeys(frame["criterion"].astype(str)))
    return [c for c in cs if c != PAPER_CRITERION] + [c for c in cs if c == PAPER_CRITERION]


def summary_from_report(report_dir) -> str | None:
    """`summary_text` of a built report's claims.csv, or None."""
    df = read_claims(report_dir)
    return summary_text(df, criteria_of(df)) if df is not None and len(df) else None
