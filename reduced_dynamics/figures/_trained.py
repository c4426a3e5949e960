"""The attention models trained for the three trained-model figures, trained once and shared.

References
----------
docs/theory.md#full-model, docs/theory.md#emergent-patterns
"""

from __future__ import annotations

__all__ = ["TRAINED_MODELS", "trained_settings", "trained_runs"]

TRAINED_MODELS = (
    ("softmax_H1", 1, "separate"),
    ("softmax_H2", 2, "separate"),
    ("softmax_H4", 4, "separate"),
    ("linear_H1", 1, "linear"),
)

_TRAINED_CACHE: dict = {}


def trained_settings(setting, *, quick: bool) -> dict:
    """Problem (from ``setting``) and Adam protocol of the trained models (quick: 300 steps, lr 1e-2).

    Returns
    -------
    dict
        ``d, L, sigma2, steps, batch, lr, n_snapshots`` (keywords of ``TrainConfig``).
    """
    problem = dict(d=setting.d, L=setting.L, sigma2=setting.sigma2)
    if quick:
        return dict(problem, steps=300, batch=32, lr=1e-2, n_snapshots=12)
    return dict(problem, steps=20_000, batch=256, lr=1e-3, n_snapshots=60)


def _protocol(kw: dict) -> dict:
    """The training-protocol part of :func:`trained_settings` (without the problem)."""
    return {k: v for k, v in kw.items() if k not in ("d", "L", "sigma2")}


def trained_runs(setting, *, quick: bool, seed: int) -> dict:
    """The models of ``TRAINED_MODELS``, trained with Adam (lr 1e-3; quick: 1e-2) from seed ``seed``.

    Training is deterministic, so the result is cached per ``(setting, quick, seed)``
    and shared by the three trained-model figures (one ``run_figures`` trains once).

    Returns
    -------
    dict
        ``label -> TrainResult`` (internal helper of the figure modules).
    """
    from reduced_dynamics.model.training import TrainConfig, train

    key = (setting, bool(quick), int(seed))
    if key not in _TRAINED_CACHE:
        _TRAINED_CACHE.clear()
        kw = trained_settings(setting, quick=quick)
        runs = {}
        for label, H, param in TRAINED_MODELS:
            r = train(
                TrainConfig(
                    setting=setting, n_heads=H, parameterisation=param, optimizer="adam", seed=seed, **_protocol(kw)
                )
            )
            if not r.success:
                raise RuntimeError(f"training {label} failed: {r.message}")
            runs[label] = r
        _TRAINED_CACHE[key] = runs
    return _TRAINED_CACHE[key]
