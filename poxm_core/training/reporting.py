"""A trial's evaluation: per-epoch validation estimates, and the final estimates, V_true and test metrics.

Everything a head's evaluation reads is on the trial's device once (`EvalInputs`: the frozen z of
both splits, the sparse inputs as `DeviceCSR`, the validation rows' candidates and rho); a head's
features are computed there in chunks and handed to `evaluation.val_arrays` / `test_table` as device
tensors, never through NumPy.

Heads are evaluated concurrently by a thread pool (`map_heads`): the Monte-Carlo slate metrics and
the estimators are NumPy on the host, which releases the GIL in its large array operations, and
every head's draws come from its own seed, so the numbers do not depend on the order or the
concurrency (each head's result is the same function of its parameters as when evaluated alone).
"""
from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from poxm_core.config.schema import SweepConfig
from poxm_core.estimators.base import effective_sample_size
from poxm_core.estimators.validation import needed_arrays, validation_estimates
from poxm_core.estimators.weights import importance_weights
from poxm_core.metrics.ranking import greedy_metrics, greedy_per_instance, stochastic_metrics
from poxm_core.prepare.prepared import Prepared
from poxm_core.common.results import KS, make_row, mlflow_name
from poxm_core.training.eval_threads import eval_threads_for
from poxm_core.training.batches import DeviceCSR
from poxm_core.policy.heads import HeadParams
from poxm_core.training.evaluation import PolicyView, test_table, val_arrays
from poxm_core.common.seeds import stable_seed
from poxm_core.training.spec import HeadSpec, TrialSpec
from poxm_core.training.trial_setup import TrialHead

__all__ = ["KS", "INSTANCE_METRICS", "instance_key", "EvalInputs", "map_heads", "epoch_report", "epoch_rows", "freeze", "frozen_bytes", "final_report"]

# each test instance's value of these, per head, kept beside the rows (test_instances.npz): the claims'
# intervals add the test-set sampling term from them. R@5/PSR@5 of a deterministic policy are its
# P@5/PSP@5 (every slate is its ranking); P@5 of every head is its greedy ranking's (the logging
# policy's greedy twin is a claim of its own).
INSTANCE_METRICS = ("R@5", "PSR@5", "P@5")


class EvalInputs:
    """The evaluation inputs of a trial on its device. `Z_train`/`X_train` may be shared with the
    training data (`TrainData`) so the training split is on the device once."""

    def __init__(self, prepared: Prepared, device: torch.device, Z_train: torch.Tensor | None = None,
                 X_train: DeviceCSR | None = None, clusters: int | None = None) -> None:
        self.prepared, self.device = prepared, device
        # where the exact slate metrics' quadrature runs: the GPU, else NumPy on the host (the reference)
        self.gpu = device if device.type != "cpu" else None
        as_dev = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=device)  # noqa: E731
        self._Z = {"train": Z_train if Z_train is not None else as_dev(prepared.Z_train), "test": as_dev(prepared.Z_test)}
        self._X = {"train": X_train}
        rows = prepared.log_val.instance
        self.val_rows = torch.as_tensor(rows, dtype=torch.int64, device=device)
        self.test_rows = torch.arange(prepared.Z_test.shape[0], device=device)
        self.val_cand = prepared.policy_train.cand[rows]
        self.val_rho = prepared.policy_train.rho[rows]
        # per-action arrays (first axis: label id) an estimator may declare in `needs` (docs/estimators.md):
        # the label propensities' inverse and the logging model's output rows W as action embeddings
        self.action_arrays = {"inv_propensity": prepared.inv_propensity, "action_embedding": prepared.W}
        if "action_cluster" in needed_arrays():    # MIPS, OffCEM: label clusters of W (k-means, memoised)
            from poxm_core.estimators.mips import estimator_clusters      # k: selection.clusters
            from poxm_core.prepare.clusters import label_clusters
            self.action_arrays["action_cluster"] = label_clusters(
                prepared, estimator_clusters(clusters, prepared.n_labels), seed=0)

    def _sparse(self, split: str) -> DeviceCSR | None:
        if self._X.get(split) is None:
            X = self.prepared.X_train if split == "train" else self.prepared.X_test
            self._X[split] = DeviceCSR(X, self.device) if X is not None else None
        return self._X[split]

    def features(self, h: TrialHead, which: str) -> torch.Tensor:
        """(n, h) features the head's output layer reads for the validation log's instances ('val')
        or every test instance ('test'); the frozen z for the logging policy."""
        split, rows = ("train", self.val_rows) if which == "val" else ("test", self.test_rows)
        Z = self._Z[split]
        if h.policy is None:
            return Z.index_select(0, rows)
        own = h.policy.features_on(Z, self._sparse(split) if h.policy.reads_sparse else None, rows)
        return own if h.companion is None else torch.cat([own, self.features(h.companion, which)], dim=1)

    def prefetch_sparse(self) -> None:
        """Build the sparse inputs now (before a thread pool shares this object)."""
        self._sparse("train")
        self._sparse("test")
        for e in self.prepared.eval_logs:
            self._eval_inputs(e)

    def _eval_inputs(self, e) -> tuple[torch.Tensor, DeviceCSR | None]:
        """An evaluation log's (Z, X) on the device (logged data: `Prepared.eval_logs`), made once."""
        key = f"eval:{e.name}"
        if key not in self._Z:
            self._Z[key] = torch.as_tensor(np.ascontiguousarray(e.Z), dtype=torch.float32, device=self.device)
            self._X[key] = DeviceCSR(e.X, self.device) if e.X is not None else None
        return self._Z[key], self._X[key]

    def eval_features(self, h: TrialHead, e) -> torch.Tensor:
        """`features` of every row of the evaluation log `e` (its own split)."""
        Z, X = self._eval_inputs(e)
        rows = torch.arange(Z.shape[0], device=self.device)
        if h.policy is None:
            return Z
        own = h.policy.features_on(Z, X if h.policy.reads_sparse else None, rows)
        return own if h.companion is None else torch.cat([own, self.eval_features(h.companion, e)], dim=1)


