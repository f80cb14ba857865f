"""The prepare stage (DESIGN §2, §4): dataset -> logging model -> candidates -> variants -> bandit logs,
computed once per (dataset, core-model config, variant, seed) and cached content-addressed.

Cache layout (docs/artifacts.md lists every file): ``<cache_dir>/<level>/<hash>/`` for the levels

    data        Y_train, Y_test, inverse propensities        <- dataset identity, propensity (A, B)
    model       logging model: Z_train, Z_test, W, b          <- data, model cfg, alpha, seed, val_fraction
    candidates  top-K labels by logit, train and test         <- model, K
    variant     rho (train, test), bandit logs, covering      <- candidates, variant (name, beta, T), seed,
                                                                 val_fraction, slate size ell

hash = config_hash of exactly the pieces that determine the level (its parent's hash included), so a
config change rebuilds only the levels downstream of it. The dataset identity is, for files, their
names, sizes and modification times; for generated data, the generator's config and the seed. Each
directory is written under a temporary name in the same folder and renamed (poxm_core.atomic.publish) once
complete, with a manifest.json (key, hash, creator, stats, build seconds): a directory without its
manifest never appears, and a crash leaves no partial artifact under a final name.

The validation slice (val_fraction of the training rows, seeded) is held out from every gradient step:
the logging model's alpha sample is drawn from the other rows; its logged slates form `log_val`.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from poxm_core.atomic import publish
from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.policy import build_variant, name_code
from poxm_core.bandit.simulate import simulate_log, validation_split
from poxm_core.config import SweepConfig, config_hash, default_data_root, load_config, resolved_yaml
from poxm_core.data import inverse_propensities, load_dataset, propensity_params, spec_for
from poxm_core.data.registry import declared_files, locate_files
from poxm_core.data.types import XMCData
from poxm_core.errors import PoxmInputError, nearest
from poxm_core.metrics import covering_curve, greedy_metrics, stochastic_metrics
from poxm_core.model.core import encode
from poxm_core.model.logging_model import alpha_sample, train_logging_model
from poxm_core.model.topk import chunked_topk
from poxm_core.prepared import Prepared, VariantPolicy

# Bump a level's version when the code that builds it changes its output: old entries stop matching.
VERSIONS = {"data": 2, "model": 1, "candidates": 1, "variant": 1}
KS = (1, 3, 5)
COVER_KS = (1, 5, 10, 20, 50, 100)
_SPLIT_CODE = {"train": 0, "test": 1}


# --------------------------------------------------------------------------------------------
# keys

@dataclass(frozen=True)
class _Keys:
    """Cache keys of one (dataset, seed): {level: (key dict, hash)}; model/candidates per alpha."""
    data: tuple[dict, str]
    model: dict[float, tuple[dict, str]]
    candidates: dict[float, tuple[dict, str]]
    variant: dict[str, tuple[dict, str]]


def _data_identity(cfg: SweepConfig, dataset: str, seed: int) -> dict:
    dcfg = cfg.dataset(dataset)
    spec = spec_for(dcfg)
    if dcfg.format is not None:  # declared in the config: its files (by size and mtime), format and split decide it
        return {"name": dcfg.name, "format": dcfg.format,
                "files": [{"path": str(p), "size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
                          for p in declared_files(dcfg)],
                "split": None if dcfg.split is None else dcfg.split.model_dump(mode="json")}
    if spec.reader is not None:  # generated (or a custom reader): its config and the seed decide it
        return {"name": dcfg.name, "reader": f"{spec.reader.__module__}.{spec.reader.__qualname__}",
                "synthetic": None if dcfg.synthetic is None else dcfg.synthetic.model_dump(mode="json"),
                "path": dcfg.path, "seed": int(seed)}
    data_root = Path(cfg.data_root) if cfg.data_root else default_data_root()
    where = Path(dcfg.path) if dcfg.path else data_root / spec.folder
    files = locate_files(spec, where)
    return {"name": dcfg.name, "layout": files.layout,
            "files": [{"name": p.name, "size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
                      for p in (*files.train, *files.test)]}


def _keys(cfg: SweepConfig, dataset: str, seed: int) -> _Keys:
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
    variants = {}
    for v in dcfg.variants:
        vkey = {"level": "variant", "version": VERSIONS["variant"], "candidates": cands[v.alpha][1],
                "variant": {"name": v.name, "beta": v.beta, "T": v.T}, "seed": int(seed),
                "val_fraction": dcfg.val_fraction, "slate_size": m.slate_size}
        variants[v.name] = (vkey, config_hash(vkey))
    return _Keys((dkey, dhash), models, cands, variants)


# --------------------------------------------------------------------------------------------
# atomic, content-addressed directories

def _level_dir(cache_dir: Path, level: str, h: str) -> Path:
    return Path(cache_dir) / level / h


def _is_complete(d: Path) -> bool:
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


def _build(cache_dir: Path, level: str, key: dict, h: str, fn: Callable[[Path], dict]) -> tuple[Path, bool]:
    """Return (final dir, built?) for a level; `fn(tmp_dir) -> stats` writes its files into tmp_dir."""
    final = _level_dir(cache_dir, level, h)
    if _is_complete(final):
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
                    "seconds": round(time.perf_counter() - t0, 3), "stats": stats}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=_json_default))
        try:
            publish(tmp, final)
        except OSError:
            if not _is_complete(final):  # not a concurrent writer winning the race: a real error
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
    return json.loads((Path(d) / "manifest.json").read_text())


# --------------------------------------------------------------------------------------------
# the pipeline

@dataclass
class _Lazy:
    """Loads the dataset once, only if some level has to be built from the raw data."""
    cfg: SweepConfig
    dataset: str
    seed: int
    progress: bool
    _data: XMCData | None = field(default=None, init=False)

    def get(self) -> XMCData:
        if self._data is None:
            _say(self.progress, f"[{self.dataset}] loading data")
            root = Path(self.cfg.data_root) if self.cfg.data_root else default_data_root()
            self._data = load_dataset(self.cfg.dataset(self.dataset), root, self.seed)
        return self._data


def _say(progress: bool, msg: str) -> None:
    if progress:
        tqdm.write(msg)


def _save_csr(path: Path, M: sp.csr_matrix) -> None:
    M = sp.csr_matrix(M)
    M.sort_indices()
    sp.save_npz(path, M, compressed=False)


def _build_data(lazy: _Lazy, A: float, B: float) -> Callable[[Path], dict]:
    def fn(d: Path) -> dict:
        data = lazy.get()
        _save_csr(d / "Y_train.npz", data.train.Y)
        _save_csr(d / "Y_test.npz", data.test.Y)
        _save_csr(d / "X_train.npz", data.train.X)   # the policy network reads the sparse input
        _save_csr(d / "X_test.npz", data.test.X)
        np.save(d / "inv_propensity.npy", inverse_propensities(data.train.Y, A, B))
        return {**data.stats(), "propensity_A": A, "propensity_B": B}
    return fn


def _build_model(cfg: SweepConfig, lazy: _Lazy, alpha: float, seed: int, fit_rows: np.ndarray,
                 progress: bool) -> Callable[[Path], dict]:
    def fn(d: Path) -> dict:
        data = lazy.get()
        _say(progress, f"[{lazy.dataset}] training the logging model (alpha={alpha}, seed={seed})")
        model = train_logging_model(data.train.X, data.train.Y, cfg.model, alpha, seed, cfg.device,
                                    progress=progress, rows=fit_rows)
        W, b = model.head_arrays()
        np.save(d / "W.npy", W)
        np.save(d / "b.npy", b)
        np.save(d / "Z_train.npy", encode(model, data.train.X, cfg.device))
        np.save(d / "Z_test.npy", encode(model, data.test.X, cfg.device))
        sample = alpha_sample(data.train.n, alpha, seed, fit_rows)
        np.save(d / "alpha_rows.npy", sample)
        torch.save(model.encoder.state_dict(), d / "encoder.pt")
        return {"n_sample": int(sample.size), "dim": int(W.shape[1]), "n_labels": int(W.shape[0])}
    return fn


def _build_candidates(cfg: SweepConfig, model_dir: Path, data_dir: Path, progress: bool,
                      name: str) -> Callable[[Path], dict]:
    def fn(d: Path) -> dict:
        W, b = np.load(model_dir / "W.npy"), np.load(model_dir / "b.npy")
        K = min(cfg.model.n_candidates, W.shape[0])
        for split in ("train", "test"):
            _say(progress, f"[{name}] top-{K} candidates ({split})")
            idx, sc = chunked_topk(np.load(model_dir / f"Z_{split}.npy", mmap_mode="r"), W, b, K,
                                   cfg.model.topk_chunk_mb, cfg.device)
            np.save(d / f"cand_{split}.npy", idx)
            np.save(d / f"score_{split}.npy", sc)
        ranked = np.load(d / "cand_test.npy", mmap_mode="r")[:, :min(max(KS), K)]
        greedy = greedy_metrics(sp.load_npz(data_dir / "Y_test.npz"), np.ascontiguousarray(ranked),
                                np.load(data_dir / "inv_propensity.npy"), KS)
        return {"K": int(K), "K_configured": cfg.model.n_candidates, "logging_model_test": greedy}
    return fn


def _build_variant(cfg: SweepConfig, vname: str, cand_dir: Path, data_dir: Path, seed: int,
                   val_fraction: float, progress: bool, name: str) -> Callable[[Path], dict]:
    v = next(x for x in cfg.dataset(name).variants if x.name == vname)

    def fn(d: Path) -> dict:
        _say(progress, f"[{name}] variant {vname} (alpha={v.alpha}, beta={v.beta}, T={v.T}): rho and slates")
        pol = {}
        for split in ("train", "test"):
            pol[split] = build_variant(np.load(cand_dir / f"cand_{split}.npy"), np.load(cand_dir / f"score_{split}.npy"),
                                       v.beta, v.T, seed=(seed, name_code(vname), _SPLIT_CODE[split]))
            np.save(d / f"policy_{split}_cand.npy", pol[split].cand)
            np.save(d / f"policy_{split}_rho.npy", pol[split].rho)
        Y_train = sp.load_npz(data_dir / "Y_train.npz").tocsr()
        Y_test = sp.load_npz(data_dir / "Y_test.npz").tocsr()
        inv = np.load(data_dir / "inv_propensity.npy")
        K = pol["train"].cand.shape[1]
        if cfg.model.slate_size > K:
            raise PoxmInputError(f"config key 'model.slate_size': {cfg.model.slate_size} exceeds the "
                                 f"{K} candidates of dataset '{name}' (model.n_candidates or L)")
        fit_rows, val_rows = validation_split(Y_train.shape[0], val_fraction, seed)
        logs = {}
        for part, rows in (("train", fit_rows), ("val", val_rows)):
            logs[part] = simulate_log(pol["train"], Y_train, rows, cfg.model.slate_size, seed=(seed, name_code(vname)))
            logs[part].validate_against(pol["train"].cand)
            np.savez(d / f"log_{part}.npz", **logs[part].to_npz_dict())
        cover_test = covering_curve(Y_test, pol["test"].cand)
        cover_train = covering_curve(Y_train, pol["train"].cand)
        np.save(d / "covering.npy", cover_test)
        np.save(d / "covering_train.npy", cover_train)
        with open(d / "covering.csv", "w") as f:
            f.write("k,test,train\n")
            for k in range(K):
                f.write(f"{k + 1},{cover_test[k]:.8g},{cover_train[k]:.8g}\n")
        _say(progress, f"[{name}] variant {vname}: logging policy metrics on test")
        sto = stochastic_metrics(Y_test, pol["test"].cand, pol["test"].rho, inv, KS,
                                 n_slates=cfg.training.mc_slates, seed=seed)
        return {"K": int(K), "n_fit": int(fit_rows.size), "n_val": int(val_rows.size),
                "logging_policy_test": sto,
                "covering_test": {str(k): float(cover_test[k - 1]) for k in COVER_KS if k <= K},
                "log_reward_rate": {p: float(logs[p].rewards.mean()) for p in logs},
                "rho_top1_mean_test": float(pol["test"].rho[:, 0].mean())}
    return fn


def prepare(cfg: SweepConfig, dataset: str, seed: int, cache_dir: Path | str,
            progress: bool = True) -> dict[str, Path]:
    """Build (or reuse) every cached level of one (dataset, seed); returns {variant name: variant dir}."""
    if not isinstance(cfg, SweepConfig):
        raise TypeError(f"cfg: expected a SweepConfig, got {type(cfg).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise PoxmInputError(f"seed: expected a non-negative int, got {seed!r}")
    cache_dir = Path(cache_dir)
    dcfg = cfg.dataset(dataset)
    keys = _keys(cfg, dataset, int(seed))
    out = {v: _level_dir(cache_dir, "variant", h) for v, (_, h) in keys.variant.items()}
    if all(_is_complete(p) for p in out.values()):
        return out

    lazy = _Lazy(cfg, dataset, int(seed), progress)
    A, B = propensity_params(dcfg)
    data_dir, _ = _build(cache_dir, "data", *keys.data, _build_data(lazy, A, B))
    n_train = int(read_manifest(data_dir)["stats"]["N_train"])
    fit_rows, _ = validation_split(n_train, dcfg.val_fraction, int(seed))
    for alpha in keys.model:
        todo = [v for v in dcfg.variants if v.alpha == alpha and not _is_complete(out[v.name])]
        if not todo:
            continue
        model_dir, _ = _build(cache_dir, "model", *keys.model[alpha],
                              _build_model(cfg, lazy, alpha, int(seed), fit_rows, progress))
        cand_dir, _ = _build(cache_dir, "candidates", *keys.candidates[alpha],
                             _build_candidates(cfg, model_dir, data_dir, progress, dataset))
        for v in todo:
            vkey, vh = keys.variant[v.name]
            vkey = {**vkey, "parents": {"data": f"data/{keys.data[1]}", "model": f"model/{keys.model[alpha][1]}",
                                        "candidates": f"candidates/{keys.candidates[alpha][1]}"}}
            _build(cache_dir, "variant", vkey, vh,
                   _build_variant(cfg, v.name, cand_dir, data_dir, int(seed), dcfg.val_fraction, progress, dataset))
    return out


# --------------------------------------------------------------------------------------------
# loading

def load_prepared(cfg: SweepConfig, dataset: str, variant: str, seed: int, cache_dir: Path | str,
                  mmap: bool = False, progress: bool = False) -> Prepared:
    """The `Prepared` inputs of a trial (prepares what is missing). `mmap=True` memory-maps the dense
    arrays read-only instead of reading them (fast start for large Z; do not write into them)."""
    names = [v.name for v in cfg.dataset(dataset).variants]
    if variant not in names:
        raise PoxmInputError(f"unknown variant '{variant}' of dataset '{dataset}'" + nearest(variant, names))
    cache_dir = Path(cache_dir)
    vdir = prepare(cfg, dataset, seed, cache_dir, progress=progress)[variant]
    man = read_manifest(vdir)
    parents = {k: cache_dir / p for k, p in man["key"]["parents"].items()}
    mode = "r" if mmap else None

    def arr(d: Path, name: str) -> np.ndarray:
        return np.load(d / name, mmap_mode=mode)

    def log(name: str) -> BanditLog:
        with np.load(vdir / name) as z:
            return BanditLog.from_npz(z)

    meta = {"variant": man, "candidates": read_manifest(parents["candidates"]),
            "model": read_manifest(parents["model"]), "data": read_manifest(parents["data"]),
            "dirs": {"variant": str(vdir), **{k: str(p) for k, p in parents.items()}}}
    return Prepared(
        dataset=dataset, variant=variant, seed=int(seed),
        Z_train=arr(parents["model"], "Z_train.npy"), Z_test=arr(parents["model"], "Z_test.npy"),
        W=arr(parents["model"], "W.npy"), b=arr(parents["model"], "b.npy"),
        policy_train=VariantPolicy(arr(vdir, "policy_train_cand.npy"), arr(vdir, "policy_train_rho.npy")),
        policy_test=VariantPolicy(arr(vdir, "policy_test_cand.npy"), arr(vdir, "policy_test_rho.npy")),
        log_train=log("log_train.npz"), log_val=log("log_val.npz"),
        inv_propensity=arr(parents["data"], "inv_propensity.npy"),
        Y_test=sp.load_npz(parents["data"] / "Y_test.npz").tocsr(),
        Y_train=sp.load_npz(parents["data"] / "Y_train.npz").tocsr(),
        X_train=sp.load_npz(parents["data"] / "X_train.npz").tocsr(),
        X_test=sp.load_npz(parents["data"] / "X_test.npz").tocsr(),
        meta=meta)


# --------------------------------------------------------------------------------------------
# every dataset x seed, statistics

def summary_row(cache_dir: Path | str, dataset: str, seed: int, variant_dir: Path) -> dict:
    """Flat statistics of one prepared variant (fractions in [0, 1]) from the manifests."""
    cache_dir = Path(cache_dir)
    man = read_manifest(variant_dir)
    par = {k: read_manifest(cache_dir / p) for k, p in man["key"]["parents"].items()}
    v = man["key"]["variant"]
    row = {"dataset": dataset, "seed": seed, "variant": v["name"], "alpha": par["model"]["key"]["alpha"],
           "beta": v["beta"], "T": v["T"], "K": man["stats"]["K"]}
    row.update({k: val for k, val in par["candidates"]["stats"]["logging_model_test"].items()
                if k.startswith("P@")})
    sto = man["stats"]["logging_policy_test"]
    row.update({k: sto[k] for k in ("R@1", "R@3", "R@5", "nDCR@3", "nDCR@5", "PSR@3", "PSR@5")})
    cover = man["stats"]["covering_test"]
    row.update({f"cover@{k}": cover[str(k)] for k in COVER_KS if str(k) in cover})
    row["seconds"] = round(sum(m["seconds"] for m in (man, *par.values())), 2)
    row["variant_hash"] = man["hash"]
    return row


def prepare_all(cfg: SweepConfig, cache_dir: Path | str, progress: bool = True) -> list[dict]:
    """`prepare` every dataset x seed of the config; one summary row per (dataset, seed, variant)."""
    rows = []
    jobs = [(d.name, s) for d in cfg.datasets for s in cfg.seeds]
    for name, seed in tqdm(jobs, desc="prepare", disable=not progress or len(jobs) < 2):
        for vdir in prepare(cfg, name, seed, cache_dir, progress=progress).values():
            rows.append(summary_row(cache_dir, name, seed, vdir))
    return rows


def format_shapes(cfg: SweepConfig, cache_dir: Path | str) -> str:
    """One line per dataset: the shape found in its files (N_train, N_test, D, L) and its propensity A, B."""
    lines = ["datasets (shapes as read):"]
    for d in cfg.datasets:
        keys = _keys(cfg, d.name, cfg.seeds[0])
        man = read_manifest(_level_dir(Path(cache_dir), "data", keys.data[1]))
        st = man["stats"]
        lines.append(f"  {d.name}: N_train={st['N_train']}, N_test={st['N_test']}, D={st['D']}, L={st['L']}, "
                     f"labels/instance={st['labels_per_instance']:.2f}, propensity A={st['propensity_A']:g}, "
                     f"B={st['propensity_B']:g}")
    return "\n".join(lines)


def format_table(rows: list[dict]) -> str:
    """The statistics as a fixed-width table, metrics x 100 (as the paper reports them)."""
    import pandas as pd

    if not rows:
        return "(nothing prepared)"
    df = pd.DataFrame(rows).drop(columns=["variant_hash"])
    metric_cols = [c for c in df.columns if "@" in c]
    df[metric_cols] = df[metric_cols] * 100
    return ("logging model P@k (greedy), logging policy R/nDCR/PSR@k (stochastic) and covering on test, x100\n"
            + df.to_string(index=False, float_format=lambda x: f"{x:.2f}"))


def prepare_command(config_path: str | os.PathLike, overrides: list[str] | None = None, print_config: bool = False,
                    cache_dir: str | os.PathLike | None = None) -> int:
    """`poxm prepare CONFIG [key=value ...]`: prepare every dataset x seed, print the statistics; 0 on success."""
    cfg = load_config(config_path, overrides or [])
    if print_config:
        print(resolved_yaml(cfg))
    cache = Path(cache_dir) if cache_dir is not None else Path(cfg.runs_dir) / "cache"
    rows = prepare_all(cfg, cache, progress=True)
    print(format_shapes(cfg, cache))
    print(format_table(rows))
    print(f"cache: {cache.resolve()}")
    return 0
