"""Non-isotropic covariates x ~ N(0, Σ): the preconditioned reduced model, its flow, predictors and risks.

Modules: ``covariance`` (a spectrum in a seeded basis; the example Σ of every check and figure),
``metrics`` (scale-free distance and cosine of matrices), ``derive`` / ``loss`` / ``flow`` (the reduced
model with ``KQ_h = ω_h W`` and its gradient flow), ``predictors`` / ``exact`` (preconditioned and
debiased preconditioned GD, their exact risks and optimal preconditioner, Bayes ridge under Σ),
``bayes`` (the proportional-limit Bayes ratio under Σ). The full model trained under Σ is reported by
``reduced_dynamics.model.circuits`` and ``figures.precond_trained``. Import from the submodules.

References
----------
docs/theory.md#non-isotropic-covariates
"""
