"""``reduced-dynamics figures``: regenerate the project's figures (PNG + data file each)."""

from __future__ import annotations

import json
import sys

from reduced_dynamics.cli._common import Progress, add_quiet, exit_codes_epilog, nonempty, prepare_out
from reduced_dynamics.io import to_jsonable

HELP = "Regenerate the figures (PNG + .npz data each) from the registry in reduced_dynamics.figures.registry."
EPILOG = exit_codes_epilog() + (
    "\n\nEach figure is <out>/<name>.png with its data <out>/<name>.npz: fixed names, which the docs link to.\n"
    "The folder records the configuration that made them (<out>/figures_run.json: --seed, --quick); a run with\n"
    "another configuration is refused there (exit 2) unless --force: give it its own --out folder."
)

#: File in the output folder that records which configuration made the figures in it.
STAMP = "figures_run.json"


def _check_folder(out, config: dict, *, force: bool, names) -> None:
    """Refuse to overwrite figures made with another configuration (their file names do not encode it)."""
    from pathlib import Path

    out = Path(out)
    stamp = out / STAMP
    if stamp.exists():
        try:
            old = json.loads(stamp.read_text())
        except (OSError, ValueError):
            old = None
        if old == config or force:
            return
        raise ValueError(
            f"`--out` {str(out)!r} holds figures made with {old} and the file names do not encode it; "
            f"use another `--out` or `--force` to overwrite them with {config}"
        )
    existing = sorted(n for n in names if (out / f"{n}.npz").exists() or (out / f"{n}.png").exists())
    if existing and not force:
        raise ValueError(
            f"`--out` {str(out)!r} already holds figures ({', '.join(existing[:3])}...) of unknown configuration; "
            f"use another `--out` or `--force` to overwrite them"
        )


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="tiny settings: every figure in seconds")
    p.add_argument(
        "--only",
        action="append",
        type=nonempty,
        default=None,
        metavar="NAME",
        help="only this figure (repeatable, or comma-separated: a,b); see --list",
    )
    p.add_argument("--out", type=nonempty, default="figures", help="output folder (default figures/)")
    p.add_argument("--seed", type=int, default=0, help="seed shared by every figure (default 0)")
    p.add_argument("--force", action="store_true", help="overwrite figures in --out made with another --seed/--quick")
    p.add_argument("--list", action="store_true", help="list the figure names and exit")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="make independent figures in parallel on this many processes (default 1; the files do not depend on it)",
    )
    p.add_argument("--json", action="store_true", help="print the key numbers as one JSON object")
    add_quiet(p)


def main(args) -> int:
    from reduced_dynamics.figures.registry import FIGURES, check_names, run_figures

    if args.list:
        given = sorted(getattr(args, "_seen_options", set()) - {"list", "json", "quiet"})
        if given or args.only is not None:
            flags = ", ".join(f"`--{g.replace('_', '-')}`" for g in (given or ["only"]))
            raise ValueError(f"`--list` lists the figures and makes none: drop {flags}")
        if args.json:
            sys.stdout.write(json.dumps({name: spec.description for name, spec in FIGURES.items()}) + "\n")
            return 0
        for name, spec in FIGURES.items():
            print(f"{name}: {spec.description}")
        return 0
    only = None
    if args.only is not None:
        only = [n.strip() for item in args.only for n in item.split(",")]
        if any(not n for n in only):
            raise ValueError(f"`--only` must name figures without empty items, got {','.join(args.only)!r}")
    check_names(only)  # validate before any work
    if args.seed < 0:
        raise ValueError(f"`--seed` must be a non-negative integer, got {args.seed}")
    if not 1 <= args.workers <= 512:
        raise ValueError(f"`--workers` must be an integer in [1, 512], got {args.workers}")
    prepare_out(args.out)
    config = {"seed": int(args.seed), "quick": bool(args.quick)}
    _check_folder(args.out, config, force=args.force, names=list(FIGURES))
    progress = Progress("figures", quiet=args.quiet, every=0.0)
    runs = run_figures(
        out=args.out, quick=args.quick, only=only, seed=args.seed, log=progress.stage, workers=args.workers
    )
    from pathlib import Path

    from reduced_dynamics.io import atomic_write_json

    atomic_write_json(Path(args.out) / STAMP, config)
    res = {run.name: {"seconds": run.seconds, **run.key_numbers} for run in runs}
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(res)) + "\n")
    else:
        for name, key in res.items():
            print(f"{name}: " + json.dumps(to_jsonable(key)))
    return 0
