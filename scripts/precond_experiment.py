"""Paper-scale training of the attention model under non-isotropic covariates x ~ N(0, Σ) (issue 11).

The setting: d = 5, σ² = 0.1, Σ with eigenvalues spread evenly over [0.5, 4] in a random orthogonal
basis (``covariance_from_eigs(linspace(0.5, 4, 5), seed=--sigma-seed)``), L = 40 and 160, H = 2 and 3,
Adam lr 1e-3, batch 256, fresh prompts every step (docs/theory.md#non-isotropic-covariates).

Usage (from the repository root; re-running the same command resumes every unfinished run from its
checkpoint and skips the finished ones; the runs go one after the other, in one process)::

    nohup .venv/bin/python scripts/precond_experiment.py train --out results/precond \\
        > results/precond_train.log 2>&1 &
    .venv/bin/python scripts/precond_experiment.py report --out results/precond

``train`` writes ``OUT/L{L}_H{H}/checkpoint.npz`` (every ``--checkpoint-every`` steps and at the end).
``report`` reads the final checkpoints and writes ``OUT/report.json``: per run the KQ covariate blocks,
their |cosine| with Σ⁻¹ and with I, the scale-free distance to Σ⁻¹, the extracted (ω, μ, W), and the
risk against debiased preconditioned GD as paired differences with standard errors. ``--quick`` runs
a small version (d = 5, L = 20 and 40, 2000 steps at lr 1e-2) in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from reduced_dynamics.io import atomic_write_json
from reduced_dynamics.model.training import CHECKPOINT_NAME, TrainConfig, load_checkpoint, train
from reduced_dynamics.precond.covariance import covariance_from_eigs
from reduced_dynamics.setting import Setting

#: the paper-scale experiment
PAPER = {
    "d": 5,
    "sigma2": 0.1,
    "Ls": (40, 160),
    "heads": (2, 3),
    "steps": 500_000,
    "lr": 1e-3,
    "eig_lo": 0.5,
    "eig_hi": 4.0,
}
#: the --quick variant
QUICK = {
    "d": 5,
    "sigma2": 0.1,
    "Ls": (20, 40),
    "heads": (2, 3),
    "steps": 2_000,
    "lr": 1e-2,
    "eig_lo": 0.5,
    "eig_hi": 4.0,
}
EVAL_SEED = 12345  # evaluation prompts (independent of the training streams)


def sigma_matrix(d: int, *, eig_lo: float, eig_hi: float, seed: int) -> np.ndarray:
    """Σ with eigenvalues ``linspace(eig_lo, eig_hi, d)`` in the random basis of ``seed``."""
    return covariance_from_eigs(np.linspace(eig_lo, eig_hi, d), seed=seed)


def configs(
    spec: dict, *, seed: int, sigma_seed: int, steps: int | None, steps_for: dict | None = None
) -> list[TrainConfig]:
    S = sigma_matrix(spec["d"], eig_lo=spec["eig_lo"], eig_hi=spec["eig_hi"], seed=sigma_seed)
    out = []
    for L in spec["Ls"]:
        for H in spec["heads"]:
            setting = Setting(d=spec["d"], L=L, sigma2=spec["sigma2"], Sigma=S)
            out.append(
                TrainConfig(
                    setting=setting,
                    n_heads=H,
                    steps=(steps_for or {}).get(L, steps or spec["steps"]),
                    lr=spec["lr"],
                    seed=seed,
                    n_snapshots=60,
                    batch=256,
                )
            )
    return out


def run_dir(out, cfg: TrainConfig) -> Path:
    return Path(out) / f"L{cfg.setting.L}_H{cfg.n_heads}"


def train_all(cfgs, out, *, checkpoint_every: int, log=sys.stdout) -> None:
    """Train every configuration in turn (resuming from its checkpoint; skipping finished runs)."""
    for cfg in cfgs:
        folder = run_dir(out, cfg)
        ck = folder / CHECKPOINT_NAME
        if ck.exists() and load_checkpoint(ck).step >= cfg.steps:
            print(f"{folder.name}: done ({cfg.steps} steps)", file=log, flush=True)
            continue
        print(f"{folder.name}: training to {cfg.steps} steps (resume={ck.exists()})", file=log, flush=True)
        t0, c0 = time.perf_counter(), time.process_time()
        res = train(cfg, out=folder, resume=ck.exists(), checkpoint_every=checkpoint_every, progress=True)
        print(
            f"{folder.name}: {res.message} step={res.step} {res.steps_per_second:.0f} steps/s "
            f"wall {time.perf_counter() - t0:.0f} s cpu {time.process_time() - c0:.0f} s "
            f"loss(last 1000) {np.mean(res.losses[-1000:]):.5f}",
            file=log,
            flush=True,
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stage", choices=("train", "report", "all"))
    p.add_argument("--out", default="results/precond")
    p.add_argument("--quick", action="store_true", help="small version (L = 20, 40; 2000 steps, lr 1e-2)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 500000; quick 2000)")
    p.add_argument("--seed", type=int, default=0, help="training seed (init and prompts)")
    p.add_argument("--sigma-seed", type=int, default=0, help="seed of Σ's random basis")
    p.add_argument(
        "--steps-for",
        action="append",
        default=[],
        metavar="L=STEPS",
        help="training steps of the runs at this L (overrides --steps; repeatable), e.g. 160=200000",
    )
    p.add_argument("--checkpoint-every", type=int, default=10_000)
    p.add_argument("--n-eval", type=int, default=100_000, help="evaluation prompts per run")
    args = p.parse_args(argv)
    spec = QUICK if args.quick else PAPER
    try:
        steps_for = {}
        for item in args.steps_for:
            L, _, n = item.partition("=")
            if not (L.strip().isdigit() and n.strip().isdigit()):
                raise ValueError(f"`--steps-for` must be L=STEPS (two positive integers), got {item!r}")
            steps_for[int(L)] = int(n)
        cfgs = configs(spec, seed=args.seed, sigma_seed=args.sigma_seed, steps=args.steps, steps_for=steps_for)
        if args.stage in ("train", "all"):
            train_all(cfgs, args.out, checkpoint_every=args.checkpoint_every)
        if args.stage in ("report", "all"):
            rep = report(cfgs, args.out, n_eval=args.n_eval)
            path = Path(args.out) / "report.json"
            atomic_write_json(path, rep, indent=1)
            print(f"wrote {path}", flush=True)
    except ValueError as exc:
        sys.stderr.write(f"precond_experiment: error: {exc}\n")
        return 2
    return 0


def loss_windows(losses: np.ndarray, n_windows: int = 5) -> dict:
    """Mean training loss over the last ``n_windows`` windows of 10% of the run each (a plateau check).

    The standard error of each mean treats 1000-step blocks as independent (batch means).
    """
    n = losses.size
    w = max(1, n // 10)
    out = {"window_steps": w, "end_step": [], "mean": [], "stderr": []}
    for k in range(n_windows, 0, -1):
        seg = losses[n - k * w : n - (k - 1) * w]
        blocks = seg[: (seg.size // 1000) * 1000].reshape(-1, 1000).mean(axis=1) if seg.size >= 2000 else seg
        out["end_step"].append(int(n - (k - 1) * w))
        out["mean"].append(float(seg.mean()))
        out["stderr"].append(float(blocks.std(ddof=1) / np.sqrt(blocks.size)) if blocks.size > 1 else float("nan"))
    return out


def report_run(cfg: TrainConfig, folder: Path, *, n_eval: int) -> dict:
    """Circuits, distances and paired risks of one finished (or stopped) run, JSON-ready."""
    from reduced_dynamics.model.attention import unflatten_params
    from reduced_dynamics.model.circuits import precond_circuits_from_arrays, precond_cross_check
    from reduced_dynamics.precond.exact import optimal_dpgd
    from reduced_dynamics.precond.metrics import scale_free_distance

    ck = load_checkpoint(folder / CHECKPOINT_NAME)
    model = ck.config.model()
    params = {k: np.array(v) for k, v in unflatten_params(ck.theta, model.param_shapes()).items()}
    s = ck.config.setting
    cc = precond_cross_check(model, params, s, n_prompts=n_eval, seed=EVAL_SEED)
    c = cc.circuits
    opt = optimal_dpgd(s)
    d = s.d
    traj = [
        precond_circuits_from_arrays(KQ, ov, s)
        for KQ, ov in zip(ck.snapshot_KQ, ck.snapshot_ov)
        if np.any(KQ[:, :d, :d])
    ]
    live = ~c.dummy
    return {
        "L": s.L,
        "H": ck.config.n_heads,
        "steps": ck.step,
        "steps_planned": cfg.steps,
        "loss_windows": loss_windows(np.asarray(ck.losses)),
        "kq": c.kq.tolist(),
        "ov": c.ov.tolist(),
        "kq_cosine_sigma_inv": c.cosine_sigma_inv.tolist(),
        "kq_cosine_identity": c.cosine_identity.tolist(),
        "kq_distance_sigma_inv": c.distance_sigma_inv.tolist(),
        "kq_distance_optimal": [float(scale_free_distance(b, opt.P)) for b in c.kq],
        "W": c.W.tolist(),
        "omega": c.omega.tolist(),
        "mu": c.mu.tolist(),
        "dummy": c.dummy.tolist(),
        "eta_eff": c.eta_eff,
        "gamma": float(np.mean(np.abs(c.omega[live]))),
        "W_distance_sigma_inv": c.W_distance_sigma_inv,
        "W_distance_identity": c.W_distance_identity,
        "W_distance_optimal": float(scale_free_distance(c.W, opt.P)),
        "P_eff": c.P_eff.tolist(),
        "P_eff_distance_sigma_inv": c.P_eff_distance_sigma_inv,
        "P_eff_distance_identity": c.P_eff_distance_identity,
        "P_eff_distance_optimal": float(scale_free_distance(c.P_eff, opt.P)),
        "optimal_distance_sigma_inv": float(opt.distance_to_sigma_inv),
        "rank1_residual": c.rank1_residual,
        "ov_offresponse_max": float(np.max(np.sum(c.ov[live, :d] ** 2, axis=1) / np.sum(c.ov[live] ** 2, axis=1))),
        "zero_sum_ratio": float(abs(c.mu[live].sum()) / np.abs(c.mu[live]).sum()),
        "eta_optimal": float(opt.eta),
        "P_eff_scale_over_optimal": float(np.sum(c.P_eff * opt.effective) / np.sum(opt.effective**2)),
        "n_eval": cc.n,
        "risks": {k: {"risk": v.risk, "stderr": v.stderr} for k, v in cc.risks.items()},
        "diffs": {f"model-{k}": {"risk": v.risk, "stderr": v.stderr} for k, v in cc.diffs.items()},
        "exact_risks": cc.exact,
        "snapshot_steps": [int(k) for k, KQ in zip(ck.snapshot_steps, ck.snapshot_KQ) if np.any(KQ[:, :d, :d])],
        "snapshot_W_distance_sigma_inv": [t.W_distance_sigma_inv for t in traj],
        "snapshot_W_distance_identity": [t.W_distance_identity for t in traj],
    }


def report(cfgs, out, *, n_eval: int) -> dict:
    """:func:`report_run` of every run with a checkpoint, with the Σ they share."""
    runs = []
    for cfg in cfgs:
        folder = run_dir(out, cfg)
        if not (folder / CHECKPOINT_NAME).exists():
            print(f"{folder.name}: no checkpoint, skipped", flush=True)
            continue
        t0 = time.perf_counter()
        rep = report_run(cfg, folder, n_eval=n_eval)
        runs.append(rep)
        print(
            f"{folder.name}: step {rep['steps']} cos(Σ⁻¹) {np.round(rep['kq_cosine_sigma_inv'], 4)} "
            f"cos(I) {np.round(rep['kq_cosine_identity'], 4)} dist(W, Σ⁻¹) {rep['W_distance_sigma_inv']:.4f} "
            f"dist(W, P*) {rep['W_distance_optimal']:.4f} dist(P_eff, Σ⁻¹) {rep['P_eff_distance_sigma_inv']:.4f} "
            f"dist(P_eff, P*) {rep['P_eff_distance_optimal']:.4f}  model-dpgd_opt "
            f"{rep['diffs']['model-dpgd_optimal']['risk']:+.5f} ± {rep['diffs']['model-dpgd_optimal']['stderr']:.5f} "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    S = cfgs[0].setting.Sigma
    return {
        "Sigma": S.tolist(),
        "Sigma_eigs": np.linalg.eigvalsh(S).tolist(),
        "d": cfgs[0].setting.d,
        "sigma2": cfgs[0].setting.sigma2,
        "eval_seed": EVAL_SEED,
        "runs": runs,
    }


if __name__ == "__main__":
    sys.exit(main())
