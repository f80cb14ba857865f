"""Trial-level GPU figures (docs/performance.md): P3 trial, 16-head grid, trial vs step, L = 3M.

Parts (each writes <out>/<part>.json; `--merge` folds them into docs/benchmarks/perf.json):

  trial   the Amazon-670K-shaped single-head POXM trial: synthetic preset amazon670k (490,449 train
          instances, L 670,091, D 135,909), the settings of configs/amazon-670k.yaml (dim 256, K 100,
          slates of 5, policy network hidden 128, batch 256, 10 epochs, 32 MC slates; one checkpoint,
          after the last epoch: training.checkpoint_every = epochs; training.deterministic auto = off
          on CUDA, --deterministic true to time the mode), one head
          poxm p=100 lam=0.9, prepared artifacts (prepare is run first and not timed; its logging
          model gets --model-epochs epochs, which changes the data, not the trial's work).
          Seconds = run_trial wall time (training, per-epoch validation estimates, checkpoints,
          final evaluation). Also the step benchmark (bench_step.py, same L, p, d = hidden, B) and
          trial_vs_step_ratio = (fit-log instances x epochs / trial training seconds) / step samples/s.
  grid    the POXM grid of one seed: p in {10, 20, 50, 100} x lam in {0.7, 0.8, 0.9, 1.0}, 16 heads in
          one trial (group_by: method), same data; --batched-heads and --input-adam lazy as
          configs/amazon-670k.yaml trains it. Records each head's final validation IS and test R@5.
  l3m     L = 3,000,000: bench_step's POXM head step (d 256 and 128, p 100) with its peak memory; the
          logging model (one epoch) and prepare's chunked top-100 on a generated 20,000 x 3M label
          matrix (a dense n x L float32 array would be 240 GB), with their peak GPU memory.

  python benchmarks/bench_trial.py trial grid l3m --out $OUT      # on the GPU machine
  python benchmarks/bench_trial.py --merge DIR                    # here: DIR/*.json -> docs/benchmarks/perf.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PERF = ROOT / "docs" / "benchmarks" / "perf.json"
GRID = {"p": [10, 20, 50, 100], "lam": [0.7, 0.8, 0.9, 1.0]}


def _card() -> str:
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _config(runs: Path, poxm: dict, model_epochs: int, epochs: int, det: str = "auto", batched: bool = False,
            input_adam: str = "dense") -> Path:
    import yaml
    cfg = {"name": "bench-p3", "seeds": [0], "device": "cuda", "runs_dir": str(runs),
           "datasets": [{"name": "synthetic", "synthetic": {"preset": "amazon670k", "scale": 1.0},
                         "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2}]}],
           "model": {"dim": 256, "epochs": model_epochs, "n_candidates": 100, "slate_size": 5, "topk_chunk_mb": 4096},
           "training": {"epochs": epochs, "batch_size": 256, "hidden": 128, "mc_slates": 32,
                        "checkpoint_every": epochs, "deterministic": {"auto": "auto", "true": True, "false": False}[det],
                        "batched_heads": batched, "input_adam": input_adam},
           "group_by": "method", "methods": {"poxm": poxm}}
    path = runs / f"bench-{len(poxm['p'])}x{len(poxm['lam'])}-{input_adam}.yaml"
    runs.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _trial(a, poxm: dict) -> dict:
    import torch

    from poxm_core.config.schema import load_config
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training.command import pick_trial
    from poxm_core.training.trainer import run_trial

    cfg = load_config(_config(Path(a.runs), poxm, a.model_epochs, a.epochs, a.deterministic, a.batched_heads,
                              a.input_adam), [])
    spec = pick_trial(cfg, method="poxm")
    t = time.perf_counter()
    prep = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, Path(a.runs) / "cache")
    prep_s = time.perf_counter() - t
    out = Path(a.runs) / f"trial-{len(spec.heads)}-{a.input_adam}"
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    # per-epoch wall times on stdout: a run cut off by the device's time limit still shows its pace
    df = run_trial(cfg, spec, prep, out, progress=False, on_epoch=lambda e, m, c: print(
        f"  {len(spec.heads)} head(s) epoch {e}: {time.perf_counter() - t:.1f} s", flush=True))
    sec = time.perf_counter() - t
    summ = json.loads((out / "summary.json").read_text())
    return {"seconds": sec, "heads": len(spec.heads), "epochs": a.epochs, "n_fit": int(prep.log_train.n),
            "timing": summ.get("timing"), "prepare_or_load_s": prep_s, "deterministic": a.deterministic,
            "batched_heads": a.batched_heads, "input_adam": a.input_adam,
            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20, "heads_final": _head_results(df)}


def _head_results(df) -> dict:
    """Each head's final validation IS and test R@5 (the learning a speed setting must not cost)."""
    fin = df[df["final"]]
    out = {}
    for (m, p, lam), g in fin.groupby(["method", "p", "lam"], dropna=False):
        val = g[(g["split"] == "val") & (g["metric"] == "IS")]["value"]
        test = g[(g["split"] == "test") & (g["metric"] == "R@5")]["value"]
        out[f"{m}/{p}/{lam}"] = {"val_IS": float(val.iloc[0]) if len(val) else None,
                                 "test_R@5": float(test.iloc[0]) if len(test) else None}
    return out


