"""``reduced-dynamics figures``: regenerate the project's figures (PNG + data file each)."""

from __future__ import annotations

import json
import sys

from reduced_dynamics.io import to_jsonable

HELP = "Regenerate the figures (PNG + .npz data each) from the registry in reduced_dynamics.figures.registry."


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="tiny settings: every figure in seconds")
    p.add_argument(
        "--only", action="append", default=None, metavar="NAME", help="only this figure (repeatable); see --list"
    )
    p.add_argument("--out", type=str, default="figures", help="output folder (default figures/)")
    p.add_argument("--seed", type=int, default=0, help="seed shared by every figure (default 0)")
    p.add_argument("--list", action="store_true", help="list the figure names and exit")
    p.add_argument("--json", action="store_true", help="print the key numbers as one JSON object")


def main(args) -> int:
    from reduced_dynamics.figures.registry import FIGURES, check_names, run_figures

    if args.list:
        for name, spec in FIGURES.items():
            print(f"{name}: {spec.description}")
        return 0
    check_names(args.only)  # validate before any work
    log = None if args.json else (lambda line: print(line, flush=True))
    runs = run_figures(out=args.out, quick=args.quick, only=args.only, seed=args.seed, log=log)
    res = {run.name: {"seconds": run.seconds, **run.key_numbers} for run in runs}
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(res)) + "\n")
    else:
        for name, key in res.items():
            print(f"{name}: " + json.dumps(to_jsonable(key)))
    return 0
