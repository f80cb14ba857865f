"""A head's test-time policy, evaluated on the validation log (estimates) and on test labels (metrics).

Policy kinds (from the method, docs/methods.md):
  rho         the logging policy: scores log rho on C(x)
  phi         softmax of s over Phi^p(x) = cand[:, :p]                       (POXM, wPOXM)
  candidates  softmax of s over C(x)                                         (POXM support="candidates")
  all         softmax of s over all L labels                                (BanditNet, PM-BanditNet)
  greedy      the deterministic ranking of C(x) by s (ties: smaller label id)   (DM, skyline)

Validation (pruned per-position weights, docs/estimators.md): for every logged (x_i, y_ij) the log conditional
log pi_A(y_ij | x_i, y_i,<j) for A = the policy's support S (IS, SNIS, DR) and for A = Phi^{p'}(x_i)
(sIS, p' = the head's p, or K = |C(x)| for a method without p: Phi^K = C(x)). For the greedy policy,
pi_A(. | x, y_<j) puts mass 1 on the best-scored label of A not in the logged prefix, so w_ij is
1/q_ij or 0 (the temperature -> 0 limit of the softmax policy). DR (beyond the paper) adds the reward
model's expectation under the same conditional (`pl_expectations`; the greedy pick's rhat).

Test: a (support (n, m), probs (n, m)) table for `metrics.stochastic_metrics` and a ranking for
`metrics.greedy_metrics`. An "all" policy is represented by its top `max_support` labels,
renormalised; the mass left out is returned (the trainer writes it as a diagnostic row).

Everything is chunked over instances: at most `_CHUNK_ELEMS` logits (or gathered head rows) at once
(`_CHUNK_ELEMS_GPU` on a GPU: larger chunks, fewer launches and host round trips; the values do not
depend on the chunk). Features Z may be NumPy arrays or tensors (already on the device: the trainer's
`EvalInputs`), so that nothing a trial evaluates goes through the host.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from poxm_core.estimators import (phi, pl_conditional_table_torch, pl_expectations_torch, pl_log_conditionals_torch,
                                  selector_pos)
from poxm_core.policy.heads import HeadParams

__all__ = ["PolicyView", "val_arrays", "test_table"]

_CHUNK_ELEMS = 1 << 24
_CHUNK_ELEMS_GPU = 1 << 26


@dataclass(frozen=True)
class PolicyView:
    """A head's test-time policy: kind (see module doc), p for kind 'phi', params (None for 'rho');
    `scores(params, z, cand) -> (c, K)` float64, when set, gives the policy's scores over C(x) instead of
    the output layer's logits of the candidates (POTEC's two stages; z as the trial's evaluation gives it)."""
    kind: str
    p: int | None = None
    params: HeadParams | None = None
    scores: Callable | None = None


