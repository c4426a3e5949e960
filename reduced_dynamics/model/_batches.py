r"""The trainer's prompt sampler and its random stream (internal; docs/theory.md#full-model).

:class:`TokenSampler` draws the fresh training batches of :func:`reduced_dynamics.model.training.train`:
``n`` prompts ``x_l ~ N(0, Σ)`` (``Σ = setting.Sigma``, ``I_d`` when it is ``None``), ``β ~ N(0, I_d/d)``,
``y_l = βᵀx_l + σ ε_l`` (``l = 1..L``) and the query ``(x_q, y_q)`` drawn the
same way, returned in embedded form: ``tokens_t`` of shape ``(n, d+1, L)`` (feature-major,
C-contiguous float64, what the attention models' batched products read) and, on first access,
its token-major copy ``tokens`` ``(n, L, d+1)`` (for the reduced model and :meth:`TrainBatch.prompts`).

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
  0.2.0; before, ``σ ε_l`` plus ``βᵀx_l``: the same stream, numbers equal to float64 rounding). The
  float32 context normals are widened to float64 straight into the feature-major layout and the
  product is taken there (package 0.2.0, issue 22 part 7; before, in the token-major layout, then
  transposed: the same stream, the responses equal to float64 rounding, ≤ 2e-16 relative);
* with a covariance ``Σ`` (``setting.Sigma``), the standard normal covariates
  ``z`` so drawn are mapped to ``x = C z`` with ``C = cholesky(Σ)`` (lower
  triangular, ``C Cᵀ = Σ``; one float64 ``(d, d)·(d, L)`` product per prompt, feature-major) before the
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
from reduced_dynamics._float32_normals import TWO as _TWO
from reduced_dynamics._float32_normals import TWO_PI as _TWO_PI
from reduced_dynamics._float32_normals import unit_floats
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

    Per 64-bit word: the word itself (its two 32-bit halves are transformed in place) and two float32
    work values (16 bytes); plus, in float64, the tokens in both layouts, the query block and ``β√d``,
    ``x_q``, ``y_q``, the responses' ``(β, σ)`` and products, and with ``setting.Sigma`` the ``(n, d, L)``
    correlated covariates and the ``(d, d)`` Cholesky factor.
    """
    n = int(n_prompts)
    m, words, n_ctx = _sizes(n, setting)
    # with Σ: the correlated covariates and the Cholesky factor
    extra = 0 if setting.Sigma is None else n * setting.L * setting.d + setting.d**2
    d, L = setting.d, setting.L
    return 16 * words + 8 * (2 * n_ctx + (m - n_ctx) + n * d + n + n * (d + 1) + n * L + extra)


def stream_generator(seed_seq) -> np.random.Generator:
    """The generator of the stream: ``Generator(SFC64(seed_seq))`` (``seed_seq``: a SeedSequence or an int)."""
    return np.random.Generator(np.random.SFC64(seed_seq))


