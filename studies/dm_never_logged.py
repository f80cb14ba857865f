"""How the Direct Method scores actions the log never shows: a per-epoch diagnostic.

DM (poxm_core/methods/dm.py) is a logistic reward model fitted on the logged (x, y_ij, r_ij) only; its
test-time policy is the greedy top-5 over C(x) by predicted reward. This script trains the project's DM
head (the trainer's own `build_heads` / `train_epoch`, the configured policy network) epoch by epoch
and reports, after each epoch:

  pick shares    of DM's greedy top-5 on the evaluation contexts, the share of labels that the whole
                 fit log never shows ("never", their output rows never get a gradient), shows 1-9
                 times ("rare") or 10+ times;
  rhat           mean predicted reward sigma(s) on the fit instances of: logged-and-rewarded,
                 logged-and-unrewarded pairs, and the candidates the log does not show for that
                 instance ("unlogged"; on the known-answer bandit also their TRUE mean probability);
  offlog top-5   share of DM's top-5 on the fit instances that the log does not show for that instance;
  |h|, sd(noise) mean norm of the hidden features and the spread of the never-logged rows' logits
                 around their bias (the part of their score that comes from the random init);
  value          test R@5 = P@5 x 100 (real data: test labels, measurement only) or the TRUE expected
                 clicks of the greedy slate x 100 / 5 (known-answer bandit), beside the logging policy's.
At the end: DM's picks by rho rank (share, hit rate), its mean predicted reward against the actual hit
rate by rho rank (calibration where the log is dense and where it is thin), and the labels it picks
most with their logged and rewarded counts. Ties among DM's scores go to the better rho rank here.

  python -m studies.dm_never_logged bibtex --variant T0.25 --seed 0         # ~1 min, 2-core CPU
  python -m studies.dm_never_logged known-answer --T 0.25 --n 5000
  python -m studies.dm_never_logged known-answer --L 200 --K 100 --noise 0.5 --bias-std 1.5 \
      --bias-mean -7 --weight-scale 3                                     # the long-tailed bandit of the docs
Variants of the start and fit (docs/protocol.md §7): --output-init zero (output weights at 0), --bias B
(every bias at B), --label-prior (each label's bias at the log-odds of its rewarded frequency per fit
instance), --never-last (the labels the fit log never shows at -50), --lr, --epochs.
The test split's labels are read to measure, never to choose anything.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poxm_core.bandit.known_answer import (greedy_slate_value, logging_value, make_world, pl_slate_value, sample_contexts,  # noqa: E402
                                           simulate_log)
from poxm_core.bandit.log import BanditLog  # noqa: E402
from poxm_core.config.schema import load_config  # noqa: E402
from poxm_core.prepare.prepared import Prepared, VariantPolicy  # noqa: E402
from poxm_core.training.epoch import train_data_for, train_epoch  # noqa: E402
from poxm_core.training.spec import TrialSpec  # noqa: E402
from poxm_core.training.trial_setup import REWARD_KEY, build_heads  # noqa: E402
from poxm_core.methods.head import HeadSpec  # noqa: E402


def _sig(s):
    return 1.0 / (1.0 + np.exp(-s))


def known_answer_prepared(T: float, n: int, seed: int, n_eval: int, **world):
    """A Prepared on the known-answer bandit (z = x, sparse input [x+, x-]) and the eval contexts."""
    world = make_world(temperature=T, seed=seed, **world)
    n_val = max(2, n // 9)
    ctx = sample_contexts(world, n + n_val, seed=seed * 1000 + 1)
    log = simulate_log(world, ctx, seed=seed * 1000 + 2)
    ev = sample_contexts(world, n_eval, seed=10_000 + seed)

    def blog(rows):
        return BanditLog(rows.astype(np.int64), log.actions[rows], log.cand_pos[rows], np.minimum(log.q[rows], 1.0),
                         np.minimum(log.rho[rows], log.q[rows]), log.rewards[rows].astype(np.float32))

    def xs(X):
        return sp.csr_matrix(np.hstack([np.maximum(X, 0), np.maximum(-X, 0)]).astype(np.float32))

    rng = np.random.default_rng(seed)
    Y_te = sp.csr_matrix((rng.random(ev.probs.shape) < ev.probs).astype(np.float32))
    L, m = world.L, world.m
    prep = Prepared(dataset="known", variant=f"T{T:g}", seed=seed, Z_train=ctx.X.astype(np.float32),
                    Z_test=ev.X.astype(np.float32), W=np.zeros((L, m), np.float32), b=np.zeros(L, np.float32),
                    policy_train=VariantPolicy(ctx.cand, np.exp(ctx.log_rho)),
                    policy_test=VariantPolicy(ev.cand, np.exp(ev.log_rho)),
                    log_train=blog(np.arange(n)), log_val=blog(np.arange(n, n + n_val)),
                    inv_propensity=np.ones(L), Y_test=Y_te, X_train=xs(ctx.X), X_test=xs(ev.X))
    return prep, ctx, ev


def known_answer_config(seed: int, variant: str, epochs: int = 20, lr: float | None = None):
    """The sweep config and trial of a DM head on `known_answer_prepared` (hidden width 32)."""
    cfg = load_config(data={"name": "ka", "seeds": [seed], "device": "cpu",
                            "datasets": [{"name": "known", "variants": [{"name": variant, "alpha": 0.2}]}],
                            "methods": {"dm": {"lr": lr} if lr else {}},
                            "training": {"epochs": epochs, "batch_size": 64, "hidden": 32}})
    return cfg, TrialSpec("known", variant, seed, (HeadSpec("dm"),))


def build_dm(cfg, spec, prep, device):
    """The trial's DM head, as the trainer builds it, and its device data."""
    with torch.no_grad():
        heads, _ = build_heads(cfg, spec, prep, device)
    dm = next(h for h in heads if h.key == REWARD_KEY)
    return dm, train_data_for(prep, heads, device)


