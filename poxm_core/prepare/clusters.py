"""Label clusters: k-means of the logging model's label embeddings (the output-layer rows w_y).

Used by the cluster-based methods and estimators (POTEC, MIPS, OffCEM; docs/methods.md,
docs/estimators.md). The logging model is fitted on training instances only, so the clusters never
see a test label. The rows are L2-normalised first (spherical k-means on the direction of w_y): a
row's norm mostly says how often its label was a positive in the alpha sample, not what it means.

API:
  fit_label_clusters(E, k, seed) -> (L,) int64 cluster id per label, in [0, k)
  candidate_clusters(clusters, cand) -> (n, K) cluster id of each candidate of each instance
  label_clusters(prepared, k, seed, cache_dir=None) -> (L,) the clusters of a prepared variant's logging
      model: fitted once per (logging model, k, seed), memoised in the process and, given the prepare
      cache folder, stored there content-addressed (level `clusters`, keyed by the model level's hash)

Deterministic given the seed: k-means++ seeding from a NumPy generator, then Lloyd steps in float64
with ties broken by the lower cluster id; an empty cluster is restarted at the row farthest from its
centre. Memory is bounded by chunks of rows: never an (L, k) array beyond `_CHUNK` rows at once.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError

__all__ = ["fit_label_clusters", "candidate_clusters", "label_clusters", "cluster_key", "CLUSTERS_VERSION"]

CLUSTERS_VERSION = 1
_CHUNK = 1 << 16
_MEMO: dict[tuple, np.ndarray] = {}


def _normalised(E: np.ndarray) -> np.ndarray:
    E = np.asarray(E, dtype=np.float64)
    norm = np.linalg.norm(E, axis=1, keepdims=True)
    return E / np.where(norm > 0, norm, 1.0)


def _nearest(E: np.ndarray, C: np.ndarray, E32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cluster id, squared distance) of every row of E (E32: its float32 copy) to the centres C,
    chunked over rows."""
    ids = np.empty(E.shape[0], dtype=np.int64)
    dist = np.empty(E.shape[0], dtype=np.float64)
    cc = (C * C).sum(axis=1)
    C32 = C.astype(np.float32)
    for a in range(0, E.shape[0], _CHUNK):
        e = E[a:a + _CHUNK]
        # the cross term in float32 (the bulk of the work); every row of E has norm 1 or 0
        d = (e * e).sum(axis=1, keepdims=True) - 2.0 * (E32[a:a + _CHUNK] @ C32.T) + cc[None, :]
        ids[a:a + _CHUNK] = np.argmin(d, axis=1)          # first minimum: the lower id on a tie
        dist[a:a + _CHUNK] = np.maximum(d[np.arange(len(e)), ids[a:a + _CHUNK]], 0.0)
    return ids, dist


def _plus_plus(E: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each new centre drawn with probability proportional to its squared distance."""
    centres = [int(rng.integers(E.shape[0]))]
    d = ((E - E[centres[0]]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = d.sum()
        nxt = int(rng.choice(E.shape[0], p=d / total)) if total > 0 else int(rng.integers(E.shape[0]))
        centres.append(nxt)
        d = np.minimum(d, ((E - E[nxt]) ** 2).sum(axis=1))
    return E[centres].copy()


def fit_label_clusters(label_embeddings: np.ndarray, k: int, seed: int, iters: int = 50) -> np.ndarray:
    """(L,) int64 cluster id in [0, k) of each label: k-means of the L2-normalised rows of
    `label_embeddings` (L, d), deterministic given `seed`. Every cluster id in [0, k) is used."""
    E = _normalised(label_embeddings)
    L = E.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= L:
        raise PoxmInputError(f"clusters: k={k!r}: expected an int in [1, {L}] (the number of labels)")
    rng = np.random.default_rng(int(seed))
    C = _plus_plus(E, int(k), rng)
    ids = None
    E32 = E.astype(np.float32)
    for _ in range(iters):
        new, dist = _nearest(E, C, E32)
        counts = np.bincount(new, minlength=k)
        for c in np.flatnonzero(counts == 0):              # restart an empty cluster at the worst-fit row
            far = int(np.argmax(dist))
            new[far], dist[far] = c, 0.0
            counts = np.bincount(new, minlength=k)
        if ids is not None and np.array_equal(new, ids):
            break
        ids = new
        onehot = sp.csr_matrix((np.ones(L), (ids, np.arange(L))), shape=(k, L))
        C = np.asarray(onehot @ E) / counts[:, None]
    return ids.astype(np.int64)


def candidate_clusters(clusters: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(n, K) cluster id of each candidate label `cand` (n, K) (how a trial reads its candidates' clusters)."""
    return np.asarray(clusters, dtype=np.int64)[np.asarray(cand)]


def cluster_key(model_hash: str, k: int, seed: int) -> dict:
    """The content-addressed key of one clustering: the logging model level it reads, k, the seed."""
    return {"level": "clusters", "version": CLUSTERS_VERSION, "model": str(model_hash), "k": int(k),
            "seed": int(seed)}


def _weights_digest(W: np.ndarray) -> str:
    W = np.ascontiguousarray(W)
    return hashlib.sha256(W.tobytes() + str(W.shape).encode() + str(W.dtype).encode()).hexdigest()


def label_clusters(prepared, k: int, seed: int, cache_dir: Path | str | None = None) -> np.ndarray:
    """The (L,) clusters of a prepared variant's logging model (its head rows `prepared.W`).

    Keyed by the model level's hash when the prepared data records it (`meta['candidates']['key']
    ['model']`), else by the SHA-256 of the weights themselves. Memoised in the process; in the prepare
    cache (`cache_dir`, by default the one the prepared data was loaded from: the grandparent of its
    model level `meta['dirs']['model']`) stored as `clusters/<hash>/clusters.npy`, built once by the first
    trial that needs it (atomically, as every level) and read by the later ones and by reruns."""
    from poxm_core.config.schema import config_hash
    from poxm_core.prepare.cache import build_level, is_complete, level_dir

    meta = getattr(prepared, "meta", None) or {}
    model = ((meta.get("candidates") or {}).get("key") or {}).get("model") or _weights_digest(prepared.W)
    model_dir = (meta.get("dirs") or {}).get("model")
    if cache_dir is None and model_dir:
        cache_dir = Path(model_dir).parent.parent
    key = cluster_key(model, k, seed)
    h = config_hash(key)
    if h in _MEMO:
        return _MEMO[h]
    if cache_dir is None:
        out = fit_label_clusters(prepared.W, k, seed)
    else:
        d = level_dir(Path(cache_dir), "clusters", h)
        if not is_complete(d):
            def write(tmp: Path) -> dict:
                ids = fit_label_clusters(prepared.W, k, seed)
                np.save(tmp / "clusters.npy", ids)
                return {"k": int(k), "labels": int(ids.shape[0]),
                        "largest": int(np.bincount(ids, minlength=k).max())}
            d, _ = build_level(Path(cache_dir), "clusters", key, h, write)
        out = np.load(d / "clusters.npy")
    _MEMO[h] = out
    return out
