"""Every third-party package jaxdet imports is declared in pyproject.toml: what any installed
jaxdet imports in ``dependencies``, what only optional code imports in ``dependencies`` or an
extra. Optional code: an import inside a function, under ``try: ... except ImportError``, or in
a module that jaxdet itself only ever imports that way (``export/onnx_nms.py``, loaded when an
ONNX export starts). ``if TYPE_CHECKING:`` imports never run and are left out."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
SRC = REPO / "src"
PACKAGE = "jaxdet"

# Import names of optional packages the test environment need not have installed (so
# importlib.metadata cannot map them): their distributions, as pyproject names them.
NOT_INSTALLED_HERE = {"tensorflow": "tensorflow-cpu", "ai_edge_litert": "ai-edge-litert",
                      "grpc_tools": "grpcio-tools", "torch": "torch"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalized(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip()).group(0))


def declared() -> tuple[set[str], set[str]]:
    """(the distributions ``dependencies`` names, those any extra names)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = {requirement_name(r) for r in project["dependencies"]}
    extras = {requirement_name(r) for reqs in project["optional-dependencies"].values()
              for r in reqs}
    return required, extras - {PACKAGE}


@dataclass(frozen=True)
class Import:
    module: str  # the imported module, dotted
    source: Path  # the jaxdet file that imports it
    line: int
    optional: bool  # inside a function or a try / except ImportError


def _handles_import_error(node: ast.Try) -> bool:
    names = set()
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names |= {getattr(k, "id", None) for k in kinds}
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", None})


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == (
        "TYPE_CHECKING")


