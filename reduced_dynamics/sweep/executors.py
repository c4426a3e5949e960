"""One executor interface over the engines that run a sweep's points: serial, a local process pool, dask.distributed.

An executor has ``submit(fn, *args) -> future``, ``as_completed(futures)`` (an
iterator over the futures as they finish), ``workers`` (how many points run at
once) and ``close()``; it is a context manager. Futures have ``result()``. A
new engine is one more subclass of :class:`Executor`.

- :class:`SerialExecutor`: in this process, one point at a time (``--workers 1``).
- :class:`LocalExecutor`: a process pool (``--workers N``, the default: all cores).
  Each worker limits BLAS/OpenMP to one thread (threadpoolctl), so N workers use N
  cores, and dies with the process that started it (a killed sweep leaves no orphans).
- :class:`DaskExecutor`: dask.distributed (optional extra ``sweep``):
  ``scheduler="local"`` starts a LocalCluster (one single-threaded worker process per core),
  ``scheduler="tcp://host:port"`` connects to a running scheduler. A worker lost mid-task
  has its tasks rerun by dask on another worker.

Functions given to ``submit`` must be importable module-level functions; what
they compute must not depend on which worker runs them (every point carries its
own seed).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import threading

__all__ = [
    "Executor",
    "SerialExecutor",
    "LocalExecutor",
    "DaskExecutor",
    "make_executor",
    "default_workers",
    "WORKERS_MAX",
]

#: largest --workers accepted (a typo guard; a cluster gives more through --scheduler)
WORKERS_MAX = 512


def default_workers() -> int:
    """The cores this process may use (``os.sched_getaffinity``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Executor:
    """Base of the executors: ``submit``, ``as_completed``, ``close``; a context manager."""

    #: points that run at once
    workers: int = 1
    #: short description (``"local:2"``, ``"dask:tcp://..."``)
    name: str = "executor"
    #: True once :meth:`close` or :meth:`terminate` released workers that cannot take new tasks
    closed: bool = False

    def submit(self, fn, /, *args):  # pragma: no cover - interface
        """Schedule ``fn(*args)``; return a future with ``result()``."""
        raise NotImplementedError

    def as_completed(self, futures):
        """Iterate over ``futures`` as they finish."""
        return cf.as_completed(futures)

    def close(self) -> None:
        """Release the workers (waiting for the tasks running on them)."""

    def terminate(self) -> None:
        """Release the workers without waiting (Ctrl-C); by default the same as :meth:`close`."""
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Lazy:
    """A future of :class:`SerialExecutor`: runs when its result is first asked for."""

    def __init__(self, fn, args):
        self._fn, self._args, self._done, self._value, self._exc = fn, args, False, None, None

    def _run(self):
        if not self._done:
            try:
                self._value = self._fn(*self._args)
            except Exception as exc:
                self._exc = exc
            self._done = True

    def done(self):
        return self._done

    def result(self, timeout=None):
        self._run()
        if self._exc is not None:
            raise self._exc
        return self._value

    def exception(self, timeout=None):
        self._run()
        return self._exc

    def cancel(self):
        return False


class SerialExecutor(Executor):
    """Run every task in this process, one at a time, in the order asked for (one BLAS thread while running)."""

    def __init__(self):
        self.workers, self.name = 1, "serial"

    def submit(self, fn, /, *args):
        return _Lazy(fn, args)

    def as_completed(self, futures):
        from threadpoolctl import threadpool_limits

        for fut in list(futures):
            with threadpool_limits(1):
                fut._run()
            yield fut


def _watch_parent(parent: int) -> None:
    """Exit this worker as soon as the process that started it is gone (SIGKILL included)."""
    try:  # Linux: the kernel sends SIGKILL to us when the parent dies
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - elsewhere: poll
        pass
    if os.getppid() != parent:  # already gone before prctl took effect
        os._exit(1)

    def poll():
        import time

        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=poll, daemon=True).start()


def _init_worker(parent: int) -> None:
    from reduced_dynamics.sweep.commands import limit_threads

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the sweep process, which stops the pool
    _watch_parent(parent)
    limit_threads()


