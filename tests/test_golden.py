"""Golden regression snapshots of what the ``reduced-dynamics`` CLI prints (and the quick figures' data).

These are **regression snapshots, not independent checks**. ``tests/golden/cli_baseline.json`` and
``tests/golden/figures_baseline.json`` were recorded by ``tests/golden/record.py`` at commit
ec45f2e4ae62340461304b029c614232734af032 (branch main), from the code *before* the redesign of the
engine (flow drivers, result types, CLI dispatch). They say that a command prints what it printed
then, not that what it printed is right: the theory is checked elsewhere (``check``, the unit tests).
They pass on the code they were recorded from by construction; their value is after a refactor,
which must keep every printed number.

Each CLI case (one test id per case, ``test_cli_case[<case>]``) re-runs the recorded ``argv``
through ``reduced_dynamics.cli.main`` in this process (``GOLDEN_SUBPROCESS=1``: as
``python -m reduced_dynamics``), once per session by the ``golden_case`` fixture (tests/conftest.py; the
tests of the moved and stationary-stop cases and those of tests/proofs_check/ read the same run), and
compares with the record:

* the exit status, exactly;
* every recorded key of every JSON object is still there (or under its new name in
  :data:`RENAMED_KEYS`); new keys may be added; the keys of :data:`IGNORED_KEYS` and
  :data:`FREE_TEXT_KEYS` may come or go; the same list lengths, ``null`` where ``null`` was printed;
* numbers to ``rtol=1e-6, atol=1e-9`` (:data:`RTOL`, :data:`ATOL`; a per-case ``rtol`` in
  :data:`TOLERANCES`); integers and booleans exactly (status codes, counts, seeds, flags);
* strings exactly (``status``, ``method``, roles, names ...), except the free text of
  :data:`FREE_TEXT_KEYS` (``message`` ...), which is not compared, and the formatted text of
  :data:`TEXT_NUMBER_KEYS` (``check``'s predicted / measured / tolerance lines, ``portrait``'s
  stdout), whose numbers are compared: the same count, each equal to within one unit of its last
  printed digit (a rounding flip of a printed value is not a regression; the full-precision
  values of those lines are compared in the check's ``data``);
* not at all: the solver work counters of :data:`IGNORED_KEYS` (``nfev``, ``njev``, ``nlu``,
  ``n_steps``, quadrature nodes, search evaluations), which a different but equally accurate
  driver changes.

Times, rates and paths were dropped when recording (``record.DROP_KEYS``: ``seconds``,
``cpu_seconds``, ``steps_per_second``, ``train_seconds``, ``files``, ...), and are dropped from the
new output in the same way. The figure tests (``test_figure[<name>]``, slow (tests/slow_tests.txt): each figure's quick
run, made once per session by the ``quick_figure`` fixture and shared with the figure tests) compare
every array of each ``<name>.npz`` (names, shapes, dtype kinds, values to the same tolerances) and
that figure's ``--json`` key numbers.

Regenerate only deliberately, never to make a failure go away unexplained::

    python tests/golden/record.py            # from the repository root

and say in the commit message which numbers moved, by how much, and why (e.g. "run --method Radau:
omega moves 3e-9 relative because the flow driver now passes the Jacobian"); update the commit
named above. A tolerance in :data:`TOLERANCES` is a documented exception for one case, with its
reason, not a way to silence a moved number.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


def _load_record():
    name = "golden_record"  # the name tests/conftest.py's golden_case fixture loads it under
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, GOLDEN / "record.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


record = _load_record()

CLI_BASELINE = json.loads((GOLDEN / "cli_baseline.json").read_text(encoding="utf-8"))
FIGURES_BASELINE = json.loads((GOLDEN / "figures_baseline.json").read_text(encoding="utf-8"))

#: default tolerances of a number: |new - recorded| <= ATOL + RTOL |recorded|
RTOL = 1e-6
ATOL = 1e-9

#: per-case relative tolerance overriding RTOL, each with its reason. Empty: two recordings of the
#: unchanged code agree exactly (bit for bit) in every case. A flow whose solver tolerance is 1e-8
#: may move at the 1e-6 level when the driver changes; add it here only then, saying so.
TOLERANCES: dict[str, float] = {}

#: per-figure relative tolerance overriding RTOL (same rules as TOLERANCES)
FIGURE_TOLERANCES: dict[str, float] = {}

#: solver / quadrature work counters: recorded, never compared (a different, equally accurate driver
#: changes them)
IGNORED_KEYS = frozenset(
    {
        "nfev",  # right-hand-side (gradient) evaluations of the ODE solver
        "njev",  # Jacobian (Hessian) evaluations
        "nlu",  # LU decompositions
        "n_steps",  # solver steps (run --n-init)
        "n_nodes",  # quadrature nodes of exact-risk (set by --tol through the step rule)
        "evaluations",  # function evaluations of single-head's bracketing search
    }
)

#: recorded key -> the key that holds the same number in the new output (the one engine gave the results
#: of every model the same field names)
RENAMED_KEYS: dict[str, str] = {
    "t_end": "t",  # run --activation printed the time it stopped at as t_end; every run now prints it as t
    # risk --activation printed its estimates as estimates; every model's risk report now names them estimators
    # (with an "exact" entry each, null: no closed form for the model with f)
    "estimates": "estimators",
    # κ_L = (tr Σ + dσ²)/L had two names (PrecondLimit.lam, OptimalPreconditioner.kappa); it is kappa everywhere now
    # (run --sigma: limit.lam; check preconditioned: flow[].lam)
    "lam": "kappa",
}

#: case -> {recorded key: why the redesign moved it}. These keys are not compared for that case; the
#: new values are checked by test_moved_cases_stop_where_the_theory_says (independently of the recording).
MOVED: dict[str, dict[str, str]] = {
    "run_activation_affine": {
        "status": "the one engine stops every model's flow at a stationary point (status 1), as the isotropic "
        "flow always did; affine L̃_f is flat along the solution manifold, so its flow is stationary at t ≈ 232",
        "t_end": "the time it stopped at (was t_end = 1e5: the old activation driver had no stationarity event)",
        "zero_sum_ratio": "1e-9 at t ≈ 232 instead of 2e-15 at t = 1e5 (both zero-sum)",
    },
    "run_sigma_eigs": {
        "status": "the one engine stops every model's flow at a stationary point (status 1): from seed 0 both "
        "heads take one sign and the Σ flow reaches the one-sign minimum (as the isotropic H = 2 flow does "
        "from seeds 4, 5, 7) at t ≈ 559; every end-state number is unchanged",
        "t": "the time it stopped at (was 1e5: the old Σ driver had no stationarity event)",
    },
}

#: case -> {dotted path of a nested number: why it moved}; compared with the absolute tolerance given
#: instead of rtol (the path still must be there and be a number). ``<path>#<i>`` names number ``i`` of the
#: formatted text at ``<path>`` (:data:`TEXT_NUMBER_KEYS`): compared to the larger of that tolerance and one
#: unit of its last printed digit.
_RESIDUAL_TEXT = (
    "the residual as printed in check's measured line (2 significant digits): one printed unit is 1e-8 for "
    "A2's residual and 1e-6 for A4's, less than the rounding of the CPU's BLAS kernel moves them (AMD EPYC "
    "Zen 3, AVX2 kernels: A2's -5.7e-07 -> -5.5e-07); the same absolute 1e-6 as its full-precision value"
)
MOVED_PATHS: dict[str, dict[str, tuple[float, str]]] = {
    "check_quick_exact_dynamics": {
        **{
            f"{text}#{number}": (1e-6, _RESIDUAL_TEXT)
            for text in ("json.checks[0].measured", "files.check.json.checks[0].measured")
            for number in (3, 6)  # 'A2 = (1) (closed (2), residual (3)), A4 = (5) (residual (6)); ..' (0, 4: A2, A4)
        },
        # A2 and A4 themselves are compared at rtol 1e-6; a residual is A/A_closed - 1, so the same tolerance
        # on A is an absolute 1e-6 on its residual (rtol on a residual near 0 compares rounding noise)
        "files.check.json.checks[0].data.richardson.a2_residual": (
            1e-6,
            "A2/A2_closed - 1 (-5.7e-7): a relative tolerance on it compares the last bits of A2, a Richardson "
            "extrapolation of exact risks; the BLAS kernel of the CPU moves it by 1.6e-8 absolute (AMD EPYC "
            "AVX-512 kernels against the recording's Haswell kernels: -5.672e-7 -> -5.830e-7), A2 by 1.6e-8 relative",
        ),
        "files.check.json.checks[0].data.richardson.a4_residual": (
            1e-6,
            "A4/A4_closed - 1 (2.6e-5), which amplifies the last bits of the debiased-GD risk a0: the three "
            "implementations of that risk are one now (reduced_dynamics.estimation.closed_forms.gd_risk), which "
            "moves a0 by ~1e-13 and this residual by 4.3e-9 absolute; the BLAS kernel of the CPU moves it by "
            "9.1e-7 absolute (AMD EPYC AVX-512 kernels: -2.623e-5 -> -2.714e-5), A4 by 9.1e-7 relative; the "
            "check still passes (its bound is 3e-2)",
        ),
    },
}

#: Why a **stationary stop time** is not compared with the recording, in any case: a flow that ends at a
#: stationary point (status 1) stops when |∇L̃| falls below 1e-10, and near the minimum |∇L̃| ~ 1e-10 is of
#: the size of the solver's own state error (atol 1e-10 times the Hessian), so the time of that crossing is
#: not determined by the flow: a change of the last bits of any step moves it. Two such changes are known:
#: the batched Radau's new step control (case ``run_n_init_48_batch_radau``: 61-68 -> 61-106) and the BLAS
#: kernel numpy's OpenBLAS picks for the CPU (on an AMD EPYC with AVX-512, against the Haswell kernels of the
#: recording: ``run_H1`` t = 116.164 -> 116.158, ``run_n_init_8`` t_stop[5] 63.6826 -> 63.6821, while with
#: ``OPENBLAS_CORETYPE=Haswell`` every case is bit for bit). The stop *states* (at the minimum) are well
#: determined and are compared as usual; the statuses exactly; the stop times of status 0 (t_end) exactly.
#: test_stationary_stop_times_are_stationary_events checks each stationary stop independently of the
#: recording: |∇L̃| there is the threshold 1e-10 (to 1e-3; the event is located to 1e-5), before t_end.
STATIONARY_STOP_REASON = (
    "a stationary stop (status 1) is the crossing of |∇L̃| = 1e-10, where |∇L̃| is of the size of the "
    "solver's state error: its time moves with the last bits of any step (step control, BLAS kernel)"
)


def stationary_stop_cases() -> list[str]:
    """The cases whose recording has a stationary stop (a status 1, single run or in a batch)."""
    out = []
    for name, rec in CLI_BASELINE.items():
        status = rec.get("json", {}).get("status") if isinstance(rec.get("json"), dict) else None
        if status == 1 or (isinstance(status, list) and 1 in status):
            out.append(name)
    return sorted(out)


_SKIP: dict[str, tuple[float, str]] = {}

#: Monte Carlo stream version -> its table ``tests/golden/stream<N>_moved.json``, label (case, or
#: ``"figure <name>"``) -> {path: [before, after]}: the numbers that stream version N moved (3:
#: ``precision="auto"``, float32 Box–Muller normals; 4: χ² from uniforms, larger blocks; CHANGELOG.md 0.2.0,
#: issue 22), each written by ``tests/golden/stream_moved.py --version N``. ``before`` is the value the
#: previous tables left (the recording if none moved it).
STREAM_TABLES: dict[int, dict[str, dict[str, list]]] = {
    int(f.name[len("stream") : -len("_moved.json")]): json.loads(f.read_text(encoding="utf-8"))
    for f in sorted(GOLDEN.glob("stream*_moved.json"))
}


def _chain_tables(tables) -> dict[str, dict[str, list]]:
    """label -> {path: [recorded, after version a, after version b, ...]} over the tables in version order."""
    out: dict[str, dict[str, list]] = {}
    for _, table in sorted(tables.items()):
        for label, paths in table.items():
            for path, (before, after) in paths.items():
                out.setdefault(label, {}).setdefault(path, [before]).append(after)
    return out


#: label -> {path: [recorded, ..., current]}: the chain of every moved number. The recorded value must be
#: the chain's first entry and each table's ``before`` the previous table's ``after`` (the tables document
#: what moved, from what; :func:`test_stream_tables_chain`); the new output is compared with the last
#: entry, with the usual tolerances; everything not in a table is still compared with the original recording.
STREAM_MOVED: dict[str, dict[str, list]] = _chain_tables(STREAM_TABLES)

_STREAM: dict[str, list] = {}

#: free text: not compared at all
FREE_TEXT_KEYS = frozenset({"message", "explanation", "stderr_tail"})

#: formatted text whose numbers are compared (each to one unit of its last printed digit)
TEXT_NUMBER_KEYS = frozenset({"predicted", "measured", "tolerance", "stdout"})

#: top-level keys of a record that are not outputs
META_KEYS = frozenset({"argv"})

MAX_REPORTED = 40

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?", re.ASCII)


# ----------------------------------------------------------------------------------------------------
# comparison
# ----------------------------------------------------------------------------------------------------


class _Diff:
    """Collects the mismatches of one comparison (path: what differs)."""

    def __init__(self, rtol: float, atol: float):
        self.rtol, self.atol = rtol, atol
        self.errors: list[str] = []

    def add(self, path: str, text: str) -> None:
        self.errors.append(f"{path or '<root>'}: {text}")

    def report(self) -> str:
        shown = self.errors[:MAX_REPORTED]
        more = len(self.errors) - len(shown)
        return "\n".join(shown + ([f"... and {more} more"] if more > 0 else []))


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(b) or math.isnan(a):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(b) or math.isinf(a):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def _printed_unit(token: str) -> float:
    """One unit of the last printed digit of the number ``token`` ('3.7e-04' -> 1e-5, '0.117' -> 1e-3, '195' -> 1)."""
    mantissa, _, exponent = token.lower().lstrip("+-").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _compare_text_numbers(expected: str, actual: str, path: str, diff: _Diff) -> None:
    exp_tokens, act_tokens = _NUMBER.findall(expected), _NUMBER.findall(actual)
    if len(exp_tokens) != len(act_tokens):
        diff.add(path, f"{len(act_tokens)} numbers printed, recorded {len(exp_tokens)}: {actual!r} vs {expected!r}")
        return
    for i, (e, a) in enumerate(zip(exp_tokens, act_tokens)):
        ev, av = float(e), float(a)
        tol = max(diff.atol + diff.rtol * abs(ev), _printed_unit(e) * (1 + 1e-9), _printed_unit(a) * (1 + 1e-9))
        if f"{path}#{i}" in _SKIP:  # a documented move of this number of the text (MOVED_PATHS)
            tol = max(tol, _SKIP[f"{path}#{i}"][0])
        if not abs(av - ev) <= tol:
            diff.add(path, f"number {i} of the text is {a}, recorded {e} (text {actual!r})")


def _is_array_record(x) -> bool:
    return isinstance(x, dict) and "dtype" in x and "shape" in x and ("values" in x or "summary" in x)


def _kind(dtype: str) -> str:
    k = np.dtype(dtype).kind
    return {"i": "number", "u": "number", "f": "number", "c": "number", "b": "bool", "U": "str", "S": "str"}.get(k, k)


def _compare_arrays(expected: dict, actual: dict, path: str, diff: _Diff) -> None:
    if not _is_array_record(actual):
        diff.add(path, f"expected an array, got {str(actual)[:100]}")
        return
    if list(actual["shape"]) != list(expected["shape"]):
        diff.add(path, f"shape {actual['shape']}, recorded {expected['shape']}")
        return
    kind = _kind(expected["dtype"])
    if _kind(actual["dtype"]) != kind:
        diff.add(path, f"dtype {actual['dtype']}, recorded {expected['dtype']}")
        return
    if "summary" in expected:
        if "summary" not in actual:
            diff.add(path, "stored in full, recorded as a summary")
            return
        es, as_ = expected["summary"], actual["summary"]
        scale = math.sqrt(max(float(es["sum_sq"]), 0.0))  # the sum may cancel: measure it against the norm
        for key in ("sum_sq", "sum"):
            atol = diff.atol + (diff.rtol * scale if key == "sum" else 0.0)
            if not _close(float(as_[key]), float(es[key]), diff.rtol, atol):
                diff.add(f"{path}.summary.{key}", f"{as_[key]!r}, recorded {es[key]!r}")
        if as_["n_nonfinite"] != es["n_nonfinite"]:
            diff.add(f"{path}.summary.n_nonfinite", f"{as_['n_nonfinite']}, recorded {es['n_nonfinite']}")
        for key in ("first", "last"):
            _compare_arrays(
                {"dtype": "<f8", "shape": [len(es[key])], "values": es[key]},
                {"dtype": "<f8", "shape": [len(as_[key])], "values": as_[key]},
                f"{path}.summary.{key}",
                diff,
            )
        return
    if "values" not in actual:
        diff.add(path, "stored as a summary, recorded in full")
        return
    if kind != "number" or np.dtype(expected["dtype"]).kind in "iu" and np.dtype(actual["dtype"]).kind in "iu":
        e, a = np.asarray(expected["values"], dtype=object), np.asarray(actual["values"], dtype=object)
        if e.shape != a.shape or not all(x == y for x, y in zip(e.ravel(), a.ravel())):
            bad = [i for i, (x, y) in enumerate(zip(e.ravel(), a.ravel())) if x != y]
            diff.add(path, f"{len(bad)} of {e.size} entries differ (exact); first at flat index {bad[:1]}")
        return
    e = np.asarray(expected["values"], dtype=np.float64)  # "nan" / "inf" strings become floats
    a = np.asarray(actual["values"], dtype=np.float64)
    ok = np.isclose(a, e, rtol=diff.rtol, atol=diff.atol, equal_nan=True)
    if not np.all(ok):
        idx = np.unravel_index(int(np.argmax(np.where(ok, -np.inf, np.abs(a - e)))), e.shape) if e.ndim else ()
        diff.add(
            path,
            f"{int(np.size(ok) - np.count_nonzero(ok))} of {e.size} entries differ; worst at {tuple(int(i) for i in idx)}: "
            f"{float(a[idx])!r}, recorded {float(e[idx])!r}",
        )


def compare(expected, actual, path: str, diff: _Diff, key: str | None = None) -> None:
    """Compare a recorded output ``expected`` with the new ``actual`` (see the module docstring)."""
    if key in IGNORED_KEYS or key in FREE_TEXT_KEYS:
        return
    if path in _STREAM:
        old, new = _STREAM[path][0], _STREAM[path][-1]
        if old != expected:
            diff.add(path, f"STREAM_MOVED names {old!r} as the recorded value, the recording has {expected!r}")
        compare(new, actual, f"{path} (stream {max(STREAM_TABLES)})", diff, key=key)
        return
    if path in _SKIP:
        atol, _ = _SKIP[path]
        if not (_is_number(actual) and abs(float(actual) - float(expected)) <= atol):
            diff.add(path, f"{actual!r}, recorded {expected!r} (documented move, allowed |Δ| <= {atol:g})")
        return
    if _is_array_record(expected):
        _compare_arrays(expected, actual, path, diff)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            diff.add(path, f"expected an object, got {type(actual).__name__}: {str(actual)[:100]}")
            return
        optional = IGNORED_KEYS | FREE_TEXT_KEYS
        missing = sorted(set(expected) - set(actual) - optional)
        # the redesign may add keys (new summaries); it may only drop or rename a recorded one through
        # RENAMED_KEYS, which says where the number went
        actual = dict(actual)
        for old, new in RENAMED_KEYS.items():
            if old in expected and old not in actual and new in actual:
                actual[old] = actual[new]
        missing = sorted(set(expected) - set(actual) - optional)
        if missing:
            diff.add(path, f"keys missing from the new output: {missing}")
        for k in expected:
            if k in actual:
                compare(expected[k], actual[k], f"{path}.{k}" if path else k, diff, key=k)
        return
    if isinstance(expected, list):
        if not isinstance(actual, list):
            diff.add(path, f"expected a list, got {type(actual).__name__}: {str(actual)[:100]}")
            return
        if len(actual) != len(expected):
            diff.add(path, f"length {len(actual)}, recorded {len(expected)}")
            return
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, f"{path}[{i}]", diff, key=key)
        return
    if isinstance(expected, str):
        if not isinstance(actual, str):
            diff.add(path, f"{actual!r}, recorded the string {expected!r}")
        elif key in TEXT_NUMBER_KEYS:
            _compare_text_numbers(expected, actual, path, diff)
        elif actual != expected:
            diff.add(path, f"{actual!r}, recorded {expected!r}")
        return
    if expected is None or isinstance(expected, bool):
        if actual is not expected:
            diff.add(path, f"{actual!r}, recorded {expected!r}")
        return
    if _is_number(expected):
        if not _is_number(actual):
            diff.add(path, f"{actual!r}, recorded the number {expected!r}")
        elif isinstance(expected, int) and isinstance(actual, int):
            if actual != expected:
                diff.add(path, f"{actual}, recorded {expected} (integers compare exactly)")
        elif key == "status" and actual != expected:
            diff.add(path, f"status {actual!r}, recorded {expected!r}")
        elif not _close(float(actual), float(expected), diff.rtol, diff.atol):
            rel = abs(actual - expected) / abs(expected) if expected else math.inf
            diff.add(path, f"{actual!r}, recorded {expected!r} (relative difference {rel:.3g})")
        return
    diff.add(path, f"cannot compare the recorded value {expected!r}")  # pragma: no cover


def _drop_moved(label, expected, actual):
    if isinstance(expected.get("json"), dict):  # stationary stop times (STATIONARY_STOP_REASON)
        e_json, a_json = dict(expected["json"]), dict(actual.get("json") or {})
        status = e_json.get("status")
        if isinstance(status, list) and 1 in status:
            keep = [st != 1 for st in status]
            for d in (e_json, a_json):
                if isinstance(d.get("t_stop"), list) and len(d["t_stop"]) == len(keep):
                    d["t_stop"] = [v for v, k in zip(d["t_stop"], keep) if k]
        elif status == 1 and a_json.get("status") == 1:
            e_json.pop("t", None)
            a_json.pop("t", None)
        expected, actual = {**expected, "json": e_json}, {**actual, "json": a_json}
    moved = MOVED.get(label, {})
    if not moved:
        return expected, actual
    e, a = dict(expected), dict(actual)
    for k in ("json",):
        if isinstance(e.get(k), dict):
            e[k] = {kk: vv for kk, vv in e[k].items() if kk not in moved}
            a[k] = {kk: vv for kk, vv in a.get(k, {}).items() if kk not in moved}
    return e, a


def assert_same(label: str, expected: dict, actual: dict, rtol: float) -> None:
    expected, actual = _drop_moved(label, expected, actual)
    _SKIP.clear()
    _SKIP.update(MOVED_PATHS.get(label, {}))
    _STREAM.clear()
    _STREAM.update(STREAM_MOVED.get(label, {}))
    diff = _Diff(rtol, ATOL)
    if actual["exit"] != expected["exit"]:
        diff.add("exit", f"{actual['exit']}, recorded {expected['exit']} (stderr: {actual.get('stderr_tail', '')!r})")
    outputs = set(expected) - META_KEYS - FREE_TEXT_KEYS - {"exit"}
    new_outputs = set(actual) - META_KEYS - FREE_TEXT_KEYS - {"exit"}
    if outputs != new_outputs:
        diff.add("", f"outputs {sorted(new_outputs)}, recorded {sorted(outputs)}")
    for k in sorted(outputs & new_outputs):
        compare(expected[k], actual[k], k, diff, key=k)
    assert not diff.errors, f"{label}: the output moved from its golden recording (rtol={rtol:g}):\n{diff.report()}"


# ----------------------------------------------------------------------------------------------------
# the tests
# ----------------------------------------------------------------------------------------------------


def test_cases_match_recording():
    """record.CASES and the baseline name the same cases with the same argv (regenerate after editing CASES)."""
    assert sorted(CLI_BASELINE) == sorted(record.CASES)
    for name, argv in record.CASES.items():
        assert CLI_BASELINE[name]["argv"] == argv, name
    assert FIGURES_BASELINE["argv"] == record.FIGURES_ARGV
    assert set(TOLERANCES) <= set(CLI_BASELINE) and set(FIGURE_TOLERANCES) <= set(FIGURES_BASELINE["figures"])
    figures = {f"figure {name}" for name in FIGURES_BASELINE["figures"]}
    assert set(STREAM_MOVED) <= set(CLI_BASELINE) | figures


def test_stream_tables_chain():
    """Each table's ``before`` is what the previous tables left: the recording, or the previous ``after``."""
    seen: dict[tuple[str, str], object] = {}
    for version, table in sorted(STREAM_TABLES.items()):
        for label, paths in table.items():
            for path, (before, after) in paths.items():
                assert before == seen.get((label, path), before), (version, label, path)
                seen[(label, path)] = after
    assert set(STREAM_TABLES) == {3, 4}