def _step(L: int, p: int, d: int, N: int = 65536) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_step.py"), "--one", "poxm", str(L), str(p),
           "--device", "cuda", "--N", str(N), "--d", str(d), "--K", "100", "--batch-size", "256", "--ell", "5",
           "--softmax", "full", "--n-negatives", "1024", "--threads", "0"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["killed"])[-1][:200], "cmd": " ".join(cmd[1:])}
    shown = [str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c for c in cmd[1:]]   # repo-relative
    return {**json.loads(res.stdout.strip().splitlines()[-1]), "cmd": "python " + " ".join(shown)}


def part_trial(a) -> dict:
    r = _trial(a, {"p": [100], "lam": [0.9]})
    step = _step(670091, 100, 128)
    train_tp = r["n_fit"] * r["epochs"] / r["timing"]["train_s"]
    whole_tp = r["n_fit"] * r["epochs"] / r["seconds"]
    return {**r, "step": step, "trial_train_samples_per_s": train_tp, "trial_whole_samples_per_s": whole_tp,
            "ratio_train": train_tp / step["samples_per_s"] if "samples_per_s" in step else None,
            "ratio_whole": whole_tp / step["samples_per_s"] if "samples_per_s" in step else None}


def part_grid(a) -> dict:
    return _trial(a, GRID)


