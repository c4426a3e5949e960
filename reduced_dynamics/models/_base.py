r"""The one interface every reduced model implements: :class:`ReducedModel`.

A reduced model owns everything specific to one data model and objective — the
layout of its state vector, its loss, gradient and (where derived) Hessian, its
domain, its landmarks and limit, and the summary of a state — and nothing else.
One integrator (:func:`reduced_dynamics.flow.integrate`) runs the gradient flow of
any of them; one contract test (``tests/reduced_dynamics/models/test_contract.py``)
checks every registered model the same way.

The state is a flat float vector ``y`` of length :attr:`ReducedModel.size` (or a
batch of them, shape ``(..., size)``); :meth:`ReducedModel.unpack` names its parts
(e.g. ``omega`` of shape ``(H,)`` and ``mu`` of shape ``(H,)``) and
:meth:`ReducedModel.pack` builds it from them.

Adding a model: subclass :class:`ReducedModel` in one module of
:mod:`reduced_dynamics.models`, implement the abstract methods, and add one line
to :data:`reduced_dynamics.models.MODELS`.

References
----------
docs/theory.md#reduced-model
"""

from __future__ import annotations

import abc
import functools
import math
from typing import Any, ClassVar

import numpy as np

from reduced_dynamics._validation import (
    check_finite_array,
    check_finite_float,
    check_nonnegative_int,
    check_positive_float,
)
from reduced_dynamics.setting import Setting

__all__ = ["ReducedModel", "Part"]

_FLOAT_MAX = float(np.finfo(np.float64).max)


