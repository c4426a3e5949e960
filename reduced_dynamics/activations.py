r"""Attention activations: the function ``f`` that replaces ``exp`` in the softmax weights.

With an activation ``f`` a head's weights are ``f(ω s_l) / Σ_j f(ω s_j)`` instead of
``softmax_l(ω s_l)`` (docs/theory.md#other-activations). The registry :data:`ACTIVATIONS` maps a
name to an :class:`Activation`; a :class:`~reduced_dynamics.Setting` carries the name in
``activation`` and the constant ``C`` in ``activation_c``.

========  ======================  ==============================  ===========================
name      ``f(x)``                ``C_f = f'(0)/f(0)``            weights
========  ======================  ==============================  ===========================
exp       ``exp(x)``              1                               always positive
affine    ``1 + C x``             ``C``                           negative where ``C x < -1``
square    ``(1 + C x)²``          ``2 C``                         non-negative
tanh      ``1 + tanh(x)``         1                               always positive
========  ======================  ==============================  ===========================

``affine`` is the only activation whose weights can be negative and whose normaliser
``Σ_j f(ω s_j)`` can vanish; code that evaluates it checks the normaliser and raises
(or reports a status) instead of dividing by zero (:func:`check_normaliser`).

References
----------
docs/theory.md#other-activations
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["ACTIVATIONS", "Activation", "as_activation", "get_activation", "check_normaliser"]


@dataclasses.dataclass(frozen=True)
class Activation:
    """One attention activation ``f`` with its constant ``C``.

    Attributes
    ----------
    name : str
        Registry name (:data:`ACTIVATIONS`).
    c : float
        The constant ``C`` of ``affine`` and ``square`` (1.0 for ``exp`` and ``tanh``).
    """

    name: str
    c: float = 1.0

    @property
    def uses_c(self) -> bool:
        """True when ``f`` depends on ``C`` (``affine``, ``square``)."""
        return self.name in ("affine", "square")

    @property
    def c_f(self) -> float:
        """``C_f = f'(0) / f(0)``: the slope of ``log f`` at 0 (the effective step is ``2 C_f γ μ₊``)."""
        return {"exp": 1.0, "affine": self.c, "square": 2.0 * self.c, "tanh": 1.0}[self.name]

    @property
    def can_be_negative(self) -> bool:
        """True when ``f`` takes negative values (its weights can be negative or sum to zero)."""
        return self.name == "affine"

    def f(self, x):
        """``f(x)``, elementwise (float64 ndarray or float); ``x`` finite, ``f(x)`` finite in float64."""
        x = _check_x(x)
        with np.errstate(over="ignore", invalid="ignore"):
            return _finite_values(self._f(x), self.name)

    def df(self, x):
        """``f'(x)``, elementwise; ``x`` finite, ``f'(x)`` finite in float64."""
        x = _check_x(x)
        with np.errstate(over="ignore", invalid="ignore"):
            return _finite_values(self._df(x), self.name)

    def _f(self, x):
        """``f(x)`` without checks (the attention weights' hot path)."""
        x = np.asarray(x, dtype=np.float64)
        if self.name == "exp":
            return np.exp(x)
        if self.name == "affine":
            return 1.0 + self.c * x
        if self.name == "square":
            return (1.0 + self.c * x) ** 2
        return 1.0 + np.tanh(x)

    def _df(self, x):
        """``f'(x)`` without checks."""
        x = np.asarray(x, dtype=np.float64)
        if self.name == "exp":
            return np.exp(x)
        if self.name == "affine":
            return np.full_like(x, self.c)
        if self.name == "square":
            return 2.0 * self.c * (1.0 + self.c * x)
        return 1.0 - np.tanh(x) ** 2

    def taylor(self, order: int) -> tuple[float, ...]:
        """Coefficients ``a_k`` of ``f(x) / f(0) = Σ_k a_k x^k`` for ``k = 0..order``."""
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not 0 <= order <= 64:
            raise ValueError(f"`order` must be an integer in [0, 64], got {order!r}")
        k = range(order + 1)
        if self.name == "exp":
            return tuple(1.0 / math.factorial(i) for i in k)
        if self.name == "affine":
            return tuple({0: 1.0, 1: self.c}.get(i, 0.0) for i in k)
        if self.name == "square":
            return tuple({0: 1.0, 1: 2.0 * self.c, 2: self.c**2}.get(i, 0.0) for i in k)
        # 1 + tanh x = 2 / (1 + exp(-2x)) = 2 σ(2x); f(0) = 1; series of tanh: x - x³/3 + 2x⁵/15 - 17x⁷/315
        tanh = {1: 1.0, 3: -1.0 / 3.0, 5: 2.0 / 15.0, 7: -17.0 / 315.0, 9: 62.0 / 2835.0}
        if order > 9:
            raise ValueError(f"`order` must be in [0, 9] for 'tanh', got {order}")
        return tuple(1.0 if i == 0 else tanh.get(i, 0.0) for i in k)

    def sympy(self, x):
        """``f`` as a sympy expression in the symbol ``x``."""
        import sympy as sp

        c = sp.nsimplify(self.c)
        return {
            "exp": sp.exp(x),
            "affine": 1 + c * x,
            "square": (1 + c * x) ** 2,
            "tanh": 1 + sp.tanh(x),
        }[self.name]


