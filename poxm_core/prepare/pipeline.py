"""The prepare stage (docs/architecture.md, §4): dataset -> logging model -> candidates -> variants -> bandit logs,
computed once per (dataset, core-model config, variant, seed) into the content-addressed cache of
poxm_core.prepare.cache (docs/artifacts.md lists every file):

    data        Y, X (train, test), inverse propensities     <- dataset content, propensity (A, B)
    model       logging model: Z_train, Z_test, W, b          <- data, model cfg, alpha, seed, val_fraction
    candidates  top-K labels by logit, train and test         <- model, K
    variant     rho (train, test), bandit logs, covering      <- candidates, variant (name, beta, T), seed,
                                                                 val_fraction, slate size ell
    reference   a matched variant's supervised reference      <- model (its held-out rows avoid the alpha
                on held-out training rows                        sample), the held-out rule

A variant with `match` instead of T (poxm_core.prepare.match) is keyed by its target: its T is solved
on the training rows when the variant level is built, then used exactly as a declared T.

`prepare` builds what is missing and returns the variant directories; `load_variant` reads one into
a `Prepared` (from its directory alone: a trial never needs the raw data or the config's keys).

The validation slice (val_fraction of the training rows, seeded) is held out from every gradient step:
the logging model's alpha sample is drawn from the other rows; its logged slates form `log_val`.

A logged dataset (feedback read from a log, not simulated) has levels of its own:
poxm_core.prepare.logged_levels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from poxm_core.common.results import KS
from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.policy import build_variant, name_code
from poxm_core.bandit.simulate import simulate_log, validation_split
from poxm_core.config.schema import SweepConfig, default_data_root
from poxm_core.data import inverse_propensities, load_dataset, propensity_params
from poxm_core.data.types import XMCData
from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.metrics.ranking import covering_curve, greedy_metrics, stochastic_metrics
from poxm_core.model.core import encode, resolve_device
from poxm_core.model.logging_model import alpha_sample, train_logging_model
from poxm_core.model.topk import chunked_topk
from poxm_core.prepare.cache import (build_level, cache_keys, is_complete, level_dir, read_manifest, save_csr, say,
                                    verify_level)
from poxm_core.prepare.logged_levels import load_logged, prepare_logged
from poxm_core.prepare.match import MatchProblem, build_reference, solve_temperature
from poxm_core.prepare.prepared import Prepared, VariantPolicy

COVER_KS = (1, 5, 10, 20, 50, 100)
_SPLIT_CODE = {"train": 0, "test": 1}


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
            say(self.progress, f"[{self.dataset}] loading data")
            root = Path(self.cfg.data_root) if self.cfg.data_root else default_data_root()
            self._data = load_dataset(self.cfg.dataset(self.dataset), root, self.seed)
        return self._data


def _build_data(lazy: _Lazy, A: float, B: float) -> Callable[[Path], dict]:
    def fn(d: Path) -> dict:
        data = lazy.get()
        save_csr(d / "Y_train.npz", data.train.Y)
        save_csr(d / "Y_test.npz", data.test.Y)
        save_csr(d / "X_train.npz", data.train.X)   # the policy network reads the sparse input
        save_csr(d / "X_test.npz", data.test.X)
        np.save(d / "inv_propensity.npy", inverse_propensities(data.train.Y, A, B))
        return {**data.stats(), "propensity_A": A, "propensity_B": B}
    return fn


def _build_model(cfg: SweepConfig, lazy: _Lazy, alpha: float, seed: int, fit_rows: np.ndarray,
                 progress: bool) -> Callable[[Path], dict]:
    def fn(d: Path) -> dict:
        data = lazy.get()
        say(progress, f"[{lazy.dataset}] training the logging model (alpha={alpha}, seed={seed})")
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
            say(progress, f"[{name}] top-{K} candidates ({split})")
            idx, sc = chunked_topk(np.load(model_dir / f"Z_{split}.npy", mmap_mode="r"), W, b, K,
                                   cfg.model.topk_chunk_mb, cfg.device)
            np.save(d / f"cand_{split}.npy", idx)
            np.save(d / f"score_{split}.npy", sc)
        ranked = np.load(d / "cand_test.npy", mmap_mode="r")[:, :min(max(KS), K)]
        greedy = greedy_metrics(sp.load_npz(data_dir / "Y_test.npz"), np.ascontiguousarray(ranked),
                                np.load(data_dir / "inv_propensity.npy"), KS)
        return {"K": int(K), "K_configured": cfg.model.n_candidates, "logging_model_test": greedy}
    return fn


def metrics_device(device: str) -> torch.device | None:
    """The GPU the logging policy's test metrics are computed on (stochastic_metrics' `device`), or
    None (NumPy) when the config's device is the CPU."""
    dev = resolve_device(device)
    return dev if dev.type == "cuda" else None


