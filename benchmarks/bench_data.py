"""Data-layer timings: XC BoW reading (real Bibtex/Delicious, a generated ~500k-line file) and synthetic generation.

    .venv/bin/python benchmarks/bench_data.py [read|synthetic PRESET|bigread]

Peak RSS is read from getrusage (Linux: KiB). Prints figures; writes nothing except a temporary file for bigread.
"""
from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from poxm_core.config.schema import default_data_root
from poxm_core.data import PRESETS, make_synthetic, read_xc_bow


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_read() -> None:
    root = default_data_root()
    for name in ("bibtex", "delicious"):
        for split in ("train", "test"):
            p = root / name / f"{name}_{split}.txt"
            if not p.is_file():
                print(f"{p}: absent, skipped")
                continue
            best = min(_timed(read_xc_bow, p) for _ in range(3))
            print(f"read_xc_bow {name}_{split}: {best:.3f} s (best of 3)")


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def _write_xc(path: Path, X, Y) -> None:
    with open(path, "w") as f:
        f.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for i in range(X.shape[0]):
            labs = ",".join(map(str, Y.indices[Y.indptr[i]:Y.indptr[i + 1]]))
            a, b = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v:.6f}" for j, v in zip(X.indices[a:b], X.data[a:b]))
            f.write(f"{labs} {feats}\n")


def bench_bigread(n: int = 500_000) -> None:
    d = make_synthetic(n, 1, 135909, 670091, 5.45, seed=0, mean_features=71)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "big_train.txt"
        _write_xc(p, d.train.X, d.train.Y)
        size = p.stat().st_size / 2**20
        t = time.perf_counter()
        X, Y = read_xc_bow(p)
        dt = time.perf_counter() - t
        ok = (np.array_equal(X.indptr, d.train.X.indptr) and np.array_equal(X.indices, d.train.X.indices)
              and np.allclose(X.data, d.train.X.data, atol=1e-6))
        print(f"read_xc_bow {n} lines ({size:.0f} MiB, nnz X={X.nnz}, Y={Y.nnz}): {dt:.1f} s; values match: {ok}; "
              f"peak RSS {_peak_mib():.0f} MiB (includes the generator)")


def bench_synthetic(preset: str) -> None:
    p = PRESETS[preset]
    t = time.perf_counter()
    d = make_synthetic(p.n_train, p.n_test, p.n_features, p.n_labels, p.mean_labels, seed=0,
                       mean_features=p.mean_features, signal=p.signal)
    dt = time.perf_counter() - t
    s = d.stats()
    print(f"make_synthetic {preset}: {dt:.1f} s, peak RSS {_peak_mib():.0f} MiB; "
          f"N {s['N_train']}/{s['N_test']} D {s['D']} L {s['L']} labels/inst {s['labels_per_instance']:.2f} "
          f"nnz X train {d.train.X.nnz} ({d.train.X.nnz / d.train.n:.1f}/row)")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "read"
    if what == "read":
        bench_read()
    elif what == "bigread":
        bench_bigread()
    else:
        bench_synthetic(sys.argv[2])
