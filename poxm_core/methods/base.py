"""The Method interface (docs/methods.md): what a method trains on, its loss, and its test-time policy.

A method is a small stateless object declared in one module and registered in `registry.py`:

  name            registry name ("poxm")
  trains          False for the logging policy (nothing to learn)
  uses_p/uses_lam whether the (p, lam) grids apply; `validate` rejects a grid given to a method
                  that ignores it, naming the key methods.<name>.p
  size_key        the config key of the head's size axis (HeadSpec.p): 'p', the action selector's size,
                  or a method's own (POTEC: 'k', its label clusters; it then has no Phi^p)
  train_support   which labels the loss touches: "none" | "logged" | "all" | "phi" | "candidates" |
                  "full labels"
  test_policy     "rho" (logging), "greedy" (top-k over C(x) by score), or "softmax" (Plackett-Luce
                  over `test_support(...)`: "phi" = Phi^p(x), "candidates" = C(x), "all" = [L])

Its loss is written ONCE, over a leading head axis, and both training engines call it:

  ids(batch, ctx)     the label ids (B, m) whose logits the loss reads, the same for every head of a
                      group (same method, p and options); None = every label (then
                      `scores_every_label(mc)` is True)
  draws(mc)           k labels drawn uniformly per step for each head, shared by the batch's instances
                      (the sampled softmax's negatives); their logits follow the ids' on the last axis
                      and the draws themselves are `ctx.draws` (G, k)
  loss(logits, batch, ctx)
                      the minimised objective of G heads on one mini-batch, (G,): logits (G, B, m [+ k])
                      or (G, B, L); ctx holds the group's settings, `shift` a float or a (G, 1, 1)
                      vector of the heads' reward translations. The heads' parameters are disjoint, so
                      the gradient of the sum is each head's own gradient.

`head_loss(score, batch, ctx)` is one head's loss through a `score(ids)` callable (the sequential
engine, tests): it asks for `ids` (+ the draws, from the head's generator) and calls `loss` with G = 1.
The batched engine (training/batched.py) computes the logits of a whole group at once and calls
`loss` once per group: a method defined anywhere, a plugin's included, is batched without being named
in the engine.

Heads are linear on the frozen encoder: s(x, y) = W[y] . z(x) + b[y] (W (L, d), b (L,)).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace
from typing import Callable, ClassVar

from pydantic import ValidationError

import numpy as np
import scipy.sparse as sp
import torch

from poxm_core.config.schema import PUBLISHED_METHOD_KEYS, MethodConfig
from poxm_core.config.checks import _check
from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators import pl_expectations_torch, pl_log_conditionals_torch
from poxm_core.estimators.translated import translated_value_torch
from poxm_core.estimators.weights import importance_weights_torch

__all__ = ["Batch", "HeadContext", "Method", "Scorer", "translated_loss", "pl_logpi", "pl_expect", "DEFAULT_P",
           "DEFAULT_LAM"]

# docs/methods.md grids, used when a method that needs p or lam is given none.
DEFAULT_P = (10, 20, 50, 100)
DEFAULT_LAM = (0.7, 0.8, 0.9, 1.0)

Scorer = Callable[[torch.Tensor | None], torch.Tensor]


@dataclass
class Batch:
    """One mini-batch of logged training instances, as tensors on the training device.

    z (B, d) float32 frozen encoder outputs; actions, cand_pos (B, ell) int64; q, rewards (B, ell)
    float32; cand (B, K) int64 candidates in rho order (Phi^p(x) = cand[:, :p]); inv_prop_actions
    (B, ell) float32 = 1/p_{y_ij}; labels: CSR (B, L) true labels, only set when a skyline head is
    trained (nothing else may read them), or in the CUDA-graph loop the same rows as an (B, k) int64
    tensor of label ids padded with L (`model.core.dense_targets` reads both); n_labels L.
    """
    z: torch.Tensor
    actions: torch.Tensor
    cand_pos: torch.Tensor
    q: torch.Tensor
    rewards: torch.Tensor
    cand: torch.Tensor
    inv_prop_actions: torch.Tensor
    n_labels: int
    labels: sp.csr_matrix | torch.Tensor | None = None
    bag: tuple | None = None      # the instances' sparse input (EmbeddingBag indices, offsets, weights)
    rho: torch.Tensor | None = None   # (B, K) float32 rho of the candidates (POTEC's cluster marginals)

    @property
    def size(self) -> int:
        return int(self.z.shape[0])


@dataclass
class HeadContext:
    """What a loss may know about its head (or group of heads): the grid point, the method's config, a
    seeded generator (CPU; for sampled negatives), the number of labels, the reward translation actually
    applied (`shift`, see `reward_shift`; a (G, 1, 1) tensor over a group's heads), for methods that
    need one the fitted reward model `reward(ids) -> (B, m)` predicted reward probabilities of the
    batch's instances (no gradient), and the step's uniform label draws `draws` (G, k) (`Method.draws`)."""
    p: int | None
    lam: float | None
    mc: MethodConfig
    gen: torch.Generator | None
    n_labels: int
    shift: float | torch.Tensor | None = None
    reward: Callable[[torch.Tensor], torch.Tensor] | None = None
    draws: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.shift is None:       # built by hand (tests, library use): the trainer's default translation
            self.shift = reward_shift(self.lam, "loss")


def reward_shift(lam: float | None, translation: str) -> float | None:
    """The constant subtracted from r_ij. translation='loss' (paper protocol): lambda translates the
    loss delta = 1 - r as in BanditNet (Joachims et al. 2018), whose grid {0.7, ..., 1.0} the paper
    adopts: w (delta - lam) = -w (r - (1 - lam)), so the reward is shifted by 1 - lam.
    translation='reward' (ablation): the paper's Eq. read literally, r - lam."""
    if lam is None:
        return None
    return 1.0 - lam if translation == "loss" else lam


def translated_loss(logpi: torch.Tensor, q: torch.Tensor, rewards: torch.Tensor, shift,
                    scale: torch.Tensor | None = None) -> torch.Tensor:
    """Minus the translated estimator (1/B) sum_i sum_j w_ij (r_ij - shift) per head, w_ij from
    `estimators.weights` (paper Eq. obj_not_corrected; `shift` from `reward_shift`, a float or a
    (G, 1, 1) vector).

    logpi (..., B, ell) (leading axes: heads); q, rewards (B, ell); -inf in logpi means the position is
    dropped (weight 0, gradient 0). scale (B, ell) multiplies the weights (wPOXM: 1/p_{y_ij};
    PM-BanditNet: 1{y_ij in Phi^p}). Returns (...,).
    """
    w = masked_weights(logpi, q)
    if scale is not None:
        w = w * scale
    return -translated_value_torch(w, rewards, shift)


def masked_weights(logpi: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Pruned weights pi/q (estimators.weights), exactly 0 with 0 gradient where log pi = -inf."""
    finite = torch.isfinite(logpi)
    w = importance_weights_torch(torch.where(finite, logpi, torch.zeros_like(logpi)), q, check=False)
    return torch.where(finite, w, torch.zeros_like(w))


def pl_logpi(scores: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """`pl_log_conditionals_torch` over leading head axes: scores (..., B, m), pos (B, ell) (the same
    positions for every head) -> (..., B, ell)."""
    B, m = scores.shape[-2:]
    flat = scores.reshape(-1, m)
    G = flat.shape[0] // max(B, 1)
    out = pl_log_conditionals_torch(flat, pos.repeat(G, 1) if G > 1 else pos, check=False)
    return out.view(*scores.shape[:-2], B, pos.shape[-1])


def pl_expect(scores: torch.Tensor, values: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """`pl_expectations_torch` over leading head axes: scores (..., B, m), values (B, m) shared by the
    heads, pos (B, ell) -> (..., B, ell)."""
    B, m = scores.shape[-2:]
    flat = scores.reshape(-1, m)
    G = flat.shape[0] // max(B, 1)
    vals = values.to(scores.dtype)
    out = pl_expectations_torch(flat, vals.repeat(G, 1) if G > 1 else vals, pos.repeat(G, 1) if G > 1 else pos,
                                check=False)
    return out.view(*scores.shape[:-2], B, pos.shape[-1])


class Method:
    """Base class: declare the class attributes, implement `loss` (if trains) and maybe `validate`."""
    name: ClassVar[str] = ""
    trains: ClassVar[bool] = True
    uses_p: ClassVar[bool] = False
    uses_lam: ClassVar[bool] = False
    # the config key of the head's size axis, HeadSpec.p (the rows' column p): 'p' = the action selector's
    # size Phi^p; a method whose size means something else names its own key (POTEC: 'k') and has no Phi^p
    size_key: ClassVar[str] = "p"
    train_support: ClassVar[str] = "none"
    test_policy: ClassVar[str] = "softmax"
    # this method's settings: MethodConfig (p, lam, lr, init) or a subclass adding its own options;
    # `options`/`validate` turn the config's entry (extras of the base) into it: a key it lacks is an error
    Options: ClassVar[type[MethodConfig]] = MethodConfig
    # which protocol rate applies (training.lr_is | training.lr_supervised) unless MethodConfig.lr is set
    lr_group: ClassVar[str] = "is"
    # the policy architecture; None = training.policy (the end-to-end skyline overrides it)
    policy: ClassVar[str | None] = None
    # True: the trainer fits the reward model (DM) first and passes it as ctx.reward
    needs_reward_model: ClassVar[bool] = False
    # True: `loss` may run inside a captured CUDA graph: no host synchronisation and no randomness of its
    # own (the engine supplies the draws as `ctx.draws`, the labels as a padded id table, the reward
    # model's rhat computed in the step). Declared by each class for itself, never inherited: a subclass
    # that changes the loss says again that it is safe (`__init_subclass__`).
    graph_safe: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "graph_safe" not in cls.__dict__:
            cls.graph_safe = False

    # ------------------------------------------------------------------ config
    def options(self, mc: MethodConfig | None = None) -> MethodConfig:
        """This method's `Options` instance from its config entry. The config keeps a method's own keys
        as extras of the base class (config.py does not import the registry); here they are checked
        against `Options`: a key it lacks is a PoxmInputError naming methods.<name>.<key> and its keys."""
        if mc is None:
            return self.Options()
        if not isinstance(mc, MethodConfig):
            raise TypeError(f"methods.{self.name}: expected a MethodConfig, got {type(mc).__name__}")
        extra = mc.model_extra or {}
        if type(mc) is self.Options and not extra:
            return mc
        fields = self.Options.model_fields
        data = {k: getattr(mc, k) for k in mc.model_fields_set if k in type(mc).model_fields} | extra
        for key, val in data.items():
            if key not in fields and not (key in PUBLISHED_METHOD_KEYS and val == PUBLISHED_METHOD_KEYS[key]
                                          and not isinstance(val, bool)):
                close = difflib.get_close_matches(str(key), fields, 1, 0.5)
                raise PoxmInputError(f"methods.{self.name}.{key}: method '{self.name}' has no option '{key}'"
                                     + (f" (did you mean '{close[0]}'?)" if close else "")
                                     + f" (its keys: {', '.join(fields)})")
        data = {k: v for k, v in data.items() if k in fields}
        _check(self.Options, data, ("methods", self.name), lambda loc: "config")   # booleans as numbers
        try:
            return self.Options.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(x) for x in ("methods", self.name, *err["loc"]))
            raise PoxmInputError(f"{key}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})") from None

    def validate(self, mc: MethodConfig | None) -> MethodConfig:
        """Reject settings this method would silently ignore, naming the config key; return its Options."""
        mc = self.options(mc)
        given = mc.model_fields_set
        if mc.p is not None and self.uses_p and self.size_key != "p":
            raise PoxmInputError(f"methods.{self.name}.p: method '{self.name}' has no action selector p; its grid is "
                                 f"'{self.size_key}': write methods.{self.name}.{self.size_key}: {list(mc.p)}")
        if mc.p is not None and not self.uses_p:
            raise PoxmInputError(f"methods.{self.name}.p: method '{self.name}' does not use p (action selector); remove it")
        if mc.lam is not None and not self.uses_lam:
            raise PoxmInputError(f"methods.{self.name}.lam: method '{self.name}' does not use lam; remove it")
        if not self.trains:
            for key in ("lr", "init"):
                if key in given:
                    raise PoxmInputError(f"methods.{self.name}.{key}: method '{self.name}' trains nothing; remove it")
        sizes = getattr(mc, self.size_key, None)
        if sizes is not None:
            if not sizes or any(isinstance(v, bool) or v < 1 for v in sizes) or len(set(sizes)) != len(sizes):
                raise PoxmInputError(f"methods.{self.name}.{self.size_key}: expected distinct positive ints, got {sizes}")
        if mc.lam is not None:
            if not mc.lam or any(not math.isfinite(v) for v in mc.lam) or len(set(mc.lam)) != len(mc.lam):
                raise PoxmInputError(f"methods.{self.name}.lam: expected distinct finite floats, got {mc.lam}")
        return mc

    def grid(self, mc: MethodConfig) -> list[tuple[int | None, float | None]]:
        """The (p, lam) grid points of this method (docs/methods.md defaults when a used grid is absent); p
        is the size axis, read from the key `size_key`."""
        mc = self.validate(mc)
        sizes = getattr(mc, self.size_key, None)
        ps = list(sizes if sizes is not None else DEFAULT_P) if self.uses_p else [None]
        lams = list(mc.lam if mc.lam is not None else DEFAULT_LAM) if self.uses_lam else [None]
        return [(p, lam) for p in ps for lam in lams]

    def test_support(self, mc: MethodConfig) -> str:
        """'rho' | 'phi' | 'candidates' | 'all' (the support of the test-time policy)."""
        return {"rho": "rho", "greedy": "candidates"}.get(self.test_policy, "all")

    def initial_bias(self, prepared, mc: MethodConfig | None = None) -> np.ndarray | None:
        """Output-layer bias of a fresh head (None: 0). A softmax policy is shift-invariant, so only the
        logistic (one-vs-all / reward) heads need one: their prior log-odds, from what they may read,
        so that the first steps are spent on the features, not on learning that labels are rare. `mc`:
        the head's options (a loss they change may see another prior: DM's `loss_on`)."""
        return None

    def needs_labels(self) -> bool:
        """True only for the supervised skyline (the one reader of training labels)."""
        return False

    def for_trial(self, prepared, head, heads, device, clusters) -> "Method":
        """The method as one trial's head uses it (`training.trial_setup.build_heads` calls it once the
        trial's heads exist): itself, or a copy holding what its loss and test-time policy read of the
        trial (POTEC: the label clusters, the reward model). `clusters(k)`: the (L,) int64 k-means
        clusters of the trial's logging model (prepare/clusters.py, fitted once and cached), given by the
        trainer so that a method never reaches the prepare cache. A bound copy may define
        `candidate_scores(params, z, cand) -> (c, K)`: its test-time scores over C(x)."""
        return self

    # ------------------------------------------------------------------ training
    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor | None:
        """(B, m) label ids whose logits the loss reads (the same for every head of a group), or None for
        every label (exactly when `scores_every_label`)."""
        raise NotImplementedError(f"method '{self.name}' trains nothing")

    def scores_every_label(self, mc: MethodConfig) -> bool:
        """True when the loss reads the logits of all L labels (`ids` returns None)."""
        return False

    def draws(self, mc: MethodConfig) -> int:
        """Labels drawn uniformly with replacement per step for each head, shared by the batch (0: none)."""
        return 0

    def group_key(self, mc: MethodConfig, p: int | None) -> tuple:
        """Heads with equal keys ask for the same ids and share one `loss` evaluation (they may differ in
        lam and learning rate). A subclass whose ids depend on more than p says so here."""
        return (type(self), p, self.scores_every_label(mc), self.draws(mc))

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        """(G,) losses of G heads from their logits (G, B, m [+ k]) or (G, B, L) (module doc)."""
        raise NotImplementedError(f"method '{self.name}' trains nothing")

    def head_loss(self, score: Scorer, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        """One head's loss (a scalar) through `score(ids) -> (B, m)`: `loss` with G = 1. The draws come
        from the head's generator, as many as `draws(mc)`, appended to the ids of every instance."""
        ids = self.ids(batch, ctx)
        k = self.draws(ctx.mc)
        if k:
            neg = torch.randint(ctx.n_labels, (k,), generator=ctx.gen).to(batch.actions.device)
            ids = torch.cat([ids, neg.expand(batch.size, k)], dim=1)
            ctx = replace(ctx, draws=neg.view(1, k))
        return self.loss(score(ids).unsqueeze(0), batch, ctx)[0]

    def __repr__(self) -> str:
        return f"<method {self.name}>"
