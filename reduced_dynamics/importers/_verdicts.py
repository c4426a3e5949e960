r"""The pass/fail verdicts of an analysis and the thresholds they use (:data:`THRESHOLDS`).

Every verdict compares one documented number with one threshold and keeps both, with the rule in
words, so a report says what was measured against what. The defaults and why:

=====================  ========  ===================================================================
key                    default   number compared (docs/theory.md#emergent-patterns)
=====================  ========  ===================================================================
``kq_offdiag``         0.05      max over live heads of ``‖B − diag B‖²_F / ‖B‖²_F``, ``B = KQ_h[:d, :d]``
``kq_response_row``    0.05      max over live heads of ``‖KQ_h[d, :d]‖² / ‖KQ_h[:, :d]‖²_F``
``kq_diag_cv``         0.10      max over live heads of ``std(diag B) / |mean diag B|``
``omega_cv``           0.10      ``std_h |ω_h| / mean_h |ω_h|`` over live heads
``ov_offresponse``     0.05      max over live heads of ``‖ov_h[:d]‖² / ‖ov_h‖²``
``sign_match``         1.0       fraction of live heads with ``sign ω_h = sign μ_h`` (must reach it)
``zero_sum``           0.05      ``|Σ_h μ_h| / Σ_h |μ_h|`` over live heads (per task, max over tasks)
``manifold``           0.10      ``max(|μ₊ − μ_γ|, |−μ₋ − μ_γ|) / μ_γ`` (the solution manifold ``S_γ``)
``eta``                0.05      ``|η_eff − η*| / η*`` (under Σ: the step of ``P_eff`` on the scale
                                 ``tr(PΣ) = d`` against the optimal one)
``single_head``        0.10      ``H = 1``: ``max(|ω − ω*|/ω*, |μ − μ*|/μ*)`` in absolute values
                                 against the single-head optimum of L̃
``rank1``              0.10      Σ: ``‖B − ω ⊗ W‖_F / ‖B‖_F`` (one shared direction ``W``)
``precond``            0.10      Σ: scale-free distance of ``P_eff = Σ_h μ_h B_h`` to the exact
                                 optimal preconditioner ``P*`` (docs/theory.md#non-isotropic-covariates)
``mt_kq_offdiag``      0.10      tasks: largest ``|KQ|`` entry off the diagonal of the x-block over
                                 the largest ``|ω|``
``mt_ov_off``          0.10      tasks: largest ``|OV|`` entry other than the ``μ`` over the largest ``|μ|``
``mt_limit``           0.10      tasks: ``max |A − A*| / max |A*|``, ``A = MᵀΩ`` against the limit
                                 predictor's weights
=====================  ========  ===================================================================

A *live* head is one that is not dummy: ``|ω_h μ_h| >= dummy_tol · max_k |ω_k μ_k|`` (``dummy_tol``
0.05 by default, :func:`reduced_dynamics.model.circuits.circuits_from_arrays`).

Why these numbers: the energy fractions of a trained model are far below 5 % (a package model at the
paper's setting after 3·10⁴ Adam steps: 0.17 % off-diagonal, 0.007 % in the response row, 0.03 % of
OV off the response entry) and those of random circuits far above it (a Gaussian ``d × d`` block has
an expected off-diagonal fraction ``1 − 1/d``, 0.8 at ``d = 5``); 5 % separates the two with a wide
margin on both sides. Spreads (coefficients of variation) are compared at 10 %, the zero-sum ratio at
5 %. Where the model sits against the theory's optimum is held to 5 % in the step and 10 % on the
manifold: at the paper's setting the finite-L optimum itself is 0.1 % from η* (the exact minimiser,
docs/theory.md#the-exact-minimiser) while at ``L = 10`` it is 11 % away, so these two verdicts are
expected to fail for short prompts even for a perfectly trained model (the report says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from reduced_dynamics._results import FrozenResult

__all__ = ["THRESHOLDS", "Verdict", "check_thresholds"]

#: threshold key -> default value (module docstring)
THRESHOLDS = {
    "kq_offdiag": 0.05,
    "kq_response_row": 0.05,
    "kq_diag_cv": 0.10,
    "omega_cv": 0.10,
    "ov_offresponse": 0.05,
    "sign_match": 1.0,
    "zero_sum": 0.05,
    "manifold": 0.10,
    "eta": 0.05,
    "single_head": 0.10,
    "rank1": 0.10,
    "precond": 0.10,
    "mt_kq_offdiag": 0.10,
    "mt_ov_off": 0.10,
    "mt_limit": 0.10,
}


@dataclass(frozen=True)
class Verdict(FrozenResult):
    """One pass/fail verdict of an analysis.

    Attributes
    ----------
    passed : bool
    value : float or None
        The number compared (``None`` when it is not defined, e.g. the manifold gap when
        ``μ_γ`` underflows to 0; the verdict then fails).
    threshold : float
        The value it was compared with (:data:`THRESHOLDS`, or the ``dummy_tol`` of the dummy-head rule).
    rule : str
        The comparison in words.
    """

    passed: bool
    value: float | None
    threshold: float
    rule: str


def at_most(value, threshold, rule) -> Verdict:
    """``value <= threshold`` (a non-finite value fails, recorded as ``None``)."""
    import math

    v = float(value)
    ok = math.isfinite(v)
    return Verdict(passed=bool(ok and v <= threshold), value=v if ok else None, threshold=float(threshold), rule=rule)


def at_least(value, threshold, rule) -> Verdict:
    """``value >= threshold``."""
    v = float(value)
    return Verdict(passed=bool(v >= threshold), value=v, threshold=float(threshold), rule=rule)


def check_thresholds(thresholds) -> dict:
    """:data:`THRESHOLDS` updated with ``thresholds`` (keys must be known, values finite and >= 0)."""
    from reduced_dynamics._validation import check_nonnegative_float

    out = dict(THRESHOLDS)
    if thresholds is None:
        return out
    if not isinstance(thresholds, dict):
        raise ValueError(f"`thresholds` must be a dict of threshold name -> number, got {type(thresholds).__name__}")
    unknown = sorted(set(thresholds) - set(THRESHOLDS))
    if unknown:
        raise ValueError(f"`thresholds` has unknown keys {unknown}; the keys are {sorted(THRESHOLDS)}")
    for k, v in thresholds.items():
        out[k] = check_nonnegative_float(f"thresholds[{k!r}]", v)
    return out
