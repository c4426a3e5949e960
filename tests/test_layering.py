"""Layering: the checker package ``proofs_check`` imports the library ``reduced_dynamics``, never the reverse.

Every ``.py`` file of ``reduced_dynamics/`` is parsed (not imported) and each way of importing
``proofs_check`` is looked for: ``import proofs_check...``, ``from proofs_check... import ...``
and ``importlib.import_module("proofs_check...")`` / ``__import__("proofs_check...")`` with a
literal name. The one documented exception is :data:`ALLOWED`; it is itself checked (it must
still be needed, and stay inside the function named).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "reduced_dynamics"
CHECKER = "proofs_check"

#: file (relative to the repository) -> the function inside which it may import the checker.
#: ``reduced-dynamics check`` is the checker's command-line front end: its ``main`` imports
#: ``proofs_check.checks.run_checks`` when the command runs (never at import time, so neither
#: ``import reduced_dynamics`` nor any other command loads the checker).
ALLOWED = {"reduced_dynamics/cli/check.py": "main"}


def _imported_name(node: ast.AST) -> str | None:
    """The absolute module name ``node`` imports, if it is an import (statement or literal call)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name == CHECKER or a.name.startswith(CHECKER + ".")]
        return names[0] if names else None
    if isinstance(node, ast.ImportFrom):
        return node.module if node.level == 0 and node.module and node.module.split(".")[0] == CHECKER else None
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        arg = node.args[0].value
        if name in ("import_module", "__import__") and isinstance(arg, str) and arg.split(".")[0] == CHECKER:
            return arg
    return None


def checker_imports(source: str) -> list[tuple[int, str, str | None]]:
    """``(line, module, enclosing function or None)`` for every import of the checker in ``source``."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            name = _imported_name(child)
            if name is not None:
                found.append((child.lineno, name, function))
            visit(child, inner)

    visit(ast.parse(source), None)
    return found


def _library_files():
    return sorted(LIBRARY.rglob("*.py"))


def test_the_scan_sees_every_kind_of_import():
    """The detector itself: each form is caught (so an empty result below means something)."""
    src = (
        "import proofs_check\n"
        "import numpy, proofs_check.checks as pc\n"
        "from proofs_check.closed_forms import gd_risk\n"
        "def f():\n"
        "    from proofs_check import checks\n"
        "    importlib.import_module('proofs_check.closed_forms')\n"
        "    return __import__('proofs_check')\n"
        "from reduced_dynamics.estimation.closed_forms import gd_risk\n"
        "from .proofs_check import x\n"  # relative: a module of this package, not the checker
        "text = 'proofs_check'\n"
    )
    found = checker_imports(src)
    assert [(line, fn) for line, _, fn in found] == [(1, None), (2, None), (3, None), (5, "f"), (6, "f"), (7, "f")]


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_library_does_not_import_the_checker(path):
    rel = str(path.relative_to(ROOT))
    found = checker_imports(path.read_text(encoding="utf-8"))
    allowed = ALLOWED.get(rel)
    bad = [(line, mod) for line, mod, fn in found if allowed is None or fn != allowed]
    assert not bad, f"{rel} imports the checker package: {bad} (move what it needs into the library)"


@pytest.mark.parametrize("rel, function", sorted(ALLOWED.items()))
def test_the_exception_is_still_needed_and_stays_in_its_function(rel, function):
    found = checker_imports((ROOT / rel).read_text(encoding="utf-8"))
    assert found, f"{rel} no longer imports {CHECKER}: remove it from ALLOWED"
    assert all(fn == function for _, _, fn in found)


def test_the_library_files_are_found():
    files = {str(p.relative_to(ROOT)) for p in _library_files()}
    assert len(files) > 100 and "reduced_dynamics/__init__.py" in files and set(ALLOWED) <= files