def _chunks(n: int, per_row: int, device: torch.device | None = None):
    budget = _CHUNK_ELEMS_GPU if device is not None and torch.device(device).type == "cuda" else _CHUNK_ELEMS
    c = max(1, budget // max(per_row, 1))
    for a in range(0, n, c):
        yield a, min(n, a + c)


def _take(Z, idx: np.ndarray, device: torch.device) -> torch.Tensor:
    """Rows `idx` of Z (NumPy array or tensor) as a tensor on `device`."""
    if isinstance(Z, torch.Tensor):
        return Z.index_select(0, torch.as_tensor(idx, device=Z.device)).to(device)
    return torch.as_tensor(Z[idx], device=device)


@torch.no_grad()
def _gather_logits(params: HeadParams, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(c, m) logits s(x_i, ids[i, c]) in float64."""
    W = params.W.index_select(0, ids.reshape(-1)).view(*ids.shape, -1)
    return (torch.bmm(W, z.unsqueeze(2)).squeeze(2) + params.b[ids]).double()


@torch.no_grad()
def _full_logits32(params: HeadParams, z: torch.Tensor) -> torch.Tensor:
    """(c, L) logits in the parameters' dtype (float32), worked on in place by the callers (the float64
    sums over a row still make a transient float64 copy: torch upcasts before reducing)."""
    return torch.addmm(params.b, z.to(params.W.dtype), params.W.T)


@torch.no_grad()
def _lumped(S: torch.Tensor, act: torch.Tensor, values: torch.Tensor | None):
    """A softmax over all L labels seen from a logged slate, as (c, 1 + ell) scores in float64 whose
    column 0 stands for every label the slate does not hold (its logit: the log of their summed exp)
    and columns 1.. for the logged labels; pos (c, ell) = 1..ell (-1 where the slate has no label) and,
    with `values` (c, L) (rhat), their (c, 1 + ell) twin: column 0 the softmax-weighted mean over the
    same unlogged labels. A Plackett-Luce conditional given a prefix of logged labels only sums exp(s)
    over what is left, so both are the same on these columns as on the full row (log pi and the
    expectations are unchanged up to rounding) and cost a few passes over the float32 row instead of a
    dozen over a float64 copy (benchmarks/bench_all_label_eval.py; docs/performance.md). S and values
    are overwritten."""
    c, ell = act.shape
    valid = act >= 0
    safe = torch.where(valid, act, torch.zeros_like(act))
    s_j = S.gather(1, safe).double()
    rows = torch.arange(c, device=S.device).unsqueeze(1).expand(c, ell)
    S[rows[valid], act[valid]] = float("-inf")               # the logged labels leave the lumped column
    # shifted by the largest *unlogged* logit, not the row's: its own term is exp(0) = 1, so what float32's
    # exp flushes to 0 (below e^-103) is negligible against the column it is part of, however peaked the row
    mx = S.amax(dim=1, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))   # every label logged: the column is empty
    E = S.sub_(mx).exp_()                                     # in [0, 1]: float32 keeps 24 bits of each term
    rest = E.sum(dim=1, dtype=torch.float64)
    neg_inf = torch.full((), float("-inf"), dtype=torch.float64, device=S.device)
    zero = torch.zeros((), dtype=torch.float64, device=S.device)
    lumped = torch.where(rest > 0, rest.log() + mx.squeeze(1).double(), neg_inf)
    scores = torch.cat([lumped.unsqueeze(1), torch.where(valid, s_j, neg_inf)], dim=1)
    pos = torch.where(valid, torch.arange(1, ell + 1, device=S.device).expand(c, ell), torch.full_like(act, -1))
    if values is None:
        return scores, pos, None
    v_j = torch.where(valid, values.gather(1, safe).double(), zero)
    v_rest = values.mul_(E).sum(dim=1, dtype=torch.float64)   # sum over unlogged a of e_a rhat_a (values overwritten)
    vals = torch.cat([torch.where(rest > 0, v_rest / rest.clamp(min=1e-300), zero).unsqueeze(1), v_j], dim=1)
    return scores, pos, vals


def _table_scores(view: PolicyView, z, cand, rho, m: int) -> torch.Tensor:
    """(c, m) scores of the first m candidate columns (log rho for the logging policy)."""
    if view.kind == "rho":
        return torch.log(rho[:, :m])
    if view.scores is not None:
        return view.scores(view.params, z, cand)[:, :m]
    return _gather_logits(view.params, z, phi(cand, m))


def _greedy_logpi(scores: torch.Tensor, cand: torch.Tensor, cand_pos: torch.Tensor, m: int):
    """(log pi (c, ell) in {0, -inf}, pick columns (c, ell)) of the greedy policy on cand[:, :m]."""
    s = scores.cpu().numpy()
    cd = cand.cpu().numpy()
    order = np.lexsort((cd, -s), axis=-1)                 # greedy order: score desc, label id asc
    grank = np.empty_like(order)
    np.put_along_axis(grank, order, np.arange(s.shape[1])[None, :].repeat(s.shape[0], 0), axis=1)
    grank = grank.astype(np.float64)
    grank[:, m:] = np.inf
    cp = cand_pos.cpu().numpy()
    c, ell = cp.shape
    picks = np.empty((c, ell), dtype=np.int64)
    rows = np.arange(c)
    for j in range(ell):
        picks[:, j] = np.argmin(grank, axis=1)
        grank[rows, cp[:, j]] = np.inf                    # the logged pick joins the prefix
    logpi = np.where(picks == cp, 0.0, -np.inf)
    return torch.as_tensor(logpi), torch.as_tensor(picks)


def val_arrays(view: PolicyView, Z: np.ndarray | torch.Tensor, cand: np.ndarray, rho: np.ndarray, log, p_sis: int,
               reward: tuple[HeadParams, np.ndarray | torch.Tensor] | None, device: torch.device,
               tables: bool = False) -> dict[str, np.ndarray]:
    """(n, ell) float64 arrays on the logged slates of `log` (rows of Z/cand/rho by log.instance):
    logpi_is, logpi_sis, and with a reward model (its output layer, its features indexed like Z) also
    dm_term (E_{pi_S} rhat at each position) and rhat_logged = rhat(x_i, y_ij), rhat = sigmoid(logits).
    `tables`: also pi_selector (n, ell, p_sis), the policy's whole conditional on Phi^p at each position
    (`pl_conditional_table_torch`; the greedy policy's: 1 on its pick), for an estimator that needs it,
    and with a reward model rhat_candidates (n, K), rhat on the candidates (OffCEM)."""
    K = cand.shape[1]
    out = {k: [] for k in ("logpi_is", "logpi_sis", "dm_term", "rhat_logged", "pi_selector", "rhat_candidates")}
    # rows per chunk: a row holds L logits (every label) or K candidates' features
    per_row = (view.params.W.shape[0] if view.params is not None else 0) if view.kind == "all" else K * Z.shape[1]
    reward_params, Zr = reward if reward is not None else (None, None)
    for a, b in _chunks(log.n, per_row, device):
        inst = log.instance[a:b]
        z = _take(Z, inst, device)
        cd = torch.as_tensor(cand[inst], device=device)
        rh = torch.as_tensor(rho[inst], device=device, dtype=torch.float64)
        act = torch.as_tensor(log.actions[a:b], device=device)
        cp = torch.as_tensor(log.cand_pos[a:b], device=device)
        zr = _take(Zr, inst, device) if reward is not None else None
        if view.kind == "all":
            S32 = _full_logits32(view.params, z)
            S_sel = S32.gather(1, phi(cd, p_sis)).double()
            lp_sis = pl_log_conditionals_torch(S_sel, selector_pos(cp, p_sis), check=False)
            rw = _full_logits32(reward_params, zr).sigmoid_() if reward is not None else None
            S, pos, vals = _lumped(S32, act, rw)
            del S32, rw
            lp_is = pl_log_conditionals_torch(S, pos, check=False)
        elif view.kind == "greedy":
            S = _table_scores(view, z, cd, rh, K)
            lp_is, picks_is = _greedy_logpi(S, cd, cp, K)
            lp_sis, picks_sis = _greedy_logpi(S, cd, cp, p_sis)
        else:
            m = view.p if view.kind == "phi" else K
            S = _table_scores(view, z, cd, rh, K)
            lp_is = pl_log_conditionals_torch(S[:, :m], selector_pos(cp, m), check=False)
            lp_sis = pl_log_conditionals_torch(S[:, :p_sis], selector_pos(cp, p_sis), check=False)
            S_sel = S[:, :p_sis]
        if tables:
            table = _selector_table(view.kind, S_sel if view.kind != "greedy" else None,
                                    picks_sis if view.kind == "greedy" else None, cp, p_sis)
            out["pi_selector"].append(table.cpu().numpy())
        out["logpi_is"].append(lp_is.cpu().numpy())
        out["logpi_sis"].append(lp_sis.cpu().numpy())
        if reward is not None:
            rhat_log = torch.sigmoid(_gather_logits(reward_params, zr, act))
            if view.kind == "all":
                dm = pl_expectations_torch(S, vals, pos, check=False)
            elif view.kind == "greedy":
                dm = torch.sigmoid(_gather_logits(reward_params, zr, cd)).cpu().gather(1, picks_is)
            else:
                dm = pl_expectations_torch(S[:, :m], torch.sigmoid(_gather_logits(reward_params, zr, phi(cd, m))),
                                           selector_pos(cp, m), check=False)
            out["dm_term"].append(dm.cpu().numpy())
            out["rhat_logged"].append(rhat_log.cpu().numpy())
            if tables:     # rhat on the K candidates (OffCEM's expectation over pi_selector's support)
                out["rhat_candidates"].append(torch.sigmoid(_gather_logits(reward_params, zr, cd)).cpu().numpy())
    return {k: np.concatenate(v, axis=0).astype(np.float64) for k, v in out.items() if v}


def _selector_table(kind: str, S_sel: torch.Tensor | None, picks: torch.Tensor | None, cp: torch.Tensor,
                    p_sis: int) -> torch.Tensor:
    """(n, ell, p_sis) the policy's conditional on Phi^p at each logged position: Plackett-Luce over the
    selector's scores, or for a greedy policy 1 on its pick."""
    if kind != "greedy":
        return pl_conditional_table_torch(S_sel, selector_pos(cp, p_sis))
    inside = (cp.cpu() < p_sis).long()          # a pick is real while Phi^p has a column the prefix has not taken
    left = inside.cumsum(1) - inside < p_sis
    return torch.nn.functional.one_hot(picks.clamp(max=p_sis - 1), p_sis).double() * left.unsqueeze(2)


def _ranking_of_sorted(ids: np.ndarray, s: np.ndarray, kmax: int) -> np.ndarray:
    """`greedy_from_policy(ids, s, kmax)` for rows already sorted by score, descending (topk's output):
    only the labels scored at least the kmax-th can rank, so the tie-break by label id runs on that
    prefix (usually kmax columns) instead of sorting all max_support columns of every row again (most of
    an all-label head's test table at Amazon-670K's shape; benchmarks/bench_all_label_eval.py,
    docs/performance.md)."""
    from poxm_core.metrics.ranking import greedy_from_policy

    k = min(kmax, s.shape[1])
    w = int((s >= s[:, k - 1:k]).sum(axis=1).max()) if s.shape[0] else k
    return greedy_from_policy(ids[:, :w], s[:, :w], kmax)


def _ranking_probs_on_device(s: torch.Tensor, ids: np.ndarray, kmax: int, probs: bool):
    """(greedy_from_policy(ids, s, kmax), softmax(s) or None) with the sort and the softmax where s is
    (a GPU trial's table: there the host would otherwise lexsort all m columns of every row) and on the
    host only the tie-break by label id over the sorted prefix (`_ranking_of_sorted`)."""
    m = s.shape[1]
    top, pos = torch.sort(s, dim=1, descending=True)
    w = min(m, kmax)
    w = int((top >= top[:, w - 1:w]).sum(dim=1).max()) if top.shape[0] else w
    ids_sorted = torch.as_tensor(ids, device=s.device).gather(1, pos[:, :w])
    ranking = _ranking_of_sorted(ids_sorted.cpu().numpy(), top[:, :w].cpu().numpy(), kmax)
    return ranking, (torch.softmax(s, dim=1).cpu().numpy() if probs else None)


def test_table(view: PolicyView, Z: np.ndarray | torch.Tensor, cand: np.ndarray, rho: np.ndarray, kmax: int,
               max_support: int, device: torch.device):
    """(support (n, m) int64 | None, probs (n, m) float64 | None, ranking (n, kmax) int64, truncated mass).

    support/probs are None for the greedy kind (a deterministic policy). The truncated mass is the
    mean over instances of the probability outside the returned support (0 except for kind 'all').
    """
    from poxm_core.metrics.ranking import greedy_from_policy

    n, K = cand.shape
    if view.kind == "rho":
        return cand.astype(np.int64), rho.astype(np.float64), cand[:, :kmax].astype(np.int64), 0.0
    sup, prob, rank = [], [], []
    lost = 0.0
    L, d = view.params.W.shape
    per_row = L if view.kind == "all" else K * d
    for a, b in _chunks(n, per_row, device):
        z = _take(Z, np.arange(a, b), device)
        cd = torch.as_tensor(cand[a:b], device=device)
        if view.kind == "all":
            S = _full_logits32(view.params, z)
            m = min(max_support, L)
            top, ids = torch.topk(S, m, dim=1)                # float32 logits: the same order as their float64 copy
            top = top.double()
            mx = S.amax(dim=1, keepdim=True)
            lse = mx.double() + torch.log(S.sub_(mx).exp_().sum(dim=1, keepdim=True, dtype=torch.float64))
            kept = torch.exp(top - lse).sum(dim=1)
            lost += float((1.0 - kept).clamp(min=0).sum())
            ids_np, s_np = ids.cpu().numpy(), top.cpu().numpy()
            rank.append(_ranking_of_sorted(ids_np, s_np, kmax))
            sup.append(ids_np)
            prob.append(torch.softmax(top, dim=1).cpu().numpy())
            continue
        m = view.p if view.kind == "phi" else K
        ids_np = cand[a:b, :m].astype(np.int64)
        s = _table_scores(view, z, cd, None, m)
        if s.is_cuda:
            r, pr = _ranking_probs_on_device(s, ids_np, kmax, view.kind != "greedy")
            rank.append(r)
            if pr is not None:
                sup.append(ids_np)
                prob.append(pr)
            continue
        s_np = s.cpu().numpy()
        rank.append(greedy_from_policy(ids_np, s_np, kmax))
        if view.kind != "greedy":
            e = np.exp(s_np - s_np.max(axis=1, keepdims=True))
            sup.append(ids_np)
            prob.append(e / e.sum(axis=1, keepdims=True))
    ranking = np.concatenate(rank, axis=0)
    if view.kind == "greedy":
        return None, None, ranking, 0.0
    return np.concatenate(sup, axis=0), np.concatenate(prob, axis=0), ranking, lost / max(n, 1)