def test_stream_moved_numbers_are_monte_carlo_numbers_within_their_error():
    """Every number STREAM_MOVED lists moved because of the random stream: the risk estimates of the
    moved ``risk`` cases stay within 4 combined standard errors of the recorded ones (the two streams are
    independent draws of the same estimator), and within 3 of their own standard errors of the exact risk
    where the command prints one."""
    for case in ("risk_default", "risk_state_conditional"):
        moved, rec = STREAM_MOVED[case], CLI_BASELINE[case]["json"]["estimators"]
        assert any(p.endswith(".risk") for p in moved)
        for name, old in rec.items():
            new_risk = moved.get(f"json.estimators.{name}.risk", [old["risk"]])[-1]
            new_se = moved.get(f"json.estimators.{name}.stderr", [old["stderr"]])[-1]
            assert abs(new_risk - old["risk"]) < 4 * math.hypot(old["stderr"], new_se), (case, name)
            if old.get("exact") is not None:  # the closed form (GD, debiased GD): an independent check
                assert abs(new_risk - old["exact"]) < 3 * new_se, (case, name, new_risk, old["exact"])


def test_moved_text_numbers_name_the_residuals():
    """Each ``<path>#<i>`` of MOVED_PATHS names a printed residual of the recording (number ``i`` of that
    text follows the word 'residual'), so a documented move widens no other number of the line."""

    def texts(x, path):  # every string of a record, under the path compare() gives it
        if isinstance(x, dict):
            for k, v in x.items():
                yield from texts(v, f"{path}.{k}" if path else k)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from texts(v, f"{path}[{i}]")
        elif isinstance(x, str):
            yield path, x

    checked = 0
    for case, paths in MOVED_PATHS.items():
        recorded = dict(texts(CLI_BASELINE[case], ""))
        for key in (k for k in paths if "#" in k):
            path, _, number = key.rpartition("#")
            text = recorded[path]
            match = list(_NUMBER.finditer(text))[int(number)]
            assert text[: match.start()].endswith("residual "), (case, key, text)
            checked += 1
    assert checked == 4


