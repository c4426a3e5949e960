"""Benchmark: start-up time of the package and of the command line, as ratios to ``import numpy``.

Run ``python benchmarks/bench_startup.py [--quick] [--reps R]``. Each case is a fresh
``python`` subprocess (the interpreter running this script, working directory the repository
root, so the checkout's own package is imported); one untimed warm-up round first (bytecode
caches, file cache), then ``R`` rounds in which the cases run one after the other (interleaved,
so a busy moment of the shared 2-core machine hits every case alike); the median wall time of
each case and its ratio to the median of ``python -c "import numpy"`` are printed:

* ``import numpy``: the floor -- every command needs numpy;
* ``import reduced_dynamics``: target <= 2x numpy;
* ``from reduced_dynamics import Setting``: the first real use (numpy and the data model);
* ``python -m reduced_dynamics --help``: the command list with each command's one-line help;
* ``python -m reduced_dynamics exact-risk``: end to end at a small state (H = 1, d = 5, L = 40,
  ``--tol 1e-8``, a few ms of quadrature): target <= 3x numpy.

A last, untimed run of each case lists the heavy modules it loaded (sympy, matplotlib,
scipy.integrate, scipy.optimize, scipy.stats, dask, pandas, numba, mpmath, proofs_check), read from
``sys.modules`` at interpreter exit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: heavy modules whose presence at exit is reported
HEAVY = (
    "sympy",
    "matplotlib",
    "scipy.integrate",
    "scipy.optimize",
    "scipy.stats",
    "dask",
    "pandas",
    "numba",
    "mpmath",
    "proofs_check",
)

EXACT_RISK = ["exact-risk", "--d", "5", "--L", "40", "--omega", "0.3", "--mu", "1.5", "--tol", "1e-8", "--quiet"]

#: label -> argv after the interpreter
CASES = {
    "import numpy": ["-c", "import numpy"],
    "import reduced_dynamics": ["-c", "import reduced_dynamics"],
    "from reduced_dynamics import Setting": ["-c", "from reduced_dynamics import Setting"],
    "reduced-dynamics --help": ["-m", "reduced_dynamics", "--help"],
    "reduced-dynamics exact-risk": ["-m", "reduced_dynamics", *EXACT_RISK],
}

#: targets of the ratio to ``import numpy``
TARGETS = {"import reduced_dynamics": 2.0, "reduced-dynamics exact-risk": 3.0}

_REPORT = (
    "import atexit, sys\n"
    "def _report():\n"
    "    heavy = [m for m in {heavy!r} if m in sys.modules]\n"
    "    sys.__stderr__.write('HEAVY:' + ','.join(heavy) + '\\n')\n"
    "atexit.register(_report)\n"
)


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the checkout at ROOT (the working directory) is what is imported
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_once(argv: list[str]) -> float:
    """Wall seconds of one ``python <argv>`` in a fresh process (output discarded; a failure raises)."""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return time.perf_counter() - t0


def heavy_loaded(argv: list[str]) -> list[str]:
    """The :data:`HEAVY` modules in ``sys.modules`` when the process of ``python <argv>`` exits."""
    prologue = _REPORT.format(heavy=HEAVY)
    if argv[0] == "-c":
        code = prologue + argv[1]
    else:  # -m module args...
        code = prologue + f"import runpy; sys.argv = [{argv[1]!r}, *{argv[2:]!r}]\n"
        code += f"runpy.run_module({argv[1]!r}, run_name='__main__', alter_sys=True)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    line = next((s for s in proc.stderr.splitlines() if s.startswith("HEAVY:")), "HEAVY:?")
    return [m for m in line[len("HEAVY:") :].split(",") if m]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="7 repetitions instead of 15 (a smoke run)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 15, --quick 7; >= 7)")
    args = ap.parse_args()
    reps = args.reps or (7 if args.quick else 15)
    if reps < 7:
        ap.error("--reps must be >= 7")
    print(f"start-up wall time, {sys.executable}, in {ROOT}")
    print(f"median of {reps} interleaved repetitions (after one warm-up round); ratio = case / import numpy")
    for argv in CASES.values():  # warm-up: bytecode caches and the file cache
        run_once(argv)
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(reps):
        for label, argv in CASES.items():
            times[label].append(run_once(argv))
    base = statistics.median(times["import numpy"])
    print(
        f"{'case':<38} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>7} {'target':>7}  heavy modules loaded"
    )
    for label, argv in CASES.items():
        med = statistics.median(times[label])
        target = TARGETS.get(label)
        mark = "" if target is None else f"<= {target:g}" + (" ok" if med / base <= target else " MISS")
        heavy = ", ".join(heavy_loaded(argv)) or "-"
        print(
            f"{label:<38} {med * 1e3:10.1f} {min(times[label]) * 1e3:8.1f} {max(times[label]) * 1e3:8.1f} "
            f"{med / base:7.2f} {mark:>7}  {heavy}"
        )


if __name__ == "__main__":
    main()
