"""What each `poxm` command does once its arguments are parsed (orchestration.cli dispatches here), and
the lines a sweep ends with (orchestration/run_summary.py; then where the report is, what to run next)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from orchestration.cli_errors import note_store
from orchestration.cli_parser import poxm_command
from orchestration.run_summary import complete_line, headline, print_end  # noqa: F401  (headline: cli.headline)
from poxm_core.common.errors import PoxmInputError

EXIT_TRIALS_FAILED = 1


def _print_config(path, overrides) -> int:
    from poxm_core.config.schema import load_config, resolved_yaml
    print(resolved_yaml(load_config(path, overrides)), end="")
    return 0


def cmd_prepare(a) -> int:
    from poxm_core.prepare.summary import prepare_command
    return int(prepare_command(a.config, a.overrides, print_config=a.print_config, cache_dir=a.cache_dir) or 0)


def cmd_train(a) -> int:
    from poxm_core.training import train_command
    if not a.print_config and not a.out:
        raise PoxmInputError("train: --out DIR is required (see `poxm train --help`)")
    train_command(a.config, a.overrides, out_dir=a.out, print_config=a.print_config, dataset=a.dataset,
                  variant=a.variant, method=a.method, seed=a.seed, cache_dir=a.cache_dir)
    return 0


def cmd_run(a) -> int:
    from poxm_core.config.schema import load_config
    if a.print_config:
        return _print_config(a.config, a.overrides)
    cfg = load_config(a.config, a.overrides)
    from orchestration.cluster.preflight import check_names, check_run_inputs
    from orchestration.stages.plan import plan_sweep
    check_run_inputs(cfg, a.address, a.mlflow_uri)      # before anything is written or Ray starts
    plan = plan_sweep(cfg, a.runs_dir, a.cache_dir)
    check_names(plan.rd.root, plan.names)
    if cfg.mlflow.enabled:
        from orchestration.tracking.store import resolve_uri
        note_store(resolve_uri(plan.rd.root, a.mlflow_uri, cfg.mlflow.tracking_uri))
    from orchestration.stages.sweep import run_sweep
    ended: dict = {}      # the results printed as soon as they are complete, before Ray shuts down
    out = run_sweep(cfg, runs_dir=a.runs_dir, cache_dir=a.cache_dir, address=a.address, mlflow_uri=a.mlflow_uri,
                    progress=not a.quiet, verbose=a.verbose, on_end=lambda o: ended.setdefault("rc", _outcome(o)))
    return ended["rc"] if "rc" in ended else _outcome(out)


def cmd_resume(a) -> int:
    from orchestration.stages.sweep import plan_from_run_dir, resume_sweep
    seeds = None
    if a.add_seeds is not None:
        from orchestration.stages.merge import extend_plan, parse_seeds
        seeds = parse_seeds(a.add_seeds)
        plan = extend_plan(a.run_dir, seeds)   # input errors before Ray starts
    else:
        plan = plan_from_run_dir(a.run_dir)
        if (done := complete_line(plan)) is not None:      # nothing to run: said, and Ray never started
            print(done)
            print_end(plan.rd.root, plan.rd.root / "report")
            print(f"report:  {plan.rd.root / 'report' / 'index.md'}")
            return 0
    _check_resume_inputs(a, plan)
    ended: dict = {}
    out = resume_sweep(a.run_dir, address=a.address, mlflow_uri=a.mlflow_uri, progress=not a.quiet,
                       verbose=a.verbose, add_seeds=seeds, on_end=lambda o: ended.setdefault("rc", _outcome(o)))
    return ended["rc"] if "rc" in ended else _outcome(out)


def _check_resume_inputs(a, plan) -> None:
    """`poxm resume`: the Ray address, the tracking URI (the one given, else the one the run records,
    used only when it is the run's own store or the user's) and the resources, before anything is written."""
    from orchestration.cluster.preflight import (check_address, check_local_resources, check_logged_tables,
                                                 check_mlflow_uri)
    from orchestration.rundir import read_json
    from orchestration.tracking.store import checked_uri
    check_address(a.address)
    if plan.cfg.mlflow.enabled:
        if a.mlflow_uri:
            check_mlflow_uri(a.mlflow_uri, "--mlflow-uri")
            note_store(a.mlflow_uri)
        else:
            uri = checked_uri(plan.rd.root, read_json(plan.rd.mlflow_runs, {}))
            if uri is not None:
                check_mlflow_uri(uri, "the run's MLflow store")
            elif os.environ.get("MLFLOW_TRACKING_URI"):     # what the sweep will use (orchestration.tracking.store)
                uri = os.environ["MLFLOW_TRACKING_URI"]
                check_mlflow_uri(uri, "$MLFLOW_TRACKING_URI")
            note_store(uri, plan.rd.root)
    check_local_resources(plan.cfg, local=not (a.address or os.environ.get("RAY_ADDRESS")))
    check_logged_tables(plan.cfg)


def _print_claims(report) -> None:
    """The report's claims, compact (orchestration/report/claims.py), when it has any."""
    from orchestration.report.claims import summary_from_report
    text = summary_from_report(report) if report is not None else None
    if text:
        print("\n" + text + "\n")
        print("(intervals, seeds > 0 and Holm-adjusted p-values: the report's claims table)")


