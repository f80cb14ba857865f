"""Plackett-Luce conditionals of a softmax policy restricted to a support set A (docs/estimators.md).

For logits s(x, y) on A and a logged prefix y_<j (paper Eq. no-replacement):

    pi_A(y_j | x, y_<j) = exp(s_j) / ( sum_{y in A} exp(s_y) - sum_{k<j, y_k in A} exp(s_{y_k}) )
                          if y_j in A, else 0.

Earlier picks outside A are NOT subtracted (they carry no mass of pi_A).

Stability: the denominator is the mass of A that is still available at position j. Rather than
computing 1 - c_j (c_j = removed fraction), which cancels catastrophically when the policy is peaked
on earlier picks, the remaining mass is assembled exactly from non-negative parts:

    base       = logsumexp of s over A minus every logged column in A      (one masked pass, (n, m))
    remain_j   = logaddexp(base, s_{y_k} for k >= j with y_k in A)         (tiny (n, ell, ell+1))
    log pi_j   = s_j - remain_j   (<= 0 by construction, since remain_j includes s_j)

This equals the textbook  s_j - lse - log1p(-c_j)  in exact arithmetic, never overflows (everything
is max-shifted) and needs one extra (n, m) copy, so it also serves the full softmax over [L].
Logged picks are distinct within a slate (drawn without replacement); repeated non-negative `pos`
in one row is rejected because the exact assembly above assumes it.
"""
from __future__ import annotations

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError

__all__ = ["pl_log_conditionals", "pl_log_conditionals_torch", "pl_log_conditionals_full_torch",
           "pl_expectations", "pl_expectations_torch", "pl_conditional_table_torch"]


# ----------------------------------------------------------------------------------- validation
def _check_shapes(scores_shape, scores_ndim, pos_shape, pos_ndim, pos_is_int, name="scores") -> None:
    if scores_ndim != 2:
        raise PoxmInputError(f"{name}: expected a 2-D (n, m) array of logits, got shape {tuple(scores_shape)}")
    if pos_ndim != 2:
        raise PoxmInputError(f"pos: expected a 2-D (n, ell) integer array, got shape {tuple(pos_shape)}")
    if not pos_is_int:
        raise PoxmInputError("pos: expected an integer array (column index into the support, -1 = outside)")
    if pos_shape[0] != scores_shape[0]:
        raise PoxmInputError(f"pos: expected {scores_shape[0]} rows to match {name}, got {pos_shape[0]}")


def _check_pos_values_np(pos: np.ndarray, m: int) -> None:
    if pos.size == 0:
        return
    lo, hi = int(pos.min()), int(pos.max())
    if lo < -1 or hi >= m:
        raise PoxmInputError(f"pos: expected values in [-1, {m - 1}] (support has m={m} columns), got range [{lo}, {hi}]")
    if pos.shape[1] > 1:
        s = np.sort(pos, axis=1)
        dup = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
        if dup.any():
            row = int(np.argmax(dup.any(axis=1)))
            raise PoxmInputError(f"pos: row {row} repeats a support column; slates are drawn without replacement")


def _check_scores_np(scores: np.ndarray, name: str = "scores") -> None:
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise PoxmInputError(f"{name}: expected finite logits (-inf allowed for padding), got NaN or +inf")


# ------------------------------------------------------------------------------------------ NumPy
def _lse_np(a: np.ndarray, axis: int) -> np.ndarray:
    """logsumexp that returns -inf (not NaN) for an all -inf slice."""
    mx = np.max(a, axis=axis, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - mx), axis=axis, keepdims=True)) + mx
    return np.squeeze(out, axis=axis)


def _row_shift_np(scores: np.ndarray) -> np.ndarray:
    mx = np.max(scores, axis=1, keepdims=True) if scores.shape[1] else np.zeros((scores.shape[0], 1))
    return np.where(np.isfinite(mx), mx, 0.0)


