"""``reduced-dynamics train``: train the full attention model of a reduced model and cross-check the reduced theory.

One path for every model: the flags build the :class:`~reduced_dynamics.Setting`,
:func:`reduced_dynamics.reduced_model` picks the reduced model with ``--heads`` heads,
:mod:`reduced_dynamics.cli._dispatch` checks that ``train`` serves it, the common flags are checked with the
same bounds for every model, and the model's trainer (:mod:`reduced_dynamics.models._train`: the
single-output attention for the isotropic, activation and Σ models, the N-output attention for
``--tasks``) trains it and hands the run to the model, which extracts the circuits and compares the
trained model with the reduced model and its references. A run whose loss became non-finite exits 3
with one line.
"""

from __future__ import annotations

import json
import sys

from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_range,
    exit_codes_epilog,
    nonempty,
    note,
    prepare_out,
    rename_params,
)
from reduced_dynamics.cli._dispatch import SETTING_FLAGS, _describe, check_model_flags, model_from_args
from reduced_dynamics.cli._setting import (
    add_extension_arguments,
    add_setting_arguments,
    add_tasks_argument,
    setting_from_args,
)

HELP = "train an attention model (numpy, fresh prompts each step) and extract its (omega, mu) circuits"
#: exit status of a run that failed numerically (the loss became non-finite)
EXIT_DIVERGED = 3
#: largest accepted learning rate (Adam's steps are about lr in size; anything larger is a typo)
LR_MAX = 10.0
EPILOG = exit_codes_epilog(numerical=True) + (
    "\n\n--out DIR holds one run (checkpoint.npz, final.npz, final.json; with --tasks checkpoint_multitask.npz and\n"
    "final_multitask.json; the configuration is in the summary and the checkpoint). A DIR that already holds a run is refused (exit 2) unless --resume continues it\n"
    "or --force replaces it. Printed sum_mu_ratio = |Σμ|/Σ|μ| of the OV values (0: zero-sum holds, 1: worst);\n"
    "in --json it is patterns.zero_sum_ratio.\n\n"
    "--json also reports each head's circuits: kq (H x d x d, the covariate block of KQ), ov (H x (d+1)),\n"
    "kq_cosine_sigma_inv and kq_cosine_identity (per head, |cosine| of the block with Σ⁻¹ and with I).\n"
    "With --sigma/--sigma-eigs the risks compare the model with debiased preconditioned GD (its own\n"
    "P_eff = Σ_h μ_h KQ-block_h, Σ⁻¹, the optimal P*, and P = I) on common prompts\n"
    "(docs/theory.md#non-isotropic-covariates)."
)
#: library parameter names -> the flags of this command (for the one error line)
PARAM_FLAGS = {
    "n_heads": "--heads",
    "parameterisation": "--param",
    "n_prompts": "--eval-prompts",
    "n-eval": "--eval-prompts",
    "checkpoint_every": "--checkpoint-every",
    "checkpoint": "--resume",
    "lr": "--lr",
    **SETTING_FLAGS,
}


