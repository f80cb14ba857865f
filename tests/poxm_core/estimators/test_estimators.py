"""Estimators (docs/estimators.md): hand-computed values, NumPy == Torch, stability, bad inputs.

The simulation tests (unbiasedness, Theorem 1) live in tests/poxm_core/estimators/test_estimators_simulation.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators import (DR, ESTIMATORS, IS, SIS, SNIS, Estimate, Translated, effective_sample_size,
                                  get_estimator, importance_weights, importance_weights_torch, pl_expectations,
                                  pl_expectations_torch, pl_log_conditionals, pl_log_conditionals_full_torch,
                                  pl_log_conditionals_torch, selector_pos, sis_weights, sis_weights_torch)

Z = 1.959963984540054  # standard normal 97.5% quantile

# ------------------------------------------------------------------- hand-computed PL conditionals
# exp(scores) = [1, 2, 3], total mass 6.
LN2, LN3 = math.log(2), math.log(3)
SCORES = np.array([[0.0, LN2, LN3]] * 3)
POS = np.array([[2, 0],     # pi(col2) = 3/6 = 1/2 ; then col2 removed: pi(col0) = 1/(6-3) = 1/3
                [-1, 1],    # y1 outside A -> 0 ; y1 NOT subtracted: pi(col1) = 2/6 = 1/3
                [0, 1]])    # pi(col0) = 1/6 ; then pi(col1) = 2/(6-1) = 2/5
PI = np.array([[1 / 2, 1 / 3], [0.0, 1 / 3], [1 / 6, 2 / 5]])
Q = np.array([[0.5, 0.25], [0.2, 0.5], [0.25, 0.5]])
# pruned w = pi / q: [[1, 4/3], [0, 2/3], [2/3, 4/5]]
W_PRUNED = np.array([[1.0, 4 / 3], [0.0, 2 / 3], [2 / 3, 4 / 5]])
# product w_j = prod_{k<=j} pi_k/q_k: [[1, 1*4/3], [0, 0*2/3], [2/3, 2/3*4/5 = 8/15]]
W_PRODUCT = np.array([[1.0, 4 / 3], [0.0, 0.0], [2 / 3, 8 / 15]])


def test_pl_log_conditionals_by_hand():
    got = pl_log_conditionals(SCORES, POS)
    assert got[1, 0] == -np.inf
    np.testing.assert_allclose(np.exp(got), PI, rtol=1e-14, atol=0)


def test_pl_padding_and_huge_logits_give_the_same_conditionals():
    padded = np.concatenate([SCORES, np.full((3, 2), -np.inf)], axis=1)       # -inf padding columns
    np.testing.assert_allclose(np.exp(pl_log_conditionals(padded, POS)), PI, rtol=1e-14)
    shifted = SCORES + 1e4                                                   # exp(1e4) overflows naively
    np.testing.assert_allclose(np.exp(pl_log_conditionals(shifted, POS)), PI, rtol=1e-10)
    # float32 spacing at 1e4 is ~1e-3, so compare with float64 on the same rounded inputs
    s32 = torch.tensor(shifted, dtype=torch.float32)
    lp_t = pl_log_conditionals_torch(s32, torch.tensor(POS))
    np.testing.assert_allclose(np.exp(lp_t.numpy()), np.exp(pl_log_conditionals(s32.double().numpy(), POS)), rtol=1e-5)


def test_pl_extreme_and_peaked_logits_are_exact():
    # [1e4, 0, -1e4], slate (col1, col0): pi(col1) = e^0/(e^1e4 + 1 + e^-1e4) -> log = -1e4 ;
    # then pi(col0 | col1 removed) = e^1e4/(e^1e4 + e^-1e4) -> log = -e^-2e4 = 0 in float.
    s = np.array([[1e4, 0.0, -1e4]])
    got = pl_log_conditionals(s, np.array([[1, 0]]))
    np.testing.assert_allclose(got, [[-1e4, 0.0]], rtol=1e-15, atol=1e-300)
    # Peaked on the first pick: [30, 0, 0], slate (col0, col1): second conditional is exactly 1/2.
    # The textbook s - lse - log1p(-c) loses ~3 digits here (1 - c = 2/(e^30+2) cancels).
    s = np.array([[30.0, 0.0, 0.0]])
    got = pl_log_conditionals(s, np.array([[0, 1]]))
    np.testing.assert_allclose(got[0, 1], math.log(0.5), rtol=1e-14)
    np.testing.assert_allclose(got[0, 0], -math.log1p(2 * math.exp(-30)), rtol=0, atol=1e-15)  # pi exact to 1e-15
    got_t = pl_log_conditionals_torch(torch.tensor(s, dtype=torch.float32), torch.tensor([[0, 1]]))
    np.testing.assert_allclose(got_t[0, 1].item(), math.log(0.5), rtol=1e-6)


def test_importance_weights_by_hand():
    lp = pl_log_conditionals(SCORES, POS)
    np.testing.assert_allclose(importance_weights(lp, Q), W_PRUNED, rtol=1e-14)
    np.testing.assert_allclose(importance_weights(lp, Q, pruned=False), W_PRODUCT, rtol=1e-14)


def test_sis_weights_by_hand():
    # Candidates in rho order with logits [ln3, ln2, 0, ln5]; p = 3 keeps ranks 0..2 (mass 3+2+1 = 6).
    scores_phi = np.array([[LN3, LN2, 0.0, math.log(5)]])
    cand_pos = np.array([[3, 1, 0]])          # rank 3 outside Phi^3 -> w = 0, and NOT subtracted later
    q = np.array([[0.5, 0.5, 0.5]])
    # pi(rank1) = 2/6 = 1/3 -> w = 2/3 ; then pi(rank0 | rank1 removed) = 3/(6-2) = 3/4 -> w = 3/2
    np.testing.assert_allclose(sis_weights(scores_phi, cand_pos, q, p=3), [[0.0, 2 / 3, 3 / 2]], rtol=1e-14)
    np.testing.assert_array_equal(selector_pos(cand_pos, 3), [[-1, 1, 0]])
    w_t = sis_weights_torch(torch.tensor(scores_phi), torch.tensor(cand_pos), torch.tensor(q), p=3)
    np.testing.assert_allclose(w_t.numpy(), [[0.0, 2 / 3, 3 / 2]], rtol=1e-14)


def test_pl_expectations_by_hand():
    # values v = [1, 2, 3] on exp(scores) = [1, 2, 3]:
    # row0: j1 (1+4+9)/6 = 7/3 ; j2 (col2 removed) (1+4)/3 = 5/3
    # row1: j1 7/3 ; j2 (y1 outside A, nothing removed) 7/3
    # row2: j1 7/3 ; j2 (col0 removed) (4+9)/5 = 13/5
    v = np.array([[1.0, 2.0, 3.0]] * 3)
    want = np.array([[7 / 3, 5 / 3], [7 / 3, 7 / 3], [7 / 3, 13 / 5]])
    np.testing.assert_allclose(pl_expectations(SCORES, v, POS), want, rtol=1e-14)
    np.testing.assert_allclose(pl_expectations(SCORES + 1e4, v, POS), want, rtol=1e-10)
    got_t = pl_expectations_torch(torch.tensor(SCORES), torch.tensor(v), torch.tensor(POS))
    np.testing.assert_allclose(got_t.numpy(), want, rtol=1e-14)


# -------------------------------------------------------------------- hand-computed estimators
# 3 instances, ell = 2.
W = np.array([[1.0, 2.0], [0.0, 1.0], [3.0, 0.0]])
R = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])


def _check(est: Estimate, value, stderr, ess=49 / 15):
    np.testing.assert_allclose([est.value, est.stderr], [value, stderr], rtol=1e-12)
    np.testing.assert_allclose([est.ci_low, est.ci_high], [value - Z * stderr, value + Z * stderr], rtol=1e-9)
    np.testing.assert_allclose(est.ess, ess, rtol=1e-14)
    assert est.n == 3


def test_ess_by_hand():
    # sum w = 1+2+0+1+3+0 = 7 ; sum w^2 = 1+4+0+1+9+0 = 15 ; ESS = 49/15
    assert effective_sample_size(W) == pytest.approx(49 / 15, rel=1e-14)
    assert effective_sample_size(np.zeros((2, 2))) == 0.0
    assert effective_sample_size(np.ones((4, 5))) == pytest.approx(20.0)


@pytest.mark.parametrize("cls", [IS, SIS])
def test_is_and_sis_by_hand(cls):
    # terms t_i = sum_j w r: [1*1 + 2*0, 0*1 + 1*1, 3*0 + 0*1] = [1, 1, 0] -> value 2/3
    # sample var = ((1/3)^2 + (1/3)^2 + (2/3)^2) / 2 = 1/3 -> stderr = sqrt(1/3 / 3) = 1/3
    _check(cls().estimate(W, R), 2 / 3, 1 / 3)


def test_snis_by_hand():
    # position 1: sum w = 1+0+3 = 4, sum wr = 1 -> V1 = 1/4 ; position 2: sum w = 3, sum wr = 1 -> V2 = 1/3
    # V = 7/12. Delta method: wbar = [4/3, 1]; influence t_i - V = sum_j w_ij (r_ij - V_j) / wbar_j:
    #   i1: 1*(3/4)/(4/3) + 2*(-1/3) = 9/16 - 2/3 = -5/48 ; i2: 1*(2/3) = 32/48 ; i3: 3*(-1/4)/(4/3) = -27/48
    # sample var = (25 + 1024 + 729)/48^2 / 2 = 889/2304 ; stderr = sqrt(889/2304/3)
    _check(SNIS().estimate(W, R), 7 / 12, math.sqrt(889 / 6912))


def test_snis_translation_shifts_by_ell_c_exactly():
    rng = np.random.default_rng(0)
    w, r = rng.exponential(size=(50, 4)), rng.integers(0, 2, size=(50, 4)).astype(float)
    c = 0.37
    # sum_j [sum_i w (r + c) / sum_i w] = sum_j [V_j + c] = SNIS + ell * c
    assert SNIS().value(w, r + c) == pytest.approx(SNIS().value(w, r) + 4 * c, rel=1e-12)
    # a position without any weight contributes 0 (not c): the shift counts weighted positions only
    w[:, 2] = 0.0
    assert SNIS().value(w, r + c) == pytest.approx(SNIS().value(w, r) + 3 * c, rel=1e-12)
    # and SNIS is invariant to scaling all weights
    assert SNIS().value(7.5 * w, r) == pytest.approx(SNIS().value(w, r), rel=1e-12)


def test_translated_by_hand():
    # shift = 0.5: t = [1*.5 + 2*(-.5), 0 + 1*.5, 3*(-.5) + 0] = [-0.5, 0.5, -1.5] -> value -1/2
    # (= IS - shift * sum w / n = 2/3 - 0.5*7/3). sample var = ((0)^2 + 1^2 + 1^2)/2 = 1 -> stderr 1/sqrt(3)
    _check(Translated(shift=0.5).estimate(W, R), -0.5, 1 / math.sqrt(3))
    _check(Translated().estimate(W, R), 2 / 3, 1 / 3)          # shift = 0 is IS


def test_dr_by_hand():
    dm = np.array([[0.4, 0.2], [0.6, 0.3], [0.1, 0.2]])
    rh = np.array([[0.5, 0.0], [1.0, 0.5], [0.5, 0.5]])
    # t1 = 0.4+0.2 + 1*(1-0.5) + 2*(0-0)   = 1.1
    # t2 = 0.6+0.3 + 0*(1-1)   + 1*(1-0.5) = 1.4
    # t3 = 0.1+0.2 + 3*(0-0.5) + 0*(1-0.5) = -1.2      -> value 1.3/3
    # mean 13/30; deviations [20/30, 29/30, -49/30]; var = (400+841+2401)/900/2 = 3642/1800
    _check(DR().estimate(W, R, dm_term=dm, rhat_logged=rh), 1.3 / 3, math.sqrt(3642 / 1800 / 3))
    # a perfect reward model on the logged actions leaves the DM term plus nothing
    assert DR().value(W, R, dm_term=dm, rhat_logged=R) == pytest.approx(dm.sum() / 3, rel=1e-14)


def test_bootstrap_is_seeded_and_close_to_clt():
    rng = np.random.default_rng(1)
    w, r = rng.exponential(size=(2000, 2)), rng.integers(0, 2, size=(2000, 2)).astype(float)
    est = IS().estimate(w, r)
    b1 = IS().estimate_bootstrap(w, r, n_boot=300, seed=3)
    b2 = IS().estimate_bootstrap(w, r, n_boot=300, seed=3)
    assert b1 == b2 and b1.value == est.value
    assert b1.stderr == pytest.approx(est.stderr, rel=0.15)
    assert b1.ci_low < est.value < b1.ci_high
    assert (b1.ci_high - b1.ci_low) == pytest.approx(est.ci_high - est.ci_low, rel=0.2)
    bs = SNIS().estimate_bootstrap(w, r, n_boot=300, seed=3)       # delta method vs bootstrap
    assert bs.stderr == pytest.approx(SNIS().estimate(w, r).stderr, rel=0.15)


# ---------------------------------------------------------------- NumPy == Torch == reference
def _random_log(rng, n=40, m=7, ell=3, pad=True):
    scores = rng.normal(scale=3.0, size=(n, m))
    if pad:
        scores[: n // 4, -2:] = -np.inf
    pos = np.stack([rng.permutation(m)[:ell] for _ in range(n)])
    pos = np.where(rng.random((n, ell)) < 0.3, -1, pos)
    q = rng.uniform(0.05, 1.0, size=(n, ell))
    return scores, pos, q


def _reference_logpi(scores, pos):
    """Direct transcription of docs/estimators.md (fine for moderate logits)."""
    n, ell = pos.shape
    out = np.full((n, ell), -np.inf)
    e = np.exp(scores)
    for i in range(n):
        for j in range(ell):
            if pos[i, j] < 0:
                continue
            denom = e[i].sum() - sum(e[i, pos[i, k]] for k in range(j) if pos[i, k] >= 0)
            with np.errstate(divide="ignore"):
                out[i, j] = np.log(e[i, pos[i, j]] / denom)
    return out


def _reference_expectations(scores, v, pos):
    n, ell = pos.shape
    out = np.zeros((n, ell))
    e = np.exp(scores)
    for i in range(n):
        for j in range(ell):
            keep = np.ones(scores.shape[1], dtype=bool)
            keep[[pos[i, k] for k in range(j) if pos[i, k] >= 0]] = False
            out[i, j] = (e[i] * v[i] * keep).sum() / (e[i] * keep).sum()
    return out


def test_pl_matches_reference_and_torch():
    rng = np.random.default_rng(2)
    scores, pos, q = _random_log(rng)
    lp = pl_log_conditionals(scores, pos)
    np.testing.assert_allclose(lp, _reference_logpi(scores, pos), rtol=1e-10, atol=1e-12)
    lp_t = pl_log_conditionals_torch(torch.tensor(scores), torch.tensor(pos))
    np.testing.assert_allclose(lp_t.numpy(), lp, rtol=1e-12, atol=1e-12)
    for pruned in (True, False):
        w = importance_weights(lp, q, pruned=pruned)
        w_t = importance_weights_torch(lp_t, torch.tensor(q), pruned=pruned)
        np.testing.assert_allclose(w_t.numpy(), w, rtol=1e-12, atol=1e-12)
    v = rng.uniform(size=scores.shape)
    ex = pl_expectations(scores, v, pos)
    np.testing.assert_allclose(ex, _reference_expectations(scores, v, pos), rtol=1e-10)
    np.testing.assert_allclose(pl_expectations_torch(torch.tensor(scores), torch.tensor(v), torch.tensor(pos)).numpy(),
                               ex, rtol=1e-12)


def test_full_support_equals_support_path():
    # m = L: label ids are the columns; slates with no -1
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=2.0, size=(16, 50))
    actions = np.stack([rng.permutation(50)[:5] for _ in range(16)])
    full = pl_log_conditionals_full_torch(torch.tensor(logits), torch.tensor(actions))
    np.testing.assert_allclose(full.numpy(), _reference_logpi(logits, actions), rtol=1e-10)
    # every conditional of a full-support slate lies in (0, 1]
    assert np.all(full.numpy() <= 0) and np.all(np.isfinite(full.numpy()))


def test_torch_gradients_are_correct_and_finite_with_padding():
    rng = np.random.default_rng(4)
    scores, pos, q = _random_log(rng, n=6, m=5, ell=3, pad=False)
    s = torch.tensor(scores, requires_grad=True)
    p_t, q_t = torch.tensor(pos), torch.tensor(q)
    assert torch.autograd.gradcheck(lambda x: importance_weights_torch(pl_log_conditionals_torch(x, p_t), q_t), (s,))
    # -inf padding: gradient of any objective is finite and zero on padding columns
    scores[:, -1] = -np.inf
    pos = np.where(pos == 4, -1, pos)
    s = torch.tensor(scores, requires_grad=True)
    w = importance_weights_torch(pl_log_conditionals_torch(s, torch.tensor(pos)), q_t)
    (w * torch.tensor(rng.random(w.shape))).sum().backward()
    assert torch.isfinite(s.grad).all() and torch.all(s.grad[:, -1] == 0)
    # a row whose whole support is logged (base mass empty) still has finite gradients
    s2 = torch.tensor([[0.5, -0.5]], requires_grad=True)
    pl_log_conditionals_torch(s2, torch.tensor([[1, 0]])).sum().backward()
    assert torch.isfinite(s2.grad).all()



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_expectation_gradients_stay_finite_for_a_peaked_policy(dtype):
    # DR-POXM's training made its policy so peaked that the mass left after the logged prefix fell
    # below exp(-88) of the row's maximum (float32's exp overflows past 88): a masked-out branch of
    # the expectation then held exp(+100) = inf, and autograd's 0 * inf put NaN in the gradient while
    # the value stayed finite (found on Delicious T0.5: two heads' weights turned NaN at epoch 18).
    scores = torch.tensor([[0.0, -100.0, -120.0, -140.0, -160.0],      # the logged item 0 holds all the mass
                           [-150.0, 0.0, -100.0, -130.0, -200.0]], dtype=dtype, requires_grad=True)
    pos = torch.tensor([[0, 1, 2], [1, 0, 3]])
    values = torch.tensor([[1.0, 0.5, 0.2, 0.9, 0.3], [0.1, 0.7, 0.4, 0.6, 0.8]], dtype=dtype)
    ex = pl_expectations_torch(scores, values, pos)
    lp = pl_log_conditionals_torch(scores, pos)
    (ex.sum() + lp.sum()).backward()
    assert torch.isfinite(ex).all() and torch.isfinite(scores.grad).all()
    # and the values are the exact ones: after removing the logged prefix, the next pick is the best
    # remaining item with probability 1 (to float precision)
    want = pl_expectations(scores.detach().double().numpy(), values.double().numpy(), pos.numpy())
    np.testing.assert_allclose(ex.detach().double().numpy(), want, rtol=1e-5, atol=1e-6)
    assert want[0, 0] == pytest.approx(1.0) and want[0, 1] == pytest.approx(0.5) and want[0, 2] == pytest.approx(0.2)

def _aux(name, rng, shape):
    """Random arrays for what the estimator's `per_sample` names (`aux_names`, e.g. DR's dm_term, rhat_logged)."""
    return {k: rng.uniform(size=shape) for k in ESTIMATORS[name].aux_names}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_numpy_equals_torch(name):
    rng = np.random.default_rng(5)
    w, r = rng.exponential(size=(30, 3)), rng.integers(0, 2, size=(30, 3)).astype(float)
    w[:, 1] *= rng.random(30) < 0.5
    aux = _aux(name, rng, w.shape)
    settings = {"shift": 0.8} if name == "translated" else {}
    est = get_estimator(name, **settings)
    got = est.value_torch(torch.tensor(w), torch.tensor(r), **{k: torch.tensor(v) for k, v in aux.items()})
    assert got.item() == pytest.approx(est.value(w, r, **aux), rel=1e-12)
    # value is the mean of the per-sample terms (delta-method terms for SNIS)
    e = est.estimate(w, r, **aux)
    assert np.mean(est.per_sample(w, r, **aux)) == pytest.approx(e.value, rel=1e-10)
    assert e.ci_low < e.value < e.ci_high and e.ess == pytest.approx(effective_sample_size(w))


def test_torch_value_is_differentiable_wrt_weights():
    w = torch.tensor(W, requires_grad=True)
    Translated(shift=0.5).value_torch(w, torch.tensor(R)).backward()
    np.testing.assert_allclose(w.grad.numpy(), (R - 0.5) / 3)           # d/dw (1/n) sum w (r - lam)
    w.grad = None
    SNIS().value_torch(w, torch.tensor(R)).backward()
    # d/dw_ij [S_j / T_j] = (r_ij - V_j) / T_j with T = [4, 3], V = [1/4, 1/3]
    np.testing.assert_allclose(w.grad.numpy(), (R - [0.25, 1 / 3]) / [4.0, 3.0], rtol=1e-12)


# ------------------------------------------------------------------------------------ bad inputs
BAD = [
    (lambda: pl_log_conditionals(np.zeros(3), np.zeros((3, 1), dtype=int)), "scores: expected a 2-D"),
    (lambda: pl_log_conditionals(np.zeros((2, 3)), np.zeros((2, 1))), "pos: expected an integer"),
    (lambda: pl_log_conditionals(np.zeros((2, 3)), np.zeros((3, 1), dtype=int)), "pos: expected 2 rows"),
    (lambda: pl_log_conditionals(np.zeros((2, 3)), np.full((2, 1), 3)), "pos: expected values in [-1, 2]"),
    (lambda: pl_log_conditionals(np.zeros((1, 3)), np.array([[1, 1]])), "pos: row 0 repeats"),
    (lambda: pl_log_conditionals(np.full((1, 3), np.nan), np.array([[1]])), "scores: expected finite"),
    (lambda: importance_weights(np.zeros((2, 2)), np.zeros((2, 2))), "q: expected propensities in (0, 1]"),
    (lambda: importance_weights(np.zeros((2, 2)), np.ones((2, 3))), "q: expected shape (2, 2)"),
    (lambda: importance_weights(np.ones((2, 2)), np.ones((2, 2))), "logpi: expected log-probabilities <= 0"),
    (lambda: sis_weights(np.zeros((1, 2)), np.zeros((1, 1), dtype=int), np.ones((1, 1)), p=3), "scores_phi"),
    (lambda: selector_pos(np.zeros((1, 1), dtype=int), 0), "p: expected a positive int"),
    (lambda: IS().estimate(W, R[:, :1]), "r: expected shape (3, 2)"),
    (lambda: IS().estimate(-W, R), "w: expected non-negative"),
    (lambda: IS().estimate(W, R * np.nan), "r: expected finite"),
    (lambda: IS().estimate(np.zeros((0, 2)), np.zeros((0, 2))), "w: expected at least one"),
    (lambda: DR().estimate(W, R), "dr: expected extra arrays ['dm_term', 'rhat_logged']"),
    (lambda: IS().estimate(W, R, dm_term=W), "unexpected ['dm_term']"),
    (lambda: IS(alpha=1.5), "alpha: expected a float in (0, 1)"),
    (lambda: Translated(shift=float("nan")), "shift: expected a finite float"),
    (lambda: IS().estimate_bootstrap(W, R, n_boot=1), "n_boot: expected an int >= 2"),
    (lambda: ESTIMATORS["snsi"], "did you mean 'snis'"),
    (lambda: get_estimator("foo"), "valid: " + ", ".join(sorted(ESTIMATORS))),
]


@pytest.mark.parametrize("call, message", BAD, ids=[m for _, m in BAD])
def test_bad_inputs_raise_one_line_errors(call, message):
    with pytest.raises(PoxmInputError) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_registry_keys_are_the_class_names():
    # not a pinned list of names (a plugin may add one): each entry is filed under its own name
    for name, cls in ESTIMATORS.items():
        assert cls.name == name
