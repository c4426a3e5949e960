r"""The trainer's prompt sampler and its random stream (internal; docs/theory.md#full-model).

:class:`TokenSampler` draws the fresh training batches of :func:`reduced_dynamics.model.training.train`:
``n`` prompts ``x_l ~ N(0, Σ)`` (``Σ = setting.Sigma``, ``I_d`` when it is ``None``), ``β ~ N(0, I_d/d)``,
``y_l = βᵀx_l + σ ε_l`` (``l = 1..L``) and the query ``(x_q, y_q)`` drawn the
same way, returned in embedded form (``tokens`` of shape ``(n, L, d+1)`` and its
transpose ``tokens_t``, both C-contiguous float64, as the attention models'
batched products want them).

It is the ``STREAM_VERSION = 2`` random stream of the trainer:

* the bits come from one ``numpy.random.SFC64`` generator (seeded by the
  training seed's data child ``SeedSequence(seed).spawn(2)[1]``), read with
  ``random_raw``: exactly ``W = ceil(M/2)`` 64-bit words per batch, where
  ``M = n (L(d+1) + (d+1) + d)`` is the number of normal variates a batch needs
  (no rejection, so the stream position after ``k`` batches is known);
* the ``W`` words, viewed as ``2W`` little-endian 32-bit words ``w_j``, give
  ``2W`` normals by the Box–Muller transform, in float32 (numpy's vectorised
  ``log``, ``sqrt``, ``cos``, ``sin``): with ``k_j = w_j >> 9`` (the top 23
  bits), ``r_i = sqrt(−2 log(1 − k_i 2⁻²³))`` and ``θ_i = 2π k_{i+W} 2⁻²³``
  for ``i < W``, normal ``i`` is ``r_i cos θ_i`` and normal ``i + W`` is
  ``r_i sin θ_i``. The radius is at most ``sqrt(46 log 2) = 5.65``: the tail
  beyond it (probability ``1.2e-7``) is cut off, and the variates have float32
  resolution (they are stored as float64);
* the ``M`` normals fill, in this order, the context block (``(n, L, d+1)``:
  columns ``0..d-1`` are ``x_l``, column ``d`` the noise ``ε_l``), the query block
  ``(n, d+1)`` (``x_q``, then ``ε_q``) and ``β√d`` ``(n, d)``;
* the context responses are formed as one product ``y_l = (β, σ)·(x_l, ε_l)`` per prompt (package
  0.2.0; before, ``σ ε_l`` plus ``βᵀx_l``: the same stream, numbers equal to float64 rounding);
* with a covariance ``Σ`` (``setting.Sigma``), the standard normal covariates
  ``z`` so drawn are mapped to ``x = C z`` with ``C = cholesky(Σ)`` (lower
  triangular, ``C Cᵀ = Σ``; one float64 ``(d, d)`` product per row) before the
  responses are formed. The stream consumes the same words, so its position
  after ``k`` batches does not depend on ``Σ``, and without ``Σ`` no product is
  taken: the isotropic stream is unchanged bit for bit (same stream version).

Version 1 (package versions before this sampler) drew the same distribution
with ``numpy.random.default_rng`` (PCG64) and numpy's ziggurat normals
(``reduced_dynamics.estimation.prompts.sample_tokens``); it took about two
thirds of a training step. This one draws a batch about twice as fast (2.1–2.2×
in CPU time at d = 5, L = 40, batch 256; ``benchmarks/bench_train.py``). Its numbers are reproducible bit for bit on one
machine and numpy build; numpy's vectorised float32 transcendental functions
may round differently on another CPU (as BLAS kernels do), so a run resumed on
another machine is statistically, not bitwise, the same run.
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics._float32_normals import MINUS_TWO as _MINUS_TWO
from reduced_dynamics._float32_normals import ONE_BITS as _ONE_BITS
from reduced_dynamics._float32_normals import SHIFT9 as _SHIFT9
from reduced_dynamics._float32_normals import TWO as _TWO
from reduced_dynamics._float32_normals import TWO_PI as _TWO_PI
from reduced_dynamics._float32_normals import U32 as _U32
from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.estimation.prompts import Prompts
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["STREAM_VERSION", "TokenSampler", "TrainBatch", "sampler_bytes", "stream_generator"]

#: Version of the trainer's prompt stream (recorded in checkpoints and results; see the module docstring).
STREAM_VERSION = 2


def _sizes(n: int, setting: Setting) -> tuple[int, int, int]:
    """``(normals, words, context normals)`` of a batch of ``n`` prompts."""
    d, L = setting.d, setting.L
    n_ctx = n * L * (d + 1)
    m = n_ctx + n * (d + 1) + n * d
    return m, (m + 1) // 2, n_ctx


def sampler_bytes(n_prompts: int, setting: Setting) -> int:
    """Bytes held by a :class:`TokenSampler` of ``n_prompts`` prompts while it draws (buffers and raw words).

    Per 64-bit word: two float64 normals, two float32 work values and the word itself (32
    bytes; its two 32-bit halves are transformed in place); plus the transposed tokens, ``x_q``, ``y_q``, the
    responses' ``(β, σ)`` and products (float64), and with ``setting.Sigma`` the ``(n, L, d)`` correlated covariates.
    """
    n = int(n_prompts)
    _, words, n_ctx = _sizes(n, setting)
    extra = 0 if setting.Sigma is None else n * setting.L * setting.d  # the correlated covariates (Σ only)
    return 32 * words + 8 * (n_ctx + n * setting.d + n + n * (setting.d + 1) + n * setting.L + extra)


def stream_generator(seed_seq) -> np.random.Generator:
    """The generator of the stream: ``Generator(SFC64(seed_seq))`` (``seed_seq``: a SeedSequence or an int)."""
    return np.random.Generator(np.random.SFC64(seed_seq))


class TrainBatch:
    """One training batch drawn by :class:`TokenSampler` (its arrays are reused by the next draw).

    Attributes
    ----------
    tokens : ndarray, shape (n, L, d+1)
        Embedded context ``z_l = (x_l, y_l)``, C-contiguous.
    tokens_t : ndarray, shape (n, d+1, L)
        The same numbers transposed, C-contiguous.
    x_q : ndarray, shape (n, d)
    y_q : ndarray, shape (n,)
    beta : ndarray, shape (n, d)
    setting : Setting
    """

    __slots__ = ("tokens", "tokens_t", "x_q", "y_q", "beta", "setting")

    def __init__(self, tokens, tokens_t, x_q, y_q, beta, setting):
        self.tokens, self.tokens_t, self.x_q, self.y_q, self.beta, self.setting = (
            tokens,
            tokens_t,
            x_q,
            y_q,
            beta,
            setting,
        )

    @property
    def n(self) -> int:
        return self.tokens.shape[0]

    def prompts(self) -> Prompts:
        """The batch as a read-only :class:`~reduced_dynamics.Prompts` (views; valid until the next draw)."""
        return Prompts._new(
            tokens=self.tokens[...], x_q=self.x_q[...], y_q=self.y_q[...], beta=self.beta[...], setting=self.setting
        )


class TokenSampler:
    """Draws training batches of ``n_prompts`` prompts of ``setting`` (stream version :data:`STREAM_VERSION`).

    Parameters
    ----------
    n_prompts : int, >= 1
    setting : Setting
        Scalar; ``setting.Sigma`` (if set) is the covariance of the covariates
        (``x = C z``, ``C = cholesky(Σ)``; module docstring).

    Notes
    -----
    The memory budget of a batch is checked by :class:`~reduced_dynamics.model.training.TrainConfig`.
    The work buffers and the returned arrays are allocated once and reused:
    a :class:`TrainBatch` is valid until the next :meth:`draw`.
    """

    def __init__(self, n_prompts: int, setting: Setting):
        setting = as_setting(setting, "TokenSampler")
        n, d, L = check_positive_int("n_prompts", n_prompts), setting.d, setting.L
        D = d + 1
        self.n, self.setting = n, setting
        m, half, self._n_ctx = _sizes(n, setting)
        self._n_q = n * D
        self.n_normals = m
        #: 64-bit words consumed per batch
        self.words_per_batch = half
        self._half = half
        self._r = np.empty(half, np.float32)
        self._t = np.empty(half, np.float32)
        self._g = np.empty(2 * half)
        self._Zt = np.empty((n, D, L))
        self._xq = np.empty((n, d))
        self._yq = np.empty(n)
        self._sigma = math.sqrt(setting.sigma2)
        self._be = np.empty((n, D, 1))  # (β, σ) per prompt
        self._be[:, d, 0] = self._sigma
        self._y = np.empty((n, L, 1))
        if setting.Sigma is None:
            self._CT = self._X = None
        else:  # x = C z, row-wise x = z Cᵀ; _X holds the correlated covariates of the context
            self._CT = np.ascontiguousarray(np.linalg.cholesky(setting.Sigma).T)
            self._X = np.empty((n, L, d))

    def normals(self, rng: np.random.Generator) -> np.ndarray:
        """The next ``2 * words_per_batch`` standard normals of the stream (a reused float64 buffer)."""
        half, r, t, g = self._half, self._r, self._t, self._g
        w = rng.bit_generator.random_raw(half).view(_U32)  # the 32-bit words, transformed in place
        np.right_shift(w, _SHIFT9, out=w)
        np.bitwise_or(w, _ONE_BITS, out=w)
        f = w.view(np.float32)  # 1 + k 2⁻²³ in [1, 2), k the top 23 bits of each 32-bit word
        np.subtract(_TWO, f[:half], out=r)  # u in [2⁻²³, 1]
        np.log(r, out=r)
        np.multiply(r, _MINUS_TWO, out=r)
        np.sqrt(r, out=r)  # radius
        np.multiply(f[half:], _TWO_PI, out=t)  # 2π(1 + k 2⁻²³): the angle 2πk 2⁻²³ plus one period
        # the float32 products, in place in the words' buffer (the radius bits are consumed), then one
        # float32 -> float64 pass over both halves (cheaper than two mixed-type products)
        a = f[:half]
        np.cos(t, out=a)
        np.multiply(a, r, out=a)
        b = f[half:]
        np.sin(t, out=b)
        np.multiply(b, r, out=b)
        np.copyto(g, f)
        return g

    def draw(self, rng: np.random.Generator) -> TrainBatch:
        """The next batch of the stream of ``rng`` (a ``Generator`` over ``SFC64``, see :func:`stream_generator`)."""
        n, s, d = self.n, self._sigma, self.setting.d
        L, D = self.setting.L, d + 1
        g = self.normals(rng)
        Z = g[: self._n_ctx].reshape(n, L, D)
        q = g[self._n_ctx : self._n_ctx + self._n_q].reshape(n, D)
        beta = g[self._n_ctx + self._n_q : self.n_normals].reshape(n, d)
        beta *= 1.0 / math.sqrt(d)
        xq = self._xq
        if self._CT is not None:  # x = C z (row-wise z Cᵀ), before the responses are formed
            np.matmul(Z[..., :d], self._CT, out=self._X)
            Z[..., :d] = self._X
            np.matmul(q[:, :d], self._CT, out=xq)
        else:
            np.copyto(xq, q[:, :d])
        # y_l = (β, σ)·(x_l, ε_l): one product with the context rows (ε_l is their last entry)
        be = self._be
        be[:, :d, 0] = beta
        np.matmul(Z, be, out=self._y)
        Z[..., d] = self._y[..., 0]
        Zt = self._Zt
        np.copyto(Zt, Z.transpose(0, 2, 1))
        yq = self._yq
        np.einsum("nj,nj->n", xq, beta, out=yq)
        yq += s * q[:, d]
        return TrainBatch(Z, Zt, xq, yq, beta, self.setting)
