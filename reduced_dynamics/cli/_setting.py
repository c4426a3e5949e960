"""The one data-model option group shared by every command: ``--d --L --sigma2`` (and ``--tasks``) -> one :class:`Setting`."""

from __future__ import annotations

import re

import numpy as np

from reduced_dynamics.precond.covariance import covariance_from_eigs
from reduced_dynamics.setting import Setting

__all__ = [
    "add_extension_arguments",
    "add_sigma_arguments",
    "add_setting_arguments",
    "add_tasks_argument",
    "covariance_from_eigs",
    "parse_tasks",
    "setting_from_args",
]


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


def add_extension_arguments(p) -> None:
    """Add ``--sigma``, ``--sigma-eigs``, ``--sigma-seed``, ``--activation``, ``--activation-c`` to the parser ``p``.

    The covariance of the covariates (docs/theory.md#non-isotropic-covariates) and the attention
    activation (docs/theory.md#other-activations); :func:`setting_from_args` puts them in the setting.
    """
    from reduced_dynamics.activations import ACTIVATIONS

    add_sigma_arguments(p)
    p.add_argument(
        "--activation",
        type=str,
        default="exp",
        help=f"attention activation f of the weights f(s_l)/Σ_j f(s_j): one of {', '.join(ACTIVATIONS)} "
        "(default exp, the softmax)",
    )
    p.add_argument(
        "--activation-c",
        type=float,
        default=1.0,
        help="the constant C of affine (1 + Cx) and square ((1 + Cx)²); 1 for exp and tanh (default 1)",
    )


def add_sigma_arguments(p) -> None:
    """Add ``--sigma``, ``--sigma-eigs``, ``--sigma-seed`` (the covariance Σ of the covariates) to the parser ``p``."""
    p.add_argument(
        "--sigma",
        type=str,
        default=None,
        metavar="FILE.npy",
        help="covariance Σ of the covariates x ~ N(0, Σ): a d×d symmetric positive definite matrix saved by "
        "numpy.save (default: the identity)",
    )
    p.add_argument(
        "--sigma-eigs",
        type=str,
        default=None,
        metavar="E1,...,Ed",
        help="covariance Σ given by its d eigenvalues (comma-separated, > 0) in a random orthogonal basis drawn "
        "from --sigma-seed, e.g. 0.5,1.375,2.25,3.125,4 (instead of --sigma)",
    )
    p.add_argument(
        "--sigma-seed",
        type=int,
        default=None,
        help="seed of the random basis of --sigma-eigs (default 0)",
    )


def parse_eigs(text: str, d: int) -> np.ndarray:
    """Parse ``--sigma-eigs`` (``"0.5,1,2,3,4"``): exactly ``d`` finite positive numbers.

    Raises
    ------
    ValueError
        One line naming ``--sigma-eigs``.
    """
    want = f"`--sigma-eigs` must list d = {d} positive eigenvalues, comma-separated (e.g. {','.join(['1'] * d)})"
    try:
        e = np.array([float(x) for x in str(text).split(",")])
    except ValueError:
        raise ValueError(f"{want}, got {text!r}") from None
    if e.size != d or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"{want}, got {text!r}")
    return e


def load_sigma(path: str, d: int) -> np.ndarray:
    """Read ``--sigma FILE.npy``: a real ``(d, d)`` array (symmetry and definiteness are the setting's checks).

    The file and its header are checked before any data is read (:func:`reduced_dynamics.io.read_npy`): a
    named pipe, a header declaring another shape or an object array is refused without reading on.

    Raises
    ------
    ValueError
        One line naming ``--sigma``: unreadable or non-regular file, not a real numeric array, wrong shape.
    """
    from reduced_dynamics.io import read_npy

    try:
        return read_npy(path, name="--sigma", shape=(d, d))
    except ValueError as exc:
        text = str(exc)
        if "must be a (" in text:  # name --d too: the shape is the one --d asks for
            text = text.replace(" array, got shape", f" matrix (--d {d}), got shape", 1)
        raise ValueError(text) from None


def _sigma_from_args(args, d: int):
    """``Σ`` from ``--sigma`` or ``--sigma-eigs``/``--sigma-seed`` (``None`` when neither is given)."""
    path, eigs, seed = (
        getattr(args, "sigma", None),
        getattr(args, "sigma_eigs", None),
        getattr(args, "sigma_seed", None),
    )
    if path is not None and eigs is not None:
        raise ValueError("`--sigma` and `--sigma-eigs` both give Σ: use one of them")
    if seed is not None and eigs is None:
        raise ValueError("`--sigma-seed` is the seed of the basis of `--sigma-eigs`: give `--sigma-eigs` too")
    if path is not None:
        return load_sigma(path, d), "--sigma"
    if eigs is not None:
        if seed is not None and seed < 0:
            raise ValueError(f"`--sigma-seed` must be an integer >= 0, got {seed}")
        return covariance_from_eigs(parse_eigs(eigs, d), seed=0 if seed is None else seed), "--sigma-eigs"
    return None, None


def setting_from_args(args) -> Setting:
    """Build the command's one :class:`Setting` (a bad value raises the ``ValueError`` naming the flag).

    Reads ``--tasks`` when the command has it (``args.tasks``); without it the setting is single-task.
    Reads ``--sigma`` / ``--sigma-eigs`` / ``--sigma-seed`` and ``--activation`` / ``--activation-c``
    when the command has them (:func:`add_extension_arguments`).
    """
    base = Setting(d=args.d, L=args.L, sigma2=args.sigma2)  # validates d first
    changes = {}
    tasks_text = getattr(args, "tasks", None)
    if tasks_text is not None:
        changes["tasks"] = parse_tasks(tasks_text, base.d)
    if hasattr(args, "activation"):
        changes["activation"] = args.activation
        changes["activation_c"] = getattr(args, "activation_c", 1.0)
    if any(hasattr(args, k) for k in ("sigma", "sigma_eigs")):
        Sigma, flag = _sigma_from_args(args, base.d)
        if Sigma is not None:
            try:
                Setting(d=base.d, Sigma=Sigma)
            except ValueError as exc:  # non-symmetric, not positive definite, non-finite: name the flag
                raise ValueError(str(exc).replace("`Sigma`", f"`{flag}` (Σ)")) from None
            changes["Sigma"] = Sigma
    return base.replace(**changes) if changes else base
