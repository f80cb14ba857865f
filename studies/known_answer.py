"""Known-answer check of the learners: POXM and the Direct Method on a bandit whose truth is known.

The problem (`poxm_core.bandit.known_answer`): contexts x ~ N(0, I_m), L labels, true click
probabilities P(r=1 | x, y) = sigmoid(a_y . x + c_y); logging policy rho = softmax(E/T) over the top-K
labels of a noisy, shifted copy E of the true logits; slates of ell = 5 drawn from rho without
replacement, Bernoulli rewards. Every value printed is a TRUE value on fresh evaluation contexts
(exact Plackett-Luce set dynamic programme, or the deterministic greedy slate), not an estimate.

Learners (trained on logs of n in --ns instances; full-batch Adam, fixed epochs, seeded, start at 0):
  POXM   linear softmax s(x, y) = theta_y . x + b_y restricted to Phi^p(x) (top-p of rho), loss
         -(1/n) sum_i sum_j w_ij (r_ij - lam), w_ij = pi_Phi(y_ij | x_i, y_i,<j) / q_ij with the
         project's `pl_log_conditionals_torch(scores_phi, selector_pos(cand_pos, p))`,
         `importance_weights_torch` and `translated_value_torch`; one run per lam in --lams (the
         per-position reward rate is ~0.1-0.2 here). Reported at test time as the PL policy on Phi^p
         (stochastic, the paper's) and its greedy twin (the top-ell logits of Phi^p).
  DM     logistic reward model on the logged (x, y_ij, r_ij) only, MISSPECIFIED: it sees the first k of
         the m features for k in --dm-features (k = 0: a per-label constant); greedy top-ell over Phi^p
         by predicted reward. "DM all" is the well-specified twin (all m features), for reference.
Columns: V(rho) the logging policy (PL over C(x)), V* the optimum within Phi^p (the ell largest true
probabilities), closed = (V - V(rho)) / (V* - V(rho)) for POXM's stochastic policy.

Two logging regimes by default: T = 1 (top candidate ~46% of rho's mass) and T = 0.5 (peaked:
~71% on the top candidate, ~97% on the top 5). The eval contexts are shared by all n of a regime.

  python -m studies.known_answer                      # defaults, ~1-2 min on 2 CPU cores
  python -m studies.known_answer --ns 500 2000 --temperatures 0.5 --lams 0 --out /tmp/ka.png
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poxm_core.bandit.known_answer import (KnownAnswerWorld, logging_value, make_world, optimal_value,  # noqa: E402
                                           sample_contexts, simulate_log)
from poxm_core.bandit.known_answer_learners import (LinearPolicy, phi_logits, train_dm,  # noqa: E402,F401
                                                    train_dr_poxm, train_poxm, value_greedy, value_softmax)


@dataclass(frozen=True)
class Row:
    """True values for one (logging regime T, log size n)."""
    T: float
    n: int
    rate: float                        # logged reward rate per position
    v_rho: float                       # logging policy rho over C(x)
    v_star: float                      # optimum within Phi^p
    poxm: dict                         # lam -> (stochastic on Phi^p, greedy twin)
    dm: dict                           # n_features -> greedy DM value (m = well specified)

    def closed(self, v: float) -> float:
        """Fraction of the gap V* - V(rho) that value v closes."""
        return (v - self.v_rho) / (self.v_star - self.v_rho)


def run_regime(world: KnownAnswerWorld, ns, p: int, lams, dm_features, n_eval: int, epochs: int, lr: float,
               seed: int) -> list[Row]:
    """One logging regime: a log per n, every learner, true values on n_eval fresh contexts."""
    ell = world.ell
    ev = sample_contexts(world, n_eval, seed=10_000 + seed)
    v_rho = logging_value(ev, ell)
    v_star = optimal_value(ev, p, ell)
    rows = []
    for n in ns:
        contexts = sample_contexts(world, n, seed=seed * 1000 + 1)
        log = simulate_log(world, contexts, seed=seed * 1000 + 2)
        poxm = {}
        for lam in lams:
            pol = train_poxm(log, p, lam, epochs=epochs, lr=lr, seed=seed)
            poxm[lam] = (value_softmax(pol, ev, p, ell), value_greedy(pol, ev, p, ell))
        dm = {k: value_greedy(train_dm(log, k, epochs=epochs, lr=lr, seed=seed), ev, p, ell)
              for k in list(dict.fromkeys([*dm_features, world.m]))}
        rows.append(Row(T=world.temperature, n=n, rate=float(log.rewards.mean()), v_rho=v_rho, v_star=v_star,
                        poxm=poxm, dm=dm))
    return rows


def _dm_name(k: int, m: int) -> str:
    return "DM const" if k == 0 else ("DM all" if k == m else f"DM {k}f")


def format_table(rows: list[Row], m: int) -> str:
    lams = list(rows[0].poxm)
    dms = list(rows[0].dm)
    cells = [f"POXM lam={lam:g}" for lam in lams]
    w = max(15, *(len(c) for c in cells))
    head = (f"{'T':>4} {'n':>6} {'r/pos':>5} {'V(rho)':>6} | " + " | ".join(c.center(w) for c in cells) + " | "
            + " ".join(f"{_dm_name(k, m):>8}" for k in dms) + f" | {'V*':>6} | closed (POXM sto, per lam)")
    sub = (" " * 26 + "| " + " | ".join("sto  / greedy".center(w) for _ in lams) + " | "
           + " ".join(f"{'greedy':>8}" for _ in dms) + " |")
    lines = [head, sub, "-" * len(head)]
    for r in rows:
        line = (f"{r.T:>4.2f} {r.n:>6d} {r.rate:>5.3f} {r.v_rho:>6.4f} | "
                + " | ".join(f"{r.poxm[lam][0]:.4f} / {r.poxm[lam][1]:.4f}".center(w) for lam in lams) + " | "
                + " ".join(f"{r.dm[k]:>8.4f}" for k in dms) + f" | {r.v_star:>6.4f} | "
                + " ".join(f"{r.closed(r.poxm[lam][0]):>5.2f}" for lam in lams))
        lines.append(line)
    return "\n".join(lines)


def plot(rows: list[Row], out: Path, m: int, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ts = sorted({r.T for r in rows}, reverse=True)
    fig, axes = plt.subplots(1, len(Ts), figsize=(5.6 * len(Ts), 4.8), squeeze=False)
    for ax, T in zip(axes[0], Ts):
        rs = [r for r in rows if r.T == T]
        ns = [r.n for r in rs]
        ax.axhline(rs[0].v_star, color="k", ls="--", lw=1.2, label="V* (optimum in $\\Phi^p$)")
        ax.axhline(rs[0].v_rho, color="gray", ls=":", lw=1.2, label="logging $\\rho$")
        for i, lam in enumerate(rs[0].poxm):
            ax.plot(ns, [r.poxm[lam][0] for r in rs], "o-", color=f"C{i}", label=f"POXM $\\lambda$={lam:g}")
            ax.plot(ns, [r.poxm[lam][1] for r in rs], "o--", color=f"C{i}", alpha=0.45, lw=1,
                    label=f"POXM $\\lambda$={lam:g} greedy")
        for j, k in enumerate(rs[0].dm):
            ax.plot(ns, [r.dm[k] for r in rs], "s" + ("-" if k != m else ":"), color=f"C{5 + j}",
                    label=_dm_name(k, m) + (" (greedy)" if k != m else " (well specified)"))
        ax.set_xscale("log")
        ax.set_xlabel("log size n (instances, one slate each)")
        ax.set_ylabel("true value  E[clicks per slate]")
        ax.set_title(f"logging T = {T:g}" + (" (peaked $\\rho$)" if T < 1 else ""))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=(len(labels) + 1) // 2, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--ns", type=int, nargs="+", default=[500, 2000, 8000, 32000], help="log sizes n")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.5],
                    help="logging temperatures T (0.5 = peaked rho with these world settings)")
    ap.add_argument("--p", type=int, default=10, help="size of Phi^p (top-p of rho)")
    ap.add_argument("--K", type=int, default=20, help="candidates of rho")
    ap.add_argument("--L", type=int, default=50, help="labels")
    ap.add_argument("--m", type=int, default=16, help="features")
    ap.add_argument("--noise", type=float, default=2.0, help="std of the logging score noise")
    ap.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.1, 0.2],
                    help="POXM reward translations lambda (per-position reward rate scale)")
    ap.add_argument("--dm-features", type=int, nargs="+", default=[0, 2],
                    help="feature counts of the misspecified DMs (first k of m; 0 = per-label constant); "
                         "the well-specified DM (all m) is always added")
    ap.add_argument("--epochs", type=int, default=200, help="full-batch Adam epochs (POXM and DM)")
    ap.add_argument("--lr", type=float, default=0.1, help="Adam learning rate")
    ap.add_argument("--n-eval", type=int, default=2000, help="fresh contexts for the true values")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--out", type=Path, default=Path("docs/figures/known_answer.png"), help="PNG path")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0, c0 = time.time(), time.process_time()
    rows: list[Row] = []
    for T in a.temperatures:
        world = make_world(m=a.m, L=a.L, K=a.K, noise=a.noise, temperature=T, seed=a.seed)
        rows += run_regime(world, a.ns, a.p, a.lams, a.dm_features, a.n_eval, a.epochs, a.lr, a.seed)
    print(f"known-answer bandit: m={a.m} L={a.L} K={a.K} p={a.p} ell=5 noise={a.noise} epochs={a.epochs} "
          f"lr={a.lr} n_eval={a.n_eval} seed={a.seed}")
    print("true values on fresh contexts (exact PL values / greedy slates); V* = optimum within Phi^p; "
          "closed = (V - V(rho)) / (V* - V(rho))")
    print(format_table(rows, a.m))
    plot(rows, a.out, a.m, f"Known-answer bandit: m={a.m}, L={a.L}, K={a.K}, p={a.p}, $\\ell$=5, "
                           f"logging noise {a.noise:g}, seed {a.seed}; true values on {a.n_eval} fresh contexts")
    print(f"figure: {a.out}   (wall {time.time() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s, "
          f"torch threads {a.threads})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
