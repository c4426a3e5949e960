"""The documentation site's own contracts (the full Sphinx build runs in ``make test`` / ``make docs``).

- the gallery shows every committed figure, each with a caption and its key numbers;
- the CLI page renders the help of every subcommand of the real parser;
- the API pages cover every group of the package layout;
- the Python examples of docs/index.md and docs/python.md run and print the numbers they quote;
- the findings pages (docs/findings/) cite only commands, checks, figures, scripts and files that exist;
- the built site loads nothing from the network: no page refers to a remote script, stylesheet, font or
  image, no stylesheet imports a remote one, and the bundled MathJax is there (it reads from ``file://``).
"""

from __future__ import annotations

import contextlib
import html.parser
import importlib
import io
import re
import subprocess
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


# ----------------------------------------------------------------------------- the Python tour (docs/python.md)


def _tour_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / "python.md").read_text(encoding="utf-8"), re.S)


def _run(code: str, name: str) -> tuple[dict, list[str]]:
    out, namespace = io.StringIO(), {"__name__": name}
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/python.md ({name})", "exec"), namespace)
    return namespace, out.getvalue().splitlines()


def test_python_tour_has_its_two_sessions():
    assert len(_tour_blocks()) == 2


def test_python_tour_isotropic_session_prints_the_quoted_numbers():
    """The first session: γ over the drift law, ±μ_γ(0.1), and the Bayes-ratio excess and slack at ξ = 1/8."""
    _, lines = _run(_tour_blocks()[0], "tour_isotropic")
    ratio = float(lines[3])  # γ(t_end) / drift law
    assert abs(ratio - 1.0003) < 5e-5
    assert re.search(r"4\.3953\d*\s+-4\.3953", lines[-2])  # optimal_mu([0.1, -0.1]) = ±μ_γ(0.1) = ±4.3954
    excess, slack = map(float, lines[-1].split())
    assert abs(excess - 0.93657) < 1e-5 and abs(slack - 0.14876) < 1e-5


def test_python_tour_extensions_session_prints_the_quoted_numbers():
    """The second session: Σ (flow, exact optimal preconditioner) and square attention."""
    text = (DOCS / "python.md").read_text(encoding="utf-8")
    _, lines = _run(_tour_blocks()[1], "tour_extensions")
    dist_sigma_inv, dist_limit = map(float, lines[0].split())
    kappa, risk_opt, risk_sigma_inv, dist_opt = map(float, lines[1].split())
    gamma, eta_claim, eta_tilt = map(float, lines[2].split())
    assert round(dist_sigma_inv, 4) == 0.1311 and "Σ⁻¹ 0.1311" in text
    assert f"{dist_limit:.1e}" == "1.9e-04" and "1.9e-4" in text
    assert round(kappa, 5) == 0.29375 and round(risk_opt, 5) == 0.39592 and round(risk_sigma_inv, 5) == 0.40958
    assert round(dist_opt, 4) == 0.1310
    assert round(gamma, 4) == 0.0229 and round(eta_claim, 4) == 0.8819 and round(eta_tilt, 4) == 0.8787
    for quoted in ("0.29375", "0.39592", "0.40958", "0.1310", "γ = 0.0229", "0.8819", "0.8787"):
        assert quoted in text, quoted


# ----------------------------------------------------------------------------- the findings pages


#: Pages that cite commands next to their numbers (and the README, which points at them).
CITING_PAGES = sorted((DOCS / "findings").glob("*.md")) + [
    DOCS / "python.md",
    DOCS / "layout.md",
    DOCS / "cli.md",
    ROOT / "README.md",
]
COMMAND = re.compile(r"\breduced-dynamics\s+([a-z][\w-]*)")
ONLY = re.compile(r"\breduced-dynamics\s+(check|figures)\b[^`\n]*?--only\s+([\w,]+)")
SCRIPT = re.compile(r"(?<![\w/])((?:scripts|benchmarks|examples/sweeps)/[\w/.-]+\.(?:py|toml))\b")
REPO_FILE = re.compile(r"`((?:figures|examples)/[\w/.-]+\.(?:png|json|npz|md))`")


