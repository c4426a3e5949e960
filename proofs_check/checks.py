"""Registry of every check of the theory, run by ``reduced-dynamics check``.

Each entry maps a stable name to a function ``f(*, quick, d, L, sigma2) -> CheckResult``.
"""

from __future__ import annotations

import time

from .approximation import check_approx_vs_exact, check_approximation, check_predictor_limit, check_single_head
from .bayes import check_bayes_ratio
from .dynamics import check_drift_law, check_manifold, check_optimality_loss
from .result import CheckResult

__all__ = ["CHECKS", "check_optimality", "run_checks"]


def check_optimality(*, quick=False, d=5, L=40, sigma2=0.1) -> CheckResult:
    """(d) Theorem 1(b): min L̃ over S̄ → 1+σ²−η* as γ → 0⁺, and the predictor → debiased GD at η*."""
    loss = check_optimality_loss(quick=quick, d=d, L=L, sigma2=sigma2)
    pred = check_predictor_limit(quick=quick, d=d, L=L, sigma2=sigma2)
    rms = pred["rms"]
    return CheckResult(
        name="optimality",
        passed=bool(loss.passed and pred["passed"]),
        predicted=loss.predicted + "; ŷ(θ_γ) → ŷ_dgd(η*) as γ → 0",
        measured=(
            loss.measured + f"; RMS |ŷ(θ_γ) − ŷ_dgd(η*)| = {rms[-1]:.2e} (γ={pred['gammas'][-1]}) … {rms[0]:.2e} "
            f"(γ={pred['gammas'][0]}), order {pred['order']:.2f}"
        ),
        tolerance=loss.tolerance + "; RMS decreasing with order > 1.5",
        explanation=loss.explanation + " Predictor gap on common prompts at μ = μ_γ(γ).",
        data={**loss.data, "predictor_limit": pred},
    )


def _bayes(*, quick=False, d=5, L=40, sigma2=0.1) -> CheckResult:
    # the limit check is over the whole (ξ, σ²) plane; the problem constants do not enter
    return check_bayes_ratio(quick=quick, seed=0)


#: name -> checker, in the order of docs/theory.md#gradient-flow, docs/theory.md#predictors, docs/theory.md#theorem-1
CHECKS = {
    "manifold": check_manifold,
    "drift_law": check_drift_law,
    "approximation": check_approximation,
    "optimality": check_optimality,
    "bayes_ratio": _bayes,
    "approx_vs_exact": check_approx_vs_exact,
    "single_head": check_single_head,
}


def run_checks(*, quick=False, d=5, L=40, sigma2=0.1, only=None, progress=None) -> list[CheckResult]:
    """Run the registered checks (all, or the names in ``only``) and return their results.

    Parameters
    ----------
    quick : bool
        Smaller grids and shorter runs (under a minute for all).
    d, L, sigma2 : problem constants (default: the paper's setting).
    only : sequence of str, optional
        Subset of :data:`CHECKS` names.
    progress : callable, optional
        Called as ``progress(name, seconds, result)`` after each check.
    """
    from reduced_dynamics._validation import check_problem

    d, L, sigma2 = check_problem(d, L, sigma2)
    names = list(CHECKS) if not only else list(only)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"`only` must name checks among {list(CHECKS)}, got {unknown}")
    out = []
    for name in names:
        t0 = time.perf_counter()
        res = CHECKS[name](quick=quick, d=d, L=L, sigma2=sigma2)
        if progress is not None:
            progress(name, time.perf_counter() - t0, res)
        out.append(res)
    return out
