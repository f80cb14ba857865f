"""Run one registered benchmark and record its figures.

    python -m benchmarks --list                 # the registered benchmarks, one line each
    python -m benchmarks NAME [--quick] [--perf PATH]

A full run writes its figures into docs/benchmarks/perf.json (or --perf) under NAME, with the card, the
commit, the date and the command; a --quick run (CPU-sized, to check that the benchmark still runs)
prints them and writes only where --perf names a file. Exit 2 on an unknown name, one line.
"""
from __future__ import annotations

import argparse
import datetime
import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.registry import BENCHMARKS, Benchmark

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "docs" / "benchmarks" / "perf.json"


def card() -> str:
    """The machine in words: the CUDA cards, else the CPU cores."""
    try:
        import torch
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            return f"{n} x {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return f"cpu ({os.cpu_count()} cores)"


def figures(stdout: str) -> dict:
    """The last JSON object the script printed ({} when it printed none)."""
    for start in (i for i in range(len(stdout) - 1, -1, -1) if stdout[i] == "{" and (i == 0 or stdout[i - 1] == "\n")):
        try:
            found = json.loads(stdout[start:])
        except ValueError:
            continue
        return found if isinstance(found, dict) else {}
    return {}


def run(bench: Benchmark, quick: bool) -> dict:
    """Run `bench` (its quick or full arguments) from the repository root; its figures and wall time."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{bench.name}-") as out:
        args = [a.replace("{out}", out) for a in (bench.quick if quick else bench.full)]
        cmd = [sys.executable, str(ROOT / "benchmarks" / bench.script), *args]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        raise SystemExit(f"benchmarks: {bench.name}: {bench.script} exited {done.returncode}")
    return {"wall_s": round(wall, 3), **figures(done.stdout)}


def record(perf: Path, name: str, value: dict, command: str) -> None:
    """perf.json[name] = the figures with card, commit, date and command; the other entries stay."""
    data = json.loads(perf.read_text()) if perf.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    data[name] = {"value": value, "card": card(), "commit": commit.strip() or None,
                  "date": datetime.date.today().isoformat(), "command": command}
    perf.parent.mkdir(parents=True, exist_ok=True)
    perf.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?")
    ap.add_argument("--list", action="store_true", help="list the registered benchmarks")
    ap.add_argument("--quick", action="store_true", help="the CPU-sized run (checks it still runs)")
    ap.add_argument("--perf", type=Path, help="perf.json to write (default: docs/benchmarks/perf.json, full runs)")
    a = ap.parse_args(argv)
    if a.list or not a.name:
        for b in BENCHMARKS.values():
            quick = "quick" if b.quick is not None else "no quick form"
            print(f"{b.name:<18} {b.description} [{b.machine}; {quick}]")
        return 0
    bench = BENCHMARKS.get(a.name)
    if bench is None:
        near = difflib.get_close_matches(a.name, BENCHMARKS, n=1)
        print(f"benchmarks: unknown benchmark {a.name!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
              + f"; registered: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    if a.quick and bench.quick is None:
        print(f"{bench.name}: no quick form ({bench.why_no_quick}); run it in full on {bench.machine}")
        return 0
    if bench.needs_data and not _data_root().is_dir():
        print(f"{bench.name}: skipped, no datasets at {_data_root()} (POXM_DATA_ROOT)")
        return 0
    value = run(bench, a.quick)
    command = f"python -m benchmarks {bench.name}" + (" --quick" if a.quick else "")
    print(json.dumps({bench.name: value}, indent=1))
    perf = a.perf or (None if a.quick else PERF)
    if perf is not None:
        record(perf, bench.name, value, command)
    return 0


def _data_root() -> Path:
    from poxm_core.config.schema import default_data_root
    return Path(default_data_root())


if __name__ == "__main__":
    sys.exit(main())