def _remaining_np(scores: np.ndarray, pos: np.ndarray, extra: np.ndarray | None = None):
    """(s_j, log remaining mass at j, valid) ; shared by the conditionals and the expectations."""
    n, m = scores.shape
    ell = pos.shape[1]
    scores = scores - _row_shift_np(scores)   # log pi depends on differences only; keeps magnitudes small
    valid = pos >= 0
    rows = np.arange(n)[:, None]
    s_j = np.where(valid, scores[rows, np.where(valid, pos, 0)], -np.inf)
    logged = np.zeros((n, m + 1), dtype=bool)
    logged[rows, np.where(valid, pos, m)] = True
    masked = np.where(logged[:, :m], -np.inf, scores)
    base = _lse_np(masked, axis=1)                                   # (n,)
    # terms[:, j, :] = [base, s_j, s_{j+1}, ..., s_ell] with k < j masked out
    upper = np.triu(np.ones((ell, ell), dtype=bool))                 # upper[j, k] = k >= j
    terms = np.where(upper[None], s_j[:, None, :], -np.inf)          # (n, ell, ell)
    terms = np.concatenate([np.broadcast_to(base[:, None, None], (n, ell, 1)), terms], axis=2)
    remain = _lse_np(terms, axis=2)                                  # (n, ell)
    return s_j, remain, valid, masked, base, terms


def pl_log_conditionals(scores, pos) -> np.ndarray:
    """log pi_A(y_j | x, y_<j) for every logged position (docs/estimators.md, paper Eq. no-replacement).

    scores: (n, m) float logits s(x, y) of the support A (padding columns may be -inf).
    pos:    (n, ell) int column of y_j in A, or -1 if y_j not in A. Non-negative entries of a row
            must be distinct.
    Returns (n, ell) float64: s_j - log(sum_{y in A} e^{s_y} - sum_{k<j, pos_k>=0} e^{s_{y_k}}),
    -inf where pos == -1 (or where s_j = -inf).
    """
    scores = np.asarray(scores)
    pos = np.asarray(pos)
    _check_shapes(scores.shape, scores.ndim, pos.shape, pos.ndim, np.issubdtype(pos.dtype, np.integer))
    if not np.issubdtype(scores.dtype, np.floating):
        raise PoxmInputError(f"scores: expected a float array of logits, got dtype {scores.dtype}")
    scores = scores.astype(np.float64, copy=False)
    _check_scores_np(scores)
    _check_pos_values_np(pos, scores.shape[1])
    if pos.shape[1] == 0:
        return np.zeros(pos.shape, dtype=np.float64)
    s_j, remain, valid, *_ = _remaining_np(scores, pos)
    ok = valid & np.isfinite(s_j)
    with np.errstate(invalid="ignore"):
        out = np.where(ok, np.minimum(s_j - remain, 0.0), -np.inf)
    return out


def pl_expectations(scores, values, pos) -> np.ndarray:
    """E_{y ~ pi_A(.|x, y_<j)} values(x, y) for every position j (the DM term of DR, docs/estimators.md).

    scores, values: (n, m) logits and a per-label quantity (e.g. a reward model rhat) on A.
    pos: (n, ell) as in `pl_log_conditionals`.
    Returns (n, ell) float64:
      ( sum_{y in A} e^{s_y} v_y - sum_{k<j, y_k in A} e^{s_{y_k}} v_{y_k} ) / remaining mass at j.
    0 where A has no mass left (never happens when |A| > ell).
    """
    scores = np.asarray(scores)
    values = np.asarray(values)
    pos = np.asarray(pos)
    _check_shapes(scores.shape, scores.ndim, pos.shape, pos.ndim, np.issubdtype(pos.dtype, np.integer))
    if values.shape != scores.shape:
        raise PoxmInputError(f"values: expected shape {scores.shape} like scores, got {values.shape}")
    scores = scores.astype(np.float64, copy=False)
    values = values.astype(np.float64, copy=False)
    _check_scores_np(scores)
    if not np.all(np.isfinite(values)):
        raise PoxmInputError("values: expected finite values")
    _check_pos_values_np(pos, scores.shape[1])
    n, ell = pos.shape
    if ell == 0:
        return np.zeros(pos.shape, dtype=np.float64)
    s_j, remain, valid, masked, base, terms = _remaining_np(scores, pos)
    rows = np.arange(n)[:, None]
    v_j = np.where(valid, values[rows, np.where(valid, pos, 0)], 0.0)
    with np.errstate(invalid="ignore"):
        base_w = np.where(np.isfinite(base)[:, None], np.exp(base[:, None] - remain), 0.0)   # (n, ell)
        p_base = np.where(np.isfinite(masked), np.exp(masked - np.where(np.isfinite(base), base, 0.0)[:, None]), 0.0)
        v_base = np.sum(p_base * values, axis=1)                                          # E over unlogged part
        w_k = np.where(np.isfinite(terms[:, :, 1:]), np.exp(terms[:, :, 1:] - remain[:, :, None]), 0.0)
    num = base_w * v_base[:, None] + np.sum(w_k * v_j[:, None, :], axis=2)
    return np.where(np.isfinite(remain), num, 0.0)


