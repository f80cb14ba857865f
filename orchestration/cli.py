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
import signal
import sys

from orchestration.cli_commands import (  # noqa: F401 -- the commands, and what a sweep ends with, as cli.<name>
    EXIT_TRIALS_FAILED, cmd_ope, cmd_prepare, cmd_report, cmd_resume, cmd_run, cmd_status, cmd_train, cmd_ui,
    _print_claims, headline)
from orchestration.cli_errors import STORAGE_HINTS, USER_OS_ERRORS, silence_stdout, storage_error_line
from orchestration.cli_parser import build_parser, poxm_command  # noqa: F401 -- `poxm`'s parser and how to call it, as cli.<name>
from poxm_core.common.errors import DivergedError, PoxmInputError

EXIT_INPUT = 2


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
            for line in fault_injection_lines():
                print(line, file=sys.stderr, flush=True)
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
        silence_stdout()
        return 0
    except OSError as exc:       # a path that is a file, a name too long, a full disk: one line, not a traceback
        if exc.errno not in USER_OS_ERRORS:
            raise
        where = exc.filename or ""
        print(f"poxm: error: {where}{': ' if where else ''}{exc.strerror or exc}{STORAGE_HINTS.get(exc.errno, '')}",
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
                             getattr(a, "storage_path", None), getattr(a, "cache_dir", None))
    store.set_user_uri(getattr(a, "mlflow_uri", None))


def _no_colour_reset_at_exit() -> None:
    """Ray imports colorama and calls colorama.init(), which registers an exit hook writing ESC[0m to a
    terminal's stdout: a stray code after poxm's last line. poxm leaves no colour on, so drop the hook."""
    import atexit
    for name, mod in list(sys.modules.items()):
        if name.endswith("colorama.initialise") and hasattr(mod, "reset_all"):
            atexit.unregister(mod.reset_all)


# Fault injection for the test suite (orchestration.stages.epoch_reports): live in every install, so a
# sweep that runs with one set says so (docs/orchestration.md, "Bad input and security").
FAULT_SWITCHES = {"POXM_INJECT_CRASH_ONCE": "each targeted trial's worker dies after that epoch, once",
                  "POXM_INJECT_HOLD": "trials wait after that epoch while the file exists",
                  "POXM_INJECT_OOM": "each named trial runs out of GPU memory as it starts, once"}


def fault_injection_lines(environ=None) -> list[str]:
    """One line per fault-injection switch set in the environment (none when none is)."""
    import os
    environ = os.environ if environ is None else environ
    return [f"poxm: warning: fault injection {k}={environ[k]!r} is set: {what}; it is a test switch, unset it "
            "for a real sweep" for k, what in FAULT_SWITCHES.items() if environ.get(k)]


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
