#!/usr/bin/env python
"""Benchmark: the strict XC reader (poxm_core.data.readers.read_xc_bow) against scikit-learn's
`load_svmlight_file(multilabel=True)` on the XC files under a data folder.

    .venv/bin/python benchmarks/bench_xc_reader.py [--data DIR (default $POXM_DATA_ROOT, else ../shared/data)] [--repeat 9]

Three readers per file, run interleaved (so a background load hits all of them alike), each giving
the same (X float32 CSR, Y float32 CSR):
  strict            read_xc_bow: chunked NumPy parse, per-line diagnosis on failure (today's reader)
  sklearn           load_svmlight_file on the body after the "N D L" header (zero_based, float32),
                    labels converted to CSR: the parse alone, without the checks the strict reader makes
  sklearn+checks    what a fast path would have to run to stay as strict: a byte-class scan (no '#',
                    'qid', letters, tabs; a sign only in an exponent), sklearn's parse, then row count,
                    finite values, integral in-range labels; on any doubt it would fall back to strict
Prints min and median seconds per reader and file, and the ratio to strict (< 1: faster).
"""
from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from poxm_core.config.schema import default_data_root  # noqa: E402  (after the path insert)

_ALLOWED = np.zeros(256, dtype=bool)
_ALLOWED[np.frombuffer(b"0123456789,:. \n+-eE", dtype=np.uint8)] = True


def _header(raw: bytes) -> tuple[int, int, int, bytes]:
    nl = raw.index(b"\n")
    n, d, L = (int(t) for t in raw[:nl].split())
    return n, d, L, raw[nl + 1:]


def _labels_csr(y, n: int, L: int) -> tuple[sp.csr_matrix, np.ndarray]:
    counts = np.fromiter(map(len, y), dtype=np.int64, count=len(y))
    ids = np.fromiter((lab for t in y for lab in t), dtype=np.float64, count=int(counts.sum()))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    Y = sp.csr_matrix((np.ones(ids.size, np.float32), ids.astype(np.int64), indptr), shape=(n, L))
    Y.sum_duplicates()
    Y.data[:] = 1.0
    return Y, ids


def read_sklearn(path: Path):
    from sklearn.datasets import load_svmlight_file

    n, d, L, body = _header(path.read_bytes())
    X, y = load_svmlight_file(io.BytesIO(body), n_features=d, dtype=np.float32, multilabel=True, zero_based=True)
    return X, _labels_csr(y, n, L)[0]


def read_sklearn_checked(path: Path):
    from sklearn.datasets import load_svmlight_file

    n, d, L, body = _header(path.read_bytes())
    b = np.frombuffer(body, dtype=np.uint8)
    signs = np.flatnonzero((b == ord("+")) | (b == ord("-")))
    if not _ALLOWED[b].all() or not np.isin(b[signs - 1], np.frombuffer(b"eE", np.uint8)).all():
        raise ValueError("would fall back to the strict reader")
    X, y = load_svmlight_file(io.BytesIO(body), n_features=d, dtype=np.float32, multilabel=True, zero_based=True)
    Y, ids = _labels_csr(y, n, L)
    if X.shape[0] != n or not np.isfinite(X.data).all() or not (ids == np.floor(ids)).all() \
            or (ids.size and (ids.min() < 0 or ids.max() >= L)):
        raise ValueError("would fall back to the strict reader")
    X.eliminate_zeros()
    return X, Y


def main(argv=None) -> int:
    from poxm_core.data.readers import read_xc_bow

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(default_data_root()))
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    root = Path(args.data)
    files = [p for p in sorted(root.rglob("*.txt")) if p.read_bytes()[:64].split(b"\n")[0].count(b" ") == 2
             and all(t.isdigit() for t in p.read_bytes()[:64].split(b"\n")[0].split())]
    readers = {"strict": read_xc_bow, "sklearn": read_sklearn, "sklearn+checks": read_sklearn_checked}
    print(f"{'file':58s} {'MB':>5s} {'reader':15s} {'min s':>7s} {'median s':>8s} {'vs strict':>9s}")
    for path in files:
        ref = read_xc_bow(path)
        for name, fn in readers.items():          # every reader gives the same matrices
            X, Y = fn(path)
            assert (X != ref[0]).nnz == 0 and (Y != ref[1]).nnz == 0, (path, name)
        times: dict[str, list[float]] = {k: [] for k in readers}
        for _ in range(args.repeat):
            for name, fn in readers.items():
                t = time.perf_counter()
                fn(path)
                times[name].append(time.perf_counter() - t)
        base = statistics.median(times["strict"])
        for name, ts in times.items():
            rel = f"{statistics.median(ts) / base:9.2f}"
            print(f"{str(path.relative_to(root)):58s} {path.stat().st_size / 1e6:5.1f} {name:15s} "
                  f"{min(ts):7.3f} {statistics.median(ts):8.3f} {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
