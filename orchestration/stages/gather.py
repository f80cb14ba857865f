"""The gather stage: every finished trial's rows into results/rows.csv, and the prepare stage's
statistics into results/prepare.csv (what selection and the report read), and the trials' per-instance
test values into results/test_instances.npz (what the claims' intervals read).

results/prepare.csv has columns dataset, variant, seed, metric, value:
  covering@k                 k = 1..K, share of true test labels inside the top-k of rho (paper Fig. 1)
  logging_model/P@k ...      the logging model's greedy P@k, nDCG@k, PSP@k on test
  logging_policy/R@k ...     the logging policy rho's stochastic R@k, nDCR@k, PSR@k on test
  rho/top1_mass              mean rho of the top candidate on test
  variant/T                  the temperature the variant used (a matched variant's solved T)
  match/target, match/ratio, match/reference_P@5, match/n_heldout   a matched variant's solve
  log/reward_rate_{train,val}  mean logged reward of the bandit logs
  data/N_train ...           dataset statistics (counts, not fractions)
"""
from __future__ import annotations

import io
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.rundir import RunDir, read_json, write_json, write_selection
from poxm_core.common.atomic import atomic_file, write_text
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import COLUMNS, INSTANCES, PREPARE_COLUMNS


def read_trial_rows(path: Path, run_root: Path) -> tuple[pd.DataFrame, bytes]:
    """A finished trial's rows.csv, checked: every column, a complete last line; (its rows, its bytes).
    A damaged file is one line naming it and how to recompute that trial (its done.json removed,
    `poxm resume` runs it again)."""
    fix = (f"; remove {path.parent / 'done.json'} and run `poxm resume {run_root}` to recompute that trial")
    try:
        text = path.read_bytes()
        df = pd.read_csv(io.BytesIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise PoxmInputError(f"{path}: unreadable result rows ({type(exc).__name__}){fix}") from None
    if list(df.columns) != list(COLUMNS) or not text.endswith(b"\n") or df.iloc[-1:].isna()[["metric", "split"]].any(axis=None):
        raise PoxmInputError(f"{path}: truncated or incomplete result rows{fix}")
    return df, text


def gather_rows(rd: RunDir, trial_names: list[str]) -> pd.DataFrame:
    """Concatenate trials/<name>/rows.csv of the finished trials (done.json) into results/rows.csv.
    The file is the trials' own text after one header (their header is checked to be COLUMNS): the
    values as the trials wrote them, and no second formatting of a real-data sweep's 440,000 rows
    (seconds of the sweep's tail; docs/performance.md)."""
    frames, texts = [], []
    for name in trial_names:
        d = rd.trial(name)
        if (d / "done.json").is_file() and (d / "rows.csv").is_file():
            df, text = read_trial_rows(d / "rows.csv", rd.root)
            frames.append(df)
            texts.append(text if not texts else text[text.index(b"\n") + 1:])
    if not frames:
        df = pd.DataFrame(columns=COLUMNS)
        write_text(rd.rows_csv, df.to_csv(index=False))
        return df
    with atomic_file(rd.rows_csv) as tmp:
        Path(tmp).write_bytes(b"".join(texts))
    return pd.concat(frames, ignore_index=True)


def gather_instances(rd: RunDir, trial_names: list[str]) -> int:
    """results/test_instances.npz: every finished trial's per-instance test values (trials/<name>/
    test_instances.npz, keys 'dataset|variant|seed|method|p|lam|metric'), what the claims' intervals
    read for their test-set term. Returns the number of arrays (0: no file written, an older trial
    kept none, and the claims fall back to the seed term alone)."""
    arrays: dict[str, np.ndarray] = {}
    for name in trial_names:
        f = rd.trial(name) / INSTANCES
        if (rd.trial(name) / "done.json").is_file() and f.is_file():
            try:
                with np.load(f) as z:
                    arrays.update({k: z[k] for k in z.files})
            except (OSError, ValueError) as exc:
                raise PoxmInputError(f"{f}: unreadable per-instance test values ({type(exc).__name__}); remove "
                                     f"{rd.trial(name) / 'done.json'} and run `poxm resume {rd.root}` to recompute "
                                     "that trial") from None
    out = rd.root / "results" / INSTANCES
    if not arrays:
        out.unlink(missing_ok=True)
        return 0
    with atomic_file(out) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    return len(arrays)


def prepare_stats(dataset: str, seed: int, record: dict) -> list[dict]:
    """Long-form statistics of one prepared variant from its record (poxm_core.prepare.cache.variant_record)."""
    man, parents = record["manifest"], record["parents"]
    variant = man["key"]["variant"]["name"]
    out: list[tuple[str, float]] = []
    out += [(f"covering@{k + 1}", float(v)) for k, v in enumerate(record["covering"])]
    st = man["stats"]
    if "candidates" in parents:     # a logged dataset has no logging model, no test labels (prepare_logged)
        out += [(f"logging_model/{k}", float(v)) for k, v in parents["candidates"]["stats"]["logging_model_test"].items()]
        out += [(f"logging_policy/{k}", float(v)) for k, v in st["logging_policy_test"].items() if not k.endswith("_se")]
        out.append(("rho/top1_mass", float(st["rho_top1_mean_test"])))
    out += [(f"log/reward_rate_{k}", float(v)) for k, v in st.get("log_reward_rate", {}).items()]
    for part in ("test", "target"):
        out += [(f"phi/reward_share_{part}@{p}", float(v)) for p, v in st.get(f"phi_reward_share_{part}", {}).items()]
    if "T" in st:
        out.append(("variant/T", float(st["T"])))          # the temperature used (a matched variant's solved T)
    for k in ("target", "ratio", "reference_P@5", "n_heldout"):   # a matched variant's solve (prepare/match.py)
        if k in st.get("match", {}):
            out.append((f"match/{k}", float(st["match"][k])))
    for k, v in parents["data"]["stats"].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((f"data/{k}", float(v)))
    return [{"dataset": dataset, "variant": variant, "seed": int(seed), "metric": m, "value": v} for m, v in out]


def gather_prepare(rd: RunDir, prepared: dict[tuple[str, int], dict[str, dict]]) -> pd.DataFrame:
    """results/prepare.csv from the prepare stage's outputs {(dataset, seed): {variant: record}}."""
    rows = []
    for (dataset, seed), variants in sorted(prepared.items()):
        for record in variants.values():
            rows += prepare_stats(dataset, seed, record)
    df = pd.DataFrame(rows, columns=PREPARE_COLUMNS)
    write_text(rd.prepare_csv, df.to_csv(index=False))
    return df


def data_checksum(record: dict) -> str:
    """What 'dataset_checksum' tags carry: the SHA-256 of the prepared data level's content (Y, X,
    inverse propensities as written), the same on every node and for every copy of the files."""
    return record["parents"]["data"]["content_sha256"]


def select_and_report(rd: RunDir, criterion: str, rows: pd.DataFrame, say) -> Path | None:
    """results/selection.csv (honest selection on the validation log) and report/; None when the
    report cannot be built yet (said in one line)."""
    from orchestration.selection import select_run

    sel = select_run(rows, criterion) if len(rows) else None
    if sel is not None:
        write_selection(rd.root, sel.frame())
    try:
        from orchestration.report.build import build_report
        return Path(build_report(rd.root, sel))
    except (PoxmInputError, ImportError) as exc:
        say(f"  report: not built ({exc})")
        return None


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of time intervals: the wall time during which some trial was computing."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def sweep_summary(rd: RunDir, n_trials: int, n_points: int, done: list, errored: list, before: set,
                  seconds: dict, max_concurrent: int, extra: dict | None = None) -> dict:
    """results/sweep_summary.json: this invocation's counts and stage times (seconds: wall, prepare,
    prepare_compute, tune, gather_select_report) with the trials' own compute, and `extra` (the
    prepare stage's span and whether the trials ran beside it; 'timeline': the wall-clock times at
    which the process started, execute began, Ray was ready, the trials began and ended and the report
    was built); the file keeps every invocation under 'history'."""
    compute, spans = 0.0, []
    for n in sorted(set(done) - before):
        for a in (read_json(rd.trial(n) / "timing.json", {}) or {}).get("attempts", []):
            compute += float(a.get("run_trial_s", 0.0))
            if "start" in a and "end" in a:
                spans.append((a["start"], a["end"]))
    busy, wall = busy_seconds(spans), seconds["wall"]
    summary = {"sweep": rd.root.name, "trials": n_trials, "done": len(done), "errored": len(errored),
               "ran_now": len(set(done) - before), "grid_points": n_points,
               **{f"{k}_s": round(v, 2) for k, v in seconds.items()},
               "trial_compute_s": round(compute, 2), "trial_compute_busy_s": round(busy, 2),
               "share_outside_trial_compute": round(1 - busy / wall, 4) if wall > 0 else None,
               "max_concurrent_trials": max_concurrent, **(extra or {}), "finished_at": time.time()}
    # each trial's GPU memory: estimated from its shapes before it ran, and its measured peak (docs/orchestration.md)
    memory = {n: m for n in sorted(done) if (m := (read_json(rd.trial(n) / "summary.json", {}) or {}).get("memory"))}
    if memory:
        summary["trial_gpu_memory_mb"] = memory
    history = (read_json(rd.summary_json, {}) or {}).get("history", [])
    write_json(rd.summary_json, {**summary, "history": history + [summary]})
    return summary