#: Activation names accepted by ``Setting(activation=...)`` and ``--activation``.
ACTIVATIONS = ("exp", "affine", "square", "tanh")


def _check_x(x) -> np.ndarray:
    from reduced_dynamics._validation import check_finite_array

    return check_finite_array("x", x, min_ndim=0)


def _finite_values(out, name: str):
    if not np.all(np.isfinite(out)):
        raise ValueError(f"`x` too large: the activation {name!r} overflows float64 there")
    return out


def as_activation(activation, name: str = "activation") -> Activation:
    """An :class:`Activation` from one (re-validated) or from its name (constant C = 1); ``TypeError`` for another
    type, ``ValueError`` for an unknown name."""
    if isinstance(activation, Activation):
        return get_activation(activation.name, activation.c)
    if isinstance(activation, str):
        return get_activation(activation)
    raise TypeError(
        f"`{name}` must be an Activation or one of the names {', '.join(ACTIVATIONS)}, got {type(activation).__name__}"
    )


def get_activation(name: str = "exp", c: float = 1.0) -> Activation:
    """Return the :class:`Activation` ``name`` with constant ``c``, or raise ``ValueError``.

    Parameters
    ----------
    name : {"exp", "affine", "square", "tanh"}
    c : float, in (0, 1e6]
        The constant ``C`` of ``affine`` and ``square``; must be 1.0 for ``exp`` and ``tanh``.
    """
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ValueError(f"`activation` must be one of {', '.join(ACTIVATIONS)}, got {name!r}")
    if isinstance(c, bool) or not isinstance(c, (int, float, np.integer, np.floating)):
        raise ValueError(f"`activation_c` must be a real number in (0, 1e6], got {c!r}")
    c = float(c)
    if not (0.0 < c <= 1e6):
        raise ValueError(f"`activation_c` must be in (0, 1e6], got {c!r}")
    if name in ("exp", "tanh") and c != 1.0:
        raise ValueError(f"`activation_c` must be 1.0 for activation {name!r} (it has no constant), got {c!r}")
    return Activation(name, c)


def check_normaliser(s: np.ndarray, where: str, *, tol: float = 1e-12) -> None:
    """Raise ``ValueError`` if any attention normaliser ``Σ_j f(ω s_j)`` is not safely positive.

    Parameters
    ----------
    s : ndarray
        Normalisers (any shape).
    where : str
        Named in the message.
    tol : float
        Smallest normaliser accepted, relative to the number of weights being 1 (``f(0) = 1``).
    """
    s = np.asarray(s)
    if s.dtype.kind not in "fiu":
        raise ValueError(f"`s` must be an array of real numbers (the normalisers), got dtype {s.dtype}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) or not 0 <= tol < 1:
        raise ValueError(f"`tol` must be a number in [0, 1), got {tol!r}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{where}: the attention normaliser s overflowed (non-finite); lower the scale of `omega`")
    lo = float(s.min()) if s.size else 1.0
    if lo <= tol:
        raise ValueError(
            f"{where}: the attention normaliser s = Σ_j f(ω s_j) reached {lo:.3g} ≤ {tol:g}: the activation's "
            "weights are negative or sum to zero here (affine f = 1 + Cx with C ω s < -1); use a smaller `omega` "
            "or `activation_c` (the C of f)"
        )
