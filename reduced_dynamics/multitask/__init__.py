r"""Multi-task in-context regression: N tasks with feature supports :math:`S_n` (``Setting.tasks``).

* :mod:`~reduced_dynamics.multitask.derive` -- the approximate loss derived with sympy
  from the moment statements, its gradient, the reduction to :math:`\tilde L`;
* :mod:`~reduced_dynamics.multitask.loss` -- the loss and gradient in numpy;
* :mod:`~reduced_dynamics.multitask.flow` -- the gradient flow, head roles and their
  frequencies over random starts;
* :mod:`~reduced_dynamics.multitask.predictors` -- prompts, per-task predictors, the limit
  predictor of each regime, per-task Monte Carlo risks;
* :mod:`~reduced_dynamics.multitask.attention` -- the N-output softmax attention model and
  its Adam trainer.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

from reduced_dynamics._lazy import attach

#: public name -> module defining it, imported on first access (reduced_dynamics._lazy)
_LAZY = {
    "ExtractedCircuits": "reduced_dynamics.multitask.attention",
    "LimitPredictor": "reduced_dynamics.multitask.predictors",
    "MultitaskAttention": "reduced_dynamics.multitask.attention",
    "MultitaskPrompts": "reduced_dynamics.multitask.predictors",
    "MultitaskTrainResult": "reduced_dynamics.multitask.attention",
    "RoleFrequencies": "reduced_dynamics.multitask.flow",
    "TaskRisks": "reduced_dynamics.multitask.predictors",
    "antipodal_pairs": "reduced_dynamics.multitask.flow",
    "classify_heads": "reduced_dynamics.multitask.flow",
    "effective_weights": "reduced_dynamics.multitask.loss",
    "extract_reduced": "reduced_dynamics.multitask.attention",
    "init_mt_attention": "reduced_dynamics.multitask.attention",
    "limit_loss_per_task": "reduced_dynamics.multitask.loss",
    "limit_predictor": "reduced_dynamics.multitask.predictors",
    "mt_attention_loss_grad": "reduced_dynamics.multitask.attention",
    "mt_attention_predict": "reduced_dynamics.multitask.attention",
    "mt_gradient": "reduced_dynamics.multitask.loss",
    "mt_loss": "reduced_dynamics.multitask.loss",
    "mt_loss_per_task": "reduced_dynamics.multitask.loss",
    "per_task_risks": "reduced_dynamics.multitask.predictors",
    "reduced_mt_predict": "reduced_dynamics.multitask.predictors",
    "role_frequencies": "reduced_dynamics.multitask.flow",
    "role_kind": "reduced_dynamics.multitask.flow",
    "sample_mt_prompts": "reduced_dynamics.multitask.predictors",
    "support_dgd_weights": "reduced_dynamics.multitask.predictors",
    "support_mask": "reduced_dynamics.multitask.loss",
    "support_ridge_predict": "reduced_dynamics.multitask.predictors",
    "train_mt_attention": "reduced_dynamics.multitask.attention",
    "weighted_dgd_predict": "reduced_dynamics.multitask.predictors",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = attach(__name__, _LAZY)
