"""How long a sweep's MLflow set-up takes before its trials can start: the store, experiment and
parent run (`orchestration.stages.track.stage_track`), then one run per grid point
(`stage_points`, which a sweep calls before Ray Tune starts its jobs), into a fresh run directory's
own SQLite store. No Ray, no training.

    python benchmarks/mlflow_points.py [CONFIG] [--limit N]

CONFIG defaults to configs/real-data.yaml (52,080 grid points on its wide grids); --limit N creates only the first N
points' runs (the time per point is printed either way). Writes only to a temporary folder.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "configs" / "real-data.yaml"))
    ap.add_argument("--limit", type=int, default=None, help="create only the first N points' runs")
    a = ap.parse_args(argv)

    from orchestration.stages.plan import plan_sweep, write_plan
    from orchestration.cluster.ray_setup import quiet_libraries
    from orchestration.stages.track import stage_points, stage_track
    from poxm_core.config.schema import load_config
    from poxm_core.common.errors import PoxmInputError

    quiet_libraries()
    try:
        cfg = load_config(a.config, overrides=["mlflow.enabled=true", "mlflow.tracking_uri=null"])
    except PoxmInputError as exc:
        print(f"mlflow_points: error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="poxm-mlflow-points-") as tmp:
        plan = plan_sweep(cfg, Path(tmp) / "runs", Path(tmp) / "cache")
        plan.rd.root.mkdir(parents=True)
        write_plan(plan)
        n_all = len(plan.grid())
        if a.limit is not None:
            grid = plan.grid()[:a.limit]
            plan.grid = lambda: grid          # this plan object only
        t0 = time.perf_counter()
        uri, exp, parent, tags = stage_track(plan, None)
        t1 = time.perf_counter()
        runs = stage_points(plan, uri, exp, parent, tags, {})
        t2 = time.perf_counter()
    n = len(runs.points)
    print(f"{Path(a.config).name}: {n_all} grid point(s), {n} run(s) created")
    print(f"  store, experiment and parent run: {t1 - t0:.2f} s")
    print(f"  one run per grid point: {t2 - t1:.2f} s ({1000 * (t2 - t1) / max(n, 1):.1f} ms a point)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
