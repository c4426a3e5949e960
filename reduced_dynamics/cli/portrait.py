"""``reduced-dynamics portrait``: phase portraits of the reduced (ω, μ) gradient flow."""

from __future__ import annotations

from pathlib import Path

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_range,
    exit_codes_epilog,
    nonempty,
    parse_floats,
    prepare_out,
)
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.flow._integrate import T_END_MAX
from reduced_dynamics.io import atomic_savez, output_stem

HELP = "Phase portraits: the invariant two-head plane (γ, m) and projections of the general-H flow."
EPILOG = exit_codes_epilog() + (
    "\n\nOutput names encode the whole configuration, e.g.\n"
    "  portrait_two_head_d5_L40_sigma2-0.1_gamma--0.9,0.9_m--4.0,4.0_res80_ntraj4_tend-100000.0_scale-0.3_seed0.png\n"
    "  portrait_H3_d5_L40_sigma2-0.1_ntraj4_tend-100000.0_seed0.png (and the .npz data of each)"
)
#: library parameter names -> the flags of this command (for the one error line)
PARAM_FLAGS = {"n_heads": "--heads", "scale": "--init-scale", "gamma": "--gamma-range", "m": "--m-range"}


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
    p.add_argument(
        "--t-end", type=float, default=1e5, help=f"final time of the trajectories, in [1, {T_END_MAX:g}] (default 1e5)"
    )
    p.add_argument(
        "--init-scale",
        type=float,
        default=0.3,
        help="scale of the random 4-D inits in the two-head plane (default 0.3)",
    )
    p.add_argument("--seed", type=int, default=0, help="first seed; trajectory k uses seed + k (default 0)")
    p.add_argument("--out", type=nonempty, default="results/portrait", help="output folder (default results/portrait)")
    add_quiet(p)


def output_names(args, setting, gamma_range, m_range) -> tuple[str, str]:
    """The stems of the two-head and the general-H outputs: every option that changes each, in a fixed order."""
    common = dict(d=setting.d, L=setting.L, sigma2=float(setting.sigma2))
    two = output_stem(
        "portrait_two_head",
        dict(
            **common,
            gamma=list(gamma_range),
            m=list(m_range),
            res=int(args.resolution),
            ntraj=int(args.n_traj),
            tend=float(args.t_end),
            scale=float(args.init_scale),
            seed=int(args.seed),
        ),
    )
    gen = output_stem(
        f"portrait_H{int(args.heads)}",
        dict(**common, ntraj=int(args.n_traj), tend=float(args.t_end), seed=int(args.seed)),
    )
    return two, gen


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
    check_range("--t-end", args.t_end, 1.0, T_END_MAX, lo_open=False)
    gamma_range = parse_floats(args.gamma_range, "--gamma-range")
    m_range = parse_floats(args.m_range, "--m-range")
    for flag, pair in (("--gamma-range", gamma_range), ("--m-range", m_range)):
        if len(pair) != 2 or not pair[0] < pair[1]:
            raise ValueError(
                f"`{flag}` must be 'lo,hi' with lo < hi, got {getattr(args, flag[2:].replace('-', '_'))!r}"
            )
    stem_two, stem_gen = output_names(args, setting, gamma_range, m_range)
    prepare_out(args.out)
    progress = Progress("portrait", quiet=args.quiet)
    out = Path(args.out)
    progress.stage(f"two-head plane: {args.resolution}x{args.resolution} vector field and {args.n_traj} trajectories")
    two = two_head_portrait_data(
        setting,
        gamma_range=tuple(gamma_range),
        m_range=tuple(m_range),
        resolution=args.resolution,
        n_traj=args.n_traj,
        t_end=args.t_end,
        seed=args.seed,
        init_scale=args.init_scale,
    )
    progress.stage(f"general H={args.heads}: {args.n_traj} trajectories")
    gen = general_portrait_data(setting, n_heads=args.heads, n_traj=args.n_traj, t_end=args.t_end, seed=args.seed)
    progress.stage(f"drawing into {out}")
    # names are built as strings, never with Path.with_suffix (which cut "sigma2-0.1..." at its first dot)
    f1, f2 = out / stem_two, out / stem_gen
    atomic_savez(out / f"{stem_two}.npz", **two.arrays)
    save_figure(plot_two_head_portrait(two), out / f"{stem_two}.png")
    atomic_savez(out / f"{stem_gen}.npz", **gen.arrays)
    save_figure(plot_general_portrait(gen), out / f"{stem_gen}.png")
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
        print(f"  wrote {f}.png and {f}.npz")
    return 0
