"""The prepare stage of a logged dataset (docs/data.md, "Learning from a log"; the mapping from a log to
the bandit inputs: poxm_core.prepare.logged). Its levels, in the cache of poxm_core.prepare.cache:

    data        the log read, checked and cut into training and test parts     <- the files' contents, the
                (features, rows' arrays), the target log; no label propensities   logged entry (reader, split)
    variant     the run seed's validation slice, C(x), the bandit logs          <- data, seed, val_fraction,
                                                                                   the variant's selector

`prepare_logged` builds them (poxm_core.prepare.pipeline.prepare calls it for a logged dataset);
`load_logged` reads a variant into a `Prepared` (pipeline.load_variant calls it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.simulate import validation_split
from poxm_core.config.schema import SweepConfig, config_hash, default_data_root
from poxm_core.prepare.cache import (VERSIONS, build_level, file_sha256, is_complete, level_dir, read_manifest,
                                    save_csr, say)
from poxm_core.prepare.prepared import Prepared, VariantPolicy

_LOGGED_PARTS = ("train", "test", "target")


def logged_keys(cfg: SweepConfig, dataset: str, seed: int) -> tuple[tuple[dict, str], dict[str, tuple[dict, str]]]:
    """(data level (key, hash), {variant: (key, hash)}) of a logged dataset: the data level by the files'
    contents and the logged entry (reader, split); a variant by it, the seed, val_fraction, its selector."""
    from poxm_core.data.logged_dataset import logged_files
    from poxm_core.prepare.logged import TEST_SPLIT_STREAM
    dcfg = cfg.dataset(dataset)
    root = Path(cfg.data_root) if cfg.data_root else default_data_root()
    dkey = {"level": "data", "version": VERSIONS["data"],
            "identity": {"name": dcfg.name, "logged": dcfg.logged.model_dump(mode="json"),
                         "files": [file_sha256(f) for f in logged_files(dcfg.logged, root)],
                         "test_split": list(TEST_SPLIT_STREAM)}}     # the split's stream: a new one is a new cache entry
    dh = config_hash(dkey)
    out = {}
    for v in dcfg.variants:
        vkey = {"level": "variant", "version": VERSIONS["variant"], "data": dh, "seed": int(seed),
                "variant": {"name": v.name, "selector": v.selector or "logging"}, "val_fraction": dcfg.val_fraction}
        out[v.name] = (vkey, config_hash(vkey))
    return (dkey, dh), out


def _build_logged_data(cfg: SweepConfig, dataset: str, progress: bool) -> Callable[[Path], dict]:
    from poxm_core.data.logged_dataset import read_logged
    from poxm_core.prepare.logged import log_features, part_arrays, split_rows

    def fn(d: Path) -> dict:
        dcfg = cfg.dataset(dataset)
        root = Path(cfg.data_root) if cfg.data_root else default_data_root()
        say(progress, f"[{dataset}] reading the logged feedback ({dcfg.logged.source})")
        log, target = read_logged(dcfg.logged, root)
        train, test = split_rows(log.n, dcfg.logged.test_fraction, dcfg.logged.split_seed)
        parts = {"train": (log, train), "test": (log, test)}
        if target is not None:
            parts["target"] = (target, np.arange(target.n))
        stats = {"N_train": int(train.size), "N_test": int(test.size), "L": int(log.n_actions),
                 "slate_size": int(log.slate_size), "source": log.source,
                 "target_source": None if target is None else target.source}
        for part, (lg, rows) in parts.items():
            X = log_features(lg, rows)
            save_csr(d / f"X_{part}.npz", X)
            np.savez(d / f"part_{part}.npz", **part_arrays(lg, rows))
            r = lg.reward[rows]
            stats[f"N_{part}"] = int(rows.size)
            stats[f"reward_rate_{part}"] = float(r.mean())
            stats[f"reward_rate_{part}_se"] = float(r.std(ddof=1) / np.sqrt(r.size)) if r.size > 1 else float("nan")
        stats["D"] = int(X.shape[1])
        np.save(d / "inv_propensity.npy", np.ones(log.n_actions))   # no label propensities: PSR/wPOXM weights 1
        return stats
    return fn


def _build_logged_variant(cfg: SweepConfig, dataset: str, vname: str, data_dir: Path, seed: int,
                          progress: bool) -> Callable[[Path], dict]:
    from poxm_core.prepare.logged import bandit_log, candidates_of, order_actions, reward_ranking, slot_marginals

    dcfg = cfg.dataset(dataset)
    v = next(x for x in dcfg.variants if x.name == vname)
    selector = v.selector or "logging"

    def fn(d: Path) -> dict:
        st = read_manifest(data_dir)["stats"]
        A, K = int(st["L"]), int(st["slate_size"])
        arrs = {}
        for part in _LOGGED_PARTS:
            if (data_dir / f"part_{part}.npz").is_file():
                with np.load(data_dir / f"part_{part}.npz") as z:
                    arrs[part] = {k: z[k] for k in z.files}
        tr = arrs["train"]
        fit_rows, val_rows = validation_split(tr["action"].size, dcfg.val_fraction, seed)
        # the logging policy from its own propensities (the training split's rows: a policy, not rewards);
        # the reward model of `selector: reward` from the fit rows only (selection reads the validation rows)
        rho = slot_marginals(tr["action"], tr["position"], tr["propensity"], A, K)
        rhat = reward_ranking(tr, fit_rows, A, K) if selector == "reward" else None
        order = order_actions(rho, rhat)
        np.save(d / "order.npy", order)
        np.save(d / "rho_slot.npy", rho)
        say(progress, f"[{dataset}] variant {vname}: C(x) = the {A} actions ordered by {selector}; logs of "
                       f"{fit_rows.size} fit / {val_rows.size} validation rows")
        where = f"dataset '{dataset}'"
        stats = {"K": A, "selector": selector, "n_fit": int(fit_rows.size), "n_val": int(val_rows.size)}
        logs = {}
        for part, a in arrs.items():
            pol = candidates_of(order, rho, a["position"])
            np.save(d / f"policy_{part}_cand.npy", pol.cand)
            np.save(d / f"policy_{part}_rho.npy", pol.rho)
            if part == "train":
                logs["train"] = bandit_log(a, pol, fit_rows, where)
                logs["val"] = bandit_log(a, pol, val_rows, where)
            else:
                logs[part] = bandit_log(a, pol, np.arange(a["action"].size, dtype=np.int64), where)
        for part, lg in logs.items():
            np.savez(d / f"log_{part}.npz", **lg.to_npz_dict())
        np.save(d / "covering.npy", np.zeros(0))     # no labels: no covering curve
        stats["log_reward_rate"] = {p: float(lg.rewards.mean()) for p, lg in logs.items()}
        # Phi^p's share of the rewards logged on the held-out logs (never read by a trial or by selection), p = 1,
        # 5, 10, 20: what a top-p selection keeps of the clicks; p / A is what an arbitrary Phi^p keeps on a uniform log
        for part in ("test", "target"):
            if part in logs:
                lg = logs[part]
                stats[f"phi_reward_share_{part}"] = {str(p): float(lg.rewards[lg.cand_pos < p].sum() / max(lg.rewards.sum(), 1))
                                                     for p in (1, 5, 10, 20) if p <= A}
        return stats
    return fn


def prepare_logged(cfg: SweepConfig, dataset: str, seed: int, cache_dir: Path, progress: bool = True) -> dict[str, Path]:
    """`prepare` of a logged dataset: the data level (the log read, checked and cut into its training and
    test parts, the target log), then each variant (the run seed's validation slice, C(x), the logs)."""
    (dkey, dh), vkeys = logged_keys(cfg, dataset, seed)
    out = {v: level_dir(cache_dir, "variant", h) for v, (_, h) in vkeys.items()}
    if all(is_complete(p) for p in out.values()):
        return out
    data_dir, _ = build_level(cache_dir, "data", dkey, dh, _build_logged_data(cfg, dataset, progress))
    for vname, (vkey, vh) in vkeys.items():
        build_level(cache_dir, "variant", {**vkey, "logged": True, "parents": {"data": f"data/{dh}"}}, vh,
                    _build_logged_variant(cfg, dataset, vname, data_dir, seed, progress))
    return out


def load_logged(vdir: Path, man: dict, parents: dict[str, Path]) -> Prepared:
    from poxm_core.prepare.prepared import EvalLog

    ddir = parents["data"]
    dman = read_manifest(ddir)

    def log(part: str) -> BanditLog:
        with np.load(vdir / f"log_{part}.npz") as z:
            return BanditLog.from_npz(z)

    X = {p: sp.load_npz(ddir / f"X_{p}.npz").tocsr() for p in _LOGGED_PARTS if (ddir / f"X_{p}.npz").is_file()}
    Z = {p: np.asarray(x.todense(), dtype=np.float32) for p, x in X.items()}
    pol = {p: VariantPolicy(np.load(vdir / f"policy_{p}_cand.npy"), np.load(vdir / f"policy_{p}_rho.npy")) for p in X}
    A, d = int(dman["stats"]["L"]), Z["train"].shape[1]
    evals = tuple(EvalLog(p, Z[p], X[p], pol[p], log(p)) for p in ("test", "target") if p in X)
    meta = {"variant": man, "data": dman, "logged": True,
            "dirs": {"variant": str(vdir), **{k: str(p) for k, p in parents.items()}}}
    return Prepared(
        dataset=dman["key"]["identity"]["name"], variant=man["key"]["variant"]["name"], seed=int(man["key"]["seed"]),
        Z_train=Z["train"], Z_test=Z["test"], W=np.zeros((A, d), np.float32), b=np.zeros(A, np.float32),
        policy_train=pol["train"], policy_test=pol["test"], log_train=log("train"), log_val=log("val"),
        inv_propensity=np.load(ddir / "inv_propensity.npy"), Y_test=None, Y_train=None,
        X_train=X["train"], X_test=X["test"], meta=meta, eval_logs=evals)
