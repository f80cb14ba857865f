"""Policies (docs/protocol.md, docs/methods.md): the stacked policy networks against H plain-torch models with their own Adams,
seeded / logging inits, POXM's row sparsity through the network policy, the reward translation, the
DR-POXM loss against a hand-written Plackett-Luce computation, the protocol tag, and the end-to-end
skyline's encoder. Every check is against an independent computation written here."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from poxm_core.config.schema import PAPER_PROTOCOL, MethodConfig, TrainingConfig, protocol_name
from poxm_core.common.errors import PoxmInputError
from poxm_core.methods import Batch, HeadContext, get_method
from poxm_core.methods.base import reward_shift
from poxm_core.model.core import csr_to_bag
from poxm_core.policy import NetworkStack, PolicyRequest, build_policies
from poxm_core.policy.network import EndToEndPolicy, NetworkPolicy
from poxm_core.training import trial_specs
from poxm_core.training.epoch import train_epoch as _train_epoch
from poxm_core.training.trial_setup import build_heads as _build_heads
from trial_fixtures import tiny_config, tiny_prepared

CPU = torch.device("cpu")


def sparse_input(n=6, D=9, seed=0, empty_row=True) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    X = rng.random((n, D)) * (rng.random((n, D)) < 0.45)
    if empty_row:
        X[2] = 0.0                      # an instance with no features: an empty bag
    X[0, 0] = 1.5                       # at least one non-empty row
    return sp.csr_matrix(X.astype(np.float32))


def normalised_dense(X: sp.csr_matrix) -> torch.Tensor:
    """x / ||x||_2 row-wise as a dense (n, D) tensor (0 rows stay 0), written independently of csr_to_bag."""
    A = X.toarray().astype(np.float64)
    nrm = np.linalg.norm(A, axis=1, keepdims=True)
    nrm[nrm == 0] = 1.0
    return torch.tensor(A / nrm, dtype=torch.float32)


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


# --------------------------------------------------------------------------------- 1. NetworkStack

@pytest.mark.parametrize("use_encoder", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_stack_equals_separate_models_with_their_own_adam(use_encoder, wd):
    n, D, d, h = 6, 9, 4, 3
    lrs = [0.01, 0.05, 0.003]
    H = len(lrs)
    X = sparse_input(n, D)
    bag = csr_to_bag(X, CPU)
    Xn = normalised_dense(X)
    z = torch.randn(n, d, generator=torch.Generator().manual_seed(7))
    stack = NetworkStack(D, d, h, ["fresh"] * H, gens(11, 12, 13), lrs, wd, CPU, use_encoder=use_encoder)
    g = torch.Generator().manual_seed(3)
    targets = [torch.randn(n, h, generator=g) for _ in range(H)]
    scale = [1.0, 0.3, 0.0]             # head 2 has a zero loss gradient

    def head_loss(k, feats):
        return scale[k] * (torch.tanh(feats) * targets[k]).sum() + scale[k] * 0.5 * (feats ** 2).mean()

    # H plain models: h_k = x~ V_k + c_k (+ z U_k), each with torch.optim.Adam(lr_k)
    plain = []
    for k in range(H):
        cols = slice(k * h, (k + 1) * h)
        ps = {"V": torch.nn.Parameter(stack.V.detach()[:, cols].clone()),
              "c": torch.nn.Parameter(stack.c.detach()[cols].clone())}
        if use_encoder:
            ps["U"] = torch.nn.Parameter(stack.U.detach()[:, cols].clone())
        plain.append((ps, torch.optim.Adam(list(ps.values()), lr=lrs[k], weight_decay=wd)))
    init = {name: p.detach().clone() for name, p in stack.named_parameters()}

    def plain_feats(ps):
        out = Xn @ ps["V"] + ps["c"]
        return out + z @ ps["U"] if use_encoder else out

    for step in range(3):
        stacked = stack(z, bag)
        assert stacked.shape == (n, H * h)
        for k in range(H):      # head_features(k) = block k of forward(), and = the plain model's features
            blk = stacked[:, k * h:(k + 1) * h]
            torch.testing.assert_close(stack.head_features(k, z, bag), blk, rtol=0, atol=1e-6)
            torch.testing.assert_close(blk, plain_feats(plain[k][0]), rtol=0, atol=1e-5)
        torch.stack([head_loss(k, stacked[:, k * h:(k + 1) * h]) for k in range(H)]).sum().backward()
        stack.step()
        for k, (ps, opt) in enumerate(plain):
            opt.zero_grad()
            head_loss(k, plain_feats(ps)).backward()
            opt.step()
        for k, (ps, _) in enumerate(plain):
            cols = slice(k * h, (k + 1) * h)
            for name, p in ps.items():
                got = {"V": stack.V[:, cols], "c": stack.c[cols], "U": stack.U[:, cols]}[name]
                assert (got - p).abs().max().item() <= 1e-6, (step, k, name)
        if wd == 0.0:           # the zero-gradient head is untouched, bit for bit
            cols = slice(2 * h, 3 * h)
            assert torch.equal(stack.V[:, cols], init["V"][:, cols])
            assert torch.equal(stack.c[cols], init["c"][cols])
            if use_encoder:
                assert torch.equal(stack.U[:, cols], init["U"][:, cols])
    # the trained heads did move (the comparison above is not vacuous)
    assert not torch.equal(stack.V[:, :h], init["V"][:, :h])
    assert stack.step_count == 3


def test_stack_head_init_equals_head_built_alone():
    D, d, h = 9, 4, 3
    both = NetworkStack(D, d, h, ["fresh", "fresh"], gens(5, 6), [0.1, 0.1], 0.0, CPU, use_encoder=True)
    alone = NetworkStack(D, d, h, ["fresh"], gens(6), [0.1], 0.0, CPU, use_encoder=True)
    for name in ("U", "c", "V"):
        a, b = getattr(both, name).detach(), getattr(alone, name).detach()
        assert torch.equal(a[..., h:2 * h], b), name
        assert not torch.equal(a[..., :h], b), name


# --------------------------------------------------------------------------------- 2. inits

def _build(reqs, W0, b0, D, hidden, use_encoder=False):
    return build_policies(reqs, W0=W0, b0=b0, n_features=D, hidden=hidden, weight_decay=0.0, device=CPU,
                          use_encoder=use_encoder)


def _logging_head(L=12, d=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(L, d)).astype(np.float32), rng.normal(size=L).astype(np.float32)


def test_fresh_init_is_seeded():
    W0, b0 = _logging_head()
    D, hidden = 9, 4
    req = lambda seed: PolicyRequest("network", "fresh", 0.01, seed)  # noqa: E731
    (p1,), s1 = _build([req(42)], W0, b0, D, hidden)
    (p2,), s2 = _build([req(42)], W0, b0, D, hidden)
    (p3,), s3 = _build([req(43)], W0, b0, D, hidden)
    assert isinstance(p1, NetworkPolicy) and p1.out.W.shape == (12, hidden)
    for name in ("c", "V"):
        assert torch.equal(getattr(s1["main"], name), getattr(s2["main"], name))
        assert not torch.equal(getattr(s1["main"], name), getattr(s3["main"], name))
    assert torch.equal(p1.out.W, p2.out.W) and not torch.equal(p1.out.W, p3.out.W)
    assert torch.equal(p1.out.b, torch.zeros(12))
    # fresh output layer: W ~ N(0, 0.01^2) drawn from the head's own seed
    expect = torch.randn((12, hidden), generator=torch.Generator().manual_seed(42), dtype=torch.float32) * 0.01
    assert torch.equal(p1.out.W, expect)


def test_logging_init_reproduces_logging_scores_exactly():
    W0, b0 = _logging_head(L=12, d=5)
    D = 9
    X = sparse_input(6, D)
    bag = csr_to_bag(X, CPU)
    z = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))
    # a logging-init head beside a fresh one in the same stack
    pols, stacks = _build([PolicyRequest("network", "fresh", 0.01, 1), PolicyRequest("network", "logging", 0.01, 2)],
                          W0, b0, D, hidden=5, use_encoder=True)
    pol = pols[1]
    assert torch.equal(pol.features(z, bag), z)       # U = I, V = 0, c = 0
    expect = z.double().numpy() @ W0.astype(np.float64).T + b0.astype(np.float64)
    full = pol.scorer(z, bag, grad=False)(None).detach().double().numpy()
    np.testing.assert_allclose(full, expect, rtol=0, atol=1e-5)
    ids = torch.tensor([[3, 0, 7], [11, 3, 2], [1, 2, 4], [0, 5, 6], [9, 10, 8], [4, 4, 1]])
    got = pol.scorer(z, bag, grad=False)(ids).detach().double().numpy()
    np.testing.assert_allclose(got, np.take_along_axis(expect, ids.numpy(), axis=1), rtol=0, atol=1e-5)
    # and through features_of (the evaluation path)
    np.testing.assert_array_equal(pol.features_of(z.numpy(), X), z.numpy())
    # the fresh head of the same stack is not at the logging scores
    assert not torch.equal(pols[0].features(z, bag), z)


def test_logging_init_needs_encoder_input_and_width_d():
    W0, b0 = _logging_head(L=12, d=5)
    req = [PolicyRequest("network", "logging", 0.01, 0)]
    with pytest.raises(PoxmInputError, match="sparse\\+encoder"):
        _build(req, W0, b0, 9, hidden=5, use_encoder=False)
    with pytest.raises(PoxmInputError, match="hidden"):
        _build(req, W0, b0, 9, hidden=4, use_encoder=True)
    with pytest.raises(ValueError):
        NetworkStack(9, 5, 5, ["logging"], gens(0), [0.1], 0.0, CPU, use_encoder=False)


# --------------------------------------------------------------------------------- 3. POXM row sparsity

@pytest.mark.parametrize("inputs", ["sparse", "sparse+encoder"])
def test_poxm_network_policy_touches_only_phi_rows(inputs):
    p = 4
    prep = tiny_prepared(L=40)
    # weight decay: a row the loss merely asks for moves too (g = wd * W), so "asked for" is visible
    cfg = tiny_config({"poxm": {"p": [p], "lam": [0.5], "lr": 0.05}}, epochs=1, hidden=8, network_inputs=inputs,
                      weight_decay=1e-3)
    assert cfg.training.policy == "network"
    spec = trial_specs(cfg, "method")[0]
    with torch.no_grad():
        heads, stacks = _build_heads(cfg, spec, prep, CPU)
    head = next(h for h in heads if h.spec.method == "poxm")
    assert isinstance(head.policy, NetworkPolicy)
    W_init, b_init = head.policy.out.W.clone(), head.policy.out.b.clone()
    stack_init = stacks["main"].V.detach().clone()
    _train_epoch(cfg, spec, prep, heads, 1, CPU)
    phi = np.unique(prep.policy_train.cand[prep.log_train.instance, :p])
    outside = np.setdiff1d(np.arange(prep.n_labels), phi)
    assert outside.size > 0 and phi.size > 0
    W, b = head.policy.out.W, head.policy.out.b
    assert torch.equal(W[outside], W_init[outside]) and torch.equal(b[outside], b_init[outside])
    changed = (W[phi] != W_init[phi]).any(dim=1)
    assert changed.all(), f"rows of Phi^p not updated: {phi[~changed.numpy()]}"
    assert not torch.equal(stacks["main"].V.detach(), stack_init)     # the dense layers trained too


# --------------------------------------------------------------------------------- 4. reward translation

def test_reward_shift_and_head_context_default():
    assert reward_shift(0.7, "loss") == pytest.approx(0.3, abs=1e-15)
    assert reward_shift(0.7, "reward") == 0.7
    assert reward_shift(1.0, "loss") == 0.0
    assert reward_shift(None, "loss") is None and reward_shift(None, "reward") is None
    c = HeadContext(4, 0.8, MethodConfig(), torch.Generator(), 10)   # default: the trainer's 1 - lam
    assert c.shift == pytest.approx(0.2, abs=1e-15)
    c = HeadContext(4, 0.8, MethodConfig(), torch.Generator(), 10, shift=reward_shift(0.8, "reward"))
    assert c.shift == 0.8
    c = HeadContext(4, 0.8, MethodConfig(), torch.Generator(), 10, shift=reward_shift(0.8, "loss"))
    assert c.shift == pytest.approx(0.2, abs=1e-15)
    assert HeadContext(4, None, MethodConfig(), torch.Generator(), 10).shift is None


# --------------------------------------------------------------------------------- 5. DR-POXM

L5 = 7
CAND5 = [[3, 1, 4, 0, 2], [2, 0, 5, 1, 3]]          # Phi^3: {3, 1, 4} and {2, 0, 5}
ACTIONS5 = [[1, 0], [1, 5]]                          # inst 0: in, out;  inst 1: out, in
CAND_POS5 = [[1, 3], [3, 2]]
Q5 = [[0.4, 0.3], [0.2, 0.5]]
REWARDS5 = [[1.0, 0.0], [1.0, 1.0]]
RHAT5 = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
                      [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]], dtype=torch.float64)


def hand_dr_loss(S: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """-(1/B) sum_ij [E_{pi_Phi}(rhat) + w_ij (r_ij - rhat(x_i, y_ij))], pi_Phi written out by hand:
    available set at position j = Phi minus the earlier logged picks that are in Phi."""
    total = S.new_zeros(())
    for i in range(2):
        phi = CAND5[i][:3]
        taken: list[int] = []
        for j in range(2):
            y = ACTIONS5[i][j]
            avail = [a for a in phi if a not in taken]
            mass = sum(torch.exp(S[i, a]) for a in avail)
            dm = sum(torch.exp(S[i, a]) * R[i, a] for a in avail) / mass
            w = torch.exp(S[i, y]) / mass / Q5[i][j] if y in phi else S.new_zeros(())
            total = total + dm + w * (REWARDS5[i][j] - R[i, y])
            if y in phi:
                taken.append(y)
    return -total / 2


def dr_batch():
    f64 = torch.float64
    a = torch.tensor(ACTIONS5)
    return Batch(z=torch.zeros(2, 1), actions=a, cand_pos=torch.tensor(CAND_POS5), q=torch.tensor(Q5, dtype=f64),
                 rewards=torch.tensor(REWARDS5, dtype=f64), cand=torch.tensor(CAND5),
                 inv_prop_actions=torch.ones(2, 2, dtype=f64), n_labels=L5)


def library_dr_loss(S0: torch.Tensor):
    """DR-POXM's loss with score(ids) = S[i, ids] and rhat(ids) = RHAT5[i, ids]; (loss, S leaf, ids asked)."""
    S = S0.clone().requires_grad_(True)
    asked = []

    def score(ids):
        asked.append(ids.clone())
        return S.gather(1, ids)

    def rhat(ids):
        return RHAT5.gather(1, ids)

    ctx = HeadContext(3, None, MethodConfig(), torch.Generator().manual_seed(0), L5, reward=rhat)
    return get_method("dr_poxm").head_loss(score, dr_batch(), ctx), S, asked


