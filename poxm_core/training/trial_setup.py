"""A trial's heads, built from its spec: the checks, the policies, the learning rates, the settings hash.

`build_heads` makes one `TrialHead` per head of the spec (plus the hidden DR reward model, the DM head,
when the group has none), their policies built together by `poxm_core.policy.build_policies`, so that
network heads of one group share a `NetworkStack`.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

from poxm_core.config.schema import MethodConfig, SweepConfig, config_hash, resolved_dict
from poxm_core.common.errors import PoxmInputError
from poxm_core.methods import REWARD_METHOD, Method, get_method
from poxm_core.policy import NetworkStack, Policy, PolicyRequest, build_policies
from poxm_core.prepare.clusters import label_clusters
from poxm_core.prepare.prepared import Prepared
from poxm_core.training.evaluation import PolicyView
from poxm_core.policy.heads import HeadParams
from poxm_core.common.seeds import stable_seed
from poxm_core.training.spec import HeadSpec, TrialSpec

__all__ = ["TrialHead", "REWARD_KEY", "build_heads", "check_spec", "head_lr", "result_hash", "deterministic", "wants_deterministic"]

REWARD_KEY = HeadSpec(REWARD_METHOD).key   # the reward model's head (trained hidden if not in the group)


@dataclass
class TrialHead:
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

    @property
    def companion(self) -> "TrialHead | None":
        """A head whose features the evaluation appends to this head's (POTEC's reward model), or None."""
        return getattr(self.method, "reward_head", None)

    def view(self) -> PolicyView:
        m = self.method
        if m.test_policy == "rho":
            return PolicyView("rho")
        if m.test_policy == "greedy":
            return PolicyView("greedy", params=self.params)
        return PolicyView(m.test_support(self.mc), self.spec.p, self.params,
                          scores=getattr(m, "candidate_scores", None))


# ------------------------------------------------------------------------------------- setup

def _method_config(cfg: SweepConfig, name: str) -> MethodConfig:
    # the method's own Options instance (config keeps its options as extras of the base class); the reward
    # model's method may be absent (the hidden reward head): its defaults
    return get_method(name).options(cfg.methods.get(name) if name == REWARD_METHOD else cfg.methods[name])


def check_spec(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared) -> None:
    if (prepared.dataset, prepared.variant, prepared.seed) != (spec.dataset, spec.variant, spec.seed):
        raise PoxmInputError(f"prepared data is ({prepared.dataset}, {prepared.variant}, seed {prepared.seed}) but the "
                             f"trial is ({spec.dataset}, {spec.variant}, seed {spec.seed})")
    K = prepared.policy_train.cand.shape[1]
    for h in spec.heads:
        m = get_method(h.method)
        if h.method not in cfg.methods:
            raise PoxmInputError(f"methods.{h.method}: the trial has a '{h.method}' head but the config has no "
                                 f"methods.{h.method} entry")
        try:
            m.validate(cfg.methods[h.method])     # its Options: a key it lacks is an input error here too
        except PoxmInputError as exc:
            raise cfg.located(exc) from None
        if m.uses_p != (h.p is not None) or m.uses_lam != (h.lam is not None):
            raise PoxmInputError(f"heads: {h.key}: method '{h.method}' expects p {'set' if m.uses_p else 'None'} "
                                 f"and lam {'set' if m.uses_lam else 'None'}")
        if h.p is not None and h.p > K and m.size_key == "p":     # another size (POTEC's k): its own check
            raise PoxmInputError(f"methods.{h.method}.p: p={h.p} exceeds the {K} candidates C(x) "
                                 f"(model.n_candidates); expected p <= {K}")
        if m.needs_labels() and prepared.Y_train is None:
            raise PoxmInputError(f"methods.{h.method}: needs training labels but the prepared data has no Y_train")


def build_heads(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared,
                 device: torch.device) -> tuple[list[TrialHead], dict[str, NetworkStack]]:
    specs = list(spec.heads)
    hidden_reward = REWARD_KEY not in {h.key for h in specs}
    if hidden_reward:
        specs.append(HeadSpec(REWARD_METHOD))
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
                                      use_encoder=tr.network_inputs == "sparse+encoder", input_adam=tr.input_adam)
    it = iter(policies)
    heads = [TrialHead(h, m, mc, next(it) if m.trains else None, hidden=hidden_reward and h.key == REWARD_KEY)
             for h, m, mc in metas]
    for h in heads:
        bias = h.method.initial_bias(prepared, h.mc) if h.trains and (h.mc.init or tr.init) != "logging" else None
        if bias is not None:
            h.policy.out.b.copy_(torch.as_tensor(bias, dtype=torch.float32, device=device))
    def clusters(k: int) -> np.ndarray:
        return label_clusters(prepared, k, prepared.seed)

    for h in heads:     # a method that reads the trial (POTEC: its label clusters, the reward model)
        h.method = h.method.for_trial(prepared, h, heads, device, clusters)
    return heads, stacks


def head_lr(cfg: SweepConfig, m: Method, mc: MethodConfig) -> float:
    """MethodConfig.lr, else the protocol's rate of the method's group (IS-based or supervised)."""
    return mc.lr or (cfg.training.lr_is if m.lr_group == "is" else cfg.training.lr_supervised)


def result_hash(cfg: SweepConfig, spec: TrialSpec) -> str:
    """Hash of every setting that determines the trial's numbers, except training.epochs (a trial
    may be resumed to more epochs)."""
    used = sorted({h.method for h in spec.heads} | {REWARD_METHOD})
    training = resolved_dict(cfg.training)
    # neither changes a number on CPU: checkpoint_every is when state is written, deterministic only the
    # float summation order on CUDA (kept out so that older caches and checkpoints stay valid)
    training.pop("checkpoint_every", None)   # absent from the dump at their defaults (config.py)
    training.pop("deterministic", None)
    training.pop("batched_heads", None)   # the same heads, batched: only the float summation order differs
    if not any(get_method(h.method).needs_reward_model for h in spec.heads):
        training.pop("epochs")   # resumable to more epochs, except after a phase-1 reward fit
    return config_hash({"spec": spec.to_dict(), "training": training, "model": resolved_dict(cfg.model),
                        "dataset": resolved_dict(cfg.dataset(spec.dataset)) if any(d.name == spec.dataset for d in cfg.datasets) else spec.dataset,
                        "methods": {m: resolved_dict(_method_config(cfg, m)) for m in used}})


def wants_deterministic(cfg: SweepConfig, device: torch.device) -> bool:
    """training.deterministic resolved for `device`: 'auto' = on for CPU, off for CUDA.

    CPU results are the reference (tests compare them exactly, resume equals uninterrupted). On CUDA
    the mode sends the row-sparse updates (index_put on unique rows, index_select's backward) through
    PyTorch's sort-based kernels, several times slower (docs/performance.md); without it the only difference is
    the float summation order of atomic adds (the gather backward, EmbeddingBag backward).
    """
    mode = cfg.training.deterministic
    return device.type == "cpu" if mode == "auto" else bool(mode)


def set_deterministic(on: bool, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms(on, warn_only), without importing torch._inductor when nothing
    else has: the public call also sets inductor's copy of the flag (read by torch.compile only, which
    poxm never uses), and that import pulls in torch._dynamo, sympy and more: most of a fresh process's
    set-up (poxm_core/optim/torch_lean.py; docs/performance.md)."""
    if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) == \
            (bool(on), bool(warn_only) and bool(on)):
        return
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(on, warn_only=warn_only)
    else:
        setter(on, warn_only=warn_only)


@contextlib.contextmanager
def deterministic(on: bool = True):
    """torch.use_deterministic_algorithms(on) for the trial (warn-only where an op has no such kernel)."""
    prev, prev_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    set_deterministic(on, warn_only=on)
    try:
        yield
    finally:
        set_deterministic(prev, warn_only=prev_warn)
