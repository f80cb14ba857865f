"""`poxm`: the command line (docs/orchestration.md).

  poxm prepare CONFIG [key=value ...]                      prepare stage only (cached)
  poxm train   CONFIG [key=value ...] --out DIR [...]      one trial, no Ray
  poxm run     CONFIG [key=value ...] [--address ADDR] [--mlflow-uri URI] [--print-config]
  poxm resume  RUN_DIR [--add-seeds 2,3]                  finish unfinished and errored trials; add seeds
  poxm status  RUN_DIR                                     trials done/running/errored/pending (no Ray)
  poxm ui      RUN_DIR [--port N]                          MLflow UI on 127.0.0.1 for that run's store
  poxm report  RUN_DIR                                     gather, select and rebuild the report
  poxm report  RUN_A RUN_B ... [--out DIR]                 one report over runs of one config (other seeds)
  poxm ope     [--data PATH] [--out DIR]                   OPE against the truth on the Open Bandit Dataset

Bad input (config keys, files, arguments) prints one line `poxm: error: ...` and exits 2.
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from pathlib import Path

from poxm_core.common.errors import DivergedError, PoxmInputError

EXIT_INPUT = 2
EXIT_TRIALS_FAILED = 1


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows '(default: X)' after every option that has a real default (not None/False, not already said)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in h or not action.option_strings:
            return h
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr, exit 2 (no usage block)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401
        cmd = self.prog.removeprefix("poxm").strip()
        raise PoxmInputError(f"{cmd + ': ' if cmd else ''}{message} (see `{self.prog} --help`)")


def _overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG", help="sweep config YAML (configs/*.yaml)")
    p.add_argument("overrides", metavar="key=value", nargs="*",
                   help="config overrides, e.g. training.epochs=3 seeds=[0,1] datasets.0.variants.0.T=4")


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("poxm")
    except metadata.PackageNotFoundError:
        return "unknown (not installed; `pip install -e .`)"


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected an integer in 1-65535, e.g. 5000")
    return n


def _check_port_free(host: str, port: int) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="poxm", description="POXM: learning ranking policies from extreme bandit feedback "
                                          "- benchmark sweeps with Ray Tune/Train and MLflow.")
    ap.add_argument("--version", action="version", version=f"poxm {_version()}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("prepare", help="prepare stage only: logging model, candidates, variants, bandit logs (cached)",
                       description="Prepare every dataset x seed of CONFIG into the content-addressed cache "
                                   "and print the logging statistics.")
    _overrides(p)
    p.add_argument("--print-config", action="store_true", help="print the fully resolved config first")
    p.add_argument("--cache-dir", help="prepare cache (default <runs_dir>/cache)")

    p = sub.add_parser("train", help="train one trial (a group of heads) without Ray",
                       description="Train one trial of CONFIG into --out (defaults: first dataset, variant, seed; "
                                   "every method unless --method).")
    _overrides(p)
    p.add_argument("--out", help="output directory (rows.csv, summary.json, checkpoints/)")
    p.add_argument("--dataset")
    p.add_argument("--variant")
    p.add_argument("--method")
    p.add_argument("--seed", type=int)
    p.add_argument("--print-config", action="store_true", help="print the fully resolved config and exit")
    p.add_argument("--cache-dir", help="prepare cache (default <runs_dir>/cache)")

    p = sub.add_parser("run", help="run a whole sweep: prepare, trials (Ray Tune -> Ray Train), gather, select, report",
                       description="Run every stage of the sweep in CONFIG, in <runs_dir>/<name>-<hash>. Running "
                                   "it again continues the same sweep (finished trials are kept).")
    _overrides(p)
    p.add_argument("--address", help="existing Ray cluster (default $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--mlflow-uri", help="MLflow tracking URI, e.g. http://host:5000 (default $MLFLOW_TRACKING_URI, "
                                        "else config mlflow.tracking_uri, else sqlite in the run directory)")
    p.add_argument("--runs-dir", help="override runs_dir (where run directories are created)")
    p.add_argument("--cache-dir", help="prepare cache (default <runs_dir>/cache)")
    p.add_argument("--print-config", action="store_true", help="print the fully resolved config and exit")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--verbose", action="store_true", help="show Ray's, MLflow's and the workers' logs")

    p = sub.add_parser("resume", help="finish an interrupted or failed sweep",
                       description="Continue the sweep in RUN_DIR: unfinished and errored trials run again "
                                   "(from their checkpoints), finished ones are kept; then gather, select, report.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--add-seeds", metavar="SEEDS", help="extend the sweep with these new seeds, e.g. 2,3: their "
                   "trials run, finished ones are kept, the report covers every seed")
    p.add_argument("--address", help="existing Ray cluster (default $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--mlflow-uri", help="MLflow tracking URI (default: the one the sweep started with, when it is "
                                        "the run directory's own store or the one $MLFLOW_TRACKING_URI names)")
    _trusted(p)
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--verbose", action="store_true", help="show Ray's, MLflow's and the workers' logs")

    p = sub.add_parser("status", help="trials done/running/errored/pending (from files, no Ray)",
                       description="Print the state of every trial of the sweep in RUN_DIR.")
    p.add_argument("run_dir", metavar="RUN_DIR")

    p = sub.add_parser("ui", help="MLflow UI for a run's store on 127.0.0.1",
                       description="Start `mlflow server` on the run's tracking store (the sqlite store in RUN_DIR).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--port", type=_port, default=5000, help="TCP port (1-65535) of the UI")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")

    p = sub.add_parser("report", help="gather, select and rebuild the report of a run, or of several runs at once",
                       description="Rebuild results/rows.csv, the selection and report/ of RUN_DIR from its trials' "
                                   "files. Given several runs of one config (only name, seeds or variants differ), one "
                                   "report over all their finished trials, in a directory of its own (--out); "
                                   "the runs are only read.")
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="+")
    p.add_argument("--out", metavar="DIR", help="with several runs: where the merged report goes (default "
                                               "<runs dir of the first run>/<name>-merged-<hash>)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log the report on the sweep's MLflow parent run")
    p.add_argument("--mlflow-uri", help="the MLflow server or store the run logs to, when it is not the run "
                                        "directory's own (default $MLFLOW_TRACKING_URI)")
    _trusted(p)
    from orchestration.ope import add_ope_parser
    add_ope_parser(sub)
    return ap


def _trusted(p: argparse.ArgumentParser) -> None:
    """What a run directory names that poxm takes only from the user (docs/orchestration.md, "What poxm trusts")."""
    p.add_argument("--plugins", metavar="MODULES", help="comma-separated plugin modules the run's config names, "
                   "which you trust: imported from your PYTHONPATH or --plugin-path (default $POXM_PLUGINS)")
    p.add_argument("--plugin-path", metavar="DIR", action="append", help="a folder of your plugins, put on "
                   "sys.path (repeatable; default $POXM_PLUGIN_PATH)")
    p.add_argument("--storage-path", metavar="PATH", help="the run's resources.storage_path, when it is yours: "
                   "Ray's saved state is loaded from there (default $POXM_STORAGE_PATH)")


# --------------------------------------------------------------------------------------------
# commands

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
        _note_store(resolve_uri(plan.rd.root, a.mlflow_uri, cfg.mlflow.tracking_uri))
    from orchestration.stages.sweep import run_sweep
    out = run_sweep(cfg, runs_dir=a.runs_dir, cache_dir=a.cache_dir, address=a.address, mlflow_uri=a.mlflow_uri,
                    progress=not a.quiet, verbose=a.verbose)
    return _outcome(out)


def cmd_resume(a) -> int:
    from orchestration.stages.sweep import plan_from_run_dir, resume_sweep
    seeds = None
    if a.add_seeds is not None:
        from orchestration.stages.merge import extend_plan, parse_seeds
        seeds = parse_seeds(a.add_seeds)
        plan = extend_plan(a.run_dir, seeds)   # input errors before Ray starts
    else:
        plan = plan_from_run_dir(a.run_dir)
    _check_resume_inputs(a, plan)
    out = resume_sweep(a.run_dir, address=a.address, mlflow_uri=a.mlflow_uri, progress=not a.quiet,
                       verbose=a.verbose, add_seeds=seeds)
    return _outcome(out)


def _check_resume_inputs(a, plan) -> None:
    """`poxm resume`: the Ray address, the tracking URI (the one given, else the one the run records,
    used only when it is the run's own store or the user's) and the resources, before anything is written."""
    from orchestration.cluster.preflight import check_address, check_local_resources, check_mlflow_uri
    from orchestration.rundir import read_json
    from orchestration.tracking.store import checked_uri
    check_address(a.address)
    if plan.cfg.mlflow.enabled:
        if a.mlflow_uri:
            check_mlflow_uri(a.mlflow_uri, "--mlflow-uri")
            _note_store(a.mlflow_uri)
        else:
            uri = checked_uri(plan.rd.root, read_json(plan.rd.mlflow_runs, {}))
            if uri is not None:
                check_mlflow_uri(uri, "the run's MLflow store")
            _note_store(uri, plan.rd.root)
    check_local_resources(plan.cfg, local=not (a.address or os.environ.get("RAY_ADDRESS")))


def headline(run_dir: Path) -> str | None:
    """The end-of-run table, in the report's units and order: test R@5 x100 of the (p, lambda) each
    method's selection criterion chose on validation, mean over seeds, one row per dataset x method
    (the report's method order and names), one column per variant."""
    import pandas as pd

    from orchestration.report.tables import method_list, method_name
    f = Path(run_dir) / "results" / "selection.csv"
    if not f.is_file():
        return None
    from orchestration.stages.selection import RunSelection
    sel = RunSelection.from_frame(pd.read_csv(f)).honest()
    if sel.empty or "test_R@5" not in sel or sel["test_R@5"].isna().all():     # a logged sweep has no R@5
        return None
    t = sel.pivot_table(index=["dataset", "method"], columns="variant", values="test_R@5", aggfunc="mean") * 100
    order = method_list(sorted(sel["method"].astype(str).unique()))
    t = t.reindex(sorted(((d, m) for d in t.index.get_level_values(0).unique() for m in order if (d, m) in t.index),
                         key=lambda dm: (dm[0], order.index(dm[1]))))
    t.index = [f"{d}  {method_name(m)}" for d, m in t.index]
    t.columns.name = None
    crit = ", ".join(sorted(sel["criterion"].astype(str).unique()))
    n = sel["seed"].nunique()
    return (f"test R@5 (x100) of the selected (p, lambda) (by {crit} on validation; mean of {n} seed(s)):\n"
            + t.to_string(float_format=lambda v: f"{v:.2f}", na_rep="-"))


def poxm_command() -> str:
    """How to call poxm again from this shell: 'poxm' when that is what PATH finds, else the path
    this process was started by ('.venv/bin/poxm'), else the interpreter with -m."""
    import os
    import shutil
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    on_path = shutil.which("poxm")
    if Path(argv0).name == "poxm":
        if on_path and Path(on_path).resolve() == Path(argv0).resolve():
            return "poxm"
        full = str(Path(argv0).absolute())
        rel = os.path.relpath(full)
        return full if rel.startswith("..") else (rel if "/" in rel else "./" + rel)
    if on_path and not argv0.endswith(("cli.py", "__main__.py")):
        return "poxm"
    exe = os.path.relpath(sys.executable) if not os.path.relpath(sys.executable).startswith("../..") else sys.executable
    return f"{exe} -m orchestration.cli"


def _print_claims(report) -> None:
    """The report's claims, compact (orchestration/report/claims.py), when it has any."""
    from orchestration.report.claims import summary_from_report
    text = summary_from_report(report) if report is not None else None
    if text:
        print("\n" + text + "\n")
        print("(intervals, seeds > 0 and Holm-adjusted p-values: the report's claims table)")


def _outcome(out) -> int:
    table = headline(out.run_dir)
    if table is None and out.report is not None:      # a logged sweep: the off-policy estimates instead
        from orchestration.report.logged import terminal_headline
        table = terminal_headline(Path(out.report))
    if table:
        print("\n" + table + "\n")
    _print_claims(out.report)
    if out.report is not None:
        print(f"report:  {Path(out.report) / 'index.md'}")
    cmd = poxm_command()
    if (Path(out.run_dir) / "mlflow_runs.json").is_file():    # no MLflow store (mlflow.enabled=false): nothing to browse
        print(f"browse:  {cmd} ui {out.run_dir}")
    if out.ok:
        return 0
    print(f"poxm: {len(out.errored)} trial(s) errored, {out.n_trials - len(out.done)} not done; "
          f"see `{cmd} status {out.run_dir}`, fix, then `{cmd} resume {out.run_dir}`", file=sys.stderr)
    return EXIT_TRIALS_FAILED


def cmd_status(a) -> int:
    from orchestration.status import status_text
    print(status_text(a.run_dir))
    return 0


def cmd_ui(a) -> int:
    from orchestration.tracking.ui import serve
    return serve(a.run_dir, a.host, a.port, check_port=_check_port_free)


def _report_headline(run_dir: Path, report: Path | None) -> str | None:
    """The headline `poxm run` prints at its end (`headline`; a logged sweep: its off-policy estimates)."""
    table = headline(run_dir)
    if table is None and report is not None:
        from orchestration.report.logged import terminal_headline
        table = terminal_headline(Path(report))
    return table


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
            _note_store(checked_uri(plan.rd.root, read_json(plan.rd.mlflow_runs, {})), plan.rd.root)
        path = report_only(plan, log_mlflow=not a.no_mlflow)
    table = _report_headline(Path(run_dir), path) if path else None
    if table:   # the table `poxm run` ends with, from the same function
        print("\n" + table + "\n")
    _print_claims(path)
    print(f"report: {path / 'index.md'}" if path else "report: not built (no finished trials yet)")
    return 0


def cmd_ope(a) -> int:
    from orchestration.ope import cmd_ope as run_ope
    return run_ope(a)


COMMANDS = {"prepare": cmd_prepare, "train": cmd_train, "run": cmd_run, "resume": cmd_resume,
            "status": cmd_status, "ui": cmd_ui, "report": cmd_report, "ope": cmd_ope}


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse, letting key=value overrides come after options too (`poxm run C --address A k=v`)."""
    ap = build_parser()
    a, extra = ap.parse_known_args(argv)
    if hasattr(a, "overrides"):
        a.overrides = list(a.overrides) + [x for x in extra if not x.startswith("-")]
        extra = [x for x in extra if x.startswith("-")]
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        a = parse(argv)
        if a.command is None:
            build_parser().print_help()
            return EXIT_INPUT
        _user_settings(a)
        if a.command in ("run", "resume"):
            _sigterm_as_interrupt()
        return COMMANDS[a.command](a)
    except PoxmInputError as exc:
        print(f"poxm: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return EXIT_INPUT
    except DivergedError as exc:
        print(f"poxm: error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"poxm: error: {exc.filename or exc}: file not found", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt as exc:
        print(f"poxm: {exc or 'interrupted'}", file=sys.stderr)
        return 130
    except BrokenPipeError:      # `poxm status RUN | head -1`: the reader left; say nothing more
        _silence_stdout()
        return 0
    except OSError as exc:       # a path that is a file, a name too long, a full disk: one line, not a traceback
        if exc.errno not in _USER_OS_ERRORS:
            raise
        where = exc.filename or ""
        print(f"poxm: error: {where}{': ' if where else ''}{exc.strerror or exc}{_STORAGE_HINTS.get(exc.errno, '')}",
              file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:     # SQLite's "disk I/O error" / "database or disk is full" under MLflow's wrappers
        line = storage_error_line(exc)
        if line is None:
            raise
        print(f"poxm: error: {line}", file=sys.stderr)
        return EXIT_INPUT
    finally:
        _no_colour_reset_at_exit()


def _user_settings(a) -> None:
    """What the user says on the command line about plugins, storage and the tracking URI: the only
    source, besides their environment, of what a run directory's own records may be used for."""
    from orchestration import rundir
    from orchestration.tracking import store
    rundir.set_user_settings(getattr(a, "plugins", None), getattr(a, "plugin_path", None),
                             getattr(a, "storage_path", None))
    store.set_user_uri(getattr(a, "mlflow_uri", None))


def _no_colour_reset_at_exit() -> None:
    """Ray imports colorama and calls colorama.init(), which registers an exit hook writing ESC[0m to a
    terminal's stdout: a stray code after poxm's last line. poxm leaves no colour on, so drop the hook."""
    import atexit
    for name, mod in list(sys.modules.items()):
        if name.endswith("colorama.initialise") and hasattr(mod, "reset_all"):
            atexit.unregister(mod.reset_all)


# OS errors that come from what the user gave (paths, names) or from their machine (disk space, a file-size
# limit, a failing disk): one line naming the path (poxm_core.common.atomic names the file a write was for)
_USER_OS_ERRORS = {errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ENOSPC, errno.EACCES, errno.EROFS,
                   errno.EEXIST, errno.EFBIG, errno.EDQUOT, errno.EIO}
_STORAGE_HINTS = {
    errno.ENOSPC: " (free some space, then `poxm resume RUN_DIR` continues)",
    errno.EDQUOT: " (free some space or raise the quota, then `poxm resume RUN_DIR` continues)",
    errno.EFBIG: " (a file-size limit, `ulimit -f`, stopped the write; raise it, then run the command again)",
    errno.EIO: " (the disk or file system failed a write; check it, then run the command again)",
}
# SQLite's storage errors (what it says when a write fails: a full disk, a file-size limit, a failing disk)
_SQLITE_STORAGE = ("disk i/o error", "database or disk is full")
_STORE = {"path": None}      # the SQLite file of the MLflow store this command uses, once known


def _note_store(uri: str | None, run_root: Path | None = None) -> None:
    """Remember the SQLite file behind the tracking URI a command uses, to name it if SQLite fails."""
    if not uri:
        return
    uri = str(uri)
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        _STORE["path"] = str(path if path.is_absolute() or run_root is None else Path(run_root) / path)


def storage_error_line(exc: BaseException) -> str | None:
    """One line for a storage failure found anywhere in `exc`'s chain (MLflow wraps SQLAlchemy, which wraps
    sqlite3): an OSError of _STORAGE_HINTS with its file, or SQLite's own error with the store's file. None
    when the chain holds no storage failure."""
    import sqlite3
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _STORAGE_HINTS:
            where = f"{e.filename}: " if e.filename else ""
            return f"{where}{e.strerror or e}{_STORAGE_HINTS[e.errno]}"
        if isinstance(e, sqlite3.OperationalError) and str(e).lower().startswith(_SQLITE_STORAGE):
            where = _STORE["path"] or "the MLflow store"
            return (f"{where}: SQLite: {str(e).splitlines()[0]} (a write failed: a full or failing disk, or a "
                    "file-size limit, `ulimit -f`; fix it, then run the command again)")
        todo += [e.__cause__, e.__context__, getattr(e, "orig", None)]
    return None


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def _sigterm_as_interrupt() -> None:
    """SIGTERM ends a sweep like Ctrl-C (trials stop, Ray shuts down, exit 130) instead of killing the
    driver in the middle of Ray's native code."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:     # not the main thread (tests calling main() from a worker thread)
        pass


if __name__ == "__main__":
    raise SystemExit(main())