def match_where(cfg: SweepConfig, dataset: str, vname: str) -> str:
    """'dataset 'd', variant 'v': config key 'datasets.i.variants.j.match.<statistic>'' for an error."""
    i = next(k for k, d in enumerate(cfg.datasets) if d.name == dataset)
    j, v = next((k, x) for k, x in enumerate(cfg.datasets[i].variants) if x.name == vname)
    stat = next(iter(v.match)) if v.match else "T"
    return (f"dataset '{dataset}', variant '{vname}': config key 'datasets.{i}.variants.{j}."
            f"{'match.' if v.match else ''}{stat}'")


def _build_reference(cfg: SweepConfig, model_dir: Path, data_dir: Path, seed: int, val_fraction: float,
                     progress: bool, name: str, vname: str) -> Callable[[Path], dict]:
    def fn(d: Path) -> dict:
        say(progress, f"[{name}] supervised reference on the training rows (the logging quality variant {vname} matches)")
        return build_reference(d, data_dir, model_dir, cfg.model, seed, val_fraction, cfg.device,
                               progress=progress, where=match_where(cfg, name, vname))
    return fn


def _solve_T(cfg: SweepConfig, v, cand_dir: Path, data_dir: Path, ref_dir: Path, seed: int, progress: bool,
             name: str) -> dict:
    """The matched variant's T, solved on the reference's held-out training rows (never a test label)."""
    held = np.load(ref_dir / "heldout_rows.npy")
    ref = read_manifest(ref_dir)["stats"]
    problem = MatchProblem(
        Y=sp.load_npz(data_dir / "Y_train.npz").tocsr()[held],
        cand=np.load(cand_dir / "cand_train.npy", mmap_mode="r")[held],
        scores=np.load(cand_dir / "score_train.npy", mmap_mode="r")[held], rows=held,
        inv_prop=np.load(data_dir / "inv_propensity.npy"), beta=v.beta,
        noise_seed=(seed, name_code(v.name), _SPLIT_CODE["train"]),
        reference_p5=float(ref["reference_heldout"]["P@5"]), device=metrics_device(cfg.device))
    (stat, target), = v.match.items()
    say(progress, f"[{name}] variant {v.name}: solving T for {stat} = {target:g} on {held.size} held-out training rows")
    return solve_temperature(problem, float(target), match_where(cfg, name, v.name),
                             say=(lambda m: say(progress, f"[{name}] variant {v.name}: {m}")))


