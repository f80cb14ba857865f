"""How close the synthetic presets come to the datasets they imitate: label statistics and learnability.

For each preset it generates the data (seeded) and prints, beside the real dataset's published values,
- labels per instance, instances per label (training split, over all L labels), the share of training
  instances carrying the most frequent label and the mean share of the five most frequent ones, the
  share of labels without a training instance, and (EUR-Lex) the number of distinct labels in 1,316
  random test rows (the real value is measured on 1,316 rows of the XC EUR-Lex-4K test split);
- test P@1/3/5 of the popularity ranking (the five most frequent training labels for everyone), of the
  project's core model trained one-vs-all on a fraction alpha = 0.2 of the training rows (the logging
  model) and on all of them (a supervised model), greedy top-k.

    python -m studies.synthetic_calibration                       # eurlex as in the quickstart (D 5,000)
    python -m studies.synthetic_calibration --n-labels 2000 --stats-only   # the quickstart's data
    python -m studies.synthetic_calibration --preset wiki10 --n-features 5000
    python -m studies.synthetic_calibration --preset amazon670k --stats-only   # labels only (no model)

The model settings default to the quickstart's (dim 64, 10 epochs); `--set key=value` overrides a preset's
shape parameter (e.g. --set signal=0.1) for calibration runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from poxm_core.data import PRESETS, make_synthetic  # noqa: E402

# Published statistics (Extreme Classification Repository / the paper's Table 1): N_train, L, labels per
# instance, instances per label over the training split. EUR-Lex head shares: measured on the 1,316 rows of
# the XC EUR-Lex-4K test split available here (no training split is); typical published P@1/P@5 of strong
# supervised models (AttentionXML, DiSMEC, Parabel) as a guide to what "learnable" should mean.
REAL = {
    "eurlex": {"name": "EUR-Lex-4K", "n_train": 15539, "L": 3993, "labels": 5.31, "inst": 20.79,
               "head": 7.60, "top5": 6.07, "distinct1316": 1744, "sup_p1": "~82-87", "sup_p5": "~58-62"},
    "wiki10": {"name": "Wiki10-31K", "n_train": 14146, "L": 30938, "labels": 18.64, "inst": 8.52,
               "head": None, "top5": None, "distinct1316": None, "sup_p1": "~85-88", "sup_p5": "~63-68"},
    "amazon670k": {"name": "Amazon-670K", "n_train": 490449, "L": 670091, "labels": 5.45, "inst": 3.99,
                   "head": None, "top5": None, "distinct1316": None, "sup_p1": "~44-48", "sup_p5": "~36-41"},
}


def label_stats(Ytr: sp.csr_matrix, Yte: sp.csr_matrix, seed: int = 0, n_rows: int = 1316) -> dict[str, float]:
    """Label statistics of a generated (or real) dataset; shares in per cent of training instances."""
    n, L = Ytr.shape
    freq = np.sort(Ytr.getnnz(axis=0))[::-1]
    rows = np.random.default_rng(seed).choice(Yte.shape[0], size=min(n_rows, Yte.shape[0]), replace=False)
    return {"labels": Ytr.nnz / n, "inst": Ytr.nnz / L, "head": 100 * freq[0] / n,
            "top5": 100 * freq[:5].mean() / n, "empty": 100 * float(np.mean(freq == 0)),
            "median": float(np.median(freq)), "distinct1316": int(np.unique(Yte[rows].indices).size)}


def precision_at(Y: sp.csr_matrix, ranked: np.ndarray, ks=(1, 3, 5)) -> dict[int, float]:
    """P@k in per cent of rows: ranked (n, >= max k) label ids per row."""
    Y = Y.tocsr()
    hits = np.zeros(ranked.shape, dtype=np.float64)
    for j in range(ranked.shape[1]):
        hits[:, j] = np.asarray(Y[np.arange(Y.shape[0]), ranked[:, j]]).ravel()
    cum = np.cumsum(hits, axis=1)
    return {k: 100 * float(cum[:, k - 1].mean()) / k for k in ks}


def popularity_ranking(Ytr: sp.csr_matrix, n: int, k: int = 5) -> np.ndarray:
    """The k most frequent training labels (ties by smaller id) for each of n rows."""
    freq = Ytr.getnnz(axis=0)
    top = np.lexsort((np.arange(freq.size), -freq))[:k]
    return np.tile(top, (n, 1))


def model_ranking(data, alpha: float, seed: int, dim: int, epochs: int, k: int = 5, device: str = "cpu",
                  test_rows: np.ndarray | None = None) -> np.ndarray:
    """Greedy top-k on test of the core model trained one-vs-all on a fraction alpha of the training rows."""
    from poxm_core.config.schema import ModelConfig
    from poxm_core.model import chunked_topk, encode, train_logging_model
    model = train_logging_model(data.train.X, data.train.Y, ModelConfig(dim=dim, epochs=epochs), alpha, seed,
                                device=device, progress=False)
    W, b = model.head_arrays()
    Xte = data.test.X if test_rows is None else data.test.X[test_rows]
    idx, _ = chunked_topk(encode(model, Xte, device), W, b, k, device=device)
    return idx


def generate(preset: str, seed: int, n_features: int | None, scale: float, overrides: dict,
             n_labels: int | None = None) -> object:
    p = dataclasses.replace(PRESETS[preset], **overrides)
    return make_synthetic(max(1, round(p.n_train * scale)), max(1, round(p.n_test * scale)),
                          n_features or p.n_features, n_labels or p.n_labels, p.mean_labels, seed, name=preset,
                          **p.generator_kwargs())


def _parse_set(items: list[str]) -> dict:
    out = {}
    fields = {f.name: f.type for f in dataclasses.fields(PRESETS["eurlex"])}
    for it in items:
        key, _, val = it.partition("=")
        if key not in fields:
            raise SystemExit(f"--set {it}: unknown preset field {key!r} (one of {', '.join(fields)})")
        out[key] = int(val) if fields[key] in ("int", int) else float(val)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="eurlex", choices=sorted(PRESETS))
    ap.add_argument("--n-features", type=int, default=None, help="D (default: the quickstart's 5,000 for eurlex)")
    ap.add_argument("--n-labels", type=int, default=None, help="L (default: the preset's)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the preset's N_train / N_test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--test-rows", type=int, default=None, help="evaluate the models on this many random test rows")
    ap.add_argument("--stats-only", action="store_true", help="label statistics only (no model trained)")
    ap.add_argument("--set", nargs="*", default=[], help="preset field overrides, key=value")
    a = ap.parse_args(argv)
    n_features = a.n_features or (5000 if a.preset == "eurlex" else None)
    t0 = time.perf_counter()
    data = generate(a.preset, a.seed, n_features, a.scale, _parse_set(a.set), a.n_labels)
    t_gen = time.perf_counter() - t0
    real, got = REAL[a.preset], label_stats(data.train.Y, data.test.Y, a.seed)
    print(f"{a.preset}: N_train={data.train.n}, N_test={data.test.n}, D={data.n_features}, L={data.n_labels} "
          f"(generated in {t_gen:.1f} s, seed {a.seed})")
    print(f"| statistic | generated | {real['name']} |\n|---|---|---|")

    def fmt(v, f):
        return "n/a" if v is None else format(v, f)
    for key, what, f in (("labels", "labels / instance", ".2f"), ("inst", "instances / label (train)", ".2f"),
                         ("head", "head label, % of training instances", ".2f"),
                         ("top5", "5 most frequent labels, mean % of instances", ".2f"),
                         ("empty", "labels without a training instance, %", ".1f"),
                         ("median", "median training instances per label", ".0f"),
                         ("distinct1316", "distinct labels in 1,316 test rows", "d")):
        print(f"| {what} | {fmt(got[key], f)} | {fmt(real.get(key), f)} |")
    test = np.arange(data.test.n)
    if a.test_rows is not None and a.test_rows < data.test.n:
        test = np.sort(np.random.default_rng(a.seed).choice(data.test.n, a.test_rows, replace=False))
    Yte = data.test.Y[test]
    rows = {"popularity ranking": popularity_ranking(data.train.Y, test.size)}
    if not a.stats_only:
        for name, alpha in (("logging model (alpha 0.2)", 0.2), ("supervised (alpha 1.0)", 1.0)):
            t0 = time.perf_counter()
            ranked = model_ranking(data, alpha, a.seed, a.dim, a.epochs, device=a.device, test_rows=test)
            rows[name + f" [{time.perf_counter() - t0:.0f} s]"] = ranked
    print(f"\ntest P@1 / P@3 / P@5 on {test.size} test rows (x100; core model dim {a.dim}, {a.epochs} epochs; "
          f"strong supervised models on the real data: P@1 {real['sup_p1']}, P@5 {real['sup_p5']})")
    print("| ranking | P@1 | P@3 | P@5 |\n|---|---|---|---|")
    for name, ranked in rows.items():
        p = precision_at(Yte, ranked)
        print(f"| {name} | {p[1]:.2f} | {p[3]:.2f} | {p[5]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
