"""The batched engine (training/batched.py, `training.batched_heads`) trains every head as the
sequential loop does: same batches, same steps; parameters after several steps agree with the
sequential engine's in float64 to round-off, and in float32 within a tight tolerance, per method kind."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from poxm_core.methods.registry import METHODS
from poxm_core.training.batched import BatchedHeads, assign
from poxm_core.training.command import pick_trial
from poxm_core.training.epoch import engine_heads, train_data_for, train_epoch
from poxm_core.training.trainer import run_trial
from poxm_core.training.trial_setup import REWARD_KEY, build_heads
from tests.trial_fixtures import tiny_config, tiny_prepared

PREP = tiny_prepared(n_tr=120, L=40, K=16)
GRID = {"logging": {},
        "dm": {"lr": 0.01},
        "banditnet": {"lam": [0.5, 0.9], "lr": 0.01},
        "pm_banditnet": {"p": [4, 8], "lam": [0.5], "lr": 0.02},
        "poxm": {"p": [4, 8], "lam": [0.5, 0.9], "lr": 0.01},
        "wpoxm": {"p": [4, 8], "lam": [0.5], "lr": 0.03},
        "dr_poxm": {"p": [4, 8], "lr": 0.01},
        "skyline": {"lr": 0.01}}
# the sampled softmax (k < L, so negatives repeat and collide with logged actions: the masking is exercised)
SAMPLED = {"banditnet": {"lam": [0.5, 0.9], "lr": 0.01, "softmax": "sampled", "n_negatives": 12},
           "pm_banditnet": {"p": [4, 8], "lam": [0.5], "lr": 0.02, "softmax": "sampled", "n_negatives": 12}}


def grid_of(name: str) -> dict:
    """A method's small grid: GRID's where it has one, else from what the registry says the method uses
    (sizes {4, 8} under its size key if `uses_p`, lam 0.5 if `uses_lam`, lr 0.01), so a new method needs no
    entry here."""
    if name in GRID:
        return GRID[name]
    m = METHODS[name]
    return {"lr": 0.01, **({m.size_key: [4, 8]} if m.uses_p else {}), **({"lam": [0.5]} if m.uses_lam else {})}


# Every built-in method that trains on the shared policy network (not one with its own architecture, the
# end-to-end skyline): each is checked batched against its sequential run, read from the registry.
BATCHED_METHODS = sorted(n for n, m in METHODS.items()
                         if m.trains and m.policy is None and type(m).__module__.startswith("poxm_core."))


def _to64(heads, stacks, data) -> None:
    """Every trained tensor and every float input of the batches in float64."""
    for h in heads:
        if h.trains:
            o, a = h.policy.out, h.policy.out_opt
            o.W, o.b = o.W.double(), o.b.double()
            a.m_W, a.v_W, a.m_b, a.v_b = a.m_W.double(), a.v_W.double(), a.m_b.double(), a.v_b.double()
            h.policy.double()      # a policy's own dense layers (the end-to-end skyline), in place
    for st in stacks.values():
        for n, p in st.named_parameters():
            p.data = p.data.double()
            st.moments[n] = tuple(m.double() for m in st.moments[n])
        st.lr = st.lr.double()
    for k in ("q", "rewards", "inv_prop_actions", "Z"):
        setattr(data, k, getattr(data, k).double())
    if data.X is not None:
        data.X.weights = data.X.weights.double()


def _train(methods: dict, batched: bool, epochs: int = 2, f64: bool = False, policy: str = "network"):
    cfg = tiny_config(methods, epochs=epochs, batched_heads=batched, policy=policy)
    spec = pick_trial(cfg)
    dev = torch.device("cpu")
    heads, stacks = build_heads(cfg, spec, PREP, dev)
    data = train_data_for(PREP, heads, dev)
    if f64:
        _to64(heads, stacks, data)
    reward = next(h for h in heads if h.key == REWARD_KEY)
    two_phase = any(h.method.needs_reward_model for h in heads)
    others = [h for h in heads if h is not reward] if two_phase else heads
    losses = []
    if two_phase:
        for e in range(1, epochs + 1):
            train_epoch(cfg, spec, PREP, [reward], e, dev, None, data)
    for e in range(1, epochs + 1):
        losses.append(train_epoch(cfg, spec, PREP, others, e, dev, reward, data))
    state = {h.key: (h.policy.out.W.clone(), h.policy.out.b.clone(), h.policy.out_opt.m_W.clone(),
                     h.policy.out_opt.v_b.clone(), h.policy.out_opt.step_count) for h in heads if h.trains}
    state["stacks"] = {g: [p.detach().clone() for p in st.parameters()] for g, st in stacks.items()}
    return state, losses, data


def _compare(a, b, rtol, atol) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if k == "stacks":
            for g in a[k]:
                for x, y in zip(a[k][g], b[k][g]):
                    torch.testing.assert_close(x, y, rtol=rtol, atol=atol)
            continue
        *ta, ca = a[k]
        *tb, cb = b[k]
        assert ca == cb, k
        for x, y in zip(ta, tb):
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("method", BATCHED_METHODS + [f"{n}-sampled" for n in SAMPLED])
def test_batched_equals_sequential_per_method_float64(method):
    name, _, sampled = method.partition("-")
    methods = {"logging": {}, "dm": GRID["dm"], name: SAMPLED[name] if sampled else grid_of(name)}
    seq, lseq, _ = _train(methods, False, epochs=1, f64=True)      # one epoch: 8 steps of every head
    bat, lbat, data = _train(methods, True, epochs=1, f64=True)
    assert name in " ".join(engine_heads(data)["batched"]) and not engine_heads(data)["sequential"]
    _compare(seq, bat, rtol=1e-10, atol=1e-12)
    for x, y in zip(lseq, lbat):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k] == pytest.approx(y[k], rel=1e-10, abs=1e-12)
    # the heads moved (a test on untouched parameters could not fail)
    W0 = {h.key: h.policy.out.W.double() for h in build_heads(tiny_config(methods, batched_heads=True), pick_trial(
        tiny_config(methods)), PREP, torch.device("cpu"))[0] if h.trains}
    assert all(float((bat[k][0] - W0[k]).abs().max()) > 1e-4 for k in W0)


@pytest.mark.slow
def test_batched_equals_sequential_every_method_float32():
    seq, lseq, _ = _train(GRID, False)
    bat, lbat, data = _train(GRID, True)
    assert sorted(engine_heads(data)["batched"]) == sorted(k for k in seq if k != "stacks")
    assert not engine_heads(data)["sequential"]
    # float32: the summation order of a few reductions differs; Adam's m / sqrt(v) turns a round-off
    # difference of a near-zero gradient into at most a small fraction of one step (lr 0.01-0.03, 12 steps)
    _compare(seq, bat, rtol=1e-4, atol=2e-5)
    for x, y in zip(lseq, lbat):
        for k in x:
            assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6)


def test_linear_policy_batched_equals_sequential():
    methods = {"logging": {}, "dm": GRID["dm"], "poxm": GRID["poxm"], "banditnet": GRID["banditnet"]}
    seq, _, _ = _train(methods, False, epochs=1, f64=True, policy="linear")
    bat, _, data = _train(methods, True, epochs=1, f64=True, policy="linear")
    assert len(engine_heads(data)["batched"]) == 7
    _compare(seq, bat, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_unsupported_heads_fall_back_in_the_same_batches():
    methods = {"logging": {}, "dm": GRID["dm"], "poxm": {"p": [4], "lam": [0.5], "lr": 0.01},
               "skyline_e2e": {"lr": 0.01}}
    seq, _, _ = _train(methods, False, f64=True)
    bat, _, data = _train(methods, True, f64=True)
    assert sorted(engine_heads(data)["sequential"]) == ["skyline_e2e/p=none/lam=none"]
    assert sorted(engine_heads(data)["batched"]) == ["dm/p=none/lam=none", "poxm/p=4/lam=0.5"]
    _compare(seq, bat, rtol=1e-10, atol=1e-12)


def test_engine_touches_only_each_heads_rows():
    """A POXM head's step reads and writes only the rows of Phi^p of the batch (its own rows, offset by k L)."""
    cfg = tiny_config({"logging": {}, "dm": GRID["dm"], "poxm": {"p": [2, 4], "lam": [0.5], "lr": 0.01}},
                      batched_heads=True)
    heads, _ = build_heads(cfg, pick_trial(cfg), PREP, torch.device("cpu"))
    chosen, rest = assign([h for h in heads if h.trains])
    assert not rest
    eng = BatchedHeads(chosen)
    assert eng.W.shape == (3, PREP.n_labels, cfg.training.hidden)
    # heads' tensors are views of the stacked ones
    assert all(h.policy.out.W.data_ptr() == eng.W[k].data_ptr() for k, h in enumerate(eng.heads))