def map_heads(fn, heads: list, device=None) -> list:
    """[fn(h) for h in heads], run by a thread pool (results in order; the first error is raised) of
    at most `eval_threads_for(device)` threads."""
    workers = min(len(heads), eval_threads_for(device))
    if workers <= 1:
        return [fn(h) for h in heads]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, heads))


def _p_sis(h: TrialHead, K: int) -> int:
    """The selector estimators' Phi^p: the head's p, or all K candidates for a head without an action
    selector (a size axis of another kind, POTEC's k, is not one)."""
    return h.spec.p if h.spec.p is not None and h.method.size_key == "p" else K


def val_estimates(h: TrialHead, ev: "EvalInputs", reward: TrialHead | None,
                  frozen: "tuple[PolicyView, torch.Tensor] | None" = None, on=None) -> dict[str, tuple[float, float]]:
    """{metric: (value, stderr)} on the validation log: every reported estimator of the registry (IS,
    sIS, SNIS, PIS, ...; DR with a reward model) and ESS. Features are computed for the logged rows only
    (the log is re-indexed). `frozen`: the head's (view, validation features) as `freeze` took them,
    instead of its current parameters. `on`: an evaluation log of logged data (`Prepared.eval_logs`)
    instead of the validation log: the same estimates on its rows."""
    prepared = ev.prepared
    if on is None:
        full, cand, rho = prepared.log_val, ev.val_cand, ev.val_rho
        feats_of = lambda head: ev.features(head, "val")  # noqa: E731
    else:
        full, cand, rho = on.log, on.policy.cand, on.policy.rho
        feats_of = lambda head: ev.eval_features(head, on)  # noqa: E731
    log = dataclasses.replace(full, instance=np.arange(full.n, dtype=np.int64))
    K = prepared.policy_train.cand.shape[1]
    rw = (reward.params, feats_of(reward)) if reward is not None else None
    view, feats = frozen if frozen is not None else (h.view(), feats_of(h))
    needs = needed_arrays()
    arr = val_arrays(view, feats, cand, rho, log, _p_sis(h, K), rw, ev.device,
                     tables="pi_selector" in needs)
    q = log.q.astype(np.float64)
    # every reported estimator of the registry (estimators.validation): DR only with a reward model; the
    # extra arrays estimators declare (`needs`) by name (docs/estimators.md), only those some estimator needs
    aux = {k: arr[k] for k in ("dm_term", "rhat_logged") if k in arr}
    extra = {**ev.action_arrays, "actions": log.actions, "cand_pos": log.cand_pos, "candidates": cand,
             "rho_candidates": rho, **{k: arr[k] for k in ("pi_selector", "rhat_candidates") if k in arr}}
    est = validation_estimates({"policy": arr["logpi_is"], "selector": arr["logpi_sis"]}, q, log.rewards, aux,
                               {k: v for k, v in extra.items() if k in needs})
    out = {label: (e.value, e.stderr) for label, e in est.items()}
    out["ESS"] = (effective_sample_size(importance_weights(arr["logpi_is"], q)), math.nan)
    return out


