"""Seconds to evaluate one all-label head (BanditNet, PM-BanditNet: a softmax over every label) at
Amazon-670K's shapes, the current code beside the formulas it replaced, with their largest differences.

  val    `val_arrays` on the validation log (49,045 logged slates of 5; log pi under IS and sIS): the
         labels a slate does not hold lumped into one column, against `pl_log_conditionals_torch` on
         the whole float64 row (the earlier code).
  test   `test_table` on the test set (153,025 rows; top 1,024 labels, renormalised, and the greedy
         ranking): the tie-aware prefix, against `greedy_from_policy` on all 1,024 columns.
  metrics  `stochastic_metrics` of that table (32 Monte-Carlo slates a row, random true labels): on
         the device (a GPU run's path) against NumPy's (a CPU run's path, timed on the same rows share).

The head is random (L 670,091, hidden 128; the cost depends on the shapes only). The earlier formulas
run on `--old-frac` of the rows (they are slow) and their time is scaled up; the differences are over
those rows.

  python benchmarks/bench_all_label_eval.py                 # CUDA if available
  python benchmarks/bench_all_label_eval.py --device cpu --n-val 600 --n-test 600
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from poxm_core.estimators import pl_log_conditionals_torch  # noqa: E402
from poxm_core.metrics.ranking import greedy_from_policy  # noqa: E402
from poxm_core.policy.heads import HeadParams  # noqa: E402
from poxm_core.training.evaluation import PolicyView, test_table, val_arrays  # noqa: E402


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device):
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--labels", type=int, default=670_091)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--n-val", type=int, default=49_045)
    ap.add_argument("--n-test", type=int, default=153_025)
    ap.add_argument("--max-support", type=int, default=1024)
    ap.add_argument("--old-frac", type=float, default=0.1)
    ap.add_argument("--chunk-elems", type=int, default=0, help="logits per chunk on a GPU (default: the code's, 2**26)")
    a = ap.parse_args(argv)
    if a.chunk_elems:
        import poxm_core.training.evaluation as evaluation
        evaluation._CHUNK_ELEMS_GPU = a.chunk_elems
    dev = torch.device(a.device)
    g = torch.Generator(device=dev).manual_seed(0)
    L, h, K, ell = a.labels, a.hidden, 100, 5
    P = HeadParams(torch.randn(L, h, generator=g, device=dev) * 0.3, torch.randn(L, generator=g, device=dev))
    rng = np.random.default_rng(0)
    fig = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "labels": L,
           "chunk_elems": a.chunk_elems or "default"}

    Zv = torch.randn(a.n_val, h, generator=g, device=dev)
    cand = rng.integers(0, L, (a.n_val, K))
    rho = np.full((a.n_val, K), 1.0 / K)
    log = types.SimpleNamespace(n=a.n_val, instance=np.arange(a.n_val), actions=cand[:, :ell].copy(),
                                cand_pos=np.tile(np.arange(ell), (a.n_val, 1)))
    view = PolicyView("all", None, P)
    val_arrays(view, Zv[:200], cand, rho, types.SimpleNamespace(**{**vars(log), "n": 200}), 10, None, dev)  # warm-up
    arr, fig["val_s"] = _timed(lambda: val_arrays(view, Zv, cand, rho, log, 10, None, dev), dev)
    n_old = max(1, int(a.n_val * a.old_frac))

    def old_val():
        out = []
        for s in range(0, n_old, 100):
            e = min(s + 100, n_old)
            S = (Zv[s:e] @ P.W.T + P.b).double()
            out.append(pl_log_conditionals_torch(S, torch.as_tensor(log.actions[s:e], device=dev), check=False).cpu())
        return torch.cat(out).numpy()
    ref, t = _timed(old_val, dev)
    fig["val_old_s"] = t * a.n_val / n_old
    fig["val_max_abs_diff"] = float(np.abs(ref - arr["logpi_is"][:n_old]).max())

    Zt = torch.randn(a.n_test, h, generator=g, device=dev)
    ct = rng.integers(0, L, (a.n_test, K))
    rt = np.full((a.n_test, K), 1.0 / K)
    (sup, probs, ranking, lost), fig["test_s"] = _timed(
        lambda: test_table(view, Zt, ct, rt, 5, a.max_support, dev), dev)
    n_old = max(1, int(a.n_test * a.old_frac))
    ref, t = _timed(lambda: greedy_from_policy(sup[:n_old], np.log(probs[:n_old]), 5), dev)
    fig["test_old_ranking_s"] = t * a.n_test / n_old
    fig["test_rankings_equal"] = bool(np.array_equal(ref, ranking[:n_old]))
    fig["test_truncated_mass"] = lost

    # the test metrics of that table: Monte-Carlo slates (32 a row) on the device against NumPy's
    import scipy.sparse as sp
    from poxm_core.metrics.ranking import stochastic_metrics
    Y = sp.csr_matrix((np.ones(a.n_test * 5), rng.integers(0, L, a.n_test * 5), np.arange(0, a.n_test * 5 + 1, 5)),
                      shape=(a.n_test, L))
    Y.sum_duplicates()
    inv = np.ones(L)
    mc, fig["metrics_s"] = _timed(lambda: stochastic_metrics(Y, sup, probs, inv, n_slates=32, seed=1,
                                                              device=dev if dev.type == "cuda" else None), dev)
    ref, t = _timed(lambda: stochastic_metrics(Y[:n_old], sup[:n_old], probs[:n_old], inv, n_slates=32, seed=1), dev)
    fig["metrics_numpy_s"] = t * a.n_test / n_old
    fig["metrics_R@5"] = {"device": mc["R@5"], "device_se": mc["R@5_se"],
                          "numpy_first_rows": ref["R@5"], "numpy_se": ref["R@5_se"]}
    print(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
