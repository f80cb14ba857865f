"""What re-drawing the train/test split with every seed adds to the variance, and whether a verdict changes.

Seeds vary the logging policy and training, never the split, so a claim that holds generalises over
seeds and test rows, not over training sets. A run can hold the same data twice: one dataset whose
seeds re-draw the split (`split: {redraw_per_seed: true}`; also any true `redraw...` key or a
`seed: per_seed` anywhere in the dataset's entry but its variants) beside one with a fixed split.
They are paired by name (the fixed dataset's name + '-', '_' or '.' begins the re-drawn one's:
`corel5k` and `corel5k-redraw`), else by the same data source (format, files, folder, path,
synthetic sizes: one twin only), or explicitly (``split_pairs(config, pairs=[(redrawn, fixed)])``).

For each claim cell (criterion, claim, variant) both datasets have, from the claims frame: the
seed-to-seed variance of the per-seed differences s² = n·v_seed (×100², p as it is) on each, their
difference (the component the re-draw adds to one seed's difference), that difference less the fixed
split's test-set term, and their ratio with its 95 % F interval (normal seeds), and the two verdicts.
In the crossed model of ``inference`` (seed σ_a², instance σ_b², interaction σ_e², m test rows) plus a
training-set component σ_t² that only a re-draw moves: s²_fixed estimates σ_a² + σ_e²/m, s²_redrawn
σ_a² + σ_t² + (σ_b² + σ_e²)/m, so the difference estimates σ_t² + σ_b²/m, and less the fixed split's
test-set term v_inst − v_int (= σ_b²/m in expectation) it estimates σ_t², the training sample's share,
which no interval on one split covers. Likewise each method's test metric (s² of its per-seed values, from the seed statistics).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy import stats as st

from orchestration.report.inference import SEEDS_AND_INSTANCES
from orchestration.report.method_names import method_name
from orchestration.report.table_format import Table

PER_SEED = {"per_seed", "per-seed", "per seed", "run_seed", "each_seed", "redraw", "seed"}
SOURCE_KEYS = ("format", "folder", "path", "train", "test", "synthetic", "source", "registry", "logged")
SPLIT_COLUMNS = ["criterion", "redrawn", "fixed", "kind", "key", "text", "variant", "n_redrawn", "n_fixed",
                 "var_redrawn", "var_fixed", "added", "beyond_test", "ratio", "ratio_lo", "ratio_hi",
                 "verdict_redrawn", "verdict_fixed", "changed"]
METRICS = ("R@5",)
SCALE = 100.0


def redraws_split(entry: dict) -> bool:
    """Whether a dataset's config entry says its seeds re-draw the split: a `seed` whose value names the
    run seed ('per_seed', ...), or a key naming a re-draw ('redraw', 'redraw_per_seed', ...) set true,
    anywhere in the entry but its variants."""
    def walk(node) -> bool:
        if isinstance(node, dict):
            for k, v in node.items():
                key = str(k).lower()
                if key == "variants":
                    continue
                if key.endswith("seed") and isinstance(v, str) and v.strip().lower() in PER_SEED:
                    return True
                if "redraw" in key and v is True:
                    return True
                if walk(v):
                    return True
        return False
    return isinstance(entry, dict) and walk(entry)


def _source(entry: dict) -> str:
    """The entry's data source as text (its SOURCE_KEYS); '' for a registry dataset named only by `name`."""
    src = {k: entry[k] for k in SOURCE_KEYS if entry.get(k) is not None}
    return json.dumps(src, sort_keys=True, default=str) if src else ""


def split_pairs(config: dict, pairs=None) -> list[tuple[str, str]]:
    """(re-drawn, fixed) dataset names: `pairs` as given (names the config lacks are kept: the rows decide),
    else each re-drawn dataset with its fixed twin by name, else by the same data source (one twin only)."""
    if pairs:
        return [(str(a), str(b)) for a, b in pairs]
    entries = [d for d in (config or {}).get("datasets", []) or [] if isinstance(d, dict) and "name" in d]
    redrawn = [d for d in entries if redraws_split(d)]
    fixed = [d for d in entries if not redraws_split(d)]
    out = []
    for r in redrawn:
        rn = str(r["name"])
        by_name = [f for f in fixed if any(rn.startswith(str(f["name"]) + sep) for sep in "-_.")]
        by_source = [f for f in fixed if _source(f) and _source(f) == _source(r)]
        if by_name:
            out.append((rn, str(max(by_name, key=lambda f: len(str(f["name"])))["name"])))
        elif len(by_source) == 1:
            out.append((rn, str(by_source[0]["name"])))
    return out


