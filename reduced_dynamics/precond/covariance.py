"""Covariances for x ~ N(0, Σ): a given spectrum in a seeded random basis, and the package's example Σ.

Every Σ check, figure and example of the package uses :func:`example_covariance` (eigenvalues
``linspace(0.5, 4, d)`` in the random basis of seed 0 unless told otherwise), the matrix the command
line builds from ``--sigma-eigs 0.5,1.375,2.25,3.125,4 --sigma-seed 0`` at ``d = 5``.

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.setting import Setting, as_setting

__all__ = ["EXAMPLE_EIGS_RANGE", "covariance_from_eigs", "example_covariance", "precond_setting"]

#: smallest and largest eigenvalue of :func:`example_covariance`
EXAMPLE_EIGS_RANGE = (0.5, 4.0)


def covariance_from_eigs(eigs, *, seed: int) -> np.ndarray:
    """The covariance ``Σ = Q diag(eigs) Qᵀ`` with a random orthogonal basis ``Q`` drawn from ``seed``.

    ``Q`` is the Q factor of the QR decomposition of a ``(d, d)`` standard normal matrix drawn by
    ``numpy.random.default_rng(seed)``, its columns' signs fixed so that ``R`` has a positive
    diagonal (a Haar-distributed orthogonal matrix); ``d = len(eigs)``.

    Parameters
    ----------
    eigs : sequence of float, each > 0, length d >= 1
        The eigenvalues of ``Σ``.
    seed : int, >= 0
        Seed of the basis.

    Returns
    -------
    ndarray, shape (d, d)
        Symmetric positive definite, exactly symmetric.

    Raises
    ------
    ValueError
        Naming ``eigs`` (empty, non-finite or non-positive) or ``seed``.

    Examples
    --------
    >>> S = covariance_from_eigs([0.5, 1.0, 4.0], seed=0)
    >>> np.allclose(np.linalg.eigvalsh(S), [0.5, 1.0, 4.0])
    True
    """
    e = np.asarray(eigs, dtype=np.float64) if not isinstance(eigs, (str, bytes)) else np.array([])
    if e.ndim != 1 or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"`eigs` must be a non-empty list of finite positive eigenvalues, got {eigs!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
    d = e.size
    q, r = np.linalg.qr(np.random.default_rng(int(seed)).standard_normal((d, d)))
    q = q * np.where(np.diag(r) < 0, -1.0, 1.0)
    S = (q * e) @ q.T
    return 0.5 * (S + S.T)


def example_covariance(setting, *, seed: int) -> np.ndarray:
    """The example covariance: eigenvalues ``linspace(0.5, 4, d)`` in the random basis of ``seed``.

    Parameters
    ----------
    setting : Setting
        Its scalar ``d`` is the dimension (its ``Sigma`` is ignored).
    seed : int, >= 0
        Seed of the basis (:func:`covariance_from_eigs`); the package's checks and figures use 0.

    Returns
    -------
    ndarray, shape (d, d)
        Symmetric positive definite.

    Raises
    ------
    ValueError
        If ``setting.d`` is not a scalar dimension, or naming ``seed``.

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> S = example_covariance(Setting(d=5, L=40, sigma2=0.1), seed=0)
    >>> np.round(np.linalg.eigvalsh(S), 3).tolist()
    [0.5, 1.375, 2.25, 3.125, 4.0]
    """
    d = as_setting(setting).d
    if not isinstance(d, (int, np.integer)):
        raise ValueError(f"`setting` must have a scalar d for example_covariance, got d = {d!r}")
    lo, hi = EXAMPLE_EIGS_RANGE
    return covariance_from_eigs(np.linspace(lo, hi, int(d)), seed=seed)


def precond_setting(setting) -> Setting:
    """``setting`` itself if it has a ``Sigma``, else ``setting`` with the example covariance (seed 0).

    The covariance of the ``precond_risk`` check and figure: the setting's own Σ when set,
    otherwise :func:`example_covariance` ``(setting, seed=0)`` (eigenvalues evenly spread over
    [0.5, 4] in the random basis of seed 0).

    Parameters
    ----------
    setting : Setting
        Scalar ``d``.

    Returns
    -------
    Setting
        With ``Sigma`` set.

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> s = precond_setting(Setting(d=5, L=40, sigma2=0.1))
    >>> np.round(np.linalg.eigvalsh(s.Sigma), 3).tolist()
    [0.5, 1.375, 2.25, 3.125, 4.0]
    """
    setting = as_setting(setting, "precond_setting")
    if setting.Sigma is not None:
        return setting
    return setting.replace(Sigma=example_covariance(setting, seed=0))
