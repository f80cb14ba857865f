"""The prepare cache: content-addressed, atomically published level directories (docs/architecture.md, §4).

``<cache_dir>/<level>/<hash>/`` for the levels data, model, candidates, variant (poxm_core.prepare.pipeline
builds them), and `reference` (the supervised reference of a variant matched to a logging quality,
poxm_core.prepare.match: what the solve for T reads, never a trial). hash = config_hash of exactly the pieces that determine the level (its parent's hash
included), so a config change rebuilds only the levels downstream of it. The dataset identity is, for
files, the SHA-256 of their contents (never names, sizes or modification times, which change when data
is copied between nodes); for generated data, the generator's config and the seed.

Each directory is written under a temporary name in the same folder and renamed
(poxm_core.common.atomic.publish) once complete, with a manifest.json (key, hash, creator, stats, build
seconds, `files`: each file's SHA-256, and `content_sha256`: the SHA-256 over its files' names and
contents, which a copy of the directory on another node is checked against): a directory without its
manifest never appears, and a crash leaves no partial artifact under a final name. A level is checked
against its manifest when a trial loads it (`verify_level`): a changed file is refused in one line.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from poxm_core.common.atomic import publish
from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import SweepConfig, config_hash, default_data_root
from poxm_core.data import PRESETS, propensity_params, spec_for
from poxm_core.data.registry import declared_files, locate_files
from poxm_core.data.splits import split_seed
from poxm_core.prepare.match import HELDOUT

# Bump a level's version when the code that builds it changes its output: old entries stop matching.
# data 3: file datasets keyed by content (2 used names, sizes and mtimes).
VERSIONS = {"data": 3, "model": 1, "candidates": 1, "variant": 1, "reference": 1}
LEVELS = ("data", "model", "candidates", "variant")    # what a trial reads (copied between nodes)
_CHUNK = 1 << 22
_SHA_MEMO: dict[tuple, str] = {}   # (path, size, mtime_ns) -> sha256: hash a file once per process


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's content (memoised in this process by path, size and mtime, a speed-up only:
    the key itself is the content)."""
    path = Path(path)
    st = path.stat()
    memo = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _SHA_MEMO:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        _SHA_MEMO[memo] = h.hexdigest()
    return _SHA_MEMO[memo]


def file_hashes(d: Path) -> dict[str, str]:
    """{relative name: SHA-256 of its content} of every file under `d` except manifest.json."""
    d = Path(d)
    return {p.relative_to(d).as_posix(): file_sha256(p)
            for p in sorted(q for q in d.rglob("*") if q.is_file() and q.name != "manifest.json")}


def dir_sha256(d: Path, hashes: dict[str, str] | None = None) -> str:
    """SHA-256 over the (relative name, content hash) of every file under `d` except manifest.json."""
    h = hashlib.sha256()
    for name, sha in sorted((file_hashes(d) if hashes is None else hashes).items()):
        h.update(f"{name}\0{sha}\n".encode())
    return h.hexdigest()


def verify_level(d: Path) -> None:
    """A cache level directory as its manifest describes it, before anything in it is loaded: each file's
    SHA-256 against the manifest's `files` (an older manifest without them: the whole directory against
    `content_sha256`). A file changed, missing or added since the level was built (edited, damaged, a
    partial copy) is an input error naming it: the run is refused, and deleting the cache (the levels
    built from a changed one are not to be trusted either) makes the next run build it again
    (docs/orchestration.md, "What poxm trusts")."""
    d = Path(d)
    man = read_manifest(d)
    fix = f"the prepare cache changed after it was built; delete the cache {d.parent.parent} and run again to rebuild it"
    have = file_hashes(d)
    want = man.get("files")
    if isinstance(want, dict):
        for name in sorted(set(want) | set(have)):
            if name not in have:
                raise PoxmInputError(f"{d / name}: missing from its cache level ({fix})")
            if name not in want:
                raise PoxmInputError(f"{d / name}: not in its cache manifest ({fix})")
            if have[name] != want[name]:
                raise PoxmInputError(f"{d / name}: content differs from its cache manifest (sha256 {have[name][:12]}, "
                                     f"recorded {str(want[name])[:12]}; {fix})")
    elif man.get("content_sha256") and dir_sha256(d, have) != man["content_sha256"]:
        raise PoxmInputError(f"{d}: content differs from its cache manifest's content_sha256 ({fix})")


