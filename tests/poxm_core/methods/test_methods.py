"""Methods (docs/methods.md): registry, config validation, and one gradient step on toy problems with a known
direction; the row scorer and the row-wise Adam that keep POXM's step independent of L."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from poxm_core.config.schema import MethodConfig, load_config
from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.registry import get_estimator
from poxm_core.estimators.weights import importance_weights_torch
from poxm_core.methods import METHODS, Batch, HeadContext, get_method, head_grid, translated_loss
from poxm_core.methods.banditnet import BanditNetOptions
from poxm_core.methods.dm import DirectMethodOptions
from poxm_core.methods.poxm import POXMOptions
from poxm_core.policy.heads import HeadParams, RowAdam, RowScorer

L, D = 10, 3


def toy_batch(actions, cand_pos, q, rewards, cand, labels=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    B = len(actions)
    inv = torch.linspace(1.0, 3.0, L)
    a = torch.tensor(actions)
    return Batch(z=torch.randn(B, D, generator=g), actions=a, cand_pos=torch.tensor(cand_pos),
                 q=torch.tensor(q, dtype=torch.float32), rewards=torch.tensor(rewards, dtype=torch.float32),
                 cand=torch.tensor(cand), inv_prop_actions=inv[a], n_labels=L, labels=labels)


def toy_params(seed=1):
    g = torch.Generator().manual_seed(seed)
    return HeadParams(torch.randn(L, D, generator=g), torch.randn(L, generator=g) * 0.1)


def ctx(p=None, lam=None, seed=0, options=MethodConfig, **mc):
    # shift = lam: these tests check the translated objective sum w (r - shift) with shift written as lam
    return HeadContext(p, lam, options(**mc), torch.Generator().manual_seed(seed), L, shift=lam)


def step(method, params, batch, c, lr=0.05):
    """One loss + backward + RowAdam step; returns (loss, scorer)."""
    opt = RowAdam(tuple(params.W.shape), torch.device("cpu"), lr=lr)
    sc = RowScorer(params, batch.z)
    loss = get_method(method).head_loss(sc, batch, c)
    loss.backward()
    opt.step(params, sc)
    return loss, sc


def logits(params, z):
    return z @ params.W.T + params.b


# one instance: C(x) = [3, 1, 4, 0, 2, 9] (rho order); Phi^3 = {3, 1, 4}; logged slate y = (1, 0)
CAND = [[3, 1, 4, 0, 2, 9]]


# --------------------------------------------------------------------------------- registry

@pytest.mark.parametrize("name", sorted(METHODS))
def test_registry_entries_are_complete(name):
    m = get_method(name)
    assert m.name == name
    assert m.train_support in {"none", "logged", "all", "phi", "candidates", "clusters", "full labels"}
    assert m.test_policy in {"rho", "greedy", "softmax"}
    assert m.test_support(m.Options()) in {"rho", "phi", "candidates", "all"}
    assert (m.train_support == "none") == (not m.trains)
    sizes = {m.size_key: [5, 7]} if m.uses_p else {}        # the size axis under its own key (POTEC: k)
    grid = head_grid(name, m.Options(**sizes, lam=[0.8] if m.uses_lam else None))
    assert len(grid) == (2 if m.uses_p else 1)
    assert all((h.p is not None) == m.uses_p and (h.lam is not None) == m.uses_lam for h in grid)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_registry_rejects_unused_settings(name):
    m = get_method(name)
    if not m.uses_p:
        with pytest.raises(PoxmInputError, match=rf"methods\.{name}\.p"):
            m.validate(m.Options(p=[10]))
    elif m.size_key != "p":      # a size axis of its own: p is refused with the key to write instead
        with pytest.raises(PoxmInputError, match=rf"^methods\.{name}\.p: .*write methods\.{name}\.{m.size_key}: \[10\]$"):
            m.validate(m.Options(p=[10]))
    if not m.uses_lam:
        with pytest.raises(PoxmInputError, match=rf"methods\.{name}\.lam"):
            m.validate(m.Options(lam=[0.9]))
    for other, key, val in ((POXMOptions, "support", "candidates"), (BanditNetOptions, "softmax", "sampled"),
                            (BanditNetOptions, "n_negatives", 8)):
        if key not in m.Options.model_fields:    # an option of another method's class, set
            with pytest.raises(PoxmInputError, match=rf"methods\.{name}\.{key}: method '{name}' has no option"):
                m.validate(other(**{key: val}))
    if not m.trains:
        with pytest.raises(PoxmInputError, match=rf"methods\.{name}\.lr"):
            m.validate(m.Options(lr=1e-3))


# spot checks of known methods' options classes and their own keys; every registered method gets the
# structural checks below (a new one needs no entry here)
OPTIONS = {"logging": MethodConfig, "dm": DirectMethodOptions, "skyline": MethodConfig, "skyline_e2e": MethodConfig,
           "banditnet": BanditNetOptions, "pm_banditnet": BanditNetOptions,
           "poxm": POXMOptions, "wpoxm": POXMOptions, "dr_poxm": POXMOptions}
OWN_KEYS = {MethodConfig: set(), BanditNetOptions: {"softmax", "n_negatives"}, POXMOptions: {"support"},
            DirectMethodOptions: {"loss_on"}}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_has_its_options_class(name):
    """The options class is MethodConfig or a subclass with the keys every method has plus its own;
    a config entry with none of its own keys gives an instance of exactly that class."""
    opts = get_method(name).Options
    assert issubclass(opts, MethodConfig) and set(MethodConfig.model_fields) <= set(opts.model_fields)
    assert type(get_method(name).options(MethodConfig())) is opts
    if name in OPTIONS:
        assert opts is OPTIONS[name]
    if opts in OWN_KEYS:
        assert set(opts.model_fields) == set(MethodConfig.model_fields) | OWN_KEYS[opts]


def test_options_from_a_config_entry():
    # config keeps a method's own options as extras of the base class; the method builds its Options
    entry = MethodConfig.model_validate({"p": [3], "support": "candidates"})
    opts = get_method("poxm").options(entry)
    assert type(opts) is POXMOptions and opts.support == "candidates" and opts.p == [3]
    assert get_method("poxm").test_support(opts) == "candidates"
    assert get_method("poxm").options(MethodConfig()) == POXMOptions()
    with pytest.raises(PoxmInputError, match=r"methods\.dm\.support: method 'dm' has no option 'support' "
                                             r"\(its keys: p, lam, lr, init, loss_on\)"):
        get_method("dm").options(entry)


def test_unknown_method_names_nearest():
    with pytest.raises(PoxmInputError, match="did you mean 'poxm'"):
        get_method("pxom")


def test_bad_grid_values():
    with pytest.raises(PoxmInputError, match=r"methods\.poxm\.p"):
        get_method("poxm").validate(POXMOptions(p=[10, 10]))
    with pytest.raises(ValueError, match="finite number"):      # refused by the schema itself
        POXMOptions(lam=[float("nan")])
    with pytest.raises(PoxmInputError, match=r"methods\.poxm\.lam"):
        load_config(data={"name": "x", "datasets": [{"name": "d", "synthetic": {}, "variants": [{"name": "A", "alpha": 0.5}]}],
                          "methods": {"poxm": {"lam": [float("nan")]}}})


def test_default_grids_are_design_grids():
    assert [(h.p, h.lam) for h in head_grid("poxm")][:2] == [(10, 0.7), (10, 0.8)]
    assert len(head_grid("poxm")) == 16 and len(head_grid("banditnet")) == 4 and len(head_grid("dm")) == 1


# --------------------------------------------------------------------------------- objectives

def test_translated_loss_matches_the_translated_estimator():
    g = torch.Generator().manual_seed(3)
    logpi = torch.log(torch.rand(7, 4, generator=g))
    logpi[0, 1] = float("-inf")
    q = torch.rand(7, 4, generator=g) * 0.9 + 0.1
    r = (torch.rand(7, 4, generator=g) > 0.5).float()
    w = importance_weights_torch(logpi, q)
    ref = -get_estimator("translated", shift=0.8).value_torch(w, r)
    assert torch.allclose(translated_loss(logpi, q, r, 0.8), ref, atol=1e-6)


def test_poxm_step_raises_rewarded_action_and_leaves_outside_phi_untouched():
    b = toy_batch([[1, 0]], [[1, 3]], [[0.3, 0.4]], [[1.0, 0.0]], CAND)
    P = toy_params()
    W0, b0 = P.W.clone(), P.b.clone()
    s0 = logits(P, b.z)[0]
    loss, sc = step("poxm", P, b, ctx(p=3, lam=0.0))
    assert sc.rows.tolist() == [1, 3, 4]                          # Phi^3 only
    outside = [l for l in range(L) if l not in (3, 1, 4)]
    assert torch.equal(P.W[outside], W0[outside]) and torch.equal(P.b[outside], b0[outside])
    s1 = logits(P, b.z)[0]
    phi = [3, 1, 4]
    pi0, pi1 = torch.softmax(s0[phi], 0)[1], torch.softmax(s1[phi], 0)[1]
    assert pi1 > pi0                                              # the rewarded action gained mass in Phi


def test_poxm_gradient_matches_hand_formula():
    # one position inside Phi: loss = -(r - lam) pi(y)/q; d loss / d s_Phi = -(r - lam)/q * pi_y (e_y - pi)
    b = toy_batch([[4]], [[2]], [[0.25]], [[1.0]], CAND)
    P = toy_params()
    sc = RowScorer(P, b.z)
    loss = get_method("poxm").head_loss(sc, b, ctx(p=3, lam=0.3))
    loss.backward()
    s = logits(P, b.z)[0, [3, 1, 4]].double()
    pi = torch.softmax(s, 0)
    e = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    g_s = -(1.0 - 0.3) / 0.25 * pi[2] * (e - pi)                  # in label order 3, 1, 4
    # leaf rows are sorted label ids [1, 3, 4]; dlogit/db = 1
    assert torch.allclose(sc.leaf_b.grad.double(), g_s[[1, 0, 2]], atol=1e-6)
    assert torch.allclose(sc.leaf_W.grad.double(), torch.outer(g_s[[1, 0, 2]], b.z[0].double()), atol=1e-5)
    assert math.isclose(float(loss.detach()), float(-(0.7) * pi[2] / 0.25), rel_tol=1e-5)


def test_poxm_second_position_subtracts_the_logged_prefix():
    # y_1 = 3 (in Phi), y_2 = 1: pi(y_2 | y_1) = e^{s_1} / (e^{s_3} + e^{s_1} + e^{s_4} - e^{s_3})
    b = toy_batch([[3, 1]], [[0, 1]], [[0.5, 0.5]], [[0.0, 1.0]], CAND)
    P = toy_params()
    loss = get_method("poxm").head_loss(RowScorer(P, b.z, grad=False), b, ctx(p=3, lam=0.0))
    s = logits(P, b.z)[0].double()
    pi2 = torch.exp(s[1]) / (torch.exp(s[1]) + torch.exp(s[4]))
    assert math.isclose(float(loss), float(-pi2 / 0.5), rel_tol=1e-5)


def test_poxm_position_outside_phi_has_zero_weight_and_finite_gradient():
    b = toy_batch([[2]], [[4]], [[0.2]], [[1.0]], CAND)            # label 2 is rank 4: outside Phi^3
    P = toy_params()
    sc = RowScorer(P, b.z)
    loss = get_method("poxm").head_loss(sc, b, ctx(p=3, lam=0.5))
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert torch.all(sc.leaf_W.grad == 0) and torch.all(torch.isfinite(sc.leaf_W.grad))


def test_wpoxm_scales_the_poxm_gradient_by_inverse_propensity():
    b = toy_batch([[4]], [[2]], [[0.25]], [[1.0]], CAND)
    grads = {}
    for name in ("poxm", "wpoxm"):
        sc = RowScorer(toy_params(), b.z)
        get_method(name).head_loss(sc, b, ctx(p=3, lam=0.3)).backward()
        grads[name] = sc.leaf_b.grad
    assert torch.allclose(grads["wpoxm"], grads["poxm"] * b.inv_prop_actions[0, 0], atol=1e-6)


def test_banditnet_lowers_unrewarded_logged_action_when_lam_positive():
    b = toy_batch([[2]], [[4]], [[0.2]], [[0.0]], CAND)
    P = toy_params()
    W0 = P.W.clone()
    pi0 = torch.softmax(logits(P, b.z)[0], 0)[2]
    _, sc = step("banditnet", P, b, ctx(lam=0.8, options=BanditNetOptions))
    assert sc.rows is None                                        # full softmax: every label
    assert torch.softmax(logits(P, b.z)[0], 0)[2] < pi0
    assert not torch.equal(P.W[7], W0[7])                         # labels outside C(x) move too


def test_banditnet_full_gradient_matches_hand_formula():
    b = toy_batch([[7]], [[5]], [[0.5]], [[1.0]], CAND)
    P = toy_params()
    sc = RowScorer(P, b.z)
    get_method("banditnet").head_loss(sc, b, ctx(lam=0.0, options=BanditNetOptions)).backward()
    pi = torch.softmax(logits(P, b.z)[0].double(), 0)
    e = torch.zeros(L, dtype=torch.float64)
    e[7] = 1
    assert torch.allclose(sc.leaf_b.grad.double(), -pi[7] / 0.5 * (e - pi), atol=1e-6)


def test_pm_banditnet_drops_positions_outside_phi_and_equals_banditnet_inside():
    out = toy_batch([[2]], [[4]], [[0.2]], [[1.0]], CAND)
    sc = RowScorer(toy_params(), out.z)
    loss = get_method("pm_banditnet").head_loss(sc, out, ctx(p=3, lam=0.5, options=BanditNetOptions))
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.all(sc.leaf_W.grad == 0)
    inside = toy_batch([[1, 2]], [[1, 4]], [[0.3, 0.2]], [[1.0, 0.0]], CAND)
    pm = get_method("pm_banditnet").head_loss(RowScorer(toy_params(), inside.z, False), inside, ctx(p=3, lam=0.5, options=BanditNetOptions))
    one = toy_batch([[1]], [[1]], [[0.3]], [[1.0]], CAND)
    bn = get_method("banditnet").head_loss(RowScorer(toy_params(), one.z, False), one, ctx(lam=0.5, options=BanditNetOptions))
    assert math.isclose(float(pm), float(bn), rel_tol=1e-6)


def test_sampled_softmax_approaches_the_full_softmax():
    b = toy_batch([[1, 0], [5, 9]], [[1, 3], [0, 5]], [[0.3, 0.4], [0.5, 0.6]], [[1.0, 0.0], [1.0, 1.0]],
                  CAND * 2)
    full = get_method("banditnet").head_loss(RowScorer(toy_params(), b.z, False), b, ctx(lam=0.2, options=BanditNetOptions))
    samp = get_method("banditnet").head_loss(RowScorer(toy_params(), b.z, False), b,
                                        ctx(lam=0.2, options=BanditNetOptions, softmax="sampled", n_negatives=200000))
    assert math.isclose(float(samp), float(full), rel_tol=0.02)
    # the sampled step touches the logged rows and the sampled negatives only
    few = ctx(lam=0.2, options=BanditNetOptions, softmax="sampled", n_negatives=2, seed=5)
    sc = RowScorer(toy_params(), b.z)
    get_method("banditnet").head_loss(sc, b, few)
    neg = torch.randint(L, (2,), generator=torch.Generator().manual_seed(5))
    assert set(sc.rows.tolist()) == {1, 0, 5, 9} | set(neg.tolist())


def test_dm_moves_logged_rewards_toward_their_labels_only():
    b = toy_batch([[1, 0]], [[1, 3]], [[0.3, 0.4]], [[1.0, 0.0]], CAND)
    P = toy_params()
    W0 = P.W.clone()
    s0 = logits(P, b.z)[0]
    _, sc = step("dm", P, b, ctx())
    s1 = logits(P, b.z)[0]
    assert sc.rows.tolist() == [0, 1]
    assert s1[1] > s0[1] and s1[0] < s0[0]
    assert torch.equal(P.W[2:], W0[2:])


def test_skyline_raises_true_labels_and_lowers_the_rest():
    Y = sp.csr_matrix(np.eye(1, L, 6, dtype=np.float32))
    b = toy_batch([[1]], [[1]], [[0.3]], [[0.0]], CAND, labels=Y)
    P = toy_params()
    s0 = logits(P, b.z)[0]
    step("skyline", P, b, ctx())
    d = logits(P, b.z)[0] - s0
    assert d[6] > 0 and torch.all(d[torch.arange(L) != 6] < 0)
    with pytest.raises(PoxmInputError, match="skyline"):
        get_method("skyline").head_loss(RowScorer(P, b.z), toy_batch([[1]], [[1]], [[0.3]], [[0.0]], CAND), ctx())


def test_logging_head_is_rho_in_every_epoch_and_is_never_stepped(tmp_path):
    """The logging 'method' is the logging policy itself: in a trial beside a trained head its rows are
    epoch 0 and the same after 1 or 2 epochs (nothing of it trains; only its estimates through a reward
    model move, DR's and OffCEM's, whose reward model is the DM head trained beside), it has no training loss and no checkpointed
    parameters, while the trained head's rows do move with the epochs."""
    from tests.trial_fixtures import tiny_config, tiny_prepared
    from poxm_core.training import run_trial, trial_specs
    from poxm_core.training.checkpoint import latest_checkpoint, load_checkpoint

    prep = tiny_prepared()
    methods = {"logging": {}, "poxm": {"p": [4], "lam": [0.5], "lr": 0.05}}
    out = {}
    for E in (1, 2):
        cfg = tiny_config(methods, epochs=E)
        spec = trial_specs(cfg, "seed")[0]
        df = run_trial(cfg, spec, prep, tmp_path / f"e{E}", progress=False)
        out[E] = df[df["final"]].set_index(["method", "split", "metric"])["value"].sort_index()
        log_rows = df[df["method"] == "logging"]
        assert len(log_rows) and set(log_rows["epoch"]) == {0}
        assert not ((log_rows["split"] == "train") & (log_rows["metric"] == "loss")).any()
        state = load_checkpoint(latest_checkpoint(tmp_path / f"e{E}"), "cpu")
        assert not [k for k in state["heads"] if k.startswith("logging/")]
    a, b = out[1]["logging"], out[2]["logging"]
    # the estimators that read the reward model (DR, OffCEM: from the registry) move with its epochs
    from poxm_core.estimators import ESTIMATORS
    model_based = [cls.label for cls in ESTIMATORS.values() if "rhat_logged" in cls.aux_names]
    assert "DR" in model_based
    keep = ~a.index.get_level_values("metric").isin(model_based)
    assert len(a[keep]) > 10 and a[keep].equals(b[keep])
    assert not np.allclose(out[1]["poxm"].to_numpy(), out[2]["poxm"].to_numpy())


