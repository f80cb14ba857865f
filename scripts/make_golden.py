#!/usr/bin/env python
"""Golden values: a tiny committed fixture and the numbers today's code computes on it.

    .venv/bin/python scripts/make_golden.py            # rewrite tests/golden/{fixture.npz, expected.json}
    .venv/bin/python scripts/make_golden.py --check    # recompute and compare (what tests/poxm_core/training/test_golden.py does)

Why: the trainer, the estimators and the metrics are otherwise checked by hand values on toy inputs
and by self-consistency (resume = uninterrupted, grouped = alone). A change that moves every number
consistently (a refactor for speed, a new kernel) passes those; it does not pass a comparison with
numbers written down before the change. Regenerate only when a change of the numbers is intended,
say which values moved and why in expected.json's "history" list, and in the commit.

The fixture (tests/golden/fixture.npz) is the arrays of one `Prepared` (a few hundred instances,
L = 24 labels, K = 12 candidates, slates of 3), built once from seed 20210 by the hand-built
generator of tests/trial_fixtures.py and then frozen: later edits of that generator do not move the
golden values. The expected values (tests/golden/expected.json) are, for the fixture:
  estimators  every registered estimator on the validation log through its `estimate_on` hook (so a
              new estimator is recorded with its own weights and arrays), for a fixed target policy
              (softmax of the fixture's logging head at temperature 0.5 on C(x), and on Phi^4 for the
              selector-support estimators: sIS, MIPS, OffCEM; label clusters: label id modulo 4)
  metrics     greedy and stochastic metrics of the logging policy on the test split
  training    every method trained 2 epochs (one trial, all heads): its final result rows and, per
              trained head, a few output-layer entries and the norms of W and b
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
SEED = 20210
# the fixture's shape: enough instances for stable estimates, small enough for a fast test
SHAPE = dict(n_tr=300, n_te=120, d=8, L=24, K=12, ell=3, T=1.0)
EPOCHS = 2
# methods and grids of the training golden (every built-in method; small grids)
METHODS = {
    "logging": {},
    "dm": {"lr": 0.01},
    "banditnet": {"lam": [0.5], "lr": 0.01},
    "pm_banditnet": {"p": [4], "lam": [0.5], "lr": 0.01},
    "poxm": {"p": [4], "lam": [0.5], "lr": 0.01},
    "dr_poxm": {"p": [4], "lr": 0.01},
    "wpoxm": {"p": [4], "lam": [0.5], "lr": 0.01},
    "skyline": {"lr": 0.01},
    "skyline_e2e": {"lr": 0.01},
}
TRAINING = {"epochs": EPOCHS, "batch_size": 32, "mc_slates": 8, "eval_max_support": 16, "hidden": 16}
# output-layer entries recorded per trained head: W[:ROWS, :COLS] and b[:ROWS]
ROWS, COLS = 3, 4


# ------------------------------------------------------------------------------------- fixture

_LOG_FIELDS = ("instance", "actions", "cand_pos", "q", "rho", "rewards")


def make_fixture():
    """The fixture as a Prepared, from the hand-built generator of tests/trial_fixtures.py."""
    sys.path.insert(0, str(ROOT / "tests"))
    from trial_fixtures import tiny_prepared

    return tiny_prepared(seed=SEED, dataset="golden", variant="A", **SHAPE)


def save_fixture(prep, path: Path) -> None:
    arrays = {"Z_train": prep.Z_train, "Z_test": prep.Z_test, "W": prep.W, "b": prep.b,
              "inv_propensity": prep.inv_propensity,
              "cand_train": prep.policy_train.cand, "rho_train": prep.policy_train.rho,
              "cand_test": prep.policy_test.cand, "rho_test": prep.policy_test.rho}
    for split in ("train", "val"):
        log = getattr(prep, f"log_{split}")
        arrays.update({f"log_{split}_{k}": getattr(log, k) for k in _LOG_FIELDS})
    for name in ("Y_train", "Y_test", "X_train", "X_test"):
        m = getattr(prep, name).tocsr()
        arrays.update({f"{name}_data": m.data, f"{name}_indices": m.indices, f"{name}_indptr": m.indptr,
                       f"{name}_shape": np.asarray(m.shape)})
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def load_fixture(path: Path = GOLDEN / "fixture.npz"):
    """The committed fixture as a Prepared (dataset 'golden', variant 'A', seed SEED)."""
    from poxm_core.bandit.log import BanditLog
    from poxm_core.prepare.prepared import Prepared, VariantPolicy

    a = np.load(path)
    csr = {n: sp.csr_matrix((a[f"{n}_data"], a[f"{n}_indices"], a[f"{n}_indptr"]), shape=tuple(a[f"{n}_shape"]))
           for n in ("Y_train", "Y_test", "X_train", "X_test")}
    logs = {s: BanditLog(*(a[f"log_{s}_{k}"] for k in _LOG_FIELDS)) for s in ("train", "val")}
    return Prepared(dataset="golden", variant="A", seed=SEED, Z_train=a["Z_train"], Z_test=a["Z_test"],
                    W=a["W"], b=a["b"], policy_train=VariantPolicy(a["cand_train"], a["rho_train"]),
                    policy_test=VariantPolicy(a["cand_test"], a["rho_test"]), log_train=logs["train"],
                    log_val=logs["val"], inv_propensity=a["inv_propensity"], **csr)


# ------------------------------------------------------------------------------------- values

GOLDEN_CLUSTERS = 4      # the estimators' label clusters on the fixture: label id modulo 4 (fixed, not fitted)


def estimator_log(prep):
    """The validation log as the estimators see it (`ValidationLog`), for a fixed target policy: softmax
    of the logging head's logits at temperature 0.5 on C(x) (support 'policy') and on Phi^4 ('selector'),
    DR's terms of a fixed reward model rhat = sigmoid(logit - 1), and the arrays estimators may need."""
    import torch

    from poxm_core.estimators import (ValidationLog, pl_conditional_table_torch, pl_expectations,
                                      pl_log_conditionals, selector_pos)

    log = prep.log_val
    inst = log.instance
    cand = prep.policy_train.cand[inst]
    logits = (prep.Z_train[inst].astype(np.float64) @ prep.W.T.astype(np.float64) + prep.b)
    s = np.take_along_axis(logits, cand, axis=1) / 0.5
    rhat = 1.0 / (1.0 + np.exp(-(np.take_along_axis(logits, cand, axis=1) - 1.0)))
    pos4 = selector_pos(log.cand_pos, 4)
    arrays = {"actions": log.actions, "cand_pos": log.cand_pos, "candidates": cand,
              "rho_candidates": prep.policy_train.rho[inst].astype(np.float64),
              "inv_propensity": prep.inv_propensity, "action_embedding": prep.W,
              "action_cluster": np.arange(prep.W.shape[0]) % GOLDEN_CLUSTERS,
              "pi_selector": pl_conditional_table_torch(torch.tensor(s[:, :4]), torch.tensor(pos4)).numpy(),
              "rhat_candidates": rhat}
    return ValidationLog({"policy": pl_log_conditionals(s, log.cand_pos), "selector": pl_log_conditionals(s[:, :4], pos4)},
                         log.q.astype(np.float64), log.rewards.astype(np.float64),
                         {"dm_term": pl_expectations(s, rhat, log.cand_pos),
                          "rhat_logged": np.take_along_axis(rhat, log.cand_pos, axis=1)}, arrays)