@pytest.mark.slow
def test_trial_rows_batched_on_vs_off(tmp_path):
    """A whole trial (validation estimates, test metrics) with the key on equals the key off within float noise."""
    methods = {k: GRID[k] for k in ("logging", "dm", "poxm", "wpoxm", "pm_banditnet")}
    off = run_trial(tiny_config(methods, epochs=2), pick_trial(tiny_config(methods)), PREP, tmp_path / "off",
                    progress=False)
    on = run_trial(tiny_config(methods, epochs=2, batched_heads=True), pick_trial(tiny_config(methods)), PREP,
                   tmp_path / "on", progress=False)
    pd.testing.assert_series_equal(off["value"], on["value"], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_static_batched_step_equals_eager(tmp_path, monkeypatch):
    """The sync-free batched step of the CUDA-graph loop (static_unique rows, device step counters), run
    here on CPU without a graph, gives the eager sequential trial's numbers within float tolerance."""
    import numpy as np

    import poxm_core.training.epoch as epoch_mod

    methods = {k: GRID[k] for k in ("logging", "dm", "poxm", "wpoxm", "pm_banditnet", "banditnet")}
    spec = pick_trial(tiny_config(methods))
    eager = run_trial(tiny_config(methods, epochs=2), spec, PREP, tmp_path / "eager", progress=False)
    calls = []
    orig = epoch_mod.GraphedSteps.run_epoch

    def counted(self, *a):
        calls.append(self.step.engine is not None)
        return orig(self, *a)
    monkeypatch.setattr(epoch_mod, "_graphable", lambda *a: True)
    monkeypatch.setattr(epoch_mod.GraphedSteps, "run_epoch", counted)
    static = run_trial(tiny_config(methods, epochs=2, batched_heads=True), spec, PREP, tmp_path / "static",
                       progress=False)
    assert calls == [True, True]
    np.testing.assert_allclose(static["value"].to_numpy(), eager["value"].to_numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cut, epochs", [(5, 1), pytest.param(0, 3, marks=pytest.mark.slow),
                                         pytest.param(5, 3, marks=pytest.mark.slow)])
