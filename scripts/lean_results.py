"""What a published results folder (docs/results/<name>/) keeps, and the shrinking that gets it there.

A published folder is text and data a reader or the rebuild needs, each file once:
  - tables as Markdown and CSV (LaTeX is rebuilt on demand by `poxm report`), one PNG per figure (PDF too
    is rebuilt on demand), index.md without links to either;
  - the final rows and what the tables are rebuilt from of the per-instance test values: the sums the
    claims and the logging-quality landscape read (moments/, orchestration/report/instance_moments.py),
    computed from the (method, metric) pairs a claim reads (orchestration.report.claims.CLAIMS) and, for
    every method, the greedy P@5 and stochastic R@5 the landscape reads (kept_keys);
  - a per-dataset page built from a sweep links to the sweep's files (figures, rows, logging statistics,
    per-instance values, selection, and any table byte-identical to the sweep's) instead of copying them.

    python scripts/lean_results.py docs/results/obd     # apply the text-and-PNG rules to a folder in place
"""
from __future__ import annotations

import io
import lzma
import os
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestration.report.claims import CLAIMS, _twin  # noqa: E402
from orchestration.report.landscape import POLICIES  # noqa: E402

ON_DEMAND = (".tex", ".pdf", ".html")          # rebuilt by `poxm report`, never published
_ON_DEMAND_LINK = re.compile(r" · \[(?:TEX|PDF)\]\([^)]*\)")
_LINK = re.compile(r"\]\(([^)#\s]+)\)")
# what a per-dataset page takes from its sweep: rows, logging statistics, moments (or the per-instance values
# of a folder published before), selection,
# figures (its own config.yaml, the sweep's reduced to the dataset, stays: 3 KB, and its run id)
SWEEP_DATA = ("instances", "moments", "figures", "selection.csv")
SWEEP_DATA_PREFIXES = ("rows", "prepare")        # rows-<dataset>.csv.xz, prepare.csv.xz


def claim_pairs() -> set[tuple[str, str]]:
    """(method, metric) of every per-instance array a claim reads."""
    return {pair for c in CLAIMS for pair in ((c.first, c.metric), (c.second, c.second_metric or c.metric))}


def kept_keys(keys) -> set[str]:
    """Of per-instance array keys (dataset|variant|seed|method|p|lam|metric), those a claim or the landscape
    reads: a greedy head without the metric keeps its twin, which the claims read instead. Without the
    landscape's (every method's greedy P@5 and stochastic R@5), a rebuilt landscape table would fall back
    to the seed term alone where the published one had the test-set term too."""
    have = set(keys)
    methods = {k.split("|")[3] for k in have}
    pairs = claim_pairs() | {(m, metric) for m in methods for metric in POLICIES.values()}
    keep = set()
    for k in have:
        prefix, metric = k.rsplit("|", 1)
        method = prefix.split("|")[3]
        for m in (m for meth, m in pairs if meth == method):
            if metric == m or (metric == _twin(m) and f"{prefix}|{m}" not in have):
                keep.add(k)
    return keep


def keep_claim_arrays(npz: Path) -> Path:
    """Replace `npz` by `<name>.npz.xz` holding only the arrays a claim or the landscape reads (kept_keys):
    xz over the plain archive takes a fifth less than the zip's own compression."""
    with np.load(npz) as z:
        arrays = {k: z[k] for k in sorted(kept_keys(z.files))}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    out = npz.with_name(npz.name + ".xz")
    out.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    npz.unlink()
    return out


def shrink_png(path: Path) -> None:
    """A figure as a 256-colour palette PNG: matplotlib's plots need no more, and it is a third the size."""
    from PIL import Image
    with Image.open(path) as im:
        q = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    buf = io.BytesIO()
    q.save(buf, "PNG", optimize=True)
    path.write_bytes(buf.getvalue())


def make_lean(folder: Path) -> None:
    """Apply the text-and-PNG rules to `folder` in place: no LaTeX, PDF or HTML, no links to them,
    palette PNGs, only the claims' per-instance arrays."""
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.suffix in ON_DEMAND:
            f.unlink()
        elif f.is_file() and f.suffix == ".png":
            shrink_png(f)
        elif f.is_file() and f.suffix == ".npz" and f.parent.name == "instances":
            keep_claim_arrays(f)
    for md in folder.rglob("*.md"):
        text = md.read_text()
        lean = _ON_DEMAND_LINK.sub("", text)
        if lean != text:
            md.write_text(lean)


def link_to_sweep(page: Path, sweep: Path, up: str) -> list[str]:
    """Make a per-dataset `page` link to its `sweep`'s files instead of holding copies: its data and
    figures always, a table where it is byte-identical to the sweep's; `up` is the sweep's path relative
    to where the page will be published. Returns the relative paths removed."""
    removed = []
    for f in sorted(p for p in page.rglob("*") if p.is_file() and p.name != "index.md"):
        rel = f.relative_to(page).as_posix()
        twin = sweep / rel
        data = rel.split("/")[0] in SWEEP_DATA or rel.startswith(SWEEP_DATA_PREFIXES)
        if data or (twin.is_file() and twin.read_bytes() == f.read_bytes()):
            f.unlink()
            removed.append(rel)
    for d in sorted((p for p in page.rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    index = page / "index.md"
    gone = set(removed)
    index.write_text(_LINK.sub(lambda m: f"]({up}/{m.group(1)})" if m.group(1) in gone else m.group(0),
                               index.read_text()))
    return removed


def share_identical(results: Path) -> list[Path]:
    """A file byte-identical across published folders (two runs sharing their logging models share their
    prepare statistics and covering figures) is kept once, in the folder with the shortest name (the
    sweep, not its ablation); the others become relative symbolic links to it, so their pages' links
    still work. Markdown pages are each their own. Returns the links made."""
    groups: dict[tuple[str, bytes], list[Path]] = {}
    for f in sorted(results.glob("[!.]*/**/*")):               # published folders, not staged ones
        if f.is_file() and not f.is_symlink() and f.suffix != ".md":
            groups.setdefault((f.name, f.read_bytes()), []).append(f)
    made = []
    for same in groups.values():
        holder = min(same, key=lambda f: (len(f.relative_to(results).parts[0]), str(f)))
        for f in same:
            if f != holder:
                f.unlink()
                f.symlink_to(os.path.relpath(holder, f.parent))
                made.append(f)
    return made


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        make_lean(Path(arg))
    if sys.argv[1:]:
        share_identical(Path(sys.argv[1]).resolve().parent)
