r"""The data model as one frozen, validated object: :class:`Setting`.

Every function of the package whose result depends on the data model takes a
:class:`Setting` as its ``setting`` argument (the first argument after the
mathematical state, e.g. ``approx_loss(omega, mu, setting)``), never loose
``d, L, sigma2`` keywords. The setting validates itself once, when it is
built, so the functions that receive it do not re-check it.

The fields may be scalars (the usual case) or arrays that broadcast against
each other: closed forms such as :func:`reduced_dynamics.eta_star` then
broadcast over them, while simulators (flows, Monte Carlo, training) require a
scalar setting and say so.

References
----------
docs/theory.md#data-model
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from reduced_dynamics.activations import Activation, get_activation

__all__ = ["Setting", "PAPER_SETTING", "THEORY_STATEMENTS", "as_setting"]

#: Allowed ranges (inclusive) of the scalar constants. Outside them the closed
#: forms overflow or lose all precision, or the simulators cannot run.
D_MAX = 100_000
L_MAX = 10**9
SIGMA2_MAX = 1e12
#: Largest ``d`` of :meth:`Setting.covariance` by default (a dense d × d float64 matrix of 32 MB).
COVARIANCE_D_MAX = 2000
#: At most this many tasks in ``Setting.tasks``.
MAX_TASKS = 64


_REASON_L1 = (
    "L = 1 is outside the theory's range: L̃ is the large-L approximation of the risk "
    "(docs/theory.md#approximate-loss) and debiased GD, the limit predictor of S_γ, vanishes identically at L = 1"
)
_REASON_D1 = (
    "d = 1 is outside the drift law's range: its corrections are relative O(γ⁴) and γ(t) ∝ d^(-1/2), so at "
    "d = 1 the flow stays outside the asymptotic regime for any practical time (docs/theory.md#drift-law)"
)
_REASON_S0 = (
    "σ² = 0 is outside the statement's range: without noise the risk of these states itself vanishes like d/L, "
    "so the relative error of an O(1/L) approximation need not decrease with L (docs/theory.md#corrected-loss)"
)

#: Where each statement of the theory applies. Statement name -> tuple of (condition on a scalar
#: setting, reason when the condition fails). Read by :meth:`Setting.theory_range_issues`.
THEORY_STATEMENTS = {
    "approximate-loss": ((lambda s: s.L >= 2, _REASON_L1),),
    "solution-manifold": ((lambda s: s.L >= 2, _REASON_L1),),
    "drift-law": ((lambda s: s.L >= 2, _REASON_L1), (lambda s: s.d >= 2, _REASON_D1)),
    "approximation-error": ((lambda s: s.sigma2 > 0, _REASON_S0),),
}


def _int_field(name: str, value, hi: int):
    """Validate an integer field (scalar or array) in ``[1, hi]``."""
    msg = f"`{name}` must be a positive integer <= {hi}, got {value!r}"
    if isinstance(value, bool):
        raise ValueError(msg)
    if isinstance(value, numbers.Integral):
        if not 1 <= value <= hi:
            raise ValueError(msg)
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, np.ndarray):
        if not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(msg)
        return _int_field(name, int(value), hi)
    try:
        arr = np.asarray(value)
    except Exception:
        raise ValueError(msg) from None
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise ValueError(msg)
    if arr.ndim == 0:
        return _int_field(name, arr.item(), hi)
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 1) or np.any(arr > hi):
        raise ValueError(msg)
    out = arr.astype(np.int64)
    out.setflags(write=False)
    return out


def _float_field(name: str, value, lo: float, hi: float):
    """Validate a real field (scalar or array) in ``[lo, hi]``."""
    msg = f"`{name}` must be a finite number in [{lo:g}, {hi:g}], got {value!r}"
    if isinstance(value, bool) or np.iscomplexobj(value):
        raise ValueError(msg)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(msg) from None
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < lo) or np.any(arr > hi):
        raise ValueError(msg)
    if arr.ndim == 0:
        return float(arr)
    arr = arr.copy()
    arr.setflags(write=False)
    return arr


def _covariance_field(Sigma, d):
    """Validate a covariance matrix: symmetric positive definite, shape ``(d, d)``."""
    if Sigma is None:
        return None
    if not isinstance(d, int):
        raise ValueError("`Sigma` needs a scalar `d`, got an array of `d`")
    if np.iscomplexobj(Sigma):
        raise ValueError(f"`Sigma` must be a real ({d}, {d}) matrix, got a complex array")
    try:
        S = np.array(Sigma, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`Sigma` must be a real ({d}, {d}) matrix, got {Sigma!r}") from None
    if S.shape != (d, d) or not np.all(np.isfinite(S)):
        raise ValueError(f"`Sigma` must be a finite ({d}, {d}) matrix, got shape {S.shape}")
    if not np.allclose(S, S.T, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(S).max()))):
        raise ValueError("`Sigma` must be symmetric")
    lo = float(np.linalg.eigvalsh(S).min())
    if lo <= 0:
        raise ValueError(f"`Sigma` must be positive definite, smallest eigenvalue {lo:.3g}")
    S = 0.5 * (S + S.T)
    S.setflags(write=False)
    return S


def _tasks_field(tasks, d):
    """Validate the task supports: a sequence of non-empty, distinct sets of 0-based feature indices."""
    if tasks is None:
        return None
    if not isinstance(d, int):
        raise ValueError("`tasks` needs a scalar `d`, got an array of `d`")
    rng = f"[0, {d - 1}]"
    msg = f"`tasks` must be a non-empty sequence of non-empty sets of feature indices in {rng}"
    if isinstance(tasks, (str, bytes)) or not hasattr(tasks, "__iter__"):
        raise ValueError(f"{msg}, got {tasks!r}")
    out = []
    for n, support in enumerate(tasks):
        if isinstance(support, (str, bytes)) or not hasattr(support, "__iter__"):
            raise ValueError(f"{msg}; task {n} is {support!r}")
        idx = []
        for j in support:
            if isinstance(j, bool) or not isinstance(j, numbers.Integral) or not 0 <= int(j) < d:
                raise ValueError(f"{msg}; task {n} has the index {j!r}")
            idx.append(int(j))
        if not idx:
            raise ValueError(f"{msg}; task {n} is empty")
        if len(set(idx)) != len(idx):
            raise ValueError(f"{msg}; task {n} lists a feature twice: {sorted(idx)}")
        support_t = tuple(sorted(idx))
        if support_t in out:
            raise ValueError(f"{msg}; task {n} repeats task {out.index(support_t)}: {list(support_t)}")
        out.append(support_t)
    if not out:
        raise ValueError(f"{msg}, got an empty sequence")
    if len(out) > MAX_TASKS:
        raise ValueError(f"`tasks` must list at most {MAX_TASKS} tasks, got {len(out)}")
    return tuple(out)


def _key(value):
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Setting:
    r"""The in-context regression data model, validated once.

    Covariates :math:`x_l, x_q \sim N(0, \Sigma)` (:math:`\Sigma = I_d` by
    default), task :math:`\beta \sim N(0, I_d/d)`, responses
    :math:`y_l = \beta^\top x_l + \varepsilon_l`, noise
    :math:`\varepsilon_l \sim N(0, \sigma^2)`, ``L`` examples per prompt.

    Parameters
    ----------
    d : int or ndarray of int, in [1, 100000]
        Covariate dimension.
    L : int or ndarray of int, in [1, 1e9]
        Number of in-context examples per prompt.
    sigma2 : float or ndarray, in [0, 1e12]
        Noise variance :math:`\sigma^2`.
    Sigma : ndarray, shape (d, d), optional
        Covariance of the covariates (symmetric positive definite). ``None``
        means :math:`I_d`. Only the prompt sampler and the ridge predictor use
        it so far; functions that assume isotropy call :meth:`require_isotropic`.
    tasks : sequence of sequences of int, optional
        Multi-task regression (docs/theory.md#extensions): the support
        :math:`S_n \subseteq \{0, \dots, d-1\}` (0-based feature indices) of each
        task :math:`n`. Task :math:`n` has :math:`y_n = \beta_{S_n}^\top x_{S_n} + \varepsilon_n`
        with :math:`\beta_{S_n} \sim N(0, I/|S_n|)` and independent noise. Each
        support is non-empty, without repeated features, and no two tasks have the same
        support (disjoint, nested and overlapping supports are allowed). Stored as a
        tuple of sorted tuples. ``None`` (default): today's single task on all features.
        Needs a scalar ``d``. Only ``reduced_dynamics.multitask`` reads it.
    activation : {"exp", "affine", "square", "tanh"}, default "exp"
        The attention activation ``f`` replacing ``exp`` in the softmax weights
        (:mod:`reduced_dynamics.activations`, docs/theory.md#extensions). Functions
        that assume the softmax call :meth:`require_softmax`.
    activation_c : float, in (0, 1e6], default 1.0
        The constant ``C`` of ``affine`` (``1 + Cx``) and ``square`` (``(1 + Cx)²``);
        must be 1.0 for ``exp`` and ``tanh``.

    Raises
    ------
    ValueError
        Naming the field and its allowed range.

    Notes
    -----
    Array-valued fields broadcast against each other (numpy rules); closed
    forms broadcast over them. Functions that simulate call
    :meth:`require_scalar`. A setting is hashable and compares by value, so
    it can key caches. New fields of the data model (task supports, the
    attention activation) are added here, with defaults that keep the
    current behaviour.

    References
    ----------
    docs/theory.md#data-model

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> s = Setting(d=5, L=40, sigma2=0.1)
    >>> round(s.eta_star, 6), round(s.c, 6), s.xi
    (0.879121, 0.0275, 0.125)
    >>> Setting(d=5, L=[10, 40, 160], sigma2=0.1).eta_star.round(4)
    array([0.6452, 0.8791, 0.9668])
    """

    d: Any = 5
    L: Any = 40
    sigma2: Any = 0.1
    Sigma: Any = None
    tasks: Any = None
    activation: Any = "exp"
    activation_c: Any = 1.0

    def __post_init__(self):
        d = _int_field("d", self.d, D_MAX)
        L = _int_field("L", self.L, L_MAX)
        sigma2 = _float_field("sigma2", self.sigma2, 0.0, SIGMA2_MAX)
        try:
            np.broadcast_shapes(np.shape(d), np.shape(L), np.shape(sigma2))
        except ValueError:
            raise ValueError(
                f"`d`, `L` and `sigma2` must broadcast together, got shapes "
                f"{np.shape(d)}, {np.shape(L)}, {np.shape(sigma2)}"
            ) from None
        Sigma = _covariance_field(self.Sigma, d)
        tasks = _tasks_field(self.tasks, d)
        act = get_activation(self.activation, self.activation_c)
        object.__setattr__(self, "activation", act.name)
        object.__setattr__(self, "activation_c", act.c)
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "d", d)
        object.__setattr__(self, "L", L)
        object.__setattr__(self, "sigma2", sigma2)
        object.__setattr__(self, "Sigma", Sigma)

    # ------------------------------------------------------------------ identity
    def _astuple(self):
        return tuple(_key(getattr(self, f.name)) for f in dataclasses.fields(self))

    def __eq__(self, other):
        if not isinstance(other, Setting):
            return NotImplemented
        return self._astuple() == other._astuple()

    def __hash__(self):
        return hash(self._astuple())

    def __repr__(self) -> str:
        def show(v):
            return np.array2string(v, separator=", ") if isinstance(v, np.ndarray) else repr(v)

        parts = [f"d={show(self.d)}", f"L={show(self.L)}", f"sigma2={show(self.sigma2)}"]
        if self.Sigma is not None:
            parts.append(f"Sigma=<{self.Sigma.shape[0]}x{self.Sigma.shape[1]} matrix>")
        if self.tasks is not None:
            parts.append(f"tasks={self.tasks!r}")
        if self.activation != "exp":
            parts.append(f"activation={self.activation!r}")
            if self.activation_c != 1.0:
                parts.append(f"activation_c={self.activation_c!r}")
        return f"Setting({', '.join(parts)})"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def paper(cls) -> Setting:
        """The paper's setting: ``d = 5, L = 40, sigma2 = 0.1``."""
        return cls(d=5, L=40, sigma2=0.1)

    @classmethod
    def paper_multitask(cls) -> Setting:
        """The paper's multi-task setting: ``d = 6, L = 40, sigma2 = 0.1``, supports {1,2,3,4} and {3,4,5,6}.

        In 0-based indices the supports are ``(0, 1, 2, 3)`` and ``(2, 3, 4, 5)``.

        Examples
        --------
        >>> Setting.paper_multitask().tasks
        ((0, 1, 2, 3), (2, 3, 4, 5))
        """
        return cls(d=6, L=40, sigma2=0.1, tasks=((0, 1, 2, 3), (2, 3, 4, 5)))

    def replace(self, **changes) -> Setting:
        """A copy with some fields changed (validated again).

        Examples
        --------
        >>> Setting.paper().replace(L=160)
        Setting(d=5, L=160, sigma2=0.1)
        """
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-friendly fields (arrays become lists; ``tasks`` a list of lists, present only when set;
        ``activation`` and ``activation_c`` present only when not the softmax default)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("activation", "activation_c"):
                if self.activation != "exp":
                    out[f.name] = v
                continue
            if f.name == "tasks":
                if v is not None:
                    out["tasks"] = [list(t) for t in v]
                continue
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        return out

    # ------------------------------------------------------------------ shape
    @property
    def shape(self) -> tuple[int, ...]:
        """Broadcast shape of ``(d, L, sigma2)``; ``()`` for a scalar setting."""
        return np.broadcast_shapes(np.shape(self.d), np.shape(self.L), np.shape(self.sigma2))

    @property
    def is_scalar(self) -> bool:
        """True when ``d``, ``L`` and ``sigma2`` are all scalars."""
        return self.shape == ()

    @property
    def n_tasks(self) -> int:
        """Number of tasks: ``len(tasks)``, or 1 for the single-task default."""
        return 1 if self.tasks is None else len(self.tasks)

    @property
    def supports(self) -> tuple[tuple[int, ...], ...]:
        """The task supports (0-based): ``tasks``, or ``((0, ..., d-1),)`` for the single-task default."""
        if self.tasks is not None:
            return self.tasks
        self.require_scalar("supports")
        return (tuple(range(self.d)),)

    @property
    def isotropic(self) -> bool:
        """True when the covariates are :math:`N(0, I_d)` (``Sigma is None``)."""
        return self.Sigma is None

    def covariance(self, *, d_max: int = COVARIANCE_D_MAX, where: str = "the d × d matrix computations") -> np.ndarray:
        """The covariance Σ as a new ``(d, d)`` float array (``I_d`` when ``Sigma`` is None): the one conversion.

        Parameters
        ----------
        d_max : int
            Refuse a larger ``d`` (a dense ``d × d`` matrix; default 2000, 32 MB).
        where : str
            Named in the error.

        Raises
        ------
        ValueError
            An array-valued ``d``, or ``d > d_max``.

        Examples
        --------
        >>> Setting(d=3).covariance()
        array([[1., 0., 0.],
               [0., 1., 0.],
               [0., 0., 1.]])
        """
        from reduced_dynamics._validation import check_positive_int

        d_max = check_positive_int("d_max", d_max)
        if not isinstance(self.d, int):
            raise ValueError(f"`setting` must have a scalar `d` for {where}, got an array of `d`")
        if self.d > d_max:
            raise ValueError(f"`setting.d` must be <= {d_max} for {where}, got {self.d}")
        return np.eye(self.d) if self.Sigma is None else np.array(self.Sigma, dtype=np.float64)

    def require_scalar(self, where: str) -> Setting:
        """Return ``self`` or raise ``ValueError`` if any field is an array."""
        if not self.is_scalar:
            raise ValueError(f"`setting` must be scalar (one d, L, sigma2) for {where}, got shape {self.shape}")
        return self

    @property
    def activation_fn(self) -> Activation:
        """The :class:`~reduced_dynamics.activations.Activation` named by ``activation``, ``activation_c``."""
        return Activation(self.activation, self.activation_c)

    def require_softmax(self, where: str) -> Setting:
        """Return ``self`` or raise ``ValueError`` if ``activation`` is not the softmax's ``exp``."""
        if self.activation != "exp":
            raise ValueError(
                f"`setting.activation` {self.activation!r} is not supported by {where} yet (exp only; "
                "the reduced model with another activation is reduced_dynamics.activation_dynamics)"
            )
        return self

    def require_isotropic(self, where: str) -> Setting:
        """Return ``self`` or raise ``ValueError`` if ``Sigma`` is set."""
        if not self.isotropic:
            raise ValueError(f"`setting.Sigma` is not supported by {where} yet (isotropic covariates only)")
        return self

    # ------------------------------------------------------------------ derived constants
    @property
    def c(self):
        r"""Fluctuation constant :math:`c = (1+\sigma^2)/L`."""
        return (1.0 + np.asarray(self.sigma2)) / self.L if not self.is_scalar else (1.0 + self.sigma2) / self.L

    @property
    def xi(self):
        r"""Aspect ratio :math:`\xi = d/L`."""
        return np.asarray(self.d) / self.L if not self.is_scalar else self.d / self.L

    @property
    def eta_star(self):
        r"""Optimal effective step :math:`\eta^* = 1/(1 + (1+\sigma^2)d/L) = 1/(1 + c d)`."""
        return 1.0 / (1.0 + self.c * self.d)

    def theory_range_issues(self, statement: str | None = None) -> tuple[str, ...]:
        """Why this (scalar) setting is outside the range of a statement of the theory.

        The validated ranges of the fields (``d <= 1e5``, ``L <= 1e9``, ``sigma2 <= 1e12``) are
        where the numerics work; some statements of the theory need more. At such a setting a
        check of the statement should report SKIPPED with the reason, not FAIL.

        Parameters
        ----------
        statement : str, optional
            A key of :data:`THEORY_STATEMENTS`: ``"approximate-loss"`` (L̃ approximates the
            risk; needs L >= 2), ``"solution-manifold"`` (the flow's limit predictor is debiased
            GD; L >= 2), ``"drift-law"`` (γ(t) = (16 c d³ (pn/H) t)^(-1/6) within a practical
            horizon; L >= 2 and d >= 2), ``"approximation-error"`` (the relative error of an
            O(1/L) approximation decreases with L; σ² > 0). ``None``: every statement.

        Returns
        -------
        tuple of str
            The reasons (each naming the field and the statement's anchor in docs/theory.md),
            without repeats; empty when the setting is inside the range.

        Raises
        ------
        ValueError
            An unknown ``statement``, or an array-valued setting.

        Examples
        --------
        >>> Setting(d=5, L=40, sigma2=0.1).theory_range_issues()
        ()
        >>> Setting(d=5, L=1, sigma2=0.1).theory_range_issues("drift-law")[0][:45]
        "L = 1 is outside the theory's range: L̃ is th"
        """
        self.require_scalar("theory_range_issues")
        if statement is None:
            conditions = [c for conds in THEORY_STATEMENTS.values() for c in conds]
        elif isinstance(statement, str) and statement in THEORY_STATEMENTS:
            conditions = list(THEORY_STATEMENTS[statement])
        else:
            raise ValueError(f"`statement` must be one of {sorted(THEORY_STATEMENTS)} or None, got {statement!r}")
        out: list[str] = []
        for applies, reason in conditions:
            if not applies(self) and reason not in out:
                out.append(reason)
        return tuple(out)

    @property
    def inf_loss(self):
        r"""Infimum of :math:`\tilde L` for :math:`H \ge 2`: :math:`1 + \sigma^2 - \eta^*`."""
        return 1.0 + self.sigma2 - self.eta_star


#: The paper's setting, ``Setting(d=5, L=40, sigma2=0.1)``.
PAPER_SETTING = Setting.paper()


def as_setting(setting, where: str | None = None) -> Setting:
    """Return ``setting`` if it is a :class:`Setting`, else raise ``ValueError``.

    Parameters
    ----------
    setting : Setting
    where : str, optional
        If given, also require a scalar setting (for simulators) and name the
        caller in the error.
    """
    if not isinstance(setting, Setting):
        raise ValueError(
            f"`setting` must be a reduced_dynamics.Setting (e.g. Setting(d=5, L=40, sigma2=0.1)), got {setting!r}"
        )
    if where is not None:
        setting.require_scalar(where)
    return setting