def test_static_loop_draws_the_sampled_negatives_of_the_plain_steps(tmp_path, monkeypatch, cut, epochs):
    """The sync-free loop draws each sampled-softmax head's negatives for the whole epoch at its start;
    the trial's numbers equal the plain sequential trial's (same negatives step by step, including the
    eager last batch, and the generators' states carried into the next epoch). cut: rows cut from the fit log
    (96 rows, batches of 16: 0 leaves no shorter last batch, 5 one of 11). One epoch in the fast tier, three
    (the generators' states carried over) in the slow one."""
    import numpy as np

    import poxm_core.training.epoch as epoch_mod

    prep = PREP
    if cut:
        import dataclasses
        prep = dataclasses.replace(PREP, log_train=PREP.log_train.subset(np.arange(PREP.log_train.instance.shape[0] - cut)))
    methods = {"logging": {}, "dm": GRID["dm"], "poxm": GRID["poxm"], **SAMPLED}
    spec = pick_trial(tiny_config(methods))
    eager = run_trial(tiny_config(methods, epochs=epochs), spec, prep, tmp_path / "eager", progress=False)
    calls = []
    orig = epoch_mod.GraphedSteps.run_epoch

    def counted(self, *a):
        calls.append(sorted({h.method.name for h in self.step.engine.heads}))
        return orig(self, *a)
    monkeypatch.setattr(epoch_mod, "_graphable", lambda *a: True)
    monkeypatch.setattr(epoch_mod.GraphedSteps, "run_epoch", counted)
    static = run_trial(tiny_config(methods, epochs=epochs, batched_heads=True), spec, prep, tmp_path / "static",
                       progress=False)
    assert calls == [["banditnet", "dm", "pm_banditnet", "poxm"]] * epochs
    np.testing.assert_allclose(static["value"].to_numpy(), eager["value"].to_numpy(), rtol=1e-4, atol=1e-6)


def test_cpu_generator_draws_n_by_k_as_n_draws_of_k():
    """What `BatchedHeads.begin_epoch` relies on: one (n, k) randint from a CPU generator gives the same
    numbers, and leaves the generator in the same state, as n randint calls of k."""
    for L, k, n in ((670091, 1024, 5), (40, 12, 7), (2 ** 33, 8, 4)):
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        at_once = torch.randint(L, (n, k), generator=g1)
        one_by_one = torch.stack([torch.randint(L, (k,), generator=g2) for _ in range(n)])
        assert torch.equal(at_once, one_by_one)
        assert torch.equal(torch.randint(L, (k,), generator=g1), torch.randint(L, (k,), generator=g2))