class LocalExecutor(Executor):
    """A pool of ``workers`` processes on this machine (fork where available), one BLAS thread each.

    Parameters
    ----------
    workers : int, optional
        Number of processes (default: the cores this process may use).
    """

    def __init__(self, workers=None):
        import multiprocessing as mp

        self.workers = _check_workers(workers)
        self.name = f"local:{self.workers}"
        method = "fork" if "fork" in mp.get_all_start_methods() else None
        self._ctx = mp.get_context(method)
        self._pool = self._new_pool()

    def _new_pool(self):
        return cf.ProcessPoolExecutor(
            max_workers=self.workers, mp_context=self._ctx, initializer=_init_worker, initargs=(os.getpid(),)
        )

    def submit(self, fn, /, *args):
        return self._pool.submit(fn, *args)

    def restart(self) -> None:
        """Replace a broken pool (a worker died) by a fresh one."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._new_pool()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.closed = True

    def terminate(self) -> None:
        """Stop now: kill the worker processes (their points are lost, as in a killed sweep) and drop the pool."""
        for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
            with contextlib.suppress(OSError):
                proc.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.closed = True


def _check_workers(workers) -> int:
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= WORKERS_MAX:
        raise ValueError(f"`workers` must be an integer in [1, {WORKERS_MAX}], got {workers!r}")
    return workers


def _dask_task(fn, *args):
    """Run ``fn(*args)`` on a dask worker with one BLAS thread."""
    from reduced_dynamics.sweep.commands import limit_threads

    limit_threads()
    return fn(*args)


class DaskExecutor(Executor):
    """dask.distributed: a LocalCluster (``scheduler="local"``) or a running scheduler (``"tcp://host:port"``).

    Parameters
    ----------
    scheduler : str
        ``"local"`` or a scheduler address.
    workers : int, optional
        Worker processes of the LocalCluster (default: the cores); ignored for an address.

    Raises
    ------
    ValueError
        Naming ``scheduler`` when dask.distributed is not installed (``pip install 'reduced-dynamics[sweep]'``)
        or the scheduler cannot be reached.
    """

    def __init__(self, scheduler="local", workers=None):
        try:
            import logging

            from distributed import Client, LocalCluster
        except ImportError:
            raise ValueError(
                "`scheduler` needs dask.distributed, which is not installed: pip install 'reduced-dynamics[sweep]'"
            ) from None
        self.cluster = None
        if scheduler == "local":
            n = _check_workers(workers)
            self.cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                scheduler_port=0,
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
            self.name = f"dask:local:{n}"
        else:
            check_scheduler(scheduler)
            try:
                self.client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError, ValueError) as exc:
                why = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ValueError(f"`scheduler` {scheduler!r} cannot be reached: {why}") from None
            self.name = f"dask:{scheduler}"
        self.workers = max(1, sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()))

    def submit(self, fn, /, *args):
        return self.client.submit(_dask_task, fn, *args, pure=False)

    def as_completed(self, futures):
        from distributed import as_completed

        return as_completed(list(futures))

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.closed = True


#: the address schemes of dask.distributed's communication layer
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "inproc", "ucx")


def check_scheduler(scheduler) -> str | None:
    """Return ``scheduler`` if it is None, ``"local"`` or a dask address ``scheme://host[:port]``, else raise.

    Checked before any work (a sweep validates its points first, which can take minutes): an ``http://``
    address was dask's own one-line error naming no option, after the validation.

    Raises
    ------
    ValueError
        Naming ``scheduler`` and the schemes.
    """
    if scheduler is None or (isinstance(scheduler, str) and scheduler == "local"):
        return scheduler
    scheme, sep, rest = scheduler.partition("://") if isinstance(scheduler, str) else ("", "", "")
    if not sep or scheme not in SCHEDULER_SCHEMES or not rest.strip() or any(c.isspace() for c in scheduler):
        raise ValueError(
            f"`scheduler` must be 'local' or a dask address scheme://host:port with scheme one of "
            f"{', '.join(SCHEDULER_SCHEMES)} (e.g. tcp://host:8786), got {scheduler!r}"
        )
    return scheduler


def make_executor(*, workers=None, scheduler=None) -> Executor:
    """The executor for ``--workers N`` / ``--scheduler ADDRESS|local``.

    Parameters
    ----------
    workers : int, optional
        Local processes (default: all cores); 1 runs in this process.
    scheduler : str, optional
        ``"local"`` (a dask LocalCluster with ``workers`` workers) or a dask scheduler address.

    Returns
    -------
    Executor
    """
    n = _check_workers(workers)  # before a cluster is started
    if check_scheduler(scheduler) is not None:
        return DaskExecutor(scheduler, workers)
    return SerialExecutor() if n == 1 else LocalExecutor(n)
