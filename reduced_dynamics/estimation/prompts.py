r"""The one prompt container, :class:`Prompts`, and its seeded sampler (docs/theory.md#data-model).

Data model: ``x_l ~ N(0, Σ)`` (default ``Σ = I_d``) for ``l = 1..L``, query
``x_q ~ N(0, Σ)``, task ``β ~ N(0, I_d / d)``, noise ``ε ~ N(0, σ²)``,
``y_l = βᵀx_l + ε_l`` and the noisy target ``y_q = βᵀx_q + ε_q``.

Every consumer of prompts (the predictors, :func:`~reduced_dynamics.conditional_loss`,
the Monte Carlo engine, the attention models) takes a :class:`Prompts` and reads
the view it needs:

========================  ==================  =========================================
view                      shape               available
========================  ==================  =========================================
``X``                     (n, L, d)           batches with covariates
``y``                     (n, L)              batches with responses
``x_q``                   (n, d)              batches with covariates
``y_q``                   (n,)                batches with responses
``scores``                (n, L)              always (``s_l = x_lᵀx_q``)
``xq_norm2``              (n,)                always (``|x_q|²``)
``tokens``                (n, L, d+1)         batches with covariates and responses
========================  ==================  =========================================

A batch is built from raw arrays (:meth:`Prompts.from_arrays`), from its
rotation-invariant sufficient statistics only (:meth:`Prompts.from_stats`, no
covariates), or drawn by :func:`sample_prompts`.

Statistics-only sampler (isotropic case). By rotational invariance choose the
frame with :math:`x_q = |x_q| e_1` and write :math:`x_l = (a_l, z_l)`,
:math:`\beta = (\beta_1, \beta_\perp)`. Then

.. math::

    s_l = |x_q|\, a_l,\qquad y_l = \beta_1 a_l + \beta_\perp^\top z_l + \varepsilon_l,
    \qquad y_q = \beta_1 |x_q| + \varepsilon_q,

with :math:`|x_q|^2\sim\chi^2_d`, :math:`a_l\sim N(0,1)`,
:math:`\beta_1\sim N(0,1/d)`, :math:`|\beta_\perp|^2\sim\chi^2_{d-1}/d`, all
independent, and given :math:`\beta_\perp`, :math:`\beta_\perp^\top z_l +
\varepsilon_l \sim N(0, |\beta_\perp|^2 + \sigma^2)` i.i.d. over ``l``.
``sample_prompts(..., stats_only=True)`` draws exactly these, at a cost
independent of ``d``.

References
----------
docs/theory.md#data-model
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "Prompts",
    "sample_prompts",
    "as_generator",
    "MEMORY_BUDGET",
    "CHUNK_BUDGET",
    "N_PROMPTS_MAX",
    "prompt_bytes",
]

#: Largest number of prompts of one Monte Carlo estimate (about a quarter of an hour of the risk engine
#: at d = 5, L = 40); a larger request is refused instead of running for days.
N_PROMPTS_MAX = 10**9

#: The package's memory budget for Monte Carlo, in bytes (1 GiB). No single batch that
#: :func:`sample_prompts` or ``sample_tokens()`` is asked for may exceed it (a larger
#: request is refused with a ``ValueError`` pointing to the chunked engines), and every
#: chunked Monte Carlo path (the risk engine, the checks of :mod:`proofs_check`, the
#: attention models' evaluators, :class:`~reduced_dynamics.crosscheck.CovariateSample`)
#: keeps the working arrays of one chunk within :data:`CHUNK_BUDGET`, whatever ``L``, ``d``
#: or ``n_prompts``. Measured: ``reduced-dynamics check --quick --only optimality --L 100000``
#: peaks at 0.25 GB resident (248 MB measured; it took 15.7 GB before the chunking).
MEMORY_BUDGET = 2**30

#: Working-set budget of one chunk of a chunked Monte Carlo path (256 MiB, a quarter of
#: :data:`MEMORY_BUDGET`: the working arrays of a chunk are a few times its prompts).
CHUNK_BUDGET = MEMORY_BUDGET // 4


def as_generator(seed_or_rng) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a seed (int ``>= 0``) or a Generator.

    ``None`` is refused: every random result in this package comes from an
    explicit seed.
    """
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    if seed_or_rng is None or isinstance(seed_or_rng, bool):
        raise ValueError("`seed` must be a non-negative integer or a numpy Generator, got None")
    try:
        seed = int(seed_or_rng)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"`seed` must be a non-negative integer or a numpy Generator, got {seed_or_rng!r}") from None
    if seed < 0 or seed != seed_or_rng:
        raise ValueError(f"`seed` must be a non-negative integer or a numpy Generator, got {seed_or_rng!r}")
    return np.random.default_rng(seed)


