"""Start-up: what ``import reduced_dynamics`` and the command line load, measured in fresh interpreters.

Each probe runs a snippet in a new ``python`` process (working directory the repository root, so
this checkout's package is the one imported) and reports which of :data:`HEAVY` are in
``sys.modules`` at the end. ``import reduced_dynamics`` and ``reduced-dynamics --help`` load none of
them (nor numpy, for --help); ``reduced-dynamics exact-risk`` needs numpy and a dozen light modules
of the package (the setting, the quadrature evaluator, the CLI helpers) and none of them either.
The timings are in benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: modules none of the three entry points may load
HEAVY = (
    "sympy",
    "matplotlib",
    "scipy.integrate",
    "dask",
    "pandas",
    "numba",
    "proofs_check",
    # stricter than the list above: none of the three needs any part of scipy or mpmath either
    "scipy",
    "mpmath",
)

EXACT_RISK = ["exact-risk", "--d", "5", "--L", "40", "--omega", "0.3", "--mu", "1.5", "--tol", "1e-8", "--quiet"]

_REPORT = """
import json, sys
print("\\nLOADED=" + json.dumps(sorted(m for m in sys.modules)))
"""


def _cli(argv) -> str:
    """Code that runs ``python -m reduced_dynamics *argv`` in this process (as ``-m`` does) and returns."""
    return (
        "import runpy, sys\n"
        f"sys.argv = ['reduced_dynamics', *{list(argv)!r}]\n"
        "try:\n"
        "    runpy.run_module('reduced_dynamics', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )


def loaded(code: str) -> set[str]:
    """Every module in ``sys.modules`` after ``code`` ran in a fresh interpreter at the repository root."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code + _REPORT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("LOADED="))
    return set(json.loads(line[len("LOADED=") :]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(h for h in HEAVY if h in modules)


def test_the_probe_sees_a_heavy_import():
    """Positive control: a snippet that does load heavy modules is reported (so an empty report means something)."""
    mods = loaded("import reduced_dynamics.exact.expansion as e\ne.softmax_series_coefficients(1)")
    assert "sympy" in heavy(mods)
    assert "proofs_check" in heavy(loaded("import proofs_check.closed_forms"))


def test_import_loads_nothing_heavy():
    mods = loaded("import reduced_dynamics")
    assert heavy(mods) == []
    assert "reduced_dynamics" in mods and "numpy" not in mods  # the package namespace is lazy
    assert sorted(m for m in mods if m.startswith("reduced_dynamics")) == ["reduced_dynamics", "reduced_dynamics._lazy"]


def test_help_loads_nothing_heavy_and_no_command():
    mods = loaded(_cli(["--help"]))
    assert heavy(mods) == []
    assert "numpy" not in mods
    assert not [m for m in mods if m.startswith("reduced_dynamics.cli.") and m != "reduced_dynamics.cli._common"]


def test_exact_risk_loads_only_what_it_needs():
    """exact-risk needs numpy and the quadrature evaluator; no scipy, sympy, matplotlib, dask or checker."""
    mods = loaded(_cli(EXACT_RISK))
    assert heavy(mods) == []
    assert {"numpy", "reduced_dynamics.exact.evaluator", "reduced_dynamics.cli.exact_risk"} <= mods
    others = [m for m in mods if m.startswith("reduced_dynamics.cli.") and m.split(".")[2][0] != "_"]
    assert others == ["reduced_dynamics.cli.exact_risk"]  # no other command's module


def test_run_n_init_loads_no_scipy_and_no_numpy_ma():
    """The batched flow (`run --n-init 48`) needs numpy and the engine: no scipy (the batched Radau is the
    package's own), nothing of HEAVY, and not numpy.ma (np.unique would load it: ~5 ms of the command's start-up)."""
    mods = loaded(_cli(["run", "--n-init", "48", "--t-end", "1", "--quiet", "--json"]))
    assert heavy(mods) == []
    assert "reduced_dynamics.flow._batch" in mods and "numpy.ma" not in mods


@pytest.mark.parametrize("package", ["reduced_dynamics", "reduced_dynamics.crosscheck", "reduced_dynamics.multitask"])
def test_every_exported_name_resolves_and_is_listed(package):
    """In a fresh process: dir() lists every name of __all__ before any is loaded; each resolves; a wrong name is an AttributeError."""
    code = f"""
import importlib
pkg = importlib.import_module({package!r})
names = list(pkg.__all__)
assert len(names) == len(set(names)) and names, names
missing = sorted(set(names) - set(dir(pkg)))
assert not missing, ("dir() misses", missing)
for n in names:
    obj = getattr(pkg, n)
    assert obj is getattr(pkg, n)  # cached, the same object
    assert n in vars(pkg)
try:
    pkg.no_such_name
except AttributeError as exc:
    assert "no_such_name" in str(exc)
else:
    raise AssertionError("no AttributeError")
ns = {{}}
exec("from {package} import *", ns)
assert set(names) <= set(ns), sorted(set(names) - set(ns))
"""
    loaded(code)


def test_lazy_names_are_the_defining_modules_objects():
    """Each entry of reduced_dynamics._LAZY names the module that defines the object (or assigns the constant)."""
    import importlib

    import reduced_dynamics

    assert list(reduced_dynamics._LAZY) == reduced_dynamics.__all__
    for name, modname in reduced_dynamics._LAZY.items():
        obj = getattr(reduced_dynamics, name)
        assert getattr(importlib.import_module(modname), name) is obj
        if hasattr(obj, "__module__") and callable(obj):
            assert obj.__module__ == modname, (name, obj.__module__, modname)
