r"""Fused Monte Carlo kernels of the risk engine (internal).

:func:`reduced_dynamics.estimate_risks` evaluates the package's own predictor
classes with the kernels below instead of the generic ``weights`` → loss path:
one block of prompts is drawn into reused buffers and *all* the predictors'
losses come out of a few shared reductions, with no per-predictor weight
arrays and no per-call validation. The generic path stays for user-defined
:class:`~reduced_dynamics.estimation.predictors.Predictor` subclasses and for
the ``"full"`` sampler; ``tests/reduced_dynamics/estimation/test_fast.py``
checks both paths against each other on the same prompts.

Statistics sampler (``"stats"``: scores :math:`s_l`, :math:`r^2 = |x_q|^2`,
``y``, ``y_q``). With :math:`S_1 = \sum_l s_l`, :math:`S_2 = \sum_l s_l^2`,
:math:`S_y = \sum_l s_l y_l`, :math:`Y_1 = \sum_l y_l`, :math:`c = \eta/L`:

* GD: :math:`\hat y = c S_y`, :math:`w\cdot s = c S_2`, :math:`|w|^2 = c^2 S_2`;
* debiased GD: :math:`\hat y = c(S_y - S_1 Y_1/L)`, :math:`w\cdot s = c S_c`,
  :math:`|w|^2 = c^2 S_c`, :math:`S_c = S_2 - S_1^2/L`;
* softmax heads: :math:`e_{hl} = \exp(\omega_h s_l)` (shifted by
  :math:`\omega_h \max_l s_l` only in the rows where :math:`|\omega_h| \max_l |s_l| > 300`,
  decided per prompt, so the result does not depend on how a block is sliced),
  :math:`\hat y = \sum_h \mu_h (e_h\cdot y)/(e_h\cdot 1)`;

and the conditional loss is the statistics-only form of
:func:`~reduced_dynamics.estimation.predictors.conditional_loss`.

Gram sampler (``"gram"``, Bayes ridge and ŷ = 0; isotropic, ``L >= d``).
Rotate so that :math:`x_q = r e_1`. Write :math:`X = QR` (``Q`` of size
``L × d`` with orthonormal columns, ``R`` upper triangular with positive
diagonal). For Gaussian ``X``, ``R`` has Bartlett's distribution, independent of
``Q``:

.. math:: R_{ii}^2 \sim \chi^2_{L-i+1}\ (i = 1..d),\qquad R_{ij} \sim N(0,1)\ (i<j),

all independent, and :math:`G = X^\top X = R^\top R \sim W_d(L, I)`. Given ``X``,
:math:`X^\top\varepsilon = R^\top u` with :math:`u = Q^\top\varepsilon \sim N(0,\sigma^2 I_d)`.
With :math:`M = G + \lambda I` and :math:`h = M^{-1} e_1` (so :math:`G h = e_1 - \lambda h`)
the ridge prediction :math:`\hat y = x_q^\top M^{-1} X^\top y` and the target are

.. math:: \hat y = r\,(\beta_1 - \lambda h^\top\beta + (Rh)^\top u),\qquad
          y_q = r\beta_1 + \sigma\varepsilon_q ,\qquad
          y_q - \hat y = r\lambda\, h^\top\beta - r\,(Rh)^\top u + \sigma\varepsilon_q ,

and the conditional loss given the covariates is
:math:`r^2\lambda^2|h|^2/d + \sigma^2(1 + r^2|Rh|^2)`. One prompt costs
``d`` Gamma and ``d(d-1)/2`` normal variates for ``G``, one Gamma for
:math:`r^2` and ``2d + 1`` normals for :math:`\beta, u, \varepsilon_q` (none
with ``conditional=True``) instead of the ``(L + 2) d + L + 1`` normals of the
full sampler, and no ``L × d`` Gram product.
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics._float32_normals import MINUS_TWO as _MINUS_TWO32
from reduced_dynamics._float32_normals import TWO as _TWO32
from reduced_dynamics._float32_normals import TWO_PI as _TWO_PI32
from reduced_dynamics._float32_normals import unit_floats
from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    LinearAttention,
    MultiHead,
    SingleHead,
    VanillaGD,
    Zero,
)

#: a row of ``exp(ω s_l)`` whose sum leaves ``[_TINY, _HUGE]`` is recomputed max-shifted (float32: ``_TINY32``...)
_TINY, _HUGE = 1e-280, 1e280
_TINY32, _HUGE32 = 1e-30, 1e30
_LOG2E = 1.0 / math.log(2.0)


# ------------------------------------------------------------------ specs


def stats_spec(p):
    """The fused form of a predictor on the statistics sampler, or None (generic path)."""
    t = type(p)
    if t is Zero:
        return ("zero",)
    if t is VanillaGD:
        return ("gd", float(p.eta))
    if t is DebiasedGD:
        return ("dgd", float(p.eta))
    if t is LinearAttention:
        return ("gd", float(p.mu @ p.omega))  # as linear_attention_weights: η = μᵀω
    if t is MultiHead:
        return ("heads", tuple(p.omega.tolist()), tuple(p.mu.tolist()))
    if t is SingleHead:
        return ("heads", (float(p.omega),), (float(p.mu),))
    return None


def gram_spec(p, setting):
    """The fused form of a predictor on the Gram sampler, or None (the sampler cannot serve it)."""
    t = type(p)
    if t is Zero:
        return ("zero",)
    if t is BayesRidge:
        lam = setting.sigma2 * setting.d if p.lam is None else p.lam
        return ("ridge", float(lam))
    return None


# ------------------------------------------------------------------ single-precision streams (versions 3, 4)

# the constants of the transform: reduced_dynamics._float32_normals (shared with the trainer's sampler)


def normals32(rng, out) -> np.ndarray:
    r"""Fill the float32 array ``out`` (``N`` entries) with standard normals by Box–Muller (stream versions 3, 4).

    The bits are ``W = ceil(N/2)`` 64-bit words of ``rng.bit_generator.random_raw``, viewed as
    ``2W`` little-endian 32-bit words ``w_j``; with ``k_j = w_j >> 9`` (the top 23 bits),
    :math:`\rho_i = \sqrt{-2\log(1 - k_i 2^{-23})}` and :math:`\theta_i = 2\pi k_{W+i} 2^{-23}`
    (``i < W``), entry ``i`` (flat order) is :math:`\rho_i\cos\theta_i` and entry ``W + i`` is
    :math:`\rho_i\sin\theta_i` (the last sine is dropped when ``N`` is odd), all in float32 with
    numpy's vectorised ``log``, ``sqrt``, ``cos``, ``sin``: the transform of the trainer's sampler
    (``reduced_dynamics.model._batches``). The radius is at most ``sqrt(46 log 2) = 5.65``: the
    tail beyond it (probability ``1.6e-8`` per normal) is cut off (and a radius is exactly 0 when its
    word's top 23 bits are 0, probability ``2⁻²³``), which lowers the variance by
    ``5e-7`` relative, and the values have float32 resolution. About four times as fast as
    numpy's float64 ziggurat here.
    """
    if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.flags.c_contiguous):
        raise ValueError("`out` must be a C-contiguous float32 array (the normals are written in place)")
    flat = out.reshape(-1)
    N = flat.size
    W = (N + 1) // 2
    f = unit_floats(rng, W)  # 1 + k 2⁻²³ in [1, 2)
    rho, theta = f[:W], f[W:]
    np.subtract(_TWO32, rho, out=rho)  # u in [2⁻²³, 1]
    np.log(rho, out=rho)
    np.multiply(rho, _MINUS_TWO32, out=rho)
    np.sqrt(rho, out=rho)
    np.multiply(theta, _TWO_PI32, out=theta)  # 2π(1 + k 2⁻²³): the angle plus one period
    np.cos(theta, out=flat[:W])
    np.multiply(flat[:W], rho, out=flat[:W])
    np.sin(theta[: N - W], out=flat[W:])
    np.multiply(flat[W:], rho[: N - W], out=flat[W:])
    return out


def _chi2(rng, k, m, out=None) -> np.ndarray:
    """``m`` χ²_k variates (``2 Γ(k/2)``; zeros for ``k = 0``), into ``out`` (contiguous float64) if given."""
    if k <= 0:
        if out is None:
            return np.zeros(m)
        out[...] = 0.0
        return out
    g = rng.standard_gamma(k / 2.0, size=m, out=out)
    g *= 2.0
    return g


#: Largest number of degrees of freedom whose χ² the single-precision streams build from uniforms (stream
#: version 4, :func:`chi2_32`); larger ones are ``2 Γ(k/2)`` variates of numpy's Gamma sampler.
CHI2_SMALL_MAX = 8

_U_OFFSET32 = np.float32(1.0 - 2.0**-24)  # f − (1 − 2⁻²⁴) = (2t + 1) 2⁻²⁴ exactly (Sterbenz), f = 1 + t 2⁻²³


def uniforms32(rng, n) -> np.ndarray:
    r"""``n`` float32 uniforms on the midpoints of ``2²³`` cells: :math:`u = (2t + 1)\,2^{-24}`, in ``(0, 1)``.

    The bits are ``ceil(n/2)`` 64-bit words of ``rng.bit_generator.random_raw``, viewed as little-endian
    32-bit words ``w_j`` (the last one dropped when ``n`` is odd); ``t_j = w_j >> 9`` (the top 23 bits).
    The midpoints make ``E[−log u]`` equal 1 to ``4e-8`` (cell endpoints would be off by ``1e-6``) and
    keep ``u`` away from 0 and 1.
    """
    f = unit_floats(rng, (n + 1) // 2)[:n]  # 1 + t 2⁻²³
    np.subtract(f, _U_OFFSET32, out=f)
    return f


def chi2_32(rng, k, m, out) -> bool:
    r"""The single-precision streams' :math:`\chi^2_k` (stream version 4): its even part into ``out``.

    For ``0 < k <= CHI2_SMALL_MAX``, with ``j = k // 2``: ``j m`` uniforms (:func:`uniforms32`, laid out
    ``(j, m)``) give :math:`-2\log\prod_{i<j} u_{i}`, a :math:`\chi^2_{2j}` variate per prompt (in float32,
    stored in the float64 ``out`` of shape (m,)); when ``k`` is odd the caller adds the square of one
    standard normal per prompt (from its own :func:`normals32` call) and this returns True. Larger ``k``:
    ``2 Γ(k/2)`` (:func:`_chi2`, float64), False. ``k = 0``: zeros, False.
    """
    if k > CHI2_SMALL_MAX:
        _chi2(rng, k, m, out=out)
        return False
    j = k // 2
    if j == 0:
        out[...] = 0.0
    else:
        u = uniforms32(rng, j * m).reshape(j, m)
        p = u[0]
        for i in range(1, j):
            p *= u[i]
        np.log(p, out=p)
        np.multiply(p, _MINUS_TWO32, out=out)  # (exact: × −2 in float32, then widened)
    return k % 2 == 1


def _add_squares(x, z) -> None:
    """``x += z²`` with ``z`` float32, in float64."""
    z64 = z.astype(np.float64)
    z64 *= z64
    x += z64


def draw_stats32(rng, s, y, yq, r2, *, d, sigma2, conditional, normals=None, y_scale=None) -> None:
    r"""The single-precision statistics stream: fill ``s``, ``y`` (float32, (m, L)), ``yq``, ``r2`` (float64, (m,)).

    Same statistics as ``sample_prompts(..., stats_only=True)`` (module docstring of
    :mod:`reduced_dynamics.estimation.prompts`). Draw order (the stream contract of
    ``precision="single"``, stream version 4): the even part of ``|x_q|² ~ χ²_d`` (:func:`chi2_32`),
    then, with ``conditional``, one :func:`normals32` call of ``N = m L + e m`` normals: ``a`` (m, L),
    then, when ``e = 1`` (``d`` odd and at most :data:`CHI2_SMALL_MAX`), ``m`` normals whose squares
    complete ``|x_q|²``; otherwise the even part of ``|β_⊥|² d ~ χ²_{d-1}`` and one :func:`normals32`
    call of ``N = 2 m L + 2 m + e m`` normals: ``a`` (m, L), the combined context noise (m, L),
    ``β₁√d`` (m), ``ε_q`` (m), in this order, then, when ``e = 1`` (one of ``d``, ``d − 1`` is odd and
    at most :data:`CHI2_SMALL_MAX`; at most one of them is odd), ``m`` normals completing that χ². ``N``
    sets every value (Box–Muller pairs entry ``i`` with entry ``ceil(N/2) + i``).

    ``normals``: optional float32 work buffer of at least ``2 m L + 3 m`` entries (``s`` and
    ``y`` may be views of it, as :func:`stats_buffers` makes them).

    ``y_scale``: optional float64 (m,) array. Given, ``y`` is left unscaled,
    :math:`y_l / c = \text{noise}_l + (\beta_1 / c) a_l` with
    :math:`c = \sqrt{|\beta_\perp|^2 + \sigma^2}` written to ``y_scale`` (one pass over the
    (m, L) block less; :func:`stats_losses` takes the factor into its per-prompt sums), unless some
    ``c`` is 0 (only without noise, ``σ² = 0``: at ``d = 1``, or at ``d = 2`` when the one normal of
    ``χ²_1`` is exactly 0, probability 2⁻²³ per prompt): then ``y`` is scaled and ``y_scale`` is 1.
    """
    m, L = s.shape
    nm = m * L
    x2 = np.empty(m)
    odd_r = chi2_32(rng, d, m, x2)
    if conditional:
        if not odd_r:
            normals32(rng, s)
        else:
            head = normals is not None and s.__array_interface__["data"][0] == normals.__array_interface__["data"][0]
            g = normals[: nm + m] if head else np.empty(nm + m, np.float32)
            normals32(rng, g)
            if not head:
                np.copyto(s, g[:nm].reshape(m, L))
            _add_squares(x2, g[nm:])
    else:
        bperp2 = np.empty(m)
        odd_b = chi2_32(rng, d - 1, m, bperp2)
        n_g = 2 * nm + (2 + odd_r + odd_b) * m
        g = np.empty(n_g, np.float32) if normals is None else normals[:n_g]
        normals32(rng, g)
        if odd_r or odd_b:
            _add_squares(x2 if odd_r else bperp2, g[2 * nm + 2 * m :])
        bperp2 /= d
        a, noise = g[:nm].reshape(m, L), g[nm : 2 * nm].reshape(m, L)
        beta1 = g[2 * nm : 2 * nm + m].astype(np.float64)
        beta1 *= 1.0 / math.sqrt(d)
        c = np.sqrt(bperp2 + sigma2)
        if y_scale is None or not c.min() > 0:  # (c = 0 only without noise: y = β₁ a, scaled)
            np.multiply(noise, c.astype(np.float32)[:, None], out=y)
            y += beta1.astype(np.float32)[:, None] * a
            if y_scale is not None:
                y_scale[...] = 1.0
        else:
            y_scale[...] = c
            np.add(noise, (beta1 / c).astype(np.float32)[:, None] * a, out=y)  # (y may be the noise's own buffer)
        if s.__array_interface__["data"][0] != a.__array_interface__["data"][0]:  # s is not the buffer's head
            np.copyto(s, a)
    r2[...] = x2
    r = np.sqrt(x2)
    if not conditional:
        yq[...] = beta1 * r + math.sqrt(sigma2) * g[2 * nm + m : 2 * nm + 2 * m].astype(np.float64)
    s *= r.astype(np.float32)[:, None]


def stats_buffers(B, L):
    """Float32 work buffers of the single-precision stream for blocks of up to ``B`` prompts.

    Returns ``normals`` (``2 B L + 3 B`` entries); a block of ``m`` prompts uses its first
    ``2 m L + 3 m`` entries at most (:func:`draw_stats32`), and its ``s`` is their first ``m L`` (so
    the context normals are drawn in place).
    """
    return np.empty(2 * B * L + 3 * B, np.float32)


# ------------------------------------------------------------------ statistics sampler


def _head_exp(s, omega, out):
    r"""``exp(ω s)`` per row and its row sums; rows where that is out of range are max-shifted.

    A row is recomputed with the shift :math:`\omega \max_l s_l` (or ``min`` for ω < 0)
    when its unshifted sum is not in ``[1e-280, 1e280]`` (float32: ``[1e-30, 1e30]``); the decision
    is per prompt, so the result does not depend on how a block is sliced. The softmax is the same
    either way. In float32 (``precision="single"``) the rows are ``2^{(ω \log_2 e) s}``
    (``np.exp2``, half the cost of ``np.exp`` here; the same accuracy: the exponent's rounding costs
    ``|ω s|·6e-8`` either way).
    """
    _scaled_exp(s, omega, out)
    return _head_rows(s, omega, out)


def _scaled_exp(s, omega, out):
    """``out = exp(ω s)``: float64 ``np.exp``; float32 ``np.exp2`` of ``(ω log₂e) s``."""
    if out.dtype == np.float32:
        np.multiply(s, np.float32(omega * _LOG2E), out=out)
        np.exp2(out, out=out)
    else:
        np.multiply(s, omega, out=out)
        np.exp(out, out=out)
    return out


def _head_exp_flipped(s, omega, z):
    r""":func:`_head_exp` for ``ω`` when ``z`` holds the rows of ``-ω`` (overwritten): ``exp(ω s) = 1/exp(-ω s)``.

    One pass instead of two. A row of ``z`` that was max-shifted gives a scaled row, which leaves the
    softmax unchanged; rows whose sum leaves the range are recomputed max-shifted, as in
    :func:`_head_exp`. The single-precision path only (the double-precision stream keeps its
    version-2 arithmetic).
    """
    np.reciprocal(z, out=z)
    return _head_rows(s, omega, z)


def _head_rows(s, omega, out):
    """Row sums of ``out`` (``exp(ω s)`` per row, up to a per-row factor); out-of-range rows recomputed shifted."""
    Z = np.einsum("nl->n", out).astype(np.float64, copy=False)
    tiny, huge = (_TINY, _HUGE) if out.dtype == np.float64 else (_TINY32, _HUGE32)
    if not (Z.min() > tiny and Z.max() < huge):  # (NaN fails both) some rows out of range
        rows = np.flatnonzero(~((Z > tiny) & (Z < huge)))
        zr = s[rows] * out.dtype.type(omega)
        zr -= zr.max(axis=1, keepdims=True)
        np.exp(zr, out=zr)
        out[rows] = zr
        Z[rows] = np.einsum("nl->n", zr)
    return out, Z


def stats_losses(specs, s, r2, y, yq, *, d, sigma2, out, work, y_scale=None):
    """Per-prompt losses of the fused predictors ``specs`` on one block (into ``out``, shape (m, P)).

    ``y``/``yq`` None means conditional (Rao–Blackwellised) losses. ``work`` is a list of
    scratch arrays (allocated on first use and reused). ``y_scale`` (float64, (m,)): the labels
    are ``y_scale[:, None] * y`` (:func:`draw_stats32`); every use of ``y`` is a sum over the
    context, which takes the factor.
    """
    m, L = s.shape
    conditional = y is None
    single = s.dtype == np.float32
    cache = {}

    def f64(a):  # per-prompt scalars are combined in float64 whatever the precision of s, y
        return a.astype(np.float64, copy=False)

    def dot(a, b):
        return f64(np.einsum("nl,nl->n", a, b))

    def ydot(a):  # Σ_l a_l y_l
        v = dot(a, y)
        if y_scale is not None:
            v *= y_scale
        return v

    def get(key):
        if key not in cache:
            if key == "S1":
                cache[key] = f64(np.einsum("nl->n", s))
            elif key == "S2":
                cache[key] = dot(s, s)
            elif key == "Sy":
                cache[key] = ydot(s)
            elif key == "Y1":
                v = f64(np.einsum("nl->n", y))
                if y_scale is not None:
                    v *= y_scale
                cache[key] = v
        return cache[key]

    c_perp = (d - 1) / d + sigma2

    def cond(ws, ww):
        return (r2 - ws) ** 2 / (d * r2) + sigma2 + c_perp * ww

    if any(sp[0] == "heads" for sp in specs) and (
        not work or work[0].shape[0] < m or work[0].shape[1] != L or work[0].dtype != s.dtype
    ):
        work[:] = [np.empty((m, L), s.dtype) for _ in range(3)]  # exp(ω s) of one head, the weights w, scratch
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j, sp in enumerate(specs):
            kind = sp[0]
            if kind == "zero":
                out[:, j] = r2 / d + sigma2 if conditional else yq * yq
            elif kind in ("gd", "dgd"):
                c = sp[1] / L
                if kind == "gd":
                    if conditional:
                        S2 = get("S2")
                        out[:, j] = cond(c * S2, c * c * S2)
                    else:
                        e = yq - c * get("Sy")
                        np.multiply(e, e, out=out[:, j])
                else:
                    if conditional:
                        Sc = get("S2") - get("S1") ** 2 / L
                        out[:, j] = cond(c * Sc, c * c * Sc)
                    else:
                        e = yq - c * (get("Sy") - get("S1") * get("Y1") / L)
                        np.multiply(e, e, out=out[:, j])
            else:  # softmax heads
                omegas, mus = sp[1], sp[2]
                z = None
                if conditional:
                    w = work[1][:m]
                    for h, (o, mu) in enumerate(zip(omegas, mus)):
                        if single and h > 0 and o == -omegas[h - 1] and o != 0:  # the pair ω, -ω: one exp
                            z, Z = _head_exp_flipped(s, o, z)
                        else:
                            z, Z = _head_exp(s, o, work[0][:m])
                        c = (mu / Z).astype(s.dtype)[:, None]
                        if h == 0:
                            np.multiply(z, c, out=w)
                        else:
                            w += np.multiply(z, c, out=work[2][:m])
                    out[:, j] = cond(dot(w, s), dot(w, w))
                else:
                    pred = np.zeros(m)
                    for h, (o, mu) in enumerate(zip(omegas, mus)):
                        if single and h > 0 and o == -omegas[h - 1] and o != 0:
                            z, Z = _head_exp_flipped(s, o, z)
                        else:
                            z, Z = _head_exp(s, o, work[0][:m])
                        pred += mu * ydot(z) / Z
                    e = yq - pred
                    np.multiply(e, e, out=out[:, j])
    return out


# ------------------------------------------------------------------ Gram sampler

#: largest d evaluated by the unrolled (structure-of-arrays) ridge kernel; larger d uses batched LAPACK
SOA_MAX_D = 8


class GramBlock:
    r"""One block of the Gram sampler's statistics (internal), structure of arrays over ``m`` prompts.

    Attributes
    ----------
    r2 : ndarray, shape (m,)
        :math:`|x_q|^2`.
    diag : ndarray, shape (d, m)
        The Bartlett diagonal :math:`R_{ii}`.
    off : ndarray, shape (d(d-1)/2, m)
        The strict upper triangle of ``R``, row-major.
    g : ndarray, shape (2d+1, m), or None
        Standard normals of :math:`\beta\sqrt d`, :math:`u/\sigma`, :math:`\varepsilon_q`
        (None for conditional losses).
    """

    __slots__ = ("r2", "diag", "off", "g")

    def __init__(self, r2, diag, off, g):
        self.r2, self.diag, self.off, self.g = r2, diag, off, g

    def __getitem__(self, sl) -> GramBlock:
        return GramBlock(self.r2[sl], self.diag[:, sl], self.off[:, sl], None if self.g is None else self.g[:, sl])

    def astype64(self) -> GramBlock:
        """The same numbers in float64 (the arrays themselves when they already are)."""
        f = np.float64
        g = None if self.g is None else self.g.astype(f, copy=False)
        return GramBlock(self.r2, self.diag.astype(f, copy=False), self.off.astype(f, copy=False), g)

    @property
    def R(self) -> np.ndarray:
        """The Bartlett factors, upper triangular, shape (m, d, d)."""
        d, m = self.diag.shape
        R = np.zeros((m, d, d))
        iu = np.triu_indices(d, 1)
        R[:, iu[0], iu[1]] = self.off.T
        R[:, np.arange(d), np.arange(d)] = self.diag.T
        return R

    @property
    def G(self) -> np.ndarray:
        """The Gram matrices :math:`X^\top X = R^\top R`, shape (m, d, d)."""
        R = self.R
        return np.matmul(np.swapaxes(R, 1, 2), R)


def draw_gram(rng, m, *, d, L, conditional) -> GramBlock:
    r"""Draw one block of ``m`` prompts of the Gram sampler (module docstring).

    Draw order (the stream contract of ``sampler="gram"``): ``r² ~ χ²_d`` (m),
    the Bartlett diagonal :math:`R_{ii}^2 \sim \chi^2_{L-i}`, ``i = 0..d-1``
    (one Gamma call of shape (d, m)), the strict upper triangle (d(d-1)/2, m) in
    row-major order, then, unless ``conditional``, (2d+1, m) normals: β√d, u/σ, ε_q.
    """
    r2 = rng.chisquare(d, size=m)
    diag = rng.standard_gamma(np.broadcast_to(((L - np.arange(d)) / 2.0)[:, None], (d, m)))
    diag *= 2.0
    np.sqrt(diag, out=diag)
    off = rng.standard_normal((d * (d - 1) // 2, m))
    g = None if conditional else rng.standard_normal((2 * d + 1, m))
    return GramBlock(r2, diag, off, g)


def _bartlett_rows(blk: GramBlock, lam):
    """The rows ``R[i][j]`` (``i <= j``, each (m,)) of the block's Bartlett factor and the lower triangle
    ``M[i][j]`` (``j <= i``) of ``M = RᵀR + λI`` (``lam`` added as given: a float, or a number of the block's
    dtype), for the unrolled ridge kernels."""
    d = blk.diag.shape[0]
    R = [[None] * d for _ in range(d)]
    k = 0
    for i in range(d):
        R[i][i] = blk.diag[i]
        for j in range(i + 1, d):
            R[i][j] = blk.off[k]
            k += 1
    # M[i][j] = Σ_{q<=j} R[q][i] R[q][j] (j <= i)
    M = [[None] * d for _ in range(d)]
    for i in range(d):
        for j in range(i + 1):
            acc = R[0][i] * R[0][j]
            for q in range(1, j + 1):
                acc += R[q][i] * R[q][j]
            if i == j:
                acc += lam
            M[i][j] = acc
    return R, M


def _ridge_soa(blk: GramBlock, lam):
    """``h = (G + λI)⁻¹ e₁`` and ``R h`` by an unrolled Cholesky, vectorised over prompts: lists of (m,) rows."""
    d = blk.diag.shape[0]
    R, M = _bartlett_rows(blk, lam)
    # Cholesky M = C Cᵀ (C lower)
    C = [[None] * d for _ in range(d)]
    inv_diag = [None] * d
    for j in range(d):
        acc = M[j][j].copy()
        for q in range(j):
            acc -= C[j][q] * C[j][q]
        cjj = np.sqrt(acc)
        inv_diag[j] = 1.0 / cjj
        C[j][j] = cjj
        for i in range(j + 1, d):
            acc = M[i][j].copy()
            for q in range(j):
                acc -= C[i][q] * C[j][q]
            acc *= inv_diag[j]
            C[i][j] = acc
    # forward: C z = e1
    z = [None] * d
    z[0] = inv_diag[0]
    for i in range(1, d):
        acc = C[i][0] * z[0]
        for q in range(1, i):
            acc += C[i][q] * z[q]
        acc *= -inv_diag[i]
        z[i] = acc
    # back: Cᵀ h = z
    h = [None] * d
    for i in range(d - 1, -1, -1):
        acc = z[i].copy()
        for q in range(i + 1, d):
            acc -= C[q][i] * h[q]
        acc *= inv_diag[i]
        h[i] = acc
    Rh = [None] * d
    for i in range(d):
        acc = R[i][i] * h[i]
        for j in range(i + 1, d):
            acc += R[i][j] * h[j]
        Rh[i] = acc
    return np.array(h), np.array(Rh)


def _ridge_lapack(blk: GramBlock, lam):
    """Same as :func:`_ridge_soa` by batched LAPACK solves; arrays of shape (d, m)."""
    d, m = blk.diag.shape
    R = blk.R
    M = np.matmul(np.swapaxes(R, 1, 2), R)
    M[:, np.arange(d), np.arange(d)] += lam
    e1 = np.zeros((d, 1))
    e1[0, 0] = 1.0
    try:
        h = np.linalg.solve(M, np.broadcast_to(e1, (m, d, 1)))
    except np.linalg.LinAlgError:
        raise ValueError(f"`lam` must be > 0 here: XᵀX + λI is singular for lam={lam}") from None
    Rh = np.matmul(R, h)[..., 0]
    return h[..., 0].T, Rh.T


def ridge_h(blk: GramBlock, lam, *, kernel="auto"):
    """``(h, R h)``, each of shape (d, m), with the kernel chosen by ``d`` (or forced: "soa"/"lapack")."""
    d = blk.diag.shape[0]
    if kernel == "soa" or (kernel == "auto" and d <= SOA_MAX_D):
        return _ridge_soa(blk, lam)
    return _ridge_lapack(blk, lam)


def _dot_rows(a, b):
    """``Σ_i a[i] b[i]`` over the first axis, elementwise in the prompts (so slicing cannot change the bits)."""
    acc = a[0] * b[0]
    for i in range(1, a.shape[0]):
        acc += a[i] * b[i]
    return acc


def _ridge_soa32(blk: GramBlock, lam):
    r"""``h = (G + λI)⁻¹ e₁`` in the precision of the block (float32 here), lists of (m,) rows, and the flagged prompts.

    The single-precision ridge kernel: the reverse Cholesky factorisation :math:`M = G + \lambda I = U U^\top`
    (``U`` upper triangular, pivots from the last index down), so that :math:`U^{-1} e_1 = e_1 / U_{11}` and ``h``
    comes out of one substitution, :math:`U^\top h = e_1 / U_{11}`. Returns ``(R, h, bad)``: the rows ``R[i][j]``
    (``i <= j``) of the Bartlett factor, the rows of ``h``, and a boolean (m,) array of the prompts whose pivot
    ratios :math:`\prod_j U_{jj}^2 / M_{jj}` (Hadamard's ratio ``det M / ∏ M_jj``, in ``(0, 1]``) fall below
    ``2⁻⁶``, or are not finite: ill-conditioned ``M``, which :func:`gram_losses` evaluates again in float64.
    """
    d = blk.diag.shape[0]
    R, M = _bartlett_rows(blk, blk.diag.dtype.type(lam))
    # reverse Cholesky M = U Uᵀ: U[i][j] (i < j), inv[j] = 1 / U_jj, from j = d-1 down
    U = [[None] * d for _ in range(d)]
    inv = [None] * d
    det = mdiag = None
    for j in range(d - 1, -1, -1):
        piv = M[j][j]
        if j < d - 1:
            piv = piv - U[j][j + 1] * U[j][j + 1]
            for q in range(j + 2, d):
                piv -= U[j][q] * U[j][q]
        det = piv if det is None else det * piv
        mdiag = M[j][j] if mdiag is None else mdiag * M[j][j]
        r = np.sqrt(piv)
        inv[j] = np.reciprocal(r, out=r)
        for i in range(j):
            acc = M[j][i]
            if j < d - 1:
                acc = acc - U[i][j + 1] * U[j][j + 1]
                for q in range(j + 2, d):
                    acc -= U[i][q] * U[j][q]
            U[i][j] = np.multiply(acc, inv[j], out=acc)
            M[j][i] = None  # freed as used: the next arrays reuse cache-hot memory
        M[j][j] = None
    # Uᵀ h = e₁ / U_00 (Uᵀ lower triangular)
    h = [None] * d
    h[0] = inv[0] * inv[0]
    for i in range(1, d):
        acc = U[0][i] * h[0]
        for q in range(1, i):
            acc += U[q][i] * h[q]
            U[q][i] = None
        acc *= -inv[i]
        h[i] = acc
    bad = ~(det >= mdiag * mdiag.dtype.type(2.0**-6))
    return R, h, bad


def _rows_dot(a, b):
    """``Σ_i a[i] b[i]`` over lists (or first axes) of (m,) rows."""
    acc = a[0] * b[0]
    for i in range(1, len(a)):
        acc += a[i] * b[i]
    return acc


def _ridge_losses32(blk: GramBlock, lam, *, d, sigma2, r2, r):
    """Per-prompt ridge losses of a float32 Gram block (float64 (m,) array); see :func:`gram_losses`."""
    f32 = np.float32
    R, h, bad = _ridge_soa32(blk, lam)
    if blk.g is None:
        # r² λ²|h|²/d + σ²(1 + r²|Rh|²)
        lh2 = _rows_dot(h, h)
        lh2 *= f32(lam * lam / d)
        Rh2 = None
        for i in range(d):
            acc = R[i][i] * h[i]
            for j in range(i + 1, d):
                acc += R[i][j] * h[j]
            acc *= acc
            if Rh2 is None:
                Rh2 = acc
            else:
                Rh2 += acc
        Rh2 *= f32(sigma2)
        loss = (lh2 + Rh2).astype(np.float64)
        loss *= r2
        loss += sigma2
    else:
        # y_q − ŷ = r hᵀ(λβ − Rᵀu) + σ ε_q with β = g[:d]/√d, u = σ g[d:2d]
        g = blk.g
        lb = g[:d] * f32(lam / math.sqrt(d))
        u = g[d : 2 * d] * f32(math.sqrt(sigma2))
        t = None
        for i in range(d):
            w = lb[i] - R[0][i] * u[0]
            for k in range(1, i + 1):
                w -= R[k][i] * u[k]
            w *= h[i]
            if t is None:
                t = w
            else:
                t += w
        t *= r.astype(f32)
        t += g[2 * d] * f32(math.sqrt(sigma2))
        loss = t.astype(np.float64)
        loss *= loss
    if bad.any():  # ill-conditioned (or non-finite) prompts: the float64 kernel on the same numbers
        rows = np.flatnonzero(bad)
        sub = blk[rows].astype64()
        out = np.empty((rows.size, 1))
        gram_losses([("ridge", lam)], sub, d=d, sigma2=sigma2, out=out)
        loss[rows] = out[:, 0]
    return loss


#: the single-precision ridge kernel serves ``2⁻²⁰ <= λ <= 2²⁰`` (λ²|h|² and |h|² stay normal float32 numbers); other λ use float64
_LAM32 = (2.0**-20, 2.0**20)


def gram_losses(specs, blk: GramBlock, *, d, sigma2, out, kernel="auto"):
    """Per-prompt losses of Bayes ridge / ŷ = 0 on one Gram block (into ``out``, shape (m, P)).

    A float64 block (:func:`draw_gram`) is evaluated in float64. A float32 block (:func:`draw_gram32`,
    ``precision="single"``) runs ridge in float32 (:func:`_ridge_soa32`, ``d <= SOA_MAX_D``,
    ``2⁻²⁰ <= λ <= 2²⁰``), with its ill-conditioned prompts evaluated again in float64; otherwise
    (and for ŷ = 0) in float64 on the same numbers.
    """
    single = blk.diag.dtype == np.float32
    if single and (kernel == "lapack" or d > SOA_MAX_D):
        return gram_losses(specs, blk.astype64(), d=d, sigma2=sigma2, out=out, kernel=kernel)
    r2, g = blk.r2, blk.g
    conditional = g is None
    sig = math.sqrt(sigma2)
    r = np.sqrt(r2)
    if not conditional:
        if single:
            beta0 = g[0].astype(np.float64) * (1.0 / math.sqrt(d))
            eps_q = g[2 * d].astype(np.float64) * sig
        else:
            beta = g[:d] * (1.0 / math.sqrt(d))
            u = g[d : 2 * d] * sig
            eps_q = g[2 * d] * sig
            beta0 = beta[0]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j, sp in enumerate(specs):
            if sp[0] == "zero":
                if conditional:
                    out[:, j] = r2 / d + sigma2
                else:
                    e = r * beta0 + eps_q
                    np.multiply(e, e, out=out[:, j])
                continue
            lam = sp[1]
            if single:
                if _LAM32[0] <= lam <= _LAM32[1]:
                    out[:, j] = _ridge_losses32(blk, lam, d=d, sigma2=sigma2, r2=r2, r=r)
                else:
                    gram_losses([sp], blk.astype64(), d=d, sigma2=sigma2, out=out[:, j : j + 1], kernel=kernel)
                continue
            h, Rh = ridge_h(blk, lam, kernel=kernel)
            lh = h * lam  # λh = e₁ − Gh stays O(1) however large λ is
            if conditional:
                out[:, j] = r2 * _dot_rows(lh, lh) / d + sigma2 * (1.0 + r2 * _dot_rows(Rh, Rh))
            else:
                e = r * (_dot_rows(lh, beta) - _dot_rows(Rh, u)) + eps_q
                out[:, j] = e * e
    return out


def draw_gram32(rng, m, *, d, L, conditional, into=None) -> GramBlock:
    r"""One block of the Gram sampler's single-precision stream (``precision="single"``, stream version 4).

    The same statistics as :func:`draw_gram`. Draw order: the even part of ``r² ~ χ²_d``, then of
    the Bartlett diagonal :math:`R_{ii}^2 \sim \chi^2_{L-i}` (``i = 0..d-1``; each by :func:`chi2_32`:
    from uniforms up to :data:`CHI2_SMALL_MAX` degrees of freedom, else ``2 Γ(k/2)``), then one
    :func:`normals32` call of ``(d(d-1)/2 + 2d + 1 + n_odd) m`` normals (without the ``(2d+1) m``
    when ``conditional``): the strict upper triangle (row-major), β√d, u/σ, ε_q, and last one row of
    ``m`` per χ² above with an odd number of degrees of freedom at most :data:`CHI2_SMALL_MAX`, in
    the order ``r², R_00², R_11², …`` (their squares complete those χ²). ``r2`` is stored in float64;
    the diagonal (the float64 root, rounded to float32) and the normals in float32, for the float32
    ridge kernel of :func:`gram_losses`.

    ``into``: optional ``(r2, diag, z)`` arrays of shapes (m,), (d, m) and (rows, m) (views into
    the columns of larger buffers, so that several blocks are evaluated together) to write the
    block into instead of new arrays; then the block of those views is returned.
    """
    if into is None:
        r2, diag32 = np.empty(m), np.empty((d, m), np.float32)
    else:
        r2, diag32, z_o = into
    x2 = np.empty((d + 1, m))  # r², then R_ii²
    odd = [i for i, k in enumerate([d] + [L - i for i in range(d)]) if chi2_32(rng, k, m, x2[i])]
    n_off = d * (d - 1) // 2
    rows = n_off + (0 if conditional else 2 * d + 1)
    z = normals32(rng, np.empty((rows + len(odd), m), np.float32))
    for j, i in enumerate(odd):
        _add_squares(x2[i], z[rows + j])
    r2[...] = x2[0]
    np.sqrt(x2[1:], out=diag32, casting="same_kind")  # the float64 root, rounded to float32
    z = z[:rows]
    if into is not None:
        z_o[...] = z
        z = z_o
    return GramBlock(r2, diag32, z[:n_off], None if conditional else z[n_off:])