def add_arguments(parser) -> None:
    from reduced_dynamics.models._train import BATCH_MAX, HEADS_MAX, STEPS_MAX, TRAINERS

    single, multi = TRAINERS["attention"], TRAINERS["multitask"]
    a = parser.add_argument
    a("--heads", type=int, default=2, help=f"number of heads H, in [1, {HEADS_MAX}] (default 2)")
    add_setting_arguments(parser, what="of the training prompts")
    add_tasks_argument(parser)
    add_extension_arguments(parser)
    a("--steps", type=int, default=10_000, help=f"optimizer steps, in [1, {STEPS_MAX:.0e}] (default 10000)")
    a("--batch", type=int, default=256, help=f"prompts per step, in [1, {BATCH_MAX:.0e}] (default 256)")
    a("--lr", type=float, default=1e-3, help=f"learning rate, in (0, {LR_MAX:g}] (default 1e-3)")
    # choices are validated by TrainConfig so bad values give the package's one-line ValueError
    a(
        "--optimizer",
        default="adam",
        help=f"one of {', '.join(single.optimizers())} (default adam; with --tasks: {', '.join(multi.optimizers())})",
    )
    a(
        "--param",
        default="separate",
        help=f"one of {', '.join(single.params())} (default separate; with --tasks: {', '.join(multi.params())})",
    )
    a("--seed", type=int, default=0, help="seed of init and prompts (default 0)")
    a(
        "--out",
        type=nonempty,
        default=None,
        help="folder for checkpoint.npz, final.npz, final.json (written atomically; one run per folder)",
    )
    a("--resume", action="store_true", help="continue from OUT/checkpoint.npz")
    a("--force", action="store_true", help="replace the run already in OUT (its checkpoint and final files)")
    a("--checkpoint-every", type=int, default=None, help="steps between checkpoints (default max(1000, steps/20))")
    a("--eval-prompts", type=int, default=None, help="fresh prompts for the risk estimate (default 20000)")
    a("--n-eval", type=int, default=None, help="old spelling of --eval-prompts (kept for 0.2; prints a note)")
    a("--progress", action="store_true", help="report progress on stderr (the default now; kept for old scripts)")
    a("--json", action="store_true", help="print the summary as JSON on stdout")
    add_quiet(parser)


def check_out(out, *, resume: bool, force: bool, files=("checkpoint.npz", "final.npz", "final.json")) -> None:
    """Refuse (``ValueError`` naming ``--resume`` and ``--force``) to start a new run over a folder holding one.

    ``files`` are the run's files in the folder, the resumable checkpoint first. With ``force``, remove
    the previous run's files first, so the folder never mixes two runs; ``resume`` needs the checkpoint.
    """
    if resume and force:
        raise ValueError("`--resume` continues the run in `--out` and `--force` replaces it: give one of them")
    if out is None:
        if resume:
            raise ValueError(f"`--resume` needs `--out` (the folder holding {files[0]})")
        return
    path = prepare_out(out)
    if resume and not (path / files[0]).exists():
        raise ValueError(f"`--resume` needs {str(path / files[0])!r}, which does not exist")
    present = [name for name in files if (path / name).exists()]
    if not present or resume:
        return
    if not force:
        raise ValueError(
            f"`--out` {out!r} already holds a run ({', '.join(present)}): pass `--resume` to continue it "
            "or `--force` to replace it"
        )
    for name in present:
        (path / name).unlink()


def _resolve_eval_prompts(args) -> None:
    """``--eval-prompts`` (or its old spelling ``--n-eval``, with a one-line note) into ``args.n_eval``."""
    if args.n_eval is not None:
        if args.eval_prompts is not None:
            raise ValueError("`--n-eval` is the old spelling of `--eval-prompts`: give one of them")
        if not getattr(args, "quiet", False):
            note("`--n-eval` is now `--eval-prompts` (the old spelling works in 0.2)")
        # errors name the spelling the user typed
        args._flags = {
            **getattr(args, "_flags", {}),
            "n_prompts": "--n-eval",
            "n-eval": "--n-eval",
            "eval-prompts": "--n-eval",
            "eval_prompts": "--n-eval",
        }
    else:
        args.n_eval = 20_000 if args.eval_prompts is None else args.eval_prompts


def _check_choice(flag: str, value: str, choices, model) -> str:
    if value not in choices:
        listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
        raise ValueError(f"`{flag}` must be {listed} with {_describe(model)} (the {model.name} model), got {value!r}")
    return value