def _outcome(out) -> int:
    print_end(Path(out.run_dir), out.report)
    if out.report is not None:
        print(f"report:  {Path(out.report) / 'index.md'}")
    cmd = poxm_command()
    if (Path(out.run_dir) / "mlflow_runs.json").is_file():    # no MLflow store (mlflow.enabled=false): nothing to browse
        print(f"browse:  {cmd} ui {out.run_dir}")
    if out.ok:
        return 0
    print(f"poxm: {len(out.errored)} trial(s) errored, {out.n_trials - len(out.done)} not done; "
          f"see `{cmd} status {out.run_dir}`, fix, then `{_resume_command(out.run_dir)}`", file=sys.stderr)
    return EXIT_TRIALS_FAILED


def check_port_free(host: str, port: int) -> None:
    """A busy port is an input error now, not an MLflow server that fails after start-up."""
    import socket
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PoxmInputError(f"--host {host}: cannot resolve ({exc.strerror})") from None
    fam, _, _, _, addr = infos[0]
    with socket.socket(fam, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(addr)
        except OSError as exc:
            raise PoxmInputError(f"--port {port}: {host}:{port} is not free ({exc.strerror}); "
                                 f"pick another, e.g. --port {port + 1}") from None


def _resume_command(run_dir) -> str:
    """The resume that continues `run_dir`, with the flags it needs (orchestration.status.resume_command)."""
    from orchestration.rundir import RunDir
    from orchestration.status import resume_command
    try:
        return resume_command(RunDir(Path(run_dir).resolve()))
    except PoxmInputError:        # an odd record: the plain command, whose first check names it
        return f"{poxm_command()} resume {run_dir}"


def cmd_status(a) -> int:
    from orchestration.status import status_text
    print(status_text(a.run_dir))
    return 0


def cmd_ui(a) -> int:
    from orchestration.tracking.ui import serve
    return serve(a.run_dir, a.host, a.port, check_port=check_port_free)


def cmd_report(a) -> int:
    from orchestration.stages import merge
    from orchestration.stages.sweep import plan_from_run_dir, report_only
    run_dir = Path(a.run_dir[0])
    if len(a.run_dir) > 1 or a.out is not None or merge.is_merged(a.run_dir[0]):
        if len(a.run_dir) == 1 and a.out is None:
            run_dir, path = merge.remerge(a.run_dir[0])
        else:
            run_dir, path = merge.merge_report(a.run_dir, a.out)
    else:
        plan = plan_from_run_dir(a.run_dir[0])
        if not a.no_mlflow:     # the store the report is logged to: checked before anything is rebuilt
            from orchestration.rundir import read_json
            from orchestration.tracking.store import checked_uri
            note_store(checked_uri(plan.rd.root, read_json(plan.rd.mlflow_runs, {})), plan.rd.root)
        path = report_only(plan, log_mlflow=not a.no_mlflow)
    if path:    # the lines `poxm run` ends with, from the same function
        print_end(Path(run_dir), path)
    print(f"report: {path / 'index.md'}" if path else "report: not built (no finished trials yet)")
    return 0


def cmd_ope(a) -> int:
    from orchestration.ope import cmd_ope as run_ope
    return run_ope(a)