def estimator_values(prep) -> dict[str, dict[str, float]]:
    """{estimator name: Estimate.as_dict()} for every registered estimator, each through its own hook
    `estimate_on` (its support, its weights, its aux and `needs` arrays), as the trainer calls it; plus
    'sis@phi4', sIS's arithmetic on the Phi^4 weights (kept from before 'sis' went through the hook)."""
    from poxm_core.estimators import ESTIMATORS, importance_weights

    log = estimator_log(prep)
    out = {name: cls().estimate_on(log).as_dict() for name, cls in ESTIMATORS.items()}
    out["sis@phi4"] = ESTIMATORS["sis"]().estimate(importance_weights(log.logpi["selector"], log.q), log.r).as_dict()
    return out


def metric_values(prep) -> dict[str, float]:
    """Greedy (P, nDCG, PSP) and stochastic (R, nDCR, PSR + MC se) metrics of rho on the test split."""
    from poxm_core.metrics.ranking import greedy_metrics, stochastic_metrics

    pol = prep.policy_test
    out = greedy_metrics(prep.Y_test, pol.cand[:, :5], prep.inv_propensity, (1, 3, 5))
    out.update(stochastic_metrics(prep.Y_test, pol.cand, pol.rho, prep.inv_propensity, (1, 3, 5), n_slates=16, seed=7))
    return out


