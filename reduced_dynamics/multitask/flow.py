r"""Gradient flow of the multi-task approximate loss and the classification of its heads.

The flow :math:`\dot\theta = -\nabla\tilde L(\theta)` (the package's time convention,
docs/conventions.md) of :func:`reduced_dynamics.multitask.loss.mt_loss` is integrated by
:func:`reduced_dynamics.integrate` on the model of a setting with ``tasks``
(:class:`reduced_dynamics.models.multitask.MultitaskModel`), from a small random start
(``model.initial_state(seed=..., scale=0.01)``: i.i.d. :math:`N(0, \text{scale}^2)` entries).

Head roles (:func:`classify_heads`). Head :math:`h` contributes to task :math:`n` the vector
:math:`\mu^{(h)}_n\,\omega^{(h)}_{S_n}`; call it *active* for task :math:`n` when its norm
exceeds ``rel_tol`` (default 0.1) times the largest norm over the heads for that task. Its
sign for task :math:`n` is the sign of :math:`\mu^{(h)}_n` (as in the single-task pair
:math:`(\gamma, m), (-\gamma, -m)`, whose heads are "positive" and "negative" while both
contribute :math:`\gamma m > 0`). A head active for exactly one task is *dedicated*
(``"T1+"``: task 1, positive), for several tasks with mixed signs *superposed*
(``"T1+T2-"``), for several tasks with one sign *shared* (``"T1+T2+"``), and for none a
*dummy* (``"dummy"``). Task numbers in labels are 1-based.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_float, check_positive_int
from reduced_dynamics.multitask.loss import (
    check_state,
    support_mask,
)
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "RoleFrequencies",
    "classify_heads",
    "role_frequencies",
]

#: Default end time of the flow (the structure is settled well before; see the theory text).
T_END = 2000.0


def classify_heads(omega, mu, setting: Setting, *, rel_tol: float = 0.1) -> tuple:
    """Role of each head (see the module docstring): ``"dummy"``, ``"T1+"``, ``"T1+T2-"``, ...

    Parameters
    ----------
    omega : array_like, shape (H, d)
    mu : array_like, shape (H, N)
    setting : Setting
    rel_tol : float in (0, 1)
        A head is active for a task when its contribution norm exceeds ``rel_tol`` times the
        largest over the heads.

    Returns
    -------
    tuple of str, length H
    """
    omega, mu = check_state(omega, mu, setting)
    if omega.ndim != 2:
        raise ValueError(f"`omega` must have shape (H, d), got {omega.shape}")
    rel_tol = check_positive_float("rel_tol", rel_tol)
    if rel_tol >= 1:
        raise ValueError(f"`rel_tol` must be in (0, 1), got {rel_tol}")
    mask = support_mask(setting)
    # contribution norms, shape (H, N), in units of the largest |ω| and |μ| (the test is scale-free; no overflow)
    om_scale = max(float(np.abs(omega).max()), 1e-300)
    mu_scale = max(float(np.abs(mu).max()), 1e-300)
    contrib = np.abs(mu / mu_scale) * np.sqrt(((omega / om_scale)[:, None, :] ** 2 * mask[None]).sum(axis=-1))
    top = contrib.max(axis=0)
    roles = []
    for h in range(omega.shape[0]):
        active = [n for n in range(mask.shape[0]) if top[n] > 0 and contrib[h, n] > rel_tol * top[n]]
        if not active:
            roles.append("dummy")
            continue
        roles.append("".join(f"T{n + 1}{'+' if mu[h, n] > 0 else '-'}" for n in active))
    return tuple(roles)


_LABEL = re.compile(r"dummy|(T[1-9][0-9]*[+-])+")


def _check_label(label, name: str = "label") -> str:
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ValueError(f'`{name}` must be a head role label ("dummy", "T1+", "T1+T2-", ...), got {label!r}')
    return label


def role_kind(label: str) -> str:
    """``"dummy"``, ``"dedicated"``, ``"superposed"`` (mixed signs) or ``"shared"`` (one sign) for a role label."""
    label = _check_label(label)
    if label == "dummy":
        return "dummy"
    signs = set(label[i] for i in range(len(label)) if label[i] in "+-")
    n_tasks = label.count("T")
    if n_tasks == 1:
        return "dedicated"
    return "superposed" if len(signs) == 2 else "shared"


def pattern_of(roles) -> str:
    """Canonical head pattern of one end state: the sorted role labels joined by spaces."""
    if isinstance(roles, str) or not isinstance(roles, (tuple, list)) or not roles:
        raise ValueError(f"`roles` must be a non-empty tuple or list of head role labels, got {roles!r}")
    return " ".join(sorted(_check_label(r, "roles") for r in roles))


@dataclasses.dataclass(frozen=True)
class RoleFrequencies(FrozenResult):
    """Head classification over many random starts (:func:`role_frequencies`).

    Attributes
    ----------
    n_heads : int
    n_seeds : int
    patterns : dict
        Pattern (sorted role labels of the H heads) -> count of seeds.
    kinds : dict
        ``dummy`` / ``dedicated`` / ``superposed`` / ``shared`` -> fraction of all heads.
    loss_per_task : ndarray, shape (n_seeds, N)
        End losses per seed and task.
    omega : ndarray, shape (n_seeds, H, d)
    mu : ndarray, shape (n_seeds, H, N)
    failures : int
        Seeds whose integration did not reach ``t_end`` (kept, classified at their last state).
    t_end : float
    """

    n_heads: int
    n_seeds: int
    patterns: dict
    kinds: dict
    loss_per_task: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    failures: int
    t_end: float


def role_frequencies(
    n_heads: int,
    setting: Setting,
    *,
    n_seeds: int = 100,
    seed: int,
    t_end: float = T_END,
    scale: float = 0.01,
    budget: int | None = None,
) -> RoleFrequencies:
    """Integrate the flow from ``n_seeds`` random starts and count the head patterns.

    Start ``i`` is ``model.initial_state(seed=seed + i, scale=scale)`` of the multi-task model.

    Parameters
    ----------
    n_heads : int, in [1, 64]
    setting : Setting
    n_seeds : int, in [1, 100000]
    seed : int >= 0
    t_end : float, in [2.2e-308, 1e12]
        End time of every flow (a normal float; the engine's range).
    scale : float > 0
    budget : int, in [1, 1e8], optional
        Gradient evaluations per flow (the engine's ``budget``; default 150000, as :func:`reduced_dynamics.integrate`):
        a flow that spends it stops there (counted in ``failures``). It bounds the time of a long ``t_end``.

    Returns
    -------
    RoleFrequencies
    """
    H = check_positive_int("n_heads", n_heads, hi=64)
    setting = as_setting(setting, "role_frequencies")
    n_seeds = check_positive_int("n_seeds", n_seeds, hi=100_000)
    seed = check_positive_int("seed", seed + 1, hi=2**62) - 1 if isinstance(seed, int) else seed
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
    pats: Counter = Counter()
    kinds: Counter = Counter()
    losses, oms, mus, failures = [], [], [], 0
    from reduced_dynamics.flow import integrate
    from reduced_dynamics.models import reduced_model

    model = reduced_model(setting, n_heads=H)
    if model.name != "multitask":
        raise ValueError(f"`setting` must be a multi-task setting for role_frequencies, got the {model.name} model")
    from reduced_dynamics.flow._integrate import _check_t_end

    t_end = _check_t_end(t_end)  # the engine's range, named `t_end` (not the `times` it is passed as)
    scale = check_positive_float("scale", scale)
    from reduced_dynamics.flow._integrate import BUDGET, BUDGET_MAX

    budget = BUDGET if budget is None else check_positive_int("budget", budget, hi=BUDGET_MAX)
    for i in range(n_seeds):
        y0 = model.initial_state(seed=seed + i, scale=scale)
        res = integrate(model, y0, times=[t_end], stationarity_tol=0, budget=budget)
        failures += int(not res.success)
        om, mu = model.split(res.states[-1])
        roles = classify_heads(om, mu, setting)
        pats[pattern_of(roles)] += 1
        for r in roles:
            kinds[role_kind(r)] += 1
        losses.append(model.loss_per_task(res.states[-1]))
        oms.append(om)
        mus.append(mu)
    total = H * n_seeds
    return RoleFrequencies(
        n_heads=H,
        n_seeds=n_seeds,
        patterns=dict(pats.most_common()),
        kinds={k: kinds.get(k, 0) / total for k in ("dedicated", "superposed", "shared", "dummy")},
        loss_per_task=np.array(losses),
        omega=np.array(oms),
        mu=np.array(mus),
        failures=failures,
        t_end=t_end,
    )


def antipodal_pairs(omega, mu, *, rel_tol: float = 0.05) -> int:
    """Number of disjoint head pairs ``(h, k)`` with ``(ω⁽ᵏ⁾, μ⁽ᵏ⁾) ≈ −(ω⁽ʰ⁾, μ⁽ʰ⁾)`` (greedy matching).

    A pair matches when ``|θ_h + θ_k| <= rel_tol · max(|θ_h|, |θ_k|)`` with ``θ_h = (ω⁽ʰ⁾/|ω|_max, μ⁽ʰ⁾/|μ|_max)``
    (both blocks scaled to the state's largest entry, so ω and μ count alike).

    Parameters
    ----------
    omega : array_like, shape (H, d)
    mu : array_like, shape (H, N)
    rel_tol : float in (0, 1)

    Returns
    -------
    int
    """
    omega = check_finite_array("omega", omega, ndim=2)
    mu = check_finite_array("mu", mu, ndim=2)
    if omega.shape[0] != mu.shape[0]:
        raise ValueError(f"`omega` (H, d) and `mu` (H, N) must have one H, got shapes {omega.shape} and {mu.shape}")
    rel_tol = check_positive_float("rel_tol", rel_tol)
    th = np.concatenate([omega / max(np.abs(omega).max(), 1e-300), mu / max(np.abs(mu).max(), 1e-300)], axis=1)
    free = list(range(th.shape[0]))
    pairs = 0
    while len(free) > 1:
        h = free.pop(0)
        best = min(free, key=lambda k: np.linalg.norm(th[h] + th[k]))
        scale = max(np.linalg.norm(th[h]), np.linalg.norm(th[best]))
        if scale > 0 and np.linalg.norm(th[h] + th[best]) <= rel_tol * scale:
            free.remove(best)
            pairs += 1
    return pairs


__all__ += ["role_kind", "pattern_of", "antipodal_pairs"]
