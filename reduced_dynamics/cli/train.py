"""``reduced-dynamics train``: train an attention model from random init and cross-check the reduced theory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.io import to_jsonable
from reduced_dynamics.model.attention import MODEL_KINDS
from reduced_dynamics.model.training import OPTIMIZERS, TrainConfig, summarize_run, train, write_outputs

HELP = "train an attention model (numpy, fresh prompts each step) and extract its (omega, mu) circuits"


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--heads", type=int, default=2, help="number of heads H (default 2)")
    add_setting_arguments(parser, what="of the training prompts")
    a("--steps", type=int, default=10_000, help="optimizer steps (default 10000)")
    a("--batch", type=int, default=256, help="prompts per step (default 256)")
    a("--lr", type=float, default=1e-3, help="learning rate (default 1e-3)")
    # choices are validated by TrainConfig so bad values give the package's one-line ValueError
    a("--optimizer", default="adam", help=f"one of {', '.join(OPTIMIZERS)} (default adam)")
    a("--param", default="separate", help=f"one of {', '.join(MODEL_KINDS)} (default separate)")
    a("--seed", type=int, default=0, help="seed of init and prompts (default 0)")
    a("--out", default=None, help="folder for checkpoint.npz, final.npz, final.json (written atomically)")
    a("--resume", action="store_true", help="continue from OUT/checkpoint.npz")
    a("--checkpoint-every", type=int, default=None, help="steps between checkpoints (default max(1000, steps/20))")
    a("--n-eval", type=int, default=20_000, help="fresh prompts for the risk estimate (default 20000)")
    a("--progress", action="store_true", help="report progress on stderr")
    a("--json", action="store_true", help="print the summary as JSON on stdout")


def main(args) -> int:
    setting = setting_from_args(args)
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
    n_eval = check_positive_int("n-eval", args.n_eval)
    if n_eval < 2:
        raise ValueError(f"`n-eval` must be an integer >= 2, got {n_eval}")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"`out` must be a folder, got the existing file {args.out!r}")
    result = train(
        config,
        out=args.out,
        resume=args.resume,
        checkpoint_every=args.checkpoint_every,
        progress=args.progress,
    )
    if result.status == 2:  # diverged: no meaningful circuits or risks to summarise
        sys.stderr.write(f"reduced-dynamics train: {result.message} (stopped at step {result.step})\n")
        return 1
    summary = summarize_run(result, n_prompts=n_eval, seed=12345)
    if args.out is not None:
        write_outputs(args.out, result, summary)
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(summary.to_dict()), indent=2) + "\n")
    else:
        fmt = lambda a: "[" + ", ".join(f"{x:+.4f}" for x in a) + "]"  # noqa: E731
        p = summary.patterns
        sys.stdout.write(
            f"{result.message} steps={result.step} ({result.steps_per_second:.0f} steps/s)\n"
            f"omega={fmt(summary.omega)} mu={fmt(summary.mu)} eta_eff={summary.eta_eff:.4f}\n"
            f"zero_sum={p.zero_sum_ratio:.3f} sign_match={p.sign_match_fraction:.2f} "
            f"kq_offdiag_max={p.kq_offdiag_fraction_max:.3f} ov_off_max={p.ov_offresponse_fraction_max:.3f}\n"
            f"risk={summary.risk:.4f}±{summary.risk_stderr:.4f} reduced={summary.risk_reduced:.4f} "
            f"debiased_gd={summary.risk_debiased_gd:.4f}\n"
        )
    return 0 if result.status in (0, 1) else 1
