r"""What the ``train`` command does for a reduced model: train the full attention model it describes, then compare.

A reduced model names the full model it reduces by its ``trainer`` (:data:`TRAINERS`): ``"attention"``,
the single-output H-head attention of :mod:`reduced_dynamics.model.training` (the isotropic, activation and
Σ models), or ``"multitask"``, the N-output attention of :mod:`reduced_dynamics.multitask.attention`. The
trainer trains it from a :class:`TrainSpec` and hands the result to the model's ``trained_summary``,
which extracts the circuits and compares the trained model with the model's own predictor at the
extracted state and with its references on fresh prompts. One :class:`TrainOutcome` comes back for every
model.

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from reduced_dynamics._validation import check_nonnegative_int, check_positive_float, check_positive_int

__all__ = ["TrainSpec", "TrainOutcome", "TRAINERS", "Trainer", "AttentionTrainer", "MultitaskTrainer"]

#: Largest number of heads of a trained model.
HEADS_MAX = 64
#: Largest number of optimiser steps, batch and evaluation prompts of one run.
STEPS_MAX = 10**7
BATCH_MAX = 10**5
EVAL_PROMPTS_MAX = 10**7


@dataclass(frozen=True)
class TrainSpec:
    """One training run of the full model of a reduced model (validated when built).

    Parameters
    ----------
    steps : int, in [1, 1e7]
    batch : int, in [1, 1e5]
        Prompts per step.
    lr : float, > 0
    seed : int, >= 0
        Seeds the initialisation and the training prompts.
    optimizer : str
        One of the trainer's :meth:`Trainer.optimizers`.
    param : str
        The parameterisation, one of the trainer's :meth:`Trainer.params`.
    eval_prompts : int, in [2, 1e7]
        Fresh prompts of the risk estimates after training.
    checkpoint_every : int in [1, 1e7], optional
        Steps between checkpoints (default ``max(1000, steps // 20)``).
    """

    steps: int
    batch: int = 256
    lr: float = 1e-3
    seed: int = 0
    optimizer: str = "adam"
    param: str = "separate"
    eval_prompts: int = 20_000
    checkpoint_every: int | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "steps", check_positive_int("steps", self.steps, hi=STEPS_MAX))
        set_(self, "batch", check_positive_int("batch", self.batch, hi=BATCH_MAX))
        set_(self, "lr", check_positive_float("lr", self.lr))
        set_(self, "seed", check_nonnegative_int("seed", self.seed))
        n = check_positive_int("eval_prompts", self.eval_prompts, hi=EVAL_PROMPTS_MAX)
        if n < 2:
            raise ValueError(
                f"`eval_prompts` must be an integer in [2, {EVAL_PROMPTS_MAX:.0e}] (a standard error), got {n}"
            )
        set_(self, "eval_prompts", n)
        every = self.checkpoint_every
        every = (
            max(1000, self.steps // 20)
            if every is None
            else check_positive_int("checkpoint_every", every, hi=STEPS_MAX)
        )
        set_(self, "checkpoint_every", every)


@dataclass(frozen=True)
class TrainOutcome:
    """What one run of :meth:`Trainer.train` gives: its end and the summary the command prints.

    Attributes
    ----------
    diverged : bool
        The loss became non-finite: no circuits or risks to summarise (the command exits 3).
    message : str
        Why the run ended (a diverged run's says what to try).
    step : int
        Steps done.
    summary : dict
        JSON-ready summary (empty for a diverged run): the trained circuits, the extracted reduced state,
        the risks of the trained model, of the reduced model at that state and of the references.
    files : dict
        What was written (name -> path).
    """

    diverged: bool
    message: str
    step: int
    summary: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)


class Trainer:
    """Trains the full model of a family of reduced models (subclasses: :class:`AttentionTrainer`, :class:`MultitaskTrainer`)."""

    #: the files of a run in its output folder; the first is the resumable checkpoint
    files: tuple[str, ...] = ()

    def optimizers(self) -> tuple[str, ...]:
        """The optimisers it offers."""
        raise NotImplementedError

    def params(self) -> tuple[str, ...]:
        """The parameterisations it offers."""
        raise NotImplementedError

    def train(self, model, spec: TrainSpec, *, out=None, resume=False, progress=None) -> TrainOutcome:
        """Train the full model of ``model`` (its setting, ``model.n_heads`` heads) as ``spec`` says.

        Parameters
        ----------
        model : ReducedModel
        spec : TrainSpec
        out : path-like, optional
            Folder of the run's :attr:`files` (checkpoints while training, the summary at the end).
        resume : bool
            Continue the checkpoint in ``out``.
        progress : reduced_dynamics.cli._common.Progress, optional
            Progress lines (``stage``, ``tick``, ``quiet``).
        """
        raise NotImplementedError


def _stage(progress, text):
    if progress is not None:
        progress.stage(text)


class AttentionTrainer(Trainer):
    """The single-output H-head attention (:func:`reduced_dynamics.model.training.train`)."""

    files = ("checkpoint.npz", "final.npz", "final.json")

    def optimizers(self):
        from reduced_dynamics.model.training import OPTIMIZERS

        return tuple(OPTIMIZERS)

    def params(self):
        from reduced_dynamics.model.attention import MODEL_KINDS

        return tuple(MODEL_KINDS)

    def train(self, model, spec, *, out=None, resume=False, progress=None):
        from reduced_dynamics.model.training import TrainConfig, train, write_outputs

        config = TrainConfig(
            setting=model.setting,
            n_heads=model.n_heads,
            steps=spec.steps,
            batch=spec.batch,
            lr=spec.lr,
            optimizer=spec.optimizer,
            parameterisation=spec.param,
            seed=spec.seed,
        )
        _stage(progress, f"training H={model.n_heads} for {spec.steps} steps ({spec.optimizer}, lr {spec.lr:g})")
        quiet = True if progress is None else progress.quiet
        result = train(config, out=out, resume=resume, checkpoint_every=spec.checkpoint_every, progress=not quiet)
        if result.status == 2:  # diverged: no meaningful circuits or risks to summarise
            return TrainOutcome(diverged=True, message=result.message, step=result.step)
        _stage(progress, f"risk on {spec.eval_prompts} fresh prompts")
        summary = model.trained_summary(result, spec)
        files = {}
        if out is not None:
            write_outputs(out, result, summary)
            files = {"run": str(Path(out))}
        return TrainOutcome(diverged=False, message=result.message, step=result.step, summary=summary, files=files)


class MultitaskTrainer(Trainer):
    """The N-output attention of the multi-task model (:func:`reduced_dynamics.multitask.attention.train_mt_attention`).

    ``param`` ``separate`` trains separate ``Q, K, V, O`` per head (PyTorch-default init), ``merged`` the
    circuits ``KQ, OV`` directly; Adam only. The checkpoint ``checkpoint_multitask.npz`` is written every
    ``checkpoint_every`` steps, the summary ``final_multitask.json`` at the end.
    """

    files = ("checkpoint_multitask.npz", "final_multitask.json")

    def optimizers(self):
        return ("adam",)

    def params(self):
        return ("separate", "merged")

    def train(self, model, spec, *, out=None, resume=False, progress=None):
        from reduced_dynamics.io import atomic_write_json
        from reduced_dynamics.multitask.attention import train_mt_attention

        t0 = time.perf_counter()
        setting = model.setting
        ckpt = None if out is None else Path(out) / self.files[0]
        _stage(progress, f"training H={model.n_heads} ({spec.param}) for {spec.steps} steps on {setting.n_tasks} tasks")

        def tick(t, loss):
            if progress is not None:
                progress.tick(f"step {t}/{spec.steps}, batch loss {loss:.4f}")

        res = train_mt_attention(
            model.n_heads,
            setting,
            steps=spec.steps,
            seed=spec.seed,
            batch=spec.batch,
            lr=spec.lr,
            parameterisation="separate" if spec.param == "separate" else "circuit",
            checkpoint=ckpt,
            checkpoint_every=spec.checkpoint_every,
            callback=tick,
        )
        if not res.success:
            return TrainOutcome(diverged=True, message=res.message, step=res.steps)
        _stage(progress, f"per-task risks on {spec.eval_prompts} fresh prompts")
        summary = model.trained_summary(res, spec)
        summary["seconds"] = time.perf_counter() - t0
        files = {}
        if out is not None:
            path = atomic_write_json(Path(out) / self.files[1], summary)
            summary["file"] = str(path)
            files = {"summary": str(path)}
        return TrainOutcome(diverged=False, message=res.message, step=res.steps, summary=summary, files=files)


#: trainer name (a model's ``trainer``) -> the trainer
TRAINERS: dict[str, Trainer] = {"attention": AttentionTrainer(), "multitask": MultitaskTrainer()}