# --------------------------------------------------------------------------------- scorer / Adam

@pytest.mark.parametrize("ids", [[[0, 1], [1, 0]], [[0, 5, 9], [2, 7, 8]]])   # matmul path, gather path
def test_row_scorer_logits(ids):
    P = toy_params()
    z = torch.randn(2, D, generator=torch.Generator().manual_seed(2))
    ids = torch.tensor(ids)
    got = RowScorer(P, z, grad=False)(ids)
    ref = torch.stack([logits(P, z)[i, ids[i]] for i in range(2)])
    assert torch.allclose(got, ref, atol=1e-6)


def test_row_adam_dense_is_torch_adam_and_sparse_is_adam_on_the_rows():
    z = torch.randn(4, D, generator=torch.Generator().manual_seed(4))
    P = toy_params()
    Wt, bt = torch.nn.Parameter(P.W.clone()), torch.nn.Parameter(P.b.clone())
    ref = torch.optim.Adam([Wt, bt], lr=0.1, weight_decay=0.01)
    opt = RowAdam((L, D), torch.device("cpu"), lr=0.1, weight_decay=0.01)
    for _ in range(3):
        sc = RowScorer(P, z)
        (sc(None) ** 2).sum().backward()
        opt.step(P, sc)
        ref.zero_grad()
        ((z @ Wt.T + bt) ** 2).sum().backward()
        ref.step()
    assert torch.allclose(P.W, Wt, atol=1e-6) and torch.allclose(P.b, bt, atol=1e-6)
    # sparse: the same as Adam on the touched sub-matrix, the rest bit-identical
    P2 = toy_params()
    W0 = P2.W.clone()
    sub = torch.nn.Parameter(P2.W[[2, 5]].clone())
    ref2 = torch.optim.Adam([sub], lr=0.1)
    opt2 = RowAdam((L, D), torch.device("cpu"), lr=0.1)
    ids = torch.tensor([[2, 5], [5, 2], [2, 5], [5, 2]])
    sc = RowScorer(P2, z)
    sc(ids).sum().backward()
    opt2.step(P2, sc)
    ref2.zero_grad()
    (sub @ z.T).sum().backward()   # same gradient: each row receives sum_i z_i
    ref2.step()
    assert torch.allclose(P2.W[[2, 5]], sub, atol=1e-6)
    keep = [l for l in range(L) if l not in (2, 5)]
    assert torch.equal(P2.W[keep], W0[keep])


