"""POTEC for slates (Saito, Yao, Joachims, ICLR 2025; docs/methods.md): a policy over label clusters,
learned from cluster-level importance weights, whose slots a reward model fills.

Clusters: k-means of the logging model's label rows (`prepare.clusters`, k from the grid `k`, carried as
the head's size HeadSpec.p; the trial's seed), which the trainer hands to `for_trial`. First stage pi1 over the clusters present in C(x), drawn in rounds: at each position the
clusters with the fewest labels already in the slate (and a label left) compete by softmax of their
logits s1(x, c); a cluster holds one output row of the head (row c, c < k). Its loss, per position of
the logged slate (its prefix conditioning both policies, the prefix pruned as POXM's weights are):

    loss = -(1/B) sum_i sum_j [pi1(c_ij | x_i, y_i,<j) / rho(c_ij | x_i, y_i,<j)] (r_ij - lam)

c_ij = c(y_ij); rho(c | x, y_<j) = sum_{y in c cap C(x), y not in y_<j} rho(y | x) / (1 - sum_{k<j} rho(y_k | x)).
Second stage: the drawn cluster's slot takes its best label by the reward model rhat (the DM head,
fitted first as for DR-POXM) not yet in the slate. Test time the two stages are one Plackett-Luce
policy over C(x) with scores s1(x, c(y)) - ROUND_GAP * t(x, y), t = y's rank by rhat inside its
cluster's candidates: the rounds above, exactly to float64 precision for the first two rounds.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from pydantic import Field

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import MethodConfig
from poxm_core.methods.base import Batch, HeadContext, Method, translated_loss
from poxm_core.methods.dm import REWARD_METHOD

__all__ = ["POTEC", "POTECOptions", "ROUND_GAP", "cluster_log_conditionals", "cluster_rho_conditionals", "two_stage_scores"]

# exp(-600) ~ 1e-261 is still a float64 (a second-round label's probability stays exact); two gaps underflow
ROUND_GAP = 600.0


def _structure(cc: torch.Tensor, cand_pos: torch.Tensor):
    """From the candidates' clusters cc (B, K) and the logged columns cand_pos (B, ell): same (B, K, K)
    float (1 where two columns share a cluster) and prefix (B, ell, K) float (1 where column k is one of
    the logged labels before position j)."""
    B, K = cc.shape
    same = (cc.unsqueeze(2) == cc.unsqueeze(1)).to(torch.float32)
    onehot = torch.zeros(B, cand_pos.shape[1], K + 1, dtype=torch.float32, device=cc.device)
    onehot.scatter_(2, torch.where(cand_pos >= 0, cand_pos, torch.full_like(cand_pos, K)).unsqueeze(2), 1.0)
    prefix = (onehot.cumsum(dim=1) - onehot)[..., :K]
    return same, prefix


def cluster_log_conditionals(logits: torch.Tensor, cc: torch.Tensor, cand_pos: torch.Tensor) -> torch.Tensor:
    """(..., B, ell) log pi1(c(y_ij) | x_i, y_i,<j) of the rounds policy over clusters (module doc).

    logits (..., B, K): the cluster logit s1(x, c(cand_k)) at each candidate column (columns of one
    cluster carry the same value); cc (B, K) the candidates' clusters; cand_pos (B, ell) the logged
    columns. -inf where the logged label's cluster is not among those competing at position j."""
    same, prefix = _structure(cc, cand_pos)
    K = cc.shape[1]
    n = same.sum(dim=2).unsqueeze(1)                                  # (B, 1, K) candidates per cluster
    used = torch.bmm(prefix, same)                                    # (B, ell, K) prefix labels in k's cluster
    left = used < n
    big = torch.full_like(used, float(K + 1))
    fewest = torch.where(left, used, big).amin(dim=2, keepdim=True)
    compete = left & (used == fewest)                                 # (B, ell, K)
    earlier = torch.ones(K, K, dtype=torch.bool, device=cc.device).tril(-1)
    first = ~((same > 0) & earlier).any(dim=2)                        # (B, K) one column per cluster
    keep = compete & first.unsqueeze(1)
    neg_inf = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
    masked = torch.where(keep, logits.unsqueeze(-2), neg_inf)         # (..., B, ell, K)
    log_z = torch.logsumexp(masked, dim=-1)
    pos = cand_pos.clamp(min=0)
    s_j = logits.gather(-1, pos.expand(*logits.shape[:-2], *pos.shape))
    ok = compete.gather(2, pos.unsqueeze(2)).squeeze(2) & (cand_pos >= 0)
    return torch.where(ok, s_j - torch.where(ok, log_z, torch.zeros_like(log_z)), neg_inf)


