"""The result object every checker returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckResult"]


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one numerical check of the theory.

    Attributes
    ----------
    name : str
        Stable identifier (``manifold``, ``drift_law``, ...).
    passed : bool
    predicted : str
        What the theory predicts, human-readable (numbers included).
    measured : str
        What was measured, human-readable.
    tolerance : str
        The tolerance the comparison used, and in which units.
    explanation : str
        One or two sentences: what was compared and how.
    data : dict
        Machine-readable numbers behind the check (for JSON and figures).
    """

    name: str
    passed: bool
    predicted: str
    measured: str
    tolerance: str
    explanation: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        return f"CheckResult({self.name}: {status}; predicted={self.predicted!r}; measured={self.measured!r}; tol={self.tolerance!r})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": bool(self.passed),
            "predicted": self.predicted,
            "measured": self.measured,
            "tolerance": self.tolerance,
            "explanation": self.explanation,
            "data": self.data,
        }
