"""The house's shape: no module imports itself through others, counting every import
statement (those inside functions too), and the layers of [tool.importlinter] hold."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports(package: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports, from every import statement."""
    def name(path: Path) -> str:
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(p): p for p in package.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module or ""
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges[module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others():
    assert cycles(imports(ROOT / "pteforge")) == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from .sub.high import g\n    return g\n")
    (package / "sub" / "high.py").write_text("from ..low import f\n")
    (package / "alone.py").write_text("import pkg.low\n")
    assert cycles(imports(package)) == [["pkg.low", "pkg.sub.high"]]


def test_the_declared_layers_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is in the dev group"
    proc = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "0 broken" in proc.stdout, proc.stdout[-3000:]
