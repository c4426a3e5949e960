r"""Circuit extraction and the pattern metrics of docs/theory.md#emergent-patterns.

From a trained model, :func:`extract_circuits` reads

* ``KQ_h = K_hᵀQ_h/√(d+1)`` (shape ``(H, D, D)``, ``D = d+1``) and
* ``ov_h = V_hᵀo_h`` (shape ``(H, D)``), the effective last row of ``O_h V_h``,

and reduces them to the (ω, μ) of the reduced model (docs/theory.md#reduced-model):
``ω_h = mean(diag(KQ_h[:d, :d]))`` and ``μ_h = ov_h[d]`` (the entry that maps the
response ``y_l`` to the output). A head is **dummy** when its contribution to the
effective step ``η_eff = μᵀω`` is negligible:
``|ω_h μ_h| < dummy_tol · max_k |ω_k μ_k|``.

:func:`pattern_metrics` turns the circuits into documented numbers (a :class:`PatternMetrics`), each 0 for the
exact pattern of docs/theory.md#emergent-patterns (except ``sign_match_fraction``, which is 1):

``kq_offdiag_fraction``
    per head, off-diagonal energy fraction of the top-left block,
    ``‖B − diag B‖²_F / ‖B‖²_F`` with ``B = KQ_h[:d, :d]``.
``kq_response_row_fraction``
    per head, energy of the response row of the first d columns relative to those
    columns, ``‖KQ_h[d, :d]‖² / ‖KQ_h[:, :d]‖²_F`` ("the rest of the first d
    columns ≈ 0"; the last column multiplies the 0 of ``z_q`` and is ignored).
``kq_diag_cv``
    per head, coefficient of variation of ``diag B``: ``std(diag B)/|mean(diag B)|``.
``omega_cv``
    homogeneity across non-dummy heads: ``std_h |ω_h| / mean_h |ω_h|``.
``ov_offresponse_fraction``
    per head, ``‖ov_h[:d]‖² / ‖ov_h‖²`` (OV energy outside the response entry).
``zero_sum_ratio``
    ``|Σ_h μ_h| / Σ_h |μ_h|`` over non-dummy heads.
``sign_match_fraction``
    fraction of non-dummy heads with ``sign ω_h = sign μ_h``.

Per-head values are arrays of shape ``(H,)``; the ``*_max`` summaries take the
maximum over non-dummy heads. :meth:`Circuits.manifold_gap` compares the
extracted (ω, μ) with the solution manifold :math:`S_\gamma`.

**Covariates x ~ N(0, Σ)** (docs/theory.md#non-isotropic-covariates). There the claim is that the
covariate block ``B_h = KQ_h[:d, :d]`` of each non-dummy head is ``±γΩ`` with ``Ω`` close to
``Σ⁻¹``. :func:`extract_precond_circuits` reads ``B_h``, its ``|cosine|`` with ``Σ⁻¹`` and, as a
control, with ``I`` (``reduced_dynamics.precond.metrics.abs_cosine``), and reduces the blocks to
the preconditioned reduced model ``B_h ≈ ω_h W`` (one shared ``W``, signed scales ``ω_h``): ``W`` is
the best rank-one fit of the non-dummy blocks (top right-singular vector of the ``(H_live, d²)``
matrix of their entries, i.e. least squares over ``ω`` and ``W``), normalised to ``tr W = d`` (so
``W = I`` and ``ω_h = mean(diag B_h)`` for the isotropic pattern), and ``ω_h = ⟨B_h, W⟩_F / ‖W‖²_F``
for every head. Expanding each softmax to first order in its scores (and with ``Σ_h μ_h = 0``) the
model's limit predictor is debiased preconditioned GD with the effective preconditioner
``P_eff = Σ_h μ_h B_h`` and step 1 (``= (μᵀω) W`` when the blocks share ``W`` exactly);
:func:`precond_cross_check` measures how close the model is to it.

References
----------
docs/theory.md#full-model (circuits), docs/theory.md#emergent-patterns (patterns),
docs/theory.md#solution-manifold (the solution manifold ``S_γ``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_probability
from reduced_dynamics.dynamics.manifold import mu_gamma
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "Circuits",
    "CircuitManifoldGap",
    "PatternMetrics",
    "PrecondCircuits",
    "PrecondCrossCheck",
    "extract_circuits",
    "extract_precond_circuits",
    "circuits_from_arrays",
    "pattern_metrics",
    "precond_circuits_from_arrays",
    "precond_cross_check",
]

_TINY = 1e-300


@dataclass(frozen=True)
class CircuitManifoldGap(FrozenResult):
    r"""Extracted (ω, μ) vs the solution manifold :math:`S_\gamma` (:meth:`Circuits.manifold_gap`).

    Attributes
    ----------
    gamma : float
        Mean ``|ω_h|`` over non-dummy heads.
    mu_plus, mu_minus : float
        Sum of the positive (negative) ``μ_h`` over non-dummy heads.
    mu_gamma : float
        The manifold's prediction :func:`reduced_dynamics.mu_gamma` at ``gamma``.
    rel_gap_plus : float
        ``(μ₊ − μ_γ)/μ_γ`` (``inf`` when μ_γ underflows to 0 and ``μ₊ > 0``).
    rel_gap_minus : float
        ``(−μ₋ − μ_γ)/μ_γ`` (same limit).
    eta_eff : float
        ``μᵀω`` over all heads.
    """

    gamma: float
    mu_plus: float
    mu_minus: float
    mu_gamma: float
    rel_gap_plus: float
    rel_gap_minus: float
    eta_eff: float


@dataclass(frozen=True)
class Circuits(FrozenResult):
    """Circuits of a trained model and their reduction to (ω, μ).

    Attributes
    ----------
    KQ : ndarray, shape (H, D, D)
        ``KQ_h = K_hᵀQ_h/√D`` with ``D = d + 1``.
    ov : ndarray, shape (H, D)
        ``ov_h = V_hᵀo_h``.
    omega : ndarray, shape (H,)
        Mean of the diagonal of ``KQ_h[:d, :d]``.
    mu : ndarray, shape (H,)
        ``ov_h[d]``.
    dummy : ndarray of bool, shape (H,)
        Heads whose ``|ω_h μ_h|`` is below ``dummy_tol`` times the largest.
    d, n_heads : int
        Properties: covariate dimension and number of heads.
    eta_eff : float
        Property: the effective step ``μᵀω``.
    """

    KQ: np.ndarray
    ov: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    dummy: np.ndarray

    @property
    def d(self) -> int:
        return self.KQ.shape[-1] - 1

    @property
    def n_heads(self) -> int:
        return self.KQ.shape[0]

    @property
    def eta_eff(self) -> float:
        """Effective step ``μᵀω``."""
        return float(self.mu @ self.omega)

    def manifold_gap(self, setting: Setting) -> CircuitManifoldGap:
        r"""Compare the extracted (ω, μ) with the solution manifold :math:`S_\gamma`.

        ``γ`` is the mean ``|ω_h|`` over non-dummy heads; ``μ₊`` (``μ₋``) the sum of
        the positive (negative) ``μ_h`` over non-dummy heads; the prediction is
        :func:`reduced_dynamics.mu_gamma` at ``γ``. (For a state of the
        reduced flow, with the flow's own dummy-head rule, see
        :func:`reduced_dynamics.manifold_gap`.)

        Parameters
        ----------
        setting : Setting
            Scalar data model with ``setting.d`` equal to the circuits' ``d``.

        Returns
        -------
        CircuitManifoldGap

        Raises
        ------
        ValueError
            No non-dummy head, or ``setting.d`` differs from the circuits' ``d``.

        References
        ----------
        docs/theory.md#solution-manifold

        Examples
        --------
        >>> KQ = np.stack([0.3 * np.eye(3), -0.3 * np.eye(3)]); ov = np.array([[0, 0, 1.0], [0, 0, -1.0]])
        >>> gap = circuits_from_arrays(KQ, ov).manifold_gap(Setting(d=2, L=40, sigma2=0.1))
        >>> round(gap.gamma, 6), gap.eta_eff
        (0.3, 0.6)
        """
        setting = as_setting(setting, "Circuits.manifold_gap")
        if setting.d != self.d:
            raise ValueError(f"`setting.d` must equal the circuits' d = {self.d}, got {setting.d}")
        live = ~self.dummy
        if not live.any():
            raise ValueError("`circuits` must have at least one non-dummy head for the manifold gap, got none")
        gamma = float(np.mean(np.abs(self.omega[live])))
        mu = self.mu[live]
        mu_p, mu_m = float(mu[mu > 0].sum()), float(mu[mu < 0].sum())
        with np.errstate(over="ignore"):  # sinh(dγ²) overflows for huge γ: μ_γ underflows to 0
            mg = float(mu_gamma(gamma, setting))

        def rel(x):
            if mg > 0:
                return (x - mg) / mg
            return math.inf if x > 0 else -1.0  # μ_γ → 0⁺: the limit of (x − μ_γ)/μ_γ for x >= 0

        return CircuitManifoldGap(
            gamma=gamma,
            mu_plus=mu_p,
            mu_minus=mu_m,
            mu_gamma=mg,
            rel_gap_plus=rel(mu_p),
            rel_gap_minus=rel(-mu_m),
            eta_eff=self.eta_eff,
        )


def circuits_from_arrays(KQ, ov, *, dummy_tol: float = 0.05) -> Circuits:
    """Reduce circuit arrays ``KQ (H, D, D)``, ``ov (H, D)`` to :class:`Circuits`.

    Parameters
    ----------
    KQ : array_like, shape (H, D, D)
    ov : array_like, shape (H, D)
    dummy_tol : float in (0, 1)
        Relative threshold on ``|ω_h μ_h|`` below which a head is dummy.

    Returns
    -------
    Circuits

    Examples
    --------
    >>> KQ = np.stack([0.3 * np.eye(3), -0.3 * np.eye(3)]); ov = np.array([[0, 0, 1.0], [0, 0, -1.0]])
    >>> c = circuits_from_arrays(KQ, ov)
    >>> c.omega.round(6).tolist(), c.mu.tolist(), c.dummy.tolist()
    ([0.3, -0.3], [1.0, -1.0], [False, False])
    """
    KQ = check_finite_array("KQ", KQ, ndim=3)
    ov = check_finite_array("ov", ov, ndim=2)
    H, D, D2 = KQ.shape
    if D != D2 or D < 2 or ov.shape != (H, D):
        raise ValueError(
            f"`KQ` must have shape (H, D, D) and `ov` shape (H, D) with D >= 2, got {KQ.shape}, {ov.shape}"
        )
    dummy_tol = check_probability("dummy_tol", dummy_tol)
    d = D - 1
    omega = np.einsum("hii->h", KQ[:, :d, :d]) / d
    mu = ov[:, d].copy()
    contrib = np.abs(omega * mu)
    dummy = contrib < dummy_tol * max(contrib.max(), _TINY)
    return Circuits(KQ=KQ, ov=ov, omega=omega, mu=mu, dummy=dummy)


def extract_circuits(model, params, *, dummy_tol: float = 0.05) -> Circuits:
    """Circuits of ``model`` at ``params`` (any model of :mod:`reduced_dynamics.model.attention`).

    Parameters
    ----------
    model : AttentionModel or ReducedModel
    params : dict
    dummy_tol : float in (0, 1)
        Relative threshold on ``|ω_h μ_h|`` below which a head is dummy.

    Returns
    -------
    Circuits
    """
    from reduced_dynamics.model.attention import check_model

    check_model(model, params)
    KQ, ov = model.circuits(params)
    return circuits_from_arrays(KQ, ov, dummy_tol=dummy_tol)


def _ratio(num, den):
    return np.where(den > _TINY, num / np.maximum(den, _TINY), 0.0)


@dataclass(frozen=True)
class PatternMetrics(FrozenResult):
    """Pattern metrics of docs/theory.md#emergent-patterns (:func:`pattern_metrics`; definitions in the module docstring).

    Each is 0 for the exact pattern, except ``sign_match_fraction`` (1).

    Attributes
    ----------
    kq_offdiag_fraction : ndarray, shape (H,)
        Off-diagonal energy fraction of ``KQ_h[:d, :d]``.
    kq_response_row_fraction : ndarray, shape (H,)
        Energy of ``KQ_h[d, :d]`` relative to ``KQ_h[:, :d]``.
    kq_diag_cv : ndarray, shape (H,)
        Coefficient of variation of the diagonal of ``KQ_h[:d, :d]``.
    ov_offresponse_fraction : ndarray, shape (H,)
        ``‖ov_h[:d]‖² / ‖ov_h‖²``.
    kq_offdiag_fraction_max, kq_response_row_fraction_max, kq_diag_cv_max, ov_offresponse_fraction_max : float
        Maxima of the per-head values over non-dummy heads (0 if there is none).
    omega_cv : float
        ``std_h |ω_h| / mean_h |ω_h|`` over non-dummy heads.
    zero_sum_ratio : float
        ``|Σ_h μ_h| / Σ_h |μ_h|`` over non-dummy heads.
    sign_match_fraction : float
        Fraction of non-dummy heads with ``sign ω_h = sign μ_h``.
    n_dummy : int
        Number of dummy heads.
    n_positive, n_negative : int
        Non-dummy heads with ``μ_h > 0``, ``μ_h < 0``.
    """

    kq_offdiag_fraction: np.ndarray
    kq_response_row_fraction: np.ndarray
    kq_diag_cv: np.ndarray
    ov_offresponse_fraction: np.ndarray
    kq_offdiag_fraction_max: float
    kq_response_row_fraction_max: float
    kq_diag_cv_max: float
    ov_offresponse_fraction_max: float
    omega_cv: float
    zero_sum_ratio: float
    sign_match_fraction: float
    n_dummy: int
    n_positive: int
    n_negative: int


def pattern_metrics(circuits: Circuits) -> PatternMetrics:
    """Pattern metrics of docs/theory.md#emergent-patterns (see the module docstring for definitions).

    Parameters
    ----------
    circuits : Circuits

    Returns
    -------
    PatternMetrics

    Examples
    --------
    >>> KQ = np.stack([0.3 * np.eye(3), -0.3 * np.eye(3)]); ov = np.array([[0, 0, 1.0], [0, 0, -1.0]])
    >>> m = pattern_metrics(circuits_from_arrays(KQ, ov))
    >>> m.zero_sum_ratio, m.sign_match_fraction, m.kq_offdiag_fraction_max
    (0.0, 1.0, 0.0)
    """
    c = circuits
    if not isinstance(c, Circuits):
        raise ValueError(f"`circuits` must be a Circuits object, got {type(c).__name__}")
    d = c.d
    B = c.KQ[:, :d, :d]
    diag = np.einsum("hii->hi", B)
    e_block = np.einsum("hij,hij->h", B, B)
    e_diag = np.einsum("hi,hi->h", diag, diag)
    kq_off = _ratio(e_block - e_diag, e_block)
    cols = c.KQ[:, :, :d]
    e_cols = np.einsum("hij,hij->h", cols, cols)
    kq_row = _ratio(np.einsum("hj,hj->h", c.KQ[:, d, :d], c.KQ[:, d, :d]), e_cols)
    kq_cv = _ratio(diag.std(axis=1), np.abs(diag.mean(axis=1)))
    e_ov = np.einsum("hi,hi->h", c.ov, c.ov)
    ov_off = _ratio(e_ov - c.ov[:, d] ** 2, e_ov)
    live = ~c.dummy
    om, mu = np.abs(c.omega[live]), c.mu[live]

    def live_max(a):
        return float(a[live].max()) if live.any() else 0.0

    abs_mu = float(np.abs(mu).sum())
    return PatternMetrics(
        kq_offdiag_fraction=kq_off,
        kq_response_row_fraction=kq_row,
        kq_diag_cv=kq_cv,
        ov_offresponse_fraction=ov_off,
        kq_offdiag_fraction_max=live_max(kq_off),
        kq_response_row_fraction_max=live_max(kq_row),
        kq_diag_cv_max=live_max(kq_cv),
        ov_offresponse_fraction_max=live_max(ov_off),
        omega_cv=float(om.std() / om.mean()) if om.size and om.mean() > _TINY else 0.0,
        zero_sum_ratio=float(abs(mu.sum()) / abs_mu) if abs_mu > _TINY else 0.0,
        sign_match_fraction=float(np.mean(np.sign(c.omega[live]) == np.sign(mu))) if mu.size else 0.0,
        n_dummy=int(c.dummy.sum()),
        n_positive=int(np.sum(mu > 0)),
        n_negative=int(np.sum(mu < 0)),
    )


# ------------------------------------------------------------------ covariates x ~ N(0, Σ)
@dataclass(frozen=True)
class PrecondCircuits(FrozenResult):
    r"""Circuits of a model trained under :math:`x \sim N(0, \Sigma)` (:func:`extract_precond_circuits`).

    Attributes
    ----------
    kq : ndarray, shape (H, d, d)
        The covariate blocks ``B_h = KQ_h[:d, :d]``.
    ov : ndarray, shape (H, d+1)
        ``ov_h = V_hᵀo_h``.
    W : ndarray, shape (d, d)
        Shared direction: best rank-one fit of the non-dummy blocks, ``tr W = d`` (module docstring).
    omega : ndarray, shape (H,)
        Signed scales ``ω_h = ⟨B_h, W⟩_F / ‖W‖²_F``.
    mu : ndarray, shape (H,)
        ``ov_h[d]``.
    dummy : ndarray of bool, shape (H,)
        ``|ω_h μ_h| < dummy_tol · max_k |ω_k μ_k|``.
    cosine_sigma_inv, cosine_identity : ndarray, shape (H,)
        ``|cos(B_h, Σ⁻¹)|`` and ``|cos(B_h, I)|`` (Frobenius; 1 = proportional).
    distance_sigma_inv, distance_identity : ndarray, shape (H,)
        Scale-free distances ``min_c ‖c B_h − Σ⁻¹‖_F / ‖Σ⁻¹‖_F`` (and to ``I``) ``= sqrt(1 − cos²)``.
    W_distance_sigma_inv, W_distance_identity : float
        The same for ``W``.
    P_eff_distance_sigma_inv, P_eff_distance_identity : float
        The same for the effective preconditioner ``P_eff = Σ_h μ_h B_h``.
    rank1_residual : float
        ``‖B − ω ⊗ W‖_F / ‖B‖_F`` over the non-dummy heads (0: one shared ``W`` explains them).
    sigma_inv : ndarray, shape (d, d)
        ``Σ⁻¹`` of the setting (``I`` when isotropic).
    eta_eff : float
        Property: ``μᵀω``.
    P_eff : ndarray, shape (d, d)
        Property: ``Σ_h μ_h B_h``, the step-times-preconditioner of the limit predictor (module docstring);
        ``(μᵀω) W`` when every block is ``ω_h W``.
    """

    kq: np.ndarray
    ov: np.ndarray
    W: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    dummy: np.ndarray
    cosine_sigma_inv: np.ndarray
    cosine_identity: np.ndarray
    distance_sigma_inv: np.ndarray
    distance_identity: np.ndarray
    W_distance_sigma_inv: float
    W_distance_identity: float
    P_eff_distance_sigma_inv: float
    P_eff_distance_identity: float
    rank1_residual: float
    sigma_inv: np.ndarray

    @property
    def eta_eff(self) -> float:
        """Effective step ``μᵀω``."""
        return float(self.mu @ self.omega)

    @property
    def P_eff(self) -> np.ndarray:
        """``Σ_h μ_h B_h``."""
        return np.einsum("h,hij->ij", self.mu, self.kq)


def _rank1(B: np.ndarray) -> np.ndarray:
    """The shared direction of blocks ``B (k, d, d)``: top right-singular vector, scaled to ``tr W = d``.

    When ``|tr W|`` is negligible (``< 1e-9 ‖W‖_F √d``) the scale is ``‖W‖_F = √d`` instead, with the sign
    that makes the largest-magnitude entry positive.
    """
    d = B.shape[-1]
    M = B.reshape(B.shape[0], d * d)
    _, sv, vt = np.linalg.svd(M, full_matrices=False)
    if sv[0] <= _TINY:
        return np.eye(d)
    W = vt[0].reshape(d, d)  # unit Frobenius norm
    tr = float(np.trace(W))
    if abs(tr) > 1e-9 * math.sqrt(d):
        return W * (d / tr)
    flat = W.ravel()
    return W * (math.sqrt(d) * np.sign(flat[np.argmax(np.abs(flat))]))


def precond_circuits_from_arrays(KQ, ov, setting: Setting, *, dummy_tol: float = 0.05) -> PrecondCircuits:
    """Reduce circuit arrays ``KQ (H, D, D)``, ``ov (H, D)`` to :class:`PrecondCircuits` under ``setting.Sigma``.

    Parameters
    ----------
    KQ : array_like, shape (H, D, D)
    ov : array_like, shape (H, D)
    setting : Setting
        Scalar, ``setting.d = D − 1``; ``setting.Sigma`` (``None``: ``I``) gives the ``Σ⁻¹`` compared with.
    dummy_tol : float in (0, 1)
        Relative threshold on ``|ω_h μ_h|`` below which a head is dummy.

    Returns
    -------
    PrecondCircuits

    Raises
    ------
    ValueError
        Shapes, non-finite arrays, ``setting.d`` not ``D − 1``, or a zero ``KQ`` covariate block everywhere.

    Examples
    --------
    >>> S = np.diag([0.5, 1.0, 2.0]); Si = np.linalg.inv(S)
    >>> KQ = np.zeros((2, 4, 4)); KQ[0, :3, :3] = 0.2 * Si; KQ[1, :3, :3] = -0.2 * Si
    >>> ov = np.array([[0, 0, 0, 1.0], [0, 0, 0, -1.0]])
    >>> c = precond_circuits_from_arrays(KQ, ov, Setting(d=3, L=40, Sigma=S))
    >>> c.cosine_sigma_inv.round(6).tolist(), round(c.W_distance_sigma_inv, 6)
    ([1.0, 1.0], 0.0)
    """
    from reduced_dynamics.precond.metrics import abs_cosine, scale_free_distance

    c = circuits_from_arrays(KQ, ov, dummy_tol=dummy_tol)  # validates the arrays and dummy_tol
    setting = as_setting(setting, "extract_precond_circuits")
    d = c.d
    if setting.d != d:
        raise ValueError(f"`setting.d` must equal the circuits' d = {d}, got {setting.d}")
    Si = np.eye(d) if setting.Sigma is None else np.linalg.inv(setting.Sigma)
    Si = 0.5 * (Si + Si.T)
    B = np.array(c.KQ[:, :d, :d])
    if not np.any(B):
        raise ValueError("`KQ` must have a non-zero covariate block KQ[:, :d, :d] in some head, got zeros")
    mu = np.array(c.mu)
    W = _rank1(B)
    omega = np.einsum("hij,ij->h", B, W) / np.sum(W * W)
    contrib = np.abs(omega * mu)
    dummy = contrib < dummy_tol * max(contrib.max(), _TINY)
    live = ~dummy
    W = _rank1(B[live])  # refit on the heads that matter (a dummy head may have a large block)
    omega = np.einsum("hij,ij->h", B, W) / np.sum(W * W)
    Bl = B[live]
    res = Bl - omega[live, None, None] * W
    rank1 = float(np.sqrt(np.sum(res * res) / max(np.sum(Bl * Bl), _TINY)))
    I = np.eye(d)
    P_eff = np.einsum("h,hij->ij", mu, B)
    P_nz = bool(np.any(P_eff))
    safe = np.where(np.any(B != 0, axis=(1, 2))[:, None, None], B, I)  # zero blocks: cosine 0, distance 1
    nz = np.any(B != 0, axis=(1, 2))
    cos_si = np.where(nz, abs_cosine(safe, Si), 0.0)
    cos_i = np.where(nz, abs_cosine(safe, I), 0.0)
    return PrecondCircuits(
        kq=B,
        ov=np.array(c.ov),
        W=W,
        omega=omega,
        mu=mu,
        dummy=dummy,
        cosine_sigma_inv=np.asarray(cos_si, dtype=np.float64),
        cosine_identity=np.asarray(cos_i, dtype=np.float64),
        distance_sigma_inv=np.where(nz, np.sqrt(np.clip(1.0 - cos_si**2, 0.0, 1.0)), 1.0),
        distance_identity=np.where(nz, np.sqrt(np.clip(1.0 - cos_i**2, 0.0, 1.0)), 1.0),
        W_distance_sigma_inv=float(scale_free_distance(W, Si)),
        W_distance_identity=float(scale_free_distance(W, I)),
        P_eff_distance_sigma_inv=float(scale_free_distance(P_eff, Si)) if P_nz else 1.0,
        P_eff_distance_identity=float(scale_free_distance(P_eff, I)) if P_nz else 1.0,
        rank1_residual=rank1,
        sigma_inv=Si,
    )


def extract_precond_circuits(model, params, setting: Setting, *, dummy_tol: float = 0.05) -> PrecondCircuits:
    """:func:`precond_circuits_from_arrays` of ``model.circuits(params)`` (any model of ``model.attention``).

    Parameters
    ----------
    model : AttentionModel or ReducedModel
    params : dict
    setting : Setting
        Scalar; ``setting.d`` the model's ``d``; ``setting.Sigma`` the covariance compared with.
    dummy_tol : float in (0, 1)

    Returns
    -------
    PrecondCircuits
    """
    from reduced_dynamics.model.attention import check_model

    check_model(model, params)
    KQ, ov = model.circuits(params)
    return precond_circuits_from_arrays(KQ, ov, setting, dummy_tol=dummy_tol)


@dataclass(frozen=True)
class PrecondCrossCheck(FrozenResult):
    r"""Trained model vs debiased preconditioned GD under :math:`x \sim N(0, \Sigma)` (:func:`precond_cross_check`).

    Attributes
    ----------
    circuits : PrecondCircuits
        The extraction the comparison uses.
    setting : Setting
        The data model of the evaluation prompts.
    n : int
        Prompts.
    names : tuple of str
        ``("model", "dpgd_own", "dpgd_sigma_inv", "dpgd_optimal", "debiased_gd")``: the trained model; debiased
        preconditioned GD at the model's own ``P = P_eff = Σ_h μ_h B_h``, ``η = 1`` (its limit predictor); at ``P = Σ⁻¹`` with its optimal step; at the
        optimal ``(P*, η*)`` of :func:`reduced_dynamics.precond.exact.optimal_dpgd`; plain debiased GD
        (``P = I``) at its optimal step under Σ.
    risks : dict of str -> RiskEstimate
        Monte Carlo risk of each, on common prompts.
    diffs : dict of str -> RiskDifference
        Paired differences ``model − other`` for every other name.
    exact : dict of str -> float
        Exact risks of the four predictors (:func:`reduced_dynamics.precond.exact.dpgd_risk`), a check of the
        Monte Carlo numbers.
    """

    circuits: PrecondCircuits
    setting: Setting
    n: int
    names: tuple
    risks: dict
    diffs: dict
    exact: dict


def precond_cross_check(
    model, params, setting: Setting, *, n_prompts: int = 100_000, seed, chunk: int = 8192, dummy_tol: float = 0.05
) -> PrecondCrossCheck:
    """Risk of a trained model vs debiased preconditioned GD (own ``P_eff``, ``Σ⁻¹``, optimal ``P*``) on common prompts.

    Prompts come from :func:`reduced_dynamics.sample_prompts` (``x ~ N(0, Σ)``), drawn chunk by chunk
    from one generator seeded by ``seed``; every predictor sees the same prompts, so the paired
    differences have small standard errors.

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    setting : Setting
        Scalar data model of the evaluation prompts (``setting.d`` the model's ``d``; ``L >= 2``).
    n_prompts : int, in [2, 1e9]
    seed : int or Generator
        Required.
    chunk : int, >= 1
        Prompts per batch, at most.
    dummy_tol : float in (0, 1)

    Returns
    -------
    PrecondCrossCheck

    References
    ----------
    docs/theory.md#non-isotropic-covariates
    """
    from reduced_dynamics._validation import check_positive_int
    from reduced_dynamics.estimation._threads import single_blas_thread
    from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts, chunk_sizes, sample_prompts
    from reduced_dynamics.estimation.risk import RiskDifference, RiskEstimate, _Moments
    from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, precond_optimal_eta
    from reduced_dynamics.precond.predictors import debiased_precond_gd

    setting = as_setting(setting, "precond_cross_check")
    if setting.L < 2:
        raise ValueError(f"`setting.L` must be >= 2 for debiased preconditioned GD, got {setting.L}")
    n_prompts = check_n_prompts(n_prompts)
    chunk = check_positive_int("chunk", chunk)
    c = extract_precond_circuits(model, params, setting, dummy_tol=dummy_tol)
    if setting.d != model.d:
        raise ValueError(f"`setting.d` must equal the model's d = {model.d}, got {setting.d}")
    d = setting.d
    Si = c.sigma_inv
    opt = optimal_dpgd(setting)
    preds = {
        "dpgd_own": (c.P_eff, 1.0),
        "dpgd_sigma_inv": (Si, float(precond_optimal_eta(Si, setting))),
        "dpgd_optimal": (opt.P, float(opt.eta)),
        "debiased_gd": (np.eye(d), float(precond_optimal_eta(np.eye(d), setting))),
    }
    fns = {k: debiased_precond_gd(P, eta) for k, (P, eta) in preds.items()}
    names = ("model", *fns)
    H = int(getattr(model, "n_heads", 1))
    L, D = setting.L, d + 1
    per = 8 * (L * (2 * D + d) + L * (3 * H + 8) + 4 * D + 8)  # the batch, its tokens, scores and weights
    rng = as_generator(seed)
    k_other = len(fns)
    mom = _Moments(1 + 2 * k_other)  # model, each other, model − each other
    with single_blas_thread():
        for k in chunk_sizes(n_prompts, per, setting=setting, cap=chunk):
            p = sample_prompts(k, setting, seed=rng)
            a = (model.predict(params, p) - p.y_q) ** 2
            cols = [a]
            others = [(f(p) - p.y_q) ** 2 for f in fns.values()]
            cols += others + [a - o for o in others]
            mom.add(np.stack(cols, axis=1))
    risks = {nm: RiskEstimate(float(mom.mean[i]), mom.stderr(i), n=n_prompts, name=nm) for i, nm in enumerate(names)}
    diffs = {
        nm: RiskDifference(
            float(mom.mean[1 + k_other + i]), mom.stderr(1 + k_other + i), n=n_prompts, first="model", second=nm
        )
        for i, nm in enumerate(fns)
    }
    exact = {k: float(dpgd_risk(P, eta, setting)) for k, (P, eta) in preds.items()}
    return PrecondCrossCheck(
        circuits=c, setting=setting, n=n_prompts, names=names, risks=risks, diffs=diffs, exact=exact
    )
