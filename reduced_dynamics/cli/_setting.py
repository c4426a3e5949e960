"""The one data-model option group shared by every command: ``--d --L --sigma2`` (and ``--tasks``) -> one :class:`Setting`."""

from __future__ import annotations

import re

from reduced_dynamics.setting import Setting

__all__ = ["add_setting_arguments", "add_tasks_argument", "parse_tasks", "setting_from_args"]


def add_setting_arguments(p, *, what: str = "") -> None:
    """Add ``--d``, ``--L``, ``--sigma2`` (defaults: the paper's setting) to the parser ``p``."""
    suffix = f" {what}" if what else ""
    p.add_argument("--d", type=int, default=5, help=f"covariate dimension d{suffix} (default 5)")
    p.add_argument("--L", type=int, default=40, help=f"prompt length L (in-context examples){suffix} (default 40)")
    p.add_argument("--sigma2", type=float, default=0.1, help=f"noise variance σ²{suffix} (default 0.1)")


def add_tasks_argument(p) -> None:
    """Add ``--tasks`` (multi-task supports, 1-based feature ranges, one per task) to the parser ``p``."""
    p.add_argument(
        "--tasks",
        type=str,
        default=None,
        help="multi-task regression: the features of each task as 1-based ranges, one per task, comma-separated, "
        "e.g. 1-4,3-6 (with --d 6: the paper's S1={1,2,3,4}, S2={3,4,5,6}); a single feature is written 5",
    )


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_tasks(text: str, d: int) -> tuple[tuple[int, ...], ...]:
    """Parse ``--tasks`` (``"1-4,3-6"``) into 0-based supports for ``d`` features.

    Raises
    ------
    ValueError
        One line naming ``--tasks``: empty list or task, a malformed or reversed range, a
        feature outside ``1..d``, or a task listed twice.
    """
    if text is None or not text.strip():
        raise ValueError("`--tasks` must list at least one task as 1-based feature ranges, e.g. 1-4,3-6; got ''")
    out: list[tuple[int, ...]] = []
    for n, part in enumerate(text.split(","), start=1):
        if not part.strip():
            raise ValueError(f"`--tasks`: task {n} is empty in {text!r} (write ranges like 1-4,3-6)")
        m = _RANGE.match(part)
        if m is None:
            raise ValueError(f"`--tasks`: task {n} must be a range a-b or a feature a (1-based), got {part.strip()!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if lo > hi:
            raise ValueError(f"`--tasks`: task {n} is the empty range {part.strip()!r} (need a <= b)")
        if lo < 1 or hi > d:
            raise ValueError(f"`--tasks`: task {n} ({part.strip()}) is outside the features 1..{d} (--d {d})")
        support = tuple(range(lo - 1, hi))
        if support in out:
            raise ValueError(f"`--tasks`: task {n} ({part.strip()}) is listed twice")
        out.append(support)
    return tuple(out)


def setting_from_args(args) -> Setting:
    """Build the command's one :class:`Setting` (a bad value raises the ``ValueError`` naming the flag).

    Reads ``--tasks`` when the command has it (``args.tasks``); without it the setting is single-task.
    """
    tasks_text = getattr(args, "tasks", None)
    if tasks_text is None:
        return Setting(d=args.d, L=args.L, sigma2=args.sigma2)
    base = Setting(d=args.d, L=args.L, sigma2=args.sigma2)  # validates d first
    return base.replace(tasks=parse_tasks(tasks_text, base.d))
