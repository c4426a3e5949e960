"""``reduced-dynamics portrait``: phase portraits of the reduced (ω, μ) gradient flow."""

from __future__ import annotations

from pathlib import Path

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.io import atomic_savez

HELP = "Phase portraits: the invariant two-head plane (γ, m) and projections of the general-H flow."


def add_arguments(p):
    p.add_argument(
        "--heads",
        type=int,
        default=3,
        help="H of the general-H portrait (>= 2; default 3); H = 2 plane is always drawn",
    )
    add_setting_arguments(p)
    p.add_argument(
        "--gamma-range",
        type=str,
        default="-0.9,0.9",
        help="γ window 'lo,hi' of the linear (γ, m) panel (default -0.9,0.9)",
    )
    p.add_argument(
        "--m-range", type=str, default="-4,4", help="m window 'lo,hi' of the linear (γ, m) panel (default -4,4)"
    )
    p.add_argument(
        "--resolution", type=int, default=80, help="grid points per axis of the vector field (>= 10; default 80)"
    )
    p.add_argument("--n-traj", type=int, default=4, help="number of random-init trajectories (default 4)")
    p.add_argument("--t-end", type=float, default=1e5, help="final time of the trajectories (>= 1; default 1e5)")
    p.add_argument(
        "--init-scale",
        type=float,
        default=0.3,
        help="scale of the random 4-D inits in the two-head plane (default 0.3)",
    )
    p.add_argument("--seed", type=int, default=0, help="first seed; trajectory k uses seed + k (default 0)")
    p.add_argument("--out", type=str, default="results/portrait", help="output folder (default results/portrait)")


def main(args) -> int:
    from reduced_dynamics.dynamics.portrait import general_portrait_data, two_head_portrait_data
    from reduced_dynamics.plots.portrait import plot_general_portrait, plot_two_head_portrait
    from reduced_dynamics.plots.style import save_figure

    setting = setting_from_args(args)
    check_positive_int("n_heads", args.heads)
    if args.heads < 2:
        raise ValueError(f"`n_heads` must be an integer >= 2 for the general portrait, got {args.heads}")
    if args.seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer, got {args.seed}")
    out = Path(args.out)
    two = two_head_portrait_data(
        setting,
        gamma_range=args.gamma_range,
        m_range=args.m_range,
        resolution=args.resolution,
        n_traj=args.n_traj,
        t_end=args.t_end,
        seed=args.seed,
        init_scale=args.init_scale,
    )
    gen = general_portrait_data(setting, n_heads=args.heads, n_traj=args.n_traj, t_end=args.t_end, seed=args.seed)
    stem = f"d{args.d}_L{args.L}_s{args.sigma2:g}_seed{args.seed}"
    f1 = out / f"portrait_two_head_{stem}"
    f2 = out / f"portrait_H{args.heads}_{stem}"
    atomic_savez(f1.with_suffix(".npz"), **two.arrays)
    save_figure(plot_two_head_portrait(two), f1.with_suffix(".png"))
    atomic_savez(f2.with_suffix(".npz"), **gen.arrays)
    save_figure(plot_general_portrait(gen), f2.with_suffix(".png"))
    g_end = abs(two["traj_gamma"][0, -1])
    print(
        f"two-head plane (d={args.d}, L={args.L}, σ²={args.sigma2:g}): trajectory 0 at t={args.t_end:g}: "
        f"|γ|={g_end:.4g}, η_eff={2 * two['traj_gamma'][0, -1] * two['traj_m'][0, -1]:.6f} (η*={two['eta_star']:.6f})"
    )
    print(
        f"H={args.heads}: positive/negative/dummy heads per seed: "
        + ", ".join(f"{p}/{n}/{z}" for p, n, z in zip(gen["n_pos"], gen["n_neg"], gen["n_dummy"]))
    )
    for f in (f1, f2):
        print(f"  wrote {f.with_suffix('.png')} and {f.with_suffix('.npz')}")
    return 0