# ------------------------------------------------------------------------------------------ Torch
def _lse_torch(a: torch.Tensor, dim: int) -> torch.Tensor:
    """logsumexp with -inf (and zero, not NaN, gradients) for an all -inf slice."""
    dead = torch.isneginf(a).all(dim=dim, keepdim=True)
    safe = torch.where(dead, torch.zeros((), dtype=a.dtype, device=a.device), a)
    out = torch.logsumexp(safe, dim=dim, keepdim=True)
    out = torch.where(dead, torch.full((), float("-inf"), dtype=a.dtype, device=a.device), out)
    return out.squeeze(dim)


def _remaining_torch(scores: torch.Tensor, pos: torch.Tensor):
    n, m = scores.shape
    ell = pos.shape[1]
    # log pi depends on differences only: shifting by the (detached) row max keeps float32 exact-ish
    # (adding back a max of 1e4 inside logsumexp would cost ~1e-3 absolute in float32)
    mx = scores.detach().amax(dim=1, keepdim=True) if m else scores.new_zeros((n, 1))
    scores = scores - torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    neg_inf = torch.full((), float("-inf"), dtype=scores.dtype, device=scores.device)
    valid = pos >= 0
    safe_pos = torch.where(valid, pos, torch.zeros_like(pos))
    s_j = torch.where(valid, scores.gather(1, safe_pos), neg_inf)
    logged = torch.zeros((n, m + 1), dtype=torch.bool, device=scores.device)
    logged.scatter_(1, torch.where(valid, pos, torch.full_like(pos, m)), True)
    masked = scores.masked_fill(logged[:, :m], float("-inf"))
    base = _lse_torch(masked, dim=1)
    upper = torch.ones((ell, ell), dtype=torch.bool, device=scores.device).triu()
    terms = torch.where(upper.unsqueeze(0), s_j.unsqueeze(1).expand(n, ell, ell), neg_inf)
    terms = torch.cat([base.view(n, 1, 1).expand(n, ell, 1), terms], dim=2)
    remain = _lse_torch(terms, dim=2)
    return s_j, remain, valid, masked, base, terms


def pl_log_conditionals_torch(scores: torch.Tensor, pos: torch.Tensor, check: bool = True) -> torch.Tensor:
    """Torch twin of `pl_log_conditionals`, differentiable w.r.t. `scores` (same dtype/device).

    Gradients are finite everywhere (zero through -inf entries). `check=False` skips the value
    checks on `pos`/`scores` (they synchronise with the device) inside a hot training loop.
    """
    if not isinstance(scores, torch.Tensor) or not isinstance(pos, torch.Tensor):
        raise PoxmInputError(f"scores, pos: expected torch tensors, got {type(scores).__name__}, {type(pos).__name__}")
    _check_shapes(scores.shape, scores.dim(), pos.shape, pos.dim(),
                  not torch.is_floating_point(pos) and pos.dtype != torch.bool)
    if not torch.is_floating_point(scores):
        raise PoxmInputError(f"scores: expected a float tensor of logits, got dtype {scores.dtype}")
    pos = pos.to(device=scores.device, dtype=torch.int64)
    if check:
        _check_pos_values_np(pos.detach().cpu().numpy(), scores.shape[1])
        if torch.isnan(scores).any() or torch.isposinf(scores).any():
            raise PoxmInputError("scores: expected finite logits (-inf allowed for padding), got NaN or +inf")
    if pos.shape[1] == 0:
        return scores.new_zeros(pos.shape)
    s_j, remain, valid, *_ = _remaining_torch(scores, pos)
    ok = valid & torch.isfinite(s_j)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    diff = torch.where(ok, s_j, zero) - torch.where(ok, remain, zero)
    return torch.where(ok, diff.clamp(max=0.0), torch.full((), float("-inf"), dtype=scores.dtype, device=scores.device))


