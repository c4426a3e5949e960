"""One BLAS thread in the Monte Carlo hot paths (internal).

The engines evaluate many *small* linear-algebra problems at once (batched
``d × d`` or ``L × L`` ridge solves and Gram products, ``(n, L, d)`` matmuls). A
multi-threaded BLAS splits each small call over all cores and spends its time
synchronising: the batched ridge kernel at d = 200 (Gram matrices and solves of
500 prompts) took 23.6 s with the default two-thread OpenBLAS pool and 0.84 s
with one thread on this 2-core machine (28×, ``benchmarks/bench_risk.py``). So
the hot paths (:func:`reduced_dynamics.estimate_risks`, the ridge predictor's
Gram products and solves) run inside :func:`single_blas_thread`; code outside
them keeps the user's BLAS settings. With the limit,
``reduced-dynamics risk --d 200 --prompts 2000`` takes the same time with the
default pool as with ``OPENBLAS_NUM_THREADS=1`` (ratio 1.06, medians of 3).

Using both cores: the Monte Carlo engine is single-threaded by design; run
independent seeds in separate processes and combine them. For example::

    from concurrent.futures import ProcessPoolExecutor

    def run(seed):
        return estimate_risks(preds, setting, n_prompts=n // 2, seed=seed)

    with ProcessPoolExecutor(2) as ex:
        a, b = ex.map(run, [0, 1])
    risk = (a["gd"].risk * a.n + b["gd"].risk * b.n) / (a.n + b.n)

(the standard error combines as ``sqrt(se_a² n_a² + se_b² n_b²) / (n_a + n_b)``);
the sweep executor (``reduced-dynamics sweep``) runs whole configurations in
parallel processes the same way.
"""

from __future__ import annotations

import sys
import threading

from threadpoolctl import ThreadpoolController

__all__ = ["single_blas_thread"]

_state = threading.local()
_lock = threading.Lock()
#: (len(sys.modules) when made, controller): the scan of the loaded libraries, reused until a module is imported
_controller: list = [-1, None]


def _blas_controller() -> ThreadpoolController:
    """A ``ThreadpoolController`` of the loaded libraries, rescanned only after an import.

    Scanning the process's libraries (``/proc/self/maps`` and each library's API) costs about
    0.24 ms, 30 times the limit itself; a BLAS library is loaded by importing the module that
    links it, so a scan stays valid while ``sys.modules`` does not grow.
    """
    with _lock:
        n = len(sys.modules)
        if _controller[0] != n:
            _controller[1] = ThreadpoolController()
            _controller[0] = n
        return _controller[1]


class _SingleBlasThread:
    """Limits the BLAS pools to one thread at the outermost level only; nested uses cost nothing.

    ``threadpool_limits`` inspects every loaded library (about 0.24 ms; :func:`_blas_controller` keeps that scan), so
    entering it in every small ridge solve of a chunked loop would dominate; inside
    an outer limit (e.g. :func:`reduced_dynamics.estimate_risks`) the inner ones
    only count the depth. The depth is per thread.
    """

    __slots__ = ("_limits",)

    def __init__(self):
        self._limits = None

    def __enter__(self):
        depth = getattr(_state, "depth", 0)
        if depth == 0:
            self._limits = _blas_controller().limit(limits=1, user_api="blas")  # applied now, restored on exit
        _state.depth = depth + 1
        return self

    def __exit__(self, *exc):
        _state.depth -= 1
        if self._limits is not None:
            self._limits.restore_original_limits()
            self._limits = None
        return False


def single_blas_thread() -> _SingleBlasThread:
    """Context manager limiting the BLAS thread pools to one thread (restored on exit; nests cheaply)."""
    return _SingleBlasThread()