def test_metrics(cfg: SweepConfig, spec: TrialSpec, h: TrialHead, ev: "EvalInputs",
                 instances: dict | None = None) -> dict[str, tuple[float, float]]:
    """{metric: (value, stderr)}: R@k, nDCR@k, PSR@k (stochastic, MC stderr), P@k, nDCG@k, PSP@k.
    `instances`: when given, set to {metric: (n_test,) float32} for INSTANCE_METRICS (each instance's
    share of the value: its mean is the value)."""
    tr, prepared = cfg.training, ev.prepared
    sup, probs, ranking, lost = test_table(h.view(), ev.features(h, "test"), prepared.policy_test.cand,
                                           prepared.policy_test.rho, max(KS), tr.eval_max_support, ev.device)
    out = {k: (v, math.nan) for k, v in greedy_metrics(prepared.Y_test, ranking, prepared.inv_propensity, KS).items()}
    per = {} if instances is not None else None
    out.update(_stochastic(prepared.Y_test, sup, probs, out, prepared.inv_propensity, KS, tr.mc_slates,
                           stable_seed(spec.seed, h.key, "test-slates"), ev.gpu, per))
    if instances is not None:
        greedy = greedy_per_instance(prepared.Y_test, ranking, prepared.inv_propensity, 5)
        if sup is None:
            per = {"R@5": greedy["P@5"], "PSR@5": greedy["PSP@5"]}
        instances.update({k: np.asarray(v, dtype=np.float32) for k, v in {**per, "P@5": greedy["P@5"]}.items()
                          if k in INSTANCE_METRICS})
    if h.view().kind == "all":
        out["truncated_mass"] = (lost, math.nan)
    return out


def _stochastic(Y, sup, probs, greedy: dict, inv, ks, n_slates: int, seed: int,
                device=None, per_instance: dict | None = None) -> dict[str, tuple[float, float]]:
    if sup is None:   # a deterministic policy: every slate is the ranking, so R@k = P@k etc. exactly
        ren = {"P": "R", "nDCG": "nDCR", "PSP": "PSR"}
        return {f"{ren[k.split('@')[0]]}@{k.split('@')[1]}": (v[0], 0.0) for k, v in greedy.items()}
    if per_instance is not None:
        per_instance.update({k: None for k in INSTANCE_METRICS if not k.startswith("P@")})
    res = stochastic_metrics(Y, sup, probs, inv, ks, n_slates=n_slates, seed=seed, device=device,
                             per_instance=per_instance)
    return {k: (v, res.get(f"{k}_se", math.nan)) for k, v in res.items() if not k.endswith("_se")}


def val_truth(cfg: SweepConfig, spec: TrialSpec, h: TrialHead, ev: "EvalInputs") -> tuple[float, float] | None:
    """V_true = E_{slate ~ pi}[sum_{j<=ell} 1{y_j in Y*_i}] averaged over the validation instances
    (= ell * R@ell of the test-time policy on them, with their true labels). Ground truth for the
    estimator-accuracy figure only."""
    prepared = ev.prepared
    if prepared.Y_train is None:
        return None
    log = prepared.log_val
    ell = log.slate_size
    inst = log.instance
    Y = prepared.Y_train[inst]
    sup, probs, ranking, _ = test_table(h.view(), ev.features(h, "val"), ev.val_cand, ev.val_rho, ell,
                                        cfg.training.eval_max_support, ev.device)
    greedy = {k: (v, math.nan) for k, v in greedy_metrics(Y, ranking, prepared.inv_propensity, (ell,)).items()}
    v, se = _stochastic(Y, sup, probs, greedy, prepared.inv_propensity, (ell,), cfg.training.mc_slates,
                        stable_seed(spec.seed, h.key, "val-truth-slates"), ev.gpu)[f"R@{ell}"]
    return ell * v, ell * se


