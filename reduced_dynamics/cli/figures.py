"""``reduced-dynamics figures``: regenerate the project's figures (PNG + data file each)."""

from __future__ import annotations

import json
import sys

from reduced_dynamics.cli._common import Progress, add_quiet, exit_codes_epilog, nonempty, prepare_out
from reduced_dynamics.io import to_jsonable

HELP = "Regenerate the figures (PNG + .npz data each) from the registry in reduced_dynamics.figures.registry."
EPILOG = exit_codes_epilog() + (
    "\n\nEach figure is <out>/<name>.png with its data <out>/<name>.npz: fixed names, which the docs link to.\n"
    "The folder records the configuration that made each figure (<out>/figures_run.json: --seed, --quick per\n"
    "figure, written before the figure is made); a figure of another configuration is not replaced (exit 2)\n"
    "unless --force: give the run its own --out folder. Figures not made by the run keep their record."
)

#: File in the output folder that records which configuration made each figure in it.
STAMP = "figures_run.json"


def _figure_files(out, name: str) -> list:
    return [p for p in (out / f"{name}.npz", out / f"{name}.png") if p.exists()]


def read_stamps(out, names) -> dict:
    """Figure name -> the configuration recorded for it in ``out`` (None: its files exist without a record).

    Reads ``figures_run.json``: ``{"figures": {name: {"seed": s, "quick": q}}}``, or the folder-wide
    ``{"seed": s, "quick": q}`` of earlier versions, which applies to every figure whose files are there.
    Figures with neither files nor a record are left out.
    """
    import json
    from pathlib import Path

    out = Path(out)
    doc = None
    stamp = out / STAMP
    if stamp.is_file():
        try:
            doc = json.loads(stamp.read_text())
        except (OSError, ValueError):
            doc = None
    per: dict = {}
    if isinstance(doc, dict) and isinstance(doc.get("figures"), dict):
        per = {k: v for k, v in doc["figures"].items() if isinstance(v, dict)}
    elif isinstance(doc, dict) and set(doc) == {"seed", "quick"}:  # the folder-wide record of 0.2
        per = {n: dict(doc) for n in names if _figure_files(out, n)}
    found = {}
    for n in names:
        if n in per:
            found[n] = per[n]
        elif _figure_files(out, n):
            found[n] = None
    return found


def _check_folder(out, config: dict, *, force: bool, names, all_names) -> dict:
    """Refuse to overwrite a figure made with another configuration (its file names do not encode it).

    Only the figures of this run (``names``) are compared; returns the records of every figure
    (``all_names``) with this run's figures claimed for ``config``, to be written before they are made.
    """
    stamps = read_stamps(out, all_names)
    clash = {n: stamps[n] for n in names if n in stamps and stamps[n] != config}
    if clash and not force:
        known = {n: c for n, c in clash.items() if c is not None}
        unknown = sorted(n for n, c in clash.items() if c is None)
        parts = [f"{n} made with {c}" for n, c in list(known.items())[:3]]
        if unknown:
            parts.append(f"{', '.join(unknown[:3])} of unknown configuration")
        raise ValueError(
            f"`--out` {str(out)!r} already holds figures ({'; '.join(parts)}) and the file names do not encode "
            f"it; use another `--out` or `--force` to overwrite them with {config}"
        )
    records = {n: c for n, c in stamps.items() if c is not None}
    records.update({n: dict(config) for n in names})
    return {"figures": {n: records[n] for n in all_names if n in records}}


def claim_figures(out, config: dict, *, force: bool, names, all_names) -> dict:
    """Check the folder's record and claim ``names`` for ``config`` in it, under the folder's lock.

    The figures are claimed before they are made: a run killed half-way leaves files its record describes,
    so the same command may finish them and another configuration is refused without ``--force``. The
    read, check and write hold :func:`reduced_dynamics.io.folder_lock`, so two runs in one folder never
    lose each other's claims (each read the record before the other wrote it) and two configurations
    claiming one figure at once are not both let through. Returns the record written.
    """
    from pathlib import Path

    from reduced_dynamics.io import atomic_write_json, folder_lock

    with folder_lock(out):
        records = _check_folder(out, config, force=force, names=names, all_names=all_names)
        atomic_write_json(Path(out) / STAMP, records)
    return records


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
    names = list(dict.fromkeys(only)) if only is not None else list(FIGURES)
    claim_figures(args.out, config, force=args.force, names=names, all_names=list(FIGURES))
    progress = Progress("figures", quiet=args.quiet, every=0.0)
    runs = run_figures(
        out=args.out, quick=args.quick, only=only, seed=args.seed, log=progress.stage, workers=args.workers
    )
    res = {run.name: {"seconds": run.seconds, **run.key_numbers} for run in runs}
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(res)) + "\n")
    else:
        for name, key in res.items():
            print(f"{name}: " + json.dumps(to_jsonable(key)))
    return 0
