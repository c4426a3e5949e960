"""``reduced-dynamics figures``: regenerate the project's figures (PNG + data file each)."""

from __future__ import annotations

import json
import sys

from reduced_dynamics.cli._common import Progress, add_quiet, exit_codes_epilog, nonempty, prepare_out
from reduced_dynamics.io import to_jsonable

HELP = "Regenerate the figures (PNG + .npz data each) from the registry in reduced_dynamics.figures.registry."
EPILOG = exit_codes_epilog() + (
    "\n\nEach figure is <out>/<name>.png with its data <out>/<name>.npz: fixed names, which the docs link to.\n"
    "They do not encode --seed or --quick: give a run with another --seed or --quick its own --out folder."
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
    p.add_argument("--list", action="store_true", help="list the figure names and exit")
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
    prepare_out(args.out)
    progress = Progress("figures", quiet=args.quiet, every=0.0)
    runs = run_figures(out=args.out, quick=args.quick, only=only, seed=args.seed, log=progress.stage)
    res = {run.name: {"seconds": run.seconds, **run.key_numbers} for run in runs}
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(res)) + "\n")
    else:
        for name, key in res.items():
            print(f"{name}: " + json.dumps(to_jsonable(key)))
    return 0
