"""The single-trial trainer: every head of a TrialSpec trained in one pass over the cached data.

    run_trial(cfg, spec, prepared, out_dir, resume_from=None, on_epoch=None, progress=True) -> DataFrame

Loop (docs/training.md): for epoch e = 1..training.epochs, the fit log (`prepared.log_train`) is
shuffled by a generator seeded from (seed, e) and cut into mini-batches; each batch is given to every
trainable head in turn (its own policy: dense layers + row-sparse output layer, `poxm_core.policy`,
with its optimisers and learning rate: MethodConfig.lr, else training.lr_is / lr_supervised). The
reward model (the DM head) is fitted first, for all its epochs (phase 1), so that DR estimates and
DR-POXM use a fitted rhat; the other heads then train side by side (phase 2). After the epoch every head reports its mean training loss and the IS, sIS, SNIS
estimates and ESS of its test-time policy on the validation log; a checkpoint is written; then
`on_epoch(e, metrics, ckpt_dir)`. At the end: test metrics (DESIGN §8), the final validation
estimates (with DR), the ground-truth value V_true (split 'val_truth', never read by selection),
written as long-form rows to out_dir/rows.csv with out_dir/summary.json and out_dir/config.yaml.

Heads share nothing but the batches, and every random draw of a head comes from a generator seeded
by (seed, epoch, head key): a head trained in a group gives the same numbers as trained alone, and a
trial resumed from its checkpoint ends identical to an uninterrupted one (CPU; deterministic kernels).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
import yaml

from poxm_core.config import MethodConfig, SweepConfig, config_hash, protocol_name, resolved_dict
from poxm_core.errors import PoxmInputError
from poxm_core.estimators.base import effective_sample_size
from poxm_core.estimators.validation import validation_estimates
from poxm_core.estimators.weights import importance_weights
from poxm_core.methods import Batch, HeadContext, Method, get_method
from poxm_core.methods.base import reward_shift
from poxm_core.model.core import csr_to_bag
from poxm_core.policy import NetworkStack, Policy, PolicyRequest, build_policies
from poxm_core.metrics import greedy_metrics, stochastic_metrics
from poxm_core.prepared import Prepared
from poxm_core.results import COLUMNS, make_row, mlflow_name, to_frame
from poxm_core.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from poxm_core.training.evaluation import PolicyView, test_table, val_arrays
from poxm_core.training.heads import HeadParams, RowScorer, stable_seed
from poxm_core.training.spec import HeadSpec, TrialSpec

__all__ = ["run_trial", "KS", "REWARD_KEY"]

KS = (1, 3, 5)
REWARD_KEY = HeadSpec("dm").key   # the DR reward model is the DM head (trained hidden if not in the group)
OnEpoch = Callable[[int, dict, Path], None]


@dataclass
class _Head:
    spec: HeadSpec
    method: Method
    mc: MethodConfig
    policy: Policy | None
    hidden: bool = False          # the DR reward model when no DM head is in the group: no rows

    @property
    def params(self) -> HeadParams | None:
        return self.policy.out if self.policy is not None else None

    def features(self, Z: np.ndarray, X, rows: np.ndarray) -> np.ndarray | None:
        """The policy's features of `rows` (None for the logging policy)."""
        return self.policy.features_of(Z, X, rows) if self.policy is not None else None

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def trains(self) -> bool:
        return self.method.trains

    def view(self) -> PolicyView:
        m = self.method
        if m.test_policy == "rho":
            return PolicyView("rho")
        if m.test_policy == "greedy":
            return PolicyView("greedy", params=self.params)
        return PolicyView(m.test_support(self.mc), self.spec.p, self.params)


# ------------------------------------------------------------------------------------- setup

def _method_config(cfg: SweepConfig, name: str) -> MethodConfig:
    return cfg.methods.get(name, MethodConfig()) if name == "dm" else cfg.methods[name]