@pytest.mark.parametrize("page", CITING_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_findings_pages_cite_commands_scripts_and_files_that_exist(page):
    """Every ``reduced-dynamics <command>``, ``check/figures --only <name>``, script and committed file cited exists."""
    from proofs_check.checks import CHECKS
    from reduced_dynamics.cli import COMMANDS
    from reduced_dynamics.figures.registry import FIGURES

    text = page.read_text(encoding="utf-8")
    bad = sorted({c for c in COMMAND.findall(text) if c not in COMMANDS and c != "COMMAND"})
    known = {"check": set(CHECKS) | {"NAME"}, "figures": set(FIGURES) | {"NAME"}}
    for command, names in ONLY.findall(text):
        bad += [f"{command} --only {n}" for n in names.split(",") if n not in known[command]]
    bad += [rel for rel in SCRIPT.findall(text) if not (ROOT / rel).is_file()]
    bad += [rel for rel in REPO_FILE.findall(text) if not (ROOT / rel).is_file() and "NAME" not in rel]
    assert not bad, f"{page.relative_to(ROOT)} cites what does not exist: {bad}"


def test_findings_index_lists_every_findings_page():
    index = (DOCS / "findings" / "index.md").read_text(encoding="utf-8")
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S).group(1)
    listed = {line.strip() for line in toctree.splitlines() if line.strip() and not line.startswith(":")}
    pages = {p.stem for p in (DOCS / "findings").glob("*.md")} - {"index"}
    assert listed == pages


# ----------------------------------------------------------------------------- the site reads offline

#: the site ``make docs`` / ``make test`` builds (make test builds it before it runs the suite)
BUILT_SITE = DOCS / "_build" / "html"
REMOTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # http://, https://, protocol-relative //host
#: CSS that fetches: url(...) and @import "..." with a remote target
CSS_REMOTE = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:[a-z][a-z0-9+.-]*:)?//[^'")\s]+)""", re.I)


class _AssetParser(html.parser.HTMLParser):
    """Collects what a browser fetches by itself when it shows the page (links to follow are not fetched)."""

    #: (tag, attribute) pairs the browser loads on its own
    FETCHED = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src")}

    def __init__(self):
        super().__init__()
        self.assets: list[str] = []
        self.inline_css: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        for attr in ("src", "href"):
            if (
                (tag, attr) in self.FETCHED
                and values.get(attr)
                and not (tag == "link" and values.get("rel") in ("canonical", "alternate"))
            ):
                self.assets.append(f"<{tag} {attr}={values[attr]}>")
        if "style" in values and values["style"]:
            self.inline_css.append(values["style"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.inline_css.append(data)


def remote_references(page: str) -> list[str]:
    """The remote scripts, stylesheets, fonts and images one HTML page loads, and the remote URLs of its CSS."""
    parser = _AssetParser()
    parser.feed(page)
    remote = [a for a in parser.assets if REMOTE.match(a.split("=", 1)[1])]
    return remote + [m for css in parser.inline_css for m in CSS_REMOTE.findall(css)]


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ('<script defer src="https://cdn.example.org/mathjax/tex-chtml.js"></script>', 1),
        ('<link rel="stylesheet" href="//fonts.example.com/css?family=Lato">', 1),
        ('<link rel="preload" as="font" href="http://x.org/f.woff2">', 1),
        ("<style>@import 'https://x.org/a.css'; p { background: url(//x.org/b.png) }</style>", 2),
        ('<img src="https://x.org/badge.svg">', 1),
        ('<script src="_static/mathjax/tex-svg.js?v=1"></script><link rel="stylesheet" href="../_static/rd.css">', 0),
        ('<a href="https://arxiv.org/abs/2503.12734">the paper</a><link rel="canonical" href="https://x.org/">', 0),
    ],
)
def test_remote_reference_finder(page, expected):
    """The finder flags what a browser would fetch from the network, and nothing it only links to."""
    assert len(remote_references(page)) == expected


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The site make test built just before the suite; built here (about a minute) when it is missing."""
    if (BUILT_SITE / "index.html").is_file():
        return BUILT_SITE
    out = tmp_path_factory.mktemp("html")
    subprocess.run([sys.executable, "-m", "sphinx", "-E", "-q", "-b", "html", str(DOCS), str(out)], check=True)
    return out


def test_built_site_loads_nothing_from_the_network(built_site):
    """No page or stylesheet of the site refers to a remote script, stylesheet, font or image."""
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) > 20, "the site has its pages"
    bad = [f"{p.relative_to(built_site)}: {ref}" for p in pages for ref in remote_references(p.read_text("utf-8"))]
    for css in sorted((built_site / "_static").rglob("*.css")):
        bad += [f"{css.relative_to(built_site)}: {url}" for url in CSS_REMOTE.findall(css.read_text("utf-8"))]
    assert not bad, f"the site loads from the network: {bad[:10]}"


def test_built_site_ships_the_mathjax_its_pages_load(built_site):
    """The theory page loads MathJax from the site's own _static folder, and the file is there."""
    page = (built_site / "theory.html").read_text("utf-8")
    srcs = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', page, re.I)
    assert len(srcs) == 1, srcs
    assert (built_site / srcs[0].split("?")[0]).is_file()
    assert page.count('class="math notranslate nohighlight"') > 500  # the formulas it typesets