class TrainBatch:
    """One training batch drawn by :class:`TokenSampler` (its arrays are reused by the next draw).

    Attributes
    ----------
    tokens_t : ndarray, shape (n, d+1, L)
        Embedded context, feature-major: ``tokens_t[n, :, l] = z_l = (x_l, y_l)``, C-contiguous (what the
        attention models' batched products read).
    tokens : ndarray, shape (n, L, d+1)
        The same numbers token-major, C-contiguous: made on first access (a transposed copy into the
        sampler's buffer), for the models that read tokens (the reduced model, :meth:`prompts`).
    x_q : ndarray, shape (n, d)
    y_q : ndarray, shape (n,)
    beta : ndarray, shape (n, d)
    setting : Setting
    """

    __slots__ = ("_tokens", "_tokens_buf", "tokens_t", "x_q", "y_q", "beta", "setting")

    def __init__(self, tokens_buf, tokens_t, x_q, y_q, beta, setting):
        self._tokens, self._tokens_buf = None, tokens_buf
        self.tokens_t, self.x_q, self.y_q, self.beta, self.setting = tokens_t, x_q, y_q, beta, setting

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = self._tokens_buf
            np.copyto(self._tokens, self.tokens_t.transpose(0, 2, 1))
        return self._tokens

    @property
    def n(self) -> int:
        return self.tokens_t.shape[0]

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
        self._Zt = np.empty((n, D, L))
        self._Z = np.empty((n, L, D))  # the token-major copy, made on demand (TrainBatch.tokens)
        self._qb = np.empty(m - self._n_ctx)  # the query block and β√d, float64
        self._xq = np.empty((n, d))
        self._yq = np.empty(n)
        self._sigma = math.sqrt(setting.sigma2)
        self._be = np.empty((n, 1, D))  # (β, σ) per prompt
        self._be[:, 0, d] = self._sigma
        self._y = np.empty((n, 1, L))
        if setting.Sigma is None:
            self._C = self._X = None
        else:  # x = C z, feature-major: the (d, L) block of each prompt is C times that of z
            self._C = np.ascontiguousarray(np.linalg.cholesky(setting.Sigma))
            self._X = np.empty((n, d, L))

    def _normals32(self, rng: np.random.Generator) -> np.ndarray:
        """The next ``2 * words_per_batch`` standard normals of the stream, float32 (in the words' buffer)."""
        half, r, t = self._half, self._r, self._t
        f = unit_floats(rng, half)  # 1 + k 2⁻²³ in [1, 2), k the top 23 bits of each 32-bit word
        np.subtract(_TWO, f[:half], out=r)  # u in [2⁻²³, 1]
        np.log(r, out=r)
        np.multiply(r, _MINUS_TWO, out=r)
        np.sqrt(r, out=r)  # radius
        np.multiply(f[half:], _TWO_PI, out=t)  # 2π(1 + k 2⁻²³): the angle 2πk 2⁻²³ plus one period
        # the float32 products, in place in the words' buffer (the radius bits are consumed)
        a = f[:half]
        np.cos(t, out=a)
        np.multiply(a, r, out=a)
        b = f[half:]
        np.sin(t, out=b)
        np.multiply(b, r, out=b)
        return f

    def normals(self, rng: np.random.Generator) -> np.ndarray:
        """The next ``2 * words_per_batch`` standard normals of the stream (a new float64 array)."""
        return self._normals32(rng).astype(np.float64)

    def draw(self, rng: np.random.Generator) -> TrainBatch:
        """The next batch of the stream of ``rng`` (a ``Generator`` over ``SFC64``, see :func:`stream_generator`)."""
        n, s, d = self.n, self._sigma, self.setting.d
        L, D = self.setting.L, d + 1
        f = self._normals32(rng)
        Zt = self._Zt
        # the context normals are token-major in the stream; widened to float64 straight into the
        # feature-major layout (one pass)
        np.copyto(Zt, f[: self._n_ctx].reshape(n, L, D).transpose(0, 2, 1))
        qb = self._qb
        np.copyto(qb, f[self._n_ctx : self.n_normals])
        q = qb[: self._n_q].reshape(n, D)
        beta = qb[self._n_q :].reshape(n, d)
        beta *= 1.0 / math.sqrt(d)
        xq = self._xq
        if self._C is not None:  # x = C z, before the responses are formed
            np.matmul(self._C, Zt[:, :d, :], out=self._X)
            Zt[:, :d, :] = self._X
            np.matmul(q[:, :d], self._C.T, out=xq)
        else:
            np.copyto(xq, q[:, :d])
        # y_l = (β, σ)·(x_l, ε_l): one product with the context columns (ε_l is their last row)
        be = self._be
        be[:, 0, :d] = beta
        np.matmul(be, Zt, out=self._y)
        Zt[:, d, :] = self._y[:, 0, :]
        yq = self._yq
        np.einsum("nj,nj->n", xq, beta, out=yq)
        yq += s * q[:, d]
        return TrainBatch(self._Z, Zt, xq, yq, beta, self.setting)