@pytest.mark.parametrize("peaked", [False, True])
def test_dr_poxm_loss_matches_hand_computation(peaked):
    S0 = torch.tensor([[0.3, -0.2, 1.1, 0.5, -0.7, 2.0, 0.0],
                       [-0.4, 0.9, 0.2, 3.0, 0.1, -1.3, 0.6]], dtype=torch.float64)
    if peaked:   # the first logged pick of instance 0 carries almost all the mass of Phi
        S0[0, 1] = 40.0
    loss, S, asked = library_dr_loss(S0)
    S_ref = S0.clone().requires_grad_(True)
    ref = hand_dr_loss(S_ref, RHAT5)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-12)
    # the scorer was asked for Phi^3 only
    assert len(asked) == 1 and torch.equal(asked[0], torch.tensor(CAND5)[:, :3])
    loss.backward()
    ref.backward()
    assert torch.isfinite(S.grad).all()
    torch.testing.assert_close(S.grad, S_ref.grad, rtol=1e-9, atol=1e-12)
    outside = torch.ones_like(S0, dtype=torch.bool)
    outside.scatter_(1, torch.tensor(CAND5)[:, :3], False)
    assert (S.grad[outside] == 0).all()       # logged actions outside Phi (label 0 / label 1) get no gradient


def test_dr_poxm_hand_value_spot_check():
    """One term by plain arithmetic: instance 1, position 1 (earlier pick outside Phi, not subtracted)."""
    S0 = torch.zeros(2, L5, dtype=torch.float64)      # uniform over Phi: pi = 1/3 everywhere
    ref = hand_dr_loss(S0, RHAT5).item()
    # inst 0: j0 E = mean(r3,r1,r4) = (0.4+0.2+0.5)/3, w = (1/3)/0.4, r - rhat = 1 - 0.2
    #         j1 E = mean(r3, r4) = 0.45, w = 0 (label 0 outside)
    # inst 1: j0 E = mean(r2,r0,r5) = (0.7+0.9+0.4)/3, w = 0 (label 1 outside)
    #         j1 E = same, w = (1/3)/0.5, r - rhat = 1 - 0.4
    v = ((1.1 / 3 + (1 / 3) / 0.4 * 0.8) + 0.45 + (2.0 / 3) + (2.0 / 3 + (1 / 3) / 0.5 * 0.6))
    assert ref == pytest.approx(-v / 2, rel=1e-12)
    assert library_dr_loss(S0)[0].item() == pytest.approx(-v / 2, rel=1e-12)