@pytest.mark.slow
def test_batched_reproduces_golden_training_values(tmp_path, monkeypatch):
    """With the key on, every method's golden training values (tests/golden) hold within their tolerance."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    sp = importlib.util.spec_from_file_location("make_golden", root / "scripts" / "make_golden.py")
    golden = importlib.util.module_from_spec(sp)
    sp.loader.exec_module(golden)
    monkeypatch.setattr(golden, "TRAINING", {**golden.TRAINING, "batched_heads": True})
    expected = json.loads((golden.GOLDEN / "expected.json").read_text())
    got = {"training": golden.training_values(golden.load_fixture(), tmp_path)}
    assert golden.compare(expected, got, ["training"]) == []


def point_of(name: str) -> dict:
    """A method's first grid point (`grid_of` cut to one size and one lam): one head a method."""
    return {k: v[:1] if isinstance(v, list) else v for k, v in grid_of(name).items()}


# Every built-in method of the registry, trained or not, graph-safe or not (a new one needs no entry here)
GRAPH_METHODS = sorted(n for n, m in METHODS.items() if type(m).__module__.startswith("poxm_core."))


@pytest.mark.slow
def test_graph_loop_takes_every_registered_method(tmp_path, monkeypatch):
    """Every method of the registry, one head each, in the sync-free (CUDA-graph) loop, run here on CPU
    without a graph: the graph-safe ones in the batched step (a reward model's rhat computed inside the
    step for the methods that read one, the skyline's padded labels), the others (the end-to-end skyline,
    its own layers) in an eager pass of their own over the same batches. The trial's numbers equal the
    eager sequential trial's within float tolerance."""
    import numpy as np

    import poxm_core.training.epoch as epoch_mod
    from poxm_core.methods import REWARD_METHOD

    methods = {n: point_of(n) for n in GRAPH_METHODS}
    spec = pick_trial(tiny_config(methods))
    eager = run_trial(tiny_config(methods, epochs=2), spec, PREP, tmp_path / "eager", progress=False)
    calls = []
    orig = epoch_mod.GraphedSteps.run_epoch

    def counted(self, *a):
        eng = self.step.engine
        calls.append((sorted({h.method.name for h in eng.heads}) if eng is not None else None,
                      [h.key for h in self.step.heads],
                      self.rhat_of is not None, self.labels is not None))
        return orig(self, *a)
    monkeypatch.setattr(epoch_mod, "graphs_enabled", lambda device: True)
    monkeypatch.setattr(epoch_mod.GraphedSteps, "run_epoch", counted)
    static = run_trial(tiny_config(methods, epochs=2, batched_heads=True), spec, PREP, tmp_path / "static",
                       progress=False)
    in_graph = [n for n in GRAPH_METHODS if METHODS[n].trains and METHODS[n].graph_safe and n != REWARD_METHOD]
    assert {"dr_poxm", "potec", "skyline", "supervised_logs"} <= set(in_graph)       # the registry has them
    assert "skyline_e2e" in GRAPH_METHODS and "skyline_e2e" not in in_graph         # one eager pass at least
    reads_rhat = any(METHODS[n].needs_reward_model for n in in_graph)
    reads_labels = any(METHODS[n].needs_labels() for n in in_graph)
    # phase 1 (the reward model alone), then phase 2: every graph-safe head but the reward model in the graph
    phase2 = [c for c in calls if c[0] != [REWARD_METHOD]]
    assert len(calls) == 4 and len(phase2) == 2
    assert phase2[0] == (in_graph, [], reads_rhat, reads_labels)
    np.testing.assert_allclose(static["value"].to_numpy(), eager["value"].to_numpy(), rtol=1e-4, atol=1e-6)


def test_padded_labels_scatter_to_the_csr_targets():
    """The graph loop's padded label table gives the same 0/1 targets as the CSR rows it came from."""
    import numpy as np
    import scipy.sparse as sp

    from poxm_core.model.core import dense_targets
    from poxm_core.training.batches import padded_labels

    Y = sp.csr_matrix(np.array([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 1]], dtype=np.float32))
    pad = padded_labels(Y, torch.device("cpu"))
    assert pad.tolist() == [[1, 3, 4], [5, 5, 5], [0, 4, 5]]
    rows = torch.tensor([2, 0, 1])
    torch.testing.assert_close(dense_targets(pad.index_select(0, rows), torch.device("cpu"), 5),
                               dense_targets(Y[[2, 0, 1]], torch.device("cpu")))
    assert padded_labels(Y, torch.device("cpu"), max_bytes=8) is None
    assert padded_labels(None, torch.device("cpu")) is None