def _readonly(a):
    if a is not None and a.flags.writeable:
        a.setflags(write=False)
    return a


def _float_array(name, value, shape_doc):
    if isinstance(value, complex) or np.iscomplexobj(value):
        raise ValueError(f"`{name}` must be a real array of shape {shape_doc}, got complex values")
    try:
        arr = np.array(value, dtype=np.float64)  # always a copy: the batch owns its arrays
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a real array of shape {shape_doc}, got {type(value).__name__}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` must contain only finite values (no NaN/inf)")
    return arr


class Prompts:
    r"""A batch of ``n`` in-context regression prompts: the one container of the package.

    Build it with :meth:`from_arrays` (raw covariates and responses),
    :meth:`from_stats` (the sufficient statistics only) or
    :func:`sample_prompts`; do not call the constructor. The arrays are
    read-only; the views below are computed once and cached.

    Attributes
    ----------
    n, L : int
        Number of prompts and context length.
    d : int
        Covariate dimension (for a statistics-only batch: its setting's ``d``).
    has_covariates : bool
        Whether ``X`` and ``x_q`` are available (False for :meth:`from_stats`).
    has_responses : bool
        Whether ``y`` and ``y_q`` are available (False for covariates-only draws).
    X : ndarray, shape (n, L, d)
        Context covariates.
    y : ndarray, shape (n, L)
        Context responses.
    x_q : ndarray, shape (n, d)
        Query covariates.
    y_q : ndarray, shape (n,)
        Noisy query targets :math:`\beta^\top x_q + \varepsilon_q`.
    scores : ndarray, shape (n, L)
        :math:`s_l = x_l^\top x_q`.
    xq_norm2 : ndarray, shape (n,)
        :math:`|x_q|^2`.
    tokens : ndarray, shape (n, L, d+1)
        Embedded context columns :math:`z_l = (x_l, y_l)` (the attention models'
        input; the query is :math:`z_q = (x_q, 0)`).
    beta : ndarray, shape (n, d), or None
        The tasks, when known (recorded by the full sampler and by
        :meth:`from_arrays` if given).
    setting : Setting or None
        The data model the batch was drawn from (``None`` when unknown).

    A view that the batch does not have raises ``ValueError`` naming
    ``prompts``.

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics import Prompts
    >>> rng = np.random.default_rng(0)
    >>> p = Prompts.from_arrays(rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3)), rng.standard_normal((2, 4)))
    >>> p.n, p.L, p.d, p.tokens.shape, p.scores.shape
    (2, 3, 4, (2, 3, 5), (2, 3))
    """

    __slots__ = ("_X", "_y", "_x_q", "_y_q", "_tokens", "_scores", "_xq_norm2", "_beta", "_setting", "_n", "_L")

    def __init__(self, *args, **kwargs):
        raise TypeError("build a Prompts batch with Prompts.from_arrays, Prompts.from_stats or sample_prompts")

    # ------------------------------------------------------------- internals
    @classmethod
    def _new(
        cls,
        *,
        X=None,
        y=None,
        x_q=None,
        y_q=None,
        tokens=None,
        scores=None,
        xq_norm2=None,
        beta=None,
        setting=None,
    ) -> Prompts:
        """Wrap already-validated float64 arrays without copying them (internal)."""
        self = object.__new__(cls)
        if tokens is not None:
            d = tokens.shape[-1] - 1
            X, y = tokens[..., :d], tokens[..., d]
        ref = X if X is not None else scores
        vals = {
            "_X": X,
            "_y": y,
            "_x_q": x_q,
            "_y_q": y_q,
            "_tokens": tokens,
            "_scores": scores,
            "_xq_norm2": xq_norm2,
            "_beta": beta,
            "_setting": setting,
            "_n": int(ref.shape[0]),
            "_L": int(ref.shape[1]),
        }
        for k, v in vals.items():
            if isinstance(v, np.ndarray):
                _readonly(v)
            object.__setattr__(self, k, v)
        return self

    def __setattr__(self, name, value):
        raise AttributeError("Prompts is immutable")

    def __reduce__(self):
        state = {k: getattr(self, k) for k in Prompts.__slots__}
        return (_restore, (state,))

    def _cache(self, name, value):
        object.__setattr__(self, name, _readonly(value))
        return value

    def _missing(self, view, what):
        how = {
            "covariates": "it was built from statistics only (Prompts.from_stats / stats_only=True)",
            "responses": "it was drawn without responses (covariates_only=True)",
        }[what]
        return ValueError(f"`prompts` has no `{view}`: {how}")

    # ------------------------------------------------------------- constructors
    @classmethod
    def from_arrays(cls, X, y, x_q, y_q=None, *, beta=None, setting=None) -> Prompts:
        r"""A batch from raw arrays (copied, validated, stored read-only).

        Parameters
        ----------
        X : array_like, shape (n, L, d)
            Context covariates. A single prompt of shape ``(L, d)`` is accepted
            (then ``y`` is ``(L,)``, ``x_q`` is ``(d,)``, ``y_q`` and ``beta``
            scalar / ``(d,)``) and becomes a batch of one, ``n = 1``.
        y : array_like, shape (n, L)
            Context responses.
        x_q : array_like, shape (n, d)
            Query covariates.
        y_q : array_like, shape (n,), optional
            Query targets; needed only for plain (not conditional) losses and
            the attention models' ``loss``.
        beta : array_like, shape (n, d), optional
            The tasks, if known (kept as metadata).
        setting : Setting, optional
            The data model (its ``sigma2`` and ``d`` then serve
            :func:`~reduced_dynamics.conditional_loss` and ``BayesRidge()``);
            must agree with the shapes (``d``, ``L``).

        Returns
        -------
        Prompts

        Raises
        ------
        ValueError
            Naming the array whose shape or values are wrong.
        """
        X = _float_array("X", X, "(n, L, d)")
        single = X.ndim == 2
        if single:
            X = X[None]
        if X.ndim != 3 or 0 in X.shape:
            raise ValueError(
                f"`X` must have shape (n, L, d) (or (L, d) for one prompt) with n, L, d >= 1, got {X.shape}"
            )
        n, L, d = X.shape
        lead = () if single else (n,)

        def arr(name, value, tail):
            a = _float_array(name, value, str((*lead, *tail)) if (lead or tail) else "()")
            if a.shape != (*lead, *tail):
                raise ValueError(
                    f"`{name}` must have shape {(*lead, *tail)} to match `X` {X.shape[single:]}, got {a.shape}"
                )
            return a.reshape((n, *tail))

        y = arr("y", y, (L,))
        x_q = arr("x_q", x_q, (d,))
        y_q = None if y_q is None else arr("y_q", y_q, ())
        beta = None if beta is None else arr("beta", beta, (d,))
        if setting is not None:
            as_setting(setting).require_scalar("Prompts.from_arrays")
            if (setting.d, setting.L) != (d, L):
                raise ValueError(f"`setting` (d={setting.d}, L={setting.L}) does not match the arrays (d={d}, L={L})")
        tokens = np.empty((n, L, d + 1))
        tokens[..., :d] = X
        tokens[..., d] = y
        return cls._new(tokens=tokens, x_q=x_q, y_q=y_q, beta=beta, setting=setting)

    @classmethod
    def from_stats(cls, scores, xq_norm2, y=None, y_q=None, *, setting=None) -> Prompts:
        r"""A statistics-only batch: :math:`s_l = x_l^\top x_q`, :math:`|x_q|^2`, and optionally ``y``, ``y_q``.

        Enough for every predictor whose weights depend on the covariates
        only through the scores (all but ridge) and, for isotropic
        covariates, for the conditional loss (docs/theory.md#predictors).

        Parameters
        ----------
        scores : array_like, shape (n, L)
        xq_norm2 : array_like, shape (n,), > 0
        y : array_like, shape (n, L), optional
        y_q : array_like, shape (n,), optional
        setting : Setting, optional
            The data model (``d`` and ``sigma2`` for the conditional loss);
            its ``L`` must match ``scores``.

        Returns
        -------
        Prompts
            With ``has_covariates = False``.
        """
        s = _float_array("scores", scores, "(n, L)")
        if s.ndim != 2 or 0 in s.shape:
            raise ValueError(f"`scores` must have shape (n, L) with n, L >= 1, got {s.shape}")
        n, L = s.shape
        r2 = _float_array("xq_norm2", xq_norm2, "(n,)")
        if r2.shape != (n,) or np.any(r2 <= 0):
            raise ValueError(f"`xq_norm2` must be positive with shape ({n},), got shape {r2.shape}")
        if y is not None:
            y = _float_array("y", y, "(n, L)")
            if y.shape != (n, L):
                raise ValueError(f"`y` must have shape {(n, L)}, got {y.shape}")
        if y_q is not None:
            y_q = _float_array("y_q", y_q, "(n,)")
            if y_q.shape != (n,):
                raise ValueError(f"`y_q` must have shape ({n},), got {y_q.shape}")
        if setting is not None:
            as_setting(setting).require_scalar("Prompts.from_stats")
            if setting.L != L:
                raise ValueError(f"`setting` (L={setting.L}) does not match `scores` (L={L})")
        return cls._new(scores=s, xq_norm2=r2, y=y, y_q=y_q, setting=setting)

    def to_stats(self) -> Prompts:
        """The statistics-only form of this batch (scores, ``|x_q|²``, and ``y``, ``y_q`` if present)."""
        return Prompts._new(scores=self.scores, xq_norm2=self.xq_norm2, y=self._y, y_q=self._y_q, setting=self._setting)

    # ------------------------------------------------------------- sizes
    @property
    def n(self) -> int:
        """Number of prompts."""
        return self._n

    @property
    def L(self) -> int:
        """Context length."""
        return self._L

    @property
    def d(self) -> int:
        """Covariate dimension."""
        if self._X is not None:
            return int(self._X.shape[2])
        if self._setting is not None:
            return self._setting.d
        raise ValueError("`prompts` has no `d`: a statistics-only batch needs `setting` (Prompts.from_stats)")

    @property
    def has_covariates(self) -> bool:
        """Whether ``X`` and ``x_q`` are available."""
        return self._X is not None

    @property
    def has_responses(self) -> bool:
        """Whether ``y`` and ``y_q`` are available."""
        return self._y is not None

    @property
    def setting(self) -> Setting | None:
        """The data model the batch was drawn from, or ``None``."""
        return self._setting

    @property
    def beta(self):
        """The tasks, shape ``(n, d)``, or ``None`` when not recorded."""
        return self._beta

    # ------------------------------------------------------------- views
    @property
    def X(self) -> np.ndarray:
        """Context covariates, shape ``(n, L, d)``."""
        if self._X is None:
            raise self._missing("X", "covariates")
        return self._X

    @property
    def x_q(self) -> np.ndarray:
        """Query covariates, shape ``(n, d)``."""
        if self._x_q is None:
            raise self._missing("x_q", "covariates")
        return self._x_q

    @property
    def y(self) -> np.ndarray:
        """Context responses, shape ``(n, L)``."""
        if self._y is None:
            raise self._missing("y", "responses")
        return self._y

    @property
    def y_q(self) -> np.ndarray:
        """Query targets, shape ``(n,)``."""
        if self._y_q is None:
            raise self._missing("y_q", "responses")
        return self._y_q

    @property
    def scores(self) -> np.ndarray:
        """Inner products ``s_l = x_lᵀx_q``, shape ``(n, L)``."""
        if self._scores is None:
            if self._tokens is not None:  # X is a strided view: batched matmul (the training code's rounding)
                s = np.matmul(self._X, self._x_q[:, :, None])[..., 0]
            else:
                s = np.einsum("nld,nd->nl", self._X, self._x_q)
            return self._cache("_scores", s)
        return self._scores

    @property
    def xq_norm2(self) -> np.ndarray:
        """``|x_q|²``, shape ``(n,)``."""
        if self._xq_norm2 is None:
            return self._cache("_xq_norm2", np.einsum("nd,nd->n", self._x_q, self._x_q))
        return self._xq_norm2

    @property
    def tokens(self) -> np.ndarray:
        """Embedded context ``z_l = (x_l, y_l)``, shape ``(n, L, d+1)``."""
        if self._tokens is None:
            if self._X is None:
                raise self._missing("tokens", "covariates")
            y = self.y
            d = self._X.shape[2]
            t = np.empty((self._n, self._L, d + 1))
            t[..., :d] = self._X
            t[..., d] = y
            return self._cache("_tokens", t)
        return self._tokens

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        kind = "covariates" if self.has_covariates else "statistics only"
        resp = "" if self.has_responses else ", no responses"
        d = f", d={self._X.shape[2]}" if self._X is not None else ""
        return f"Prompts(n={self._n}, L={self._L}{d}, {kind}{resp}, setting={self._setting!r})"


def _restore(state) -> Prompts:
    """Unpickle a :class:`Prompts` (its arrays come back read-only)."""
    self = object.__new__(Prompts)
    for k, v in state.items():
        if isinstance(v, np.ndarray):
            _readonly(v)
        object.__setattr__(self, k, v)
    return self


def _concat(parts) -> Prompts:
    """Concatenate batches of the same kind along the prompt axis (internal, for the engine)."""
    first = parts[0]
    if len(parts) == 1:
        return first

    def cat(name):
        vals = [getattr(p, name) for p in parts]
        return None if vals[0] is None else np.concatenate(vals)

    if first._tokens is not None:
        return Prompts._new(
            tokens=cat("_tokens"), x_q=cat("_x_q"), y_q=cat("_y_q"), beta=cat("_beta"), setting=first.setting
        )
    return Prompts._new(
        X=cat("_X"),
        y=cat("_y"),
        x_q=cat("_x_q"),
        y_q=cat("_y_q"),
        scores=cat("_scores") if first._X is None else None,
        xq_norm2=cat("_xq_norm2") if first._X is None else None,
        beta=cat("_beta"),
        setting=first.setting,
    )


# ----------------------------------------------------------------- samplers


def _draw_stats_into(rng, s, y, yq, r2, *, d, sigma2, covariates_only=False):
    """Fill preallocated arrays with one block of sufficient statistics.

    Draw order (fixed, part of the reproducibility contract): ``|x_q|²``, ``a``,
    then ``β₁``, ``|β_⊥|²``, the combined context noise, ``ε_q``. With
    ``covariates_only`` the last four are skipped, so the covariates agree with
    the full draw from the same generator.
    """
    m = s.shape[0]
    r2[...] = rng.chisquare(d, size=m)
    rng.standard_normal(out=s)  # a_l, turned into s_l = |x_q| a_l below
    if not covariates_only:
        beta1 = rng.standard_normal(m) / np.sqrt(d)
        bperp2 = rng.chisquare(d - 1, size=m) / d if d > 1 else np.zeros(m)
        rng.standard_normal(out=y)
        y *= np.sqrt(bperp2 + sigma2)[:, None]  # β_⊥ᵀz_l + ε_l
        y += beta1[:, None] * s
        r = np.sqrt(r2)
        yq[...] = beta1 * r + np.sqrt(sigma2) * rng.standard_normal(m)
    else:
        r = np.sqrt(r2)
    s *= r[:, None]


def _sample_stats(n, setting, rng, covariates_only):
    d, L, sigma2 = setting.d, setting.L, float(setting.sigma2)
    s = np.empty((n, L))
    r2 = np.empty(n)
    y = None if covariates_only else np.empty((n, L))
    yq = None if covariates_only else np.empty(n)
    _draw_stats_into(rng, s, y, yq, r2, d=d, sigma2=sigma2, covariates_only=covariates_only)
    return Prompts._new(scores=s, xq_norm2=r2, y=y, y_q=yq, setting=setting)


def _sample_full(n, setting, rng, covariates_only):
    d, L, sigma2 = setting.d, setting.L, float(setting.sigma2)
    X = rng.standard_normal((n, L, d))
    xq = rng.standard_normal((n, d))
    if setting.Sigma is not None:
        C = np.linalg.cholesky(setting.Sigma)
        X = X @ C.T
        xq = xq @ C.T
    if covariates_only:
        return Prompts._new(X=X, x_q=xq, setting=setting)
    beta = rng.standard_normal((n, d)) / np.sqrt(d)
    noise_sd = np.sqrt(sigma2)
    y = np.einsum("nld,nd->nl", X, beta) + noise_sd * rng.standard_normal((n, L))
    yq = np.einsum("nd,nd->n", xq, beta) + noise_sd * rng.standard_normal(n)
    return Prompts._new(X=X, y=y, x_q=xq, y_q=yq, beta=beta, setting=setting)


def check_n_prompts(n_prompts, minimum=2) -> int:
    """``n_prompts`` as an int in ``[minimum, N_PROMPTS_MAX]``, else ``ValueError`` naming it (internal)."""
    n = check_positive_int("n_prompts", n_prompts)
    if not minimum <= n <= N_PROMPTS_MAX:
        why = " (a standard error needs two prompts)" if minimum == 2 else ""
        raise ValueError(f"`n_prompts` must be an integer in [{minimum}, {N_PROMPTS_MAX:.0e}]{why}, got {n}")
    return n


def _flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be True or False, got {value!r}")
    return bool(value)


def prompt_bytes(setting, *, kind="full") -> int:
    """Bytes (float64) that one sampled prompt of ``setting`` occupies.

    Parameters
    ----------
    setting : Setting
        Scalar data model.
    kind : {"full", "stats", "tokens"}
        The sampler: :func:`sample_prompts` (``"full"``), its statistics-only
        form (``"stats"``) or ``sample_tokens()`` (``"tokens"``).

    Returns
    -------
    int
        Bytes per prompt (the arrays of the batch and its cached views).
    """
    setting = as_setting(setting, "prompt_bytes")
    d, L = int(setting.d), int(setting.L)
    if kind == "stats":
        per = 2 * L + 2  # scores, y, |x_q|², y_q
    elif kind == "full":
        per = L * d + 2 * L + 2 * d + 1  # X, y, scores (cached), x_q, beta, y_q
        if setting.Sigma is not None:
            per += L * d  # the correlated copy of X
    elif kind == "tokens":
        per = L * (d + 1) + L + 2 * d + 3  # tokens, scores (cached), x_q, beta, y_q
    else:
        raise ValueError(f"`kind` must be 'full', 'stats' or 'tokens', got {kind!r}")
    return 8 * per


def _mib(nbytes) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


def check_batch_budget(n_prompts, setting, *, kind, where, budget=MEMORY_BUDGET) -> int:
    """Raise ``ValueError`` if ``n_prompts`` prompts of ``setting`` exceed ``budget`` bytes (internal)."""
    need = n_prompts * prompt_bytes(setting, kind=kind)
    if need > budget:
        raise ValueError(
            f"`n_prompts` = {n_prompts} prompts of d={setting.d}, L={setting.L} need about {_mib(need)}, more than "
            f"the memory budget of {_mib(budget)} (reduced_dynamics.estimation.prompts.MEMORY_BUDGET) for one batch "
            f"of {where}: draw fewer prompts per call, or use the chunked Monte Carlo engine "
            "(reduced_dynamics.estimate_risks), which handles any number of prompts"
        )
    return need


def chunk_sizes(n_prompts, per_prompt_bytes, *, setting, cap=None):
    """Split ``n_prompts`` into chunks whose working set ``k · per_prompt_bytes`` fits in :data:`CHUNK_BUDGET` (internal).

    A prompt larger than :data:`CHUNK_BUDGET` is evaluated alone; one larger
    than :data:`MEMORY_BUDGET` raises ``ValueError`` naming ``L`` (and ``d``).
    Returns the list of chunk sizes (each ``<= cap`` if given).
    """
    per = int(per_prompt_bytes)
    if per > MEMORY_BUDGET:
        raise ValueError(
            f"`L` = {setting.L} (with d = {setting.d}) is too large for Monte Carlo: one prompt needs about "
            f"{_mib(per)} of working memory, more than the memory budget of {_mib(MEMORY_BUDGET)} "
            "(reduced_dynamics.estimation.prompts.MEMORY_BUDGET)"
        )
    k = max(1, CHUNK_BUDGET // per)
    if cap is not None:
        k = min(k, int(cap))
    sizes = [k] * (n_prompts // k)
    if n_prompts % k:
        sizes.append(n_prompts % k)
    return sizes


def iter_prompts(n_prompts, setting, *, seed, per_prompt_bytes, stats_only=False, covariates_only=False):
    """Yield ``n_prompts`` prompts of ``setting`` in chunks that fit :data:`CHUNK_BUDGET` (internal).

    Every chunk is drawn by :func:`sample_prompts` from one generator (``seed``),
    one after the other; so when all the prompts fit in one chunk the batch is
    exactly ``sample_prompts(n_prompts, setting, seed=seed, ...)``.
    ``per_prompt_bytes`` is the caller's working set per prompt (its arrays
    and the batch).
    """
    rng = as_generator(seed)
    for k in chunk_sizes(n_prompts, per_prompt_bytes, setting=setting):
        yield sample_prompts(k, setting, seed=rng, stats_only=stats_only, covariates_only=covariates_only)


def sample_prompts(n_prompts, setting, *, seed, stats_only=False, covariates_only=False) -> Prompts:
    r"""Draw ``n_prompts`` independent prompts of the data model ``setting``.

    Parameters
    ----------
    n_prompts : int, >= 1
        Number of prompts.
    setting : Setting
        Scalar data model; ``setting.Sigma`` (if set) is the covariance of the
        covariates.
    seed : int >= 0 or numpy.random.Generator
        Explicit source of randomness (required).
    stats_only : bool, default False
        Draw only the rotation-invariant sufficient statistics (scores,
        ``|x_q|²``, ``y``, ``y_q``; no covariates) at a cost independent of
        ``d`` (module docstring). Isotropic settings only. Same distribution
        as the statistics of a full draw, but a different random stream.
    covariates_only : bool, default False
        Skip the tasks and the noise: the batch has no ``y``, ``y_q`` (enough
        for the conditional loss). The covariates are those of the full draw
        from the same seed.

    Returns
    -------
    Prompts
        ``prompts.setting`` is ``setting``.

    Raises
    ------
    ValueError
        If the batch would exceed :data:`MEMORY_BUDGET` (the message gives the
        estimated size): Monte Carlo over more prompts goes through the
        chunked engine, :func:`reduced_dynamics.estimate_risks`.

    References
    ----------
    docs/theory.md#data-model

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> p = sample_prompts(4, Setting(d=5, L=40, sigma2=0.1), seed=0)
    >>> p.X.shape, p.y.shape, p.x_q.shape, p.y_q.shape
    ((4, 40, 5), (4, 40), (4, 5), (4,))
    >>> sample_prompts(4, Setting(d=5, L=40, sigma2=0.1), seed=0, stats_only=True).has_covariates
    False
    """
    n_prompts = check_n_prompts(n_prompts, minimum=1)
    setting = as_setting(setting, "sample_prompts")
    stats_only, covariates_only = _flag("stats_only", stats_only), _flag("covariates_only", covariates_only)
    rng = as_generator(seed)
    if stats_only:
        setting.require_isotropic("sample_prompts(stats_only=True)")
    check_batch_budget(n_prompts, setting, kind="stats" if stats_only else "full", where="sample_prompts")
    if stats_only:
        return _sample_stats(n_prompts, setting, rng, bool(covariates_only))
    return _sample_full(n_prompts, setting, rng, bool(covariates_only))


def sample_tokens(n_prompts, setting, *, seed) -> Prompts:
    r"""The training sampler: ``n_prompts`` fresh isotropic prompts drawn directly in embedded form.

    Same distribution as :func:`sample_prompts` (a different random stream):
    one ``(n_prompts, L, d+1)`` standard-normal block whose last column is the noise,
    overwritten in place by ``y_l = βᵀx_l + σ ε_l``; ``X`` and ``y`` of the
    returned batch are views of that block (no copies). This is the dominant
    cost of a training step. Internal: the public entry point is
    :func:`sample_prompts`.

    Parameters
    ----------
    n_prompts : int, >= 1
        Number of prompts.
    setting : Setting
        Scalar, isotropic.
    seed : int >= 0 or numpy.random.Generator

    Returns
    -------
    Prompts
        With ``tokens`` of shape ``(n_prompts, L, d+1)``.

    Raises
    ------
    ValueError
        If the batch would exceed :data:`MEMORY_BUDGET`.
    """
    n_prompts = check_n_prompts(n_prompts, minimum=1)
    setting = as_setting(setting, "sample_tokens").require_isotropic("sample_tokens")
    check_batch_budget(n_prompts, setting, kind="tokens", where="sample_tokens")
    d, L = setting.d, setting.L
    rng = as_generator(seed)
    D = d + 1
    Z = rng.standard_normal((n_prompts, L, D))
    Zq = rng.standard_normal((n_prompts, D))
    beta = rng.standard_normal((n_prompts, d, 1))
    beta *= 1.0 / math.sqrt(d)
    s = math.sqrt(setting.sigma2)
    y = np.matmul(Z[..., :d], beta)[..., 0]  # (n_prompts, L)
    y += s * Z[..., d]
    Z[..., d] = y
    xq = np.ascontiguousarray(Zq[:, :d])
    yq = np.matmul(xq[:, None, :], beta)[:, 0, 0] + s * Zq[:, d]
    return Prompts._new(tokens=Z, x_q=xq, y_q=yq, beta=beta[..., 0], setting=setting)
