r"""The multi-task softmax model: per head a KQ weight per feature and an OV weight per task.

.. math:: \tilde L = \sum_n \Big[\sigma^2 + \frac{1}{|S_n|}\sum_{j\in S_n}(1 - a_{nj})^2 + c\,\mu_n^\top K\mu_n\Big],
          \qquad A = M^\top\Omega,\ K = e^{\circ\,\Omega\Omega^\top}

(formulas in :mod:`reduced_dynamics.multitask.loss`). State ``y = (vec Ω, vec M)`` with ``Ω`` of
shape (H, d) and ``M`` of shape (H, N). Domain: every ``ω⁽ʰ⁾·ω⁽ᵏ⁾`` below ``0.95·700``
(``exp`` overflows float64 at 709). No closed-form Hessian.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import functools

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.setting import as_setting

__all__ = ["MultitaskModel", "tasks_1based"]

#: the multitask loss refuses ω⁽ʰ⁾·ω⁽ᵏ⁾ above this (exp overflows float64 at 709)
_EXP_MAX = 700.0


def _margin_raw(omega):
    """``0.95 · 700 − max_hk ω⁽ʰ⁾·ω⁽ᵏ⁾`` of ``omega`` (..., H, d), shape ``(...)``."""
    return 0.95 * _EXP_MAX - (omega @ np.swapaxes(omega, -1, -2)).max(axis=(-1, -2))


class MultitaskModel(ReducedModel):
    """L̃ of the multi-task model, ``y = (vec Ω, vec M)``.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, softmax; ``tasks`` (or the single task on all features).
    n_heads : int, in [1, 64]
    """

    name = "multitask"
    domain_text = "an exponent ω⁽ʰ⁾·ω⁽ᵏ⁾ reached 0.95·700, near float64 overflow of exp."

    def __init__(self, setting, *, n_heads):
        self.setting = as_setting(setting, "MultitaskModel").require_softmax("the multi-task model")
        self.n_heads = check_positive_int("n_heads", n_heads, hi=64)
        H, d, N = self.n_heads, self.setting.d, self.setting.n_tasks
        self.parts = (Part("omega", (H, d)), Part("mu", (H, N)))

    def split(self, y):
        p = self.unpack(self._state_array(y))
        return p["omega"], p["mu"]

    def state(self, omega, mu):
        return self.pack(omega=omega, mu=mu)

    def _random_state(self, rng, shape):
        # as reduced_dynamics.multitask.flow.random_mt_state: one (H, d + N) draw, ω the first d columns
        H, d, N = self.n_heads, self.setting.d, self.setting.n_tasks
        lead = shape[:-1]
        z = rng.standard_normal(lead + (H, d + N))
        return np.concatenate([z[..., :d].reshape(lead + (H * d,)), z[..., d:].reshape(lead + (H * N,))], axis=-1)

    def loss(self, y):
        from reduced_dynamics.multitask.loss import mt_loss

        return mt_loss(*self.split(y), self.setting)

    def loss_per_task(self, y):
        """Per-task losses, shape ``(..., N)``."""
        from reduced_dynamics.multitask.loss import mt_loss_per_task

        return mt_loss_per_task(*self.split(y), self.setting)

    def grad(self, y):
        from reduced_dynamics.multitask.loss import mt_gradient

        g = mt_gradient(*self.split(y), self.setting)
        lead = np.shape(y)[:-1]
        return np.concatenate([g.omega.reshape(lead + (-1,)), g.mu.reshape(lead + (-1,))], axis=-1)

    def margin(self, y):
        return self._margin_of(y, lambda y: _margin_raw(self.split(y)[0]))

    @functools.cached_property
    def _constants(self):
        """``(mask, sizes, c)`` of the setting, made once for the integrator's hooks."""
        from reduced_dynamics.multitask.loss import support_mask

        mask = support_mask(self.setting)
        return mask, mask.sum(axis=1), self.setting.c

    # the integrator's hooks (ReducedModel._grad_finite): the same numbers on views of a finite state
    def _margin_finite(self, y) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            return self._clamp_margin(_margin_raw(self._views(y)[0]))

    def _grad_finite(self, y):
        from reduced_dynamics.multitask.loss import _gradient_parts

        g_omega, g_mu = _gradient_parts(*self._views(y), *self._constants)
        return np.concatenate([g_omega.ravel(), g_mu.ravel()])

    def limit(self) -> dict:
        """The limit predictor of the flow with H heads (regime, per-task weights A, per-task loss)."""
        from reduced_dynamics.multitask.predictors import limit_predictor

        lim = limit_predictor(self.n_heads, self.setting)
        return {
            "regime": lim.regime,
            "A": np.asarray(lim.A).tolist(),
            "loss_per_task": np.asarray(lim.loss_per_task).tolist(),
        }

    def summarize(self, y, *, t=None) -> dict:
        """Loss (total and per task), |∇|, the effective weights A = Mᵀ Ω, the head roles and antipodal pairs."""
        from reduced_dynamics.multitask.flow import antipodal_pairs, classify_heads
        from reduced_dynamics.multitask.loss import effective_weights

        self._check_time(t)
        om, mu = self.split(y)
        g = self.grad(y)
        return {
            "omega": om.tolist(),
            "mu": mu.tolist(),
            "loss": float(self.loss(y)),
            "loss_per_task": np.asarray(self.loss_per_task(y)).tolist(),
            "grad_norm": float(np.sqrt(np.sum(g * g))),
            "A": effective_weights(om, mu, self.setting).tolist(),
            "roles": list(classify_heads(om, mu, self.setting)),
            "antipodal_pairs": antipodal_pairs(om, mu),
            "limit": self.limit(),
        }

    def predictor(self, y):
        """The per-task predictions of the reduced model at ``y``: a callable ``prompts -> (n, N)``
        (:func:`~reduced_dynamics.multitask.predictors.reduced_mt_predict` at this state)."""
        from functools import partial

        from reduced_dynamics.multitask.predictors import reduced_mt_predict

        om, mu = self.split(y)
        return partial(reduced_mt_predict, omega=np.array(om), mu=np.array(mu), setting=self.setting)

    # ------------------------------------------------------------------ risk
    has_risks = True
    state_predictor_name = "reduced"

    def reference_predictors(self, y=None) -> dict:
        """Per-task predictors (callables ``prompts -> (n, N)``): debiased GD on each support at
        ``η_n = 1/(1 + c|S_n|)``, Bayes ridge on each support (λ = σ²|S_n|), the flow's limits for H = 1 (one
        head at the optimum of L̃) and H = 2 (one weighted debiased GD shared by the tasks), and zero.

        Raises
        ------
        ValueError
            ``σ² = 0`` with ``L`` below a task's number of features (ridge on the support is singular).
        """
        from functools import partial

        from reduced_dynamics.multitask.predictors import (
            limit_predictor,
            reduced_mt_predict,
            support_dgd_weights,
            support_ridge_predict,
            weighted_dgd_predict,
        )

        s = self.setting
        widest = max(map(len, s.supports))
        if s.sigma2 == 0 and s.L < widest:
            raise ValueError(
                f"`sigma2` must be > 0 when L < a task's number of features (Bayes ridge on the support: XᵀX is "
                f"singular), got 0 with `L` {s.L} and supports of up to {widest} features"
            )
        A = support_dgd_weights(s)
        one, two = limit_predictor(1, s), limit_predictor(2, s)
        return {
            "debiased_gd_S": partial(weighted_dgd_predict, A=A),
            "bayes_ridge_S": partial(support_ridge_predict, setting=s),
            "limit_H1": partial(reduced_mt_predict, omega=one.omega, mu=one.mu, setting=s),
            "limit_H2": partial(weighted_dgd_predict, A=two.A),
            "zero": _zero_prediction,
        }

    def reference_risks(self, y=None) -> dict:
        """Exact per-task risks: debiased GD on each support (the single-task closed form at d = |S_n|) and
        the zero predictor (1 + σ²)."""
        from reduced_dynamics.exact.expansion import dgd_risk
        from reduced_dynamics.multitask.predictors import support_dgd_weights

        s = self.setting
        A = support_dgd_weights(s)
        return {
            "debiased_gd_S": [
                float(dgd_risk(A[n].max(), s.replace(d=len(S), tasks=None))) for n, S in enumerate(s.supports)
            ],
            "zero": [1.0 + s.sigma2] * s.n_tasks,
        }

    def risk_plan(self, y=None):
        """The per-task references on common multi-task prompts; the setting, the tasks and η_n in the config."""
        from reduced_dynamics.multitask.predictors import support_dgd_weights

        plan = super().risk_plan(y)
        s = self.setting
        tasks = tasks_1based(s)
        exact = {name: [None] * s.n_tasks if v is None else v for name, v in plan.exact.items()}
        return plan.replace(
            exact=exact,
            conditional=False,
            config={**s.to_dict(), "tasks_1based": tasks, "eta": support_dgd_weights(s).max(axis=1).tolist()},
            name_keys={"tasks": tasks},
        )

    def estimate_risks(self, plan, *, n_prompts, seed, conditional=False, stage=None):
        """Per-task risks on common multi-task prompts (:func:`~reduced_dynamics.multitask.predictors.per_task_risks`;
        plain Monte Carlo: ``conditional`` must be False)."""
        from reduced_dynamics.models._risk import ModelRisks
        from reduced_dynamics.multitask.predictors import per_task_risks

        self._check_plan(plan)
        if conditional:
            raise ValueError("`conditional` is not derived for multi-task prompts (plain Monte Carlo)")
        if plan.pairs:
            raise ValueError("`pairs`: the multi-task estimates report no paired differences")
        if stage is not None:
            stage(f"{', '.join(plan.predictors)} on {n_prompts} prompts ({self.setting.n_tasks} tasks)")
        res = per_task_risks(plan.predictors, self.setting, n_prompts=n_prompts, seed=seed)
        return ModelRisks(names=res.names, risk=res.risk, stderr=res.stderr, n=res.n, conditional=False, differences={})

    # ------------------------------------------------------------------ training
    trainer = "multitask"

    def trained_summary(self, result, spec) -> dict:
        """The trained N-output attention: per head its KQ weights ω⁽ʰ⁾ (H × d), OV weights (H × N) and role,
        and per-task risks on common fresh prompts (seed ``spec.seed + 10⁶``) of the trained model, the
        reduced model at the extracted state (:meth:`predictor`), the flow's limit for H heads, debiased GD
        and Bayes ridge on each support."""
        from reduced_dynamics.io import to_jsonable
        from reduced_dynamics.multitask.attention import mt_attention_predict
        from reduced_dynamics.multitask.flow import antipodal_pairs
        from reduced_dynamics.multitask.predictors import (
            limit_predictor,
            per_task_risks,
            reduced_mt_predict,
            support_dgd_weights,
            support_ridge_predict,
            weighted_dgd_predict,
        )

        s, H = self.setting, self.n_heads
        circ = result.circuits
        lim = limit_predictor(max(H, 1), s)
        per_task = support_dgd_weights(s)  # the limit of H >= N + 1 heads: per-task debiased GD (any N)
        preds = {
            "trained": lambda p: mt_attention_predict(result.model, p, s),
            "reduced": self.predictor(self.state(circ.omega, circ.mu)),
            "limit": lambda p: (
                weighted_dgd_predict(p, lim.A)
                if lim.regime != "kernel"
                else reduced_mt_predict(p, lim.omega, lim.mu, s)
            ),
            "debiased_gd_S": lambda p: weighted_dgd_predict(p, per_task),
            "bayes_ridge_S": lambda p: support_ridge_predict(p, s),
        }
        risks = per_task_risks(preds, s, n_prompts=spec.eval_prompts, seed=spec.seed + 10**6)
        tail = result.losses[-min(1000, result.steps) :]
        return to_jsonable(
            {
                "command": "train",
                "tasks": tasks_1based(s),
                "success": True,
                "omega": circ.omega,
                "mu": circ.mu,
                "roles": list(circ.roles),
                "antipodal_pairs": antipodal_pairs(circ.omega, circ.mu),
                "kq_offdiag_rel": circ.kq_offdiag_rel,
                "ov_offdiag_rel": circ.ov_offdiag_rel,
                "risk": {
                    name: {"risk": risks.risk[i], "stderr": risks.stderr[i]} for i, name in enumerate(risks.names)
                },
                "n_eval": spec.eval_prompts,
                "final_batch_loss": float(np.mean(tail)),
                "steps": result.steps,
                "train_seconds": result.seconds,
                "train_cpu_seconds": result.cpu_seconds,
                "model": (
                    "N-output attention with separate Q_h, K_h, V_h, O_h, trained with Adam"
                    if spec.param == "separate"
                    else "N-output attention in circuit form (KQ_h, OV_h), trained with Adam"
                ),
                "setting": s.to_dict(),
                "config": {
                    "heads": H,
                    "steps": spec.steps,
                    "batch": spec.batch,
                    "lr": spec.lr,
                    "seed": spec.seed,
                    "param": spec.param,
                },
            }
        )


def _zero_prediction(prompts):
    """The zero predictor ``ŷ = 0`` (per task)."""
    return np.zeros_like(prompts.yq)


def tasks_1based(setting) -> str:
    """The task supports as the command line writes them: 1-based ranges, comma-separated (``"1-4,3-6"``)."""
    return ",".join(f"{t[0] + 1}-{t[-1] + 1}" if len(t) > 1 else f"{t[0] + 1}" for t in setting.supports)
