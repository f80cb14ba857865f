"""Paired agreement of two runs' trial rows: the same grid points (dataset, variant, method, p, lambda,
seed) trained on two paths (e.g. the GPU path with batched heads against the CPU reference), compared on
a test metric, beside the seed-to-seed spread of the reference.

    python -m studies.gpu_cpu_agreement REF_ROWS OTHER_ROWS [--metric R@5] [--dataset bibtex] [--json OUT]

REF_ROWS and OTHER_ROWS are a run's results/rows.csv (or a published rows.csv.gz). Only grid points present
in both are paired. Printed per method: pairs, mean difference (other - ref), mean and largest |difference|,
and the seed-to-seed standard deviation of the reference (the SD over seeds of each grid point, averaged):
the paths agree where the |difference| is well inside that spread.
"""
from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

KEYS = ["dataset", "variant", "method", "p", "lam", "seed"]


def final_test(path: str, metric: str, dataset: str | None) -> pd.DataFrame:
    df = pd.read_csv(path)
    df = df[(df["split"] == "test") & (df["metric"] == metric)]
    if "final" in df:
        df = df[df["final"].astype(str).isin(["True", "true", "1"]) | df["final"].isna()]
    if dataset:
        df = df[df["dataset"] == dataset]
    df = df.assign(lam=df["lam"].fillna(-1.0), p=df["p"].fillna(-1))
    return df.groupby(KEYS, as_index=False)["value"].last()


def agreement(ref: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    both = ref.merge(other, on=KEYS, suffixes=("_ref", "_other"))
    if both.empty:
        raise SystemExit("gpu_cpu_agreement: no grid point is in both row files (different datasets or seeds?)")
    both["diff"] = both["value_other"] - both["value_ref"]
    point = ["dataset", "variant", "method", "p", "lam"]
    spread = ref.groupby(point)["value"].std().rename("seed_sd").reset_index()
    both = both.merge(spread, on=point, how="left")
    out = both.groupby("method").agg(pairs=("diff", "size"), mean_diff=("diff", "mean"),
                                     mean_abs_diff=("diff", lambda d: d.abs().mean()),
                                     max_abs_diff=("diff", lambda d: d.abs().max()),
                                     seed_sd=("seed_sd", "mean"))
    total = pd.DataFrame({"pairs": [len(both)], "mean_diff": [both["diff"].mean()],
                          "mean_abs_diff": [both["diff"].abs().mean()], "max_abs_diff": [both["diff"].abs().max()],
                          "seed_sd": [both["seed_sd"].mean()]}, index=["all"])
    return pd.concat([out, total])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref"), ap.add_argument("other")
    ap.add_argument("--metric", default="R@5")
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--json", default=None, help="also write the table as JSON here")
    a = ap.parse_args(argv)
    table = agreement(final_test(a.ref, a.metric, a.dataset), final_test(a.other, a.metric, a.dataset))
    shown = table.copy()
    for c in ("mean_diff", "mean_abs_diff", "max_abs_diff", "seed_sd"):
        shown[c] = (100 * shown[c]).round(2)           # points (x100), as the reports print R@k
    print(f"{a.metric} x100, other - ref, paired on (dataset, variant, method, p, lambda, seed)")
    print(shown.to_string())
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"metric": a.metric, "table": table.round(6).to_dict(orient="index")}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