# --------------------------------------------------------------------------------- 6. protocol tag

def test_protocol_name_strings():
    assert all(getattr(TrainingConfig(), k) == v for k, v in PAPER_PROTOCOL.items())
    assert protocol_name(TrainingConfig()) == "paper"
    assert protocol_name(TrainingConfig(epochs=3, hidden=8, batch_size=7, weight_decay=0.1)) == "paper"
    assert protocol_name(TrainingConfig(init="logging")) == "paper+init=logging"
    assert protocol_name(TrainingConfig(translation="reward")) == "paper+translation=reward"
    assert protocol_name(TrainingConfig(policy="linear")) == "paper+policy=linear"
    assert protocol_name(TrainingConfig(network_inputs="sparse+encoder")) == "paper+network_inputs=sparse+encoder"
    assert protocol_name(TrainingConfig(lr_is=1e-3)) == "paper+lr_is=0.001"
    assert protocol_name(TrainingConfig(init="logging", policy="linear", translation="reward")) == \
        "paper+policy=linear,init=logging,translation=reward"


# --------------------------------------------------------------------------------- 7. end-to-end skyline

@pytest.mark.parametrize("inputs", ["sparse", "sparse+encoder"])
def test_end_to_end_policy_trains_every_layer_of_the_methods_architecture(inputs):
    """skyline_e2e is the methods' architecture (training.network_inputs) with every learned layer trained:
    with the sparse input only there is no encoder in it; with sparse+encoder a fresh encoder is trained."""
    prep = tiny_prepared()
    cfg = tiny_config({"skyline_e2e": {"lr": 0.01}}, epochs=1, hidden=8, network_inputs=inputs)
    spec = trial_specs(cfg, "method")[0]
    with torch.no_grad():
        heads, _ = _build_heads(cfg, spec, prep, CPU)
    head = next(h for h in heads if h.spec.method == "skyline_e2e")
    pol = head.policy
    assert isinstance(pol, EndToEndPolicy)
    before = {n: p.detach().clone() for n, p in pol.named_parameters()}
    encoder_params = ("encoder.bag.weight", "encoder.bias", "encoder.norm.weight", "U.weight")
    assert all((n in before) == (inputs == "sparse+encoder") for n in encoder_params)
    _train_epoch(cfg, spec, prep, heads, 1, CPU)
    trained = ("V.weight", "c") + (encoder_params if inputs == "sparse+encoder" else ())
    for name in trained:
        assert not torch.equal(dict(pol.named_parameters())[name], before[name]), name
    # features_of: deterministic, leaves the module's mode alone, and equals a plain computation
    pol.train()
    rows = np.array([0, 5, 3, 17, 60])
    f1 = pol.features_of(prep.Z_train, prep.X_train, rows)
    f2 = pol.features_of(prep.Z_train, prep.X_train, rows)
    assert pol.training
    np.testing.assert_array_equal(f1, f2)
    Xn = normalised_dense(prep.X_train[rows])
    expect = Xn @ pol.V.weight + pol.c
    if inputs == "sparse+encoder":
        enc = pol.encoder
        g = F.layer_norm(torch.tanh(Xn @ enc.bag.weight + enc.bias), (enc.bias.shape[0],), enc.norm.weight,
                         enc.norm.bias, enc.norm.eps)
        expect = expect + g @ pol.U.weight.T
    np.testing.assert_allclose(f1, expect.detach().numpy(), rtol=0, atol=1e-5)
    # z from the batch is not read: any Z gives the same features
    np.testing.assert_array_equal(pol.features_of(prep.Z_train * 0 + 3.0, prep.X_train, rows), f1)