def _check_spec(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared) -> None:
    if (prepared.dataset, prepared.variant, prepared.seed) != (spec.dataset, spec.variant, spec.seed):
        raise PoxmInputError(f"prepared data is ({prepared.dataset}, {prepared.variant}, seed {prepared.seed}) but the "
                             f"trial is ({spec.dataset}, {spec.variant}, seed {spec.seed})")
    K = prepared.policy_train.cand.shape[1]
    for h in spec.heads:
        m = get_method(h.method)
        if h.method not in cfg.methods:
            raise PoxmInputError(f"methods.{h.method}: the trial has a '{h.method}' head but the config has no "
                                 f"methods.{h.method} entry")
        m.validate(cfg.methods[h.method])
        if m.uses_p != (h.p is not None) or m.uses_lam != (h.lam is not None):
            raise PoxmInputError(f"heads: {h.key}: method '{h.method}' expects p {'set' if m.uses_p else 'None'} "
                                 f"and lam {'set' if m.uses_lam else 'None'}")
        if h.p is not None and h.p > K:
            raise PoxmInputError(f"methods.{h.method}.p: p={h.p} exceeds the {K} candidates C(x) "
                                 f"(model.n_candidates); expected p <= {K}")
        if m.needs_labels() and prepared.Y_train is None:
            raise PoxmInputError(f"methods.{h.method}: needs training labels but the prepared data has no Y_train")


def _build_heads(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared,
                 device: torch.device) -> tuple[list[_Head], dict[str, NetworkStack]]:
    specs = list(spec.heads)
    hidden_reward = REWARD_KEY not in {h.key for h in specs}
    if hidden_reward:
        specs.append(HeadSpec("dm"))
    two_phase = any(get_method(h.method).needs_reward_model for h in specs)
    tr = cfg.training
    metas, reqs = [], []
    for h in specs:
        m = get_method(h.method)
        mc = _method_config(cfg, h.method)
        metas.append((h, m, mc))
        if m.trains:
            init = mc.init or tr.init
            reqs.append(PolicyRequest(m.policy or tr.policy, "fresh" if init == "random" else init,
                                      head_lr(cfg, m, mc), stable_seed(spec.seed, h.key, "init"),
                                      group="reward" if two_phase and h.key == REWARD_KEY else "main"))
    X = prepared.X_train
    policies, stacks = build_policies(reqs, W0=np.asarray(prepared.W), b0=np.asarray(prepared.b),
                                      n_features=None if X is None else X.shape[1], hidden=tr.hidden,
                                      weight_decay=tr.weight_decay, device=device,
                                      use_encoder=tr.network_inputs == "sparse+encoder")
    it = iter(policies)
    heads = [_Head(h, m, mc, next(it) if m.trains else None, hidden=hidden_reward and h.key == REWARD_KEY)
             for h, m, mc in metas]
    for h in heads:
        bias = h.method.initial_bias(prepared) if h.trains and (h.mc.init or tr.init) != "logging" else None
        if bias is not None:
            h.policy.out.b.copy_(torch.as_tensor(bias, dtype=torch.float32, device=device))
    return heads, stacks


def head_lr(cfg: SweepConfig, m: Method, mc: MethodConfig) -> float:
    """MethodConfig.lr, else the protocol's rate of the method's group (IS-based or supervised)."""
    return mc.lr or (cfg.training.lr_is if m.lr_group == "is" else cfg.training.lr_supervised)


def _result_hash(cfg: SweepConfig, spec: TrialSpec) -> str:
    """Hash of every setting that determines the trial's numbers, except training.epochs (a trial
    may be resumed to more epochs)."""
    used = sorted({h.method for h in spec.heads} | {"dm"})
    training = resolved_dict(cfg.training)
    if not any(get_method(h.method).needs_reward_model for h in spec.heads):
        training.pop("epochs")   # resumable to more epochs, except after a phase-1 reward fit
    return config_hash({"spec": spec.to_dict(), "training": training, "model": resolved_dict(cfg.model),
                        "dataset": resolved_dict(cfg.dataset(spec.dataset)) if any(d.name == spec.dataset for d in cfg.datasets) else spec.dataset,
                        "methods": {m: resolved_dict(_method_config(cfg, m)) for m in used}})


@contextlib.contextmanager
def _deterministic():
    """torch.use_deterministic_algorithms for the trial (warn-only where an op has no such kernel)."""
    prev, prev_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)


# ------------------------------------------------------------------------------------- training