def _imports(tree: ast.AST, source: Path, optional: bool = False) -> Iterator[Import]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from _imports(ast.Module(body=node.orelse, type_ignores=[]), source, optional)
            continue
        if isinstance(node, ast.Import):
            yield from (Import(a.name, source, node.lineno, optional) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield from _from_import(node, source, optional)
        inner = optional or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(node, ast.Try):
            guarded = optional or _handles_import_error(node)
            for part in node.body:
                yield from _imports(ast.Module(body=[part], type_ignores=[]), source, guarded)
            for part in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from _imports(part, source, optional)
            continue
        if not isinstance(node, ast.Import | ast.ImportFrom):
            yield from _imports(node, source, inner)


def _module_name(source: Path) -> str:
    parts = list(source.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _from_import(node: ast.ImportFrom, source: Path, optional: bool) -> Iterator[Import]:
    base = node.module or ""
    if node.level:  # relative: from the importing module's package
        package = _module_name(source).split(".")
        if source.name != "__init__.py":
            package = package[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join([*package, *([base] if base else [])])
    yield Import(base, source, node.lineno, optional)
    for alias in node.names:  # `from jaxdet.export import onnx_nms`: the submodule too
        yield Import(f"{base}.{alias.name}", source, node.lineno, optional)


def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def all_imports() -> list[Import]:
    found = []
    for source in sorted((SRC / PACKAGE).rglob("*.py")):
        found += _imports(ast.parse(source.read_text(), str(source)), source)
    return found


def eagerly_loaded(imports: list[Import]) -> set[str]:
    """jaxdet's modules that run whenever their importers run: ``jaxdet`` itself, the modules
    no jaxdet module imports (entry points, scripts) and, from them, every module imported at
    module level (with its packages). The rest are reached only through optional imports."""
    modules = {_module_name(s) for s in (SRC / PACKAGE).rglob("*.py")}
    imported = {i.module for i in imports if i.module in modules}
    eager: dict[str, set[str]] = {}
    for i in imports:
        if not i.optional and i.module in modules:
            eager.setdefault(_module_name(i.source), set()).add(i.module)
    loaded, todo = set(), sorted(modules - imported | {PACKAGE})
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for name in [".".join(parts[:n]) for n in range(1, len(parts) + 1)]:
            if name not in loaded:
                loaded.add(name)
                todo += sorted(eager.get(name, ()))
    return loaded


@functools.cache
def _packages() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


@functools.cache
def distributions_of(module: str) -> frozenset[str]:
    """The installed distributions that provide ``module`` (a namespace package such as
    ``google``: the one whose files hold the module), else the NOT_INSTALLED_HERE entry."""
    top = module.split(".")[0]
    candidates = _packages().get(top, [])
    if len(set(candidates)) > 1:
        prefix = "/".join(module.split(".")[:2])
        candidates = [d for d in candidates
                      if any(str(f).startswith((prefix + "/", prefix + "."))
                             for f in importlib.metadata.distribution(d).files or ())]
    if candidates:
        return frozenset(normalized(d) for d in candidates)
    return frozenset({normalized(NOT_INSTALLED_HERE[top])} if top in NOT_INSTALLED_HERE else ())


def third_party(imports: list[Import]) -> list[Import]:
    return [i for i in imports
            if i.module and i.module.split(".")[0] not in (*sys.stdlib_module_names, PACKAGE)]


def undeclared(imports: list[Import], required: set[str], extras: set[str]) -> dict[str, str]:
    """{imported name: what is wrong} for each third-party package that pyproject does not
    declare where it must (namespace packages by their first two names: ``google.protobuf``)."""
    loaded = eagerly_loaded(imports)
    problems: dict[str, str] = {}
    for i in sorted(third_party(imports), key=lambda i: i.optional):  # required ones first
        top = i.module.split(".")[0]
        key = ".".join(i.module.split(".")[:2]) if top == "google" else top
        optional = i.optional or _module_name(i.source) not in loaded
        dists = distributions_of(key)
        where = f"{i.source.relative_to(REPO)}:{i.line}"
        if key in problems:
            continue
        if not dists:
            problems[key] = (f"{where}: imports {key}, which no installed distribution provides "
                             "(install it, or name its distribution in NOT_INSTALLED_HERE)")
        elif not dists & (required | (extras if optional else set())):
            wanted = "dependencies or an extra" if optional else "dependencies"
            problems[key] = (f"{where}: imports {key} ({', '.join(sorted(dists))}), which is "
                             f"not in pyproject's {wanted}")
    return problems


def test_every_imported_package_is_declared():
    required, extras = declared()
    problems = undeclared(all_imports(), required, extras)
    assert not problems, "\n".join(problems.values())


def test_the_check_sees_what_it_must(tmp_path, monkeypatch):
    """The scan's own cases: a module-level import needs ``dependencies``; an import in a
    function, under ``try/except ImportError`` or in a module loaded only that way may sit in
    an extra; TYPE_CHECKING imports are ignored; an unknown package is reported."""
    package = tmp_path / "src" / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from jaxdet import main\n")
    (package / "main.py").write_text(
        "from typing import TYPE_CHECKING\nimport numpy\n"
        "if TYPE_CHECKING:\n    import pandas\n"
        "try:\n    import yaml\nexcept ImportError:\n    yaml = None\n"
        "def export():\n    from jaxdet import plugin\n    import PIL\n")
    (package / "plugin.py").write_text("import scipy\nimport no_such_package_anywhere\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "src")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    found = all_imports()
    assert {i.module for i in third_party(found)} == {
        "numpy", "yaml", "PIL", "scipy", "no_such_package_anywhere"}  # pandas: never runs
    assert "jaxdet.plugin" not in eagerly_loaded(found)  # loaded only inside export()
    problems = undeclared(found, required={"numpy"}, extras={"pyyaml", "pillow", "scipy"})
    assert list(problems) == ["no_such_package_anywhere"]
    assert "no installed distribution provides" in problems["no_such_package_anywhere"]
    problems = undeclared(found, required=set(), extras={"numpy", "pyyaml", "pillow", "scipy"})
    assert problems.keys() == {"numpy", "no_such_package_anywhere"}  # numpy: module level
    assert problems["numpy"].startswith(f"src/{PACKAGE}/main.py:2: imports numpy (numpy)")
    assert problems["numpy"].endswith("not in pyproject's dependencies")
    problems = undeclared(found, required={"numpy"}, extras=set())
    assert problems.keys() == {"yaml", "PIL", "scipy", "no_such_package_anywhere"}
    assert problems["scipy"].endswith("not in pyproject's dependencies or an extra")


@pytest.mark.parametrize("module, distribution", [
    ("google.protobuf", "protobuf"), ("PIL", "pillow"), ("yaml", "pyyaml")])
def test_import_names_map_to_their_distributions(module, distribution):
    assert distributions_of(module) == {distribution}