def test_graph_safety_is_declared_by_each_class_and_a_refusal_is_logged_once(caplog):
    """The CUDA-graph loop reads `graph_safe` from the method, not a list of names: every built-in loss
    declares it (the end-to-end skyline, with its own dense optimiser, does not); a subclass (a plugin's
    POXM with its own loss) does not inherit it, and a trial with such a head runs without the graph and
    says so once in the log. One by one (no batched engine), a head that reads every label or draws
    labels each step trains eagerly."""
    import logging
    from types import SimpleNamespace

    from poxm_core.methods.poxm import POXM
    from poxm_core.training import epoch

    builtin = {n: m for n, m in METHODS.items() if type(m).__module__.startswith("poxm_core.")}
    # read from the registry, not listed: every built-in loss on the shared network says for itself whether
    # it is safe; a method with its own architecture and optimiser (the end-to-end skyline) is not
    for n, m in builtin.items():
        if m.trains and m.policy is None:
            assert "graph_safe" in type(m).__dict__, f"{n} does not declare graph_safe"
        else:
            assert not m.graph_safe, n
    assert {"poxm", "wpoxm", "dm", "banditnet", "pm_banditnet", "dr_poxm", "skyline"} <= {
        n for n, m in builtin.items() if m.graph_safe}

    class MyPOXM(POXM):
        name = "my_poxm_plugin"

    assert POXM.graph_safe and not MyPOXM.graph_safe

    def head(method):
        return SimpleNamespace(method=method, mc=method.Options(),
                               policy=SimpleNamespace(dense_opt=None, reads_sparse=False, shared_stack=None))
    cuda = torch.device("cuda")    # only its type is read: no GPU needed
    assert epoch._graphable([head(POXM()), head(get_method("dm"))], False, cuda)
    assert not epoch._graphable([head(POXM()), head(get_method("banditnet"))], False, cuda)
    with caplog.at_level(logging.WARNING, logger=epoch.__name__):
        assert not epoch._graphable([head(POXM()), head(MyPOXM())], False, cuda)
        assert not epoch._graphable([head(MyPOXM())], False, cuda)
    said = [r for r in caplog.records if "my_poxm_plugin" in r.getMessage()]
    assert len(said) == 1 and "graph_safe" in said[0].getMessage()