class Part(tuple):
    """``(name, shape)`` of one named block of the state vector."""

    __slots__ = ()

    def __new__(cls, name: str, shape: tuple[int, ...]):
        return super().__new__(cls, (name, tuple(int(s) for s in shape)))

    @property
    def name(self) -> str:
        return self[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return self[1]

    @property
    def size(self) -> int:
        return int(math.prod(self[1]))


class ReducedModel(abc.ABC):
    """A reduced model: formulas of one data model and objective on a flat state vector.

    Subclasses set the class attributes, build :attr:`parts` in ``__init__`` and
    implement :meth:`loss`, :meth:`grad`, :meth:`margin` and :meth:`summarize`; a
    model with a derived Hessian overrides :meth:`hessian` and sets
    ``has_hessian = True``. For speed a model may override the integrator's
    one-state hooks ``_grad_finite`` and ``_margin_finite`` (its formulas on a
    finite state without re-checking it; the same numbers bit for bit, which
    tests/reduced_dynamics/models/test_contract.py compares).

    Attributes
    ----------
    name : str
        Registry key (:data:`reduced_dynamics.models.MODELS`).
    objective : {"approx", "corrected", "exact"}
        Which objective the loss is: the large-L approximation L̃, its O(1/L)
        correction, or the exact finite-L risk.
    default_method : str
        The integrator's default method for this model.
    has_hessian : bool
        Whether :meth:`hessian` is the derived (analytic) Hessian.
    setting : Setting
        The (scalar) data model.
    n_heads : int
        Number of heads H.
    parts : tuple of Part
        Named blocks of the state vector, in order.
    """

    name: ClassVar[str] = ""
    objective: ClassVar[str] = "approx"
    default_method: ClassVar[str] = "LSODA"
    has_hessian: ClassVar[bool] = False
    #: the state holds one scalar ω_h and one scalar μ_h per head (the isotropic layout): pattern
    #: diagnostics, stage times and the drift law apply to its flows
    scalar_heads: ClassVar[bool] = False
    #: human-readable description of the domain, used in the status message "left the model's domain"
    domain_text: ClassVar[str] = "the state left the model's domain"

    setting: Setting
    n_heads: int
    parts: tuple[Part, ...]

    # ------------------------------------------------------------------ layout
    @property
    def size(self) -> int:
        """Length of the state vector."""
        return sum(p.size for p in self.parts)

    def _state_array(self, y, name: str = "y", *, finite: bool = True) -> np.ndarray:
        """``y`` as a float64 array of shape ``(..., size)`` of real (and, with ``finite``, finite) numbers, or
        ``ValueError`` naming ``name``: the one check of a state handed to a method."""
        if finite:
            y = check_finite_array(name, y, min_ndim=1)
        else:
            raw = y if isinstance(y, np.ndarray) else None
            try:
                raw = np.asarray(y) if raw is None else raw
                ok = raw.dtype.kind in "fiub"
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"`{name}` must be an array of real numbers of shape (..., {self.size}), got {y!r}")
            y = np.asarray(raw, dtype=np.float64)
        if y.ndim < 1 or y.shape[-1] != self.size:
            raise ValueError(f"`{name}` must have shape (..., {self.size}) for {self!r}, got shape {y.shape}")
        return y

    def _margin_of(self, y, fn):
        """The margin ``fn(y)`` of the finite states of ``y``; ``-1`` (outside) for a state with NaN or inf, and at
        least ``-1.8e308`` for a finite state too far outside for float64."""
        y = self._state_array(y, finite=False)
        ok = np.all(np.isfinite(y), axis=-1)
        with np.errstate(over="ignore", invalid="ignore"):
            if np.all(ok):
                out = np.asarray(fn(y), dtype=np.float64)
            else:
                out = np.full(y.shape[:-1], -1.0)
                if np.any(ok):
                    out[ok] = np.asarray(fn(y[ok]), dtype=np.float64)
        out = np.where(np.isnan(out), -1.0, np.maximum(out, -np.finfo(np.float64).max))
        return float(out) if np.ndim(out) == 0 else out

    @staticmethod
    def _clamp_margin(out) -> float:
        """One margin as :meth:`_margin_of` returns it: ``-1`` for NaN, at least ``-1.8e308``."""
        out = float(out)
        return -1.0 if out != out else max(out, -_FLOAT_MAX)

    def unpack(self, y) -> dict[str, np.ndarray]:
        """The named parts of ``y`` (shape ``(..., size)``), each of shape ``(..., *part.shape)`` (views)."""
        y = self._state_array(y, finite=False)
        return {p.name: v for p, v in zip(self.parts, self._views(y))}

    def _views(self, y) -> tuple[np.ndarray, ...]:
        """The parts of a checked float64 ``y`` (shape ``(..., size)``) in the order of :attr:`parts`, as views."""
        lead = y.shape[:-1]
        return tuple(y[..., a:b].reshape(lead + shape) for a, b, shape in self._part_slices)

    @functools.cached_property
    def _part_slices(self) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
        """``(start, stop, shape)`` of each part in the state vector."""
        out, k = [], 0
        for p in self.parts:
            out.append((k, k + p.size, p.shape))
            k += p.size
        return tuple(out)

    def pack(self, **parts) -> np.ndarray:
        """The state vector from its named parts (each of shape ``(..., *part.shape)``), validated.

        Raises
        ------
        ValueError
            A missing, unknown, non-finite or wrongly shaped part (named).
        """
        names = [p.name for p in self.parts]
        unknown = sorted(set(parts) - set(names))
        if unknown:
            raise ValueError(f"unknown state part(s) {unknown} for {self!r}; its parts are {names}")
        blocks, lead, first = [], None, None
        for p in self.parts:
            if p.name not in parts:
                raise ValueError(f"`{p.name}` is required for {self!r} (shape {p.shape})")
            a = check_finite_array(p.name, parts[p.name])
            if a.shape[a.ndim - len(p.shape) :] != p.shape or a.ndim < len(p.shape):
                raise ValueError(f"`{p.name}` must have shape (..., {', '.join(map(str, p.shape))}), got {a.shape}")
            la = a.shape[: a.ndim - len(p.shape)]
            if lead is None:
                lead, first = la, p.name
            elif la != lead:
                raise ValueError(f"`{first}` and `{p.name}` must share their leading (batch) axes, got {lead} and {la}")
            blocks.append(a.reshape(la + (p.size,)))
        return np.concatenate(blocks, axis=-1)

    def check_state(self, y, name: str = "y0") -> np.ndarray:
        """Validate a state vector or a batch ``(B, size)`` (finite, right length); returns a float copy."""
        y = check_finite_array(name, y)
        if y.ndim not in (1, 2) or y.shape[-1] != self.size:
            raise ValueError(f"`{name}` must have shape ({self.size},) or (B, {self.size}) for {self!r}, got {y.shape}")
        return y.astype(np.float64, copy=True)

    def initial_state(self, *, seed, scale: float = 0.01, n: int | None = None) -> np.ndarray:
        """A small random start: i.i.d. ``N(0, scale²)`` entries of every part, from ``seed``.

        Parameters
        ----------
        seed : int >= 0 or numpy.random.Generator
            Required (there is no default seed).
        scale : float, > 0
        n : int in [0, 100000], optional
            Number of starts; ``None`` gives one state of shape ``(size,)``, else ``(n, size)``.

        Returns
        -------
        ndarray, shape (size,) or (n, size)
        """
        from reduced_dynamics.estimation.prompts import as_generator
        from reduced_dynamics.flow._batch import N_TRAJ_MAX

        scale = check_positive_float("scale", scale)
        if seed is None:
            raise ValueError("`seed` is required (an integer >= 0 or a numpy Generator)")
        if not isinstance(seed, np.random.Generator):
            seed = check_nonnegative_int("seed", seed)
        rng = as_generator(seed)
        # at most the largest batch integrate takes
        shape = (self.size,) if n is None else (check_nonnegative_int("n", n, hi=N_TRAJ_MAX), self.size)
        return self._random_state(rng, shape) * scale

    def _random_state(self, rng, shape):
        """Standard normal entries of the given shape (models whose random start is laid out differently override)."""
        return rng.standard_normal(shape)

    # ------------------------------------------------------------------ formulas
    @abc.abstractmethod
    def loss(self, y):
        """The objective at ``y`` (shape ``(..., size)``): float or ndarray of shape ``(...)``."""

    @abc.abstractmethod
    def grad(self, y) -> np.ndarray:
        """Its gradient, shape ``(..., size)``."""

    def hessian(self, y) -> np.ndarray:
        """Its Hessian, shape ``(..., size, size)`` (models with ``has_hessian``)."""
        raise NotImplementedError(f"{type(self).__name__} has no derived Hessian")

    def jacobian_fd(self, y, *, step: float = 1e-5) -> np.ndarray:
        """Forward-difference Hessian of one state (``size`` gradients), symmetrised.

        The integrator hands it to implicit methods for models without a derived Hessian
        whose gradient is too expensive for the solver's own column-by-column estimate
        (:attr:`use_fd_jacobian`).
        """
        y = self._state_array(y)
        if y.ndim != 1:
            raise ValueError(f"`y` must be one state of shape ({self.size},), got shape {y.shape}")
        step = check_positive_float("step", step)
        if step > 1.0:
            raise ValueError(f"`step` must be a finite-difference step in (0, 1], got {step!r}")
        g0 = self.grad(y)
        J = np.empty((self.size, self.size))
        for i in range(self.size):
            e = np.zeros(self.size)
            e[i] = step
            J[:, i] = (self.grad(y + e) - g0) / step
        return 0.5 * (J + J.T)

    #: pass :meth:`jacobian_fd` to implicit methods (instead of letting the solver estimate it)
    use_fd_jacobian: ClassVar[bool] = False

    @abc.abstractmethod
    def margin(self, y):
        """Distance to the edge of the domain the flow may explore: ``> 0`` inside (float or ``(...)``).

        The integrator stops a flow whose margin reaches 0 (status "left the model's domain").
        """

    def in_range(self, y) -> bool:
        """True when every state of ``y`` is strictly inside the domain."""
        y = self._state_array(y, finite=False)
        with np.errstate(all="ignore"):
            return bool(np.all(np.asarray(self.margin(y)) > 0))

    # ------------------------------------------------------------------ theory
    def limit(self) -> dict[str, Any]:
        """Landmarks of the flow's limit (e.g. η*, inf of the loss, the limit predictor's matrix)."""
        return {}

    @abc.abstractmethod
    def summarize(self, y, *, t=None) -> dict[str, Any]:
        """JSON-friendly scalar summaries of one state (what a run reports at its end); ``t`` its time, for
        models with a time law (e.g. the drift of γ)."""

    def summarize_many(self, Y, *, t=None, tolerances=None) -> dict[str, list]:
        """The :meth:`summarize` values of many states at once: ``{key: [value at Y[0], value at Y[1], ...]}``.

        Parameters
        ----------
        Y : array_like, shape (B, size)
            The states (e.g. where the trajectories of a batch stopped).
        t : array_like, shape (B,), optional
            The time of each state.
        tolerances : dict, optional
            Passed on to :meth:`summarize` by the models whose summary takes it (those with scalar heads).

        Returns
        -------
        dict
            Each key of :meth:`summarize`, with the list of its B values (JSON-friendly).

        Notes
        -----
        This generic version calls :meth:`summarize` state by state; a model may override it with a vectorised
        one that returns the same values, up to the rounding of the last bit (the models with scalar heads do).
        """
        Y, t = self._states_and_times(Y, t)
        options = {} if tolerances is None else {"tolerances": tolerances}
        out: dict[str, list] = {}
        for i in range(Y.shape[0]):
            values = self.summarize(Y[i], t=None if t is None else float(np.asarray(t)[i]), **options)
            for k, v in values.items():
                out.setdefault(k, []).append(v)
        return out

    @staticmethod
    def _check_time(t):
        """``t`` of :meth:`summarize`: None or a finite real number."""
        return None if t is None else check_finite_float("t", t)

    def _states_and_times(self, Y, t):
        """``Y`` as finite states of shape (B, size), B >= 1, and ``t`` (None or B finite times), validated."""
        Y = self._state_array(Y, "Y")
        if Y.ndim != 2:
            raise ValueError(f"`Y` must have shape (B, {self.size}), got shape {Y.shape}")
        if t is not None:
            t = check_finite_array("t", t, ndim=1)
            if t.shape != (Y.shape[0],):
                raise ValueError(f"`t` must hold one time per state of `Y` ({Y.shape[0]}), got shape {t.shape}")
        return Y, t

    def predictor(self, y):
        """The predictor (``reduced_dynamics.estimation.predictors.Predictor``) that state ``y`` implements.

        Every single-output model defines it; the multi-task model returns the callable of its N per-task
        predictions; the model with Σ and several tasks has none yet.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no predictor yet (its N task outputs under Σ are not in the predictor "
            "interfaces); the multi-task predictions without Σ are reduced_dynamics.multitask.predictors"
        )

    def reference_predictors(self, y=None) -> dict:
        """The predictors the theory compares the model with (name -> predictor), in report order.

        ``y`` is the state when a reference depends on it (e.g. debiased GD at the state's claimed step).
        """
        return {}

    def reference_risks(self, y=None) -> dict:
        """Closed-form risks of the :meth:`reference_predictors` where one is derived (name -> float)."""
        return {}

    # ------------------------------------------------------------------ risk (the ``risk`` command)
    #: name of the state's own predictor in a :meth:`risk_plan`
    state_predictor_name: ClassVar[str] = "model"
    #: whether the model has Monte Carlo risk estimators (:meth:`risk_plan`)
    has_risks: ClassVar[bool] = False

    def risk_plan(self, y=None):
        """What ``risk`` estimates (:class:`~reduced_dynamics.models._risk.RiskPlan`): the state's predictor
        (if ``y`` is given) and the reference predictors, with their exact risks.

        Models with landmarks or paired differences extend it; a model without estimators
        (``has_risks`` False) refuses.
        """
        from reduced_dynamics.models._risk import RiskPlan

        if not self.has_risks:
            raise NotImplementedError(f"the {self.name} model has no Monte Carlo risk estimators yet")
        preds = {} if y is None else {self.state_predictor_name: self.predictor(y)}
        preds.update(self.reference_predictors(y))
        exact = dict.fromkeys(preds)
        exact.update(self.reference_risks(y))
        return RiskPlan(predictors=preds, exact=exact, state=None if y is None else self.state_predictor_name)

    def estimate_risks(self, plan, *, n_prompts, seed, conditional=False, stage=None):
        """Monte Carlo risks of ``plan`` on common prompts (:func:`~reduced_dynamics.models._risk.engine_risks`).

        Parameters
        ----------
        plan : RiskPlan
            From :meth:`risk_plan`.
        n_prompts : int, >= 2
        seed : int >= 0
        conditional : bool
            Rao–Blackwellise the per-prompt losses (models whose stream is conditional ignore False).
        stage : callable, optional
            ``stage(text)`` for progress lines.

        Returns
        -------
        ModelRisks
        """
        from reduced_dynamics.models._risk import engine_risks

        self._check_plan(plan)
        return engine_risks(plan, self.setting, n_prompts=n_prompts, seed=seed, conditional=conditional, stage=stage)

    @staticmethod
    def _check_plan(plan):
        from reduced_dynamics.models._risk import RiskPlan

        if not isinstance(plan, RiskPlan):
            raise ValueError(f"`plan` must be a RiskPlan (from the model's risk_plan), got {type(plan).__name__}")
        return plan

    # ------------------------------------------------------------------ training (the ``train`` command)
    #: the trainer of the full attention model this reduced model describes (a key of
    #: :data:`reduced_dynamics.models._train.TRAINERS`); None: no trainer yet
    trainer: ClassVar[str | None] = None

    def train(self, spec, *, out=None, resume: bool = False, progress=None):
        """Train the full model of this reduced model (:attr:`trainer`) and compare it with the reduced model.

        Parameters
        ----------
        spec : reduced_dynamics.models._train.TrainSpec
        out : path-like, optional
            Folder of the run (checkpoints, summary).
        resume : bool
            Continue the checkpoint in ``out``.
        progress : optional
            Progress lines (``stage``, ``tick``, ``quiet``).

        Returns
        -------
        reduced_dynamics.models._train.TrainOutcome
        """
        from reduced_dynamics.models._train import TRAINERS

        if self.trainer is None:
            raise NotImplementedError(f"the {self.name} model has no trainer of its full model yet")
        return TRAINERS[self.trainer].train(self, spec, out=out, resume=resume, progress=progress)

    def trained_summary(self, result, spec) -> dict:
        """JSON-ready summary of a trained full model (``result`` of the :attr:`trainer`): its circuits, the
        reduced state they extract, and risks against the reduced model and its references."""
        raise NotImplementedError(f"the {self.name} model has no trainer of its full model yet")

    # ------------------------------------------------------------------ integrator hooks
    def _grad_one(self, y) -> np.ndarray:
        """:meth:`grad` of one state from the integrator (float64, shape ``(size,)``): :meth:`_grad_finite` of a
        finite state, :meth:`grad` (and its error) of any other."""
        return self._grad_finite(y) if np.isfinite(y).all() else self.grad(y)

    def _margin_one(self, y) -> float:
        """:meth:`margin` of one state from the integrator (as :meth:`_grad_one`)."""
        return self._margin_finite(y) if np.isfinite(y).all() else float(self.margin(y))

    def _grad_finite(self, y) -> np.ndarray:
        """:meth:`grad` of one finite state: a model may override it to skip the checks of its public
        formulas, with the same numbers and errors bit for bit (tests/reduced_dynamics/models/test_contract.py
        compares them)."""
        return self.grad(y)

    def _margin_finite(self, y) -> float:
        """:meth:`margin` of one finite state (as :meth:`_grad_finite`)."""
        return float(self.margin(y))

    def _hook(self, public: str):
        """What the integrator calls for ``public`` (``"grad"`` or ``"margin"``) on one state: ``_<public>_one``
        where the model's ``_<public>_finite`` mirrors the ``public`` method this object has, else ``public``
        itself (a subclass or an instance attribute that replaces ``public`` below the class defining
        ``_<public>_finite`` is what the integrator calls)."""
        if public in vars(self):
            return getattr(self, public)
        mro = type(self).__mro__
        owner_fast = next(k for k in mro if f"_{public}_finite" in vars(k))
        owner_public = next(k for k in mro if public in vars(k))
        return getattr(self, f"_{public}_one" if issubclass(owner_fast, owner_public) else public)

    def kernels(self, *, stationarity_tol: float, budget: int):
        """The single-trajectory kernel the integrator calls (a fast hook may replace the generic one)."""
        from reduced_dynamics.flow._kernels import ModelKernel

        return ModelKernel(self, stationarity_tol=stationarity_tol, budget=budget)

    def batch_kernels(self):
        """The batched kernel of the batched stiff integrator (models with a Hessian)."""
        from reduced_dynamics.flow._kernels import BatchKernel

        return BatchKernel(self)

    # ------------------------------------------------------------------ identity
    def _key(self):
        return (type(self).__name__, self.setting, self.n_heads, self._layout_key())

    def _layout_key(self):
        return ()

    def __eq__(self, other):
        return isinstance(other, ReducedModel) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self) -> str:
        extra = self._layout_key()
        tail = "".join(f", {k}={v!r}" for k, v in extra)
        return f"{type(self).__name__}(setting={self.setting!r}, n_heads={self.n_heads}{tail})"

    def describe(self) -> dict[str, Any]:
        """JSON-friendly identity: model name, objective, setting, H, layout."""
        out = {"model": self.name, "objective": self.objective, "n_heads": self.n_heads}
        out.update(self.setting.to_dict())
        if self.setting.Sigma is not None:
            out["sigma_eigenvalues"] = np.linalg.eigvalsh(self.setting.Sigma).tolist()
        out.update({k: v for k, v in self._layout_key()})
        return out

    def to_dict(self) -> dict[str, Any]:
        """:meth:`describe`: what a result that holds the model (``Flow.to_dict()``) writes for it in JSON."""
        return self.describe()
