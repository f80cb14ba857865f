"""The structure of the code, read from its source (ast) and from docs/architecture.md:
no import circles, imports only down the documented floors, no module __getattr__, no import below
a module's first definition, every module importable, and the architecture page naming what exists."""
from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("poxm_core", "orchestration")
DOC = ROOT / "docs" / "architecture.md"


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()
TREES = {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}


def _imported(m: str, tree: ast.Module) -> set[str]:
    """The project modules `m` runs when imported or when any of its functions runs: every import
    statement anywhere in it (a lazy import inside a function is still a dependency), resolved to a
    module, plus the package __init__ each one runs first (unless that package is m's own ancestor,
    which is already running when m is)."""
    is_pkg = MODULES[m].name == "__init__.py"
    deps: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = m.split(".") if is_pkg else m.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            for a in node.names:
                sub = f"{src}.{a.name}"
                if sub in MODULES:
                    deps.add(sub)
                elif src in MODULES:
                    deps.add(src)
    for d in list(deps):
        parts = d.split(".")
        for k in range(1, len(parts)):
            anc = ".".join(parts[:k])
            if anc in MODULES and not (m == anc or m.startswith(anc + ".")):
                deps.add(anc)
    deps.discard(m)
    return deps


GRAPH = {m: _imported(m, t) for m, t in TREES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_circle_and_nothing_else():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(g) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert _cycles(GRAPH) == []


def test_package_init_counts_as_a_dependency():
    # importing poxm_core.bandit.log runs poxm_core/bandit/__init__.py first: that edge is in the graph
    assert "poxm_core.bandit" in GRAPH["poxm_core.prepare.prepared"]


def _floors() -> dict[str, int]:
    text = DOC.read_text()
    block = text[text.index("## Floors"):].split("```")[1]
    floors = {}
    for line in block.strip().splitlines():
        level, *names = line.split()
        floors.update({n: int(level) for n in names})
    return floors


FLOORS = _floors()


def _floor(m: str) -> tuple[int, str]:
    if m == "poxm_core":                 # the library's empty root package
        return 0, m
    best = max((k for k in FLOORS if m == k or m.startswith(k + ".")), key=len, default=None)
    assert best is not None, f"{m}: no floor in docs/architecture.md covers it"
    return FLOORS[best], best


def test_every_module_has_a_floor_and_every_floor_name_exists():
    for m in MODULES:
        _floor(m)
    assert not [n for n in FLOORS if n not in MODULES]


def test_imports_go_down_the_floors():
    up = [f"{m} (floor {_floor(m)[0]}) imports {d} (floor {_floor(d)[0]})"
          for m, deps in sorted(GRAPH.items()) for d in sorted(deps) if _floor(d)[0] > _floor(m)[0]]
    assert up == []


def test_no_module_getattr():
    found = [m for m, t in TREES.items()
             if any(isinstance(n, ast.FunctionDef) and n.name in ("__getattr__", "__dir__") for n in t.body)]
    assert found == []


def test_no_import_below_the_first_definition():
    late = []
    for m, t in TREES.items():
        seen_def = False
        for n in t.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                seen_def = True
            elif seen_def and isinstance(n, (ast.Import, ast.ImportFrom)):
                late.append(f"{m}:{n.lineno}")
    assert late == []


_EACH_ALONE = """
import importlib, os, sys, traceback
# the third-party libraries once, then one forked child per project module: each project module is
# imported into an interpreter holding none of the others (an import that works only after another
# one is caught) without paying torch/Ray/MLflow's import time ~90 times
import numpy, scipy.sparse, pandas, torch, pydantic, yaml  # noqa
for lib in ("ray", "ray.train", "ray.tune", "mlflow", "matplotlib.pyplot", "sklearn.feature_extraction.text"):
    importlib.import_module(lib)
# two children at a time (one a core of a 2-core machine: each import is CPU-bound)
bad, running, todo = [], {}, list(sys.argv[1:])
while todo or running:
    while todo and len(running) < 2:
        m = todo.pop(0)
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(m)
                os._exit(0)
            except BaseException:
                sys.stderr.write(m + ": " + traceback.format_exc().strip().splitlines()[-1] + "\\n")
                os._exit(1)
        running[pid] = m
    pid, status = os.wait()
    if pid in running and status != 0:
        bad.append(running[pid])
    running.pop(pid, None)
print(sorted(bad))
sys.exit(1 if bad else 0)
"""


@pytest.mark.slow
def test_every_module_imports_on_its_own():
    """~15 s (Ray, MLflow, torch once): every module of both packages imports into a fresh process."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _EACH_ALONE, *MODULES], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def _third_party(m: str) -> tuple[set[str], set[str]]:
    """The top-level names of what `m` imports from outside the project: (at module level, inside a function)."""
    tree = TREES[m]
    body = {id(n) for n in tree.body}
    top, lazy = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            root = name.split(".")[0]
            if root not in PACKAGES and root != "__future__":
                (top if id(node) in body else lazy).add(root)
    return top, lazy


def test_library_stays_plain_and_its_heavy_optional_imports_stay_lazy():
    """poxm_core is plain PyTorch/NumPy/SciPy: no module of it imports Ray, MLflow or the orchestration
    layer (not even inside a function), and Triton and scikit-learn only inside the function that needs
    them (importing the library never loads them); then every library module imports in this process."""
    bad, eager = [], []
    for m in MODULES:
        if not m.startswith("poxm_core"):
            continue
        top, lazy = _third_party(m)
        bad += [f"{m}: {r}" for r in sorted((top | lazy) & {"ray", "mlflow", "matplotlib"})]
        bad += [f"{m}: orchestration" for d in GRAPH[m] if d.startswith("orchestration")]
        eager += [f"{m}: {r}" for r in sorted(top & {"triton", "sklearn"})]
    assert bad == [] and eager == []
    assert "triton" in _third_party("poxm_core.accel.triton_adam")[1]       # the scan sees a lazy import
    for m in MODULES:
        if m.startswith("poxm_core"):
            importlib.import_module(m)


# ------------------------------------------------------------------------------------ the architecture page

def _layout_paths() -> set[str]:
    """Paths named by the Layout tree of docs/architecture.md ('poxm_core/data/readers.py', 'poxm_core/data')."""
    text = DOC.read_text()
    block = text[text.index("## Layout"):].split("```")[1]
    stack: list[tuple[int, str]] = []
    out = set()
    for line in block.splitlines():
        m = re.match(r"^( *)([A-Za-z0-9_]+(?:\.py|/))(?:\s|$)", line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [name.rstrip("/")])
        out.add(path)
        if name.endswith("/"):
            stack.append((indent, name.rstrip("/")))
    return out


LAYOUT = _layout_paths()


def test_every_path_the_layout_names_exists():
    assert len(LAYOUT) > 40
    assert sorted(p for p in LAYOUT if not (ROOT / p).exists()) == []


def test_layout_names_every_package_and_every_top_level_module():
    packages = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/**/__init__.py")
                if p.parts[len(ROOT.parts)] in PACKAGES}
    top = {str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).glob("*.py") if p.name != "__init__.py"}
    assert sorted(packages - LAYOUT) == [] and sorted(top - LAYOUT) == []
    # a package whose modules are listed has all of them listed
    for pkg in packages:
        listed = {p for p in LAYOUT if p.startswith(pkg + "/") and p.count("/") == pkg.count("/") + 1}
        if listed:
            have = {str(p.relative_to(ROOT)) for p in (ROOT / pkg).glob("*.py") if p.name != "__init__.py"}
            assert sorted(have - listed) == [], pkg


def test_every_dotted_name_on_the_page_exists():
    """`poxm_core.x.y` / `orchestration.x` in the text: a module, or a module and a name it defines."""
    missing = []
    for name in sorted(set(re.findall(r"(?<![/\w])((?:poxm_core|orchestration)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?!\.md)\b", DOC.read_text()))):
        if name in MODULES:
            continue
        mod, _, attr = name.rpartition(".")
        defined = {n.name for n in TREES[mod].body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | \
            {t.id for n in TREES[mod].body if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)} | \
            {a.asname or a.name for n in TREES[mod].body if isinstance(n, ast.ImportFrom) for a in n.names} \
            if mod in MODULES else set()
        if attr not in defined:
            missing.append(name)
    assert missing == []


# ------------------------------------------------------------------------------------ the accelerator code

def _code_lines(m: str) -> list[str]:
    """The module's source lines that are code (its docstrings and comments dropped)."""
    tree = TREES[m]
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            doc_lines |= set(range(node.lineno, node.end_lineno + 1))
    return [line.split("#")[0] for i, line in enumerate(MODULES[m].read_text().splitlines(), 1) if i not in doc_lines]


def test_only_the_accelerator_package_uses_triton_or_captures_a_cuda_graph():
    pat = re.compile(r"\bimport triton\b|\bfrom triton\b|torch\.cuda\.graph\(|CUDAGraph\(|\.capture_begin\(")
    found = [m for m in MODULES if not m.startswith("poxm_core.accel")
             and any(pat.search(line) for line in _code_lines(m))]
    assert found == []
    assert any(pat.search(line) for line in _code_lines("poxm_core.accel.graph"))    # the check can see one


def test_adam_update_is_written_once_and_the_loop_names_no_method():
    # Adam's moment update (m <- lerp(m, g, 1 - b1)) appears in poxm_core/optim/adam.py only (the Triton
    # kernels in the accelerator package compute it too, checked against it on first use)
    lerp = [m for m in MODULES if not m.startswith("poxm_core.accel")
            and any(".lerp_(" in line for line in _code_lines(m))]
    assert lerp == ["poxm_core.optim.adam"]
    # the training loop and step decide by what a method declares, not by its name
    from poxm_core.methods.registry import METHODS
    for m in ("poxm_core.training.epoch", "poxm_core.training.step", "poxm_core.accel.graph"):
        code = "\n".join(_code_lines(m))
        assert [n for n in METHODS if re.search(rf"[\"']{n}[\"']", code)] == [], m


def test_training_and_accel_name_no_method():
    """The engines decide by what a method declares (`ids`, `draws`, `loss`, ...), never by its name or
    class: no registry name as a string and no imported Method subclass in poxm_core/training or
    poxm_core/accel, so a method defined anywhere trains through them unchanged."""
    from poxm_core.methods.base import Method
    from poxm_core.methods.registry import METHODS

    offenders = []
    for m in [m for m in MODULES if m.startswith(("poxm_core.training", "poxm_core.accel"))]:
        code = "\n".join(_code_lines(m))
        # 'logging' is also a value of training.init (start from the logging model), not only a method
        offenders += [f"{m}: '{n}'" for n in METHODS if n != "logging" and re.search(rf"[\"']{n}[\"']", code)]
        mod = importlib.import_module(m)
        for node in ast.walk(TREES[m]):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    obj = getattr(mod, a.asname or a.name, None)
                    if isinstance(obj, type) and issubclass(obj, Method) and obj is not Method:
                        offenders.append(f"{m}: imports {obj.__name__}")
    assert offenders == []
    # the check can see a name where one is written: the method's own module
    assert re.search(r"[\"']dm[\"']", "\n".join(_code_lines("poxm_core.methods.dm")))


def test_the_protocol_functions_read_in_one_screen():
    # the trial member's protocol (data and runs, run_trial, final values, outputs) and the sweep's list
    # of stages stay short enough to read as the protocol: their parts are named functions and objects
    import inspect

    from orchestration.stages import sweep, trial
    lengths = {f.__qualname__: len(inspect.getsourcelines(f)[0]) for f in (trial.run_member, sweep.execute)}
    assert {k: n for k, n in lengths.items() if n > 60} == {}


def test_one_capture_safe_step_and_one_triton_adam_body():
    """Capture is a mode of the runner, not a copy of the step: no function named `*_static` (or a
    `sync_counter` twin) anywhere in the library, and the fused kernels share one Triton Adam update."""
    twins = [f"{m}.{node.name}" for m, tree in TREES.items() for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and (node.name.endswith("_static") or node.name == "sync_counter")]
    assert twins == []
    code = "\n".join(_code_lines("poxm_core.accel.triton_adam"))
    assert code.count("omb1 * (g - m)") == 1 and code.count("tl.sqrt_rn(v)") == 1
    assert code.count("_ADAM_BODY(") >= 4          # the row kernel (W and b), the dense and the touched-rows one


def test_run_trial_reads_as_the_protocol():
    # run_trial reads set-up, phase 1, phase 2, final report, outputs: what follows each epoch (the
    # validation overlap, checkpoints, the background write of the last one, on_epoch) is the
    # EpochSchedule's (training/schedule.py), not closures sharing state through `nonlocal`
    import inspect

    from poxm_core.training import trainer
    lines = inspect.getsourcelines(trainer.run_trial)[0]
    assert len(lines) <= 60, len(lines)
    assert not [line for line in lines if re.search(r"\bnonlocal\b", line)]


def test_tests_mirror_the_packages():
    """Tests live in folders named after the package they test (tests/poxm_core/<pkg>/, tests/orchestration/
    [<pkg>/]), repository-wide checks in tests/project/; no test module is left at the top of tests/."""
    tests = ROOT / "tests"
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    folders = {p.parent.relative_to(tests) for p in tests.rglob("test_*.py")}
    bad = [str(f) for f in folders if str(f) != "project" and not (ROOT / f).is_dir()]
    assert bad == []
    assert any(str(f) == "poxm_core/training" for f in folders)          # the check sees a mirrored folder