@dataclass(frozen=True)
class Keys:
    """Cache keys of one (dataset, seed): {level: (key dict, hash)}; model/candidates/reference per
    alpha (a reference only for an alpha that some variant with `match` uses)."""
    data: tuple[dict, str]
    model: dict[float, tuple[dict, str]]
    candidates: dict[float, tuple[dict, str]]
    variant: dict[str, tuple[dict, str]]
    reference: dict[float, tuple[dict, str]] = field(default_factory=dict)


def _data_identity(cfg: SweepConfig, dataset: str, seed: int) -> dict:
    dcfg = cfg.dataset(dataset)
    spec = spec_for(dcfg)
    data_root = Path(cfg.data_root) if cfg.data_root else default_data_root()
    if dcfg.format is not None:  # declared in the config: its files' contents, format and split decide it
        return {"name": dcfg.name, "format": dcfg.format,
                "files": [file_sha256(p) for p in declared_files(dcfg, data_root)],
                "split": None if dcfg.split is None else dcfg.split.model_dump(mode="json"), **_split_seed(dcfg, seed)}
    if spec.reader is not None:  # generated (or a custom reader): its config and the seed decide it
        return {"name": dcfg.name, "reader": f"{spec.reader.__module__}.{spec.reader.__qualname__}",
                "synthetic": None if dcfg.synthetic is None else dcfg.synthetic.model_dump(mode="json"),
                "path": dcfg.path, "seed": int(seed), **_preset_shape(dcfg)}
    where = Path(dcfg.path) if dcfg.path else data_root / spec.folder
    files = locate_files(spec, where)
    resplit = {} if dcfg.split is None else {"split": dcfg.split.model_dump(mode="json"), **_split_seed(dcfg, seed)}
    return {"name": dcfg.name, "layout": files.layout,
            "train": [file_sha256(p) for p in files.train], "test": [file_sha256(p) for p in files.test], **resplit}


def _split_seed(dcfg, seed: int) -> dict:
    """The run seed, where the split is re-drawn for each one (absent otherwise: the data level is shared by
    every seed, and the keys of splits written before re-drawing existed are unchanged)."""
    s = split_seed(dcfg.split, seed)
    return {} if s is None else {"split_run_seed": s}


def _preset_shape(dcfg) -> dict:
    """A synthetic preset's parameters, so that recalibrating a preset rebuilds its cached data."""
    preset = None if dcfg.synthetic is None else dcfg.synthetic.preset
    if preset is None:
        return {}
    return {"preset": asdict(PRESETS[preset])}


def cache_keys(cfg: SweepConfig, dataset: str, seed: int) -> Keys:
    dcfg = cfg.dataset(dataset)
    A, B = propensity_params(dcfg)
    dkey = {"level": "data", "version": VERSIONS["data"], "identity": _data_identity(cfg, dataset, seed),
            "propensity": [A, B]}
    dhash = config_hash(dkey)
    m = cfg.model
    model_cfg = {"dim": m.dim, "epochs": m.epochs, "lr": m.lr, "batch_size": m.batch_size,
                 "weight_decay": m.weight_decay}
    models, cands = {}, {}
    for alpha in sorted({v.alpha for v in dcfg.variants}):
        mkey = {"level": "model", "version": VERSIONS["model"], "data": dhash, "model": model_cfg,
                "alpha": alpha, "seed": int(seed), "val_fraction": dcfg.val_fraction}
        models[alpha] = (mkey, config_hash(mkey))
        ckey = {"level": "candidates", "version": VERSIONS["candidates"], "model": models[alpha][1],
                "n_candidates": m.n_candidates}
        cands[alpha] = (ckey, config_hash(ckey))
    # the supervised reference of the variants matched to a logging quality: the model's own settings
    # and rows (its held-out rows avoid that alpha's sample), the held-out rule
    refs = {}
    for alpha in sorted({v.alpha for v in dcfg.variants if v.matched}):
        rkey = {"level": "reference", "version": VERSIONS["reference"], "model": models[alpha][1],
                "heldout": dict(HELDOUT)}
        refs[alpha] = (rkey, config_hash(rkey))
    variants = {}
    for v in dcfg.variants:
        # a matched variant is keyed by its target, not by the T solved from it (which the key of a
        # declared variant holds, as it always has)
        var = ({"name": v.name, "beta": v.beta, "match": dict(v.match)} if v.matched else
               {"name": v.name, "beta": v.beta, "T": v.T})
        vkey = {"level": "variant", "version": VERSIONS["variant"], "candidates": cands[v.alpha][1],
                "variant": var, "seed": int(seed), "val_fraction": dcfg.val_fraction, "slate_size": m.slate_size}
        if v.matched:
            vkey["reference"] = refs[v.alpha][1]
        variants[v.name] = (vkey, config_hash(vkey))
    return Keys((dkey, dhash), models, cands, variants, refs)


