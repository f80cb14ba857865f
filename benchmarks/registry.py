"""The registered benchmarks: one line each, what it measures, how it runs in full (the figure
docs/performance.md quotes, on the machine it names) and in its CPU-sized quick form.

A benchmark is a script of this folder run as a subprocess; its figures are the JSON object it prints
last (every script that feeds perf.json prints one), else its wall time alone. `quick` is None where
the code has no CPU-sized form (Amazon-670K shapes, a Ray sweep), and `why_no_quick` says so.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str                      # benchmarks/<script>
    description: str
    full: tuple[str, ...]            # the published figure's arguments ('{out}': a scratch folder)
    machine: str                     # where the published figure was measured
    quick: tuple[str, ...] | None    # a CPU run in seconds, or None
    why_no_quick: str = ""
    needs_data: bool = False         # reads the real datasets (skipped without them)


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("step", "bench_step.py", "POXM vs BanditNet training step as L and p grow (samples/s, memory)",
              ("--device", "cuda", "--N", "65536", "--d", "256", "--L", "1000", "10000", "100000", "670000",
               "--p-sweep", "10", "100", "1000", "10000", "20000"), "one NVIDIA H200",
              ("--one", "poxm", "2000", "10", "--device", "cpu", "--N", "512", "--d", "32", "--K", "20",
               "--batch-size", "64", "--threads", "0")),
    Benchmark("trial", "bench_trial.py", "Amazon-670K-shaped trial, 16-head grid, trial vs step, L = 3M",
              ("trial", "grid", "l3m", "--out", "{out}"), "one NVIDIA H100", None,
              "Amazon-670K shapes (L 670,091): a GPU job"),
    Benchmark("batched-heads", "bench_batched_heads.py", "seconds per epoch with training.batched_heads off vs on",
              ("--device", "cuda", "--epochs", "3"), "one NVIDIA H100",
              ("--device", "cpu", "--small", "--epochs", "2", "--parts", "grid", "--n-fit", "256")),
    Benchmark("all-label-eval", "bench_all_label_eval.py", "evaluating an all-label head at Amazon-670K's shapes",
              ("--device", "cuda"), "one NVIDIA H100",
              ("--device", "cpu", "--labels", "1000", "--n-val", "120", "--n-test", "120", "--max-support", "64",
               "--old-frac", "0.5")),
    Benchmark("prepare", "bench_prepare.py", "prepare-stage timings on the Amazon-670K preset",
              ("--scale", "1.0", "--device", "cuda"), "one NVIDIA H200", None,
              "Amazon-670K's L and D at any --scale (it shrinks N only): minutes on a CPU"),
    Benchmark("slate-quadrature", "bench_slate_quadrature.py",
              "exact slate metrics on POTEC-shaped rows: one chunk against rows grouped by their nodes (memory, s)",
              (), "one NVIDIA H200", ("--device", "cpu", "--rows", "200", "--budget", "4000000")),
    Benchmark("xc-reader", "bench_xc_reader.py", "the strict XC reader against scikit-learn's svmlight reader",
              (), "2-core CPU container", ("--repeat", "1"), needs_data=True),
    Benchmark("mlflow-points", "mlflow_points.py", "a sweep's MLflow set-up before its trials can start",
              ("configs/real-data.yaml",), "2-core CPU container", ("configs/quickstart.yaml", "--limit", "3")),
    Benchmark("ray-train-startup", "ray_train_startup.py", "where a Ray Train job's start-up goes",
              ("--jobs", "8", "--cpus", "1", "--gpus", "0.125"), "one NVIDIA H100, 16 CPU cores",
              ("--jobs", "1", "--cpus", "1", "--gpus", "0", "--lean")),
    Benchmark("sweep-vs-plain", "sweep_vs_plain.py", "the same trials through `poxm run` and as plain processes",
              ("configs/quickstart.yaml", "seeds=[0,1]", "mlflow.enabled=false", "--runs-dir", "{out}"),
              "2-core CPU container; on a GPU machine with device=cuda", None, "a Ray sweep and its plain twin: minutes"),
    Benchmark("sweep-1wave", "sweep_vs_plain.py", "GPU sweep whose trials all fit in one wave (sweep vs plain)",
              ("benchmarks/configs/sweep-1wave.yaml", "--runs-dir", "{out}"), "one NVIDIA H200", None,
              "a GPU sweep"),
    Benchmark("sweep-3waves", "sweep_vs_plain.py", "GPU sweep of three waves of trials (sweep vs plain)",
              ("benchmarks/configs/sweep-3waves.yaml", "--runs-dir", "{out}"), "one NVIDIA H200", None,
              "a GPU sweep"),
)}