def _build_variant(cfg: SweepConfig, vname: str, cand_dir: Path, data_dir: Path, seed: int,
                   val_fraction: float, progress: bool, name: str,
                   ref_dir: Path | None = None) -> Callable[[Path], dict]:
    v = next(x for x in cfg.dataset(name).variants if x.name == vname)

    def fn(d: Path) -> dict:
        match = None if ref_dir is None else _solve_T(cfg, v, cand_dir, data_dir, ref_dir, seed, progress, name)
        T = v.T if match is None else match["T"]
        say(progress, f"[{name}] variant {vname} (alpha={v.alpha}, beta={v.beta}, T={T:.6g}): rho and slates")
        pol = {}
        for split in ("train", "test"):
            pol[split] = build_variant(np.load(cand_dir / f"cand_{split}.npy"), np.load(cand_dir / f"score_{split}.npy"),
                                       v.beta, T, seed=(seed, name_code(vname), _SPLIT_CODE[split]))
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
        say(progress, f"[{name}] variant {vname}: logging policy metrics on test")
        # on a GPU there, as the trials compute theirs: on a CPU these are most of a variant's time
        # (the exact quadrature; docs/performance.md), and the prepare tasks started
        # beside a sweep's Ray Train jobs share the CPUs with them
        sto = stochastic_metrics(Y_test, pol["test"].cand, pol["test"].rho, inv, KS,
                                 n_slates=cfg.training.mc_slates, seed=seed, device=metrics_device(cfg.device))
        return {"K": int(K), "n_fit": int(fit_rows.size), "n_val": int(val_rows.size),
                "T": float(T), **({} if match is None else {"match": match}),
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
    if dcfg.logged is not None:
        return prepare_logged(cfg, dataset, int(seed), cache_dir, progress)
    keys = cache_keys(cfg, dataset, int(seed))
    out = {v: level_dir(cache_dir, "variant", h) for v, (_, h) in keys.variant.items()}
    if all(is_complete(p) for p in out.values()):
        return out

    lazy = _Lazy(cfg, dataset, int(seed), progress)
    A, B = propensity_params(dcfg)
    data_dir, _ = build_level(cache_dir, "data", *keys.data, _build_data(lazy, A, B))
    n_train = int(read_manifest(data_dir)["stats"]["N_train"])
    fit_rows, _ = validation_split(n_train, dcfg.val_fraction, int(seed))
    for alpha in keys.model:
        todo = [v for v in dcfg.variants if v.alpha == alpha and not is_complete(out[v.name])]
        if not todo:
            continue
        model_dir, _ = build_level(cache_dir, "model", *keys.model[alpha],
                              _build_model(cfg, lazy, alpha, int(seed), fit_rows, progress))
        cand_dir, _ = build_level(cache_dir, "candidates", *keys.candidates[alpha],
                             _build_candidates(cfg, model_dir, data_dir, progress, dataset))
        for v in todo:
            vkey, vh = keys.variant[v.name]
            parents = {"data": f"data/{keys.data[1]}", "model": f"model/{keys.model[alpha][1]}",
                       "candidates": f"candidates/{keys.candidates[alpha][1]}"}
            ref_dir = None
            if v.matched:   # its reference first (once per alpha): the solve for T reads it
                ref_dir, _ = build_level(cache_dir, "reference", *keys.reference[alpha],
                                         _build_reference(cfg, model_dir, data_dir, int(seed), dcfg.val_fraction,
                                                          progress, dataset, v.name))
                parents["reference"] = f"reference/{keys.reference[alpha][1]}"
            build_level(cache_dir, "variant", {**vkey, "parents": parents}, vh,
                        _build_variant(cfg, v.name, cand_dir, data_dir, int(seed), dcfg.val_fraction, progress,
                                       dataset, ref_dir))
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
    vdir = prepare(cfg, dataset, seed, cache_dir, progress=progress)[variant]
    return load_variant(cache_dir, vdir, mmap)


def load_variant(cache_dir: Path | str, vdir: Path | str, mmap: bool = False) -> Prepared:
    """The `Prepared` inputs in the prepared variant directory `vdir` (and its parent levels, named in
    its manifest, under `cache_dir`): no raw data, no config needed."""
    cache_dir, vdir = Path(cache_dir), Path(vdir)
    man = read_manifest(vdir)
    parents = {k: cache_dir / p for k, p in man["key"]["parents"].items()}
    for d in (*parents.values(), vdir):    # each file against its manifest before any is read (one line if not)
        verify_level(d)
    if "logged" in man["key"]:
        return load_logged(vdir, man, parents)
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
        dataset=meta["data"]["key"]["identity"]["name"], variant=man["key"]["variant"]["name"],
        seed=int(man["key"]["seed"]),
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
