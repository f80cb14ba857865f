"""Rebuild a published report (a docs/results/<name>/ folder) from its committed rows.

A published folder holds the run's final rows that its tables read (rows-<dataset>.csv.xz; older folders one
rows.csv.gz; orchestration.report.instances.kept_rows: every validation row, test R@5 at every grid point,
every test row of a head a selection chose; the run directory and MLflow keep the rest), its
logging statistics (prepare.csv.xz), its
resolved config (config.yaml) and, where the run kept per-instance test values, the sums of them the
claims' test-set term reads (moments/<dataset>_<variant>.npz.xz: orchestration/report/instance_moments.py;
a folder published before keeps the selected heads' arrays, instances/, and is rewritten with moments
when rebuilt), beside the report. When the run directory itself is gone (a GPU
machine given back), the report can still be rebuilt from them, and completed:

  --add TRIAL_DIR ...   trials trained later with `poxm train` (same config; for the cells the run never
                        finished): their final rows join the published ones. A trial whose config differs
                        from the folder's (apart from runs_dir and data_root), or whose (dataset,
                        variant, seed) the folder already holds, is refused.
  --join FOLDER ...     other published folders of the same declared config (the stages of one run that
                        ran apart: other datasets, variants or seeds): their rows, logging statistics and
                        per-instance values join the source's, and the config names the union of their
                        datasets and variants. A folder whose config differs in anything but its
                        datasets, a dataset or variant of the same name defined differently, or a
                        (dataset, variant, seed) two folders hold, is refused.
  --dataset NAME        keep one dataset: a report of its own (config reduced to that dataset, named
                        after it: what `poxm run configs/NAME.yaml` with the same overrides would produce);
                        its page links to the source folder's figures, data and identical tables.
  --check               build as usual, then compare its Markdown and CSV with the folder at --out
                        instead of replacing it (exit 1 on a difference); `scripts/rebuild_results.py`.

  python scripts/publish_results.py docs/results/real-data --add /tmp/trials/* --out docs/results/real-data
  python scripts/publish_results.py docs/results/real-data --dataset bibtex --out docs/results/bibtex
  python scripts/publish_results.py docs/results/confirmatory --join STAGE_DIR... --out docs/results/confirmatory
  python scripts/publish_results.py claims docs/results/bibtex docs/results/delicious ...   (one table, Markdown)
  python scripts/publish_results.py replication docs/results/confirmatory docs/results/real-data docs/results/real-data-abc
      (Markdown: each cell the confirmatory run shares with an exploratory one, both verdicts, and how they read)

The report is built by the same code as `poxm report` (selection on the validation log by the config's
criterion; test labels choose nothing), from the rows as the folder keeps them (seven significant digits,
the rows the tables read: a rebuild from the folder gives the same tables; rebuilding a folder that holds
more rows leaves those out), in a temporary directory renamed into place once complete, and
kept to what a published folder holds (scripts/lean_results.py: text tables, one PNG per figure, the
claims' moments; LaTeX and PDF come from `poxm report` on demand).
Learning curves need the per-epoch rows, which published folders do not keep: those figures are left out.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestration.stages.merge import _first_difference  # noqa: E402
from orchestration.report.inputs import selection_criterion  # noqa: E402
from orchestration.report.claims import claims_markdown, read_claims  # noqa: E402
from orchestration.report.claims_display import claims_replication  # noqa: E402
from orchestration.report.build import SELECTION_LINK, build_report  # noqa: E402
from orchestration.report.instance_moments import (MOMENTS_DIR, ArrayMoments, StoredMoments,  # noqa: E402
                                                   read_moments, write_moments)
from orchestration.report.instances import (as_published, load_arrays, read_published_instances,  # noqa: E402
                                            read_rows, row_files, write_rows)
from poxm_core.common.atomic import publish  # noqa: E402
from scripts.lean_results import kept_keys, link_to_sweep, make_lean, share_identical  # noqa: E402
from poxm_core.common.errors import PoxmInputError  # noqa: E402

CELL = ["dataset", "variant", "seed"]
PREPARE = "prepare.csv.xz"
IGNORED = ("runs_dir", "data_root")        # where a run wrote and read, not what it computed


def _comparable(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k not in IGNORED}


def prepare_file(src: Path) -> Path | None:
    """The folder's logging statistics: prepare.csv.xz (published now) or prepare.csv (before)."""
    return next((f for f in (src / PREPARE, src / "prepare.csv") if f.is_file()), None)