@pytest.mark.parametrize("case", sorted(CLI_BASELINE))
def test_cli_case(golden_case, case):
    expected = CLI_BASELINE[case]
    actual = golden_case(case)  # record.run_case(expected["argv"]), once per session (tests/conftest.py)
    assert_same(case, expected, actual, TOLERANCES.get(case, RTOL))


@pytest.mark.parametrize("case", sorted(MOVED))
def test_moved_cases_stop_where_the_theory_says(golden_case, case):
    """The moved statuses are right: the run ends at a stationary point (|∇L| at the stationarity
    threshold 1e-10 of ``integrate``, to 1e-3: the event is located on the dense output to 1e-5 of |∇L|, so
    it may be met just above 1e-10), at a time before t_end, with exit 0."""
    actual = golden_case(case)  # the run test_cli_case compares with the recording
    out = actual["json"]
    assert actual["exit"] == 0 and out["status"] == 1 and out["success"] is True
    assert out["grad_norm"] == pytest.approx(1e-10, rel=1e-3)  # the event is located to 1e-5 of |∇L|
    assert 0 < out["t"] < CLI_BASELINE[case]["json"].get("t", CLI_BASELINE[case]["json"].get("t_end"))


@pytest.mark.parametrize("case", stationary_stop_cases())
def test_stationary_stop_times_are_stationary_events(golden_case, case):
    """Each stationary stop time (not compared with the recording: STATIONARY_STOP_REASON) is right: each
    trajectory of status 1 ends where |∇L| is the stationarity threshold 1e-10 of ``integrate`` (to 1e-3),
    before t_end; the others at t_end."""
    recorded = CLI_BASELINE[case]["json"]
    actual = golden_case(case)  # the run test_cli_case compares with the recording
    out = actual["json"]
    assert actual["exit"] == 0 and out["status"] == recorded["status"]
    if isinstance(out["status"], list):
        t_end = recorded["t_end"]
        stops = zip(out["status"], out["t_stop"], out["grad_norm"])
    else:
        argv = CLI_BASELINE[case]["argv"]
        t_end = float(argv[argv.index("--t-end") + 1]) if "--t-end" in argv else 1e5  # run's default --t-end
        stops = [(out["status"], out["t"], out["grad_norm"])]
    for st, t_stop, g in stops:
        if st == 1:
            assert 0 < t_stop < t_end and g == pytest.approx(1e-10, rel=1e-3)
        else:
            assert t_stop == t_end


