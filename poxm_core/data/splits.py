"""Train/test splits drawn by a seed (docs/data.md, "Fresh splits"): a test share cut from one file's
rows, or a re-split of a dataset's own train + test union, optionally re-drawn for every run seed.

  split_rows(n, test_fraction, seed, run_seed)   the (train, test) row indices of n rows, a partition
  split_seed(split, run_seed)                     the run seed the split depends on (None: fixed split)
  resplit(data, split, run_seed)                  an XMCData whose train and test are drawn again from
                                                  the union of `data`'s train and test rows

Only sparse rows are stacked and indexed (CSR end to end): no (instances x labels) dense array.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError
from poxm_core.common.seeds import rng
from poxm_core.data.types import XMCData, XMCSplit


def split_rows(n: int, test_fraction: float, seed: int, run_seed: int | None = None,
               where: str = "data") -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) of `n` rows, each sorted: a seeded permutation whose first
    round(test_fraction * n) rows are the test split. `run_seed` None: the permutation of
    ``default_rng(seed)`` (the fixed split every run seed shares, as before re-drawing existed); else of
    the named stream (seed, "data-split", run_seed) (common/seeds.py), a split of its own for each run
    seed, derived from both and never the fixed one."""
    n_test = int(round(test_fraction * n))
    if n_test < 1 or n - n_test < 3:
        raise PoxmInputError(f"{where}: {n} rows are too few to split off test_fraction={test_fraction} "
                             "(need >= 1 test and >= 3 training rows)")
    gen = np.random.default_rng(seed) if run_seed is None else rng(int(seed), "data-split", int(run_seed))
    perm = gen.permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def split_seed(split, run_seed: int) -> int | None:
    """The run seed a split config draws with: `run_seed` when it re-draws per seed, else None."""
    return int(run_seed) if split is not None and split.redraw_per_seed else None


def resplit(data: XMCData, split, run_seed: int, where: str = "data") -> XMCData:
    """`data` with its train and test rows pooled (train first, then test, in file order) and split
    again by `split` (test_fraction, seed, redraw_per_seed). Every pooled row lands in exactly one of
    the new splits."""
    X = sp.vstack([data.train.X, data.test.X], format="csr")
    Y = sp.vstack([data.train.Y, data.test.Y], format="csr")
    tr, te = split_rows(X.shape[0], split.test_fraction, split.seed, split_seed(split, run_seed), where)
    pooled = XMCSplit(X, Y)
    return XMCData(data.name, pooled.rows(tr), pooled.rows(te))
