"""The image test's steps that run inside the image (scripts/test-image.sh mounts this file and the
manifest): they need the image's yaml, pandas and MLflow, which the host need not have.

  python in_image.py manifest MANIFEST MLFLOW_PORT     bash assignments: the manifest's MLflow server
                                                       command, the RayJob's entrypoint and runtime env,
                                                       the head's and workers' env, for this machine
  python in_image.py mlflow-runs RUN_DIR URI           every run of RUN_DIR/mlflow_runs.json is on the
                                                       server, FINISHED; prints how many
  python in_image.py same-rows RUN_DIR RUN_DIR         the two runs' final rows are equal
  python in_image.py report-rebuilt RUN_DIR SAVED_ROWS  `poxm report` wrote report/ and rows equal to SAVED_ROWS

On this machine the MLflow Service's name `mlflow` resolves to 127.0.0.1 (`--add-host`) and the server
listens on a free port instead of 5000; the sweep's config is the quickstart's instead of eurlex's.
Everything else is the manifest's, unchanged.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

MANIFEST_MLFLOW = "http://mlflow:5000"
MANIFEST_CONFIG = "configs/eurlex.yaml"
TEST_CONFIG = "configs/quickstart.yaml"


def manifest_docs(path: str) -> dict[str, dict]:
    import yaml
    return {d["kind"]: d for d in yaml.safe_load_all(Path(path).read_text()) if d}


def here(text: str, port: int) -> str:
    """A manifest value for this machine: the MLflow Service on the test's port."""
    return text.replace(MANIFEST_MLFLOW, f"http://mlflow:{port}")


def mlflow_args(docs: dict[str, dict], port: int) -> list[str]:
    """The MLflow Deployment's command, listening on 127.0.0.1:port instead of every interface."""
    cmd = list(docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"])
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    cmd[cmd.index("--port") + 1] = str(port)
    return cmd


def entrypoint_args(docs: dict[str, dict], port: int) -> list[str]:
    argv = shlex.split(here(docs["RayJob"]["spec"]["entrypoint"], port))
    assert MANIFEST_CONFIG in argv, f"the RayJob's entrypoint no longer runs {MANIFEST_CONFIG}: {argv}"
    return [TEST_CONFIG if a == MANIFEST_CONFIG else a for a in argv]


def runtime_env(docs: dict[str, dict], port: int) -> dict:
    """The RayJob's runtime env ({} when it sets none)."""
    import yaml
    return yaml.safe_load(here(docs["RayJob"]["spec"].get("runtimeEnvYAML", "{}"), port)) or {}


def pod_env(pod: dict, port: int) -> list[str]:
    """`docker run` -e options of a pod's (Ray's or MLflow's) container env."""
    out = []
    for e in pod["spec"]["containers"][0].get("env", []):
        out += ["-e", f"{e['name']}={here(str(e['value']), port)}"]
    return out


def print_manifest(path: str, port: int) -> None:
    docs = manifest_docs(path)
    spec = docs["RayJob"]["spec"]["rayClusterSpec"]
    arrays = {"MLFLOW_ARGS": mlflow_args(docs, port),
              "MLFLOW_ENV": pod_env(docs["Deployment"]["spec"]["template"], port),
              "ENTRYPOINT_ARGS": entrypoint_args(docs, port),
              "HEAD_ENV": pod_env(spec["headGroupSpec"]["template"], port),
              "WORKER_ENV": pod_env(spec["workerGroupSpecs"][0]["template"], port)}
    for name, values in arrays.items():
        print(f"{name}=({' '.join(shlex.quote(v) for v in values)})")
    print(f"RUNTIME_ENV={shlex.quote(json.dumps(runtime_env(docs, port)))}")


def mlflow_runs(run_dir: str, uri: str) -> None:
    from mlflow.tracking import MlflowClient
    ids = json.loads((Path(run_dir) / "mlflow_runs.json").read_text())
    want = {ids["parent_run_id"], *ids["points"].values()}
    c = MlflowClient(uri)
    listed, token = {}, None
    while True:
        page = c.search_runs([ids["experiment_id"]], max_results=1000, page_token=token)
        listed.update({r.info.run_id: r.info.status for r in page})
        token = page.token
        if not token:
            break
    missing = sorted(want - set(listed))
    unfinished = sorted(r for r in want & set(listed) if listed[r] != "FINISHED")
    if missing or unfinished:
        sys.exit(f"MLflow at {uri}: {len(missing)} run(s) of {run_dir} not listed {missing[:5]}, "
                 f"{len(unfinished)} not FINISHED {unfinished[:5]}")
    print(f"MLflow lists the sweep's {len(want)} runs (1 parent, {len(want) - 1} grid points), all FINISHED")


def final_rows(rows_csv: Path):
    import pandas as pd
    df = pd.read_csv(rows_csv)
    df = df[df["final"].astype(str) == "True"].drop(columns=["stderr"], errors="ignore")
    keys = ["dataset", "variant", "method", "p", "lam", "seed", "split", "metric"]
    return df.sort_values(keys).reset_index(drop=True)


def same_rows(a: Path, b: Path, what: str) -> None:
    import pandas as pd
    ra, rb = final_rows(a), final_rows(b)
    try:
        pd.testing.assert_frame_equal(ra, rb, check_exact=False, rtol=1e-9)
    except AssertionError as exc:
        sys.exit(f"{what}: the final rows differ\n{exc}")
    print(f"{what}: the same {len(ra)} final rows")


def report_rebuilt(run_dir: str, saved_rows: str) -> None:
    report = Path(run_dir) / "report"
    files = sorted(p.name for p in report.iterdir()) if report.is_dir() else []
    if not files:
        sys.exit(f"poxm report left no {report}")
    same_rows(Path(run_dir) / "results" / "rows.csv", Path(saved_rows), f"poxm report ({len(files)} report files)")


def main(argv: list[str]) -> None:
    cmd, args = argv[0], argv[1:]
    if cmd == "manifest":
        print_manifest(args[0], int(args[1]))
    elif cmd == "mlflow-runs":
        mlflow_runs(args[0], args[1])
    elif cmd == "same-rows":
        same_rows(Path(args[0]) / "results" / "rows.csv", Path(args[1]) / "results" / "rows.csv",
                  "the sweep that lost its worker and the clean one")
    elif cmd == "report-rebuilt":
        report_rebuilt(args[0], args[1])
    else:
        sys.exit(f"unknown step {cmd!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
