"""Metrics of docs/metrics.md: hand-computed values, napkinxc as an independent implementation, brute-force
enumeration of Plackett-Luce slates, chunking invariance, and no n x L allocation."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError
from poxm_core.metrics.ranking import (covering_curve, greedy_from_policy, greedy_metrics, psp_unnormalised,
                               stochastic_metrics)

LOG3 = math.log2(3)   # discount of position 2 is 1/log2(3); position 3 is 1/log2(4) = 1/2


def csr(rows: list[list[int]], L: int) -> sp.csr_matrix:
    indptr = np.cumsum([0] + [len(r) for r in rows])
    idx = np.array([l for r in rows for l in r], dtype=np.int64)
    return sp.csr_matrix((np.ones(idx.size, np.float32), idx, indptr), shape=(len(rows), L))


# ------------------------------------------------------------------ greedy, by hand

# Y* = {0,2}, {}, {1,2,3};  1/p = [1,2,3,4]
# ranked [2,1,0] -> hits 1,0,1 ;  [0,1,2] -> 0,0,0 ;  [3,0,2] -> 1,0,1
Y_HAND = csr([[0, 2], [], [1, 2, 3]], 4)
INV_HAND = np.array([1.0, 2.0, 3.0, 4.0])
RANKED_HAND = np.array([[2, 1, 0], [0, 1, 2], [3, 0, 2]])


def test_greedy_hand_computed():
    got = greedy_metrics(Y_HAND, RANKED_HAND, INV_HAND, ks=(1, 2, 3))
    # P@k = mean_i hits_i@k / k
    assert got["P@1"] == pytest.approx((1 + 0 + 1) / 3)
    assert got["P@2"] == pytest.approx((1 / 2 + 0 + 1 / 2) / 3)
    assert got["P@3"] == pytest.approx((2 / 3 + 0 + 2 / 3) / 3)
    # nDCG: row 0 IDCG@3 uses min(3,|Y*|=2) positions; the empty row adds 0 but counts in n
    assert got["nDCG@1"] == pytest.approx((1 + 0 + 1) / 3)
    assert got["nDCG@2"] == pytest.approx(2 * (1 / (1 + 1 / LOG3)) / 3)
    assert got["nDCG@3"] == pytest.approx((1.5 / (1 + 1 / LOG3) + 1.5 / (1 + 1 / LOG3 + 0.5)) / 3)
    # PSP@k = sum hits/p over sum best: best@1 = 3 + 4, best@2 = (3+1) + (4+3), best@3 = 4 + (4+3+2)
    assert got["PSP@1"] == pytest.approx((3 + 4) / (3 + 4))
    assert got["PSP@2"] == pytest.approx((3 + 4) / (4 + 7))
    assert got["PSP@3"] == pytest.approx((3 + 1 + 4 + 3) / (4 + 9))
    # unnormalised: mean_i (1/k) sum hits/p
    u = psp_unnormalised(Y_HAND, RANKED_HAND, INV_HAND, ks=(1, 2, 3))
    assert u == pytest.approx({"uPSP@1": (3 + 4) / 3, "uPSP@2": (3 / 2 + 4 / 2) / 3,
                               "uPSP@3": (4 / 3 + 7 / 3) / 3})


def test_greedy_padding_counts_as_miss_and_all_empty_rows_give_zero():
    # [2, -1, -1]: one hit at rank 1 -> P@3 = 1/3; nDCG@3 = 1 / (1 + 1/log2 3) (|Y*| = 2)
    got = greedy_metrics(csr([[0, 2]], 4), np.array([[2, -1, -1]]), INV_HAND, ks=(3,))
    assert got["P@3"] == pytest.approx(1 / 3)
    assert got["nDCG@3"] == pytest.approx(1 / (1 + 1 / LOG3))
    assert got["PSP@3"] == pytest.approx(3 / (3 + 1))
    empty = greedy_metrics(csr([[], []], 4), np.array([[0, 1], [2, 3]]), INV_HAND, ks=(1, 2))
    assert all(v == 0.0 for v in empty.values())


# ------------------------------------------------------------------ napkinxc as reference

def _random_problem(seed: int, n: int = 150, L: int = 40, k: int = 5):
    rng = np.random.default_rng(seed)
    rows = [sorted(rng.choice(L, size=rng.integers(0, 6), replace=False).tolist()) for _ in range(n)]
    Y = csr(rows, L)
    scores = rng.random((n, L))       # continuous: no ties
    ranked = np.argsort(-scores, axis=1)[:, :k]
    return Y, ranked, scores


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_matches_napkinxc(seed):
    nxm = pytest.importorskip("napkinxc.metrics")
    Y, ranked, _ = _random_problem(seed)
    inv = nxm.Jain_et_al_inverse_propensity(Y).astype(np.float64)   # napkinxc returns float32
    pred = ranked.tolist()
    got = greedy_metrics(Y, ranked, inv, ks=range(1, 6))
    unnorm = psp_unnormalised(Y, ranked, inv, ks=range(1, 6))
    ref = {"P": nxm.precision_at_k(Y, pred, k=5), "nDCG": nxm.ndcg_at_k(Y, pred, k=5),
           "PSP": nxm.psprecision_at_k(Y, pred, inv, k=5, normalize=True),
           "uPSP": nxm.psprecision_at_k(Y, pred, inv, k=5, normalize=False)}
    for k in range(1, 6):
        for name in ("P", "nDCG", "PSP"):
            assert got[f"{name}@{k}"] == pytest.approx(ref[name][k - 1], rel=1e-12), (name, k)
        assert unnorm[f"uPSP@{k}"] == pytest.approx(ref["uPSP"][k - 1], rel=1e-12)


def test_greedy_chunking_does_not_change_results():
    Y, ranked, _ = _random_problem(3)
    inv = 1.0 + np.random.default_rng(0).random(Y.shape[1])
    assert greedy_metrics(Y, ranked, inv, chunk_rows=7) == pytest.approx(greedy_metrics(Y, ranked, inv), rel=1e-12)


# ------------------------------------------------------------------ greedy_from_policy

def test_greedy_from_policy_ties_by_smaller_label_and_padding_last():
    support = np.array([[5, 3, 9, 1], [4, -1, 2, 7]])
    scores = np.array([[0.2, 0.4, 0.2, 0.4], [0.0, 0.0, 0.0, -np.inf]])
    # row 0: 0.4 ties {3, 1} -> 1, 3; then 0.2 ties {5, 9} -> 5, 9
    # row 1: 0.0 ties {4, 2} -> 2, 4; then 7 (score -inf) before the padding; k = 5 > m pads with -1
    assert greedy_from_policy(support, scores, 5).tolist() == [[1, 3, 5, 9, -1], [2, 4, 7, -1, -1]]
    assert greedy_from_policy(support, scores, 2).tolist() == [[1, 3], [2, 4]]


# ------------------------------------------------------------------ stochastic, by hand

def test_stochastic_hand_computed_exact_and_mc():
    # one instance, Y* = {0, 2}, support [0, 1, 2], pi = [.5, .3, .2], 1/p = [1, 2, 3, 4]
    Y = csr([[0, 2]], 4)
    support, probs = np.array([[0, 1, 2]]), np.array([[0.5, 0.3, 0.2]])
    # P(0 in top 2) = .5 + .3*.5/.7 + .2*.5/.8 ;  P(2 in top 2) = .2 + .5*.2/.5 + .3*.2/.7
    in0 = 0.5 + 0.3 * 0.5 / 0.7 + 0.2 * 0.5 / 0.8
    in2 = 0.2 + 0.5 * 0.2 / 0.5 + 0.3 * 0.2 / 0.7
    first_hit = 0.5 + 0.2
    second_hit = (in0 - 0.5) + (in2 - 0.2)
    want = {"R@1": 0.7, "nDCR@1": 0.7, "PSR@1": (0.5 * 1 + 0.2 * 3) / 3,
            "R@2": (in0 + in2) / 2,
            "nDCR@2": (first_hit + second_hit / LOG3) / (1 + 1 / LOG3),
            "PSR@2": (in0 * 1 + in2 * 3) / (3 + 1)}
    exact = stochastic_metrics(Y, support, probs, INV_HAND, ks=(1, 2))
    for key, v in want.items():
        assert exact[key] == pytest.approx(v, rel=1e-12), key
        assert exact[f"{key}_se"] == 0.0
    mc = stochastic_metrics(Y, support, probs, INV_HAND, ks=(1, 2), n_slates=4000, exact_budget=0)
    for key, v in want.items():
        if key.endswith("@1"):   # k = 1 is always exact
            assert mc[key] == pytest.approx(v, rel=1e-12) and mc[f"{key}_se"] == 0.0
        else:
            assert 0 < mc[f"{key}_se"] < 0.02
            assert abs(mc[key] - v) < 4 * mc[f"{key}_se"], key


@pytest.mark.parametrize("exact_budget", [0, 10**6])
def test_stochastic_short_support(exact_budget):
    # Y* = {0, 1, 2}; only labels 0, 1 have mass, so every slate for k = 3 is {0, 1} in some order:
    # R@3 = 2/3; nDCR@3 = (1 + 1/log2 3) / (1 + 1/log2 3 + 1/2); PSR@3 = (1 + 2) / (3 + 2 + 1)
    # the padding (-1) and the zero-probability relevant label 2 never score.
    Y = csr([[0, 1, 2]], 4)
    support, probs = np.array([[0, 1, 2, -1]]), np.array([[0.6, 0.4, 0.0, 0.0]])
    got = stochastic_metrics(Y, support, probs, INV_HAND, ks=(3,), n_slates=8, exact_budget=exact_budget)
    assert got["R@3"] == pytest.approx(2 / 3)
    assert got["nDCR@3"] == pytest.approx((1 + 1 / LOG3) / (1 + 1 / LOG3 + 0.5))
    assert got["PSR@3"] == pytest.approx(3 / 6)
    assert got["R@3_se"] == pytest.approx(0.0, abs=1e-15)


def test_deterministic_policy_gives_greedy_metrics():
    # pi_j proportional to exp(-80 j): Gumbel noise never reorders it, so every slate is the ranking
    rng = np.random.default_rng(5)
    n, L, m = 120, 30, 6
    Y = csr([rng.choice(L, size=rng.integers(0, 5), replace=False).tolist() for _ in range(n)], L)
    support = np.stack([rng.choice(L, size=m, replace=False) for _ in range(n)])
    probs = np.exp(-80.0 * np.arange(m))[None, :].repeat(n, 0)
    probs /= probs.sum(1, keepdims=True)
    inv = 1.0 + 3 * rng.random(L)
    greedy = greedy_metrics(Y, greedy_from_policy(support, probs, 5), inv)
    stoch = stochastic_metrics(Y, support, probs, inv, n_slates=8, exact_budget=0)
    for k in (1, 3, 5):
        for g, s in (("P", "R"), ("nDCG", "nDCR"), ("PSP", "PSR")):
            assert stoch[f"{s}@{k}"] == pytest.approx(greedy[f"{g}@{k}"], rel=1e-12, abs=1e-12)


# ------------------------------------------------------------------ brute force over ordered slates

def _brute_force(Y: sp.csr_matrix, support, probs, inv, k: int) -> dict[str, float]:
    """Enumerate every ordered slate of k distinct support columns with its PL probability."""
    tot = {"R": 0.0, "nDCR": 0.0, "PSR": 0.0}
    best_sum = 0.0
    for i in range(Y.shape[0]):
        true = set(Y[i].indices.tolist())
        best_sum += sum(sorted((inv[l] for l in true), reverse=True)[:k])
        idcg = sum(1 / math.log2(l + 2) for l in range(min(k, len(true))))

        def walk(prefix, prob, used_mass):
            if len(prefix) == k:
                hits = [support[i, j] in true for j in prefix]
                tot["R"] += prob * sum(hits) / k
                if idcg:
                    tot["nDCR"] += prob * sum(h / math.log2(l + 2) for l, h in enumerate(hits)) / idcg
                tot["PSR"] += prob * sum(inv[support[i, j]] for j, h in zip(prefix, hits) if h)
                return
            for j in range(support.shape[1]):
                if j not in prefix and probs[i, j] > 0:
                    walk(prefix + [j], prob * probs[i, j] / (1 - used_mass), used_mass + probs[i, j])
        walk([], 1.0, 0.0)
    n = Y.shape[0]
    return {f"R@{k}": tot["R"] / n, f"nDCR@{k}": tot["nDCR"] / n, f"PSR@{k}": tot["PSR"] / best_sum}


def _tiny_policy(seed: int, n: int = 6, L: int = 6, m: int = 4):
    rng = np.random.default_rng(seed)
    Y = csr([rng.choice(L, size=rng.integers(0, 4), replace=False).tolist() for _ in range(n)], L)
    support = np.stack([rng.choice(L, size=m, replace=False) for _ in range(n)])
    probs = rng.dirichlet(np.ones(m), size=n)
    inv = 1.0 + 3 * rng.random(L)
    return Y, support, probs, inv


@pytest.mark.parametrize("device", [None, "cpu"])     # NumPy quadrature / the torch one a GPU trial uses
def test_exact_matches_brute_force(device):
    Y, support, probs, inv = _tiny_policy(11)
    got = stochastic_metrics(Y, support, probs, inv, ks=(1, 2, 3), device=device)   # n * m = 24 <= budget: exact
    for k in (1, 2, 3):
        for key, v in _brute_force(Y, support, probs, inv, k).items():
            assert got[key] == pytest.approx(v, rel=1e-10), key
            assert got[f"{key}_se"] == 0.0


def test_monte_carlo_within_standard_errors_of_brute_force():
    Y, support, probs, inv = _tiny_policy(12)
    want = _brute_force(Y, support, probs, inv, 3)
    assert all(0.05 < v < 0.95 for v in want.values())   # a non-degenerate problem
    z = {key: [] for key in want}
    for seed in range(40):
        mc = stochastic_metrics(Y, support, probs, inv, ks=(3,), n_slates=64, seed=seed, exact_budget=0)
        for key, v in want.items():
            assert abs(mc[key] - v) < 5 * mc[f"{key}_se"], (key, seed)
            z[key].append((mc[key] - v) / mc[f"{key}_se"])
    for key, zs in z.items():   # the reported se is the actual spread of the estimate
        assert 0.6 < np.std(zs) < 1.5, key
        assert abs(np.mean(zs)) < 3 / math.sqrt(len(zs)) + 0.2, key


def test_torch_monte_carlo_within_standard_errors_of_the_exact_values():
    """The Monte-Carlo a GPU trial runs (torch's generator; here on the CPU, the same code): its
    estimates within 5 standard errors of the exact values, and those errors the actual spread."""
    Y, support, probs, inv = _tiny_policy(12)
    probs = probs.copy()
    probs[:2, -2:] = 0.0                                 # two rows with two zero-probability labels of 4:
    probs /= probs.sum(axis=1, keepdims=True)            # their slates hold 2 labels, not 3
    Y = Y.tolil()
    Y[0, support[0, 1:]] = 1                             # a true label drawn, two never drawn
    Y = Y.tocsr()
    # the exact quadrature (tested against brute force above) handles the short slates
    want = {k: v for k, v in stochastic_metrics(Y, support, probs, inv, ks=(3,)).items() if not k.endswith("_se")}
    z = {key: [] for key in want}
    for seed in range(25):
        mc = stochastic_metrics(Y, support, probs, inv, ks=(1, 3), n_slates=64, seed=seed, exact_budget=0, device="cpu")
        for key, v in want.items():
            assert abs(mc[key] - v) < 5 * mc[f"{key}_se"], (key, seed)
            z[key].append((mc[key] - v) / mc[f"{key}_se"])
        ref = stochastic_metrics(Y, support, probs, inv, ks=(1, 3), n_slates=64, seed=seed, exact_budget=0)
        assert mc["R@1"] == pytest.approx(ref["R@1"], rel=1e-12)   # k = 1 is exact on both paths
    for key, zs in z.items():
        assert 0.6 < np.std(zs) < 1.5, key
        assert abs(np.mean(zs)) < 3 / math.sqrt(len(zs)) + 0.2, key


def _chunking_policy():
    """300 instances, 50 labels, supports of 20 (6,000 > one 64-row noise block per chunk at chunk_elems=1)."""
    rng = np.random.default_rng(2)
    n, L, m = 300, 50, 20
    Y = csr([rng.choice(L, size=rng.integers(0, 6), replace=False).tolist() for _ in range(n)], L)
    support = np.stack([rng.choice(L, size=m, replace=False) for _ in range(n)])
    probs = rng.dirichlet(np.ones(m) * 0.3, size=n)
    inv = 1.0 + 3 * rng.random(L)
    return Y, support, probs, inv


def test_torch_monte_carlo_does_not_depend_on_the_chunking():
    Y, support, probs, inv = _chunking_policy()
    one = stochastic_metrics(Y, support, probs, inv, n_slates=16, seed=3, exact_budget=0, device="cpu")
    small = stochastic_metrics(Y, support, probs, inv, n_slates=16, seed=3, exact_budget=0, chunk_elems=1, device="cpu")
    assert small == pytest.approx(one, rel=1e-12)
    numpy_mc = stochastic_metrics(Y, support, probs, inv, n_slates=16, seed=3, exact_budget=0)
    for key in ("R@3", "R@5", "nDCR@5", "PSR@5"):
        assert one[f"{key}_se"] > 0 and abs(one[key] - numpy_mc[key]) < 5 * math.hypot(one[f"{key}_se"], numpy_mc[f"{key}_se"])


def test_stochastic_chunking_and_seed():
    Y, support, probs, inv = _chunking_policy()
    one = stochastic_metrics(Y, support, probs, inv, n_slates=16, seed=3, exact_budget=0)
    small = stochastic_metrics(Y, support, probs, inv, n_slates=16, seed=3, exact_budget=0, chunk_elems=1)   # 64-row chunks
    assert small == pytest.approx(one, rel=1e-12)
    other = stochastic_metrics(Y, support, probs, inv, n_slates=16, seed=4, exact_budget=0)
    assert other["R@5"] != one["R@5"] and other["R@1"] == one["R@1"]
    assert abs(other["R@5"] - one["R@5"]) < 5 * math.hypot(other["R@5_se"], one["R@5_se"])
    exact = stochastic_metrics(Y, support, probs, inv)   # n * m = 6000: exact, independent of the chunking
    assert stochastic_metrics(Y, support, probs, inv, chunk_elems=1) == pytest.approx(exact, rel=1e-12)
    assert exact["R@5_se"] == 0.0 and abs(exact["R@5"] - one["R@5"]) < 5 * one["R@5_se"]


def test_exact_against_large_monte_carlo_at_m100():
    # the quadrature at the sizes it is used for (m = 100, k = 5, peaked and flat rows) against a
    # Monte-Carlo of 2000 slates per instance: every metric within 4.5 of its standard error
    rng = np.random.default_rng(8)
    n, L, m = 40, 400, 100
    Y = csr([rng.choice(L, size=rng.integers(1, 30), replace=False).tolist() for _ in range(n)], L)
    support = np.stack([rng.choice(L, size=m, replace=False) for _ in range(n)])
    logits = rng.normal(size=(n, m)) * np.linspace(0.1, 6.0, n)[:, None]
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    inv = 1.0 + 3 * rng.random(L)
    exact = stochastic_metrics(Y, support, probs, inv)
    mc = stochastic_metrics(Y, support, probs, inv, n_slates=2000, seed=1, exact_budget=0)
    for key in ("R@3", "R@5", "nDCR@3", "nDCR@5", "PSR@3", "PSR@5"):
        assert exact[f"{key}_se"] == 0.0 and mc[f"{key}_se"] > 0
        assert abs(exact[key] - mc[key]) < 4.5 * mc[f"{key}_se"], (key, exact[key], mc[key], mc[f"{key}_se"])


# ------------------------------------------------------------------ covering

def test_covering_curve_hand_and_reference():
    # rows {0,2} / {} / {1,2,3} with cand as RANKED_HAND: top-1 covers 1+0+1, top-2 1+0+1,
    # top-3 2+0+2 of the 5 true labels
    assert covering_curve(Y_HAND, RANKED_HAND) == pytest.approx([2 / 5, 2 / 5, 4 / 5])
    Y, _, scores = _random_problem(4, L=30)
    cand = np.argsort(-scores, axis=1)[:, :10]
    ref = [sum(len(set(Y[i].indices) & set(cand[i, :k])) for i in range(Y.shape[0])) / Y.nnz
           for k in range(1, 11)]
    assert covering_curve(Y, cand, chunk_rows=13) == pytest.approx(ref, rel=1e-12)


# ------------------------------------------------------------------ scale: no n x L array

def test_huge_label_space_without_dense_allocation():
    rng = np.random.default_rng(0)
    n, L, m = 40, 10**6, 50
    Y = csr([rng.choice(L, size=5, replace=False).tolist() for _ in range(n)], L)
    support = np.stack([rng.choice(L, size=m, replace=False) for _ in range(n)])
    support[:, :3] = Y.indices.reshape(n, 5)[:, :3]   # make some hits
    probs = rng.dirichlet(np.ones(m), size=n)
    inv = np.full(L, 2.0)
    tracemalloc.start()
    g = greedy_metrics(Y, greedy_from_policy(support, probs, 5), inv)
    s = stochastic_metrics(Y, support, probs, inv, n_slates=16)
    c = covering_curve(Y, support)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 30e6, peak   # a dense (n, L) float64 would be 320 MB
    assert 0 < g["P@5"] <= 1 and 0 < s["R@5"] <= 1 and c[-1] == pytest.approx(3 / 5)


# ------------------------------------------------------------------ bad input

GOOD = dict(Y=Y_HAND, ranked=RANKED_HAND, inv_prop=INV_HAND)


@pytest.mark.parametrize("change, exc, msg", [
    ({"Y": Y_HAND.toarray()}, TypeError, "Y: expected a scipy sparse"),
    ({"ranked": RANKED_HAND[:2]}, PoxmInputError, "ranked: expected shape (3, k)"),
    ({"ranked": RANKED_HAND[:, :2]}, PoxmInputError, "max(ks) = 3"),
    ({"ranked": RANKED_HAND + 2}, PoxmInputError, "ranked: label ids must lie in [0, 4)"),
    ({"ranked": np.array([[1, 1, 0], [0, 1, 2], [3, 0, 2]])}, PoxmInputError, "row 0 repeats"),
    ({"ranked": RANKED_HAND.astype(float)}, TypeError, "ranked: expected integer"),
    ({"inv_prop": INV_HAND[:3]}, PoxmInputError, "inv_prop: expected shape (4,)"),
    ({"ks": (0, 3)}, PoxmInputError, "ks: expected positive ints"),
])
def test_greedy_bad_input(change, exc, msg):
    kw = {**GOOD, "ks": (1, 3), **change}
    with pytest.raises(exc, match=None) as e:
        greedy_metrics(**kw)
    assert msg in str(e.value)


@pytest.mark.parametrize("support, probs, extra, msg", [
    ([[0, 1]], [[0.5, 0.4]], {}, "probs: each row must sum to 1"),
    ([[0, -1]], [[0.5, 0.5]], {}, "padding entry"),
    ([[0, 1]], [[1.5, -0.5]], {}, "non-negative"),
    ([[0, 1]], [[0.5, 0.5, 0.0]], {}, "probs: expected the shape of support"),
    ([[0, 1]], [[0.5, 0.5]], {"n_slates": 0}, "n_slates: expected an int >= 1"),
    ([[0, 1]], [[0.5, 0.5]], {"exact_budget": -1}, "exact_budget: expected an int >= 0"),
])
def test_stochastic_bad_input(support, probs, extra, msg):
    with pytest.raises(PoxmInputError) as e:
        stochastic_metrics(csr([[0]], 4), np.array(support), np.array(probs), INV_HAND, ks=(1, 2), **extra)
    assert msg in str(e.value)


def test_per_instance_values_average_to_the_metric_and_match_a_row_loop():
    """Each instance's share (what a claim's test-set term reads): its mean is the metric itself, in the
    exact, the NumPy Monte-Carlo and the torch Monte-Carlo paths; the greedy shares against a plain loop."""
    import scipy.sparse as sp
    import torch

    from poxm_core.metrics.ranking import greedy_metrics, greedy_per_instance
    from poxm_core.metrics.slate import stochastic_metrics
    rng = np.random.default_rng(0)
    n, L, m = 150, 30, 8
    Y = sp.csr_matrix((rng.random((n, L)) < 0.15).astype(np.float32))
    sup = np.stack([rng.choice(L, m, replace=False) for _ in range(n)]).astype(np.int64)
    pr = rng.dirichlet(np.ones(m), n)
    inv = 1 + 3 * rng.random(L)
    for budget, dev in ((10**9, None), (0, None), (0, torch.device("cpu"))):
        per = {"R@5": None, "PSR@5": None, "nDCR@3": None, "R@1": None}
        out = stochastic_metrics(Y, sup, pr, inv, (1, 3, 5), n_slates=8, seed=2, exact_budget=budget, device=dev,
                                 per_instance=per)
        for k, v in per.items():
            assert v.shape == (n,) and v.mean() == pytest.approx(out[k], abs=1e-12), (budget, dev, k)
    ranked = np.take_along_axis(sup, np.argsort(-pr, 1)[:, :5], 1)
    g, gi = greedy_metrics(Y, ranked, inv, (5,)), greedy_per_instance(Y, ranked, inv, 5)
    dense = Y.toarray() > 0
    hits = np.array([[dense[i, y] for y in ranked[i]] for i in range(n)])
    best = np.array([np.sort(inv[dense[i]])[::-1][:5].sum() for i in range(n)])
    assert gi["P@5"] == pytest.approx(hits.mean(1))
    assert gi["PSP@5"] == pytest.approx((hits * inv[ranked]).sum(1) / best.mean())
    assert (gi["P@5"].mean(), gi["PSP@5"].mean()) == pytest.approx((g["P@5"], g["PSP@5"]))
    with pytest.raises(PoxmInputError, match="per_instance"):
        stochastic_metrics(Y, sup, pr, inv, (1, 5), per_instance={"R@4": None})
