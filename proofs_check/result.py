"""The result object every checker returns, and the guard that turns a crash into a failed result."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

from reduced_dynamics._results import FrozenResult, jsonable
from reduced_dynamics.setting import as_setting

__all__ = ["CheckResult", "THEORY_RANGE", "outside_theory_range"]


class _ReadOnlyDict(dict):
    """A ``dict`` that refuses changes (JSON-serialisable as is; pickles as a plain dict copy)."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("CheckResult.data is read-only; use to_dict() for a mutable copy")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (_ReadOnlyDict, (dict(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _freeze(value):
    """JSON-friendly, read-only copy: dicts -> read-only dicts, lists/tuples/arrays -> tuples, numpy scalars -> Python."""
    value = jsonable(value)  # arrays -> lists, numpy scalars -> Python scalars, results -> dicts
    if isinstance(value, dict):
        return _ReadOnlyDict({str(k): _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise TypeError(f"CheckResult.data values must be JSON-friendly, got {type(value).__name__}")


@dataclass(frozen=True, repr=False)
class CheckResult(FrozenResult):
    """Outcome of one numerical check of the theory.

    Attributes
    ----------
    name : str
        Stable identifier (``manifold``, ``drift_law``, ...).
    passed : bool
        True when every comparison was within its tolerance. False when one
        was not, or when the check could not run (then ``error`` says why).
    predicted : str
        What the theory predicts, human-readable (numbers included).
    measured : str
        What was measured, human-readable.
    tolerance : str
        The tolerance the comparison used, and in which units.
    explanation : str
        One or two sentences: what was compared and how.
    data : mapping
        Machine-readable numbers behind the check (for JSON and figures). It
        is frozen at construction into JSON-friendly, read-only values:
        nested mappings are read-only ``dict`` subclasses (``json.dumps``
        accepts them), sequences and ndarrays become tuples (``np.asarray``
        restores an array), numpy scalars become Python scalars. Assigning
        to it raises ``TypeError``; :meth:`to_dict` returns a mutable copy.
    error : str or None
        ``"<ExceptionType>: <message>"`` when the check could not run at the
        given setting (then ``passed`` is False and ``measured`` repeats the
        reason); None otherwise.
    skipped : str or None
        Why the check's statement does not apply at the given setting (it is
        outside the theory's range, :data:`THEORY_RANGE`), when it was not
        run; then ``passed`` is False (nothing was verified) and ``status`` is
        ``"SKIPPED"``, distinct from a failure. None otherwise.

    Examples
    --------
    >>> r = CheckResult("demo", True, "x = 1", "x = 1.0001", "1e-3", data={"x": [1.0001]})
    >>> r
    CheckResult(demo: PASS; predicted='x = 1'; measured='x = 1.0001'; tol='1e-3')
    >>> r.data["x"]
    (1.0001,)
    """

    name: str
    passed: bool
    predicted: str
    measured: str
    tolerance: str
    explanation: str = ""
    data: Any = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "passed", bool(self.passed))
        object.__setattr__(self, "data", _freeze(self.data))
        if self.error is not None and self.passed:
            raise ValueError("`passed` must be False when `error` is set")
        if self.skipped is not None and (self.passed or self.error is not None):
            raise ValueError("`passed` must be False and `error` None when `skipped` is set")

    @property
    def status(self) -> str:
        """``"PASS"``, ``"FAIL"`` (ran, out of tolerance), ``"ERROR"`` (could not run; a failure too) or
        ``"SKIPPED"`` (the statement does not apply at this setting; nothing was compared)."""
        if self.skipped is not None:
            return "SKIPPED"
        if self.error is not None:
            return "ERROR"
        return "PASS" if self.passed else "FAIL"

    def __repr__(self) -> str:
        if self.skipped is not None:
            return f"CheckResult({self.name}: SKIPPED; {self.skipped!r})"
        if self.error is not None:
            return f"CheckResult({self.name}: ERROR; {self.error!r})"
        return (
            f"CheckResult({self.name}: {self.status}; predicted={self.predicted!r}; "
            f"measured={self.measured!r}; tol={self.tolerance!r})"
        )

    @classmethod
    def could_not_run(cls, name: str, exc: BaseException | str, setting=None) -> CheckResult:
        """The failed result of a check that raised ``exc`` (or failed for the reason ``exc``) at ``setting``."""
        reason = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        where = f" at {setting!r}" if setting is not None else ""
        return cls(
            name=name,
            passed=False,
            predicted="(not evaluated)",
            measured=f"could not run{where}: {reason}",
            tolerance="(not evaluated)",
            explanation=f"The check raised an exception{where}, so nothing was compared; this counts as a failure.",
            data={"setting": setting.to_dict() if setting is not None else None},
            error=reason,
        )

    @classmethod
    def skip(cls, name: str, reason: str, setting=None) -> CheckResult:
        """The result of a check whose statement does not apply at ``setting`` (status ``"SKIPPED"``)."""
        where = f" at {setting!r}" if setting is not None else ""
        return cls(
            name=name,
            passed=False,
            predicted="(not applicable)",
            measured=f"skipped{where}: {reason}",
            tolerance="(not evaluated)",
            explanation=f"The statement checked here does not apply{where}: {reason}. Nothing was compared.",
            data={"setting": setting.to_dict() if setting is not None else None},
            skipped=reason,
        )


#: Where each check's statement applies: check name -> the statements of the theory it checks (keys of
#: :data:`reduced_dynamics.setting.THEORY_STATEMENTS`). A check run at a setting outside the range of one of
#: them (:meth:`reduced_dynamics.Setting.theory_range_issues`) returns :meth:`CheckResult.skip`, not a FAIL.
THEORY_RANGE = {
    "manifold": ("solution-manifold", "drift-law"),  # its rate and constants are the drift's corrections
    "drift_law": ("drift-law",),
    "approximation": ("solution-manifold",),
    "predictor_limit": ("solution-manifold",),
    "optimality": ("solution-manifold",),
    "optimality_loss": ("solution-manifold",),
    "approx_vs_exact": ("approximation-error",),
}


def outside_theory_range(name: str, setting) -> str | None:
    """The reason why check ``name`` does not apply at ``setting`` (:data:`THEORY_RANGE`), or None."""
    for statement in THEORY_RANGE.get(name, ()):
        issues = setting.theory_range_issues(statement)
        if issues:
            return issues[0]
    return None


def reports_errors(name: str):
    """Decorate a checker ``f(setting, *, quick=False, ...)``: a crash becomes a failed :class:`CheckResult`.

    Bad arguments still raise: the call is bound to the signature (``TypeError``)
    and ``setting`` is validated (scalar and isotropic, ``ValueError``) before
    the check runs. A setting outside the check's range (:data:`THEORY_RANGE`)
    gives :meth:`CheckResult.skip` without running it. Any ``Exception``
    raised while it runs (for example a solver that cannot converge at that
    setting) is returned as :meth:`CheckResult.could_not_run`.
    """

    def decorate(func):
        sig = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            setting = as_setting(bound.arguments["setting"], name).require_isotropic(name)
            bound.arguments["setting"] = setting
            reason = outside_theory_range(name, setting)
            if reason is not None:
                return CheckResult.skip(name, reason, setting)
            try:
                return func(*bound.args, **bound.kwargs)
            except Exception as exc:
                return CheckResult.could_not_run(name, exc, setting)

        return wrapper

    return decorate