def part_l3m(a) -> dict:
    import numpy as np
    import scipy.sparse as sp
    import torch

    from poxm_core.config.schema import ModelConfig
    from poxm_core.model.core import encode
    from poxm_core.model.logging_model import train_logging_model
    from poxm_core.model.topk import chunked_topk

    L = 3_000_000
    out = {"L": L, "step_d256": _step(L, 100, 256), "step_d128": _step(L, 100, 128)}
    rng = np.random.default_rng(0)
    n, D = 20000, 20000
    X = sp.random(n, D, density=60 / D, format="csr", random_state=1, dtype=np.float32)
    rows = np.repeat(np.arange(n), 5)
    Y = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, rng.integers(0, L, rows.size))), shape=(n, L))
    Y.data[:] = 1.0
    mcfg = ModelConfig(dim=256, epochs=1, batch_size=256, topk_chunk_mb=1024)
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    model = train_logging_model(X, Y, mcfg, 1.0, 0, "cuda", progress=False)
    out["logging_model"] = {"n": n, "seconds": time.perf_counter() - t,
                            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20,
                            "dense_n_by_L_mb": n * L * 4 / 2**20}
    W, b = model.head_arrays()
    Z = encode(model, X, "cuda")
    del model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    idx, _ = chunked_topk(Z, W, b, 100, 1024, "cuda")
    out["topk"] = {"n": n, "k": 100, "seconds": time.perf_counter() - t,
                   "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20, "shape": list(idx.shape)}
    return out


# ------------------------------------------------------------------------------------- perf.json

def _entry(value, card, date, command, **extra) -> dict:
    return {"value": value, "card": card, "date": date, "command": command, **extra}


def merge(src: Path) -> None:
    """Fold the part files of one device run (src/*.json) into docs/benchmarks/perf.json."""
    perf = json.loads(PERF.read_text()) if PERF.exists() else {}
    cmd = "python benchmarks/bench_trial.py {part} --out $OUT"
    for f in sorted(src.glob("*.json")):
        part = json.loads(f.read_text())
        card, date, res = part["card"], part["date"], part["result"]
        if f.stem == "trial":
            perf["p3_trial_seconds"] = _entry(round(res["seconds"], 1), card, date, cmd.format(part="trial"),
                                              target="<= 60", timing=res["timing"])
            perf["trial_vs_step_ratio"] = _entry(None if res["ratio_train"] is None else round(res["ratio_train"], 3),
                                                 card, date, cmd.format(part="trial"), target=">= 0.8",
                                                 definition="trial training throughput (fit instances x epochs / "
                                                            "training seconds) over bench_step.py samples/s at "
                                                            "L 670091, p 100, d 128, B 256",
                                                 whole_trial_ratio=res["ratio_whole"], step=res["step"])
        elif f.stem == "grid":
            flags = (" --batched-heads" if res.get("batched_heads") else "") + f" --input-adam {res.get('input_adam', 'dense')}"
            perf["p3_grid_seconds"] = _entry(round(res["seconds"], 1), card, date, cmd.format(part="grid" + flags),
                                             target="<= 120", heads=res["heads"], timing=res["timing"],
                                             heads_final=res.get("heads_final"))
        elif f.stem == "l3m":
            ok = "samples_per_s" in res["step_d256"]
            perf["l3m_head_trains"] = _entry(ok, card, date, cmd.format(part="l3m"),
                                             peak_gpu_mb=res["step_d256"].get("peak_mb"), details=res)
    PERF.parent.mkdir(parents=True, exist_ok=True)
    from poxm_core.common.atomic import write_text
    write_text(PERF, json.dumps(perf, indent=1) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", help="trial, grid, l3m")
    ap.add_argument("--out", default="/tmp/bench-trial")
    ap.add_argument("--runs", default="/tmp/bench-trial-runs")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--model-epochs", type=int, default=2)
    ap.add_argument("--deterministic", choices=["auto", "true", "false"], default="auto",
                    help="training.deterministic of the timed trials (auto = off on CUDA)")
    ap.add_argument("--batched-heads", action="store_true",
                    help="training.batched_heads=true: the trial's heads as one batched step (default: one by one)")
    ap.add_argument("--input-adam", choices=["dense", "lazy"], default="dense",
                    help="training.input_adam of the trial (lazy: Adam on the touched rows of the input layer)")
    ap.add_argument("--merge", type=Path)
    a = ap.parse_args(argv)
    if a.merge:
        merge(a.merge)
        return
    Path(a.out).mkdir(parents=True, exist_ok=True)
    fns = {"trial": part_trial, "grid": part_grid, "l3m": part_l3m}
    bad = [p for p in a.parts if p not in fns]
    if bad:
        ap.error(f"unknown part(s) {bad}: expected trial, grid, l3m")
    for part in a.parts:
        try:
            res = fns[part](a)
        except Exception as exc:   # noqa: BLE001  (record the failure, go on with the next part)
            import traceback
            traceback.print_exc()
            res = {"error": f"{type(exc).__name__}: {exc}"}
        doc = {"card": _card(), "date": datetime.date.today().isoformat(), "result": res}
        (Path(a.out) / f"{part}.json").write_text(json.dumps(doc, indent=1, default=float))
        print(part, json.dumps(res, default=float)[:1500], flush=True)


if __name__ == "__main__":
    main()