def read_published(src: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    for f in ("config.yaml", "rows", "prepare"):
        found = row_files(src) if f == "rows" else prepare_file(src) if f == "prepare" else (src / f).is_file()
        if not found:
            raise PoxmInputError(f"{src}: not a published results folder (no " + {
                "rows": "rows-<dataset>.csv.xz or rows.csv.gz", "prepare": "prepare.csv.xz"}.get(f, f) + ")")
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    rows = read_rows(src)
    return cfg, rows[rows["final"]].copy(), pd.read_csv(prepare_file(src))


def added_rows(cfg: dict, rows: pd.DataFrame, trial_dirs: list[Path]) -> pd.DataFrame:
    have = set(map(tuple, rows[CELL].drop_duplicates().itertuples(index=False)))
    frames = []
    for d in trial_dirs:
        if not (d / "rows.csv").is_file() or not (d / "config.yaml").is_file():
            raise PoxmInputError(f"{d}: not a finished `poxm train` output (no rows.csv or config.yaml)")
        saved = yaml.safe_load((d / "config.yaml").read_text())
        diff = _first_difference(_comparable(cfg), _comparable(saved.get("config", {})))
        if diff:
            key, a, b = diff
            raise PoxmInputError(f"{d}/config.yaml: {key} differs from the published config ({b!r} vs {a!r})")
        t = saved["trial"]
        cell = (t["dataset"], t["variant"], int(t["seed"]))
        if cell in have:
            raise PoxmInputError(f"{d}: {'/'.join(map(str, cell))} is already in the published rows")
        have.add(cell)
        new = pd.read_csv(d / "rows.csv")
        frames.append(new[new["final"]])
    return pd.concat([rows, *frames], ignore_index=True) if frames else rows


def _cells(rows: pd.DataFrame) -> set[tuple]:
    return set(map(tuple, rows[CELL].drop_duplicates().astype(str).itertuples(index=False)))


def _join_datasets(datasets: list[dict], more: list[dict], where: Path) -> None:
    """Add `more`'s datasets and variants to `datasets` (in place): a new name is appended, a known one
    must be defined the same (its variants matched by name, a new variant appended)."""
    for d in more:
        same = next((x for x in datasets if x["name"] == d["name"]), None)
        if same is None:
            datasets.append(dict(d, variants=list(d["variants"])))
            continue
        diff = _first_difference({k: v for k, v in same.items() if k != "variants"},
                                 {k: v for k, v in d.items() if k != "variants"}, f"datasets.{d['name']}")
        if diff:
            raise PoxmInputError(f"{where}/config.yaml: {diff[0]} differs from the source's ({diff[2]!r} vs {diff[1]!r})")
        known = {v["name"]: v for v in same["variants"]}
        for v in d["variants"]:
            if v["name"] not in known:
                same["variants"].append(v)
            elif v != known[v["name"]]:
                raise PoxmInputError(f"{where}/config.yaml: variant {d['name']}/{v['name']} is defined differently "
                                     f"from the source's ({v} vs {known[v['name']]})")


def joined(cfg: dict, rows: pd.DataFrame, prepare: pd.DataFrame, folders: list[Path]):
    """The source and `folders` (published stages of the same declared config) as one: (config naming the
    union of their datasets and variants, rows, logging statistics)."""
    datasets = [dict(d, variants=list(d["variants"])) for d in cfg["datasets"]]
    rows_all, prep_all, have = [rows], [prepare], _cells(rows)
    for f in folders:
        other, r, p = read_published(f)
        diff = _first_difference({k: v for k, v in _comparable(cfg).items() if k != "datasets"},
                                 {k: v for k, v in _comparable(other).items() if k != "datasets"})
        if diff:
            raise PoxmInputError(f"{f}/config.yaml: {diff[0]} differs from the source's ({diff[2]!r} vs {diff[1]!r})")
        _join_datasets(datasets, other["datasets"], f)
        both = have & _cells(r)
        if both:
            raise PoxmInputError(f"{f}: {'/'.join(sorted(both)[0])} is already in the source's rows "
                                 f"({len(both)} such cells)")
        have |= _cells(r)
        rows_all.append(r)
        prep_all.append(p)
    return (dict(cfg, datasets=datasets), pd.concat(rows_all, ignore_index=True),
            pd.concat(prep_all, ignore_index=True))


def one_dataset(cfg: dict, rows: pd.DataFrame, prepare: pd.DataFrame, name: str):
    names = [d["name"] for d in cfg["datasets"]]
    if name not in names:
        raise PoxmInputError(f"--dataset {name}: not in the published config (datasets: {', '.join(names)})")
    cfg = dict(cfg, name=name, datasets=[d for d in cfg["datasets"] if d["name"] == name])
    return cfg, rows[rows["dataset"] == name], prepare[prepare["dataset"] == name]


def _moments(src: Path, trial_dirs: list[Path], joined_folders: list[Path] = ()):
    """The claims' per-instance terms (instance_moments): the folder's and the joined folders' kept moments,
    and the per-instance arrays of the joined stages, of folders published before moments were kept
    (instances/) and of the added trials; None when there are none (the claims then have the seed term
    alone). The report built with it asks its questions of it, and what it asked is what the folder keeps."""
    kept, arrays = StoredMoments(), {}
    for f in [src, *joined_folders]:
        kept.add_all(read_moments(f))
        arrays.update(read_published_instances(f))
    arrays.update(load_arrays([d / "test_instances.npz" for d in trial_dirs]))
    if not kept and not arrays:
        return None
    # the arrays in the half precision a published folder kept them in before it kept moments, so that a
    # stage's values give the same moments whichever way they arrive
    return ArrayMoments({k: arrays[k].astype(np.float16) for k in kept_keys(arrays)}, kept=kept)


def _compare(built: Path, published: Path) -> int:
    """0 when every Markdown and CSV file of `built` equals the one at `published` and `published` holds
    no table `built` lacks; else 1, each difference named on one line."""
    text = {".md", ".csv"}
    mine = {f.relative_to(built).as_posix() for f in built.rglob("*") if f.suffix in text}
    theirs = {f.relative_to(published).as_posix() for f in published.rglob("*")
              if f.suffix in text and f.name != "README.md"} if published.is_dir() else set()
    bad = [f"{published / r}: not rebuilt" for r in sorted(theirs - mine)]
    bad += [f"{published / r}: " + ("missing" if r not in theirs else "differs from the rebuilt one")
            for r in sorted(mine) if r not in theirs or (built / r).read_bytes() != (published / r).read_bytes()]
    for line in bad:
        print(f"publish_results: {line}", file=sys.stderr)
    print(f"{published}: " + ("rebuilt tables equal the committed ones" if not bad else f"{len(bad)} differences"))
    return 1 if bad else 0


def replication(folders: list[Path]) -> int:
    """Print claims_replication of the first folder (the confirmatory run) against the others; a variant of
    the same dataset and name defined differently in two folders is refused (their cells are not the same
    experiment), in one line with exit 2."""
    seen: dict[tuple[str, str], tuple[dict, Path]] = {}
    for f in folders:
        if read_claims(f) is None:
            print(f"publish_results: error: {f}: no tables/claims.csv", file=sys.stderr)
            return 2
        for d in yaml.safe_load((f / "config.yaml").read_text())["datasets"]:
            for v in d["variants"]:
                spec = {k: x for k, x in v.items() if x is not None}
                first = seen.setdefault((d["name"], v["name"]), (spec, f))
                if first[0] != spec:
                    print(f"publish_results: error: {d['name']} variant {v['name']} is {first[0]} in {first[1]} "
                          f"but {spec} in {f}: not the same cells", file=sys.stderr)
                    return 2
    print(claims_replication(read_claims(folders[0]), [read_claims(f) for f in folders[1:]]))
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["claims"]:
        print(claims_markdown([read_claims(Path(p)) for p in sys.argv[2:]]))
        return 0
    if argv is None and sys.argv[1:2] == ["replication"]:      # replication CONFIRMATORY EXPLORATORY...
        return replication([Path(p) for p in sys.argv[2:]])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("src", type=Path, help="a published results folder (config.yaml, rows-*.csv.xz, prepare.csv.xz)")
    ap.add_argument("--add", type=Path, nargs="+", default=[], metavar="TRIAL_DIR")
    ap.add_argument("--join", type=Path, nargs="+", default=[], metavar="FOLDER")
    ap.add_argument("--dataset")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of replacing it")
    a = ap.parse_args(argv)
    try:
        cfg, rows, prepare = read_published(a.src)
        if a.join:
            cfg, rows, prepare = joined(cfg, rows, prepare, a.join)
        rows = added_rows(cfg, rows, a.add)
        if a.dataset:
            cfg, rows, prepare = one_dataset(cfg, rows, prepare, a.dataset)
        # the rows as the folder keeps them: rounded, and only those the tables read (instances.kept_rows)
        rows = as_published(rows, selection_criterion(cfg))
        with tempfile.TemporaryDirectory(prefix="publish-") as tmp:
            run = Path(tmp) / cfg["name"]
            (run / "results").mkdir(parents=True)
            (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            rows.to_csv(run / "results" / "rows.csv", index=False)
            prepare.to_csv(run / "results" / "prepare.csv", index=False)
            moments = _moments(a.src, a.add, a.join)
            report = build_report(run, moments=moments)
            # joined stages are one folder afterwards: the command shown is the one that rebuilds it from itself
            shown = " ".join(["python scripts/publish_results.py", str(a.out if a.join else a.src)]
                             + (["--add", "TRIAL_DIR..."] if a.add else [])
                             + (["--dataset", a.dataset] if a.dataset else []) + ["--out", str(a.out)])
            index = report / "index.md"
            # the folder is flat: the run's selection.csv lies beside index.md
            index.write_text(index.read_text().replace(
                f"Regenerate with `poxm report <runs_dir>/{cfg['name']}`.",
                f"Rebuilt from the published final rows with `{shown}`.").replace(
                f"]({SELECTION_LINK})", "](selection.csv)"))
            staged = Path(tempfile.mkdtemp(prefix=f".{a.out.name}.tmp-", dir=a.out.parent))
            try:
                shutil.copytree(report, staged, dirs_exist_ok=True)
                # the self-contained HTML inlines every figure (several MB); index.md links the same files
                (staged / "index.html").unlink(missing_ok=True)
                # the folder's own config.yaml as it was (its run id pins it), a reduced one for --dataset, the
                # union of the stages' datasets and variants for --join
                shutil.copy(run / "config.yaml" if a.dataset or a.join else a.src / "config.yaml", staged / "config.yaml")
                shutil.copy(run / "results" / "selection.csv", staged / "selection.csv")
                for f in row_files(staged):     # the report's copy may hold the source's: one layout only
                    f.unlink()
                write_rows(rows, staged)
                prepare.to_csv(staged / PREPARE, index=False, compression={"method": "xz", "preset": 9})
                if moments is not None:   # what the claims' test-set term read, for the rebuild to read again
                    write_moments(moments, staged / MOMENTS_DIR, sorted(set(rows["dataset"].astype(str))))
                make_lean(staged)
                if a.dataset and not a.add:    # its data are the source's: link, do not copy
                    link_to_sweep(staged, a.src, os.path.relpath(a.src.resolve(), a.out.resolve()))
                if a.check:
                    return _compare(staged, a.out)
                # the old folder moves aside first and is deleted only once the new one is in place, so
                # an interruption leaves one complete folder (also when --out is the source)
                old = a.out.with_name(f".{a.out.name}.old-{os.getpid()}") if a.out.exists() else None
                if old is not None:
                    a.out.rename(old)
                try:
                    publish(staged, a.out)
                except BaseException:
                    if old is not None:
                        old.rename(a.out)
                    raise
                if old is not None:
                    shutil.rmtree(old)
                share_identical(a.out.parent)
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                raise
            finally:
                if a.check:
                    shutil.rmtree(staged, ignore_errors=True)
    except PoxmInputError as exc:
        print(f"publish_results: error: {exc}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(rows)} final rows, {rows[CELL].drop_duplicates().shape[0]} (dataset, variant, seed) cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
