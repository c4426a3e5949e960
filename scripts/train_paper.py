"""Paper-scale training run (docs/theory.md#full-model: Adam, lr 1e-3, batch 256, 5e5 steps) with checkpoint/resume.

Usage (from the repository root; re-running the same command resumes from the checkpoint)::

    nohup .venv/bin/python scripts/train_paper.py --heads 2 --steps 500000 --out results/paper_H2 \
        > results/paper_run.log 2>&1 &

Writes ``OUT/checkpoint.npz`` every ``--checkpoint-every`` steps, then ``OUT/final.npz`` and
``OUT/final.json`` (extracted (omega, mu), patterns, manifold gap, risks, length generalisation).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from reduced_dynamics.model.training import (
    CHECKPOINT_NAME,
    TrainConfig,
    length_generalisation,
    summarize_run,
    train,
    write_outputs,
)
from reduced_dynamics.setting import Setting

EVAL_SEED = 12345  # evaluation prompts (independent of the training stream)
LENGTH_SEED = 777  # length-generalisation prompts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--d", type=int, default=5)
    p.add_argument("--L", type=int, default=40)
    p.add_argument("--sigma2", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=500_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--param", default="separate", help="parameterisation: separate, merged, linear or reduced")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/paper_H2")
    p.add_argument("--checkpoint-every", type=int, default=10_000)
    p.add_argument("--n-snapshots", type=int, default=60)
    p.add_argument("--n-eval", type=int, default=100_000)
    args = p.parse_args(argv)
    try:
        cfg = TrainConfig(
            setting=Setting(d=args.d, L=args.L, sigma2=args.sigma2),
            n_heads=args.heads,
            steps=args.steps,
            batch=args.batch,
            lr=args.lr,
            parameterisation=args.param,
            seed=args.seed,
            n_snapshots=args.n_snapshots,
        )
    except ValueError as exc:
        sys.stderr.write(f"train_paper: error: {exc}\n")
        return 2
    resume = (Path(args.out) / CHECKPOINT_NAME).exists()
    print(f"config {cfg}\nresume={resume}", flush=True)
    try:
        res = train(cfg, out=args.out, resume=resume, checkpoint_every=args.checkpoint_every, progress=True)
    except ValueError as exc:
        sys.stderr.write(f"train_paper: error: {exc}\n")
        return 2
    print(f"{res.message} step={res.step} {res.steps_per_second:.0f} steps/s", flush=True)
    summary = summarize_run(res, n_prompts=args.n_eval, seed=EVAL_SEED)
    lengths = length_generalisation(
        cfg.model(), res.params, cfg.setting, Ls=list(range(10, 101, 10)), n_prompts=20_000, seed=LENGTH_SEED
    )
    write_outputs(args.out, res, summary, extra={"length_generalisation": lengths.to_dict()})
    print("omega", np.round(summary.omega, 4), "mu", np.round(summary.mu, 4), flush=True)
    print("manifold", summary.manifold, flush=True)
    print(
        f"risk {summary.risk:.5f} ± {summary.risk_stderr:.5f}  reduced {summary.risk_reduced:.5f}  "
        f"debiased GD {summary.risk_debiased_gd:.5f}",
        flush=True,
    )
    return 0 if res.success else 1


if __name__ == "__main__":
    sys.exit(main())
