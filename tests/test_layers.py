"""The shape of ``compiler/``: imports run one way, and no room is too big.

Read from the source, as Python would import it: ``import`` and ``from ... import``
anywhere in a module (inside functions and under ``TYPE_CHECKING`` too) and every
``importlib.import_module("compiler...")`` with a literal name.

- At every level of the package (``compiler/`` itself, then each folder in it), the
  imports between its entries (a module, or a folder with everything in it) form no loop.
  A loop between two folders is one even when no two modules import each other, since
  then neither folder can be read without the other.
- No module over 500 lines, no function over 80, except a parser table: a function that
  is mostly ``add_argument`` and ``add_parser`` calls.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "compiler"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
_TABLE_CALLS = {
    "add_argument",
    "add_argument_group",
    "add_mutually_exclusive_group",
    "add_parser",
    "add_subparsers",
    "set_defaults",
}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str) -> Path | None:
    """The file a dotted ``compiler...`` name imports: a module, or a package's __init__."""
    base = REPO.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _imported(path: Path, text: str | None = None) -> Iterator[Path]:
    """The files of ``compiler/`` that ``path`` (or ``text``, read as if it stood there)
    imports."""
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    source = path.read_text() if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                module = ".".join([*anchor, module] if module else anchor)
            # ``from compiler.x import y``: y is a module of x, or a name x defines.
            names = [f"{module}.{a.name}" if _resolve(f"{module}.{a.name}") else module
                     for a in node.names]  # fmt: skip
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        for name in names:
            if name == "compiler" or not name.startswith("compiler."):
                continue
            target = _resolve(name)
            if target is not None and target != path:
                yield target


def _entry(folder: Path, path: Path) -> str | None:
    """The entry of ``folder`` that holds ``path``, or None when it is outside it."""
    try:
        rel = path.relative_to(folder)
    except ValueError:
        return None
    return rel.parts[0]


def _graph(folder: Path, edges: dict[Path, set[Path]]) -> dict[str, set[str]]:
    """The imports between the entries of ``folder``."""
    graph: dict[str, set[str]] = {}
    for source, targets in edges.items():
        a = _entry(folder, source)
        for target in targets:
            b = _entry(folder, target)
            if a is not None and b is not None and b != a:
                graph.setdefault(a, set()).add(b)
    return graph


def _shortest_loop(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """The shortest path of imports from ``start`` back to it, if there is one."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        step = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return path[::-1]
                if w not in came:
                    came[w] = v
                    step.append(w)
        frontier = step
    return None


def _loops(folder: Path, edges: dict[Path, set[Path]]) -> list[list[str]]:
    """Loops among the entries of ``folder``, each as its entries in import order, one per
    entry that is on a loop (the shortest through it), without repeats."""
    graph = _graph(folder, edges)
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    for v in sorted(graph):
        loop = _shortest_loop(graph, v)
        if loop is not None and frozenset(loop) not in seen:
            seen.add(frozenset(loop))
            found.append(loop)
    return found


def _who(folder: Path, loop: list[str], edges: dict[Path, set[Path]]) -> list[str]:
    """The imports that tie a loop, as ``a.py -> b.py`` lines."""
    pairs = set(zip(loop, [*loop[1:], loop[0]], strict=True))
    ties = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if (_entry(folder, source), _entry(folder, target)) in pairs:
                ties.append(f"{source.relative_to(REPO)} -> {target.relative_to(REPO)}")
    return ties


def test_imports_run_one_way_at_every_level() -> None:
    edges = {path: set(_imported(path)) for path in _modules()}
    folders = sorted({PACKAGE, *(p.parent for p in _modules())})
    problems = []
    for folder in folders:
        for loop in _loops(folder, edges):
            where = folder.relative_to(REPO)
            problems.append(
                f"{where}/: {', '.join(loop)}\n  " + "\n  ".join(_who(folder, loop, edges))
            )
    assert not problems, "import loops:\n" + "\n".join(problems)


def _is_table(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    calls = 0
    for stmt in fn.body:
        value = stmt.value if isinstance(stmt, ast.Expr | ast.Assign) else None
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _TABLE_CALLS
        ):
            calls += 1
    return calls * 4 >= len(fn.body) * 3


def test_no_module_or_function_is_too_big() -> None:
    problems = []
    for path in _modules():
        text = path.read_text()
        rel = path.relative_to(REPO)
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            problems.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and not _is_table(node):
                    problems.append(f"{rel}:{node.lineno}: {node.name} is {length} lines")
    assert not problems, "\n".join(problems)


def test_a_loop_is_found_and_named_by_its_entries(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b" / "c.py"
    assert _loops(tmp_path, {a: {b}, b: {a}}) == [["a.py", "b"]]
    d = tmp_path / "d.py"
    assert _loops(tmp_path, {a: {b}, b: {d}, d: {a}}) == [["a.py", "b", "d.py"]]
    assert _loops(tmp_path, {a: {b}}) == []
    assert _loops(tmp_path / "b", {a: {b}, b: {a}}) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import compiler.units\n", "compiler/units.py"),
        ("from compiler import units\n", "compiler/units.py"),
        ("from compiler.units import in_bytes\n", "compiler/units.py"),
        ("def f():\n    from compiler import kinds\n", "compiler/kinds.py"),
        ("if TYPE_CHECKING:\n    from compiler.errors import Location\n", "compiler/errors.py"),
        ("import importlib\nimportlib.import_module('compiler.yamlio')\n", "compiler/yamlio.py"),
        ("from . import units\n", "compiler/units.py"),
    ],
)
def test_each_kind_of_import_is_read(source: str, expected: str) -> None:
    # Read as if it stood in compiler/: only its text is read, nothing is imported.
    found = {p.relative_to(REPO).as_posix() for p in _imported(PACKAGE / "probe.py", source)}
    assert found == {expected}