def _ratio(var_r: float, n_r: int, var_f: float, n_f: int, level: float = 0.95) -> tuple[float, float, float]:
    """s²_r / s²_f and its `level` interval from the F distribution with (n_r − 1, n_f − 1) df."""
    if not (n_r >= 2 and n_f >= 2 and math.isfinite(var_r) and math.isfinite(var_f)) or var_f <= 0:
        return math.nan, math.nan, math.nan
    ratio = var_r / var_f
    a = (1 - level) / 2
    return ratio, ratio / float(st.f.ppf(1 - a, n_r - 1, n_f - 1)), ratio / float(st.f.ppf(a, n_r - 1, n_f - 1))


def _row(base: dict, n_r: int, var_r: float, n_f: int, var_f: float, test_term: float) -> dict:
    ratio, lo, hi = _ratio(var_r, n_r, var_f, n_f)
    added = var_r - var_f
    return {**base, "n_redrawn": n_r, "n_fixed": n_f, "var_redrawn": var_r, "var_fixed": var_f, "added": added,
            "beyond_test": added - test_term if math.isfinite(test_term) else math.nan,
            "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi}


def _claim_rows(claims: pd.DataFrame, redrawn: str, fixed: str) -> list[dict]:
    keys = ["criterion", "claim", "variant"]
    r = claims[claims["dataset"] == redrawn].drop_duplicates(keys).set_index(keys)
    f = claims[claims["dataset"] == fixed].drop_duplicates(keys).set_index(keys)
    out = []
    for k in [k for k in r.index if k in f.index]:
        a, b = r.loc[k], f.loc[k]
        var = [float(x["v_seed"]) * int(x["n"]) for x in (a, b)]
        # the fixed split's test-set term σ_b²/m = v_inst − v_int (v_int, the interaction's share, where the
        # claims recorded it), where the claim had per-instance values (else unknown, not 0)
        v_int = float(b["v_int"]) if pd.notna(b.get("v_int", math.nan)) else 0.0
        v_inst = (float(b["v_inst"]) - v_int if b.get("interval") == SEEDS_AND_INSTANCES
                  and pd.notna(b.get("v_inst")) else math.nan)
        base = {"criterion": k[0], "redrawn": redrawn, "fixed": fixed, "kind": "claim", "key": k[1],
                "text": f"{a['claim_text']} ({a['metric']})", "variant": k[2], "verdict_redrawn": a["verdict"],
                "verdict_fixed": b["verdict"], "changed": a["verdict"] != b["verdict"]}
        out.append(_row(base, int(a["n"]), var[0], int(b["n"]), var[1], v_inst))
    return out


def _metric_rows(seed_stats: pd.DataFrame, redrawn: str, fixed: str, criterion: str, metrics) -> list[dict]:
    keys = ["variant", "method", "metric"]
    s = seed_stats[seed_stats["metric"].isin(list(metrics))]
    r = s[s["dataset"] == redrawn].drop_duplicates(keys).set_index(keys)
    f = s[s["dataset"] == fixed].drop_duplicates(keys).set_index(keys)
    out = []
    for k in [k for k in r.index if k in f.index]:
        var = [(SCALE * float(x["std"])) ** 2 for x in (r.loc[k], f.loc[k])]
        base = {"criterion": criterion, "redrawn": redrawn, "fixed": fixed, "kind": "metric", "key": f"{k[1]}|{k[2]}",
                "text": f"{method_name(k[1])} ({k[2]})", "variant": k[0], "verdict_redrawn": "", "verdict_fixed": "",
                "changed": False}
        out.append(_row(base, int(r.loc[k, "n"]), var[0], int(f.loc[k, "n"]), var[1], math.nan))
    return out


def split_variance(claims: pd.DataFrame, seed_stats: pd.DataFrame | None, pairs: list[tuple[str, str]],
                   criterion: str, metrics=METRICS) -> pd.DataFrame:
    """Columns SPLIT_COLUMNS (variances ×100², p's as they are): every claim cell of every criterion both
    datasets of a pair have, then each method's `metrics` (from `seed_stats` at the `criterion`'s heads)."""
    recs = []
    for redrawn, fixed in pairs:
        if claims is not None and len(claims):
            recs += _claim_rows(claims, redrawn, fixed)
        if seed_stats is not None and len(seed_stats):
            recs += _metric_rows(seed_stats, redrawn, fixed, criterion, metrics)
    return pd.DataFrame(recs, columns=SPLIT_COLUMNS)


def _v(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.3g}"


def _ratio_text(r) -> str:
    if not math.isfinite(r["ratio"]):
        return "—"
    return f"{r['ratio']:.2f}" + (f" [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]" if math.isfinite(r["ratio_lo"]) else "")


def split_variance_table(frame: pd.DataFrame, criterion: str) -> Table:
    """The run's criterion's claim cells, then each method's metric, one section per pair."""
    columns = ["Claim / metric", "Variant", "s² fixed (seeds)", "s² re-drawn (seeds)", "added", "beyond the test-set term",
               "ratio [95 % CI]", "verdict fixed → re-drawn"]
    f = frame[frame["criterion"] == criterion]
    rows, sections, bold = [], {}, set()
    for (redrawn, fixed), g in f.groupby(["redrawn", "fixed"], sort=False):
        sections[len(rows)] = f"{redrawn} (split re-drawn per seed) against {fixed} (one fixed split)"
        for r in g.itertuples(index=False):
            r = r._asdict()
            verdict = (f"{r['verdict_fixed']} → {r['verdict_redrawn']}" if r["changed"] else r["verdict_fixed"]) \
                if r["kind"] == "claim" else ""
            if r["changed"]:
                bold.add((len(rows), len(columns) - 1))
            rows.append([r["text"], r["variant"], f"{_v(r['var_fixed'])} ({r['n_fixed']})",
                         f"{_v(r['var_redrawn'])} ({r['n_redrawn']})", _v(r["added"]), _v(r["beyond_test"]),
                         _ratio_text(r), verdict])
    notes = ["s²: the seed-to-seed variance of the per-seed values (a claim's paired difference, ×100², p as it is; a "
             "method's test metric ×100²) on the dataset whose seeds re-draw the train/test split and on the same data "
             "with one fixed split. added: s² re-drawn − s² fixed, what a fresh training and test set adds to one "
             "seed's value; beyond the test-set term: added less the fixed split's test-set term of that claim (what "
             "its interval already counts), ≈ the training sample's share, which no interval on one split covers. "
             "ratio: s² re-drawn / s² fixed, its 95 % interval from the F distribution (normal seeds). Verdicts: the "
             f"claims table's (criterion {criterion}); a change is bold."]
    return Table(name="split_variance", title="What re-drawing the split adds: variance over seeds, fixed against "
                 "re-drawn", columns=columns, rows=rows, bold=bold, sections=sections, notes=notes,
                 frame=frame.reset_index(drop=True))


def split_variance_sentence(frame: pd.DataFrame, criterion: str) -> str:
    """Per pair: the median ratio of the claims' seed variances (range, how many intervals above 1), the median
    added component, and the verdicts that change (every criterion), or that none does."""
    out = []
    for (redrawn, fixed), g in frame.groupby(["redrawn", "fixed"], sort=False):
        c = g[(g["kind"] == "claim") & (g["criterion"] == criterion) & np.isfinite(g["ratio"].astype(float))]
        text = f"{redrawn}, whose seeds re-draw the split, against {fixed} (one fixed split): "
        if len(c):
            text += (f"the per-seed variance of the claim differences is a median {c['ratio'].median():.2f}× the fixed "
                     f"split's ({c['ratio'].min():.2f}–{c['ratio'].max():.2f} over {len(c)} cells under {criterion}, "
                     f"{int((c['ratio_lo'] > 1).sum())} with a 95 % interval above 1); the re-draw adds a median "
                     f"{c['added'].median():.3g} (×100²) to one seed's variance")
            beyond = c["beyond_test"].astype(float)
            if np.isfinite(beyond).any():
                text += f", {np.nanmedian(beyond):.3g} beyond the fixed split's test-set term"
            text += ". "
        ch = g[(g["kind"] == "claim") & g["changed"].astype(bool)]
        if ch.empty:
            text += f"No claim verdict changes between the two ({int((g['kind'] == 'claim').sum())} claim cells)."
        else:
            text += f"{len(ch)} claim verdict{'s' if len(ch) > 1 else ''} change: " + "; ".join(
                f"{r.text}, variant {r.variant}, {r.criterion}: {r.verdict_fixed} → {r.verdict_redrawn}"
                for r in ch.itertuples(index=False)) + "."
        out.append(text)
    return " ".join(out)


def split_variance_blocks(claims: pd.DataFrame, seed_stats: pd.DataFrame | None, config: dict, criterion: str,
                          protocol: str | None, tdir, out, pairs=None) -> list[tuple]:
    """The report's section (heading, sentence, table); [] when the run has no re-drawn dataset with a twin."""
    from pathlib import Path

    from orchestration.report.blocks import table_blocks
    frame = split_variance(claims, seed_stats, split_pairs(config, pairs), criterion)
    if frame.empty:
        return []
    return ([("h2", "Re-drawn splits: the variance a new training set adds"),
             ("p", split_variance_sentence(frame, criterion))]
            + table_blocks(split_variance_table(frame, criterion), protocol, Path(tdir), Path(out)))