def cluster_rho_conditionals(rho: torch.Tensor, cc: torch.Tensor, cand_pos: torch.Tensor) -> torch.Tensor:
    """(B, ell) rho(c(y_ij) | x_i, y_i,<j): the logging policy's unused mass in the logged label's
    cluster over its unused mass (rho (B, K) over the candidates)."""
    same, prefix = _structure(cc, cand_pos)
    same, prefix = same.to(rho.dtype), prefix.to(rho.dtype)
    unused = rho.unsqueeze(1) * (1.0 - prefix)                        # (B, ell, K)
    in_cluster = torch.bmm(unused, same)                              # (B, ell, K): unused mass of k's cluster
    mass = in_cluster.gather(2, cand_pos.clamp(min=0).unsqueeze(2)).squeeze(2)
    return mass / unused.sum(dim=2).clamp(min=1e-30)


def two_stage_scores(cluster_logits: torch.Tensor, rhat: torch.Tensor, cc: torch.Tensor) -> torch.Tensor:
    """(n, K) test-time scores over C(x): s1(x, c(y)) - ROUND_GAP * t(x, y), t = how many candidates of
    y's cluster come before y by rhat (higher first; ties: the earlier candidate column)."""
    K = cc.shape[1]
    same = cc.unsqueeze(2) == cc.unsqueeze(1)
    col = torch.arange(K, device=cc.device)
    better = (rhat.unsqueeze(1) > rhat.unsqueeze(2)) | ((rhat.unsqueeze(1) == rhat.unsqueeze(2))
                                                       & (col.view(1, 1, K) < col.view(1, K, 1)))
    t = (same & better).sum(dim=2).to(cluster_logits.dtype)
    return cluster_logits - ROUND_GAP * t


class POTECOptions(MethodConfig):
    """POTEC's grid of label-cluster counts (its size axis, in place of the action selector's p)."""
    k: list[int] | None = Field(None, description="potec: grid of label-cluster counts k (k-means of the logging "
                                                  "model's label rows; each at most L); default [10, 20, 50, 100]")


class POTEC(Method):
    name = "potec"
    uses_p = True              # a size axis: the number of label clusters k (`size_key`), not Phi^p
    size_key = "k"
    uses_lam = True
    train_support = "clusters"
    test_policy = "softmax"
    Options = POTECOptions
    lr_group = "is"
    needs_reward_model = True
    graph_safe = True
    clusters: torch.Tensor | None = None       # (L,) int64 on the training device, set by `for_trial`
    reward_head = None                         # the trial's reward model (a TrialHead), set by `for_trial`

    def test_support(self, mc: MethodConfig) -> str:
        return "candidates"

    def for_trial(self, prepared, head, heads, device, clusters) -> "POTEC":
        """A copy bound to the trial: the clusters of its logging model (k = head.spec.p, the grid `k`, from
        the trainer's `clusters(k)`) and its reward model (the head the trial fits first)."""
        k = int(head.spec.p)
        if k > prepared.n_labels:
            raise PoxmInputError(f"methods.{self.name}.k: k={k} clusters exceed the {prepared.n_labels} labels; "
                                 f"expected k <= {prepared.n_labels}")
        bound = copy.copy(self)
        ids = clusters(k)                                         # cached beside the prepared levels
        bound.clusters = torch.as_tensor(np.asarray(ids), dtype=torch.int64, device=device)
        bound.reward_head = next((h for h in heads if h.spec.method == REWARD_METHOD), None)
        return bound

    def _bound(self) -> torch.Tensor:
        if self.clusters is None:
            raise PoxmInputError(f"{self.name}: no label clusters (the method is used outside a trial; "
                                 "call for_trial first)")
        return self.clusters

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return self._bound()[batch.cand]                                  # (B, K): the candidates' cluster rows

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        if batch.rho is None:
            raise PoxmInputError(f"{self.name}: the training batch carries no rho over the candidates")
        cc = self._bound()[batch.cand]
        logpi = cluster_log_conditionals(logits, cc, batch.cand_pos)      # (G, B, ell)
        q_cluster = cluster_rho_conditionals(batch.rho, cc, batch.cand_pos)
        return translated_loss(logpi, q_cluster, batch.rewards, ctx.shift)

    def candidate_scores(self, params, z: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """(c, K) float64 test-time scores over C(x) (`two_stage_scores`); z: the head's features then the
        reward model's (the trial's evaluation inputs concatenate them for this head)."""
        cc = self._bound()[cand]
        d = params.W.shape[1]
        rw = self.reward_head.params
        own, other = z[:, :d].to(params.W.dtype), z[:, d:].to(rw.W.dtype)
        s1 = _logits(params, own, cc)
        rhat = _logits(rw, other, cand)
        return two_stage_scores(s1, rhat, cc)


def _logits(params, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    W = params.W.index_select(0, ids.reshape(-1)).view(*ids.shape, -1)
    return (torch.bmm(W, z.unsqueeze(2)).squeeze(2) + params.b[ids]).double()
