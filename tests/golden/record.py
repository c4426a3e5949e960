"""Record what the ``reduced-dynamics`` CLI prints, as regression snapshots for ``tests/test_golden.py``.

Usage (from the repository root, so that ``python`` imports this checkout's ``reduced_dynamics``)::

    python tests/golden/record.py              # both baselines (about 45 s of CPU)
    python tests/golden/record.py --cli        # only tests/golden/cli_baseline.json
    python tests/golden/record.py --figures    # only tests/golden/figures_baseline.json
    python tests/golden/record.py --case run_H1 # re-record one case in cli_baseline.json (repeatable)
    python tests/golden/record.py --subprocess # run each case as `python -m reduced_dynamics ...`
    python tests/golden/record.py --out-dir D  # write the baselines into D instead (e.g. to diff two runs)

Outputs
-------
``cli_baseline.json``
    ``{case: {"argv": [...], "exit": int, "json": parsed stdout}}`` for every entry of :data:`CASES`;
    a command without ``--json`` (``portrait``) stores ``"stdout"`` (its text, with the temporary folder
    written ``{tmp}``) instead, and a case that writes files (``check --out``, ``portrait --out``) also
    stores ``"files": {name: content}`` (JSON parsed; ``.npz`` as in the figure baseline).
``figures_baseline.json``
    ``{"argv", "exit", "json": figures --json, "figures": {name: {array: record}}}`` with each array of
    ``<out>/<name>.npz`` as ``{"dtype", "shape", "values"}``, or, above :data:`MAX_FULL_ELEMENTS`
    elements, ``{"dtype", "shape", "summary": {sum, sum_sq, n_nonfinite, first, last}}`` (none is that
    large now). A non-finite float of an array is stored as the string ``"nan"``, ``"inf"`` or ``"-inf"``.

Both files are written with sorted keys, every float in full ``repr`` (nothing rounded), standard JSON
(no ``NaN`` token). Two recordings of the unchanged code, in this process or with ``--subprocess``, are
byte-identical.

Dropped before storing (and before comparing): every key in :data:`DROP_KEYS` or ending with one of
:data:`DROP_SUFFIXES`, at any depth: wall or CPU times and rates (``seconds``, ``cpu_seconds``,
``steps_per_second``, ``train_seconds``, ``train_cpu_seconds``, ``elapsed_s``) and output paths
(the commands' own ``files`` key, whose values name the temporary folder; the record's top-level
``"files"`` is this script's, keyed by file name). :func:`normalise` also replaces the temporary folder by
``{tmp}`` in any remaining string and refuses to store a string that still holds an absolute path of
this machine.

In ``argv``, ``{tmp}`` stands for a fresh temporary folder made for that one case.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLI_BASELINE = HERE / "cli_baseline.json"
FIGURES_BASELINE = HERE / "figures_baseline.json"

#: keys removed at any depth of a recorded output: non-deterministic (times, rates) or paths
DROP_KEYS = frozenset(
    {
        "seconds",  # wall time of a run (run, risk, exact-risk, single-head, train, check, figures)
        "cpu_seconds",  # CPU time (exact-risk, single-head)
        "steps_per_second",  # train: a rate derived from the wall time
        "train_seconds",  # train --tasks: wall and CPU time of the training loop
        "train_cpu_seconds",
        "files",  # run/risk/...: the paths written with --out (none without --out; still a path field)
        "elapsed_s",  # check bayes_ratio: its data's wall time
        "timestamp",
        "time_s",
        "wall_seconds",
        "elapsed",
        "version",  # a package version (none is printed now; listed so that one added later is not stored)
        "package_version",
    }
)
#: keys ending with one of these are dropped too (``train_seconds``, ``train_cpu_seconds`` of train --tasks, ...)
DROP_SUFFIXES = ("seconds", "per_second", "elapsed_s", "timestamp")


def dropped(key) -> bool:
    """Whether the output key ``key`` is left out of the baselines (see :data:`DROP_KEYS`)."""
    return key in DROP_KEYS or (isinstance(key, str) and key.endswith(DROP_SUFFIXES))


#: arrays with more elements than this are stored as shape + summary statistics
MAX_FULL_ELEMENTS = 2000

#: the checks of ``check --quick``, one case each (``--only NAME``) so each case stays a few seconds
CHECK_NAMES = (
    "manifold",
    "drift_law",
    "approximation",
    "optimality",
    "bayes_ratio",
    "approx_vs_exact",
    "single_head",
    "exact_dynamics",
    "multitask",
    "precond_risk",
    "preconditioned",
    "precond_trained",
    "activations",
)

SIGMA_EIGS = "0.5,1,1.5,2,4"
QUICK_TRAIN = ["--steps", "200", "--batch", "64", "--n-eval", "2000"]

#: case name -> argv after ``python -m reduced_dynamics`` (``{tmp}``: a fresh temporary folder)
CASES: dict[str, list[str]] = {
    # --- run: the isotropic reduced flow (LSODA by default) ---
    "run_default": ["run", "--seed", "0", "--json", "--quiet"],
    "run_H3_seed1_t1e4": ["run", "--heads", "3", "--seed", "1", "--t-end", "1e4", "--json", "--quiet"],
    "run_H1": ["run", "--heads", "1", "--seed", "0", "--json", "--quiet"],
    "run_radau": ["run", "--method", "Radau", "--seed", "0", "--json", "--quiet"],
    "run_symmetric_init": ["run", "--init", "symmetric", "--t-end", "1e4", "--json", "--quiet"],
    "run_given_init": ["run", "--omega0", "0.1,-0.2", "--mu0", "1,-0.5", "--t-end", "1e4", "--json", "--quiet"],
    # --- run --n-init: the batch path (below 48 starts LSODA one after the other, from 48 batched Radau) ---
    "run_n_init_8": ["run", "--n-init", "8", "--seed", "0", "--json", "--quiet"],
    "run_n_init_48_batch_radau": ["run", "--n-init", "48", "--seed", "0", "--t-end", "1e3", "--json", "--quiet"],
    # --- run under the extensions: covariance Σ, attention activations, multi-task ---
    "run_sigma_eigs": ["run", "--sigma-eigs", SIGMA_EIGS, "--sigma-seed", "0", "--seed", "0", "--json", "--quiet"],
    "run_activation_affine": ["run", "--activation", "affine", "--seed", "0", "--json", "--quiet"],
    "run_activation_square": ["run", "--activation", "square", "--seed", "0", "--json", "--quiet"],
    "run_activation_tanh": ["run", "--activation", "tanh", "--seed", "0", "--json", "--quiet"],
    "run_tasks": ["run", "--tasks", "1-4,3-6", "--d", "6", "--seed", "0", "--json", "--quiet"],
    # --- risk: Monte Carlo at small sizes ---
    "risk_default": ["risk", "--prompts", "2000", "--seed", "0", "--json", "--quiet"],
    "risk_state_conditional": [
        "risk",
        "--prompts",
        "2000",
        "--seed",
        "1",
        "--omega",
        "0.1,-0.1",
        "--mu",
        "4.4,-4.4",
        "--conditional",
        "--json",
        "--quiet",
    ],
    "risk_sigma_eigs": ["risk", "--prompts", "2000", "--seed", "0", "--sigma-eigs", SIGMA_EIGS, "--json", "--quiet"],
    "risk_activation_tanh": ["risk", "--prompts", "2000", "--seed", "0", "--activation", "tanh", "--json", "--quiet"],
    "risk_activation_square": [
        "risk",
        "--prompts",
        "2000",
        "--seed",
        "0",
        "--activation",
        "square",
        "--activation-c",
        "0.5",
        "--json",
        "--quiet",
    ],
    "risk_tasks": ["risk", "--prompts", "2000", "--seed", "0", "--tasks", "1-4,3-6", "--d", "6", "--json", "--quiet"],
    # --- exact-risk: deterministic quadrature at a few states ---
    "exact_risk_default": ["exact-risk", "--json", "--quiet"],
    "exact_risk_H2_grad": ["exact-risk", "--omega", "0.3,-0.3", "--mu", "1.5,-1.5", "--grad", "--json", "--quiet"],
    "exact_risk_H3_grad": [
        "exact-risk",
        "--omega",
        "0.1,-0.05,0.2",
        "--mu",
        "2,-1,0.5",
        "--grad",
        "--json",
        "--quiet",
    ],
    # --- single-head: the exact finite-L optimum ---
    "single_head_default": ["single-head", "--json", "--quiet"],
    "single_head_L20_sigma2_0.5": ["single-head", "--L", "20", "--sigma2", "0.5", "--json", "--quiet"],
    # --- train: a few Adam/SGD steps ---
    "train_default_quick": ["train", *QUICK_TRAIN, "--seed", "0", "--json", "--quiet"],
    "train_H3_sgd_reduced": [
        "train",
        "--heads",
        "3",
        *QUICK_TRAIN,
        "--optimizer",
        "sgd",
        "--lr",
        "0.05",
        "--param",
        "reduced",
        "--seed",
        "1",
        "--json",
        "--quiet",
    ],
    "train_sigma_eigs": ["train", *QUICK_TRAIN, "--sigma-eigs", SIGMA_EIGS, "--seed", "0", "--json", "--quiet"],
    "train_tasks": ["train", *QUICK_TRAIN, "--tasks", "1-4,3-6", "--d", "6", "--seed", "0", "--json", "--quiet"],
    # --- portrait: no --json; its .npz data (and the numbers of its text) are recorded ---
    "portrait_small": [
        "portrait",
        "--resolution",
        "12",
        "--n-traj",
        "2",
        "--t-end",
        "1e3",
        "--seed",
        "0",
        "--out",
        "{tmp}",
        "--quiet",
    ],
    # --- check --quick, one check per case; --out keeps each check's full-precision data ---
    **{
        f"check_quick_{name}": ["check", "--quick", "--only", name, "--json", "--out", "{tmp}/check.json", "--quiet"]
        for name in CHECK_NAMES
    },
}

FIGURES_ARGV = ["figures", "--quick", "--seed", "0", "--out", "{tmp}", "--json", "--quiet"]


# ----------------------------------------------------------------------------------------------------
# running a case
# ----------------------------------------------------------------------------------------------------


def _run_inprocess(argv: list[str]) -> tuple[int, str, str]:
    from reduced_dynamics.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # pragma: no cover - main() returns its status; kept for safety
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return int(rc), out.getvalue(), err.getvalue()


def _run_subprocess(argv: list[str]) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def run_cli(argv: list[str], *, subprocess_mode: bool = False) -> tuple[int, str, str]:
    """Run ``reduced-dynamics argv`` (in this process, or as ``python -m reduced_dynamics``): (exit, stdout, stderr)."""
    return (_run_subprocess if subprocess_mode else _run_inprocess)(argv)


def run_case(argv: list[str], *, subprocess_mode: bool = False) -> dict:
    """Run one recorded case (``{tmp}`` in ``argv`` becomes a fresh folder) and return its normalised record."""
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        real = [a.replace("{tmp}", tmp) for a in argv]
        rc, out, err = run_cli(real, subprocess_mode=subprocess_mode)
        record: dict = {"argv": list(argv), "exit": rc}
        if "--json" in argv:
            try:
                record["json"] = normalise(json.loads(out), tmp)
            except json.JSONDecodeError as exc:
                raise RuntimeError(f"{argv}: stdout is not JSON ({exc}); stderr: {err[-2000:]}") from None
        else:
            record["stdout"] = normalise(out, tmp)
        files = {}
        for path in sorted(Path(tmp).rglob("*")):
            if path.suffix == ".json" and path.name != "figures_run.json":
                files[path.name] = normalise(json.loads(path.read_text()), tmp)
            elif path.suffix == ".npz":
                files[path.name] = npz_record(path)
        if files:
            record["files"] = files
        if rc != 0:
            record["stderr_tail"] = normalise(err[-500:], tmp)  # kept for the reader; never compared
    return record


# ----------------------------------------------------------------------------------------------------
# normalising outputs
# ----------------------------------------------------------------------------------------------------


def normalise(obj, tmp: str | None = None):
    """``obj`` without the keys of :data:`DROP_KEYS` (at any depth); the folder ``tmp`` written ``{tmp}``."""
    if isinstance(obj, dict):
        return {str(k): normalise(v, tmp) for k, v in obj.items() if not dropped(k)}
    if isinstance(obj, (list, tuple)):
        return [normalise(v, tmp) for v in obj]
    if isinstance(obj, str):
        if tmp:
            obj = obj.replace(os.path.realpath(tmp), "{tmp}").replace(tmp, "{tmp}")
        for root in (str(REPO), tempfile.gettempdir() + os.sep, str(Path.home()) + os.sep):
            if root in obj and len(root) > 1:
                raise ValueError(f"refusing to record a machine path: {obj[:200]!r} (add its key to DROP_KEYS)")
        return obj
    return obj


def _jsonable_float(v: float):
    """``v`` as JSON: the float itself, or the string ``"nan"``, ``"inf"`` or ``"-inf"`` (standard JSON has none)."""
    v = float(v)
    return v if math.isfinite(v) else repr(v)


def _values(a: np.ndarray):
    """The values of ``a`` as nested lists; floats in full ``repr``, non-finite ones as strings."""
    if a.dtype.kind in "fc":
        if a.dtype.kind == "c":
            a = np.stack([a.real, a.imag], axis=-1)
        return np.vectorize(_jsonable_float, otypes=[object])(a).tolist() if a.size else a.tolist()
    return a.tolist()


def array_record(a: np.ndarray) -> dict:
    """One ``.npz`` array as JSON: dtype, shape and the values (or summary statistics when large).

    Above :data:`MAX_FULL_ELEMENTS` elements a numeric array is stored as ``summary``: ``sum`` and
    ``sum_sq`` over the finite entries, ``n_nonfinite``, and the ``first``/``last`` 5 values (flattened).
    """
    a = np.asarray(a)
    rec: dict = {"dtype": a.dtype.str, "shape": list(a.shape)}
    if a.size <= MAX_FULL_ELEMENTS or a.dtype.kind not in "biuf":
        rec["values"] = _values(a)
    else:
        flat = a.astype(np.float64).ravel()
        finite = flat[np.isfinite(flat)]
        rec["summary"] = {
            "sum": float(np.sum(finite)),
            "sum_sq": float(np.sum(finite * finite)),
            "n_nonfinite": int(flat.size - finite.size),
            "first": _values(flat[:5]),
            "last": _values(flat[-5:]),
        }
    return rec


def npz_record(path: Path) -> dict:
    """Every array of the ``.npz`` file at ``path`` (names sorted), as :func:`array_record`."""
    with np.load(path, allow_pickle=False) as z:
        return {name: array_record(z[name]) for name in sorted(z.files)}


def run_figures(*, subprocess_mode: bool = False) -> dict:
    """``figures --quick`` into a fresh folder: exit, its --json key numbers and every figure's ``.npz`` data."""
    with tempfile.TemporaryDirectory(prefix="golden-figures-") as tmp:
        real = [a.replace("{tmp}", tmp) for a in FIGURES_ARGV]
        rc, out, err = run_cli(real, subprocess_mode=subprocess_mode)
        if rc != 0:
            raise RuntimeError(f"figures exited {rc}: {err[-2000:]}")
        return {
            "argv": list(FIGURES_ARGV),
            "exit": rc,
            "json": normalise(json.loads(out), tmp),
            "figures": {p.stem: npz_record(p) for p in sorted(Path(tmp).glob("*.npz"))},
        }


