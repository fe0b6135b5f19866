"""The house's shape: no module imports itself through others, counting every import
statement (those inside functions too); the floors of [tool.importlinter] are one layers
contract over every folder, in docs/architecture.md's order, and hold; no function is
longer than a screen."""

import ast
import re
import shutil
import subprocess
import sys
import tomllib
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


def test_the_floors_are_one_contract_over_every_folder_in_the_documented_order():
    """Each folder is a floor of one layers contract, nothing indirect allowed or ignored,
    and docs/architecture.md draws the floors in that order."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [floors] = [c for c in config["contracts"] if c["type"] == "layers"]
    assert not any(key in c for c in config["contracts"] for key in ("ignore_imports", "allow_indirect_imports"))
    package = ROOT / "pteforge"
    folders = {f"pteforge.{p.name}" for p in package.iterdir() if (p / "__init__.py").exists()}
    tops = {f"pteforge.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    assert set(floors["layers"]) == folders | tops
    drawn = re.search(r"```text\n(.*?)```", (ROOT / "docs" / "architecture.md").read_text(), re.S).group(1)
    order = [f"pteforge.{m.group(1)}" for m in re.finditer(r"^\s*([a-z_]+)(?:/|\.py)?\s", drawn, re.M)]
    assert order == floors["layers"]


def test_no_function_is_longer_than_sixty_lines():
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in (ROOT / "pteforge").rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60]
    assert long == []