def instance_key(h: HeadSpec) -> str:
    """A head's name in test_instances.npz: 'method|p|lam' (p -1 / lam nan where unused, as in the rows)."""
    p = -1 if h.p is None else int(h.p)
    lam = "nan" if h.lam is None else repr(float(h.lam))
    return f"{h.method}|{p}|{lam}"


def result_rows(spec: TrialSpec, h: HeadSpec, split: str, values: dict, epoch: int, final: bool) -> list[dict]:
    return [make_row(dataset=spec.dataset, variant=spec.variant, method=h.method, p=h.p, lam=h.lam, seed=spec.seed,
                     split=split, metric=k, value=v, stderr=se, epoch=epoch, final=final)
            for k, (v, se) in values.items()]


def epoch_report(spec: TrialSpec, heads: list[TrialHead], losses: dict[str, float], ev: EvalInputs,
                 epoch: int) -> tuple[list[dict], dict[str, float]]:
    """Per-epoch rows (train loss, validation estimates) and MLflow metrics of the trained `heads`."""
    trained = [h for h in heads if h.trains]
    return epoch_rows(spec, trained, losses, map_heads(lambda h: val_estimates(h, ev, None), trained, ev.device), epoch)


def freeze(h: TrialHead, ev: EvalInputs) -> tuple[PolicyView, torch.Tensor]:
    """What `val_estimates` reads of a head's parameters, copied now: its view with a copy of its output
    layer, and its validation features (new tensors): the estimates of this moment, computed later while
    the head trains on."""
    view = h.view()
    if view.params is not None:
        view = dataclasses.replace(view, params=HeadParams(view.params.W.clone(), view.params.b.clone()))
    return view, ev.features(h, "val")


def frozen_bytes(heads: list[TrialHead]) -> int:
    """What `freeze` copies of the trained `heads`' output layers, in bytes (the features are smaller)."""
    return sum(h.params.W.numel() * h.params.W.element_size() for h in heads if h.trains and h.params is not None)


def epoch_rows(spec: TrialSpec, trained: list[TrialHead], losses: dict[str, float], ests: list[dict], epoch: int
               ) -> tuple[list[dict], dict[str, float]]:
    """`epoch_report`'s rows and metrics from the trained heads' validation estimates `ests`."""
    new: list[dict] = []
    metrics: dict[str, float] = {}
    for h, est in zip(trained, ests):
        vals = {"loss": (losses[h.key], math.nan)}
        new += result_rows(spec, h.spec, "train", vals, epoch, False)
        new += result_rows(spec, h.spec, "val", est, epoch, False)
        for k, (v, se) in {**vals, **est}.items():
            metrics[mlflow_name(f"{h.key}/{k}")] = float(v)
            if not math.isnan(se):
                metrics[mlflow_name(f"{h.key}/{k}_se")] = float(se)
    return new, metrics


def final_report(cfg: SweepConfig, spec: TrialSpec, heads: list[TrialHead], reward: TrialHead, ev: EvalInputs,
                 last: int, instances: dict | None = None) -> list[dict]:
    """The final rows of every visible head: validation estimates with DR, V_true, test metrics (logged
    data: instead of test metrics, the same estimates on each evaluation log, split = its name).
    `instances`: filled with {instance_key(head): {metric: (n_test,) float32}} (see test_metrics)."""
    def one(h: TrialHead) -> list[dict]:
        ep = last if h.trains else 0
        rows = result_rows(spec, h.spec, "val", val_estimates(h, ev, reward), ep, True)
        truth = val_truth(cfg, spec, h, ev)
        if truth is not None:
            rows += result_rows(spec, h.spec, "val_truth", {"V_true": truth}, ep, True)
        if ev.prepared.eval_logs:    # logged data, no labels: off-policy estimates on the held-out logs
            for e in ev.prepared.eval_logs:
                rows += result_rows(spec, h.spec, e.name, val_estimates(h, ev, reward, on=e), ep, True)
            return rows
        per = {} if instances is not None else None
        rows += result_rows(spec, h.spec, "test", test_metrics(cfg, spec, h, ev, per), ep, True)
        if per is not None:
            instances[instance_key(h.spec)] = per
        return rows
    ev.prefetch_sparse()
    return [r for rows in map_heads(one, heads, ev.device) for r in rows]
