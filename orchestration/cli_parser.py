"""`poxm`'s argument parser: one subcommand per command, errors as one line (orchestration.cli); and how
this shell calls poxm again (`poxm_command`, for the commands poxm suggests)."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from poxm_core.common.errors import PoxmInputError


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


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="poxm", description="POXM: learning ranking policies from extreme bandit feedback "
                                          "- benchmark sweeps with Ray Tune/Train and MLflow.")
    ap.add_argument("--version", action="version", version=f"poxm {_version()}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_prepare(sub)
    _add_train(sub)
    _add_run(sub)
    _add_resume(sub)
    _add_status(sub)
    _add_ui(sub)
    _add_report(sub)
    from orchestration.ope import add_ope_parser
    add_ope_parser(sub)
    return ap


def _add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="prepare stage only: logging model, candidates, variants, bandit logs (cached)",
                       description="Prepare every dataset x seed of CONFIG into the content-addressed cache "
                                   "and print the logging statistics.")
    _overrides(p)
    p.add_argument("--print-config", action="store_true", help="print the fully resolved config first")
    p.add_argument("--cache-dir", help="prepare cache (default <runs_dir>/cache)")


def _add_train(sub) -> None:
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


def _add_run(sub) -> None:
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


def _add_resume(sub) -> None:
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


def _add_status(sub) -> None:
    p = sub.add_parser("status", help="trials done/running/errored/pending (from files, no Ray)",
                       description="Print the state of every trial of the sweep in RUN_DIR.")
    p.add_argument("run_dir", metavar="RUN_DIR")


def _add_ui(sub) -> None:
    p = sub.add_parser("ui", help="MLflow UI for a run's store on 127.0.0.1",
                       description="Start `mlflow server` on the run's tracking store (the sqlite store in RUN_DIR).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--port", type=_port, default=5000, help="TCP port (1-65535) of the UI")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only; "
                   "any other exposes MLflow's read and write API, unauthenticated, to whoever reaches it)")


def _add_report(sub) -> None:
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


def _trusted(p: argparse.ArgumentParser) -> None:
    """What a run directory names that poxm takes only from the user (docs/orchestration.md, "What poxm trusts")."""
    p.add_argument("--plugins", metavar="MODULES", help="comma-separated plugin modules the run's config names, "
                   "which you trust: imported from your PYTHONPATH or --plugin-path (default $POXM_PLUGINS)")
    p.add_argument("--plugin-path", metavar="DIR", action="append", help="a folder of your plugins, put on "
                   "sys.path (repeatable; default $POXM_PLUGIN_PATH)")
    p.add_argument("--storage-path", metavar="PATH", help="the run's resources.storage_path, when it is yours: "
                   "Ray's saved state is loaded from there (default $POXM_STORAGE_PATH)")
    p.add_argument("--cache-dir", metavar="DIR", help="the prepare cache to continue with (default "
                   "<runs dir of RUN_DIR>/cache; another cache the run records is used only when you give it)")


def poxm_command() -> str:
    """How to call poxm again from this shell: 'poxm' when that is what PATH finds, else the path
    this process was started by ('.venv/bin/poxm'), else the interpreter with -m."""
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