def test_figures_set():
    """The registry makes the figures (and only those) whose data is recorded."""
    from reduced_dynamics.figures.registry import FIGURES

    assert FIGURES_BASELINE["exit"] == 0 and FIGURES_BASELINE["argv"][:2] == ["figures", "--quick"]
    assert sorted(FIGURES) == sorted(FIGURES_BASELINE["figures"])
    assert set(FIGURES_BASELINE["json"]) <= set(FIGURES)


@pytest.mark.parametrize("figure", sorted(FIGURES_BASELINE["figures"]))
def test_figure(quick_figure, figure):
    """Each figure's quick data (seed 0) and key numbers as recorded from ``figures --quick --seed 0 --json``.

    The figure is made once for the session by the ``quick_figure`` fixture (tests/conftest.py): the
    same ``FIGURES[name].run(quick=True, seed=0)`` under one BLAS thread that ``figures`` runs for each
    name; the command around it (its record, --json, workers) is tested in tests/reduced_dynamics/cli/.
    """
    folder, run = quick_figure(figure)
    rtol = FIGURE_TOLERANCES.get(figure, RTOL)
    data = folder / f"{figure}.npz"
    expected = {"npz": FIGURES_BASELINE["figures"][figure], "exit": FIGURES_BASELINE["exit"]}
    actual = {"npz": record.npz_record(data) if data.is_file() else None, "exit": 0}
    if figure in FIGURES_BASELINE["json"]:
        expected["json"] = FIGURES_BASELINE["json"][figure]
        actual["json"] = record.normalise(run["key_numbers"], str(folder))
    assert actual["npz"] is not None, f"figures --quick no longer writes {figure}.npz"
    assert_same(f"figure {figure}", expected, actual, rtol)
