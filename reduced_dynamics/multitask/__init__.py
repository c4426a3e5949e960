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

from reduced_dynamics.multitask.attention import (
    ExtractedCircuits,
    MultitaskAttention,
    MultitaskTrainResult,
    extract_reduced,
    init_mt_attention,
    mt_attention_loss_grad,
    mt_attention_predict,
    train_mt_attention,
)
from reduced_dynamics.multitask.flow import (
    RoleFrequencies,
    antipodal_pairs,
    classify_heads,
    role_frequencies,
    role_kind,
)
from reduced_dynamics.multitask.loss import (
    effective_weights,
    limit_loss_per_task,
    mt_gradient,
    mt_loss,
    mt_loss_per_task,
    support_mask,
)
from reduced_dynamics.multitask.predictors import (
    LimitPredictor,
    MultitaskPrompts,
    TaskRisks,
    limit_predictor,
    per_task_risks,
    reduced_mt_predict,
    sample_mt_prompts,
    support_dgd_weights,
    support_ridge_predict,
    weighted_dgd_predict,
)

__all__ = [
    "ExtractedCircuits",
    "LimitPredictor",
    "MultitaskAttention",
    "MultitaskPrompts",
    "MultitaskTrainResult",
    "RoleFrequencies",
    "TaskRisks",
    "antipodal_pairs",
    "classify_heads",
    "effective_weights",
    "extract_reduced",
    "init_mt_attention",
    "limit_loss_per_task",
    "limit_predictor",
    "mt_attention_loss_grad",
    "mt_attention_predict",
    "mt_gradient",
    "mt_loss",
    "mt_loss_per_task",
    "per_task_risks",
    "reduced_mt_predict",
    "role_frequencies",
    "role_kind",
    "sample_mt_prompts",
    "support_dgd_weights",
    "support_mask",
    "support_ridge_predict",
    "train_mt_attention",
    "weighted_dgd_predict",
]
