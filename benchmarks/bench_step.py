"""Training-step cost of POXM vs BanditNet (full softmax) as L and p grow (docs/performance.md).

Synthetic data (no dataset needed): N instances with encoder outputs z ~ N(0, 1)^d, a head (L, d),
candidates C(x) of K labels, slates of ell logged actions among the top 50 candidates, q in (0, 1],
rewards Bernoulli(0.3). One epoch = N / batch_size steps of the real code path: the method's loss
through the RowScorer, backward, RowAdam (`poxm_core.policy.heads`). Each configuration runs in a
fresh subprocess, so "peak MB" is that process's peak resident memory (CPU) or
torch.cuda.max_memory_allocated (CUDA), parameters and Adam state of the one head included
(3 * L * d floats: W and the two moments; they are what a head costs, not the step).

  python benchmarks/bench_step.py --device cpu                          # L sweep, CPU-sized
  python benchmarks/bench_step.py --device cuda --N 65536 --d 256 \\
      --L 1000 10000 100000 670000 --p-sweep 10 100 1000 10000 20000    # the GPU runs

Prints one line per (method, L, p): samples/s, seconds per epoch, peak MB (OOM is reported as such).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _one(a: argparse.Namespace) -> dict:
    import torch

    from poxm_core.config.schema import MethodConfig
    from poxm_core.methods import Batch, HeadContext, get_method
    from poxm_core.policy.heads import HeadParams, RowAdam, RowScorer

    torch.manual_seed(0)
    torch.set_num_threads(a.threads) if a.threads else None
    dev = torch.device(a.device)
    g = torch.Generator().manual_seed(1)
    L, d, K, B, ell, p = a.one_L, a.d, max(a.K, a.one_p), a.batch_size, a.ell, a.one_p
    if K > L:
        return {"skipped": f"K={K} > L={L}"}
    params = HeadParams(torch.randn(L, d, generator=g).mul_(0.01).to(dev), torch.zeros(L, device=dev))
    opt = RowAdam((L, d), dev, lr=1e-4)
    for t in (opt.m_W, opt.v_W, opt.m_b, opt.v_b):   # touch every page now: a long run has, a short
        t.fill_(0.0)                                   # benchmark would otherwise time first-touch faults
    method = get_method(a.one_method)
    mc = MethodConfig(softmax=a.softmax, n_negatives=a.n_negatives) if a.one_method == "banditnet" else MethodConfig()
    ctx = HeadContext(p, 0.9, mc, torch.Generator().manual_seed(2), L)

    def batch() -> Batch:
        off = torch.randint(L, (B, 1), generator=g)
        cand = (off + torch.arange(K).view(1, K) * 7919) % L          # K distinct labels (7919 is prime)
        top = min(K, 50)
        cpos = torch.argsort(torch.rand(B, top, generator=g), dim=1)[:, :ell]
        acts = cand.gather(1, cpos)
        q = torch.rand(B, ell, generator=g) * 0.9 + 0.1
        r = (torch.rand(B, ell, generator=g) < 0.3).float()
        t = lambda x: x.to(dev)  # noqa: E731
        return Batch(t(torch.randn(B, d, generator=g)), t(acts), t(cpos), t(q), t(r), t(cand),
                     t(torch.ones(B, ell)), L)

    steps = max(1, a.N // B)
    batches = [batch() for _ in range(min(steps, 8))]   # pre-built (cycled): time the step, not the data

    def run_step(bt: Batch) -> None:
        sc = RowScorer(params, bt.z)
        loss = method.head_loss(sc, bt, ctx)
        loss.backward()
        opt.step(params, sc)

    run_step(batches[0])                                 # warm-up
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for s in range(steps):
        run_step(batches[s % len(batches)])
    if dev.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sec = time.perf_counter() - t0
    return {"samples_per_s": steps * B / sec, "sec_per_epoch": sec * a.N / (steps * B), "peak_mb": peak}


def _child(a: argparse.Namespace, method: str, L: int, p: int) -> dict:
    cmd = [sys.executable, __file__, "--one", method, str(L), str(p), "--device", a.device, "--N", str(a.N),
           "--d", str(a.d), "--K", str(a.K), "--batch-size", str(a.batch_size), "--ell", str(a.ell),
           "--softmax", a.softmax, "--n-negatives", str(a.n_negatives), "--threads", str(a.threads)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if res.returncode != 0:
        err = res.stderr.strip().splitlines()[-1:] or ["killed"]
        oom = "out of memory" in res.stderr.lower() or res.returncode in (-9, 137)
        return {"error": "OOM" if oom else err[0][:80]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--N", type=int, default=2048, help="instances per epoch")
    ap.add_argument("--d", type=int, default=64, help="encoder width")
    ap.add_argument("--K", type=int, default=100, help="candidates |C(x)| (raised to p when p > K)")
    ap.add_argument("--p", type=int, default=20, help="POXM's p in the L sweep")
    ap.add_argument("--L", type=int, nargs="*", default=[1000, 10000, 100000, 670000])
    ap.add_argument("--p-sweep", type=int, nargs="*", default=[], help="POXM p values at the largest L")
    ap.add_argument("--methods", nargs="*", default=["poxm", "banditnet"])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--ell", type=int, default=5)
    ap.add_argument("--softmax", default="full", choices=["full", "sampled"])
    ap.add_argument("--n-negatives", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--one", nargs=3, metavar=("METHOD", "L", "P"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        a.one_method, a.one_L, a.one_p = a.one[0], int(a.one[1]), int(a.one[2])
        print(json.dumps(_one(a)))
        return
    print(f"# device={a.device} N={a.N} d={a.d} K={a.K} B={a.batch_size} ell={a.ell} softmax={a.softmax}")
    print(f"{'method':10s} {'L':>8s} {'p':>6s} {'samples/s':>11s} {'s/epoch':>9s} {'peak MB':>9s}")
    jobs = [(m, L, a.p) for L in a.L for m in a.methods]
    jobs += [("poxm", max(a.L), p) for p in a.p_sweep]
    for m, L, p in jobs:
        r = _child(a, m, L, p)
        pp = str(p) if m == "poxm" else "-"
        if "error" in r or "skipped" in r:
            print(f"{m:10s} {L:8d} {pp:>6s} {r.get('error', r.get('skipped')):>31s}", flush=True)
        else:
            print(f"{m:10s} {L:8d} {pp:>6s} {r['samples_per_s']:11.0f} {r['sec_per_epoch']:9.2f} {r['peak_mb']:9.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
