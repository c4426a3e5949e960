"""The README is a front page: short, its links resolve, its tables cover the real commands and checks,
and its Python example runs as written and prints what the README says it prints."""

import contextlib
import io
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 250

#: ``[label](target)`` and ``![alt](target)`` outside code; the target ends at whitespace or ``)``.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    text = _text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _outside_code(markdown: str) -> str:
    """The text without fenced code blocks and inline code spans (links there are not links)."""
    kept, fence = [], None
    for line in markdown.splitlines():
        marker = FENCE.match(line)
        if marker:
            fence = None if fence else marker.group(1)[0]
            continue
        if fence is None:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading (the rule of tests/test_theory_doc.py, which MyST's anchors follow)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    anchors, seen = set(), {}
    for line in _outside_code(markdown).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _table_names(section: str) -> list[str]:
    """The first cells, `` `name` ``, of the table rows of a section."""
    return re.findall(r"^\| `([\w-]+)` \|", section, re.M)


# ----------------------------------------------------------------------------- a front page


def test_readme_is_at_most_250_lines():
    n = len(_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; move detail to docs/ (limit {MAX_LINES})"


def test_every_relative_link_in_the_readme_points_to_an_existing_file():
    """Relative links (files, folders, images) exist; an anchor into a Markdown file is one of its headings."""
    targets = LINK.findall(_outside_code(_text()))
    relative = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]
    assert len(relative) >= 10, "the README links into the documentation"
    bad = []
    for target in relative:
        path_part, _, anchor = target.partition("#")
        path = (ROOT / unquote(path_part)) if path_part else README
        if not path.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in heading_anchors(path.read_text(encoding="utf-8")):
            bad.append(f"{target} (no such heading in {path.relative_to(ROOT)})")
    assert not bad, "broken links in README.md:\n" + "\n".join(bad)


def test_link_check_sees_broken_links():
    """The link check itself: a missing file and a missing anchor are found, code is ignored."""
    md = "[a](docs/cli.md#no-such-heading) `[b](nowhere.md)`\n```\n[c](nowhere.md)\n```\n[d](nowhere.md)\n"
    targets = LINK.findall(_outside_code(md))
    assert targets == ["docs/cli.md#no-such-heading", "nowhere.md"]
    assert "no-such-heading" not in heading_anchors((ROOT / "docs" / "cli.md").read_text(encoding="utf-8"))


def test_command_table_lists_every_subcommand():
    from reduced_dynamics.cli import COMMANDS

    assert sorted(_table_names(_section("Command line"))) == sorted(COMMANDS)


def test_checks_table_lists_every_registered_check_once():
    from proofs_check.checks import CHECKS

    names = _table_names(_section("Checks"))
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(CHECKS)


def test_readme_says_how_to_call_the_installed_command():
    """``make`` installs into .venv, not onto PATH: the README says how to call the command afterwards."""
    section = _section("Two commands")
    assert ".venv/bin/reduced-dynamics" in section
    assert "source .venv/bin/activate" in section


# ----------------------------------------------------------------------------- the Python example


def _python_example() -> str:
    return re.search(r"```python\n(.*?)```", _section("Python"), re.S).group(1)


def test_readme_has_one_short_python_example():
    section = _section("Python")
    assert section.count("```python") == 1
    assert len(_python_example().splitlines()) <= 15


@pytest.fixture(scope="module")
def example_run():
    """Run the README's example once; its namespace and printed lines."""
    out, namespace = io.StringIO(), {"__name__": "readme_example"}
    with contextlib.redirect_stdout(out):
        exec(compile(_python_example(), str(README), "exec"), namespace)
    return namespace, out.getvalue().splitlines()


def test_readme_python_example_prints_the_numbers_its_prose_quotes(example_run):
    namespace, lines = example_run
    prose = _section("Python").split("```")[-1]
    final = namespace["res"].final
    assert (final.n_positive, final.n_negative) == (2, 1)
    assert "two positive heads and one negative head" in prose
    assert round(final.gamma, 4) == 0.0806 and "γ = 0.0806" in prose
    assert abs((final.eta_star - final.eta_eff) - 5.6e-5) < 5e-7 and "5.6e-5" in prose
    ratio = [float(line) for line in lines if re.fullmatch(r"[\d.]+(e-?\d+)?", line.strip())]
    assert len(ratio) == 1 and abs(ratio[0] - 1.0003) < 5e-5  # γ(t_end) / drift law
    assert "drift law 1.0003" in prose
    assert any(re.search(r"4\.3953\d*\s+-4\.3953", line) for line in lines)  # ±μ_γ(0.1) = ±4.3954
    assert "±4.3954" in prose
