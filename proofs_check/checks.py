"""Registry of every check of the theory, run by ``reduced-dynamics check``.

Each entry of :data:`CHECKS` maps a stable name to a checker
``f(setting, *, quick=False) -> CheckResult``. A checker that cannot run at a
setting (for example a solver that does not converge) returns a failed
:class:`~proofs_check.result.CheckResult` whose ``error`` names the reason; it
never raises for that.
"""

from __future__ import annotations

import time

from reduced_dynamics.setting import as_setting

from .activations import check_activations
from .approximation import check_approx_vs_exact, check_approximation, check_predictor_limit, check_single_head
from .bayes import check_bayes_ratio
from .dynamics import check_drift_law, check_manifold, check_optimality_loss
from .exact import check_exact_dynamics
from .multitask import check_multitask
from .precond_predictors import check_precond_risk
from .precond_trained import check_precond_trained
from .preconditioned import check_preconditioned
from .result import CheckResult, reports_errors

__all__ = ["CHECKS", "check_optimality", "run_checks"]


@reports_errors("optimality")
def check_optimality(setting, *, quick=False) -> CheckResult:
    """(d) Theorem 1(b): min L̃ over S̄ → 1+σ²−η* as γ → 0⁺, and the predictor → debiased GD at η*.

    Combines :func:`proofs_check.dynamics.check_optimality_loss` and
    :func:`proofs_check.approximation.check_predictor_limit`; passes when both do.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic data model.
    quick : bool
        Fewer γ values, head splits and prompts.

    Returns
    -------
    CheckResult
        ``data`` holds the loss part's ``rows`` and ``gammas`` and the
        predictor part under ``predictor_limit``. A setting where the
        minimisation cannot run gives a failed result with ``error`` set.
    """
    loss = check_optimality_loss(setting, quick=quick)
    if loss.skipped is not None:
        return CheckResult.skip("optimality", loss.skipped, setting)
    if loss.error is not None:
        return CheckResult.could_not_run("optimality", loss.error, setting)
    pred = check_predictor_limit(setting, quick=quick)
    if pred.error is not None:
        return CheckResult.could_not_run("optimality", pred.error, setting)
    rms, gammas = pred.data["rms"], pred.data["gammas"]
    return CheckResult(
        name="optimality",
        passed=loss.passed and pred.passed,
        predicted=loss.predicted + "; " + pred.predicted,
        measured=(
            loss.measured + f"; RMS |ŷ(θ_γ) − ŷ_dgd(η*)| = {rms[-1]:.2e} (γ={gammas[-1]}) … {rms[0]:.2e} "
            f"(γ={gammas[0]}), order {pred.data['order']:.2f}"
        ),
        tolerance=loss.tolerance + "; " + pred.tolerance,
        explanation=loss.explanation + " Predictor gap on common prompts at μ = μ_γ(γ).",
        data={**loss.data, "predictor_limit": pred.data},
    )


def _bayes(setting, *, quick=False) -> CheckResult:
    # the limit check is over the whole (ξ, σ²) plane; the setting does not enter
    return check_bayes_ratio(quick=quick)


#: Check name -> checker, called as ``f(setting, quick=False)``. Ordered as the theory:
#: docs/theory.md#gradient-flow, docs/theory.md#predictors, docs/theory.md#theorem-1, docs/theory.md#extensions.
CHECKS = {
    "manifold": check_manifold,
    "drift_law": check_drift_law,
    "approximation": check_approximation,
    "optimality": check_optimality,
    "bayes_ratio": _bayes,
    "approx_vs_exact": check_approx_vs_exact,
    "single_head": check_single_head,
    "exact_dynamics": check_exact_dynamics,
    "multitask": check_multitask,
    "precond_risk": check_precond_risk,
    "preconditioned": check_preconditioned,
    "precond_trained": check_precond_trained,
    "activations": check_activations,
}


def _run_one(name, setting, quick):
    """Run the check ``name`` (one piece of a parallel :func:`run_checks`); a raised error becomes a failed result."""
    t0 = time.perf_counter()
    try:
        res = CHECKS[name](setting, quick=quick)
    except Exception as exc:
        res = CheckResult.could_not_run(name, exc, setting)
    return name, time.perf_counter() - t0, res


def run_checks(setting, *, quick=False, only=None, progress=None, workers=1) -> list[CheckResult]:
    """Run the registered checks (all, or the names in ``only``) and return their results.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic data model (``Setting.paper()`` reproduces the paper).
    quick : bool
        Smaller grids and shorter runs (under a minute for all).
    only : str or non-empty list of str, optional
        Subset of :data:`CHECKS` names, run in the given order (default: all).
    progress : callable, optional
        Called as ``progress(name, seconds, result)`` after each check (in the
        order they finish).
    workers : int >= 1
        Run the checks on this many local processes
        (:class:`reduced_dynamics.sweep.LocalExecutor`, one BLAS thread each; a
        serial run uses one BLAS thread too); every check has its own seeds, so
        the results do not depend on it.

    Returns
    -------
    list of CheckResult
        One per check. A check that raises is reported as a failed result
        with ``error`` set (:meth:`CheckResult.could_not_run`); the other
        checks still run. A check whose statement does not apply at
        ``setting`` (outside the theory's range, e.g. ``L = 1``, ``d = 1`` or
        ``σ² = 0``; :data:`proofs_check.result.THEORY_RANGE`) is reported
        with status ``"SKIPPED"`` and the reason (:meth:`CheckResult.skip`).

    Raises
    ------
    ValueError
        If ``setting`` is not a scalar isotropic :class:`Setting` or ``only``
        is empty or names an unknown check, or ``workers`` is not an integer in [1, 512].
    """
    setting = as_setting(setting, "run_checks").require_isotropic("run_checks")
    if only is None:
        names = list(CHECKS)
    else:
        if isinstance(only, str):
            only = [only]
        if not isinstance(only, (list, tuple)) or not only:
            raise ValueError(f"`only` must be a non-empty list of check names among {list(CHECKS)}, got {only!r}")
        names = list(only)
    unknown = [n for n in names if not isinstance(n, str) or n not in CHECKS]
    if unknown:
        raise ValueError(f"`only` must name checks among {list(CHECKS)}, got {unknown}")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 512:
        raise ValueError(f"`workers` must be an integer in [1, 512], got {workers!r}")
    if workers == 1 or len(names) == 1:
        from threadpoolctl import threadpool_limits

        out = []
        with threadpool_limits(1):  # as each parallel worker: the results do not depend on `workers`
            for name in names:
                _, seconds, res = _run_one(name, setting, quick)
                if progress is not None:
                    progress(name, seconds, res)
                out.append(res)
        return out
    from reduced_dynamics.sweep.executors import LocalExecutor

    with LocalExecutor(min(workers, len(names))) as ex:
        futures = [ex.submit(_run_one, name, setting, bool(quick)) for name in names]
        for fut in ex.as_completed(futures):
            name, seconds, res = fut.result()
            if progress is not None:
                progress(name, seconds, res)
        return [fut.result()[2] for fut in futures]
