"""Files and functions of a readable size, and the report above the stages it reports on.

Library files (poxm_core/, orchestration/) hold at most 400 lines and their functions at most 60 (a
function's lines from its `def` to its last line, docstring included; a nested function counts on its
own and inside the one that holds it). What is over today is in ALLOWED with its size now: it may
shrink, never grow, and leaves the list once within the limits (the test names what to remove).
The report reads a run's results and the selection (orchestration.selection); it imports no stage.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("poxm_core", "orchestration")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

# 'path' (a file) or 'path::qualified.name' (a function) -> its lines when listed: being split by their owners
ALLOWED = {
}


def _library_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def _sizes() -> dict[str, int]:
    """Every file and function over its limit: 'path' or 'path::name' -> lines."""
    over = {}
    for p in _library_files():
        text = p.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            over[_rel(p)] = len(text.splitlines())
        for name, n in _functions(ast.parse(text)):
            if n > MAX_FUNCTION_LINES:
                over[f"{_rel(p)}::{name}"] = n
    return over


def test_files_and_functions_stay_within_their_limits():
    over = _sizes()
    new = {k: n for k, n in over.items() if k not in ALLOWED}
    assert new == {}, (f"over {MAX_FILE_LINES} lines a file or {MAX_FUNCTION_LINES} a function: split along "
                       f"its seams: {new}")
    grown = {k: (ALLOWED[k], n) for k, n in over.items() if k in ALLOWED and n > ALLOWED[k]}
    assert grown == {}, f"grew past its listed size (listed, now): {grown}"
    within = sorted(k for k in ALLOWED if k not in over)
    assert within == [], f"now within the limits: remove from ALLOWED in tests/project/test_sizes.py: {within}"


def test_the_size_check_sees_functions_methods_and_nested_ones():
    tree = ast.parse("def f():\n    def g():\n        pass\n    return g\n\n\nclass C:\n    def m(self):\n"
                     "        return 1\n")
    assert dict(_functions(tree)) == {"f": 4, "f.g": 2, "C.m": 2}


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_the_report_imports_no_stage():
    """Stages call the report (gather builds it); the report reads results and selection.py's choices."""
    bad = {_rel(p): sorted(m for m in _imports(ast.parse(p.read_text()))
                           if m == "orchestration.stages" or m.startswith("orchestration.stages."))
           for p in sorted((ROOT / "orchestration" / "report").rglob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}
    assert _imports(ast.parse("import a.b\nfrom c import d\nfrom . import e\n")) == {"a.b", "c", "c.d"}
