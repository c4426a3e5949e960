"""One BLAS thread in the Monte Carlo hot paths (internal).

The engines evaluate many *small* linear-algebra problems at once (batched
``d × d`` ridge solves, batched Gram eigenvalues, ``(n, L, d)`` matmuls). A
multi-threaded BLAS splits each small call over all cores and spends its time
synchronising: ``reduced-dynamics risk --d 200 --prompts 2000`` took over 120 s
with the default thread pool on a busy machine and 6.9 s with one thread
(``benchmarks/bench_risk.py`` measures both settings side by side). So the hot
paths run inside :func:`single_blas_thread`; code outside them keeps the
user's BLAS settings.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

__all__ = ["single_blas_thread"]


def single_blas_thread():
    """Context manager limiting the BLAS thread pools to one thread (restored on exit; nests)."""
    return threadpool_limits(limits=1, user_api="blas")