def training_values(prep, out_dir: Path) -> dict:
    """One trial with every method of METHODS: final rows {head key: {split/metric: value}} and the
    trained output layers {head key: {W: rows, b: rows, W_norm, b_norm}} from the last checkpoint."""
    from poxm_core.config.schema import load_config
    from poxm_core.training import run_trial, trial_specs
    from poxm_core.training.checkpoint import latest_checkpoint, load_checkpoint

    cfg = load_config(data={"name": "golden", "seeds": [SEED], "device": "cpu",
                            "datasets": [{"name": "golden", "variants": [{"name": "A", "alpha": 0.5}]}],
                            "methods": METHODS, "training": TRAINING, "group_by": "seed"})
    spec = trial_specs(cfg, "seed")[0]
    df = run_trial(cfg, spec, prep, out_dir, progress=False)
    rows: dict[str, dict[str, float]] = {}
    for r in df[df["final"]].itertuples(index=False):
        key = f"{r.method}/p={'none' if r.p < 0 else int(r.p)}/lam={'none' if r.lam != r.lam else repr(float(r.lam))}"
        rows.setdefault(key, {})[f"{r.split}/{r.metric}"] = float(r.value)
    state = load_checkpoint(latest_checkpoint(out_dir), "cpu")
    heads = {}
    for key, st in sorted(state["heads"].items()):
        W, b = st["W"].double().numpy(), st["b"].double().numpy()
        heads[key] = {"W": W[:ROWS, :COLS].tolist(), "b": b[:ROWS].tolist(),
                      "W_norm": float(np.linalg.norm(W)), "b_norm": float(np.linalg.norm(b))}
    return {"rows": rows, "heads": heads}


def compute(prep, out_dir: Path, training: bool = True) -> dict:
    vals = {"estimators": estimator_values(prep), "metrics": metric_values(prep)}
    if training:
        vals["training"] = training_values(prep, out_dir)
    return vals


# ------------------------------------------------------------------------------------- compare

# Tolerances. Estimators and metrics are float64 NumPy on fixed inputs: only summation order may
# differ. Training runs in float32 through 2 epochs of Adam: a reordered sum moves the last bits and
# Adam carries that on, so the training golden allows a relative 1e-4 (atol 1e-5 near 0).
TOL = {"estimators": (1e-9, 1e-12), "metrics": (1e-9, 1e-12), "training": (1e-4, 1e-5)}


def _flat(d, prefix=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flat(v, f"{prefix}{k}/" if prefix or k else k)
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _flat(v, f"{prefix}{i}/")
    else:
        yield prefix.rstrip("/"), d


def compare(expected: dict, got: dict, sections=None) -> list[str]:
    """Lines naming every expected value that `got` lacks or differs from beyond the section's tolerance."""
    bad = []
    for section in sections or [s for s in TOL if s in expected]:
        rtol, atol = TOL[section]
        have = dict(_flat(got.get(section, {})))
        for key, want in _flat(expected[section]):
            if key not in have:
                bad.append(f"{section}/{key}: missing (expected {want!r})")
                continue
            v = have[key]
            if isinstance(want, float) and math.isnan(want):
                ok = isinstance(v, float) and math.isnan(v)
            else:
                ok = math.isclose(v, want, rel_tol=rtol, abs_tol=atol)
            if not ok:
                bad.append(f"{section}/{key}: got {v!r}, expected {want!r} (rtol {rtol}, atol {atol})")
    return bad


def _commit() -> str:
    """HEAD of the repository (or $POXM_GOLDEN_COMMIT when generated from an exported tree of a commit)."""
    import os

    if os.environ.get("POXM_GOLDEN_COMMIT"):
        return os.environ["POXM_GOLDEN_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed values instead of writing")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.check:
        prep = load_fixture()
        with tempfile.TemporaryDirectory() as tmp:
            bad = compare(json.loads((GOLDEN / "expected.json").read_text()), compute(prep, Path(tmp)))
        print("\n".join(bad) or "golden values: all equal within tolerance")
        return 1 if bad else 0
    save_fixture(make_fixture(), GOLDEN / "fixture.npz")
    prep = load_fixture()          # the values are computed from the fixture as the test will read it
    with tempfile.TemporaryDirectory() as tmp:
        vals = compute(prep, Path(tmp))
    history = json.loads((GOLDEN / "expected.json").read_text()).get("history", []) \
        if (GOLDEN / "expected.json").exists() else []
    vals = {"generated_from": _commit(), "history": history, "seed": SEED, "shape": SHAPE, "epochs": EPOCHS, **vals}
    (GOLDEN / "expected.json").write_text(json.dumps(vals, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN / 'fixture.npz'} and {GOLDEN / 'expected.json'} (code at {vals['generated_from']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