def main(args) -> int:
    from reduced_dynamics.models._train import HEADS_MAX, TRAINERS, TrainSpec

    _resolve_eval_prompts(args)
    setting = setting_from_args(args)
    if not 1 <= args.heads <= HEADS_MAX:
        raise ValueError(f"`--heads` must be an integer in [1, {HEADS_MAX}], got {args.heads}")
    model = model_from_args(args, setting)
    check_model_flags(args, model, "train")
    trainer = TRAINERS[model.trainer]
    check_range("--lr", args.lr, 0.0, LR_MAX)
    spec = TrainSpec(
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        optimizer=_check_choice("--optimizer", args.optimizer, trainer.optimizers(), model),
        param=_check_choice("--param", args.param, trainer.params(), model),
        eval_prompts=args.n_eval,
        checkpoint_every=args.checkpoint_every,
    )
    check_out(args.out, resume=args.resume, force=args.force, files=trainer.files)
    progress = Progress("train", quiet=args.quiet)
    try:
        outcome = model.train(spec, out=args.out, resume=args.resume, progress=progress)
    finally:
        progress.close()
    if outcome.diverged:  # no meaningful circuits or risks to summarise
        msg = rename_params(outcome.message, args._flags)
        sys.stderr.write(f"reduced-dynamics train: failed numerically: {msg} (stopped at step {outcome.step})\n")
        return EXIT_DIVERGED
    if args.json:
        sys.stdout.write(json.dumps(outcome.summary, indent=2) + "\n")
    else:
        sys.stdout.write(text_summary(outcome.summary) + "\n")
    return 0  # status 0 (all steps) or 1 (stopped early, resumable); a diverged run returned above


def _fmt(a, spec="+.4f") -> str:
    return "[" + ", ".join(f"{x:{spec}}" for x in a) + "]"


def text_summary(s: dict) -> str:
    """The text report of a trained run, from its summary (the keys say which model it is)."""
    if "roles" in s:  # the N-output attention (--tasks)
        lines = [f"train --tasks {s['tasks']}  H={len(s['roles'])}  ({s['seconds']:.2f} s)"]
        for h, (w, m, r) in enumerate(zip(s["omega"], s["mu"], s["roles"]), start=1):
            lines.append(f"  head {h}: omega={_fmt(w)}  mu={_fmt(m, '+.3f')}  {r}")
        for name, est in s["risk"].items():
            lines.append(
                f"  {name:>14}: " + "  ".join(f"{r:.5f} ± {e:.5f}" for r, e in zip(est["risk"], est["stderr"]))
            )
        return "\n".join(lines)
    head = f"{s['message']} steps={s['steps']} ({s['steps_per_second']:.0f} steps/s)"
    if "P_eff" in s:  # under Σ
        r, df = s["risks"], s["diffs"]
        return (
            f"{head}\n"
            f"kq_cosine_sigma_inv={_fmt(s['kq_cosine_sigma_inv'])} kq_cosine_identity={_fmt(s['kq_cosine_identity'])} "
            f"W_distance_sigma_inv={s['W_distance_sigma_inv']:.4f}\n"
            f"omega={_fmt(s['omega'])} mu={_fmt(s['mu'])} eta_eff={s['eta_eff']:.4f} "
            f"rank1_residual={s['rank1_residual']:.3f}\n"
            f"risk={r['model']['risk']:.4f}±{r['model']['stderr']:.4f} "
            f"model-dpgd_own={df['model-dpgd_own']['risk']:+.4f}±{df['model-dpgd_own']['stderr']:.4f} "
            f"model-dpgd_optimal={df['model-dpgd_optimal']['risk']:+.4f}±{df['model-dpgd_optimal']['stderr']:.4f}"
        )
    p = s["patterns"]
    return (
        f"{head}\n"
        f"omega={_fmt(s['omega'])} mu={_fmt(s['mu'])} eta_eff={s['eta_eff']:.4f}\n"
        f"sum_mu_ratio={p['zero_sum_ratio']:.3f} sign_match={p['sign_match_fraction']:.2f} "
        f"kq_offdiag_max={p['kq_offdiag_fraction_max']:.3f} ov_off_max={p['ov_offresponse_fraction_max']:.3f}\n"
        f"risk={s['risk']:.4f}±{s['risk_stderr']:.4f} reduced={s['risk_reduced']:.4f} "
        f"debiased_gd={s['risk_debiased_gd']:.4f}"
    )
