"""``run`` and ``train`` with ``--tasks``: the multi-task reduced flow and the N-output attention model.

``run`` / ``train`` dispatch here when their setting has tasks (``setting.tasks is not None``):
``train_multitask(args, setting)`` returns the exit code (``run --tasks`` goes through the one run path).
Both print (``--json``) or write (``--out``) ``omega`` (H × d per-feature KQ weights), ``mu``
(H × N per-task OV weights) and ``roles`` (per head: ``T<n><sign>`` dedicated, mixed signs
superposed, one sign shared, or ``dummy``; docs/theory.md#extensions).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._common import Progress, prepare_out
from reduced_dynamics.io import atomic_write_json, to_jsonable
from reduced_dynamics.multitask.attention import mt_attention_predict, train_mt_attention
from reduced_dynamics.multitask.flow import antipodal_pairs
from reduced_dynamics.multitask.predictors import (
    limit_predictor,
    per_task_risks,
    reduced_mt_predict,
    support_ridge_predict,
    weighted_dgd_predict,
)

__all__ = ["train_multitask"]


def _emit(args, out, name) -> int:
    if getattr(args, "out", None) is not None:
        folder = prepare_out(args.out)
        out["file"] = str(atomic_write_json(Path(folder) / name, out))
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
    else:
        print(_text(out))
    return 0


def _text(out) -> str:
    lines = [f"{out['command']} --tasks {out['tasks']}  H={len(out['roles'])}  ({out['seconds']:.2f} s)"]
    for h, (w, m, r) in enumerate(zip(out["omega"], out["mu"], out["roles"]), start=1):
        lines.append(
            f"  head {h}: omega=[{', '.join(f'{x:+.4f}' for x in w)}]  mu=[{', '.join(f'{x:+.3f}' for x in m)}]  {r}"
        )
    if "loss_per_task" in out:
        lines.append(
            f"  L~ per task {[round(float(x), 6) for x in out['loss_per_task']]}  limit {out['limit']['regime']}"
        )
    if "risk" in out:
        for name, est in out["risk"].items():
            lines.append(
                f"  {name:>14}: " + "  ".join(f"{r:.5f} ± {s:.5f}" for r, s in zip(est["risk"], est["stderr"]))
            )
    return "\n".join(lines)


def _tasks_text(setting) -> str:
    return ",".join(f"{t[0] + 1}-{t[-1] + 1}" if len(t) > 1 else f"{t[0] + 1}" for t in setting.tasks)


def train_multitask(args, setting) -> int:
    """``train --tasks``: train the N-output attention model with Adam.

    Uses ``--heads --steps --batch --lr --seed --eval-prompts --param --out --resume --force``.
    ``--param separate`` (default) trains separate ``Q, K, V, O`` per head (PyTorch-default init),
    ``--param merged`` the circuits ``KQ, OV`` directly; ``--optimizer`` must be adam. With ``--out`` a
    resumable checkpoint ``OUT/checkpoint_multitask.npz`` is written every ``--checkpoint-every`` steps;
    ``--resume`` continues it. Reports per-task risks with standard errors on ``--eval-prompts`` fresh prompts,
    for the trained model, the reduced model at its extracted (ω, μ), debiased GD on each support and
    Bayes ridge on each support (common prompts).
    """
    t0 = time.perf_counter()
    if getattr(args, "optimizer", "adam") != "adam":
        raise ValueError("`--optimizer` must be adam with `--tasks`")
    kind = getattr(args, "param", "separate")
    if kind not in ("separate", "merged"):
        raise ValueError(f"`--param` must be separate or merged with `--tasks`, got {kind!r}")
    parameterisation = "separate" if kind == "separate" else "circuit"
    H = check_positive_int("heads", args.heads, hi=64)
    steps = check_positive_int("steps", args.steps, hi=10**7)
    n_eval = check_positive_int("eval-prompts", getattr(args, "n_eval", 20_000), hi=10**7)
    if n_eval < 2:
        raise ValueError(f"`--eval-prompts` must be >= 2 (for a standard error), got {n_eval}")
    every = getattr(args, "checkpoint_every", None)
    every = max(1000, steps // 20) if every is None else check_positive_int("checkpoint-every", every, hi=10**7)
    resume, force = bool(getattr(args, "resume", False)), bool(getattr(args, "force", False))
    ckpt = None
    if resume and force:
        raise ValueError("`--resume` continues the run in `--out` and `--force` replaces it: give one of them")
    if getattr(args, "out", None) is None:
        if resume:
            raise ValueError("`--resume` needs `--out` (the folder holding checkpoint_multitask.npz)")
    else:
        folder = prepare_out(args.out)
        ckpt = folder / "checkpoint_multitask.npz"
        present = [f for f in (folder / "final_multitask.json", ckpt) if f.exists()]
        if resume and not ckpt.exists():
            raise ValueError(f"`--resume` needs {str(ckpt)!r}, which does not exist")
        if present and not resume:
            if not force:
                raise ValueError(
                    f"`--out` already holds a multi-task run ({', '.join(f.name for f in present)}); "
                    "pass --resume to continue it or --force to replace it"
                )
            for f in present:
                f.unlink()
    progress = Progress("train", quiet=getattr(args, "quiet", False))
    progress.stage(f"training H={H} ({kind}) for {steps} steps on {setting.n_tasks} tasks")

    def tick(t, loss):
        progress.tick(f"step {t}/{steps}, batch loss {loss:.4f}")

    try:
        res = train_mt_attention(
            H,
            setting,
            steps=steps,
            seed=args.seed,
            batch=args.batch,
            lr=args.lr,
            parameterisation=parameterisation,
            checkpoint=ckpt,
            checkpoint_every=every,
            callback=tick,
        )
    finally:
        progress.close()
    if not res.success:
        print(res.message, file=sys.stderr)
        return 3
    circ = res.circuits
    lim = limit_predictor(max(H, 1), setting)
    preds = {
        "trained": lambda p: mt_attention_predict(res.model, p, setting),
        "reduced": lambda p: reduced_mt_predict(p, circ.omega, circ.mu, setting),
        "limit": lambda p: (
            weighted_dgd_predict(p, lim.A)
            if lim.regime != "kernel"
            else reduced_mt_predict(p, lim.omega, lim.mu, setting)
        ),
        "debiased_gd_S": lambda p: weighted_dgd_predict(p, limit_predictor(setting.n_tasks + 1, setting).A),
        "bayes_ridge_S": lambda p: support_ridge_predict(p, setting),
    }
    risks = per_task_risks(preds, setting, n_prompts=n_eval, seed=args.seed + 10**6)
    tail = res.losses[-min(1000, res.steps) :]
    out = {
        "command": "train",
        "tasks": _tasks_text(setting),
        "success": True,
        "omega": circ.omega,
        "mu": circ.mu,
        "roles": list(circ.roles),
        "antipodal_pairs": antipodal_pairs(circ.omega, circ.mu),
        "kq_offdiag_rel": circ.kq_offdiag_rel,
        "ov_offdiag_rel": circ.ov_offdiag_rel,
        "risk": {name: {"risk": risks.risk[i], "stderr": risks.stderr[i]} for i, name in enumerate(risks.names)},
        "n_eval": n_eval,
        "final_batch_loss": float(np.mean(tail)),
        "steps": res.steps,
        "train_seconds": res.seconds,
        "train_cpu_seconds": res.cpu_seconds,
        "model": (
            "N-output attention with separate Q_h, K_h, V_h, O_h, trained with Adam"
            if kind == "separate"
            else "N-output attention in circuit form (KQ_h, OV_h), trained with Adam"
        ),
        "setting": setting.to_dict(),
        "config": {
            "heads": H,
            "steps": steps,
            "batch": args.batch,
            "lr": args.lr,
            "seed": args.seed,
            "param": kind,
        },
        "seconds": time.perf_counter() - t0,
    }
    _emit(args, out, "final_multitask.json")
    return 0
