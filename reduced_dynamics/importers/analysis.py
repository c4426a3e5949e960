r"""Hold an imported attention model against the theory: :func:`analyze` and its :class:`AnalysisReport`.

Given any one-layer attention model in the package's parameterisation (an
``ImportedAttention``, or a checkpoint the importers read) and the
data model it is judged on (a :class:`~reduced_dynamics.Setting`), :func:`analyze` reports, with
numbers:

1. **The circuits** per head (``KQ_h``, its covariate block, ``OV_h``) and the **pattern
   metrics** of docs/theory.md#emergent-patterns (:func:`~reduced_dynamics.model.circuits.pattern_metrics`;
   for several tasks :func:`~reduced_dynamics.multitask.attention.extract_reduced`), each turned
   into a **verdict** (pass/fail with the number, the threshold and the rule;
   :data:`~reduced_dynamics.importers._verdicts.THRESHOLDS` lists the defaults and why).
2. **The reduced state** extracted from them: ``(ω, μ)`` (isotropic), ``(ω, μ, W)`` and the
   effective preconditioner ``P_eff = Σ_h μ_h KQ_h[:d, :d]`` (under Σ), or per-feature ``ω`` and
   per-task ``μ`` (several tasks) — a state of the matching reduced model
   (:func:`reduced_dynamics.reduced_model`) — and **where it sits**: the gap to the solution
   manifold ``S_γ``, ``η_eff`` against ``η*``, the distances of the KQ blocks and of ``P_eff`` to
   ``Σ⁻¹``, to ``I`` and to the exact optimal preconditioner ``P*``
   (:func:`~reduced_dynamics.precond.exact.optimal_dpgd`).
3. **The theory's numbers** at that state: the reduced model's loss L̃, the exact finite-L risk of
   the reduced model (isotropic, ``objective="exact"``), debiased GD at the optimal step (exact),
   and Bayes ridge (Monte Carlo).
4. **The model's own risk** on fresh prompts at several prompt lengths (length generalisation),
   paired on common prompts with debiased GD at each length's optimum, with debiased GD at the
   model's own ``η_eff`` (its limit predictor), with the reduced model at the extracted state and
   with Bayes ridge: every difference with its standard error
   (:mod:`reduced_dynamics.importers._paired`).

A model whose query attends to itself (``query_attends_self``, e.g. a causal TransformerLens
block) is analysed as it is: its risks include the self term, which the reduced theory excludes;
the report says so in its notes.

References
----------
docs/theory.md#full-model, docs/theory.md#emergent-patterns, docs/theory.md#solution-manifold,
docs/theory.md#predictors, docs/theory.md#non-isotropic-covariates, docs/theory.md#multi-task-regression
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_nonnegative_int, check_positive_int, check_probability
from reduced_dynamics.importers._canonical import FORMATS, ImportedAttention
from reduced_dynamics.importers._paired import LengthRisks
from reduced_dynamics.importers._verdicts import THRESHOLDS, Verdict, at_least, at_most, check_thresholds  # noqa: F401
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["analyze", "check_config", "check_run_options", "AnalysisReport", "DEFAULT_LENGTHS", "LENGTH_MAX"]

#: prompt lengths of the length-generalisation table (the setting's own L is added)
DEFAULT_LENGTHS = (10, 20, 40, 80)
#: longest prompt length evaluated (the Monte Carlo cost grows like n_prompts · L)
LENGTH_MAX = 10_000
#: most prompts per length
N_PROMPTS_MAX = 10**7
#: largest |η| of debiased GD (the predictor and its closed-form risk)
ETA_CLOSED_FORM_MAX = 1e12
#: the theory's L and σ² when no setting is given (the paper's)
_DEFAULT_L, _DEFAULT_SIGMA2 = 40, 0.1


@dataclass(frozen=True)
class AnalysisReport(FrozenResult):
    """What :func:`analyze` found (``to_dict()`` is the JSON report; ``summary()`` the text one).

    Attributes
    ----------
    matches : bool
        Every verdict passed.
    message : str
        One line: which verdicts failed, or that all passed.
    source : dict
        The imported model: ``ImportedAttention.describe()`` (format, H, d, n_out, conventions, warnings).
    setting : Setting
        The data model the model is judged on.
    model : str
        The reduced model of that setting (``"isotropic"``, ``"precond"`` or ``"multitask"``).
    n_heads : int
    config : dict
        ``lengths, n_prompts, seed, dummy_tol, thresholds``: everything the numbers depend on
        besides the model and the setting.
    circuits : dict
        ``KQ`` (H, D, D), ``OV`` (H, n_out, D), ``kq`` (H, d, d) the covariate blocks ``KQ_h[:d, :d]``;
        one output: ``ov`` (H, D) ``= OV[:, 0]``.
    ideal : dict
        ``KQ``, ``OV`` of the theory's pattern at the extracted state (isotropic: ``ω_h I_d`` and
        ``μ_h`` on the response entry; Σ: ``ω_h W*`` with ``W*`` the direction of ``P*``,
        ``tr W* = d``; tasks: ``diag(ω^{(h)})`` and ``μ^{(h)}_n`` on task ``n``'s entry), and
        ``distance`` (H,): ``‖KQ_h[:, :d] − ideal‖_F / ‖KQ_h[:, :d]‖_F`` (the last column of KQ
        multiplies the zero of ``z_q`` and is left out).
    patterns : dict
        The pattern metrics (:class:`~reduced_dynamics.model.circuits.PatternMetrics` fields; for
        tasks those of :func:`~reduced_dynamics.multitask.attention.extract_reduced` and the
        per-task zero-sum ratios).
    verdicts : dict of str -> Verdict
        Module docstring of :mod:`reduced_dynamics.importers._verdicts`.
    state : dict
        The extracted reduced state: ``omega``, ``mu``, ``dummy`` (and ``W``, ``P_eff`` under Σ;
        ``roles`` for tasks).
    location : dict
        Where the state sits: ``eta_eff``, ``eta_star``, ``eta_rel_gap``; ``manifold``
        (:class:`~reduced_dynamics.model.circuits.CircuitManifoldGap`, ``None`` when every head is
        dummy or not isotropic); distances of the KQ blocks (per head) and of ``W`` and ``P_eff``
        to ``Σ⁻¹``, ``I`` and ``P*``.
    theory : dict
        ``loss_approx`` (L̃ at the state), ``inf_loss``, ``exact`` (the exact finite-L risk and
        its error estimate, or ``None`` where not derived), the exact risks of debiased GD at the
        optimal step and at the model's own, and the Monte Carlo risks at ``setting.L`` of the
        model and of Bayes ridge.
    risks : LengthRisks
        The paired risks at every length.
    notes : tuple of str
        What limits the comparison (a self-attending query, importer warnings, a quantity that
        is not derived here, a setting outside the theory's range).
    """

    matches: bool
    message: str
    source: dict
    setting: Setting
    model: str
    n_heads: int
    config: dict
    circuits: dict
    ideal: dict
    patterns: dict
    verdicts: dict
    state: dict
    location: dict
    theory: dict
    risks: LengthRisks
    notes: tuple

    def summary(self) -> str:
        """The human-readable report (what ``reduced-dynamics analyze`` prints)."""
        from reduced_dynamics.importers._text import summary_text

        return summary_text(self)


# ---------------------------------------------------------------------------------------- validation
def _as_imported(source, format) -> ImportedAttention:
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"`format` must be 'auto' or one of {', '.join(FORMATS)}, got {format!r}")
    if isinstance(source, ImportedAttention):
        if format != "auto":
            raise ValueError(
                f"`format` {format!r} applies to a checkpoint to read; `source` is already an ImportedAttention"
            )
        return source
    from reduced_dynamics.importers._load import load

    return load(source, format=format)


def _check_setting(setting, imp: ImportedAttention) -> Setting:
    if setting is None:
        setting = Setting(d=imp.d, L=_DEFAULT_L, sigma2=_DEFAULT_SIGMA2)
    setting = as_setting(setting, "analyze").require_scalar("analyze")
    if setting.d != imp.d:
        raise ValueError(f"`setting.d` must be the checkpoint's d = {imp.d}, got {setting.d}")
    if setting.activation != "exp":
        raise ValueError(
            f"`setting.activation` must be 'exp' (an imported model is softmax attention), got {setting.activation!r}"
        )
    if setting.Sigma is not None and setting.tasks is not None:
        raise ValueError(
            "`setting.Sigma` together with `setting.tasks` is not analysed yet (the composed reduced model exists, "
            "its pattern metrics do not): give one of them"
        )
    if setting.n_tasks != imp.n_out:
        if setting.tasks is None:
            raise ValueError(
                f"`setting.tasks` must give the checkpoint's {imp.n_out} tasks (it has n_out = {imp.n_out} outputs)"
            )
        raise ValueError(
            f"`setting.tasks` must list {imp.n_out} task(s), the checkpoint's outputs, got {setting.n_tasks}"
        )
    if not 2 <= setting.L <= LENGTH_MAX:
        raise ValueError(
            f"`setting.L` must be an integer in [2, {LENGTH_MAX}] for the analysis (debiased GD needs L >= 2), "
            f"got {setting.L}"
        )
    return setting


def _check_lengths(lengths, setting: Setting) -> tuple[int, ...]:
    if lengths is None:
        lengths = DEFAULT_LENGTHS
    if isinstance(lengths, (str, bytes)) or np.ndim(lengths) != 1 or len(lengths) == 0:
        raise ValueError(f"`lengths` must be a non-empty sequence of integers in [2, {LENGTH_MAX}], got {lengths!r}")
    out = set()
    for x in lengths:
        try:
            out.add(check_positive_int("lengths", x, hi=LENGTH_MAX))
        except ValueError:
            raise ValueError(f"`lengths` must hold integers in [2, {LENGTH_MAX}], got {x!r}") from None
        if int(x) < 2:
            raise ValueError(f"`lengths` must hold integers in [2, {LENGTH_MAX}] (debiased GD needs L >= 2), got {x!r}")
    out.add(int(setting.L))
    return tuple(sorted(out))


def check_config(imp: ImportedAttention, setting, *, lengths, n_prompts, seed, dummy_tol) -> dict:
    """The validated configuration of an analysis of ``imp`` (what :func:`analyze` checks before any work).

    Parameters
    ----------
    imp : ImportedAttention
    setting : Setting or None
    lengths, n_prompts, seed, dummy_tol
        As in :func:`analyze`.

    Returns
    -------
    dict
        ``setting`` (the default filled in), ``lengths`` (sorted, with ``setting.L``), ``n_prompts``,
        ``seed``, ``dummy_tol``.

    Raises
    ------
    ValueError
        Naming the parameter (``setting.d``, ``setting.tasks``, ``lengths``, ...).
    """
    if not isinstance(imp, ImportedAttention):
        raise ValueError(f"`source` must be an ImportedAttention here, got {type(imp).__name__}")
    n_prompts, seed, dummy_tol = check_run_options(n_prompts=n_prompts, seed=seed, dummy_tol=dummy_tol)
    setting = _check_setting(setting, imp)
    lengths = _check_lengths(lengths, setting)
    return {"setting": setting, "lengths": lengths, "n_prompts": n_prompts, "seed": seed, "dummy_tol": dummy_tol}


def check_run_options(*, n_prompts, seed, dummy_tol) -> tuple[int, int, float]:
    """``(n_prompts, seed, dummy_tol)`` validated as in :func:`analyze` (``ValueError`` naming the parameter)."""
    n_prompts = check_positive_int("n_prompts", n_prompts, hi=N_PROMPTS_MAX)
    if n_prompts < 2:
        raise ValueError(f"`n_prompts` must be an integer in [2, {N_PROMPTS_MAX}] (a standard error needs two), got 1")
    seed = check_nonnegative_int("seed", seed, hi=2**63 - 1)
    dummy_tol = check_probability("dummy_tol", dummy_tol)
    return n_prompts, seed, dummy_tol


# ------------------------------------------------------------------------------------- helpers
def _rel(a, b) -> float:
    return float(a / b - 1.0) if b != 0 else math.inf


def _distance(A, B) -> float:
    """Scale-free distance ``min_c ‖cA − B‖/‖B‖`` (1 when ``A`` is zero)."""
    from reduced_dynamics.precond.metrics import scale_free_distance

    return float(scale_free_distance(A, B)) if np.any(A) else 1.0


def _pattern_distance(KQ, ideal, width: int) -> np.ndarray:
    """``‖KQ_h[:, :width] − ideal_h[:, :width]‖ / ‖KQ_h[:, :width]‖`` per head (1 for a zero head)."""
    a, b = KQ[:, :, :width], ideal[:, :, :width]
    num = np.sqrt(np.einsum("hij,hij->h", a - b, a - b))
    den = np.sqrt(np.einsum("hij,hij->h", a, a))
    return np.where(den > 0, num / np.maximum(den, 1e-300), 1.0)


def _common_verdicts(pm, th, dummy_tol, *, H) -> dict:
    """The verdicts every single-output model shares: response row, OV, signs, zero sum, homogeneity, heads."""
    v = {
        "response_row": at_most(
            pm.kq_response_row_fraction_max,
            th["kq_response_row"],
            "max over live heads of ‖KQ_h[d, :d]‖² / ‖KQ_h[:, :d]‖² (the rest of the first d columns ≈ 0)",
        ),
        "last_entry_ov": at_most(
            pm.ov_offresponse_fraction_max,
            th["ov_offresponse"],
            "max over live heads of ‖ov_h[:d]‖² / ‖ov_h‖² (OV reads only the response entry)",
        ),
        "sign_match": at_least(
            pm.sign_match_fraction, th["sign_match"], "fraction of live heads with sign ω_h = sign μ_h"
        ),
    }
    if H >= 2:
        v["zero_sum"] = at_most(pm.zero_sum_ratio, th["zero_sum"], "|Σ_h μ_h| / Σ_h |μ_h| over live heads")
        v["homogeneous_heads"] = at_most(pm.omega_cv, th["omega_cv"], "std_h |ω_h| / mean_h |ω_h| over live heads")
        v["dummy_heads"] = Verdict(
            passed=bool(pm.n_positive >= 1 and pm.n_negative >= 1),
            value=float(pm.n_dummy),
            threshold=float(dummy_tol),
            rule="number of dummy heads (|ω_h μ_h| < threshold · max_k |ω_k μ_k|); passes when the live heads "
            "include one with μ_h > 0 and one with μ_h < 0",
        )
    return v


def _exact_risk(setting, H, y, cache: dict):
    """The exact finite-L risk of the reduced model (objective ``"exact"``) at ``y`` (dict), or ``(None, reason)``.

    ``cache`` (keyed by ``L``) keeps each length's value: the theory's number at ``setting.L`` and the
    length table share it.
    """
    from reduced_dynamics.exact.evaluator import exact_risk
    from reduced_dynamics.models import reduced_model

    if setting.L not in cache:
        try:
            model = reduced_model(setting, n_heads=H, objective="exact")
            w, m = model.split(y)
            r = exact_risk(w, m, setting, tol=model.tol)
            cache[setting.L] = ({"risk": float(r.risk), "error_estimate": float(r.error_estimate)}, None)
        except ValueError as exc:
            cache[setting.L] = (None, str(exc).splitlines()[0])
    return cache[setting.L]


# ------------------------------------------------------------------------------- isotropic
def _isotropic(imp: ImportedAttention, setting: Setting, th: dict, dummy_tol: float) -> dict:
    from reduced_dynamics.dynamics.manifold import single_head_optimum
    from reduced_dynamics.estimation.closed_forms import gd_risk
    from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD
    from reduced_dynamics.model.circuits import circuits_from_arrays, pattern_metrics
    from reduced_dynamics.models import reduced_model

    d, H = imp.d, imp.n_heads
    ov = np.array(imp.OV[:, 0])
    c = circuits_from_arrays(imp.KQ, ov, dummy_tol=dummy_tol)
    pm = pattern_metrics(c)
    red = reduced_model(setting, n_heads=H)
    y = red.pack(omega=c.omega, mu=c.mu)
    eta_eff, eta_star = c.eta_eff, float(setting.eta_star)
    notes = []
    v = {
        "diagonal": at_most(
            pm.kq_offdiag_fraction_max,
            th["kq_offdiag"],
            "max over live heads of the off-diagonal energy fraction of KQ_h[:d, :d]",
        ),
        "homogeneous_diagonal": at_most(
            pm.kq_diag_cv_max, th["kq_diag_cv"], "max over live heads of std(diag B_h) / |mean diag B_h|"
        ),
    }
    v.update(_common_verdicts(pm, th, dummy_tol, H=H))
    live = ~c.dummy
    gap = c.manifold_gap(setting) if live.any() else None
    if H >= 2:
        worst = max(abs(gap.rel_gap_plus), abs(gap.rel_gap_minus)) if gap is not None else math.inf
        v["manifold"] = at_most(
            worst, th["manifold"], "max(|μ₊ − μ_γ|, |−μ₋ − μ_γ|) / μ_γ at γ = mean |ω_h| over live heads (S_γ of L̃)"
        )
        v["eta_eff"] = at_most(abs(_rel(eta_eff, eta_star)), th["eta"], "|η_eff − η*| / η*, η_eff = μᵀω")
    else:
        opt = single_head_optimum(setting)
        worst = max(abs(abs(c.omega[0]) / opt.omega - 1.0), abs(abs(c.mu[0]) / opt.mu - 1.0))
        v["single_head"] = at_most(
            worst, th["single_head"], "max(|ω − ω*|/ω*, |μ − μ*|/μ*) against the single-head optimum of L̃"
        )
    I = np.eye(d)
    B = c.KQ[:, :d, :d]
    kq_dist = np.array([_distance(B[h], I) for h in range(H)])
    location = {
        "eta_eff": eta_eff,
        "eta_star": eta_star,
        "eta_rel_gap": _rel(eta_eff, eta_star),
        "manifold": gap,
        # at Σ = I both Σ⁻¹ and the exact optimal preconditioner P* are the identity
        "kq_distance_sigma_inv": kq_dist,
        "kq_distance_optimal": kq_dist,
    }
    if H == 1:
        opt = single_head_optimum(setting)
        location["single_head_optimum"] = {"omega": float(opt.omega), "mu": float(opt.mu)}
    cache = {}
    exact, why = _exact_risk(setting, H, y, cache)
    if exact is None:
        notes.append(f"the exact finite-L risk at the extracted state is not available: {why}")
    lim = red.limit()
    theory = {
        "loss_approx": float(red.loss(y)),
        "inf_loss": lim.get("inf_loss") if H >= 2 else None,
        "exact": exact,
        "debiased_gd_optimal": float(gd_risk(eta_star, setting, debiased=True)),
    }
    own_exact = abs(eta_eff) <= ETA_CLOSED_FORM_MAX  # the range of DebiasedGD and of its closed form
    if own_exact:
        theory["debiased_gd_own"] = float(gd_risk(eta_eff, setting, debiased=True))
    else:
        notes.append(
            f"|η_eff| = {abs(eta_eff):.3g} is beyond the range of debiased GD (|η| <= 1e12): the model is not "
            "compared with debiased GD at its own step"
        )
    ideal_KQ = np.zeros_like(c.KQ)
    ideal_KQ[:, :d, :d] = c.omega[:, None, None] * I
    ideal_OV = np.zeros((H, 1, d + 1))
    ideal_OV[:, 0, d] = c.mu

    def references(s_L):
        rm = reduced_model(s_L, n_heads=H)
        out = {"debiased_gd": rm.reference_predictors()["debiased_gd"]}
        if own_exact:
            out["debiased_gd_own"] = DebiasedGD(eta_eff)
        return out | {"reduced": rm.predictor(y), "bayes_ridge": BayesRidge(s_L)}

    def exact_at(lengths):
        out = {
            "debiased_gd": np.array(
                [gd_risk(setting.replace(L=L).eta_star, setting.replace(L=L), debiased=True) for L in lengths]
            ),
        }
        if own_exact:
            out["debiased_gd_own"] = np.array([gd_risk(eta_eff, setting.replace(L=L), debiased=True) for L in lengths])
        ex = [_exact_risk(setting.replace(L=L), H, y, cache)[0] for L in lengths]
        if all(e is not None for e in ex):
            out["reduced"] = np.array([e["risk"] for e in ex])
        else:
            notes.append(
                "the exact risk of the reduced model is left out of the length table: not available at every L"
            )
        return out

    return dict(
        circuits={"kq": B, "ov": ov},
        patterns=pm.to_dict(),
        verdicts=v,
        state={"omega": c.omega, "mu": c.mu, "dummy": c.dummy},
        location=location,
        theory=theory,
        ideal={"KQ": ideal_KQ, "OV": ideal_OV},
        notes=notes,
        references=references,
        exact_at=exact_at,
    )


# ------------------------------------------------------------------------------------- Σ
def _precond(imp: ImportedAttention, setting: Setting, th: dict, dummy_tol: float) -> dict:
    from reduced_dynamics.estimation.predictors import BayesRidge
    from reduced_dynamics.model.circuits import Circuits, pattern_metrics, precond_circuits_from_arrays
    from reduced_dynamics.models import reduced_model
    from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd
    from reduced_dynamics.precond.flow import precond_limit
    from reduced_dynamics.precond.predictors import debiased_precond_gd

    d, H = imp.d, imp.n_heads
    ov = np.array(imp.OV[:, 0])
    pc = precond_circuits_from_arrays(imp.KQ, ov, setting, dummy_tol=dummy_tol)
    pm = pattern_metrics(Circuits(KQ=imp.KQ, ov=ov, omega=pc.omega, mu=pc.mu, dummy=pc.dummy))
    S = setting.covariance()
    Si = pc.sigma_inv
    opt = optimal_dpgd(setting)
    P_eff = pc.P_eff
    eta_eff_sigma = float(np.trace(P_eff @ S)) / d  # the step of P_eff on the scale tr(PΣ) = d of P*
    notes = [
        "under Σ the KQ block is not ω_h I: the diagonal and homogeneous-diagonal patterns are replaced by one "
        "shared direction W (rank-one fit) and the distance of P_eff to the optimal preconditioner P*"
    ]
    v = _common_verdicts(pm, th, dummy_tol, H=H)
    v["shared_direction"] = at_most(
        pc.rank1_residual, th["rank1"], "‖B − ω ⊗ W‖_F / ‖B‖_F over live heads (one shared direction W)"
    )
    v["preconditioner"] = at_most(
        _distance(P_eff, opt.P), th["precond"], "scale-free distance of P_eff = Σ_h μ_h B_h to P* (optimal_dpgd)"
    )
    v["eta_eff"] = at_most(
        abs(_rel(eta_eff_sigma, opt.eta)), th["eta"], "|tr(P_eff Σ)/d − η*| / η*, η* the step of P* at tr(P*Σ) = d"
    )
    B = pc.kq
    rel_err = float(np.linalg.norm(P_eff - opt.effective) / np.linalg.norm(opt.effective))
    location = {
        "eta_eff": pc.eta_eff,
        "eta_eff_sigma": eta_eff_sigma,
        "eta_star": float(opt.eta),
        "eta_rel_gap": _rel(eta_eff_sigma, opt.eta),
        "manifold": None,
        "kq_distance_sigma_inv": pc.distance_sigma_inv,
        "kq_distance_identity": pc.distance_identity,
        "kq_distance_optimal": np.array([_distance(B[h], opt.P) for h in range(H)]),
        "W_distance_sigma_inv": pc.W_distance_sigma_inv,
        "W_distance_identity": pc.W_distance_identity,
        "W_distance_optimal": _distance(pc.W, opt.P),
        "P_eff_distance_sigma_inv": pc.P_eff_distance_sigma_inv,
        "P_eff_distance_identity": pc.P_eff_distance_identity,
        "P_eff_distance_optimal": _distance(P_eff, opt.P),
        "P_eff_rel_error": rel_err,
        "P_optimal": opt.P,
        "P_optimal_distance_sigma_inv": float(opt.distance_to_sigma_inv),
    }
    red = reduced_model(setting, n_heads=H)
    y = red.pack(omega=pc.omega, mu=pc.mu, W=pc.W)
    theory = {}
    try:
        theory["loss_approx"] = float(red.loss(y))
    except (ValueError, OverflowError) as exc:
        notes.append(f"L̃_Σ at the extracted state is not available: {str(exc).splitlines()[0]}")
    notes.append("the exact finite-L risk of the reduced model is derived for isotropic covariates only")
    theory |= {
        "inf_loss": float(precond_limit(setting).loss),
        "exact": None,
        "debiased_gd_optimal": float(opt.risk),
        "debiased_gd_own": float(dpgd_risk(P_eff, 1.0, setting)) if np.any(P_eff) else None,
        "debiased_gd_sigma_inv": float(opt.risk_sigma_inv),
        "debiased_gd_identity": float(opt.risk_identity),
    }
    if theory["debiased_gd_own"] is None:
        theory.pop("debiased_gd_own")
    W_star = opt.P * (d / float(np.trace(opt.P)))
    ideal_KQ = np.zeros_like(imp.KQ)
    ideal_KQ[:, :d, :d] = pc.omega[:, None, None] * W_star
    ideal_OV = np.zeros((H, 1, d + 1))
    ideal_OV[:, 0, d] = pc.mu
    reduced = red.predictor(y)
    own = debiased_precond_gd(P_eff, 1.0) if np.any(P_eff) else None

    def references(s_L):
        o = optimal_dpgd(s_L)
        out = {"debiased_gd": debiased_precond_gd(o.P, o.eta)}
        if own is not None:
            out["debiased_gd_own"] = own
        out.update({"reduced": reduced, "bayes_ridge": BayesRidge(s_L)})
        return out

    def exact_at(lengths):
        out = {"debiased_gd": np.array([optimal_dpgd(setting.replace(L=L)).risk for L in lengths])}
        if own is not None:
            out["debiased_gd_own"] = np.array([dpgd_risk(P_eff, 1.0, setting.replace(L=L)) for L in lengths])
        return out

    return dict(
        circuits={"kq": B, "ov": ov},
        patterns={
            **pm.to_dict(),
            "rank1_residual": pc.rank1_residual,
            "kq_cosine_sigma_inv": pc.cosine_sigma_inv,
            "kq_cosine_identity": pc.cosine_identity,
        },
        verdicts=v,
        state={"omega": pc.omega, "mu": pc.mu, "dummy": pc.dummy, "W": pc.W, "P_eff": P_eff, "sigma_inv": Si},
        location=location,
        theory=theory,
        ideal={"KQ": ideal_KQ, "OV": ideal_OV},
        notes=notes,
        references=references,
        exact_at=exact_at,
    )


# ------------------------------------------------------------------------------------ tasks
def _multitask(imp: ImportedAttention, setting: Setting, th: dict, dummy_tol: float) -> dict:
    from reduced_dynamics.models import reduced_model
    from reduced_dynamics.multitask.attention import MultitaskAttention, extract_reduced
    from reduced_dynamics.multitask.loss import effective_weights
    from reduced_dynamics.multitask.predictors import (
        limit_predictor,
        reduced_mt_predict,
        support_ridge_predict,
        weighted_dgd_predict,
    )

    d, H, N = imp.d, imp.n_heads, imp.n_out
    ex = extract_reduced(MultitaskAttention(KQ=np.array(imp.KQ[:, :, :d]), OV=np.array(imp.OV)), setting)
    live = np.array([r != "dummy" for r in ex.roles])
    mu_l = ex.mu[live]
    den = np.abs(mu_l).sum(axis=0)
    zero_sum = np.where(den > 0, np.abs(mu_l.sum(axis=0)) / np.maximum(den, 1e-300), 1.0)
    lim = limit_predictor(H, setting)
    A = effective_weights(ex.omega, ex.mu, setting)
    red = reduced_model(setting, n_heads=H)
    y = red.pack(omega=ex.omega, mu=ex.mu)
    v = {
        "diagonal": at_most(
            ex.kq_offdiag_rel, th["mt_kq_offdiag"], "largest |KQ| entry off the x-block diagonal / largest |ω|"
        ),
        "last_entry_ov": at_most(
            ex.ov_offdiag_rel, th["mt_ov_off"], "largest |OV| entry other than the μ^(h)_n / largest |μ|"
        ),
    }
    if H >= 2:
        v["zero_sum"] = at_most(
            float(zero_sum.max()), th["zero_sum"], "max over tasks of |Σ_h μ^(h)_n| / Σ_h |μ^(h)_n| over live heads"
        )
    if lim.regime != "kernel":
        gap = float(np.abs(A - lim.A).max() / max(np.abs(lim.A).max(), 1e-300))
        v["limit"] = at_most(
            gap, th["mt_limit"], f"max |A − A*| / max |A*|, A = MᵀΩ, A* of the {lim.regime} limit predictor"
        )
    else:  # one head: the weighted kernel regressor, up to the sign (ω, μ) -> (−ω, −μ)
        s = np.sign(ex.mu[0].sum()) or 1.0
        gap = max(
            float(np.abs(s * ex.omega - lim.omega).max() / np.abs(lim.omega).max()),
            float(np.abs(s * ex.mu - lim.mu).max() / np.abs(lim.mu).max()),
        )
        v["limit"] = at_most(gap, th["mt_limit"], "max relative gap of (ω, μ) to the one-head optimum of L̃")
    loss_per_task = red.loss_per_task(y)
    theory = {
        "loss_approx": float(red.loss(y)),
        "loss_per_task": loss_per_task,
        "inf_loss": float(np.sum(lim.loss_per_task)) if lim.regime != "kernel" else None,
        "limit_loss_per_task": lim.loss_per_task,
        "limit_regime": lim.regime,
        "exact": None,
    }
    ideal_KQ = np.zeros_like(imp.KQ)
    ideal_OV = np.zeros_like(imp.OV)
    for h in range(H):
        ideal_KQ[h, np.arange(d), np.arange(d)] = ex.omega[h]
        ideal_OV[h, np.arange(N), d + np.arange(N)] = ex.mu[h]
    omega, mu = ex.omega, ex.mu

    def references(s_L):
        lim_L = limit_predictor(H, s_L)
        dgd_S = limit_predictor(N + 1, s_L).A
        if lim_L.regime == "kernel":
            limit = lambda p: reduced_mt_predict(p, lim_L.omega, lim_L.mu, s_L)  # noqa: E731
        else:
            limit = lambda p: weighted_dgd_predict(p, lim_L.A)  # noqa: E731
        return {
            "limit": limit,
            "debiased_gd_S": lambda p: weighted_dgd_predict(p, dgd_S),
            "reduced": lambda p: reduced_mt_predict(p, omega, mu, s_L),
            "bayes_ridge_S": lambda p: support_ridge_predict(p, s_L),
        }

    return dict(
        circuits={"kq": np.array(imp.KQ[:, :d, :d])},
        patterns={
            "kq_offdiag_rel": ex.kq_offdiag_rel,
            "ov_offdiag_rel": ex.ov_offdiag_rel,
            "zero_sum_ratio_per_task": zero_sum,
            "n_dummy": int((~live).sum()),
        },
        verdicts=v,
        state={"omega": omega, "mu": mu, "dummy": ~live, "roles": list(ex.roles), "A": A},
        location={"A": A, "A_limit": lim.A, "A_rel_gap": gap, "manifold": None},
        theory=theory,
        ideal={"KQ": ideal_KQ, "OV": ideal_OV},
        notes=[
            "several tasks: the exact finite-L risk is not derived; the references are the limit predictor of "
            f"H = {H} heads ({lim.regime}), per-task debiased GD and Bayes ridge on each support"
        ],
        references=references,
        exact_at=lambda lengths: {},
    )


_BRANCHES = {"isotropic": _isotropic, "precond": _precond, "multitask": _multitask}


# ------------------------------------------------------------------------------------------ API
def analyze(
    source,
    *,
    setting: Setting | None = None,
    format: str = "auto",
    lengths=None,
    n_prompts: int = 20_000,
    seed: int,
    dummy_tol: float = 0.05,
    thresholds: dict | None = None,
    log=None,
) -> AnalysisReport:
    r"""Analyse a trained one-layer attention model against the reduced theory (module docstring).

    Parameters
    ----------
    source : ImportedAttention, path, state dict or live torch / TransformerLens object
        The model; anything but an ``ImportedAttention`` is read by
        ``reduced_dynamics.importers._load.load(source, format=format)``.
    setting : Setting, optional
        The data model the model is judged on: ``d`` must be the model's; ``Sigma`` for
        covariates ``x ~ N(0, Σ)``; ``tasks`` (one per output) for a multi-output model.
        Default ``Setting(d=model.d, L=40, sigma2=0.1)`` (the paper's L and σ²).
    format : {"auto", "authors", "transformerlens", "mha", "safetensors", "npz"}
        Checkpoint format (only for a ``source`` to read).
    lengths : sequence of int, optional
        Prompt lengths of the length-generalisation table, each in ``[2, LENGTH_MAX]``
        (default :data:`DEFAULT_LENGTHS`); ``setting.L`` is always added.
    n_prompts : int, in [2, 1e7]
        Fresh prompts per length.
    seed : int, >= 0
        Required: seeds every prompt (length ``L`` from its own child stream; same seed, same report).
    dummy_tol : float in (0, 1)
        A head is dummy when ``|ω_h μ_h| < dummy_tol · max_k |ω_k μ_k|``.
    thresholds : dict, optional
        Overrides of :data:`~reduced_dynamics.importers._verdicts.THRESHOLDS` (keys and defaults in
        :mod:`reduced_dynamics.importers._verdicts`).
    log : callable, optional
        ``log(text)`` at each stage (progress).

    Returns
    -------
    AnalysisReport

    Raises
    ------
    ValueError
        Bad parameters (named), a setting whose ``d``, tasks or activation do not fit the model,
        Σ together with tasks; ``CheckpointError`` from reading
        ``source``.

    References
    ----------
    docs/theory.md#emergent-patterns, docs/theory.md#solution-manifold, docs/theory.md#predictors

    Examples
    --------
    Ideal circuits on the solution manifold (γ = 0.05) of the paper's setting:

    >>> import numpy as np
    >>> from reduced_dynamics import Setting, mu_gamma
    >>> from reduced_dynamics.importers import ImportedAttention
    >>> s = Setting(d=5, L=40, sigma2=0.1)
    >>> g = 0.05; m = mu_gamma(g, s)
    >>> KQ = np.zeros((2, 6, 6)); KQ[0, :5, :5] = g * np.eye(5); KQ[1, :5, :5] = -g * np.eye(5)
    >>> OV = np.zeros((2, 1, 6)); OV[0, 0, 5] = m; OV[1, 0, 5] = -m
    >>> rep = analyze(ImportedAttention(KQ=KQ, OV=OV, d=5), setting=s, lengths=[20], n_prompts=2000, seed=0)
    >>> rep.matches, round(rep.location["eta_eff"], 6), round(float(s.eta_star), 6)
    (True, 0.879118, 0.879121)
    """
    from reduced_dynamics.models import model_name

    imp = _as_imported(source, format)
    cfg = check_config(imp, setting, lengths=lengths, n_prompts=n_prompts, seed=seed, dummy_tol=dummy_tol)
    setting, lengths, n_prompts, seed, dummy_tol = (
        cfg[k] for k in ("setting", "lengths", "n_prompts", "seed", "dummy_tol")
    )
    th = check_thresholds(thresholds)
    name = model_name(setting)
    say = log if log is not None else (lambda text: None)
    say(f"circuits and patterns of {imp.n_heads} head(s) ({name} model)")
    part = _BRANCHES[name](imp, setting, th, dummy_tol)
    exact = part["exact_at"](lengths)  # may add a note
    notes = list(part["notes"])
    if imp.query_attends_self:
        notes.insert(
            0,
            "the query attends to itself (query_attends_self): the model's own risks include the self term "
            "s = z_qᵀ KQ_h z_q and the query token among the attended ones; the reduced theory and its "
            "predictors exclude it",
        )
    notes += [f"importer: {w}" for w in imp.warnings]
    notes += [f"setting: {r}" for r in setting.theory_range_issues()]
    risks = _risks(imp, setting, part, lengths=lengths, n_prompts=n_prompts, seed=seed, log=say)
    risks = dataclasses.replace(risks, exact=exact)
    i = risks.at(setting.L)
    bayes = "bayes_ridge" if "bayes_ridge" in risks.names else "bayes_ridge_S"
    theory = dict(part["theory"])
    theory["model_mc"] = {"risk": risks.risk["model"][i], "stderr": risks.stderr["model"][i]}
    theory["bayes_ridge_mc"] = {"risk": risks.risk[bayes][i], "stderr": risks.stderr[bayes][i]}
    theory["paired_at_L"] = {k: {"diff": risks.diff[k][i], "stderr": risks.diff_stderr[k][i]} for k in risks.names}
    KQ, OV = np.array(imp.KQ), np.array(imp.OV)
    width = imp.d  # the columns of KQ that meet the non-zero part of z_q
    ideal = {k: v + 0.0 for k, v in part["ideal"].items()}  # + 0.0: no −0.0 entries (ω_h · 0 for ω_h < 0)
    ideal["distance"] = _pattern_distance(KQ, ideal["KQ"], width)
    circuits = {"KQ": KQ, "OV": OV, **part["circuits"]}
    # the notes: repeats dropped, order kept
    notes = tuple(dict.fromkeys(notes))
    verdicts = part["verdicts"]
    failed = [k for k, vd in verdicts.items() if not vd.passed]
    matches = not failed
    message = (
        f"matches the theory: all {len(verdicts)} verdicts pass"
        if matches
        else f"does not match the theory: {len(failed)} of {len(verdicts)} verdicts fail ({', '.join(failed)})"
    )
    say("report")
    return AnalysisReport(
        matches=matches,
        message=message,
        source=imp.describe(),
        setting=setting,
        model=name,
        n_heads=imp.n_heads,
        config={
            "lengths": list(lengths),
            "n_prompts": n_prompts,
            "seed": seed,
            "dummy_tol": dummy_tol,
            "thresholds": th,
        },
        circuits=circuits,
        ideal=ideal,
        patterns=part["patterns"],
        verdicts=verdicts,
        state=part["state"],
        location=part["location"],
        theory=theory,
        risks=risks,
        notes=notes,
    )


def _risks(imp, setting, part, *, lengths, n_prompts, seed, log) -> LengthRisks:
    from reduced_dynamics.importers._paired import paired_length_risks, paired_task_risks

    if setting.tasks is None:
        return paired_length_risks(
            lambda p: imp.predict(p.tokens, p.x_q),
            part["references"],
            setting,
            lengths=lengths,
            n_prompts=n_prompts,
            seed=seed,
            n_heads=imp.n_heads,
            log=log,
        )
    return paired_task_risks(
        lambda p: imp.predict(p.tokens, p.xq).reshape(p.xq.shape[0], imp.n_out),
        part["references"],
        setting,
        lengths=lengths,
        n_prompts=n_prompts,
        seed=seed,
        log=log,
    )