def candidate_scores(dm, prep) -> np.ndarray:
    """(n_test, K) DM logits of the evaluation contexts' candidates, in rho order."""
    W, b = dm.policy.out.W.numpy(), dm.policy.out.b.numpy()
    cand = prep.policy_test.cand
    return np.einsum("nkd,nd->nk", W[cand], dm.policy.features_of(prep.Z_test, prep.X_test)) + b[cand]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="a dataset config name under configs/ (bibtex, delicious, ...) or 'known-answer'")
    ap.add_argument("--variant", default="T0.25")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--T", type=float, default=0.25, help="known-answer logging temperature")
    ap.add_argument("--n", type=int, default=5000, help="known-answer log size")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--output-init", choices=("default", "zero"), default="default")
    ap.add_argument("--bias", type=float, default=None, help="start every DM bias at this logit instead")
    ap.add_argument("--never-last", action="store_true",
                    help="start the bias of the labels the fit log never shows at -50 (ranked after all others)")
    ap.add_argument("--label-prior", action="store_true",
                    help="start each label's bias at the log-odds of its rewarded frequency per fit instance")
    ap.add_argument("--lr", type=float, default=None, help="DM's Adam rate (default training.lr_supervised)")
    ap.add_argument("--L", type=int, default=50, help="known-answer labels")
    ap.add_argument("--K", type=int, default=20, help="known-answer candidates")
    ap.add_argument("--noise", type=float, default=2.0, help="known-answer logging-score noise")
    ap.add_argument("--bias-std", type=float, default=0.5, help="known-answer spread of the labels' base logits")
    ap.add_argument("--bias-mean", type=float, default=-4.0, help="known-answer mean of the labels' base logits")
    ap.add_argument("--weight-scale", type=float, default=1.5, help="known-answer scale of the context effect")
    ap.add_argument("--cache-dir", default=None, help="prepare cache (default <runs_dir>/cache)")
    ap.add_argument("--every", type=int, default=1, help="report every k epochs")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    ka = a.data == "known-answer"
    if ka:
        prep, ctx, ev = known_answer_prepared(a.T, a.n, a.seed, 2000, L=a.L, K=a.K, noise=a.noise,
                                              bias_std=a.bias_std, bias_mean=a.bias_mean,
                                              weight_scale=a.weight_scale)
        cfg, spec = known_answer_config(a.seed, prep.variant, a.epochs or 20, a.lr)
    else:
        from poxm_core.prepare.pipeline import load_prepared
        ov = [f"methods={{dm: {{{f'lr: {a.lr}' if a.lr else ''}}}}}"] + ([f"training.epochs={a.epochs}"] if a.epochs else [])
        cfg = load_config(Path("configs") / f"{a.data}.yaml", ov)
        spec = TrialSpec(cfg.datasets[0].name, a.variant, a.seed, (HeadSpec("dm"),))
        prep = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, Path(a.cache_dir) if a.cache_dir else Path(cfg.runs_dir) / "cache")
    dm, data = build_dm(cfg, spec, prep, device)
    if a.output_init == "zero":
        dm.policy.out.W.zero_()
    if a.bias is not None:
        dm.policy.out.b.fill_(a.bias)
    if a.never_last:
        seen = np.bincount(prep.log_train.actions.ravel(), minlength=prep.n_labels) > 0
        dm.policy.out.b[torch.as_tensor(~seen)] = -50.0
    if a.label_prior:
        lt0 = prep.log_train
        rc = np.bincount(lt0.actions.ravel(), weights=lt0.rewards.ravel(), minlength=prep.n_labels)
        pr = (rc + 0.5) / (lt0.n + 1.0)
        dm.policy.out.b.copy_(torch.as_tensor(np.log(pr) - np.log1p(-pr), dtype=torch.float32))
    lt = prep.log_train
    L = prep.n_labels
    cnt = np.bincount(lt.actions.ravel(), minlength=L)
    never = cnt == 0
    Kc = prep.policy_test.cand.shape[1]
    # evaluation contexts: the test split (real) or fresh contexts (known answer)
    cand_te = prep.policy_test.cand
    print(f"{a.data} {spec.variant} seed {a.seed}: L={L}, K={Kc}, fit log n={lt.n}, logged reward rate "
          f"{lt.rewards.mean():.3f}; labels never logged {never.sum()} ({never.mean():.1%}), "
          f"1-9 times {((cnt > 0) & (cnt < 10)).sum()}; candidates of the eval contexts that are never-logged "
          f"labels {never[cand_te].mean():.1%}; output-init {a.output_init}")
    # fit instances: per-instance logged / not logged candidates
    inst = lt.instance
    cand_fit = prep.policy_train.cand[inst]                                   # (n, K)
    logged = (cand_fit[:, :, None] == lt.actions[:, None, :]).any(axis=2)     # (n, K)
    if ka:
        true_fit = np.take_along_axis(ctx.probs[inst], cand_fit, 1)
        v_rho = (logging_value(ev, 5) if Kc <= 24 else            # true R@5 of rho
                 pl_slate_value(ev.log_rho, ev.cand_probs, 5, method="mc", n_slates=64)) / 5
    else:
        Yte = prep.Y_test
        hit_te = np.asarray(Yte[np.repeat(np.arange(cand_te.shape[0]), Kc), cand_te.ravel()]).reshape(cand_te.shape)
        v_rho = float("nan")                                                  # see the trial's rows (R@5 of rho)
    hdr = (f"{'ep':>3} {'value':>6} {'never':>6} {'rare':>6} {'10+':>6} | {'rhat+':>6} {'rhat-':>6} {'unlog':>6}"
           + (f" {'true':>6}" if ka else "") + f" {'never':>6} | {'offlog':>6} | {'|h|':>6} {'sd(noise)':>9}")
    print(f"logging policy: R@5 {100 * v_rho:.2f}")
    print(hdr)
    E = cfg.training.epochs
    for epoch in range(0, E + 1):
        if epoch:
            train_epoch(cfg, spec, prep, [dm], epoch, device, None, data)
        if epoch % a.every and epoch != E:
            continue
        W, b = dm.policy.out.W.numpy(), dm.policy.out.b.numpy()
        s_te = candidate_scores(dm, prep)
        top = np.argsort(-s_te, axis=1, kind="stable")[:, :5]                 # ties by rho order
        picks = np.take_along_axis(cand_te, top, 1)
        pc = cnt[picks]
        if ka:
            value = greedy_slate_value(s_te, ev.cand_probs, 5) / 5
        else:
            value = float(np.take_along_axis(hit_te, top, 1).mean())
        Hfit = dm.policy.features_of(prep.Z_train, prep.X_train, inst)
        s_fit = np.einsum("nkd,nd->nk", W[cand_fit], Hfit) + b[cand_fit]
        r_fit = _sig(s_fit)
        s_act = np.einsum("njd,nd->nj", W[lt.actions], Hfit) + b[lt.actions]
        r_act = _sig(s_act)
        rew = lt.rewards > 0
        top_fit = np.argsort(-s_fit, axis=1, kind="stable")[:, :5]
        offlog = 1.0 - np.take_along_axis(logged, top_fit, 1).mean()
        nv = never[cand_fit]
        noise = (s_fit - b[cand_fit])[nv]
        line = (f"{epoch:>3} {100 * value:>6.2f} {np.mean(pc == 0):>6.1%} {np.mean((pc > 0) & (pc < 10)):>6.1%} "
                f"{np.mean(pc >= 10):>6.1%} | {r_act[rew].mean():>6.3f} {r_act[~rew].mean():>6.3f} "
                f"{r_fit[~logged].mean():>6.3f}")
        if ka:
            line += f" {true_fit[~logged].mean():>6.3f}"
        line += (f" {r_fit[nv].mean() if nv.any() else float('nan'):>6.3f} | {offlog:>6.1%} | "
                 f"{np.linalg.norm(Hfit, axis=1).mean():>6.2f} {noise.std() if noise.size else float('nan'):>9.3f}")
        print(line)
    # the labels DM picks most often at the end, with what the log shows of them
    rcnt = np.bincount(lt.actions.ravel(), weights=lt.rewards.ravel(), minlength=L)
    pcount = np.bincount(picks.ravel(), minlength=L)
    rk = np.argsort(-pcount)[:8]
    pos_pick = np.take_along_axis(np.broadcast_to(np.arange(Kc), cand_te.shape), top, 1)
    print(f"rho rank (0-based) of DM's picks: median {np.median(pos_pick):.0f}, share in rho's top 5 "
          f"{np.mean(pos_pick < 5):.1%}, beyond rank 20 {np.mean(pos_pick >= 20):.1%}")
    hit_picks = (np.take_along_axis(ev.cand_probs, top, 1) if ka else np.take_along_axis(hit_te, top, 1))
    for lo, hi in ((0, 5), (5, 20), (20, Kc)):
        sel = (pos_pick >= lo) & (pos_pick < hi)
        print(f"  picks at rho ranks {lo}-{hi - 1}: {sel.mean():.1%} of picks, hit rate {hit_picks[sel].mean() if sel.any() else float('nan'):.3f}")
    # calibration of the reward model by rho rank on the evaluation contexts: where the log is dense
    # (rho's top ranks) and where it is thin
    hit_all = ev.cand_probs if ka else hit_te
    r_te = _sig(s_te)
    for lo, hi in ((0, 5), (5, 20), (20, Kc)):
        print(f"  rho ranks {lo}-{hi - 1}: mean predicted reward {r_te[:, lo:hi].mean():.3f}, actual hit rate "
              f"{hit_all[:, lo:hi].mean():.3f}, share of the fit log's actions there "
              f"{np.mean((lt.cand_pos >= lo) & (lt.cand_pos < hi)):.2%}")
    print("most picked labels: label logged rewarded bias sigma(bias) picks hit-rate-when-picked")
    for y in rk:
        sel = picks == y
        print(f"  {y:>5} {cnt[y]:>6} {int(rcnt[y]):>8} {b[y]:>6.2f} {_sig(b[y]):>6.3f} {pcount[y]:>6} "
              f"{hit_picks[sel].mean():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
