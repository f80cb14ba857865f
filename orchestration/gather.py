"""The gather stage: every finished trial's rows into results/rows.csv, and the prepare stage's
statistics into results/prepare.csv (what selection and the report read).

results/prepare.csv has columns dataset, variant, seed, metric, value:
  covering@k                 k = 1..K, share of true test labels inside the top-k of rho (paper Fig. 1)
  logging_model/P@k ...      the logging model's greedy P@k, nDCG@k, PSP@k on test
  logging_policy/R@k ...     the logging policy rho's stochastic R@k, nDCR@k, PSR@k on test
  rho/top1_mass              mean rho of the top candidate on test
  log/reward_rate_{train,val}  mean logged reward of the bandit logs
  data/N_train ...           dataset statistics (counts, not fractions)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.rundir import RunDir
from poxm_core.results import COLUMNS

PREPARE_COLUMNS = ["dataset", "variant", "seed", "metric", "value"]


def _csv_atomic(df: pd.DataFrame, path: Path, columns) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False, columns=columns)
    tmp.replace(path)


def gather_rows(rd: RunDir, trial_names: list[str]) -> pd.DataFrame:
    """Concatenate trials/<name>/rows.csv of the finished trials (done.json) into results/rows.csv."""
    frames = []
    for name in trial_names:
        d = rd.trial(name)
        if (d / "done.json").is_file() and (d / "rows.csv").is_file():
            frames.append(pd.read_csv(d / "rows.csv"))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    _csv_atomic(df, rd.rows_csv, COLUMNS)
    return df


def prepare_stats(cache_dir: Path, dataset: str, seed: int, variant_dir: Path) -> list[dict]:
    """Long-form statistics of one prepared variant, read from the cache's manifests and covering.npy."""
    man = json.loads((variant_dir / "manifest.json").read_text())
    parents = {k: json.loads((Path(cache_dir) / p / "manifest.json").read_text())
               for k, p in man["key"]["parents"].items()}
    variant = man["key"]["variant"]["name"]
    out: list[tuple[str, float]] = []
    cover = np.load(variant_dir / "covering.npy")
    out += [(f"covering@{k + 1}", float(v)) for k, v in enumerate(cover)]
    out += [(f"logging_model/{k}", float(v)) for k, v in parents["candidates"]["stats"]["logging_model_test"].items()]
    st = man["stats"]
    out += [(f"logging_policy/{k}", float(v)) for k, v in st["logging_policy_test"].items() if not k.endswith("_se")]
    out.append(("rho/top1_mass", float(st["rho_top1_mean_test"])))
    out += [(f"log/reward_rate_{k}", float(v)) for k, v in st.get("log_reward_rate", {}).items()]
    for k, v in parents["data"]["stats"].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((f"data/{k}", float(v)))
    return [{"dataset": dataset, "variant": variant, "seed": int(seed), "metric": m, "value": v} for m, v in out]


def gather_prepare(rd: RunDir, prepared: dict[tuple[str, int], dict[str, str]], cache_dir: Path) -> pd.DataFrame:
    """results/prepare.csv from the prepare stage's outputs {(dataset, seed): {variant: dir}}."""
    rows = []
    for (dataset, seed), variants in sorted(prepared.items()):
        for vdir in variants.values():
            rows += prepare_stats(cache_dir, dataset, seed, Path(vdir))
    df = pd.DataFrame(rows, columns=PREPARE_COLUMNS)
    _csv_atomic(df, rd.prepare_csv, PREPARE_COLUMNS)
    return df


def data_checksum(cache_dir: Path, variant_dir: Path) -> str:
    """The content address of the dataset's cache level (names, sizes and mtimes of its files, or
    the generator config and seed): what 'dataset_checksum' tags carry."""
    man = json.loads((Path(variant_dir) / "manifest.json").read_text())
    return Path(man["key"]["parents"]["data"]).name
