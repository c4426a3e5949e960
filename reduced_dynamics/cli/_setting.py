"""The one data-model option group shared by every command: ``--d --L --sigma2`` -> one :class:`Setting`."""

from __future__ import annotations

from reduced_dynamics.setting import Setting

__all__ = ["add_setting_arguments", "setting_from_args"]


def add_setting_arguments(p, *, what: str = "") -> None:
    """Add ``--d``, ``--L``, ``--sigma2`` (defaults: the paper's setting) to the parser ``p``."""
    suffix = f" {what}" if what else ""
    p.add_argument("--d", type=int, default=5, help=f"covariate dimension d{suffix} (default 5)")
    p.add_argument("--L", type=int, default=40, help=f"prompt length L (in-context examples){suffix} (default 40)")
    p.add_argument("--sigma2", type=float, default=0.1, help=f"noise variance σ²{suffix} (default 0.1)")


def setting_from_args(args) -> Setting:
    """Build the command's one :class:`Setting` (a bad value raises the ``ValueError`` naming the flag)."""
    return Setting(d=args.d, L=args.L, sigma2=args.sigma2)