# ----------------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------------


def dump(obj, path: Path) -> None:
    """Write ``obj`` as stable JSON: sorted keys, one-space indent, floats in full ``repr`` (``allow_nan=False``: standard JSON)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def record_cli(*, subprocess_mode: bool = False, only: list[str] | None = None) -> dict:
    cases = {}
    for name, argv in CASES.items():
        if only and name not in only:
            continue
        t0 = cpu_seconds()
        cases[name] = run_case(argv, subprocess_mode=subprocess_mode)
        print(f"  {name}: exit {cases[name]['exit']} ({cpu_seconds() - t0:.1f} s CPU)", file=sys.stderr)
    return cases


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cli", action="store_true", help="only the CLI cases")
    p.add_argument("--figures", action="store_true", help="only the figure data")
    p.add_argument(
        "--case", action="append", help="re-record only this CLI case in the existing file (repeatable; implies --cli)"
    )
    p.add_argument("--subprocess", action="store_true", help="run each command as `python -m reduced_dynamics`")
    p.add_argument("--out-dir", type=Path, default=HERE, help="folder for the two baselines (default: this folder)")
    args = p.parse_args(argv)
    os.chdir(REPO)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # import this checkout's reduced_dynamics, not another install
    do_cli = args.cli or bool(args.case) or not args.figures
    do_figures = args.figures or not (args.cli or args.case)
    t0 = cpu_seconds()
    if do_cli:
        path = args.out_dir / CLI_BASELINE.name
        cases = record_cli(subprocess_mode=args.subprocess, only=args.case)
        if args.case:  # re-record only these cases: the others stay as they are in the file
            unknown = sorted(set(args.case) - set(CASES))
            if unknown:
                p.error(f"unknown case(s) {unknown}; see CASES")
            old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
            cases = {name: {**old, **cases}[name] for name in CASES if name in {**old, **cases}}
        dump(cases, path)
        print(f"wrote {args.out_dir / CLI_BASELINE.name}", file=sys.stderr)
    if do_figures:
        t1 = cpu_seconds()
        dump(run_figures(subprocess_mode=args.subprocess), args.out_dir / FIGURES_BASELINE.name)
        print(f"wrote {args.out_dir / FIGURES_BASELINE.name} ({cpu_seconds() - t1:.1f} s CPU)", file=sys.stderr)
    print(f"total {cpu_seconds() - t0:.1f} s CPU in this process", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
