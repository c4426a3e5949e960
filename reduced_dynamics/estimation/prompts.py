r"""Seeded sampler of in-context linear-regression prompts (docs/theory.md#data-model).

``x_l ~ N(0, Σ)`` (default ``Σ = I_d``) for ``l = 1..L``, query ``x_q ~ N(0, Σ)``,
task ``β ~ N(0, I_d / d)``, noise ``ε ~ N(0, σ²)``, ``y_l = βᵀx_l + ε_l`` and the
noisy target ``y_q = βᵀx_q + ε_q``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._validation import check_positive_int, check_problem

__all__ = ["Prompts", "sample_prompts", "as_generator"]


def as_generator(seed_or_rng) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a seed (int) or a Generator.

    ``None`` is refused: every random result in this package comes from an
    explicit seed.
    """
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    if seed_or_rng is None or isinstance(seed_or_rng, bool):
        raise ValueError("`seed` must be a non-negative integer or a numpy Generator, got None")
    try:
        seed = int(seed_or_rng)
    except (TypeError, ValueError):
        raise ValueError(f"`seed` must be a non-negative integer or a numpy Generator, got {seed_or_rng!r}") from None
    if seed < 0 or seed != seed_or_rng:
        raise ValueError(f"`seed` must be a non-negative integer or a numpy Generator, got {seed_or_rng!r}")
    return np.random.default_rng(seed)


@dataclass(frozen=True)
class Prompts:
    """A batch of n prompts.

    Attributes
    ----------
    X : ndarray, shape (n, L, d)
        Context covariates.
    y : ndarray, shape (n, L)
        Context responses.
    xq : ndarray, shape (n, d)
        Query covariates.
    yq : ndarray, shape (n,)
        Noisy query targets ``βᵀx_q + ε_q``.
    beta : ndarray, shape (n, d)
        Tasks.
    sigma2 : float
        Noise variance used.
    """

    X: np.ndarray
    y: np.ndarray
    xq: np.ndarray
    yq: np.ndarray
    beta: np.ndarray
    sigma2: float

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def L(self) -> int:
        return self.X.shape[1]

    @property
    def d(self) -> int:
        return self.X.shape[2]


def sample_prompts(n, *, d, L, sigma2, seed, Sigma=None) -> Prompts:
    """Draw ``n`` independent prompts.

    Parameters
    ----------
    n : int
        Number of prompts, ``n >= 1``.
    d, L : int
        Dimension and context length, both ``>= 1``.
    sigma2 : float
        Noise variance ``>= 0``.
    seed : int or numpy.random.Generator
        Explicit source of randomness.
    Sigma : array_like, shape (d, d), optional
        Covariance of ``x`` (symmetric positive definite); identity if omitted.

    Returns
    -------
    Prompts

    Examples
    --------
    >>> p = sample_prompts(4, d=5, L=40, sigma2=0.1, seed=0)
    >>> p.X.shape, p.y.shape, p.xq.shape
    ((4, 40, 5), (4, 40), (4, 5))
    """
    n = check_positive_int("n", n)
    d, L, sigma2 = check_problem(d, L, sigma2)
    rng = as_generator(seed)
    X = rng.standard_normal((n, L, d))
    xq = rng.standard_normal((n, d))
    if Sigma is not None:
        Sigma = np.asarray(Sigma, dtype=np.float64)
        if Sigma.shape != (d, d) or not np.all(np.isfinite(Sigma)) or not np.allclose(Sigma, Sigma.T):
            raise ValueError(f"`Sigma` must be a finite symmetric ({d}, {d}) matrix, got shape {Sigma.shape}")
        try:
            C = np.linalg.cholesky(Sigma)
        except np.linalg.LinAlgError:
            raise ValueError("`Sigma` must be positive definite") from None
        X = X @ C.T
        xq = xq @ C.T
    beta = rng.standard_normal((n, d)) / np.sqrt(d)
    noise_sd = np.sqrt(sigma2)
    y = np.einsum("nld,nd->nl", X, beta) + noise_sd * rng.standard_normal((n, L))
    yq = np.einsum("nd,nd->n", xq, beta) + noise_sd * rng.standard_normal(n)
    return Prompts(X=X, y=y, xq=xq, yq=yq, beta=beta, sigma2=sigma2)
