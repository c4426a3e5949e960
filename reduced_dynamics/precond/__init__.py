"""Non-isotropic covariates x ~ N(0, Σ): the preconditioned reduced model, its flow, predictors and risks.

Modules: ``derive`` / ``loss`` / ``flow`` (the reduced model with ``KQ_h = ω_h W`` and its gradient
flow), ``predictors`` / ``exact`` (preconditioned and debiased preconditioned GD, their exact risks
and optimal preconditioner, Bayes ridge under Σ). Import from the submodules.

References
----------
docs/theory.md#non-isotropic-covariates
"""
