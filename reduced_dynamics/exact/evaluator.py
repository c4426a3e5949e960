r"""Exact, deterministic finite-L risk of the reduced model (docs/theory.md#exact-risk).

The risk :math:`\mathcal E(\omega,\mu) = E[(y_q - \hat y)^2]` of the reduced
H-head model :math:`\hat y = \sum_h \mu_h \sum_l y_l\,\mathrm{softmax}_l(\omega_h x_l^\top x_q)`
(docs/theory.md#reduced-model) is the quantity that the Monte Carlo engine
:mod:`reduced_dynamics.estimation.risk` estimates for
:class:`~reduced_dynamics.estimation.predictors.MultiHead`; here it is evaluated
by quadrature, to about 1e-14, without sampling.

Reduction
---------
With :math:`r = |x_q|`, :math:`s_l = x_l^\top x_q = r g_l`, :math:`g_l` i.i.d.
:math:`N(0,1)` given :math:`r`, and :math:`p_{h,l} = e^{a_h g_l}/S_h`,
:math:`S_h = \sum_l e^{a_h g_l}`, :math:`a_h = \omega_h r`, the risk conditional on
the covariates (:func:`~reduced_dynamics.estimation.predictors.conditional_loss`,
β, ε and the components of :math:`x_l` orthogonal to :math:`x_q` integrated out) is

.. math:: \tfrac1d\big(r - \textstyle\sum_h \mu_h T_h\big)^2 + \sigma^2
          + \big(\tfrac{d-1}{d} + \sigma^2\big)\textstyle\sum_{hk}\mu_h\mu_k Q_{hk},
   \qquad T_h = \sum_l p_{h,l} g_l,\quad Q_{hk} = \sum_l p_{h,l} p_{k,l} .

Hence the risk is a quadratic form in μ,

.. math:: \mathcal E = 1 + \sigma^2 - 2\mu^\top b + \mu^\top A \mu, \qquad
   b_h = \tfrac1d E[r\,T_h], \qquad A_{hk} = \tfrac1d E\big[T_hT_k + (d-1+d\sigma^2)Q_{hk}\big].

Laplace representation
----------------------
Given :math:`r`, with :math:`f_h(g) = e^{a_h g}`, :math:`K_{pq}^h(t) = E[f_h^p g^q e^{-t f_h}]`,
:math:`\varphi_h = K^h_{00}` and, for two heads,
:math:`M_{pp'q}(t,u) = E[f_h^p f_k^{p'} g^q e^{-t f_h - u f_k}]`, :math:`\Phi = M_{000}`,
the identities :math:`1/S = \int_0^\infty e^{-tS}dt`, :math:`1/S^2 = \int_0^\infty t e^{-tS}dt`,
:math:`1/(S_hS_k) = \iint e^{-tS_h-uS_k}dt\,du` and the independence of the
:math:`g_l` give

.. math::
   E[T_h] &= L\int_0^\infty K^h_{11}\varphi_h^{L-1}\,dt, \qquad
   E[Q_{hh}] = L\int_0^\infty t K^h_{20}\varphi_h^{L-1}\,dt, \\
   E[T_h^2] &= \int_0^\infty t\big(L K^h_{22}\varphi_h^{L-1} + L(L-1)(K^h_{11})^2\varphi_h^{L-2}\big)dt, \\
   E[Q_{hk}] &= L\iint M_{110}\Phi^{L-1}, \qquad
   E[T_hT_k] = \iint \big(L M_{112}\Phi^{L-1} + L(L-1) M_{101}M_{011}\Phi^{L-2}\big).

Quadrature
----------
* :math:`g`: the trapezoidal rule on :math:`[-G, G]` with step
  :math:`\propto 1/\max_h|a_h|` (the integrands are analytic in the strip
  :math:`|\mathrm{Im}\,g| < \pi/(2|a|)`, so the error falls like
  :math:`e^{-\pi^2/(|a|h)}`). The Laplace identities hold exactly for the
  discrete measure of the nodes, so the only error of this step is that of
  replacing the Gaussian by that measure in a bounded functional of the
  :math:`L` scores; :math:`G` is chosen so that :math:`L\,P(|g|>G)` is negligible.
* :math:`t` (and :math:`u`): :math:`t = \tau/(L\,\bar f_h)` with the mean
  :math:`\bar f_h = E f_h`, :math:`\tau = \exp(x - e^{-x})` and the trapezoidal
  rule in :math:`x` (double-exponential decay at :math:`t\to0`, the rule in
  :math:`\log t` for the tail); the upper end is set from a bound on
  :math:`\varphi_h^{L}`. :math:`1-\varphi` and :math:`1-\Phi` are formed with
  ``expm1`` so that :math:`\varphi^{L-1}` keeps its precision for large L.
* :math:`r`: :math:`r^2\sim\chi^2_d`, the trapezoidal rule in :math:`z` with
  :math:`\log r = \log 0.1 + 1 + z - e^{-z}`: the rule in :math:`\log r` (step
  :math:`0.4\min(1/\sqrt{2d}, 0.3)`) above :math:`r \approx 0.1`, bent double-exponentially
  toward :math:`r = 0`, where the conditional risk is analytic in :math:`r^2`.
* For two heads of the same sign, whose sums :math:`S_h, S_k` are dominated by the same
  largest scores, the Laplace step is refined (up to 3x) once :math:`|a|` of the weaker
  head exceeds 1.5.

Every rule is a nested trapezoidal rule; dropping every other node in *every*
dimension at once gives a coarse rule (about a fifth of the cost). Its difference
:math:`\delta` to the fine rule bounds the coarse rule's error; since the error of a
trapezoidal rule on analytic integrands falls geometrically (roughly squaring when
the steps halve), ``error_estimate`` is :math:`30\,\delta^2/s + 10^{-12}s`, with
:math:`s` the size of the terms of the quadratic form. The steps are calibrated so that
at ``tol = 1e-12`` the measured error (against a rule 1.3x finer) is 1e-14 ... 1e-12
on the test states and below 1e-10 on a random sweep (``benchmarks/bench_exact.py``);
other ``tol`` scale every step by :math:`\log(10^{12})/\log(1/\mathrm{tol})`.

The ω-gradient differentiates the integrands under the integral
(:math:`\partial_a K_{pq} = pK_{p,q+1} - tK_{p+1,q+1}`); the μ-gradient is exact,
:math:`-2b + 2A\mu`.

References
----------
docs/theory.md#exact-risk, docs/theory.md#measuring-risks, docs/theory.md#reduced-model
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_bool, check_finite_array, check_positive_float
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["ExactRisk", "exact_risk", "omega_max", "A_MAX", "H_MAX", "L_EXACT_MAX"]

#: Largest allowed :math:`|\omega_h|\, r_{\max}` (``r_max`` the largest quadrature radius, about
#: :math:`\sqrt d + 6`): the g-rule needs about ``60 A`` nodes, and ``e^{3 A G}`` must stay finite.
A_MAX = 12.0
#: Largest number of heads (the cost grows like H²).
H_MAX = 16
#: Largest context length L.
L_EXACT_MAX = 10**8
#: Largest allowed :math:`|\mu_h|` (the risk is quadratic in μ).
MU_MAX = 1e50

# Base steps at tol = 1e-12 (calibrated so that the coarse rule is about tol), scaled by 27.6/log(1/tol).
_HZ0 = 0.4  # log r, in units of 1/sqrt(2d)
_HT0 = 0.27  # x of the Laplace variable
_HG0 = 0.33  # g, times max|a|
_HG_CAP = 0.5  # largest g step (the Gaussian itself)
_LOG_TOL0 = math.log(1e12)
_X_LEFT = -3.7  # τ_min = exp(x - e^{-x}) ≈ e^{-44}: the integrands vanish like τ there


@dataclass(frozen=True)
class ExactRisk(FrozenResult):
    r"""The exact finite-L risk of the reduced model at one state (:func:`exact_risk`).

    Attributes
    ----------
    risk : float
        :math:`\mathcal E(\omega, \mu)`, including the irreducible :math:`\sigma^2`.
    error_estimate : float
        Quadrature error estimate ``30 δ²/s + 1e-12 s`` from the difference ``δ`` to the nested
        rule with half the nodes in every dimension (module docstring); measured errors are
        below it, typically by 100x or more.
    grad_omega : ndarray, shape (H,), or None
        :math:`\partial\mathcal E/\partial\omega` (``None`` unless ``grad=True``).
    grad_mu : ndarray, shape (H,), or None
        :math:`\partial\mathcal E/\partial\mu = -2b + 2A\mu` (``None`` unless ``grad=True``).
    setting : Setting
        The data model.
    linear_coef : ndarray, shape (H,)
        :math:`b`, with :math:`\mathcal E = 1 + \sigma^2 - 2\mu^\top b + \mu^\top A\mu`;
        :math:`b_h = E[|x_q|\,T_h]/d` depends on :math:`\omega_h` only.
    quadratic_coef : ndarray, shape (H, H)
        :math:`A` (symmetric); :math:`A_{hk}` depends on :math:`\omega_h, \omega_k` only.
    grad_linear_coef : ndarray, shape (H,), or None
        :math:`\partial b_h/\partial\omega_h`.
    grad_quadratic_coef : ndarray, shape (H, H), or None
        Entry ``[h, k]`` is :math:`\partial A_{hk}/\partial\omega_h` (for ``h == k`` the
        total derivative of :math:`A_{hh}`).
    grad_error_estimate : float or None
        Largest difference of the gradient's components to the coarse rule (as ``error_estimate``).
    n_nodes : int
        Number of (r, g, t[, u]) quadrature points of the fine rule.
    """

    risk: float
    error_estimate: float
    grad_omega: np.ndarray | None
    grad_mu: np.ndarray | None
    setting: Setting
    linear_coef: np.ndarray
    quadratic_coef: np.ndarray
    grad_linear_coef: np.ndarray | None = None
    grad_quadratic_coef: np.ndarray | None = None
    grad_error_estimate: float | None = None
    n_nodes: int = 0


# --------------------------------------------------------------------------- validation


def _check_setting(setting, where) -> tuple[int, int, float]:
    setting = as_setting(setting).require_scalar(where).require_isotropic(where).require_softmax(where)
    d, L, sigma2 = int(setting.d), int(setting.L), float(setting.sigma2)
    if L < 2:
        raise ValueError(f"`setting.L` must be an integer in [2, {L_EXACT_MAX}] for {where}, got {L}")
    if L > L_EXACT_MAX:
        raise ValueError(f"`setting.L` must be an integer in [2, {L_EXACT_MAX}] for {where}, got {L}")
    return d, L, sigma2


def _radial_rule(d: int, hz: float):
    """Nodes ``r`` and normalised weights of the χ_d density (index ``j``: the coarse rule keeps even j).

    Trapezoidal in ``z`` with ``log r = s_b + z - e^{-z}``: the rule in ``log r`` (step
    ``hz·min(1/sqrt(2d), 0.3)``) for ``r`` above about ``0.1``, bent double-exponentially
    toward ``r = 0`` below it (where the conditional risk is analytic in ``r²``), so
    that small ``d`` needs no long tail of nodes in ``log r``.
    """
    hs = hz * min(1.0 / math.sqrt(2.0 * d), 0.3)
    s_b = math.log(0.1) + 1.0
    top = 0.5 * d * (math.log(d) - 1.0)  # max of the log-density d s - e^{2s}/2
    s_hi = 0.5 * math.log(d + 12.0 * math.sqrt(d) + 90.0)  # the log-density is below top - 40 beyond
    j = np.arange(int(math.floor(-6.0 / hs)), int(math.ceil((s_hi - s_b + 1.0) / hs)) + 1)
    z = j * hs
    em = np.exp(-z)
    s = s_b + z - em
    with np.errstate(over="ignore"):
        logp = d * s - 0.5 * np.exp(2.0 * s)
    keep = logp > top - 40.0
    j, s, logp, em = j[keep], s[keep], logp[keep], em[keep]
    p = np.exp(logp - top) * (1.0 + em)
    return np.exp(s), p, j


def _r_max(d: int) -> float:
    """Largest radius of the radial rule at the default ``tol`` (the bound does not depend on ``tol``)."""
    r, _, _ = _radial_rule(d, _HZ0)
    return float(r[-1])


def omega_max(setting) -> float:
    r"""Largest :math:`|\omega_h|` that :func:`exact_risk` accepts at this setting.

    ``A_MAX / r_max`` with ``r_max`` the largest radius of the quadrature (about
    :math:`\sqrt{d + 12\sqrt d + 90}`): 1.24 at d = 5, 1.08 at d = 20, 0.72 at d = 100.

    Parameters
    ----------
    setting : Setting
        Scalar and isotropic (only ``d`` enters).

    Returns
    -------
    float
    """
    setting = (
        as_setting(setting).require_scalar("omega_max").require_isotropic("omega_max").require_softmax("omega_max")
    )
    return A_MAX / _r_max(int(setting.d))


def _check_state(omega, mu, d, tol):
    omega = check_finite_array("omega", omega, ndim=1)
    mu = check_finite_array("mu", mu, ndim=1)
    if omega.shape != mu.shape:
        raise ValueError(f"`omega` and `mu` must have the same shape (H,), got {omega.shape} and {mu.shape}")
    if omega.size > H_MAX:
        raise ValueError(f"`omega` must have at most {H_MAX} heads, got {omega.size}")
    if np.max(np.abs(mu)) > MU_MAX:
        raise ValueError(f"`mu` must satisfy |mu_h| <= {MU_MAX:g}, got max |mu| = {np.max(np.abs(mu)):.4g}")
    rm = _r_max(d)
    if np.max(np.abs(omega)) * rm > A_MAX:
        raise ValueError(
            f"`omega` must satisfy |omega_h| <= {A_MAX / rm:.6g} at d = {d} (|omega|·r_max <= {A_MAX:g}, "
            f"r_max = {rm:.4g}: beyond it the softmax is nearly a hard max and the quadrature would need "
            f"too many nodes), got max |omega| = {np.max(np.abs(omega)):.6g}"
        )
    return omega, mu


def _check_tol(tol) -> float:
    tol = check_positive_float("tol", tol)
    if not 1e-15 <= tol <= 1e-3:
        raise ValueError(f"`tol` must be in [1e-15, 1e-3], got {tol!r}")
    return tol


# --------------------------------------------------------------------------- quadrature kernels


def _powz(x, n):
    """``x**n`` for ``0 <= x <= 1`` without denormals (values below e^-600 flushed to 0)."""
    if n == 0:
        return np.ones_like(x)
    lp = n * np.log(x)
    out = np.exp(np.maximum(lp, -600.0))
    out[lp < -600.0] = 0.0
    return out


def _pow_from_deficit(one_minus, n):
    """``(1 - q)**n`` from ``q = one_minus`` (accurate for small q and large n), denormals flushed."""
    if n == 0:
        return np.ones_like(one_minus)
    lp = n * np.log1p(-np.minimum(one_minus, 1.0))
    out = np.exp(np.maximum(lp, -600.0))
    out[lp < -600.0] = 0.0
    return out


def _gauss_quantile_tail(logp):
    """z > 0 with log Φ(-z) ≈ logp (an upper bound suffices: used only to place a cut-off)."""
    # Φ(-z) <= e^{-z²/2}/2 for z >= 0: z = sqrt(2(-logp - log 2)) makes Φ(-z) <= e^{logp}
    return math.sqrt(max(2.0 * (-logp - math.log(2.0)), 0.0))


class _Heads:
    """Matrices of all heads on one group of radii: Laplace nodes and ``e^{-t f(g)}`` on the g-grid.

    Shapes: ``a`` (R, H); per head ``E[h]``, ``D[h]`` (R, n_g, n_t[h]) with ``D = 1 - E``
    (from ``expm1``); ``t[h]``, ``c[h]`` (R, n_t[h]) the Laplace nodes and trapezoidal weights.
    """

    def __init__(self, r, omega, g, w, L, ht):
        self.a = r[:, None] * omega[None, :]
        self.f, self.E, self.D, self.t, self.c = [], [], [], [], []
        z = _gauss_quantile_tail(-50.0 / L - math.log(2.0))
        for h in range(omega.size):
            a = self.a[:, h]
            lf = a[:, None] * g[None, :]  # (R, n_g)
            f = np.exp(lf)
            log_mean = np.log(f @ w)  # (R,)
            # upper cut-off: φ(t)^L <= e^{-50}; φ(t) <= P(|a| g < -|a| z) + exp(-t e^{-|a| z})
            log_t_hi = np.abs(a) * z + math.log(50.0 / L + math.log(2.0)) + 1.0
            x_right = float(np.max(log_t_hi + math.log(L) + log_mean))
            n = int(math.ceil((x_right - _X_LEFT) / ht))
            n += n % 2  # even: the coarse rule keeps both ends
            x = _X_LEFT + ht * np.arange(n + 1)
            em = np.exp(-x)
            logt = (x - em)[None, :] - (math.log(L) + log_mean)[:, None]  # (R, n_t)
            if L >= 3:
                # drop the nodes where φ^(L-2) < e^-46 at every radius (Φ <= φ_h: also for the pairs);
                # φ from every 4th g-node is accurate enough to place this cut-off
                ws = w[::4] / w[::4].sum()
                Xs = np.exp(np.minimum(logt[:, None, :] + lf[:, ::4, None], 700.0))
                lp = (L - 2) * np.log1p(-np.minimum(np.matmul(ws, -np.expm1(-Xs)), 1.0))
                alive = np.nonzero(np.max(lp, axis=0) > -46.0)[0]
                m = int(alive[-1]) + 3 if alive.size else 3
                m = min(m + m % 2, n + 1)
                m -= 1 - m % 2  # odd length: the coarse rule keeps both ends
                x, em, logt = x[:m], em[:m], logt[:, :m]
            X = np.exp(np.minimum(logt[:, None, :] + lf[:, :, None], 700.0))
            D = -np.expm1(-X)
            E = np.exp(-X)
            E[X > 60.0] = 0.0  # e^-60: negligible even against f³ e^{-tf}, and no denormals in the products
            t = np.exp(logt)
            self.f.append(f)
            self.E.append(E)
            self.D.append(D)
            self.t.append(t)
            self.c.append(ht * t * (1.0 + em)[None, :])


def _sum_t(c, F):
    """Σ_t c[r, t] F[r, t] -> (R,)."""
    return np.einsum("rt,rt->r", c, F)


def _head_moments(hs: _Heads, h, g, w, L, grad, sl):
    """Own-head integrals E[T_h], E[Q_hh], E[T_h²] (R,), and their a_h-derivatives."""
    step = 1 if sl.step is None else sl.step
    E = hs.E[h][:, sl, sl]
    t = hs.t[h][:, sl]
    c = hs.c[h][:, sl] * step
    f = hs.f[h][:, sl]
    gg = g[sl][None, :]
    fw = w[sl][None, :] * f
    rows = [fw * gg, fw * f, fw * f * gg * gg]
    if grad:
        rows += [fw * gg * gg, fw * f * gg, fw * f * f * gg, fw * f * gg**3, fw * f * f * gg**3]
    K = np.matmul(np.stack(rows, axis=1), E)  # (R, q, n_t)
    one_minus = np.matmul(w[sl], hs.D[h][:, sl, sl])  # (R, n_t)
    P2 = _pow_from_deficit(one_minus, L - 2)
    P1 = P2 * (1.0 - one_minus)
    k11, k20, k22 = K[:, 0], K[:, 1], K[:, 2]
    ET = L * _sum_t(c, k11 * P1)
    EQ = L * _sum_t(c, t * k20 * P1)
    ETT = _sum_t(c, t * (L * k22 * P1 + L * (L - 1) * k11 * k11 * P2))
    if not grad:
        return ET, EQ, ETT, None
    k12, k21, k31, k23, k33 = K[:, 3], K[:, 4], K[:, 5], K[:, 6], K[:, 7]
    dphi = -t * k11
    dk11 = k12 - t * k22
    dk20 = 2 * k21 - t * k31
    dk22 = 2 * k23 - t * k33
    P3 = _pow_from_deficit(one_minus, L - 3) if L >= 3 else np.zeros_like(P2)
    dET = L * _sum_t(c, dk11 * P1 + (L - 1) * k11 * P2 * dphi)
    dEQ = L * _sum_t(c, t * (dk20 * P1 + (L - 1) * k20 * P2 * dphi))
    dETT = _sum_t(
        c,
        t
        * (
            L * dk22 * P1
            + L * (L - 1) * k22 * P2 * dphi
            + 2 * L * (L - 1) * k11 * dk11 * P2
            + L * (L - 1) * (L - 2) * k11 * k11 * P3 * dphi
        ),
    )
    return ET, EQ, ETT, (dET, dEQ, dETT)


def _pair_moments(hs: _Heads, h, k, g, w, L, grad, sl):
    """Two-head integrals E[Q_hk], E[T_h T_k] (R,), and their derivatives in a_h and a_k."""
    step = 1 if sl.step is None else sl.step
    Eh, Ek = hs.E[h][:, sl, sl], hs.E[k][:, sl, sl]
    Dh, Dk = hs.D[h][:, sl, sl], hs.D[k][:, sl, sl]
    ct, cu = hs.c[h][:, sl] * step, hs.c[k][:, sl] * step
    t, u = hs.t[h][:, sl][:, :, None], hs.t[k][:, sl][:, None, :]
    fh, fk = hs.f[h][:, sl], hs.f[k][:, sl]
    gg, ww = g[sl][None, :], w[sl]
    # 1 - Φ = E[1-e_h] + E[1-e_k] - E[(1-e_h)(1-e_k)], accurate when Φ is close to 1
    one_minus = (
        np.matmul(ww, Dh)[:, :, None] + np.matmul(ww, Dk)[:, None, :] - np.matmul(Dh.transpose(0, 2, 1) * ww, Dk)
    )
    P2 = _pow_from_deficit(one_minus, L - 2)
    P1 = P2 * (1.0 - one_minus)
    R, n_t, n_u = Eh.shape[0], Eh.shape[2], Ek.shape[2]
    EhT = Eh.transpose(0, 2, 1)  # (R, n_t, n_g)

    def block(left_rows, right_weight):
        """M-blocks Σ_g row(g) E_h(g,t) right_weight(g) E_k(g,u), one (R, n_t, n_u) per row."""
        q = len(left_rows)
        Lm = np.empty((R, q, n_t, EhT.shape[2]))  # the rows' products written in place (no concatenation)
        np.multiply(EhT[:, None, :, :], np.stack(left_rows, axis=1)[:, :, None, :], out=Lm)
        return np.matmul(Lm.reshape(R, q * n_t, -1), Ek * right_weight[:, :, None]).reshape(R, q, n_t, n_u)

    fwh = ww[None, :] * fh
    w1 = np.broadcast_to(ww[None, :], fh.shape)
    rows0 = [fwh * gg]  # with f_k^0: M101 [, M102, M202]
    if grad:
        rows0 += [fwh * gg * gg, fwh * fh * gg * gg]
    B0 = block(rows0, np.ones_like(fk))
    rows1 = [w1 * gg, fwh, fwh * gg * gg]  # with f_k^1: M011, M110, M112 [, M111, M211, M113, M213, M012]
    if grad:
        rows1 += [fwh * gg, fwh * fh * gg, fwh * gg**3, fwh * fh * gg**3, w1 * gg * gg]
    B1 = block(rows1, fk)
    M101 = B0[:, 0]
    M011, M110, M112 = B1[:, 0], B1[:, 1], B1[:, 2]

    def integral(F):
        return np.einsum("rt,rtu,ru->r", ct, F, cu)

    EQ = L * integral(M110 * P1)
    ETT = integral(L * M112 * P1 + L * (L - 1) * M101 * M011 * P2)
    if not grad:
        return EQ, ETT, None
    # the derivatives: Σ_tu c_t c_u F P_j as dot products with the weights W_j = c_t c_u P_j (the factors of L
    # taken out; the risk itself keeps the integrals above, whose last bits the Richardson check of A4 amplifies)
    C = ct[:, :, None] * cu[:, None, :]
    W1, W2 = C * P1, C * P2

    def dot(A, W):
        return np.einsum("rtu,rtu->r", A, W)

    X = M101 * M011
    B2 = block([fwh * gg, fwh * gg**3, w1 * gg * gg], fk * fk)  # M121, M123, M022
    M102, M202 = B0[:, 1], B0[:, 2]
    M111, M211, M113, M213, M012 = B1[:, 3], B1[:, 4], B1[:, 5], B1[:, 6], B1[:, 7]
    M121, M123, M022 = B2[:, 0], B2[:, 1], B2[:, 2]
    W3 = C * (_pow_from_deficit(one_minus, L - 3) if L >= 3 else np.zeros_like(P2))
    c1, c2, c3 = L, L * (L - 1), L * (L - 1) * (L - 2)
    q111, q113 = dot(M111, W1), dot(M113, W1)
    out = []
    # d/da_h: ∂Φ = -t M101, ∂M110 = M111 - t M211, ∂M112 = M113 - t M213, ∂M101 = M102 - t M202, ∂M011 = -t M112;
    # d/da_k: ∂Φ = -u M011, ∂M110 = M111 - u M121, ∂M112 = M113 - u M123, ∂M101 = -u M112, ∂M011 = M012 - u M022.
    # With the differentiated head's Laplace variable s (t or u), its first-moment block m (M101 or M011; ∂Φ = -s m),
    # the other head's m' and ∂m = m0 - s m1:
    for s_, dM110_s, dM112_s, m, m_other, m0, m1 in (
        (t, M211, M213, M101, M011, M102, M202),
        (u, M121, M123, M011, M101, M012, M022),
    ):
        sW1, sW2, sW3 = s_ * W1, s_ * W2, s_ * W3
        # E[Q]' = L ∂M110 P1 + L(L-1) M110 P2 ∂Φ
        dEQ = c1 * (q111 - dot(dM110_s, sW1)) - c2 * dot(M110 * m, sW2)
        # E[TT]' = L ∂M112 P1 + L(L-1) (M112 ∂Φ + ∂m m' + m ∂m') P2 + L(L-1)(L-2) m m' P3 ∂Φ, where ∂m' = -s M112
        # (a term of the other head's derivative: -s M112 m, as M112 ∂Φ is)
        dETT = (
            c1 * (q113 - dot(dM112_s, sW1))
            + c2 * (dot(m0 * m_other, W2) - dot(m1 * m_other, sW2) - 2.0 * dot(M112 * m, sW2))
            - c3 * dot(X * m, sW3)
        )
        out.append((dEQ, dETT))
    return EQ, ETT, out


def _conditional(r, omega, L, G, h, ht, grad):
    """Fine and coarse conditional moments on a group of radii ``r`` (R,) sharing the g-step ``h``.

    Returns two tuples (fine, coarse) of ``(ET, ETT, EQ, dET, dETT, dEQ)`` with shapes
    (R, H), (R, H, H), (R, H, H), (R, H), (R, H, H), (R, H, H); ``dX[:, h, k] = ∂X_hk/∂a_h``.
    """
    H = omega.size
    R = r.size
    n = int(math.ceil(G / h))
    n += n % 2
    g = h * np.arange(-n, n + 1)
    dens = np.exp(-0.5 * g * g)
    hs = _Heads(r, omega, g, dens / dens.sum(), L, ht)
    out = []
    for sl in (slice(None), slice(None, None, 2)):
        w = np.zeros_like(dens)
        w[sl] = dens[sl] / dens[sl].sum()
        ET = np.zeros((R, H))
        ETT = np.zeros((R, H, H))
        EQ = np.zeros((R, H, H))
        dET = np.zeros((R, H))
        dETT = np.zeros((R, H, H))
        dEQ = np.zeros((R, H, H))
        for i in range(H):
            et, eq, ett, der = _head_moments(hs, i, g, w, L, grad, sl)
            ET[:, i], EQ[:, i, i], ETT[:, i, i] = et, eq, ett
            if grad:
                dET[:, i], dEQ[:, i, i], dETT[:, i, i] = der
        for i in range(H):
            for j in range(i + 1, H):
                eq, ett, der = _pair_moments(hs, i, j, g, w, L, grad, sl)
                EQ[:, i, j] = EQ[:, j, i] = eq
                ETT[:, i, j] = ETT[:, j, i] = ett
                if grad:
                    (dEQ[:, i, j], dETT[:, i, j]), (dEQ[:, j, i], dETT[:, j, i]) = der
        out.append((ET, ETT, EQ, dET, dETT, dEQ))
    nt = [x.shape[2] for x in hs.E]
    n_nodes = R * g.size * (sum(nt) + sum(nt[i] * nt[j] for i in range(H) for j in range(i + 1, H)))
    return out, n_nodes


#: Largest |a| of a same-sign pair at which the base Laplace step suffices (calibrated: at
#: ω = (0.943, 0.673), d = 30 the step 0.27 left 2.5e-8, 0.15 left 7e-14).
_A_SAME_SIGN = 1.5


def _pair_t_step(ht, omega, r):
    """The Laplace step at radius ``r``: finer when two heads of the same sign have large ``|a|``.

    For same-sign heads ``S_h`` and ``S_k`` are dominated by the same largest scores, and the
    2-D integrand of ``1/(S_h S_k)`` concentrates along a ridge that the base step does not
    resolve once ``|a| = |ω| r`` exceeds about 1.5 (refined at most 3x; opposite-sign pairs need none).
    """
    pos = omega[omega > 0]
    neg = -omega[omega < 0]
    a = 0.0
    for side in (pos, neg):
        if side.size >= 2:
            a = max(a, float(np.sort(side)[-2]) * r)  # the smaller |ω| of the strongest same-sign pair
    return ht * max(min(1.0, _A_SAME_SIGN / a), 1.0 / 3.0) if a > 0 else ht


def _groups(r, omega, hg):
    """Split the radii (ascending) into groups sharing one g-step (within a factor 1.25 of each radius's own)."""
    amax = float(np.max(np.abs(omega)))
    steps = np.minimum(_HG_CAP, hg / np.maximum(amax * r, 1e-300))
    groups, start = [], 0
    for i in range(1, r.size + 1):
        if i == r.size or steps[i] < steps[start] / 1.25:
            groups.append((start, i, float(steps[i - 1])))
            start = i
    return groups


def _evaluate(omega, mu, d, L, sigma2, grad, scale):
    """One evaluation with the steps scaled by ``scale``: fine and coarse (b, A, db, dA), node count."""
    hz, ht, hg = _HZ0 * scale, _HT0 * scale, _HG0 * scale
    G = math.sqrt(2.0 * (math.log(max(L, 2)) + 46.0))  # L P(|g| > G) <= 1e-20
    r, p, j = _radial_rule(d, hz)
    H = omega.size
    cq = d - 1 + d * sigma2
    even = (j % 2) == 0
    acc = [[np.zeros(H), np.zeros((H, H)), np.zeros(H), np.zeros((H, H)), 0.0] for _ in range(2)]
    n_nodes = 0
    with single_blas_thread():
        for lo, hi, h in _groups(r, omega, hg):
            rr, pp = r[lo:hi], p[lo:hi]
            levels, nn = _conditional(rr, omega, L, G, h, _pair_t_step(ht, omega, float(rr[-1])), grad)
            n_nodes += nn
            for k, (ET, ETT, EQ, dET, dETT, dEQ) in enumerate(levels):
                wt = pp if k == 0 else 2.0 * pp * even[lo:hi]
                acc[k][0] += (wt * rr) @ ET
                acc[k][1] += np.einsum("r,rhk->hk", wt, ETT + cq * EQ)
                acc[k][4] += float(wt.sum())
                if grad:
                    acc[k][2] += (wt * rr * rr) @ dET
                    acc[k][3] += np.einsum("r,rhk->hk", wt * rr, dETT + cq * dEQ)
    return [(b / (d * nm), A / (d * nm), db / (d * nm), dA / (d * nm)) for b, A, db, dA, nm in acc], n_nodes


def _risk_of(b, A, mu, sigma2):
    return 1.0 + sigma2 - 2.0 * float(mu @ b) + float(mu @ A @ mu)


def exact_risk(omega, mu, setting, *, grad=False, tol=1e-12) -> ExactRisk:
    r"""Exact finite-L risk of the reduced model, by deterministic quadrature (docs/theory.md#exact-risk).

    The same quantity as the Monte Carlo risk of
    ``MultiHead(omega, mu)`` (:func:`reduced_dynamics.estimate_risk`), without sampling
    error: the quadrature of the module docstring, accurate to about 1e-14 at the
    default ``tol``.

    Parameters
    ----------
    omega : array_like, shape (H,)
        KQ scales of the heads, :math:`|\omega_h| \le` :func:`omega_max` (1.24 at d = 5).
    mu : array_like, shape (H,)
        OV values of the heads.
    setting : Setting
        Scalar, isotropic, with finite :math:`L \ge 2`.
    grad : bool
        Also compute the gradient in (ω, μ).
    tol : float, in [1e-15, 1e-3]
        Accuracy target: every quadrature step is scaled by ``log(1e12)/log(1/tol)``
        (calibrated at the default); ``error_estimate`` reports what was reached.

    Returns
    -------
    ExactRisk
        ``risk``, ``error_estimate``, ``grad_omega`` and ``grad_mu`` (shape (H,), or None),
        ``setting``, and the coefficients of the quadratic form in μ.

    Raises
    ------
    ValueError
        Bad input, naming the parameter (``omega`` beyond the range above, ``setting.L < 2``, ...).
    OverflowError
        A non-finite result (reported, never returned as NaN).

    References
    ----------
    docs/theory.md#exact-risk
    """
    tol = _check_tol(tol)
    d, L, sigma2 = _check_setting(setting, "exact_risk")
    omega, mu = _check_state(omega, mu, d, tol)
    grad = check_bool("grad", grad)
    scale = _LOG_TOL0 / math.log(1.0 / tol)
    with np.errstate(all="ignore"):
        (fine, coarse), n_nodes = _evaluate(omega, mu, d, L, sigma2, grad, scale)
    b, A = fine[0], fine[1]
    risk = _risk_of(b, A, mu, sigma2)
    size = 1.0 + sigma2 + 2.0 * float(np.abs(mu) @ np.abs(b)) + float(np.abs(mu) @ np.abs(A) @ np.abs(mu))
    diff = abs(risk - _risk_of(coarse[0], coarse[1], mu, sigma2))
    err = _estimate(diff, size)
    if not (math.isfinite(risk) and math.isfinite(err)):
        raise OverflowError(
            f"`mu` too large: the risk is not finite in float64 at `omega`={omega.tolist()}, "
            f"`mu`={mu.tolist()}; reduce |mu|"
        )
    grad_omega = grad_mu = db = dA = grad_err = None
    if grad:
        db, dA = fine[2], fine[3]
        grad_omega = _grad_omega(mu, db, dA)
        grad_mu = -2.0 * b + 2.0 * A @ mu
        both = np.concatenate([grad_omega, grad_mu])
        both_c = np.concatenate([_grad_omega(mu, coarse[2], coarse[3]), -2.0 * coarse[0] + 2.0 * coarse[1] @ mu])
        if not np.all(np.isfinite(both)):
            raise OverflowError("`mu` too large: the gradient is not finite in float64; reduce |mu|")
        gsize = size + float(np.max(np.abs(both)))
        grad_err = _estimate(float(np.max(np.abs(both - both_c))), gsize)
    return ExactRisk(
        risk=float(risk),
        error_estimate=float(err),
        grad_omega=grad_omega,
        grad_mu=grad_mu,
        setting=as_setting(setting),
        linear_coef=b,
        quadratic_coef=A,
        grad_linear_coef=db,
        grad_quadratic_coef=dA,
        grad_error_estimate=grad_err,
        n_nodes=int(n_nodes),
    )


#: Safety factor of the error estimate ``C·diff²/size`` (calibrated in the tests: ≥ 2× the measured error).
_EST_FACTOR = 30.0


def _estimate(diff, size):
    """Error estimate of the fine rule from its difference ``diff`` to the nested coarse rule.

    The nested trapezoidal rules converge geometrically (halving every step roughly squares the
    relative error), so the fine rule's error is about ``(diff/size)² size``; ``_EST_FACTOR``
    makes it conservative, and a floor ``1e-12 size`` is added: the level down to which the
    tests resolve the actual error (a 1.3x finer rule), which rounding and the cut-offs of
    the rules (at e^-40 ... e^-46) stay below.
    """
    return _EST_FACTOR * diff * diff / size + 1e-12 * size


def _grad_omega(mu, db, dA):
    """∂E/∂ω_h = -2 μ_h ∂b_h + μ_h² ∂A_hh + 2 Σ_{k≠h} μ_h μ_k ∂A_hk/∂ω_h."""
    off = dA - np.diag(np.diag(dA))
    return -2.0 * mu * db + mu * mu * np.diag(dA) + 2.0 * mu * (off @ mu)