def test_built_figures_open_full_size_on_click(built_site):
    """Every figure of figures/ shown in the site is a link to its full-size image (click to enlarge)."""
    pages = [built_site / "gallery.html", *sorted((built_site / "findings").glob("*.html"))]
    shown = 0
    for page in pages:
        text = page.read_text("utf-8")
        for img in re.finditer(r'(<a [^>]*href="([^"]+)"[^>]*>\s*)?<img [^>]*src="([^"]+\.png)"', text):
            shown += 1
            assert img[1] is not None and img[2] == img[3], f"{page.name}: {img[3]} is not a link to itself"
    assert shown >= len(list((ROOT / "figures").glob("*.png")))


# ----------------------------------------------------------------------------- the executed tutorials

TUTORIALS = sorted((DOCS / "tutorials").glob("plot_*.py"))


def test_tutorials_exist_and_the_index_lists_them_in_order():
    """The tutorials of issue 21 (number 3, the PyTorch one, came with the importers of issue 20) and their index."""
    assert [p.stem for p in TUTORIALS] == [
        "plot_1_paper_in_five_minutes",
        "plot_2_train_attention",
        "plot_3_pytorch",
        "plot_4_dask_sweep",
    ]
    readme = (DOCS / "tutorials" / "README.rst").read_text(encoding="utf-8")
    assert re.findall(r"^(\d)\. \*\*", readme, re.M) == ["1", "2", "3", "4"]


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.stem)
def test_built_tutorial_shows_its_output_and_figures_and_ran_under_a_minute(built_site, script):
    """Each tutorial page has printed output and at least one figure, and the script ran in under 60 s."""
    page = (built_site / "auto_tutorials" / f"{script.stem}.html").read_text("utf-8")
    assert page.count('class="sphx-glr-script-out') >= 1, "no printed output on the page"
    images = re.findall(r'<img [^>]*src="\.\./(_images/sphx_glr_[^"]+\.png)"', page)
    assert images, "no figure on the page"
    for src in images:
        assert (built_site / src).is_file()
    assert "Traceback" not in page
    minutes, seconds = map(float, re.search(r"\(\s*(\d+) minutes\s+([\d.]+) seconds\)", page).groups())
    assert 60 * minutes + seconds < 60
    index = (built_site / "auto_tutorials" / "index.html").read_text("utf-8")
    assert f'href="{script.stem}.html' in index
