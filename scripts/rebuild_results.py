"""Rebuild every published table under docs/results from what is committed there.

Each published report's index.md names the command that built it (`python scripts/publish_results.py
SRC [--dataset NAME] --out FOLDER`); this runs each of them again, sweeps before the per-dataset pages
that link to them. --check builds each beside its folder and compares the Markdown and CSV instead of
replacing it (exit 1 on a difference): what the tests run on one folder.

    python scripts/rebuild_results.py                                   # every published folder, in place
    python scripts/rebuild_results.py --check docs/results/examples-eurlex-partial
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.publish_results import main as publish  # noqa: E402

RESULTS = ROOT / "docs" / "results"
COMMAND = re.compile(r"Rebuilt from the published final rows with `python scripts/publish_results.py ([^`]*)`")


def published(results: Path = RESULTS) -> dict[Path, list[str]]:
    """{folder: the publish_results arguments its index.md names}, sweeps first, then per-dataset pages."""
    found = {}
    for index in sorted(results.glob("*/index.md")):
        m = COMMAND.search(index.read_text())
        if m:
            found[index.parent] = shlex.split(m.group(1))
    return dict(sorted(found.items(), key=lambda kv: ("--dataset" in kv[1], kv[0].name)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, help="published folders (default: every one)")
    ap.add_argument("--check", action="store_true", help="compare with the committed tables, change nothing")
    a = ap.parse_args(argv)
    every = published()
    chosen = {f.resolve() for f in a.folders}
    unknown = chosen - set(every)
    if unknown:
        print(f"rebuild_results: error: {sorted(map(str, unknown))[0]}: no index.md naming a publish_results "
              f"command (published: {', '.join(f.name for f in every)})", file=sys.stderr)
        return 2
    os.chdir(ROOT)      # the commands name their folders from the repository root
    rc = 0
    for folder, args in every.items():
        if not chosen or folder in chosen:
            rc = max(rc, publish(args + (["--check"] if a.check else [])))
    return rc


if __name__ == "__main__":
    sys.exit(main())
