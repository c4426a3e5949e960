r"""Multi-task prompts, predictors, limit predictors and per-task Monte Carlo risks.

Prompts: :math:`x_l, x_q \sim N(0, I_d)`, per task :math:`\beta_{S_n} \sim N(0, I/|S_n|)`
(zero off :math:`S_n`), :math:`y_{l,n} = \beta_n^\top x_l + \varepsilon_{l,n}` with independent
:math:`N(0, \sigma^2)` noise per example and task; the query asks for all :math:`N` responses.

Limit predictors (derivation in docs/theory.md#extensions and
:mod:`reduced_dynamics.multitask.loss`). Along the flow the OV weights of each task sum to
zero (:math:`\sum_h\mu^{(h)}_n \to 0`) and the KQ weights shrink at fixed
:math:`A = M^\top\Omega`, so the reduced model tends to the **weighted debiased GD**
:math:`\hat y_n = \frac1L\sum_l y_{l,n}(x_l-\bar x)^\top\operatorname{diag}(a_n)x_q`, whose
approximate loss is :func:`~reduced_dynamics.multitask.loss.limit_loss_per_task`. Since
:math:`1^\top M = 0`, :math:`\operatorname{rank}A \le H - 1`:

* :math:`H \ge N + 1`: :math:`A` is unconstrained; the optimum is per-task debiased GD
  restricted to :math:`S_n` with :math:`\eta_n = 1/(1 + c|S_n|)` (loss
  :math:`1+\sigma^2-\eta_n` per task);
* :math:`2 \le H \le N`: the best :math:`A` of rank :math:`H - 1` (found numerically);
  for :math:`H = 2` one weighted debiased GD shared by the tasks, :math:`a_n = \kappa_n w`;
* :math:`H = 1`: no debiasing; the limit is the single head at the optimum of
  :math:`\tilde L` (a weighted kernel regressor).

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_bool, check_finite_array, check_positive_int
from reduced_dynamics.estimation.prompts import as_generator
from reduced_dynamics.estimation.risk import RiskDifference, RiskEstimate
from reduced_dynamics.multitask.loss import check_state, limit_loss_per_task, mt_gradient, mt_loss, support_mask
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "MultitaskPrompts",
    "check_mt_prompts",
    "sample_mt_prompts",
    "reduced_mt_predict",
    "weighted_dgd_predict",
    "support_dgd_weights",
    "support_ridge_predict",
    "LimitPredictor",
    "limit_predictor",
    "TaskRisks",
    "per_task_risks",
]


@dataclasses.dataclass(frozen=True)
class MultitaskPrompts(FrozenResult):
    """A batch of multi-task prompts.

    Attributes
    ----------
    X : ndarray, shape (n, L, d)
    Y : ndarray, shape (n, L, N)
    xq : ndarray, shape (n, d)
    yq : ndarray, shape (n, N)
    """

    X: np.ndarray
    Y: np.ndarray
    xq: np.ndarray
    yq: np.ndarray

    @property
    def tokens(self) -> np.ndarray:
        """Embedded columns ``z_l = (x_l, y_l)``: shape (n, L, d + N)."""
        return np.concatenate([self.X, self.Y], axis=-1)


def check_mt_prompts(prompts, *, setting: Setting | None = None, name: str = "prompts") -> MultitaskPrompts:
    """Refuse anything but a :class:`MultitaskPrompts` of consistent, finite, real arrays (of ``setting``'s d and N).

    Returns ``prompts``; raises ``ValueError`` naming ``name`` (the argument) otherwise.
    """
    if not isinstance(prompts, MultitaskPrompts):
        raise ValueError(f"`{name}` must be a MultitaskPrompts (sample_mt_prompts), got {type(prompts).__name__}")
    X, Y, xq, yq = (np.asarray(a) for a in (prompts.X, prompts.Y, prompts.xq, prompts.yq))
    if X.ndim != 3 or Y.ndim != 3 or xq.ndim != 2 or yq.ndim != 2:
        raise ValueError(f"`{name}` must hold X (n, L, d), Y (n, L, N), xq (n, d), yq (n, N)")
    n, L, d = X.shape
    N = Y.shape[-1]
    if Y.shape != (n, L, N) or xq.shape != (n, d) or yq.shape != (n, N) or min(n, L, d, N) < 1:
        raise ValueError(
            f"`{name}` must hold X (n, L, d), Y (n, L, N), xq (n, d), yq (n, N) of one n, L, d, N >= 1, got shapes "
            f"{X.shape}, {Y.shape}, {xq.shape}, {yq.shape}"
        )
    if setting is not None and (d, N) != (setting.d, setting.n_tasks):
        raise ValueError(
            f"`{name}` has d = {d} and N = {N} tasks, but `setting` has d = {setting.d} and N = {setting.n_tasks}"
        )
    for a in (X, Y, xq, yq):
        if a.dtype.kind not in "fiu" or not np.all(np.isfinite(a)):
            raise ValueError(f"`{name}` must hold finite real arrays (no NaN/inf, no complex)")
    return prompts


def sample_mt_prompts(n_prompts: int, setting: Setting, *, seed) -> MultitaskPrompts:
    """Draw ``n_prompts`` multi-task prompts of ``setting`` (see the module docstring).

    Parameters
    ----------
    n_prompts : int, in [1, 10**7]
    setting : Setting
        Scalar, isotropic; ``tasks`` (or the single task).
    seed : int >= 0 or numpy.random.Generator

    Returns
    -------
    MultitaskPrompts
    """
    setting = as_setting(setting, "sample_mt_prompts").require_isotropic("sample_mt_prompts")
    n = check_positive_int("n_prompts", n_prompts, hi=10**7)
    d, L, N = setting.d, setting.L, setting.n_tasks
    if n * (L + 1) * (d + N) * 8 * 3 > 2**30:
        raise ValueError(f"`n_prompts` = {n} needs more than 1 GiB at L = {L}; sample in chunks")
    rng = as_generator(seed)
    mask = support_mask(setting)
    beta = rng.standard_normal((n, N, d)) * mask / np.sqrt(mask.sum(axis=1))[:, None]
    X = rng.standard_normal((n, L, d))
    xq = rng.standard_normal((n, d))
    sd = np.sqrt(setting.sigma2)
    Y = np.einsum("bld,bnd->bln", X, beta) + sd * rng.standard_normal((n, L, N))
    yq = np.einsum("bd,bnd->bn", xq, beta) + sd * rng.standard_normal((n, N))
    return MultitaskPrompts(X=X, Y=Y, xq=xq, yq=yq)


def _softmax(S):
    S = S - S.max(axis=-1, keepdims=True)
    np.exp(S, out=S)
    S /= S.sum(axis=-1, keepdims=True)
    return S


def reduced_mt_predict(prompts: MultitaskPrompts, omega, mu, setting: Setting) -> np.ndarray:
    r"""Predictions of the multi-task reduced model, shape (n, N).

    :math:`\hat y_n = \sum_h\mu^{(h)}_n\sum_l y_{l,n}\operatorname{softmax}_l(x_l^\top\operatorname{diag}(\omega^{(h)})x_q)`.

    Parameters
    ----------
    prompts : MultitaskPrompts
    omega : array_like, shape (H, d)
    mu : array_like, shape (H, N)
    setting : Setting
    """
    omega, mu = check_state(omega, mu, setting)
    check_mt_prompts(prompts, setting=as_setting(setting, "reduced_mt_predict"))
    S = np.einsum("bld,hd,bd->bhl", prompts.X, omega, prompts.xq)
    P = _softmax(S)
    return np.einsum("bhl,bln,hn->bn", P, prompts.Y, mu)


def weighted_dgd_predict(prompts: MultitaskPrompts, A) -> np.ndarray:
    r"""Weighted debiased GD per task: :math:`\frac1L\sum_l y_{l,n}(x_l-\bar x)^\top\operatorname{diag}(a_n)x_q`, shape (n, N).

    Parameters
    ----------
    prompts : MultitaskPrompts
    A : array_like, shape (N, d)
        Per-task, per-feature steps.
    """
    check_mt_prompts(prompts)
    A = check_finite_array("A", A, ndim=2)
    if A.shape != (prompts.Y.shape[-1], prompts.X.shape[-1]):
        raise ValueError(f"`A` must have shape (N, d) = {(prompts.Y.shape[-1], prompts.X.shape[-1])}, got {A.shape}")
    Xc = prompts.X - prompts.X.mean(axis=1, keepdims=True)
    L = prompts.X.shape[1]
    # s[b, l, n] = (x_l - xbar)^T diag(a_n) x_q
    s = np.einsum("bld,nd,bd->bln", Xc, A, prompts.xq)
    return (s * prompts.Y).sum(axis=1) / L


def support_dgd_weights(setting: Setting, *, eta=None) -> np.ndarray:
    r"""Effective weights of debiased GD restricted to each support: ``A[n] = η_n 1_{S_n}``, shape (N, d).

    Parameters
    ----------
    setting : Setting
    eta : array_like of shape (N,), optional
        Steps per task; default :math:`\eta_n = 1/(1 + c|S_n|)` (the minimiser of the limit loss).
    """
    setting = as_setting(setting, "support_dgd_weights")
    mask = support_mask(setting)
    if eta is None:
        eta = 1.0 / (1.0 + setting.c * mask.sum(axis=1))
    eta = check_finite_array("eta", eta, ndim=1)
    if eta.shape != (mask.shape[0],):
        raise ValueError(f"`eta` must have shape (N,) = ({mask.shape[0]},), got {eta.shape}")
    return mask * eta[:, None]


def support_ridge_predict(prompts: MultitaskPrompts, setting: Setting) -> np.ndarray:
    r"""Bayes ridge per task on its support: :math:`x_{q,S}^\top(X_S^\top X_S + \sigma^2|S| I)^{-1}X_S^\top y_n`, shape (n, N).

    Bayes-optimal for task :math:`n` under :math:`\beta_{S_n}\sim N(0, I/|S_n|)`.
    """
    setting = as_setting(setting, "support_ridge_predict")
    check_mt_prompts(prompts, setting=setting)
    out = np.empty(prompts.yq.shape)
    for n, S in enumerate(setting.supports):
        S = list(S)
        XS = prompts.X[:, :, S]
        G = np.einsum("bli,blj->bij", XS, XS) + setting.sigma2 * len(S) * np.eye(len(S))
        rhs = np.einsum("bli,bl->bi", XS, prompts.Y[:, :, n])
        out[:, n] = np.einsum("bi,bi->b", prompts.xq[:, S], np.linalg.solve(G, rhs[..., None])[..., 0])
    return out


@dataclasses.dataclass(frozen=True)
class LimitPredictor(FrozenResult):
    """The predictor the reduced flow approaches for ``n_heads`` heads (:func:`limit_predictor`).

    Attributes
    ----------
    n_heads : int
    regime : str
        ``"kernel"`` (H = 1), ``"shared"`` (2 <= H <= N: rank H-1) or ``"per-task"`` (H >= N+1).
    A : ndarray, shape (N, d)
        Effective weights (for ``"kernel"``: ``mu_n * omega``, the single head's).
    loss_per_task : ndarray, shape (N,)
        Its approximate loss per task (limit loss; for ``"kernel"`` the one-head L̃).
    omega, mu : ndarray or None
        The one-head optimum (``"kernel"`` only), shapes (1, d) and (1, N).
    """

    n_heads: int
    regime: str
    A: np.ndarray
    loss_per_task: np.ndarray
    omega: np.ndarray | None = None
    mu: np.ndarray | None = None


#: number of variables of the shared-regime factorisation from which :func:`limit_predictor` uses L-BFGS-B
LBFGS_FROM = 2000


def limit_predictor(n_heads: int, setting: Setting) -> LimitPredictor:
    """The limit predictor of the reduced flow for ``n_heads`` heads (see the module docstring).

    Parameters
    ----------
    n_heads : int, in [1, 64]
    setting : Setting

    Returns
    -------
    LimitPredictor
    """
    from scipy.optimize import minimize  # on use: scipy.optimize is slow to import

    H = check_positive_int("n_heads", n_heads, hi=64)
    setting = as_setting(setting, "limit_predictor")
    N, d = setting.n_tasks, setting.d
    mask = support_mask(setting)
    if H >= N + 1:
        A = support_dgd_weights(setting)
        return LimitPredictor(n_heads=H, regime="per-task", A=A, loss_per_task=limit_loss_per_task(A, setting))
    if H == 1:
        # one head: minimise L~ itself from the positive start (deterministic)
        def f(x):
            om, m = x[:d].reshape(1, d), x[d:].reshape(1, N)
            try:
                g = mt_gradient(om, m, setting)
                return mt_loss(om, m, setting), np.concatenate([g.omega.ravel(), g.mu.ravel()])
            except ValueError:  # a trial step of the line search beyond exp's range (large sigma2): rejected
                return math.inf, np.zeros_like(x)

        x0 = np.concatenate([np.full(d, 0.3), np.ones(N)])
        r = minimize(f, x0, jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 10_000})
        om, m = r.x[:d].reshape(1, d), r.x[d:].reshape(1, N)
        from reduced_dynamics.multitask.loss import effective_weights, mt_loss_per_task

        if not r.fun < N * (1.0 + setting.sigma2):  # no better than mu = 0: the minimum was not found
            raise ValueError(
                f"`sigma2` = {setting.sigma2:g} is too large for the one-head limit of L̃: the signal terms are "
                "below the rounding of the noise term 1 + sigma2 in float64 and the minimisation finds no point "
                "better than mu = 0; use a smaller `sigma2`"
            )

        return LimitPredictor(
            n_heads=1,
            regime="kernel",
            A=effective_weights(om, m, setting),
            loss_per_task=mt_loss_per_task(om, m, setting),
            omega=om,
            mu=m,
        )
    # rank r = H - 1 factorisation A = U W, U (N, r), W (r, d); best of several deterministic starts
    r_ = H - 1
    size = mask.sum(axis=1)
    c = setting.c

    def g(x):
        U, W = x[: N * r_].reshape(N, r_), x[N * r_ :].reshape(r_, d)
        A = U @ W
        R = -2.0 * (1.0 - A) * mask / size[:, None] + 2.0 * c * A
        val = float(limit_loss_per_task(A, setting).sum())
        return val, np.concatenate([(R @ W.T).ravel(), (U.T @ R).ravel()])

    best = None
    rng = np.random.default_rng(12345)  # fixed starts: a deterministic optimisation, not a random result
    n_var = N * r_ + r_ * d
    # BFGS keeps a dense n_var x n_var inverse Hessian: beyond LBFGS_FROM variables (64 tasks, 64 heads: 8064,
    # 0.5 GB a copy and minutes) the limited-memory method, O(n_var) memory, reaches the same minimum
    if n_var <= LBFGS_FROM:
        method, options = "BFGS", {"gtol": 1e-12, "maxiter": 20_000}
    else:
        method, options = "L-BFGS-B", {"gtol": 1e-12, "ftol": 1e-15, "maxiter": 20_000, "maxcor": 30}
    for _ in range(8):
        x0 = 0.5 + 0.1 * rng.standard_normal(n_var)
        r = minimize(g, x0, jac=True, method=method, options=options)
        if best is None or r.fun < best.fun:
            best = r
    U, W = best.x[: N * r_].reshape(N, r_), best.x[N * r_ :].reshape(r_, d)
    A = U @ W
    return LimitPredictor(n_heads=H, regime="shared", A=A, loss_per_task=limit_loss_per_task(A, setting))


@dataclasses.dataclass(frozen=True)
class TaskRisks(FrozenResult):
    """Per-task Monte Carlo risks of several predictors on common prompts (:func:`per_task_risks`).

    Attributes
    ----------
    names : tuple of str
    risk : ndarray, shape (P, N)
        Mean squared error per predictor and task (includes the noise σ²).
    stderr : ndarray, shape (P, N)
    n : int
        Prompts.
    losses : ndarray, shape (P, N, n) or None
        Per-prompt squared errors (kept when ``keep_losses``), for paired differences.
    """

    names: tuple
    risk: np.ndarray
    stderr: np.ndarray
    n: int
    losses: np.ndarray | None = None

    def _index(self, label: str, name) -> int:
        if not isinstance(name, str) or name not in self.names:
            raise ValueError(f"`{label}` must be one of the predictors {list(self.names)}, got {name!r}")
        return self.names.index(name)

    def _task(self, task) -> int:
        from reduced_dynamics._validation import check_nonnegative_int

        N = self.risk.shape[1]
        return check_nonnegative_int("task", task, hi=N - 1)

    def estimate(self, name: str, task: int) -> RiskEstimate:
        """The :class:`~reduced_dynamics.estimation.risk.RiskEstimate` of one predictor on one task (0-based)."""
        i = self._index("name", name)
        task = self._task(task)
        return RiskEstimate(risk=float(self.risk[i, task]), stderr=float(self.stderr[i, task]), n=self.n, name=name)

    def difference(self, first: str, second: str, task: int) -> RiskDifference:
        """Paired difference ``risk(first) - risk(second)`` on task ``task`` (needs ``keep_losses``)."""
        if self.losses is None:
            raise ValueError("`keep_losses` was False: no per-prompt losses for a paired difference")
        i, j, task = self._index("first", first), self._index("second", second), self._task(task)
        a = self.losses[i, task] - self.losses[j, task]
        return RiskDifference(
            risk=float(a.mean()), stderr=float(a.std(ddof=1) / np.sqrt(a.size)), n=self.n, first=first, second=second
        )


def per_task_risks(
    predictors: dict, setting: Setting, *, n_prompts: int, seed, chunk: int = 4096, keep_losses: bool = False
) -> TaskRisks:
    """Per-task risks of ``predictors`` (name -> callable(prompts) -> (n, N) predictions) on the same prompts.

    Parameters
    ----------
    predictors : dict
    setting : Setting
    n_prompts : int, in [2, 10**8]
    seed : int >= 0
    chunk : int
        Prompts per batch.
    keep_losses : bool
        Keep the per-prompt losses (for :meth:`TaskRisks.difference`).

    Returns
    -------
    TaskRisks
    """
    setting = as_setting(setting, "per_task_risks")
    n = check_positive_int("n_prompts", n_prompts, hi=10**8)
    if n < 2:
        raise ValueError(f"`n_prompts` must be >= 2 (for a standard error), got {n}")
    chunk = check_positive_int("chunk", chunk, hi=10**6)
    keep_losses = check_bool("keep_losses", keep_losses)
    if not isinstance(predictors, dict) or not predictors:
        raise ValueError("`predictors` must be a non-empty dict: name -> callable(prompts) -> (n, N) predictions")
    for key, fn in predictors.items():
        if not isinstance(key, str) or not callable(fn):
            raise ValueError(f"`predictors` must map names (str) to callables, got {key!r}: {type(fn).__name__}")
    rng = as_generator(seed)
    names = tuple(predictors)
    N = setting.n_tasks
    all_losses = np.empty((len(names), N, n))
    done = 0
    while done < n:
        m = min(chunk, n - done)
        pr = sample_mt_prompts(m, setting, seed=rng)
        for i, name in enumerate(names):
            pred = np.asarray(predictors[name](pr), dtype=float)
            if pred.shape != pr.yq.shape or not np.all(np.isfinite(pred)):
                raise ValueError(
                    f"predictor {name!r} returned non-finite values or shape {pred.shape} != {pr.yq.shape}"
                )
            all_losses[i, :, done : done + m] = ((pred - pr.yq) ** 2).T
        done += m
    return TaskRisks(
        names=names,
        risk=all_losses.mean(axis=-1),
        stderr=all_losses.std(axis=-1, ddof=1) / np.sqrt(n),
        n=n,
        losses=all_losses if keep_losses else None,
    )
