"""Sphinx extension: the command-line reference, rendered from the real parser.

``.. cli-help::`` prints ``format_help()`` of ``reduced_dynamics.cli.build_parser()``
and, in one section per subcommand (``reduced-dynamics run``, ...), of each
subparser, so the page shows exactly what ``--help`` prints. Help is formatted
at a fixed width of 100 columns, independent of the terminal that builds the docs.
"""

from __future__ import annotations

import argparse
import importlib
import os
from unittest import mock

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

WIDTH = "100"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class CliHelp(SphinxDirective):
    optional_arguments = 1  # module with build_parser(), default reduced_dynamics.cli

    def run(self):
        modname = self.arguments[0] if self.arguments else "reduced_dynamics.cli"
        with mock.patch.dict(os.environ, {"COLUMNS": WIDTH}):
            parser = importlib.import_module(modname).build_parser()
            top = parser.format_help()
            subs = {name: sub.format_help() for name, sub in _subparsers(parser).items()}
        out = [nodes.literal_block(top, top, language="text")]
        for name, text in subs.items():
            title = f"{parser.prog} {name}"
            section = nodes.section(ids=[nodes.make_id(title)], names=[nodes.fully_normalize_name(title)])
            section += nodes.title(title, "", nodes.literal(title, title))
            section += nodes.literal_block(text, text, language="text")
            self.state.document.note_implicit_target(section, section)
            out.append(section)
        return out


def setup(app):
    app.add_directive("cli-help", CliHelp)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
