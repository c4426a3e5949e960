"""Shared layout of the models whose state is one scalar KQ weight ω_h and one OV weight μ_h per head.

The isotropic approximate loss L̃, its O(1/L) correction, the exact finite-L risk and the
activation model all live on ``y = (ω_1..ω_H, μ_1..μ_H)``; :class:`ScalarHeadsModel` gives them
the layout, the starts, the end-state summary (γ, η_eff, the patterns) and the predictors.
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import (
    check_finite_array,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["ScalarHeadsModel", "N_HEADS_MAX", "initial_state", "random_starts"]

#: Largest number of heads H of a flow (the Hessian is 2H × 2H, exp(d ωωᵀ) is H × H).
N_HEADS_MAX = 1000


class ScalarHeadsModel(ReducedModel):
    """Base of the models on ``y = (ω, μ)``, ``ω, μ`` of shape ``(H,)``."""

    scalar_heads = True

    def __init__(self, setting: Setting, n_heads: int, *, heads_max: int = N_HEADS_MAX):
        self.setting = as_setting(setting, type(self).__name__)
        self.n_heads = check_positive_int("n_heads", n_heads, hi=heads_max)
        self.parts = (Part("omega", (self.n_heads,)), Part("mu", (self.n_heads,)))

    def split(self, y):
        """``(omega, mu)`` of ``y`` (shape ``(..., 2H)``), each ``(..., H)``."""
        y = self._state_array(y)
        H = self.n_heads
        return y[..., :H], y[..., H:]

    def state(self, omega, mu) -> np.ndarray:
        """``y = (ω, μ)`` from ``omega``, ``mu`` of shape ``(..., H)`` (validated)."""
        return self.pack(omega=omega, mu=mu)

    def symmetric_state(self, scale: float = 0.01) -> np.ndarray:
        """``ω = μ = scale·(+1, −1, +1, ...)``: a ± pair per two heads."""
        scale = check_positive_float("scale", scale)
        signs = np.where(np.arange(self.n_heads) % 2 == 0, 1.0, -1.0)
        return np.concatenate([scale * signs, scale * signs])

    def summarize(self, y, *, t=None, tolerances=None) -> dict:
        """Scalar summaries of one state: loss, |∇|, γ, η_eff, Σμ, the zero-sum ratio, head counts.

        Keys: ``omega, mu, loss, grad_norm, gamma, eta_eff, eta_star, inf_loss, sum_mu,
        zero_sum_ratio, n_dummy, n_positive, n_negative`` (``inf_loss`` is None for H = 1, and for
        the models whose infimum is not ``1 + σ² − η*``).
        """
        from reduced_dynamics.dynamics.diagnostics import trajectory_diagnostics

        self._check_time(t)
        w, m = self.split(y)
        diag = trajectory_diagnostics(w, m, tolerances=tolerances)
        g = self.grad(y)
        lim = self.limit()
        return {
            "omega": w.tolist(),
            "mu": m.tolist(),
            "loss": float(self.loss(y)),
            "grad_norm": float(np.sqrt(np.sum(g * g))),
            "gamma": float(diag.gamma),
            "eta_eff": float(diag.eta_eff),
            "eta_star": lim.get("eta_star"),
            "inf_loss": lim.get("inf_loss") if self.n_heads >= 2 else None,
            "sum_mu": float(diag.sum_mu),
            "zero_sum_ratio": float(diag.zero_sum_ratio),
            "n_dummy": int(diag.n_dummy),
            "n_positive": int(diag.n_positive),
            "n_negative": int(diag.n_negative),
        }

    def summarize_many(self, Y, *, t=None, tolerances=None) -> dict:
        """The :meth:`summarize` values of the states ``Y`` (shape (B, 2H)), vectorised: each key a list of B values.

        A model that extends :meth:`summarize` (its own keys) gets the generic state-by-state version.
        """
        if type(self).summarize is not ScalarHeadsModel.summarize:
            return super().summarize_many(Y, t=t, tolerances=tolerances)
        from reduced_dynamics.dynamics.diagnostics import trajectory_diagnostics

        Y, t = self._states_and_times(Y, t)
        B = Y.shape[0]
        w, m = self.split(Y)
        diag = trajectory_diagnostics(w, m, tolerances=tolerances)
        loss = np.asarray(self.loss(Y), dtype=np.float64)
        g = np.asarray(self.grad(Y))
        if loss.shape != (B,) or g.shape != Y.shape:  # not vectorised: state by state
            return super().summarize_many(Y, t=t, tolerances=tolerances)
        lim = self.limit()
        return {
            "omega": w.tolist(),
            "mu": m.tolist(),
            "loss": loss.tolist(),
            "grad_norm": np.sqrt(np.sum(g * g, axis=-1)).tolist(),
            "gamma": np.asarray(diag.gamma, dtype=np.float64).tolist(),
            "eta_eff": np.asarray(diag.eta_eff, dtype=np.float64).tolist(),
            "eta_star": [lim.get("eta_star")] * B,
            "inf_loss": [lim.get("inf_loss") if self.n_heads >= 2 else None] * B,
            "sum_mu": np.asarray(diag.sum_mu, dtype=np.float64).tolist(),
            "zero_sum_ratio": np.asarray(diag.zero_sum_ratio, dtype=np.float64).tolist(),
            "n_dummy": np.asarray(diag.n_dummy).astype(int).tolist(),
            "n_positive": np.asarray(diag.n_positive).astype(int).tolist(),
            "n_negative": np.asarray(diag.n_negative).astype(int).tolist(),
        }

    def manifold_point(self, gamma: float) -> np.ndarray:
        """The two-head state ``ω = (γ, −γ)``, ``μ = (μ_γ, −μ_γ)`` on the solution manifold S_γ (H = 2).

        ``μ_γ`` minimises L̃ along the manifold (:func:`~reduced_dynamics.dynamics.manifold.mu_gamma`; the corrected
        and exact objectives take the same large-L point; the activation model minimises its L̃_f instead).
        """
        from reduced_dynamics.dynamics.manifold import mu_gamma

        g = self._check_manifold_gamma(gamma)
        m = float(mu_gamma(g, self.setting))
        return self.state([g, -g], [m, -m])

    def _check_manifold_gamma(self, gamma) -> float:
        if self.n_heads != 2:
            raise ValueError(f"`n_heads` must be 2 for the two-head point of the solution manifold, got {self.n_heads}")
        return check_positive_float("gamma", gamma)

    def predictor(self, y):
        """The H-head softmax model at this state (:class:`~reduced_dynamics.MultiHead`)."""
        from reduced_dynamics.estimation.predictors import MultiHead

        w, m = self.split(y)
        return MultiHead(w, m)

    # ------------------------------------------------------------------ risk
    state_predictor_name = "multi_head"
    has_risks = True

    def reference_predictors(self, y=None) -> dict:
        """The single head at its optimum (H = 1), vanilla and debiased GD at η* (the flow's limit for H >= 2),
        Bayes ridge (λ = σ²d)."""
        from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD, SingleHead, VanillaGD

        eta = float(self.setting.eta_star)
        return {
            "single_head": SingleHead.optimum(self.setting),
            "gd": VanillaGD(eta),
            "debiased_gd": DebiasedGD(eta),
            "bayes_ridge": BayesRidge(),
        }

    def reference_risks(self, y=None) -> dict:
        """The exact finite-L risks of GD and debiased GD at η* (:func:`~reduced_dynamics.estimation.closed_forms.gd_risk`)."""
        from reduced_dynamics.estimation.closed_forms import gd_risk

        eta = float(self.setting.eta_star)
        return {
            "gd": float(gd_risk(eta, self.setting, debiased=False)),
            "debiased_gd": float(gd_risk(eta, self.setting, debiased=True)),
        }

    def risk_plan(self, y=None):
        """The H-head model at ``y`` against the references of :meth:`reference_predictors`; η* in the config."""
        return super().risk_plan(y).replace(config={"eta_star": float(self.setting.eta_star)})

    # ------------------------------------------------------------------ training
    trainer = "attention"

    def trained_summary(self, result, spec) -> dict:
        """The trained H-head attention: extracted (ω, μ), patterns, manifold gap, risks against the reduced
        model at (ω, μ) and debiased GD (:func:`~reduced_dynamics.model.training.summarize_run`, evaluation
        seed ``EVAL_SEED`` = 12345), and each head's circuits with their |cosines| with Σ⁻¹ and I."""
        from reduced_dynamics.io import to_jsonable
        from reduced_dynamics.model.circuits import extract_precond_circuits
        from reduced_dynamics.model.training import summarize_run

        summary = summarize_run(result, n_prompts=spec.eval_prompts, seed=EVAL_SEED)
        cfg = result.config
        c = extract_precond_circuits(cfg.model(), result.params, cfg.setting)
        heads = {
            "kq": c.kq,
            "ov": c.ov,
            "kq_cosine_sigma_inv": c.cosine_sigma_inv,
            "kq_cosine_identity": c.cosine_identity,
        }
        return to_jsonable({**summary.to_dict(), **heads})


#: seed of the fresh evaluation prompts of a trained model (independent of the training seed)
EVAL_SEED = 12345


def initial_state(n_heads, *, kind="random", scale=0.01, seed=None, omega0=None, mu0=None):
    """Initial state for the flow.

    Parameters
    ----------
    n_heads : int, in [1, 1000]
        Number of heads H.
    kind : {"random", "symmetric", "given"}
        ``random``: i.i.d. ``N(0, scale²)`` entries drawn from ``seed``;
        ``symmetric``: ``ω = scale·(+1, −1, +1, ...)``, ``μ = ω`` (a ± pair per two heads);
        ``given``: use ``omega0`` and ``mu0``.
    scale : float, > 0
        Size of the initial entries.
    seed : int >= 0 or numpy.random.Generator
        Required for ``kind="random"`` (there is no default seed); unused otherwise.
    omega0, mu0 : array_like, shape (H,), optional
        Used by ``given``.

    Returns
    -------
    ndarray, shape (2, H)
        Row 0 is ``omega0``, row 1 is ``mu0`` (so ``w0, m0 = initial_state(...)`` works; its
        ``ravel()`` is the state vector ``y = (ω, μ)`` of a scalar-heads model, the same numbers
        as ``model.initial_state(seed=...)`` for ``kind="random"``).

    Examples
    --------
    >>> initial_state(4, kind="symmetric", scale=0.1)
    array([[ 0.1, -0.1,  0.1, -0.1],
           [ 0.1, -0.1,  0.1, -0.1]])
    """
    n_heads = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
    if kind == "given" or (omega0 is not None or mu0 is not None):
        if omega0 is None or mu0 is None:
            raise ValueError("`omega0` and `mu0` must both be given for kind='given'")
        omega0 = check_finite_array("omega0", omega0, ndim=1)
        mu0 = check_finite_array("mu0", mu0, ndim=1)
        if omega0.shape != (n_heads,) or mu0.shape != (n_heads,):
            raise ValueError(
                f"`omega0` and `mu0` must have shape ({n_heads},) for n_heads={n_heads}, got {omega0.shape} and {mu0.shape}"
            )
        return np.stack([omega0, mu0])
    scale = check_positive_float("scale", scale)
    if kind == "random":
        if seed is None:
            raise ValueError("`seed` is required for kind='random' (an integer >= 0 or a numpy Generator)")
        if not isinstance(seed, np.random.Generator):
            seed = check_nonnegative_int("seed", seed)
        from reduced_dynamics.estimation.prompts import as_generator

        rng = as_generator(seed)
        return rng.standard_normal((2, n_heads)) * scale
    if kind == "symmetric":
        signs = np.where(np.arange(n_heads) % 2 == 0, 1.0, -1.0)
        return np.stack([scale * signs, scale * signs])
    raise ValueError(f"`kind` must be one of 'random', 'symmetric', 'given', got {kind!r}")


def random_starts(n_heads, seeds, *, scale=0.01) -> np.ndarray:
    """One random start per seed, as state vectors: row ``i`` is ``initial_state(n_heads, seed=seeds[i],
    scale=scale).ravel()`` (the same numbers), validated once.

    Parameters
    ----------
    n_heads : int, in [1, 1000]
    seeds : sequence of int >= 0
    scale : float, > 0

    Returns
    -------
    ndarray, shape (len(seeds), 2 * n_heads)

    Examples
    --------
    >>> np.array_equal(random_starts(2, [3], scale=0.1)[0], initial_state(2, seed=3, scale=0.1).ravel())
    True
    """
    n_heads = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
    scale = check_positive_float("scale", scale)
    seeds = [check_nonnegative_int("seed", s) for s in seeds]
    out = np.empty((len(seeds), 2 * n_heads))
    for i, s in enumerate(seeds):
        out[i] = np.random.default_rng(s).standard_normal(2 * n_heads)
    return out * scale
