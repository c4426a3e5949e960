"""``reduced-dynamics train``: train an attention model from random init and cross-check the reduced theory."""

from __future__ import annotations

import json
import sys

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_range,
    exit_codes_epilog,
    nonempty,
    note,
    prepare_out,
)
from reduced_dynamics.cli._dispatch import SETTING_FLAGS
from reduced_dynamics.cli._setting import (
    add_extension_arguments,
    add_setting_arguments,
    add_tasks_argument,
    setting_from_args,
)
from reduced_dynamics.io import to_jsonable
from reduced_dynamics.model.attention import MODEL_KINDS
from reduced_dynamics.model.circuits import circuits_from_arrays, pattern_metrics, precond_cross_check
from reduced_dynamics.model.training import (
    CHECKPOINT_NAME,
    OPTIMIZERS,
    TrainConfig,
    summarize_run,
    train,
    write_outputs,
)

HELP = "train an attention model (numpy, fresh prompts each step) and extract its (omega, mu) circuits"
#: exit status of a run that failed numerically (the loss became non-finite)
EXIT_DIVERGED = 3
#: largest accepted learning rate (Adam's steps are about lr in size; anything larger is a typo)
LR_MAX = 10.0
#: files of a previous run in --out that a new run (without --resume) would replace
RUN_FILES = (CHECKPOINT_NAME, "final.npz", "final.json")
EPILOG = exit_codes_epilog(numerical=True) + (
    "\n\n--out DIR holds one run (checkpoint.npz, final.npz, final.json; the configuration is in final.json\n"
    "and the checkpoint). A DIR that already holds a run is refused (exit 2) unless --resume continues it\n"
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
    **SETTING_FLAGS,
}


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--heads", type=int, default=2, help="number of heads H (default 2)")
    add_setting_arguments(parser, what="of the training prompts")
    add_tasks_argument(parser)
    add_extension_arguments(parser)
    a("--steps", type=int, default=10_000, help="optimizer steps (default 10000)")
    a("--batch", type=int, default=256, help="prompts per step (default 256)")
    a("--lr", type=float, default=1e-3, help=f"learning rate, in (0, {LR_MAX:g}] (default 1e-3)")
    # choices are validated by TrainConfig so bad values give the package's one-line ValueError
    a("--optimizer", default="adam", help=f"one of {', '.join(OPTIMIZERS)} (default adam)")
    a("--param", default="separate", help=f"one of {', '.join(MODEL_KINDS)} (default separate)")
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


def check_out(out, *, resume: bool, force: bool) -> None:
    """Refuse (``ValueError`` naming ``--resume`` and ``--force``) to start a new run over a folder holding one.

    With ``force``, remove the previous run's files first, so the folder never
    mixes two runs.
    """
    if resume and force:
        raise ValueError("`--resume` continues the run in `--out` and `--force` replaces it: give one of them")
    if out is None:
        if resume:
            raise ValueError("`--resume` needs `--out` (the folder holding checkpoint.npz)")
        return
    path = prepare_out(out)
    present = [name for name in RUN_FILES if (path / name).exists()]
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


