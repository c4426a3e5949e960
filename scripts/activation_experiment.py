"""Paper-scale training of H = 2 attention with each activation f (docs/theory.md#other-activations).

For each activation (``exp``, ``affine``, ``square``, ``tanh``; the constant ``C`` of ``affine`` and
``square`` chosen by ``--affine-c`` / ``--square-c``) it trains the separate Q, K, V, O model at the
paper's protocol (Adam, lr 1e-3, batch 256, fresh prompts, d = 5, L = 40, σ² = 0.1) and reports the
circuit patterns (sign matching, zero-sum OV, homogeneous KQ), the effective step measured by
regressing the model's predictions on the debiased-GD direction against the claim ``2 C_f γ μ₊``,
and the risk against debiased GD (paired on common prompts, with standard errors).

Usage (from the repository root; re-running the same command resumes every run from its checkpoint)::

    nohup .venv/bin/python scripts/activation_experiment.py --steps 500000 --out results/activations \\
        > /work/coord/activations_D.log 2>&1 &
    .venv/bin/python scripts/activation_experiment.py --quick          # 2000 steps each, seconds

Phases: ``--phase train`` (only train / resume), ``--phase report`` (only evaluate the finished
checkpoints), ``--phase all`` (default). The runs are trained one after the other (one process).
Writes ``OUT/<activation>/checkpoint.npz`` (every ``--checkpoint-every`` steps) and
``OUT/report.json`` (with ``--figure-data`` also ``figures/activations_trained.json``, read by the
figure ``activations``).

Length: the paper's 5·10⁵ steps (measured first: 0.49-0.61 ms CPU per step at H = 2, d = 5, L = 40,
batch 256; 1.2-1.6 ms wall on the shared machine, so about 10 min per activation).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from reduced_dynamics.io import atomic_write_json
from reduced_dynamics.model.training import CHECKPOINT_NAME, TrainConfig, load_checkpoint, train
from reduced_dynamics.setting import Setting

#: where the figure `activations` reads the trained numbers (--figure-data)
FIGURE_DATA = Path(__file__).resolve().parents[1] / "figures" / "activations_trained.json"
EVAL_SEED = 12345  # evaluation prompts (independent of the training streams)
ACTS = ("exp", "affine", "square", "tanh")


def configs(args) -> dict:
    out = {}
    for name in args.activations:
        c = {"affine": args.affine_c, "square": args.square_c}.get(name, 1.0)
        setting = Setting(d=args.d, L=args.L, sigma2=args.sigma2, activation=name, activation_c=c)
        out[name] = TrainConfig(
            setting=setting,
            seed=args.seed,
            n_heads=args.heads,
            steps=args.steps,
            batch=args.batch,
            lr=args.lr,
            parameterisation="separate",
            n_snapshots=60,
        )
    return out


def train_all(args, cfgs) -> None:
    for name, cfg in cfgs.items():
        out = Path(args.out) / name
        resume = (out / CHECKPOINT_NAME).exists()
        if resume and load_checkpoint(out / CHECKPOINT_NAME).step >= cfg.steps:
            print(f"[{name}] already trained", flush=True)
            continue
        print(f"[{name}] {cfg.setting} resume={resume} start {time.strftime('%H:%M:%S')}", flush=True)
        t0, c0 = time.perf_counter(), time.process_time()
        res = train(cfg, out=out, resume=resume, checkpoint_every=args.checkpoint_every, progress=not args.quick)
        print(
            f"[{name}] {res.message} step={res.step} wall {time.perf_counter() - t0:.0f} s "
            f"CPU {time.process_time() - c0:.0f} s ({res.steps_per_second:.0f} steps/s)",
            flush=True,
        )


def report_all(args, cfgs) -> dict:
    from reduced_dynamics.activation_dynamics.flow import trained_activation_report

    rows = {}
    for name in cfgs:
        ck_path = Path(args.out) / name / CHECKPOINT_NAME
        if not ck_path.exists():
            print(f"[{name}] no checkpoint, skipped", flush=True)
            continue
        rep = trained_activation_report(ck_path, n_prompts=args.n_eval, seed=EVAL_SEED).to_dict()
        rows[name] = rep
        print(json.dumps({name: rep}, indent=1, default=float), flush=True)
    atomic_write_json(Path(args.out) / "report.json", rows)
    if args.figure_data:
        atomic_write_json(FIGURE_DATA, rows)
        print(f"wrote {FIGURE_DATA}", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--d", type=int, default=5)
    p.add_argument("--L", type=int, default=40)
    p.add_argument("--sigma2", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=500_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--affine-c", type=float, default=0.1)
    p.add_argument("--square-c", type=float, default=1.0)
    p.add_argument("--activations", default=",".join(ACTS))
    p.add_argument("--out", default="results/activations")
    p.add_argument("--checkpoint-every", type=int, default=10_000)
    p.add_argument("--n-eval", type=int, default=100_000)
    p.add_argument("--phase", choices=("train", "report", "all"), default="all")
    p.add_argument("--figure-data", action="store_true", help=f"also write the report to {FIGURE_DATA.name} (figures/)")
    p.add_argument(
        "--quick", action="store_true", help="2000 steps, 5000 evaluation prompts, under results/activations_quick"
    )
    args = p.parse_args(argv)
    args.activations = [a.strip() for a in args.activations.split(",") if a.strip()]
    if args.quick:
        args.steps, args.n_eval, args.checkpoint_every = 2000, 5000, 1000
        if args.out == "results/activations":
            args.out = "results/activations_quick"
    try:
        cfgs = configs(args)
    except ValueError as exc:
        sys.stderr.write(f"activation_experiment: error: {exc}\n")
        return 2
    if args.phase in ("train", "all"):
        train_all(args, cfgs)
    if args.phase in ("report", "all"):
        report_all(args, cfgs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
