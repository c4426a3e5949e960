"""Command-line interface: ``reduced-dynamics <command> [options]``.

Each command lives in its own module ``reduced_dynamics.cli.<name>`` that
defines ``HELP`` (one line), ``add_arguments(parser)`` and ``main(args) -> int``.
Every command that depends on the data model takes ``--d --L --sigma2`` and
builds ONE :class:`~reduced_dynamics.setting.Setting` from them
(``reduced_dynamics.cli._setting``), which it passes on.
:func:`build_parser` returns the complete parser (all subcommands), e.g. for
the documentation's CLI reference.
Bad input (``ValueError``), an overflow of ``exp(d ωωᵀ)`` (``OverflowError``) and
an unwritable output path (``OSError``) each become one line on stderr and exit
status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "build_parser", "COMMANDS"]

#: command name -> module implementing it
COMMANDS = {
    "run": "reduced_dynamics.cli.run",
    "risk": "reduced_dynamics.cli.risk",
    "check": "reduced_dynamics.cli.check",
    "train": "reduced_dynamics.cli.train",
    "portrait": "reduced_dynamics.cli.portrait",
    "figures": "reduced_dynamics.cli.figures",
}


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line and exit 2."""

    def error(self, message):  # pragma: no cover - exercised through main()
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _available():
    out = {}
    for name, modname in COMMANDS.items():
        try:
            out[name] = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
    return out


def build_parser() -> argparse.ArgumentParser:
    """The complete ``reduced-dynamics`` argument parser, with every subcommand and its options.

    Returns
    -------
    argparse.ArgumentParser
        ``parse_args(["run", "--d", "3"])`` gives the namespace a command's
        ``main`` receives; ``format_help()`` is the top-level ``--help``.
    """
    parser = _Parser(prog="reduced-dynamics", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = _available()
    for name, mod in modules.items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv=None) -> int:
    """Run ``reduced-dynamics`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0 on success, 1 when a command reports a failed result, 2 on bad input
    (one line on stderr naming the parameter), 130 on Ctrl-C.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_module", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._module.main(args) or 0)
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        sys.stderr.write(f"reduced-dynamics {args.command}: error: {msg}\n")
        return 2
    except OverflowError as exc:
        sys.stderr.write(f"reduced-dynamics {args.command}: overflow: {str(exc).splitlines()[0]}\n")
        return 2
    except OSError as exc:  # e.g. an --out folder that cannot be created or written
        where = f": {exc.filename!r}" if getattr(exc, "filename", None) else ""
        sys.stderr.write(
            f"reduced-dynamics {args.command}: error: cannot write output{where} ({exc.strerror or exc})\n"
        )
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"reduced-dynamics {args.command}: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
