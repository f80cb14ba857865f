"""One entry point for the profilers: where a trial's, a batch's or a report's time goes.

    python -m benchmarks.profile --list
    python -m benchmarks.profile WHAT [ARGS ...]        (ARGS: the profiler's own, `WHAT --help` lists them)

Profilers answer "where does the time go" once, on the machine at hand; the figures they found are
quoted in docs/performance.md. Timings that are tracked over time are benchmarks (`python -m benchmarks`).
"""
from __future__ import annotations

import importlib
import sys

PROFILERS = {   # WHAT: (module of benchmarks/, what it shows)
    "trial": ("profile_trial", "a P3 trial on the GPU: training batches (torch.profiler) and evaluation stages"),
    "eval": ("profile_eval", "a trial's evaluation, head by head: validation estimates, V_true, test metrics"),
    "gpu-busy": ("profile_gpu_busy", "a trial's GPU busy time per stage, from its kernels' trace"),
    "batched-kernels": ("profile_batched_kernels", "kernels and GPU time per batch of the batched CUDA-graph loop"),
    "report": ("profile_report", "the sweep's final stage: gather rows, selection, each table and figure"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("--list", "-h", "--help"):
        print(__doc__.split("\n\n")[0])
        for what, (_, text) in PROFILERS.items():
            print(f"  {what:<16} {text}")
        return 0
    what, rest = argv[0], argv[1:]
    if what not in PROFILERS:
        print(f"benchmarks.profile: unknown profiler {what!r}; one of: {', '.join(PROFILERS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{PROFILERS[what][0]}")
    sys.argv = [f"python -m benchmarks.profile {what}", *rest]
    rc = module.main(rest)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
