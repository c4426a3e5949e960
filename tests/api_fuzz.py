"""Shared harness of the API fuzz suites (issue 9): hostile values, the call contract, the two tests.

Used by ``tests/reduced_dynamics/estimation/test_fuzz_api.py`` and ``tests/proofs_check/test_fuzz_api.py``:
each lists its public callables as :class:`Entry` objects (a valid baseline call and the arguments to
fuzz) and gets its tests from :func:`make_suite`. The contract of a call with one argument replaced by a
hostile value: a result whose every number is finite, or a ``ValueError`` / ``TypeError`` naming a
parameter; no ``RuntimeWarning``, a few seconds at most, no allocation beyond a memory limit.

An entry's ``paths`` (its file and folder arguments) also meet :func:`hostile_paths` (wrong types, a
missing file, a folder, a named pipe, ``/dev/null``, huge-header and truncated ``.npy``/``.npz`` files,
wrong formats, a name with a newline), and its calls run in a fresh temporary working folder; an entry
without ``paths`` is called exactly as before (``tests/fuzz/test_fuzz_api_files.py`` uses them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import re
import resource
import signal
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reduced_dynamics import Flow
from reduced_dynamics.estimation.prompts import Prompts
from reduced_dynamics.estimation.risk import ControlVariateEstimate
from reduced_dynamics.setting import Setting

#: Extreme settings that ARE valid: the functions must cope with them too (L = 10⁹: refuse, not allocate).
EXTREME_SETTINGS = [
    Setting(d=100_000, L=1, sigma2=1e12),
    Setting(d=1, L=10**9, sigma2=0.0),
    Setting(d=1, L=1, sigma2=0.0),
    Setting(d=100_000, L=10**9, sigma2=1e-300),
]

_SPECIAL = [0.0, -0.0, 1e-320, -1e-320, 1e-300, 1e300, -1e300, 1e200, -1e200, float("nan"), float("inf")]
_SPECIAL += [-float("inf"), 1 + 1j, True, None, "x", "", [], 0, -1, 1, 2, 10**6, 10**12, 2**70, 1.5]

_magnitude = st.builds(
    lambda sign, exp, mant: sign * mant * 10.0**exp,
    st.sampled_from([1.0, -1.0]),
    st.integers(-300, 300),
    st.sampled_from([1.0, 3.7]),
)
_small = st.sampled_from([0.0, 0.05, -0.05, 0.3, -0.3, 1.0, -2.0, 0.6])
_elem = st.one_of(_magnitude, _small, st.sampled_from([0.0, float("nan"), float("inf")]))


def _array(shape, vals, kind):
    arr = np.resize(np.array(vals, dtype=np.float64), shape) if shape else np.float64(vals[0])
    if kind == "complex":
        return np.asarray(arr) + 1j
    if kind == "list":
        return np.asarray(arr).tolist()
    return np.asarray(arr)


_arrays = st.builds(
    _array,
    st.sampled_from([(), (1,), (2,), (3,), (2, 2), (3, 2), (3, 6), (3, 6, 2), (0,), (1, 2, 2)]),
    st.lists(_elem, min_size=1, max_size=4),
    st.sampled_from(["float", "float", "list", "complex"]),
)
VALUES = st.one_of(st.sampled_from(_SPECIAL), _magnitude, _small, _arrays, st.sampled_from(EXTREME_SETTINGS))


@dataclasses.dataclass
class Entry:
    """A public callable, its valid baseline call and the arguments to fuzz."""

    name: str
    fn: object
    args: dict  # name -> baseline value, in call order; the first `n_pos` are passed positionally
    n_pos: int
    fuzz: tuple
    #: arguments that are file or folder paths: they also meet :func:`hostile_paths`, and every call of
    #: the entry runs with a fresh temporary folder as its working directory (a relative "x" lands there)
    paths: tuple = ()

    def call(self, name, value):
        vals = dict(self.args)
        vals[name] = value
        items = list(vals.items())
        return self.fn(*[v for _, v in items[: self.n_pos]], **dict(items[self.n_pos :]))


def E(name, fn, n_pos, fuzz=None, paths=(), **args):
    return Entry(name, fn, args, n_pos, tuple(fuzz or args), tuple(paths))


#: a .npy header claiming 100000 x 100000 float64 (80 GB) in a file of about 130 bytes
_HUGE_NPY_HEADER = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }"


def _npy_bytes(header: str, data: bytes = b"") -> bytes:
    header = header + " " * ((-(10 + len(header) + 1)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + data


#: the bytes of such a file: a reader that trusts the header allocates 74.5 GiB (the hostile file of issue 23)
HUGE_NPY = _npy_bytes(_HUGE_NPY_HEADER)


def hostile_paths(tmpdir) -> list:
    """Hostile values of a path argument, the files made in ``tmpdir`` (a fresh folder per caller).

    Paths of the wrong type (int, list, None, bytes), a missing file, a folder, a named pipe, a link
    to ``/dev/null``, ``.npy``/``.npz`` files whose header declares 100000 x 100000 float64 in a few
    hundred bytes, truncated ``.npy``/``.npz``/``.json`` files, files of the wrong format under each
    suffix the package reads (``.npy``, ``.npz``, ``.json``, ``.toml``, ``.pt``, ``.safetensors``)
    and a name with a newline. The link to ``/dev/null`` (not the device itself) keeps a writer
    that replaces its target atomically away from the system's ``/dev/null``.
    """
    import io
    import os
    import zipfile
    from pathlib import Path

    d = Path(tmpdir)
    d.mkdir(parents=True, exist_ok=True)
    out: list = [7, ["a.npz"], None, b"a.npz", d / "missing.npz", d / "missing" / "deeper.npy"]
    folder = d / "folder.npz"
    folder.mkdir(exist_ok=True)
    fifo = d / "fifo.npz"
    if not fifo.exists():
        os.mkfifo(fifo)
    null = d / "devnull.npy"
    if not null.is_symlink():
        null.symlink_to(os.devnull)
    huge = HUGE_NPY
    (d / "huge.npy").write_bytes(huge)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.npy", huge)
        z.writestr("arr_0.npy", huge)
    (d / "huge.npz").write_bytes(buf.getvalue())
    good = io.BytesIO()
    np.savez(good, a=np.arange(64.0), b=np.ones((4, 4)))
    (d / "truncated.npz").write_bytes(good.getvalue()[: len(good.getvalue()) // 2])
    one = io.BytesIO()
    np.save(one, np.arange(64.0))
    (d / "truncated.npy").write_bytes(one.getvalue()[:100])
    (d / "truncated.json").write_text('{"format": 1, "key": "ab')
    for suffix in (".npy", ".npz", ".json", ".toml", ".pt", ".safetensors"):
        (d / f"wrong{suffix}").write_bytes(b"\x00\xffnot a file of this format [[[\n")
    (d / "name\nwith newline.npz").write_bytes(good.getvalue())
    paths = [folder, fifo, null, d / "huge.npy", d / "huge.npz", d / "truncated.npz", d / "truncated.npy"]
    paths += [d / "truncated.json"] + [d / f"wrong{s}" for s in (".npy", ".npz", ".json", ".toml", ".pt")]
    paths += [d / "wrong.safetensors", d / "name\nwith newline.npz"]
    return out + paths + [str(p) for p in paths[:3]]


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def _finite(obj, depth=0) -> bool:
    """True if every number reachable in ``obj`` (result objects, mappings, sequences, arrays) is finite."""
    if depth > 6 or obj is None or isinstance(obj, (bool, str, np.bool_, int, np.integer)):
        return True
    if isinstance(obj, (float, np.floating)):
        return math.isfinite(obj)
    if isinstance(obj, (complex, np.complexfloating)):
        return False
    if isinstance(obj, Flow) and obj.is_batch:
        # documented NaN: a batch's outputs after a trajectory stopped; each trajectory is finite
        return not np.any(np.isinf(obj.states)) and all(_finite(obj[i], depth + 1) for i in range(obj.n_traj))
    if isinstance(obj, Flow) and obj.method == "gd":
        # documented NaN: gradient descent has no solver tolerances (rtol, atol)
        return all(
            _finite(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj) if f.name not in ("rtol", "atol")
        )
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "O":
            return all(_finite(v, depth + 1) for v in obj.ravel())
        return obj.dtype.kind in "biuSU" or (obj.dtype.kind == "f" and bool(np.all(np.isfinite(obj))))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # the one documented infinity: ControlVariateEstimate.variance_reduction when the control
        # reproduces the target exactly (zero residual variance; the estimate is then exact)
        skip = {"variance_reduction"} if isinstance(obj, ControlVariateEstimate) and obj.stderr == 0 else set()
        return all(_finite(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj) if f.name not in skip)
    if isinstance(obj, dict):
        return all(_finite(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v, depth + 1) for v in obj)
    if isinstance(obj, Prompts):
        return all(_finite(getattr(obj, k)) for k in ("_X", "_y", "_x_q", "_y_q", "_scores", "_xq_norm2"))
    return True  # models, Settings, samples are not numbers


def _names(entry) -> set[str]:
    try:
        params = set(inspect.signature(entry.fn).parameters)
    except (TypeError, ValueError):
        params = set()
    return params | set(entry.args) | {"setting", "d", "L", "sigma2", "Sigma", "n_prompts"}


@contextlib.contextmanager
def _memory_limit(extra=2 * 2**30):
    """Cap the address space at its current size + ``extra`` bytes for the block (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(hard, vm + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def start_budget(timeout: float, wall_timeout: float):
    """Raise :class:`_Timeout` in this thread after ``timeout`` s of the process's CPU time (a computation
    that does not end; CPU time, so that a loaded machine does not fail a call) or ``wall_timeout`` s of
    wall time (a call that blocks without computing, e.g. on a FIFO); both re-fire every 0.5 s in case a
    finaliser swallows one. Returns what :func:`stop_budget` needs to restore the handlers."""
    old = signal.signal(signal.SIGALRM, _on_alarm), signal.signal(signal.SIGPROF, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, wall_timeout, 0.5)
    signal.setitimer(signal.ITIMER_PROF, timeout, 0.5)
    return old


def stop_budget(old) -> None:
    """Cancel the timers of :func:`start_budget` and restore the signal handlers it replaced."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.signal(signal.SIGALRM, old[0])
    signal.signal(signal.SIGPROF, old[1])


@functools.cache
def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="api-fuzz-")


def verdict(
    entry: Entry, name: str, value, *, timeout: float = 5.0, wall_timeout: float = 60.0, overflow: bool = False
) -> str:
    """``"ok"`` if the call honours the contract of the module docstring, else what went wrong
    (``"timeout"`` past ``timeout`` s of CPU time or ``wall_timeout`` s of wall time: :func:`start_budget`).

    With ``overflow`` the package's documented ``LossOverflowError`` (an ``OverflowError``: the state is outside
    the region where the loss is finite in float64) counts as a clear error too, when it names a parameter (as
    in tests/reduced_dynamics/dynamics/test_fuzz_api.py)."""
    from reduced_dynamics.dynamics.loss import LossOverflowError

    named = (ValueError, TypeError, LossOverflowError) if overflow else (ValueError, TypeError)
    old = start_budget(timeout, wall_timeout)
    try:
        # in a scratch working directory: a hostile path argument ("x") writes nothing into the checkout
        # an entry with path arguments already runs in make_suite's fresh folder (in_tmp)
        where = contextlib.nullcontext() if entry.paths else contextlib.chdir(_scratch())
        with warnings.catch_warnings(record=True) as caught, _memory_limit(), where:
            warnings.simplefilter("always")
            try:
                result = entry.call(name, value)
            except _Timeout:
                return "timeout"
            except named as exc:
                msg = str(exc)
                words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", msg.replace("`", " ")))
                words |= {w.split(".")[-1] for w in words} | {w.split(".")[0] for w in words}
                if not words & _names(entry):
                    return f"unnamed {type(exc).__name__}: {msg[:120]}"
                result = None
            except Exception as exc:
                return f"{type(exc).__name__}: {str(exc)[:120]}"
        noisy = [w for w in caught if issubclass(w.category, (RuntimeWarning, np.exceptions.ComplexWarning))]
        if noisy:
            return f"warning: {str(noisy[0].message)[:120]}"
        if result is not None and not _finite(result):
            return "non-finite result"
        return "ok"
    finally:
        stop_budget(old)


_verdict = verdict  # (make_suite binds its `overflow` under the name `verdict`)


#: The fixed hostile values every fuzzable argument of every entry meets (besides the random draws).
HOSTILE = [0.0, -1.0, 1e-320, 1e300, float("nan"), float("inf"), 1 + 1j, np.array([0.1 + 1j, -0.1])]
HOSTILE += [np.array([1e200, -1e200]), [[0.1, -0.1], [0.2, -0.2], [0.3, -0.3]], "x", None, 10**12]
HOSTILE += EXTREME_SETTINGS


class NotPrompts:
    """An object of no package type, with a tempting attribute (``X``): ``isinstance`` must refuse it."""

    X = np.zeros((2, 3, 2))

    def __repr__(self):
        return "NotPrompts()"


@functools.cache
def hostile_objects() -> tuple:
    """Hostile *objects* for the arguments that take a structured value (prompts, models, samples, settings):
    an unrelated object, a mapping, prompts of the wrong class, shape or values, and settings of the other
    data models. Opt-in (``make_suite(..., extra=hostile_objects())``), so that the suites written before
    keep their counts."""
    from reduced_dynamics.estimation.prompts import sample_prompts
    from reduced_dynamics.multitask.predictors import MultitaskPrompts

    x = np.zeros((2, 3, 4))
    return (
        NotPrompts(),
        {"X": x},
        sample_prompts(2, Setting(d=4, L=3, sigma2=0.1), seed=0),  # a single-task Prompts (the wrong class)
        MultitaskPrompts(X=x, Y=np.zeros((2, 3, 5)), xq=np.zeros((2, 4)), yq=np.zeros((2, 5))),  # wrong d and N
        MultitaskPrompts(X=np.full((2, 3, 4), np.nan), Y=np.zeros((2, 3, 1)), xq=np.zeros((2, 4)), yq=np.zeros((2, 1))),
        Setting(d=2, L=4, sigma2=0.1, tasks=((0,), (1,))),  # settings of the other data models (small: sympy)
        Setting(d=2, L=4, sigma2=0.1, Sigma=np.array([[2.0, 0.3], [0.3, 0.5]])),
        Setting(d=2, L=4, sigma2=0.1, activation="square", activation_c=0.5),
    )


def make_suite(entries, record=None, *, wall_timeout: float = 60.0, extra=(), overflow=False):
    """The two tests over ``entries``: random draws (:data:`VALUES`) and every value of :data:`HOSTILE`
    (and of :func:`hostile_paths` for an entry's ``paths``).

    With a list ``record`` the tests append ``(entry, argument, value, verdict)`` instead of asserting.
    ``wall_timeout``: the wall-time budget of one call (:func:`verdict`); ``extra``: hostile values every
    fuzzable argument meets besides :data:`HOSTILE` (e.g. :func:`hostile_objects`); ``overflow``: see
    :func:`verdict`.
    """
    hostile = [*HOSTILE, *extra]
    by_name = {e.name: e for e in entries}
    # `verdict` of this suite (with its `overflow`), under the name the hypothesis test below calls
    verdict = functools.partial(_verdict, overflow=overflow)

    def in_tmp(entry, fn):
        """Call ``fn(tmpdir)`` in a fresh temporary working folder if ``entry`` has path arguments."""
        if not entry.paths:
            return fn(None)
        import os
        import shutil
        import tempfile

        tmp, cwd = tempfile.mkdtemp(prefix="api-fuzz-"), os.getcwd()
        try:
            os.chdir(tmp)
            return fn(tmp)
        finally:
            os.chdir(cwd)
            shutil.rmtree(tmp, ignore_errors=True)

    @pytest.mark.parametrize("entry_name", [e.name for e in entries])
    def test_api_fuzz(entry_name):
        """Each hostile call returns finite numbers or raises a clear error naming a parameter."""
        entry = by_name[entry_name]

        @settings(max_examples=10, database=None, deadline=None, derandomize=True)
        @given(st.tuples(st.sampled_from(entry.fuzz), VALUES))
        def run(case):
            name, value = case
            out = in_tmp(entry, lambda _tmp: verdict(entry, name, value, wall_timeout=wall_timeout))
            if record is not None:
                record.append((entry_name, name, repr(value)[:60], out))
            else:
                assert out == "ok", f"{entry_name}({name}={value!r}): {out}"

        run()

    @pytest.mark.parametrize("entry_name", [e.name for e in entries])
    def test_api_hostile_values(entry_name):
        """Every fuzzable argument meets every value of HOSTILE: finite result or a clear, named error."""
        entry = by_name[entry_name]
        bad = []

        def one(name, value):
            out = verdict(entry, name, value, wall_timeout=wall_timeout)
            if record is not None:
                record.append((entry_name, name, repr(value)[:60], out))
            elif out != "ok":
                bad.append(f"{name}={value!r}: {out}")

        def all_values(tmp):
            import os

            for name in entry.fuzz:
                for value in hostile:
                    one(name, value)
            for name in entry.paths:  # each path argument meets every hostile path (fresh files each)
                for value in hostile_paths(os.path.join(tmp, f"hostile-{name}")):
                    one(name, value)

        in_tmp(entry, all_values)
        assert not bad, f"{entry_name}: " + "; ".join(bad)

    return test_api_fuzz, test_api_hostile_values


def count(entries, group=None, *, wall_timeout: float = 60.0, extra=(), overflow=False) -> int:
    """Run both tests over ``entries`` in recording mode and print the calls tried and misbehaving.

    With ``group`` (entry name -> group name, e.g. the subpackage) the two numbers are also printed per group.
    """
    record = []
    fuzz, hostile = make_suite(entries, record, wall_timeout=wall_timeout, extra=extra, overflow=overflow)
    for e in entries:
        fuzz(e.name)
        hostile(e.name)
    bad = [r for r in record if r[3] != "ok"]
    print(f"calls tried: {len(record)}, misbehaved: {len(bad)}")
    if group is not None:
        tried, failed = Counter(group(r[0]) for r in record), Counter(group(r[0]) for r in bad)
        for g in tried:
            print(f"  {g}: calls tried {tried[g]}, misbehaved {failed[g]}")
    print(Counter(r[0] for r in bad))
    for r in bad:
        print(" ", *(str(v).replace("\n", " ") for v in r))
    return 0
