"""docs/results stays a size a clone can carry: at most 15 MB in all, no file over 2 MB, no two byte-identical
files (a per-dataset page links to its sweep's files; a data file two runs share is a link), nothing
rebuilt on demand (LaTeX, PDF, HTML) committed; and every table rebuilds from what is committed."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
MAX_TOTAL, MAX_FILE = 15_000_000, 2_000_000
# A confirmatory stage (20 trials of 186 heads) takes about 0.85 MB with its tables: the rows the tables read
# and the claims' moments, xz. The whole run (ten stages) comes to about 8.5 MB; beside the exploratory
# record that passes 15 MB, and the record a finished run supersedes leaves the tree (docs/results/README.md).


def _tracked_files() -> list[Path]:
    """The committed and staged files under docs/results (git's view: what a clone carries)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "docs/results"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.split("\0") if p and (ROOT / p).exists()]


def problems(files: list[Path], home: Path) -> list[str]:
    """What breaks the rules in `files` (all under `home`): a file over 2 MB, more than 15 MB in all, a
    byte-identical copy, a link that leaves `home`, a file built on demand (.tex, .pdf, .html)."""
    bad, seen, total = [], {}, 0
    for f in files:
        rel = f.relative_to(home)
        if f.is_symlink():
            if not (f.resolve().is_file() and home.resolve() in f.resolve().parents):
                bad.append(f"{rel}: a link to {f.resolve()}, not a file of {home.name}")
            continue
        size = f.stat().st_size
        total += size
        if size > MAX_FILE:
            bad.append(f"{rel}: {size / 1e6:.2f} MB (at most 2 MB a file)")
        if f.suffix in (".tex", ".pdf", ".html"):
            bad.append(f"{rel}: built by `poxm report` on demand, not published")
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        if digest in seen:
            bad.append(f"{rel}: a copy of {seen[digest]}")
        seen.setdefault(digest, rel)
    if total > MAX_TOTAL:
        bad.append(f"{total / 1e6:.1f} MB in all (at most 15 MB)")
    return bad


def test_published_results_fit_in_a_clone():
    assert problems(_tracked_files(), RESULTS) == []


def test_each_rule_can_fail(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "t.csv").write_text("x\n1\n")
    (tmp_path / "b.csv").write_text("x\n1\n")
    (tmp_path / "big.npz").write_bytes(b"\0" * (MAX_FILE + 1))
    (tmp_path / "t.tex").write_text("\\begin{tabular}")
    (tmp_path / "out.csv").symlink_to(ROOT / "pyproject.toml")
    (tmp_path / "in.csv").symlink_to(tmp_path / "b.csv")
    bad = problems(sorted(p for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink()), tmp_path)
    assert [b.split(":")[0] for b in bad] == ["b.csv", "big.npz", "out.csv", "t.tex"], bad
    assert "a copy of a/t.csv" in bad[0] and "2 MB" in bad[1] and "on demand" in bad[3]
    many = []
    for i in range(8):
        (tmp_path / f"m{i}.bin").write_bytes(bytes([i]) * (MAX_FILE - 1))
        many.append(tmp_path / f"m{i}.bin")
    assert problems(many, tmp_path) == ["16.0 MB in all (at most 15 MB)"]
    (tmp_path / "confirmatory").mkdir()        # no folder is counted apart
    for i in range(4):
        (tmp_path / "confirmatory" / f"c{i}.bin").write_bytes(bytes([100 + i]) * (MAX_FILE - 1))
    held = sorted((tmp_path / "confirmatory").iterdir())
    assert problems(held + many[:4], tmp_path) == ["16.0 MB in all (at most 15 MB)"]
    assert problems(held + many[:3], tmp_path) == []        # 14 MB


@pytest.mark.slow       # builds one published report from its committed rows: about 30 s on 2 cores
def test_one_folder_rebuilds_to_the_committed_tables():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "rebuild_results.py"), "--check",
                          str(RESULTS / "examples-eurlex-partial")], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rebuilt tables equal the committed ones" in out.stdout


def test_rebuild_refuses_a_folder_it_cannot_rebuild(capsys):
    from scripts.rebuild_results import main
    assert main(["--check", str(RESULTS / "obd")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "obd" in err and "published:" in err
