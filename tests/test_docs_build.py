"""The documentation site's own contracts (the full Sphinx build runs in ``make test`` / ``make docs``).

- the gallery shows every committed figure, each with a caption and its key numbers;
- the CLI page renders the help of every subcommand of the real parser;
- the API pages cover every group of the package layout.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FIGURE_RE = re.compile(r"```\{figure\} \.\./figures/(?P<name>[\w.-]+\.png)\n(?P<body>.*?)\n```", re.S)


def _gallery():
    return {m["name"]: m["body"] for m in FIGURE_RE.finditer((DOCS / "gallery.md").read_text(encoding="utf-8"))}


def test_gallery_shows_every_committed_figure_once():
    text = (DOCS / "gallery.md").read_text(encoding="utf-8")
    shown = [m["name"] for m in FIGURE_RE.finditer(text)]
    committed = sorted(p.name for p in (ROOT / "figures").glob("*.png"))
    assert committed, "no figures committed"
    assert sorted(shown) == committed
    assert len(shown) == len(set(shown))


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "figures").glob("*.png")))
def test_gallery_caption_has_alt_text_caption_and_key_numbers(name):
    body = _gallery().get(name)
    assert body is not None, f"{name} is not in docs/gallery.md"
    options = [line for line in body.splitlines() if line.startswith(":")]
    assert any(line.startswith(":alt: ") and len(line) > 20 for line in options)
    caption = "\n".join(line for line in body.splitlines() if not line.startswith(":")).strip()
    assert caption.startswith("**"), "the caption starts with a bold title"
    assert "*Key numbers" in caption
    assert re.search(r"\d\.\d", caption), "the key numbers are numbers"


def test_cli_page_renders_every_subcommand():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        rd_cli = importlib.import_module("rd_cli")
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from reduced_dynamics.cli import COMMANDS, build_parser

    subs = rd_cli._subparsers(build_parser())
    assert sorted(subs) == sorted(COMMANDS)
    for name, parser in subs.items():
        assert parser.format_help().startswith(f"usage: reduced-dynamics {name}")


def test_api_pages_cover_every_subpackage():
    """Each subpackage of reduced_dynamics has its API page, listed in the API index."""
    index = (DOCS / "api" / "index.rst").read_text(encoding="utf-8")
    subpackages = sorted(
        p.name for p in (ROOT / "reduced_dynamics").iterdir() if (p / "__init__.py").exists() and p.name != "plots"
    )
    for sub in subpackages:
        page = "plots" if sub == "figures" else sub
        assert re.search(rf"^   {page}$", index, re.M), f"docs/api/index.rst does not list {page}"
        text = (DOCS / "api" / f"{page}.rst").read_text(encoding="utf-8")
        assert f"reduced_dynamics.{sub}" in text or f":group: {sub}" in text


def _rd_api():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        return importlib.import_module("rd_api")
    finally:
        sys.path.remove(str(DOCS / "_ext"))


def test_absolute_value_bars_are_escaped_only_in_running_text():
    lines = [
        "Largest |ω_h| over heads, ``|x|`` and :math:`|y|` stay as they are, and a literal",
        "``spanning |the| line",
        "break`` too.",
        "",
        ".. math::",
        "",
        "   |a| + |b|",
        "",
        ">>> abs(-1)  # |x|",
        "1",
        "",
        "After the blocks: |z|.",
    ]
    out = list(lines)
    _rd_api()._escape_bars(None, "function", "f", None, {}, out)
    expected = list(lines)
    expected[0] = "Largest \\|ω_h\\| over heads, ``|x|`` and :math:`|y|` stay as they are, and a literal"
    expected[-1] = "After the blocks: \\|z\\|."
    assert out == expected


@pytest.mark.parametrize(
    ("text", "anchor"),
    [("See docs/theory.md#drift-law.", "drift-law"), ("(docs/theory.md#theorem-1)", "theorem-1")],
)
def test_theory_citations_become_checked_links(text, anchor):
    lines = [text]
    _rd_api()._theory_links(None, "function", "f", None, {}, lines)
    assert lines == [text.replace(f"docs/theory.md#{anchor}", f":theory:`{anchor}`")]


def test_index_python_example_runs_and_prints_the_quoted_numbers(capsys):
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    code = re.search(r"## In Python\n\n```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/index.md", "exec"), namespace)
    assert capsys.readouterr().out.count("\n") == 2
    final, res = namespace["res"].final, namespace["res"]
    assert (final.n_positive, final.n_negative) == (2, 1)
    assert "$\\gamma = 0.08055$" in text and round(final.gamma, 5) == 0.08055
    assert "5.6 \\cdot 10^{-5}" in text and round(final.eta_star - final.eta_eff, 7) == pytest.approx(5.6e-5, abs=5e-7)
    assert "ratio 1.0003" in text and round(res.gamma[-1] / res.drift_law()[-1], 4) == 1.0003