def _batch(prepared: Prepared, rows: np.ndarray, labels: bool, device: torch.device, sparse: bool = False) -> Batch:
    log = prepared.log_train
    inst = log.instance[rows]
    bag = csr_to_bag(prepared.X_train[inst], device) if sparse else None
    t = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=device)  # noqa: E731
    return Batch(z=t(prepared.Z_train[inst], torch.float32), actions=t(log.actions[rows], torch.int64),
                 cand_pos=t(log.cand_pos[rows], torch.int64), q=t(log.q[rows], torch.float32),
                 rewards=t(log.rewards[rows], torch.float32), cand=t(prepared.policy_train.cand[inst], torch.int64),
                 inv_prop_actions=t(prepared.inv_propensity[log.actions[rows]], torch.float32),
                 n_labels=prepared.n_labels, labels=prepared.Y_train[inst] if labels else None, bag=bag)


def _reward_fn(reward: _Head, batch: Batch):
    """rhat(ids) = sigmoid(reward head logits) for the batch's instances, without gradient."""
    with torch.no_grad():
        h = reward.policy.features(batch.z, batch.bag)

    def rhat(ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            W = reward.params.W.index_select(0, ids.reshape(-1)).view(*ids.shape, -1)
            return torch.sigmoid(torch.bmm(W, h.unsqueeze(2)).squeeze(2) + reward.params.b[ids])
    return rhat


def _train_epoch(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared, heads: list[_Head], epoch: int,
                 device: torch.device, reward: _Head | None = None) -> dict[str, float]:
    """One epoch of every head in `heads` on the same seeded batches; `reward` is the fitted reward model.

    Per batch: one joint forward of the heads' network stacks, each head's loss on its own block of
    features, one backward of their sum (the blocks are disjoint: each head gets its own gradient),
    then each head's row-sparse output step and one step per stack."""
    trainable = [h for h in heads if h.trains]
    n = prepared.log_train.n
    g = torch.Generator().manual_seed(stable_seed(spec.seed, "batches", epoch))
    perm = torch.randperm(n, generator=g).numpy()
    ctxs = {h.key: HeadContext(h.spec.p, h.spec.lam, h.mc,
                               torch.Generator().manual_seed(stable_seed(spec.seed, h.key, "negatives", epoch)),
                               prepared.n_labels, shift=reward_shift(h.spec.lam, cfg.training.translation))
            for h in trainable}
    labels = any(h.method.needs_labels() for h in trainable)
    needs_reward = any(h.method.needs_reward_model for h in trainable)
    sparse = any(h.policy.reads_sparse for h in trainable) or (needs_reward and reward.policy.reads_sparse)
    stacks = list({id(h.policy.stack[0]): h.policy.stack[0] for h in trainable if hasattr(h.policy, "stack")}.values())
    total = {h.key: 0.0 for h in trainable}
    B = cfg.training.batch_size
    for a in range(0, n, B):
        batch = _batch(prepared, perm[a:a + B], labels, device, sparse)
        rhat = _reward_fn(reward, batch) if needs_reward else None
        stacked = {id(st): st(batch.z, batch.bag) for st in stacks}
        scorers, losses = [], []
        for h in trainable:
            ctx = ctxs[h.key]
            if h.method.needs_reward_model:
                ctx.reward = rhat
            pol = h.policy
            feats = pol.from_stacked(stacked[id(pol.stack[0])]) if hasattr(pol, "from_stacked") else \
                pol.features(batch.z, batch.bag)
            scorer = RowScorer(pol.out, feats)
            loss = h.method.loss(scorer, batch, ctx)
            scorers.append(scorer)
            losses.append(loss)
        values = torch.stack([l.detach() for l in losses]).tolist() if losses else []
        for h, v in zip(trainable, values):
            if not math.isfinite(v):
                raise FloatingPointError(f"{h.key}: non-finite training loss at epoch {epoch} (lower its lr?)")
            total[h.key] += v * batch.size
        if losses:
            torch.stack(losses).sum().backward()
        for h, scorer in zip(trainable, scorers):
            h.policy.step(scorer)
        for st in stacks:
            st.step()
    return {k: v / n for k, v in total.items()}


# ------------------------------------------------------------------------------------- evaluation

def _p_sis(h: _Head, K: int) -> int:
    return h.spec.p if h.spec.p is not None else K


def _split_features(h: _Head, prepared: Prepared, split: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Features the head's output layer reads, for `rows` of a split (the frozen z for the logging policy)."""
    Z = prepared.Z_train if split == "train" else prepared.Z_test
    X = prepared.X_train if split == "train" else prepared.X_test
    if h.policy is None:
        return np.asarray(Z if rows is None else Z[rows])
    return h.features(Z, X, np.arange(Z.shape[0]) if rows is None else rows)


def _val_estimates(h: _Head, prepared: Prepared, reward: _Head | None, device) -> dict[str, tuple[float, float]]:
    """{metric: (value, stderr)} on the validation log: every reported estimator of the registry (IS,
    sIS, SNIS, PIS, ...; DR with a reward model) and ESS. Features are computed for the logged rows only (the log is re-indexed)."""
    full = prepared.log_val
    rows = full.instance
    log = dataclasses.replace(full, instance=np.arange(full.n, dtype=np.int64))
    K = prepared.policy_train.cand.shape[1]
    rw = (reward.params, _split_features(reward, prepared, "train", rows)) if reward is not None else None
    arr = val_arrays(h.view(), _split_features(h, prepared, "train", rows), prepared.policy_train.cand[rows],
                     prepared.policy_train.rho[rows], log, _p_sis(h, K), rw, device)
    q = log.q.astype(np.float64)
    # every reported estimator of the registry (estimators.validation): DR only with a reward model
    aux = {k: arr[k] for k in ("dm_term", "rhat_logged") if k in arr}
    est = validation_estimates({"policy": arr["logpi_is"], "selector": arr["logpi_sis"]}, q, log.rewards, aux)
    out = {label: (e.value, e.stderr) for label, e in est.items()}
    out["ESS"] = (effective_sample_size(importance_weights(arr["logpi_is"], q)), math.nan)
    return out


def _test_metrics(cfg: SweepConfig, spec: TrialSpec, h: _Head, prepared: Prepared, device) -> dict[str, tuple[float, float]]:
    """{metric: (value, stderr)}: R@k, nDCR@k, PSR@k (stochastic, MC stderr), P@k, nDCG@k, PSP@k."""
    tr = cfg.training
    sup, probs, ranking, lost = test_table(h.view(), _split_features(h, prepared, "test"), prepared.policy_test.cand,
                                           prepared.policy_test.rho, max(KS), tr.eval_max_support, device)
    out = {k: (v, math.nan) for k, v in greedy_metrics(prepared.Y_test, ranking, prepared.inv_propensity, KS).items()}
    out.update(_stochastic(prepared.Y_test, sup, probs, out, prepared.inv_propensity, KS, tr.mc_slates,
                           stable_seed(spec.seed, h.key, "test-slates")))
    if h.view().kind == "all":
        out["truncated_mass"] = (lost, math.nan)
    return out


def _stochastic(Y, sup, probs, greedy: dict, inv, ks, n_slates: int, seed: int) -> dict[str, tuple[float, float]]:
    if sup is None:   # a deterministic policy: every slate is the ranking, so R@k = P@k etc. exactly
        ren = {"P": "R", "nDCG": "nDCR", "PSP": "PSR"}
        return {f"{ren[k.split('@')[0]]}@{k.split('@')[1]}": (v[0], 0.0) for k, v in greedy.items()}
    res = stochastic_metrics(Y, sup, probs, inv, ks, n_slates=n_slates, seed=seed)
    return {k: (v, res.get(f"{k}_se", math.nan)) for k, v in res.items() if not k.endswith("_se")}


def _val_truth(cfg: SweepConfig, spec: TrialSpec, h: _Head, prepared: Prepared, device) -> tuple[float, float] | None:
    """V_true = E_{slate ~ pi}[sum_{j<=ell} 1{y_j in Y*_i}] averaged over the validation instances
    (= ell * R@ell of the test-time policy on them, with their true labels). Ground truth for the
    estimator-accuracy figure only."""
    if prepared.Y_train is None:
        return None
    log = prepared.log_val
    ell = log.slate_size
    inst = log.instance
    Y = prepared.Y_train[inst]
    sup, probs, ranking, _ = test_table(h.view(), _split_features(h, prepared, "train", inst), prepared.policy_train.cand[inst],
                                        prepared.policy_train.rho[inst], ell, cfg.training.eval_max_support, device)
    greedy = {k: (v, math.nan) for k, v in greedy_metrics(Y, ranking, prepared.inv_propensity, (ell,)).items()}
    v, se = _stochastic(Y, sup, probs, greedy, prepared.inv_propensity, (ell,), cfg.training.mc_slates,
                        stable_seed(spec.seed, h.key, "val-truth-slates"))[f"R@{ell}"]
    return ell * v, ell * se


def _rows(spec: TrialSpec, h: HeadSpec, split: str, values: dict, epoch: int, final: bool) -> list[dict]:
    return [make_row(dataset=spec.dataset, variant=spec.variant, method=h.method, p=h.p, lam=h.lam, seed=spec.seed,
                     split=split, metric=k, value=v, stderr=se, epoch=epoch, final=final)
            for k, (v, se) in values.items()]


# ------------------------------------------------------------------------------------- the trial

def _state(heads: list[_Head], stacks: dict[str, NetworkStack], epoch: int, rows: list[dict], spec: TrialSpec,
           rhash: str) -> dict:
    return {"epoch": epoch, "rows": rows, "spec": spec.to_dict(), "result_hash": rhash,
            "heads": {h.key: h.policy.state() for h in heads if h.trains},
            "stacks": {g: st.full_state() for g, st in stacks.items()}}


def _restore(path: Path, heads: list[_Head], stacks: dict[str, NetworkStack], spec: TrialSpec, rhash: str, epochs: int,
             device) -> tuple[int, list[dict]]:
    st = load_checkpoint(path, device)
    if st.get("result_hash") != rhash or st.get("spec") != spec.to_dict():
        raise PoxmInputError(f"{path}: checkpoint of a different trial or config (settings hash "
                             f"{st.get('result_hash')} != {rhash}); use a fresh --out directory")
    if st["epoch"] > epochs:
        raise PoxmInputError(f"{path}: checkpoint is at epoch {st['epoch']} but training.epochs={epochs}")
    for h in heads:
        if h.trains:
            h.policy.load_state(st["heads"][h.key])
    for g, stack in stacks.items():
        stack.load_full_state(st["stacks"][g])
    return int(st["epoch"]), list(st["rows"])


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _epoch_report(spec: TrialSpec, heads: list[_Head], losses: dict[str, float], prepared: Prepared, epoch: int,
                  device) -> tuple[list[dict], dict[str, float]]:
    """Per-epoch rows (train loss, validation estimates) and MLflow metrics of the trained `heads`."""
    new: list[dict] = []
    metrics: dict[str, float] = {}
    for h in heads:
        if not h.trains:
            continue
        vals = {"loss": (losses[h.key], math.nan)}
        new += _rows(spec, h.spec, "train", vals, epoch, False)
        est = _val_estimates(h, prepared, None, device)
        new += _rows(spec, h.spec, "val", est, epoch, False)
        for k, (v, se) in {**vals, **est}.items():
            metrics[mlflow_name(f"{h.key}/{k}")] = float(v)
            if not math.isnan(se):
                metrics[mlflow_name(f"{h.key}/{k}_se")] = float(se)
    return new, metrics


def run_trial(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared, out_dir: Path,
              resume_from: Path | None = None, on_epoch: OnEpoch | None = None, progress: bool = True) -> pd.DataFrame:
    """Train every head of `spec` on `prepared`; returns (and writes to out_dir/rows.csv) the result rows.

    Continues from `resume_from` (a checkpoint dir) or else from the latest checkpoint in out_dir.
    Metric keys given to on_epoch: mlflow_name(f"{head.key}/{metric}"), e.g. 'poxm/p_eq_10/lam_eq_0.9/SNIS'.
    """
    from poxm_core.model.core import resolve_device

    if not isinstance(cfg, SweepConfig):
        raise TypeError(f"cfg: expected a SweepConfig, got {type(cfg).__name__}")
    if not isinstance(spec, TrialSpec):
        raise TypeError(f"spec: expected a TrialSpec, got {type(spec).__name__}")
    _check_spec(cfg, spec, prepared)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    t0 = time.perf_counter()
    rhash = _result_hash(cfg, spec)
    E = cfg.training.epochs
    with _deterministic(), torch.no_grad():
        heads, stacks = _build_heads(cfg, spec, prepared, device)
    rows: list[dict] = []
    start = 0
    ckpt = Path(resume_from) if resume_from is not None else latest_checkpoint(out_dir)
    if ckpt is not None:
        start, rows = _restore(ckpt, heads, stacks, spec, rhash, E, device)
    reward = next(h for h in heads if h.key == REWARD_KEY)
    visible = [h for h in heads if not h.hidden]
    # A head that needs a fitted reward model (DR-POXM) makes the trial fit the DM head first (phase 1);
    # otherwise the DM head trains beside the others, as the reward model of the final DR estimates.
    two_phase = any(h.method.needs_reward_model for h in heads)
    others = [h for h in heads if h is not reward] if two_phase else heads
    epochs = range(start + 1, E + 1) if any(h.trains for h in heads) else range(0)
    phase1 = range(1, E + 1) if two_phase and start == 0 and len(epochs) else range(0)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(phase1) + len(epochs), desc=spec.name, unit="epoch", leave=False)
    with _deterministic():
        # phase 1: the reward model (DM) alone, all its epochs; its per-epoch metrics join phase 2's
        early: dict[int, dict[str, float]] = {}
        for epoch in phase1:
            losses = _train_epoch(cfg, spec, prepared, [reward], epoch, device)
            new, early[epoch] = _epoch_report(spec, [reward] if not reward.hidden else [], losses, prepared, epoch, device)
            rows += new
            if bar is not None:
                bar.update(1)
        for epoch in epochs:
            losses = _train_epoch(cfg, spec, prepared, others, epoch, device, reward)
            new, metrics = _epoch_report(spec, [h for h in visible if h in others], losses, prepared, epoch, device)
            metrics.update(early.get(epoch, {}))
            rows += new
            ckpt_dir = save_checkpoint(out_dir, epoch, _state(heads, stacks, epoch, rows, spec, rhash),
                                       {"trial": spec.name, "result_hash": rhash})
            if bar is not None:
                bar.update(1)
            if on_epoch is not None:
                on_epoch(epoch, metrics, ckpt_dir)
        if bar is not None:
            bar.close()
        final: list[dict] = []
        last = max(E, start) if any(h.trains for h in heads) else 0
        for h in visible:
            ep = last if h.trains else 0
            final += _rows(spec, h.spec, "val", _val_estimates(h, prepared, reward, device), ep, True)
            truth = _val_truth(cfg, spec, h, prepared, device)
            if truth is not None:
                final += _rows(spec, h.spec, "val_truth", {"V_true": truth}, ep, True)
            final += _rows(spec, h.spec, "test", _test_metrics(cfg, spec, h, prepared, device), ep, True)
    df = to_frame(rows + final)
    _write_outputs(cfg, spec, out_dir, df, heads, time.perf_counter() - t0, str(device))
    return df


def _write_outputs(cfg, spec: TrialSpec, out_dir: Path, df: pd.DataFrame, heads: list[_Head], seconds: float,
                   device: str) -> None:
    tmp = out_dir / f".rows.csv.tmp-{os.getpid()}"
    df.to_csv(tmp, index=False, columns=COLUMNS)
    os.replace(tmp, out_dir / "rows.csv")
    fin = df[df["final"]]
    summary = {"trial": spec.to_dict(), "name": spec.name, "epochs": cfg.training.epochs, "device": device,
               "protocol": protocol_name(cfg.training),
               "seconds": round(seconds, 3),
               "heads": {h.key: {"method": h.spec.method, "p": h.spec.p, "lam": h.spec.lam,
                                 "lr": head_lr(cfg, h.method, h.mc) if h.trains else None,
                                 "metrics": {f"{s}/{m}": float(v) for s, m, v in
                                             fin[(fin.method == h.spec.method) & (fin.p == (h.spec.p if h.spec.p is not None else -1))
                                                 & ((fin.lam == h.spec.lam) if h.spec.lam is not None else fin.lam.isna())]
                                             [["split", "metric", "value"]].itertuples(index=False)}}
                         for h in heads if not h.hidden}}
    _write_atomic(out_dir / "summary.json", json.dumps(summary, indent=1))
    _write_atomic(out_dir / "config.yaml", yaml.safe_dump({"config": resolved_dict(cfg), "trial": spec.to_dict()},
                                                          sort_keys=False, default_flow_style=None))
