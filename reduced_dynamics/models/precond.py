r"""The preconditioned softmax model under x ~ N(0, Σ): state ``(ω, μ, W)``, loss :math:`\tilde L_\Sigma`.

.. math:: \tilde L_\Sigma = \sigma^2 + \tfrac1d\operatorname{tr}\big[(I-\Sigma\Gamma)\Sigma(I-\Sigma\Gamma)^\top\big]
      + c_\Sigma\,\mu^\top K\mu,\qquad K_{hk} = e^{\omega_h\omega_k\tau_{hk}}

(formulas in :mod:`reduced_dynamics.precond.loss`, limit in :mod:`reduced_dynamics.precond.flow`).
``KQ_h = ω_h W`` with one shared ``d × d`` matrix, or ``ω_h W_h`` with one per head
(``per_head=True``). Domain: every exponent ``ω_hω_kτ_hk`` below ``0.95·MAX_EXPONENT``.
No closed-form Hessian.

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import functools

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.dynamics.loss import MAX_EXPONENT
from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.models._each import each_state
from reduced_dynamics.setting import as_setting

__all__ = ["PrecondModel", "D_FLOW_MAX"]

#: Largest dimension of a flow (the state has 2H + d² variables).
D_FLOW_MAX = 40
#: Largest number of heads.
N_HEADS_MAX = 16


class PrecondModel(ReducedModel):
    """L̃_Σ of the preconditioned model, ``y = (ω, μ, vec W)``.

    Parameters
    ----------
    setting : Setting
        Scalar, softmax, single task; ``Sigma`` (None = ``I_d``); its flow needs ``d <= 40``.
    n_heads : int, in [1, 16]
    per_head : bool, default False
        One KQ matrix per head (``W`` of shape (H, d, d)) instead of a shared one (d, d).
    """

    name = "precond"
    domain_text = (
        "an exponent ω_h ω_k tr(ΣW_hᵀΣW_k) reached 0.95·MAX_EXPONENT (overflow-safe region). "
        "Try a smaller start (a smaller `scale`)."
    )

    def __init__(self, setting, *, n_heads, per_head=False):
        self.setting = as_setting(setting, "PrecondModel").require_softmax("the preconditioned model")
        self.n_heads = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
        if not isinstance(per_head, (bool, np.bool_)):
            raise ValueError(f"`per_head` must be True or False, got {per_head!r}")
        self.per_head = bool(per_head)
        d, H = self.setting.d, self.n_heads
        wshape = (H, d, d) if self.per_head else (d, d)
        self.parts = (Part("omega", (H,)), Part("mu", (H,)), Part("W", wshape))

    def _layout_key(self):
        return (("per_head", True),) if self.per_head else ()

    def _check_flow_size(self):
        if self.setting.d > D_FLOW_MAX:
            raise ValueError(
                f"`setting.d` must be <= {D_FLOW_MAX} for the flow of the preconditioned model (2H + d² variables), "
                f"got {self.setting.d}"
            )

    def check_state(self, y, name: str = "y0"):
        """As :meth:`ReducedModel.check_state`; the flow also needs ``d <= 40`` (its state has 2H + d² variables)."""
        self._check_flow_size()
        return super().check_state(y, name)

    def split(self, y):
        p = self.unpack(self._state_array(y))
        return p["omega"], p["mu"], p["W"]

    def state(self, omega, mu, W):
        return self.pack(omega=omega, mu=mu, W=W)

    def initial_state(self, *, seed, scale=0.01, n=None, kind="symmetric", w_init="random"):
        """A start: ``(ω, μ)`` symmetric ± (default) or random ``N(0, scale²)``, ``W`` random ``N(0, 1/d)`` or ``I_d``.

        The random numbers are drawn as by :func:`reduced_dynamics.precond.flow.precond_initial_state`.
        """
        from reduced_dynamics.precond.flow import precond_initial_state

        if n is not None:
            from reduced_dynamics.flow._batch import N_TRAJ_MAX

            n = check_positive_int("n", n, hi=N_TRAJ_MAX)
            from reduced_dynamics.estimation.prompts import as_generator

            rng = as_generator(seed)
            return np.stack([self.initial_state(seed=rng, scale=scale, kind=kind, w_init=w_init) for _ in range(n)])
        s = precond_initial_state(
            self.n_heads, self.setting, seed=seed, scale=scale, kind=kind, w_init=w_init, per_head=self.per_head
        )
        return self.state(s.omega, s.mu, s.W)

    def loss(self, y):
        from reduced_dynamics.precond.loss import precond_loss

        out = each_state(self._state_array(y), lambda v: precond_loss(*self.split(v), self.setting))
        return float(out) if np.ndim(out) == 0 else out

    def grad(self, y):
        from reduced_dynamics.precond.loss import precond_loss_grad

        def one(v):
            g = precond_loss_grad(*self.split(v), self.setting)
            return np.concatenate([g.omega, g.mu, np.ravel(g.W)])

        return each_state(self._state_array(y), one)

    def exponents(self, y):
        """The largest exponent ``max_hk ω_h ω_k τ_hk`` of one state."""
        from reduced_dynamics.precond.loss import _exponents

        om, _, W = self.split(y)
        return _exponents(om, self._heads(W), self._covariance())[2]

    def margin(self, y):
        return self._margin_of(y, lambda y: each_state(y, lambda v: 0.95 * MAX_EXPONENT - self.exponents(v)))

    def _covariance(self):
        from reduced_dynamics.precond.loss import COVARIANCE_WHERE, D_MAX

        return self.setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)

    def _heads(self, W):
        H, d = self.n_heads, self.setting.d
        return np.broadcast_to(W, (H, d, d)) if W.ndim == 2 else W

    @functools.cached_property
    def _constants(self):
        """``(Σ, c_Σ)`` of the setting, made once for the integrator's hooks."""
        from reduced_dynamics.precond.loss import c_sigma

        return self._covariance(), c_sigma(self.setting)

    # the integrator's hooks (ReducedModel._grad_finite): the same numbers on views of a finite state
    def _margin_finite(self, y) -> float:
        from reduced_dynamics.precond.loss import _exponents

        om, _, W = self._views(y)
        return self._clamp_margin(0.95 * MAX_EXPONENT - _exponents(om, self._heads(W), self._constants[0])[2])

    def _grad_finite(self, y):
        from reduced_dynamics.precond.loss import _grad_parts, _kernel_parts

        om, mu, W = self._views(y)
        Wh = self._heads(W)
        S, c = self._constants
        tau, K = _kernel_parts(om, Wh, S)
        g_omega, g_mu, g_W = _grad_parts(om, mu, Wh, not self.per_head, S, tau, K, c, self.setting.d)
        return np.concatenate([g_omega, g_mu, np.ravel(g_W)])

    def limit(self) -> dict:
        """The limit predictor (:func:`~reduced_dynamics.precond.flow.precond_limit`): Γ* = (Σ + κ_L I)⁻¹, κ_L, η, P, loss."""
        from reduced_dynamics.precond.flow import precond_limit

        lim = precond_limit(self.setting)
        return {
            "Gamma": lim.Gamma.tolist(),
            "kappa": lim.kappa,
            "eta_eff": lim.eta_eff,
            "loss": lim.loss,
            "distance_sigma_inv": lim.distance_sigma_inv,
            "P": lim.P.tolist(),
        }

    def summarize(self, y, *, t=None) -> dict:
        """Loss, the state, and its normalisation (γ, η_eff, distances of W to Σ⁻¹, I, Γ*), with the limit."""
        from reduced_dynamics.precond.flow import normalise_precond_state

        self._check_time(t)
        om, mu, W = self.split(y)
        n = normalise_precond_state(om, mu, W, self.setting)
        g = self.grad(y)
        return {
            "omega": om.tolist(),
            "mu": mu.tolist(),
            "W": W.tolist(),
            "loss": float(self.loss(y)),
            "grad_norm": float(np.sqrt(np.sum(g * g))),
            "gamma": n.gamma,
            "eta_eff": n.eta_eff,
            "W_normalised": n.W.tolist(),
            "distance_sigma_inv": np.asarray(n.distance_sigma_inv).tolist(),
            "distance_identity": np.asarray(n.distance_identity).tolist(),
            "distance_limit": np.asarray(n.distance_limit).tolist(),
            "zero_sum_ratio": n.zero_sum_ratio,
            "sign_matched": n.sign_matched,
            "limit": self.limit(),
        }

    def predictor(self, y):
        """The preconditioned reduced model at this state (``PrecondReducedModel``)."""
        from reduced_dynamics.precond.loss import PrecondReducedModel

        om, mu, W = self.split(y)
        return PrecondReducedModel(omega=om, mu=mu, W=W)

    # ------------------------------------------------------------------ risk
    has_risks = True

    def _sigma_inv(self):
        Sinv = np.linalg.inv(np.asarray(self.setting.covariance(), dtype=float))
        return 0.5 * (Sinv + Sinv.T)

    def _steps(self) -> dict:
        """The optimal steps of (debiased) preconditioned GD with ``P = Σ⁻¹`` and ``P = I`` under Σ."""
        from reduced_dynamics.precond.exact import precond_optimal_eta

        Sinv, I = self._sigma_inv(), np.eye(self.setting.d)
        return {
            "dpgd_sigma_inv": precond_optimal_eta(Sinv, self.setting),
            "pgd_sigma_inv": precond_optimal_eta(Sinv, self.setting, debiased=False),
            "debiased_gd": precond_optimal_eta(I, self.setting),
            "gd": precond_optimal_eta(I, self.setting, debiased=False),
        }

    def reference_predictors(self, y=None) -> dict:
        """Debiased preconditioned GD at the optimum ``ηP = (Σ + κ_L I)⁻¹`` (the flow's limit) and with
        ``P = Σ⁻¹``; vanilla preconditioned GD with ``P = Σ⁻¹``; ``P = I`` debiased and vanilla (each at its
        optimal step under Σ); Bayes ridge (λ = σ²d, Bayes-optimal for any Σ).

        Raises
        ------
        ValueError
            ``L < 2`` (debiased GD predicts 0), or ``σ² = 0`` with ``L < d`` (ridge is singular).
        """
        from reduced_dynamics.estimation.predictors import BayesRidge
        from reduced_dynamics.precond.exact import optimal_dpgd
        from reduced_dynamics.precond.predictors import debiased_precond_gd, precond_gd

        s = self.setting
        if s.L < 2:
            raise ValueError(f"`L` must be >= 2 with a covariance (debiased GD predicts 0 at L = 1), got {s.L}")
        if s.sigma2 == 0 and s.L < s.d:
            raise ValueError(
                f"`sigma2` must be > 0 when L < d: Bayes ridge (λ = σ²d) is then singular, got σ² = 0 with "
                f"L = {s.L}, d = {s.d}"
            )
        opt = optimal_dpgd(s)
        Sinv, I, eta = self._sigma_inv(), np.eye(s.d), self._steps()
        return {
            "dpgd_optimal": debiased_precond_gd(opt.P, opt.eta),
            "dpgd_sigma_inv": debiased_precond_gd(Sinv, eta["dpgd_sigma_inv"]),
            "pgd_sigma_inv": precond_gd(Sinv, eta["pgd_sigma_inv"]),
            "debiased_gd": debiased_precond_gd(I, eta["debiased_gd"]),
            "gd": precond_gd(I, eta["gd"]),
            "bayes_ridge": BayesRidge(),
        }

    def reference_risks(self, y=None) -> dict:
        """Their exact finite-L risks (Wishart moments, :mod:`reduced_dynamics.precond.exact`); none for ridge."""
        from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, pgd_risk

        s = self.setting
        opt = optimal_dpgd(s)
        Sinv, I, eta = self._sigma_inv(), np.eye(s.d), self._steps()
        return {
            "dpgd_optimal": float(dpgd_risk(opt.P, opt.eta, s)),
            "dpgd_sigma_inv": float(dpgd_risk(Sinv, eta["dpgd_sigma_inv"], s)),
            "pgd_sigma_inv": float(pgd_risk(Sinv, eta["pgd_sigma_inv"], s)),
            "debiased_gd": float(dpgd_risk(I, eta["debiased_gd"], s)),
            "gd": float(pgd_risk(I, eta["gd"], s)),
        }

    #: the paired differences ``risk`` reports under Σ
    RISK_PAIRS = (
        ("dpgd_optimal", "dpgd_sigma_inv"),
        ("dpgd_sigma_inv", "debiased_gd"),
        ("dpgd_sigma_inv", "bayes_ridge"),
    )

    def risk_plan(self, y=None):
        """The references of :meth:`reference_predictors` (no state: the Σ flow's state is reported by ``run``),
        paired as in :data:`RISK_PAIRS`; landmarks: the optimal preconditioner, the steps, and the
        proportional-limit Bayes ratio (:func:`~reduced_dynamics.precond.bayes.bayes_ratio_sigma`, σ² > 0)."""
        import hashlib

        from reduced_dynamics.precond.bayes import bayes_ratio_sigma
        from reduced_dynamics.precond.exact import optimal_dpgd

        if y is not None:
            raise ValueError(
                "`y`: the preconditioned model's risk plan has no state (`run --sigma` reports the flow's state); "
                "`risk` reports preconditioned GD and Bayes ridge"
            )
        plan = super().risk_plan(None)
        s = self.setting
        S = np.asarray(s.covariance(), dtype=float)
        eigs = np.linalg.eigvalsh(S)
        opt = optimal_dpgd(s)
        lim = bayes_ratio_sigma(eigs, s) if s.sigma2 > 0 else None
        return plan.replace(
            pairs=self.RISK_PAIRS,
            landmarks={
                "optimal": {
                    "P": opt.P,
                    "eta": opt.eta,
                    "kappa": opt.kappa,
                    "distance_to_sigma_inv": opt.distance_to_sigma_inv,
                },
                "steps": self._steps(),
                "limit": None if lim is None else lim.to_dict(),
            },
            config={"sigma_eigs": eigs},
            name_prefix="risk_precond",
            # a short, stable name of Σ: 12 hex digits of the sha256 of its float64 bytes
            name_keys={"Sigma": hashlib.sha256(np.ascontiguousarray(S, dtype=np.float64).tobytes()).hexdigest()[:12]},
        )

    # ------------------------------------------------------------------ training
    trainer = "attention"

    def trained_summary(self, result, spec) -> dict:
        """A run under ``x ~ N(0, Σ)``: the KQ blocks against Σ⁻¹ and I, the extracted (ω, μ, W), and paired
        risks against debiased preconditioned GD with the model's own P_eff, Σ⁻¹, the optimal P* and P = I
        (:func:`~reduced_dynamics.model.circuits.precond_cross_check`, evaluation seed 12345)."""
        from reduced_dynamics.io import to_jsonable
        from reduced_dynamics.model.circuits import circuits_from_arrays, pattern_metrics, precond_cross_check
        from reduced_dynamics.models._heads import EVAL_SEED

        cfg = result.config
        model = cfg.model()
        cc = precond_cross_check(model, result.params, cfg.setting, n_prompts=spec.eval_prompts, seed=EVAL_SEED)
        c = cc.circuits
        KQ, ov = model.circuits(result.params)
        patterns = pattern_metrics(circuits_from_arrays(KQ, ov))
        tail = result.losses[-min(1000, result.losses.size) :]
        return to_jsonable(
            {
                "success": result.success,
                "status": result.status,
                "message": result.message,
                "config": cfg.to_dict(),
                "steps": result.step,
                "seconds": result.seconds,
                "steps_per_second": result.steps_per_second,
                "train_loss_last1000": float(tail.mean()) if tail.size else float("nan"),
                "stream_version": result.stream_version,
                "kq": c.kq,
                "ov": c.ov,
                "kq_cosine_sigma_inv": c.cosine_sigma_inv,
                "kq_cosine_identity": c.cosine_identity,
                "kq_distance_sigma_inv": c.distance_sigma_inv,
                "W": c.W,
                "omega": c.omega,
                "mu": c.mu,
                "dummy": c.dummy,
                "eta_eff": c.eta_eff,
                "W_distance_sigma_inv": c.W_distance_sigma_inv,
                "W_distance_identity": c.W_distance_identity,
                "P_eff": c.P_eff,
                "P_eff_distance_sigma_inv": c.P_eff_distance_sigma_inv,
                "rank1_residual": c.rank1_residual,
                "patterns": patterns.to_dict(),
                "n_eval": cc.n,
                "risks": {k: {"risk": v.risk, "stderr": v.stderr} for k, v in cc.risks.items()},
                "diffs": {f"model-{k}": {"risk": v.risk, "stderr": v.stderr} for k, v in cc.diffs.items()},
                "exact_risks": cc.exact,
            }
        )