def level_dir(cache_dir: Path, level: str, h: str) -> Path:
    return Path(cache_dir) / level / h


def is_complete(d: Path) -> bool:
    return (d / "manifest.json").is_file()


def _created_by() -> dict:
    from importlib import metadata
    try:
        version = metadata.version("poxm")
    except metadata.PackageNotFoundError:
        version = "source"
    return {"module": __name__, "poxm": version, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "host": platform.node(),
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _remove_stale_tmp(folder: Path) -> None:
    """Remove `.tmp-<hash>@<host>.<pid>-*` folders that a killed prepare of this host left behind (a live
    writer's, or another host's, are kept)."""
    import re
    for p in folder.glob(".tmp-*@*"):
        m = re.search(r"@(.+)\.(\d+)-[^-]*$", p.name)
        if m and m.group(1) == platform.node() and int(m.group(2)) != os.getpid():
            try:
                os.kill(int(m.group(2)), 0)
            except ProcessLookupError:
                shutil.rmtree(p, ignore_errors=True)
            except (PermissionError, OverflowError):
                pass


def build_level(cache_dir: Path, level: str, key: dict, h: str, fn: Callable[[Path], dict]) -> tuple[Path, bool]:
    """Return (final dir, built?) for a level; `fn(tmp_dir) -> stats` writes its files into tmp_dir."""
    final = level_dir(cache_dir, level, h)
    if is_complete(final):
        return final, False
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():  # never produced by _build (it renames complete dirs only): a foreign leftover
        shutil.rmtree(final)
    _remove_stale_tmp(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{h}@{platform.node()}.{os.getpid()}-", dir=final.parent))
    try:
        t0 = time.perf_counter()
        stats = fn(tmp)
        manifest = {"level": level, "hash": h, "key": key, "created_by": _created_by(),
                    "seconds": round(time.perf_counter() - t0, 3), "stats": stats,
                    "files": (files := file_hashes(tmp)), "content_sha256": dir_sha256(tmp, files)}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=_json_default))
        try:
            publish(tmp, final)
        except OSError:
            if not is_complete(final):  # not a concurrent writer winning the race: a real error
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, True


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def read_manifest(d: Path) -> dict:
    f = Path(d) / "manifest.json"
    try:
        man = json.loads(f.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PoxmInputError(f"{f}: not a cache manifest ({exc.__class__.__name__}); delete {Path(d)} and run "
                             "again to rebuild it") from None
    if not isinstance(man, dict):
        raise PoxmInputError(f"{f}: not a cache manifest; delete {Path(d)} and run again to rebuild it")
    return man


def variant_record(cache_dir: Path, vdir: Path) -> dict:
    """What the driver needs of a prepared variant, small enough for Ray's object store: its level
    directories (relative to the cache, data first, the variant last), the manifests of the variant and its parents, and its
    test-covering curve. The driver never reads the cache itself (it may be on another node)."""
    cache_dir, vdir = Path(cache_dir), Path(vdir)
    man = read_manifest(vdir)
    rel = vdir.relative_to(cache_dir).as_posix()
    parents = man["key"]["parents"]
    return {"dir": rel, "levels": [parents[k] for k in LEVELS if k in parents] + [rel], "manifest": man,
            "parents": {k: read_manifest(cache_dir / p) for k, p in parents.items()},
            "covering": np.load(vdir / "covering.npy").tolist()}


def say(progress: bool, msg: str) -> None:
    """One progress line of a level being built (above any progress bar), when `progress`."""
    if progress:
        tqdm.write(msg)


def save_csr(path: Path, M: sp.csr_matrix) -> None:
    """A level's sparse matrix: CSR with sorted indices, uncompressed."""
    M = sp.csr_matrix(M)
    M.sort_indices()
    sp.save_npz(path, M, compressed=False)
