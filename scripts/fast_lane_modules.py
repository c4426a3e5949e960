"""Does the fast lane (``make test-fast``) still run code of every module?

Runs ``pytest -m "not slow" --hypothesis-profile=fast`` once in this process under ``coverage``
(about a minute; no xdist), then lists, for every module of ``reduced_dynamics`` and ``proofs_check``,
whether a line inside one of its functions ran (importing a module runs its ``def`` lines only, which
does not count). Exit 0 when every module with functions had one run, 1 otherwise (the modules are
named). Needs ``coverage`` (the ``test`` extra)::

    .venv/bin/python scripts/fast_lane_modules.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reduced_dynamics", "proofs_check")


def body_lines(path: Path) -> set[int]:
    """Line numbers of the statements inside the functions of ``path`` (not their ``def`` lines)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.stmt):
                        lines.add(sub.lineno)
    return lines


def main() -> int:
    try:
        import coverage
    except ImportError:
        print("scripts/fast_lane_modules.py needs coverage: pip install -e '.[test]'", file=sys.stderr)
        return 2
    import pytest

    cov = coverage.Coverage(source=[str(ROOT / p) for p in PACKAGES], data_file=None)
    cov.start()
    try:
        rc = pytest.main(
            [
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "-m",
                "not slow",
                "--hypothesis-profile=fast",
                str(ROOT / "tests"),
                str(ROOT / "reduced_dynamics"),
                str(ROOT / "proofs_check"),
            ]
        )
    finally:
        cov.stop()
    if rc != 0:
        print(f"the fast lane failed (pytest exit {int(rc)})", file=sys.stderr)
        return 1
    data = cov.get_data()
    untouched, counted = [], 0
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            want = body_lines(path)
            if not want:
                continue  # no functions (constants, re-exports)
            counted += 1
            ran = set(data.lines(str(path)) or ())
            if not ran & want:
                untouched.append(str(path.relative_to(ROOT)))
    print(f"{counted - len(untouched)} of {counted} modules with functions ran code in the fast lane")
    for name in untouched:
        print(f"  not run: {name}")
    return 1 if untouched else 0


if __name__ == "__main__":
    raise SystemExit(main())