def main(args) -> int:
    from reduced_dynamics.models import model_name

    _resolve_eval_prompts(args)
    setting = setting_from_args(args)
    name = model_name(setting)
    if name == "precond_multitask":
        raise ValueError(
            "`train` has no trainer for Σ with several tasks yet (`--sigma/--sigma-eigs` together with `--tasks`); "
            "`run` integrates its reduced flow"
        )
    if name == "multitask":  # the N-output attention model and its trainer
        from reduced_dynamics.cli._multitask import train_multitask

        return train_multitask(args, setting)
    check_positive_int("heads", args.heads)
    if args.param not in MODEL_KINDS:
        raise ValueError(f"`param` must be one of {', '.join(MODEL_KINDS)}, got {args.param!r}")
    config = TrainConfig(
        setting=setting,
        n_heads=args.heads,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        optimizer=args.optimizer,
        parameterisation=args.param,
        seed=args.seed,
    )
    check_range("--lr", args.lr, 0.0, LR_MAX)
    n_eval = check_positive_int("n-eval", args.n_eval)
    if n_eval < 2:
        raise ValueError(f"`n-eval` must be an integer >= 2, got {n_eval}")
    check_out(args.out, resume=args.resume, force=args.force)
    progress = Progress("train", quiet=args.quiet)
    progress.stage(f"training H={args.heads} for {args.steps} steps ({args.optimizer}, lr {args.lr:g})")
    result = train(
        config,
        out=args.out,
        resume=args.resume,
        checkpoint_every=args.checkpoint_every,
        progress=not args.quiet,
    )
    if result.status == 2:  # diverged: no meaningful circuits or risks to summarise
        progress.close()
        msg = result.message.replace("`lr`", "`--lr`")
        sys.stderr.write(f"reduced-dynamics train: failed numerically: {msg} (stopped at step {result.step})\n")
        return EXIT_DIVERGED
    progress.stage(f"risk on {n_eval} fresh prompts")
    if setting.Sigma is not None:
        return _report_sigma(args, result, n_eval, progress)
    summary = summarize_run(result, n_prompts=n_eval, seed=12345)
    heads = _head_circuits(result)
    if args.out is not None:
        write_outputs(args.out, result, summary, extra=heads)
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable({**summary.to_dict(), **heads}), indent=2) + "\n")
    else:
        fmt = lambda a: "[" + ", ".join(f"{x:+.4f}" for x in a) + "]"  # noqa: E731
        p = summary.patterns
        sys.stdout.write(
            f"{result.message} steps={result.step} ({result.steps_per_second:.0f} steps/s)\n"
            f"omega={fmt(summary.omega)} mu={fmt(summary.mu)} eta_eff={summary.eta_eff:.4f}\n"
            f"sum_mu_ratio={p.zero_sum_ratio:.3f} sign_match={p.sign_match_fraction:.2f} "
            f"kq_offdiag_max={p.kq_offdiag_fraction_max:.3f} ov_off_max={p.ov_offresponse_fraction_max:.3f}\n"
            f"risk={summary.risk:.4f}±{summary.risk_stderr:.4f} reduced={summary.risk_reduced:.4f} "
            f"debiased_gd={summary.risk_debiased_gd:.4f}\n"
        )
    return 0  # status 0 (all steps) or 1 (stopped early, resumable); 2 (diverged) returned above


def _head_circuits(result) -> dict:
    """Each head's circuits for ``--json``: ``kq`` (H, d, d), ``ov`` (H, d+1) and the |cosines| with Σ⁻¹ and I."""
    from reduced_dynamics.model.circuits import extract_precond_circuits

    cfg = result.config
    c = extract_precond_circuits(cfg.model(), result.params, cfg.setting)
    return {
        "kq": c.kq,
        "ov": c.ov,
        "kq_cosine_sigma_inv": c.cosine_sigma_inv,
        "kq_cosine_identity": c.cosine_identity,
    }


def _report_sigma(args, result, n_eval: int, progress) -> int:
    """Summary of a run under ``x ~ N(0, Σ)``: circuits vs Σ⁻¹, extracted (ω, μ, W), paired risks."""
    cfg = result.config
    model = cfg.model()
    cc = precond_cross_check(model, result.params, cfg.setting, n_prompts=n_eval, seed=12345)
    c = cc.circuits
    KQ, ov = model.circuits(result.params)
    patterns = pattern_metrics(circuits_from_arrays(KQ, ov))
    tail = result.losses[-min(1000, result.losses.size) :]
    summary = {
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
    if args.out is not None:
        write_outputs(args.out, result, to_jsonable(summary))
    progress.close()
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(summary), indent=2) + "\n")
    else:
        fmt = lambda a: "[" + ", ".join(f"{x:+.4f}" for x in a) + "]"  # noqa: E731
        r, df = cc.risks, cc.diffs
        sys.stdout.write(
            f"{result.message} steps={result.step} ({result.steps_per_second:.0f} steps/s)\n"
            f"kq_cosine_sigma_inv={fmt(c.cosine_sigma_inv)} kq_cosine_identity={fmt(c.cosine_identity)} "
            f"W_distance_sigma_inv={c.W_distance_sigma_inv:.4f}\n"
            f"omega={fmt(c.omega)} mu={fmt(c.mu)} eta_eff={c.eta_eff:.4f} rank1_residual={c.rank1_residual:.3f}\n"
            f"risk={r['model'].risk:.4f}±{r['model'].stderr:.4f} "
            f"model-dpgd_own={df['dpgd_own'].risk:+.4f}±{df['dpgd_own'].stderr:.4f} "
            f"model-dpgd_optimal={df['dpgd_optimal'].risk:+.4f}±{df['dpgd_optimal'].stderr:.4f}\n"
        )
    return 0