def pl_log_conditionals_full_torch(logits: torch.Tensor, actions: torch.Tensor, check: bool = True) -> torch.Tensor:
    """Full-label support A = [L]: logits (B, L), actions (B, ell) label ids -> (B, ell) log pi.

    Same as `pl_log_conditionals_torch(logits, actions)` (column index == label id).
    """
    return pl_log_conditionals_torch(logits, actions, check=check)


def pl_expectations_torch(scores: torch.Tensor, values: torch.Tensor, pos: torch.Tensor,
                          check: bool = True) -> torch.Tensor:
    """Torch twin of `pl_expectations` (differentiable w.r.t. scores and values)."""
    if values.shape != scores.shape:
        raise PoxmInputError(f"values: expected shape {tuple(scores.shape)} like scores, got {tuple(values.shape)}")
    if check:
        _check_shapes(scores.shape, scores.dim(), pos.shape, pos.dim(),
                      not torch.is_floating_point(pos) and pos.dtype != torch.bool)
        _check_pos_values_np(pos.detach().cpu().numpy(), scores.shape[1])
    pos = pos.to(device=scores.device, dtype=torch.int64)
    n, ell = pos.shape
    if ell == 0:
        return scores.new_zeros(pos.shape)
    s_j, remain, valid, masked, base, terms = _remaining_torch(scores, pos)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    safe_pos = torch.where(valid, pos, torch.zeros_like(pos))
    v_j = torch.where(valid, values.gather(1, safe_pos), zero)
    fin_base = torch.isfinite(base)
    base0 = torch.where(fin_base, base, zero)
    fin_rem = torch.isfinite(remain)
    rem0 = torch.where(fin_rem, remain, zero)
    base_w = torch.where(fin_base.unsqueeze(1) & fin_rem, torch.exp(torch.where(fin_base.unsqueeze(1), base0.unsqueeze(1), rem0) - rem0), zero)
    fin_m = torch.isfinite(masked)
    # masked-out entries take exp(0) inside the exp, never exp(-base0): with a peaked policy base0 can be
    # below -88, float32's exp(+88) overflows, and autograd's 0 * inf would put NaN in the gradient
    p_base = torch.where(fin_m, torch.exp(torch.where(fin_m, masked, base0.unsqueeze(1)) - base0.unsqueeze(1)), zero)
    v_base = (p_base * values).sum(dim=1)
    t = terms[:, :, 1:]
    fin_t = torch.isfinite(t) & fin_rem.unsqueeze(2)
    w_k = torch.where(fin_t, torch.exp(torch.where(fin_t, t, rem0.unsqueeze(2)) - rem0.unsqueeze(2)), zero)   # same
    num = base_w * v_base.unsqueeze(1) + (w_k * v_j.unsqueeze(1)).sum(dim=2)
    return torch.where(fin_rem, num, zero)


def pl_conditional_table_torch(scores: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(n, ell, m) the whole conditional pi_A(. | x_i, y_i,<j) on the m columns of A at every position j:
    table[i, j, k] = exp(s_ik) / sum of exp(s) over A minus the logged columns pos[i, :j]; 0 on those
    columns and on -inf scores, a row of 0 where nothing of A is left. So table[i, j, pos_ij] =
    exp(log pi_ij) of `pl_log_conditionals_torch`. Not differentiated (an estimator's input); memory
    n * ell * m: only what an estimator declares it needs (`BaseEstimator.needs`) is built."""
    _check_shapes(scores.shape, scores.dim(), pos.shape, pos.dim(),
                  not torch.is_floating_point(pos) and pos.dtype != torch.bool)
    pos = pos.to(device=scores.device, dtype=torch.int64)
    n, m = scores.shape
    ell = pos.shape[1]
    taken = torch.zeros((n, ell, m), dtype=torch.bool, device=scores.device)
    seen = torch.zeros((n, m), dtype=torch.bool, device=scores.device)
    rows = torch.arange(n, device=scores.device)
    for j in range(ell):
        taken[:, j] = seen
        ok = pos[:, j] >= 0
        seen = seen.clone()
        seen[rows[ok], pos[ok, j]] = True
    s = scores.detach().unsqueeze(1).expand(n, ell, m).masked_fill(taken, float("-inf"))
    mx = s.amax(dim=2, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(s - mx)
    tot = e.sum(dim=2, keepdim=True)
    return torch.where(tot > 0, e / tot.clamp(min=torch.finfo(e.dtype).tiny), torch.zeros_like(e))
