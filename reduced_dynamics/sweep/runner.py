"""Run a sweep: validate every point, skip the finished ones, run the rest on an executor, store each result.

:func:`run_sweep` is the Python function behind ``reduced-dynamics sweep``.
Every point is validated before any runs (:func:`plan_sweep`); a point whose
intact record is in the store is skipped; the others are submitted to the
executor, and each result is written to the store by this process as soon as it
arrives, so a sweep killed at any moment loses only the points in flight and
the next run of the same spec resumes it. A point that fails (its command exits
3, prints no result or raises) is recorded with its error and the sweep goes on;
a point whose command refuses its input when it runs (exit 2: bad input the dry
run could not see) is not stored, and once the other points ran the sweep raises
``ValueError`` naming it (the command line exits 2); a worker process that dies
is replaced and its points rerun (at most :data:`MAX_ATTEMPTS` times each).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable

from reduced_dynamics._results import FrozenResult

__all__ = ["SweepPlan", "SweepStatus", "SweepRun", "plan_sweep", "run_sweep", "ProgressBar", "MAX_ATTEMPTS"]

#: times a point is started before a worker dying under it counts as its failure
MAX_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class SweepPlan(FrozenResult):
    """A validated sweep: the spec and one :class:`~reduced_dynamics.sweep.commands.Invocation` per distinct point.

    Attributes
    ----------
    spec : SweepSpec
        The specification.
    invocations : tuple of Invocation
        In grid order; points with equal configurations appear once.
    n_duplicates : int
        Grid points dropped because another point has the same configuration.
    """

    spec: object
    invocations: tuple
    n_duplicates: int


def plan_sweep(spec, *, quick: bool = False, progress: Callable[[int, int], None] | None = None) -> SweepPlan:
    """Validate a sweep before any work: the spec's structure, then every point as its command would.

    Parameters
    ----------
    spec : str, Path, mapping or SweepSpec
        The specification (:func:`~reduced_dynamics.sweep.spec.load_spec`).
    quick : bool
        Use the spec's ``[quick]`` sizes.
    progress : callable, optional
        Called as ``progress(validated, total)`` after each point (the command's checks run once per
        distinct combination of what they read, ``commands.PointValidator``;
        a point whose checks cannot be reused takes about a millisecond).

    Returns
    -------
    SweepPlan

    Raises
    ------
    ValueError
        The first problem: a bad spec, or the command's own error for the first bad
        point, prefixed with the point's varying parameters.
    """
    from reduced_dynamics._validation import check_bool
    from reduced_dynamics.sweep.commands import PointValidator
    from reduced_dynamics.sweep.spec import SweepSpec, load_spec

    quick = check_bool("quick", quick)
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec, quick=quick)
    if progress is not None and not callable(progress):
        raise TypeError(f"`progress` must be callable or None, got {type(progress).__name__}")
    invs, seen = [], set()
    axis_names = spec.axis_names
    total = spec.n_points
    try:
        validator = PointValidator(spec.command, spec.fixed)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    for i, params in enumerate(spec.iter_points(), start=1):
        try:
            inv = validator.validate(params)
        except ValueError as exc:
            where = ", ".join(f"{k}={params[k]!r}" for k in axis_names if k in params)
            raise ValueError(f"point ({where}): {exc}" if where else str(exc)) from None
        if inv.key not in seen:
            seen.add(inv.key)
            invs.append(inv)
        if progress is not None:
            progress(i, total)
    return SweepPlan(spec, tuple(invs), spec.n_points - len(invs))


@dataclasses.dataclass(frozen=True)
class SweepStatus(FrozenResult):
    """Where a running sweep is (passed to the ``progress`` callback after each point).

    Attributes
    ----------
    total : int
        Points in the sweep.
    cached : int
        Points found finished in the store at the start.
    done : int
        Points finished (cached included).
    failed : int
        Points recorded as failed (cached failures included).
    running : int
        Points submitted and not yet finished.
    elapsed : float
        Seconds since the sweep started running points.
    eta : float or None
        Estimated seconds to finish (None before the first point of this run finishes).
    record : dict or None
        The record just written (None for the first, initial status).
    """

    total: int
    cached: int
    done: int
    failed: int
    running: int
    elapsed: float
    eta: float | None
    record: dict | None

    @property
    def remaining(self) -> int:
        """Points neither done nor failed."""
        return self.total - self.done - self.failed


@dataclasses.dataclass(frozen=True)
class SweepRun(FrozenResult):
    """What one run of a sweep did.

    Attributes
    ----------
    name : str
        The sweep's name.
    command : str
        The command of its points.
    out : str
        The sweep folder (the store).
    n_points : int
        Distinct points.
    n_done : int
        Points with a result (cached included).
    n_failed : int
        Points recorded as failed.
    n_cached : int
        Points found in the store (not rerun).
    n_corrupt : int
        Records found truncated or corrupted (recomputed).
    seconds : float
        Wall time of this run.
    executor : str
        The executor used (``serial``, ``local:N``, ``dask:...``).
    keys : tuple of str
        Every point's key, in grid order.
    failures : tuple of dict
        ``{"key", "params", "error"}`` of each failed point.
    """

    name: str
    command: str
    out: str
    n_points: int
    n_done: int
    n_failed: int
    n_cached: int
    n_corrupt: int
    seconds: float
    executor: str
    keys: tuple
    failures: tuple


def _fmt_seconds(s) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class ProgressBar:
    """The sweep's progress on stderr: ``[####------] 12/40 done (5 cached), 1 failed, 27 remaining, 2 running, ETA 1m20s``.

    On a terminal one line is redrawn in place; otherwise a line is written at most
    every ``every`` seconds and at the end. ``quiet=True`` writes nothing.
    """

    def __init__(self, *, quiet: bool = False, every: float = 2.0, stream=None, width: int = 24):
        from reduced_dynamics._validation import check_bool, check_nonnegative_float, check_positive_int

        self.quiet = check_bool("quiet", quiet)
        self.every, self.width = check_nonnegative_float("every", every), check_positive_int("width", width, hi=1000)
        if stream is not None and not callable(getattr(stream, "write", None)):
            raise TypeError(f"`stream` must be a text stream (with .write) or None, got {type(stream).__name__}")
        self.stream = stream if stream is not None else sys.stderr
        self._last = -1e300
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._status = None

    def line(self, st: SweepStatus) -> str:
        """The progress line of ``st``."""
        frac = (st.done + st.failed) / st.total if st.total else 1.0
        bar = "#" * int(round(frac * self.width))
        return (
            f"reduced-dynamics sweep: [{bar:-<{self.width}}] {st.done}/{st.total} done ({st.cached} cached), "
            f"{st.failed} failed, {st.remaining} remaining, {st.running} running, "
            f"elapsed {_fmt_seconds(st.elapsed)}, ETA {_fmt_seconds(st.eta)}"
        )

    def __call__(self, st: SweepStatus) -> None:
        self._status = st
        if self.quiet:
            return
        now = time.perf_counter()
        if self._tty:
            self.stream.write("\r" + self.line(st) + "\033[K")
            self.stream.flush()
        elif now - self._last >= self.every:
            self._last = now
            self.stream.write(self.line(st) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        """Write the final line (once)."""
        if self.quiet or self._status is None:
            return
        end = "\n"
        self.stream.write(("\r" if self._tty else "") + self.line(self._status) + ("\033[K" if self._tty else "") + end)
        self.stream.flush()


def _same_source(source) -> object:
    """The spec as its manifest stores it (TOML dates and times as strings)."""
    import json

    return json.loads(json.dumps(source, default=str))


def _check_same_sweep(store, spec, out, *, force: bool) -> None:
    """Refuse a sweep whose name is taken in ``out`` by a different sweep (another spec or command).

    Two specs of one ``name`` replaced each other's manifest silently; rerunning the same spec (to resume it)
    is the same sweep.
    """
    old = store.manifest(spec.name)
    if old is None or force:
        return
    same = (
        old.get("command") == spec.command
        and old.get("quick") == spec.quick
        and old.get("spec") == _same_source(spec.source)
    )
    if not same:
        raise ValueError(
            f"`name` {spec.name!r} is taken in `--out` {str(out)!r} by another sweep (a different spec); give this "
            "spec another `name`, use another `--out`, or `--force` to replace that sweep's manifest (its points "
            "stay in the store)"
        )


def _failed_outcome(error: str) -> dict:
    return {"exit_code": None, "result": None, "error": error, "seconds": None, "cpu_seconds": None, "worker": None}


def run_sweep(
    spec,
    *,
    out,
    quick: bool = False,
    workers=None,
    scheduler=None,
    executor=None,
    retry_failed: bool = False,
    progress: Callable[[SweepStatus], None] | None = None,
    force: bool = False,
) -> SweepRun:
    """Run every unfinished point of a sweep and store its result.

    Parameters
    ----------
    spec : str, Path, mapping, SweepSpec or SweepPlan
        The specification (validated first: :func:`plan_sweep`).
    out : str or Path
        The sweep folder holding the store (created).
    quick : bool
        Use the spec's ``[quick]`` sizes.
    workers : int, optional
        Local worker processes (default: all cores; 1: in this process).
    scheduler : str, optional
        ``"local"`` (dask LocalCluster) or a dask scheduler address; needs the ``sweep`` extra.
    executor : Executor, optional
        An executor to use instead (not closed here); overrides ``workers`` and ``scheduler``.
    retry_failed : bool
        Rerun points recorded as failed (default: a failure is a finished point).
    progress : callable, optional
        Called with a :class:`SweepStatus` at the start and after each point (e.g. a :class:`ProgressBar`).
    force : bool
        Replace the manifest of a different sweep of the same ``name`` in ``out`` (its points stay in the
        store); without it such a sweep is refused before any work.

    Returns
    -------
    SweepRun

    Raises
    ------
    ValueError
        A bad spec or point (before any work), an unusable ``out``, ``workers`` or ``scheduler``, or
        ``out`` holding another sweep of the same name (without ``force``).
    """
    from reduced_dynamics._validation import check_bool, check_path
    from reduced_dynamics.cli._common import prepare_out
    from reduced_dynamics.sweep.executors import LocalExecutor, _check_workers, check_scheduler, make_executor
    from reduced_dynamics.sweep.store import Store

    n_workers = _check_workers(workers)  # before any work: a bad `workers` or `scheduler` is an input error
    check_scheduler(scheduler)
    quick, retry_failed, force = (
        check_bool(k, v) for k, v in (("quick", quick), ("retry_failed", retry_failed), ("force", force))
    )
    check_path("out", out, kind="out")
    if isinstance(executor, type):  # the class: its methods are callable, but unbound
        raise TypeError(
            f"`executor` must be an Executor instance (e.g. LocalExecutor(2)), got the class {executor.__name__}"
        )
    if executor is not None and not all(callable(getattr(executor, a, None)) for a in ("submit", "as_completed")):
        raise TypeError(
            f"`executor` must be an Executor (reduced_dynamics.sweep.LocalExecutor, DaskExecutor, ...), "
            f"got {type(executor).__name__}"
        )
    if executor is not None and getattr(executor, "closed", False) is True:
        raise ValueError(f"`executor` {getattr(executor, 'name', type(executor).__name__)} is closed: pass an open one")
    if progress is not None and not callable(progress):
        raise TypeError(f"`progress` must be callable or None, got {type(progress).__name__}")
    plan = spec if isinstance(spec, SweepPlan) else plan_sweep(spec, quick=quick)
    spec = plan.spec
    out = prepare_out(out, flag="out")
    store = Store(out)
    _check_same_sweep(store, spec, out, force=bool(force))
    store.clean_stale()
    t0 = time.perf_counter()
    keys = tuple(inv.key for inv in plan.invocations)
    manifest = {
        "name": spec.name,
        "command": spec.command,
        "quick": spec.quick,
        "axes": spec.axis_names,
        "spec": spec.source,
        "keys": list(keys),
        "version": plan.invocations[0].version if plan.invocations else None,
    }
    store.write_manifest(spec.name, manifest)
    done = failed = 0
    n_corrupt = 0
    todo = []
    failures = []
    for inv in plan.invocations:
        rec = store.get(inv.key)
        if rec is None:
            n_corrupt += store.is_corrupt(inv.key)
            todo.append(inv)
        elif rec["status"] == "failed" and retry_failed:
            todo.append(inv)
        elif rec["status"] == "done":
            done += 1
        else:
            failed += 1
            failures.append({"key": inv.key, "params": inv.params, "error": rec["error"]})
    cached = done + failed
    total = len(plan.invocations)
    own = executor is None
    if own and todo:
        if scheduler is None or scheduler == "local":  # no more local processes than points to run
            workers = min(n_workers, len(todo))
        executor = make_executor(workers=workers, scheduler=scheduler)
    name = str(getattr(executor, "name", type(executor).__name__)) if executor is not None else "none"
    t_run = time.perf_counter()
    finished_here = 0

    def status(running, record):
        elapsed = time.perf_counter() - t_run
        remaining = total - done - failed
        eta = elapsed / finished_here * remaining if finished_here else None
        return SweepStatus(total, cached, done, failed, running, elapsed, eta, record)

    if progress is not None:
        progress(status(0, None))
    attempts = dict.fromkeys((inv.key for inv in todo), 0)
    refused: list = []
    try:
        from reduced_dynamics.sweep.commands import run_point

        queue = list(todo)
        while queue:
            pending = {}
            for inv in queue:
                attempts[inv.key] += 1
                pending[executor.submit(run_point, list(inv.argv))] = inv
            queue = []
            lost = []
            for fut in executor.as_completed(list(pending)):
                inv = pending[fut]
                try:
                    outcome = fut.result()
                except Exception as exc:  # the worker died (process pool) or dask gave up on the task
                    broken = exc.__class__.__name__ in ("BrokenProcessPool", "CancelledError")
                    if broken and attempts[inv.key] < MAX_ATTEMPTS:
                        lost.append(inv)
                        continue
                    outcome = _failed_outcome(f"worker lost: {exc.__class__.__name__}: {exc}".strip())
                if outcome.get("exit_code") == 2:  # bad input found only at run time: not a result, not stored
                    refused.append((inv, outcome.get("error") or "exit status 2"))
                    continue
                record = store.put(inv, outcome)
                finished_here += 1
                if record["status"] == "done":
                    done += 1
                else:
                    failed += 1
                    failures.append({"key": inv.key, "params": inv.params, "error": record["error"]})
                if progress is not None:
                    running = min(getattr(executor, "workers", 1), total - done - failed - len(lost))
                    progress(status(max(running, 0), record))
            if lost:
                if isinstance(executor, LocalExecutor):
                    executor.restart()
                queue = lost
    except BaseException:  # Ctrl-C or an error here: stop the workers now, keep what is stored
        if own and executor is not None:
            executor.terminate()
            executor = None
        raise
    finally:
        if own and executor is not None:
            executor.close()
    seconds = time.perf_counter() - t0
    store.write_manifest(
        spec.name,
        {
            **manifest,
            "last_run": {"done": done, "failed": failed, "cached": cached, "seconds": seconds, "executor": name},
        },
    )
    if refused:  # a point whose command refused its input: the spec is bad input (exit 2), nothing cached for it
        inv, error = refused[0]
        where = ", ".join(f"{k}={inv.params[k]!r}" for k in spec.axis_names if k in inv.params)
        more = f" ({len(refused)} points refused their input when run; not stored, the other points ran)"
        raise ValueError((f"point ({where}): " if where else "") + error.removeprefix("reduced-dynamics ") + more)
    return SweepRun(
        spec.name, spec.command, str(out), total, done, failed, cached, n_corrupt, seconds, name, keys, tuple(failures)
    )
