"""The theory document, docs/theory.md: its anchors, the commands it cites, and two of its derivations.

* every ``docs/theory.md#<anchor>`` cited anywhere in the repository (``*.py``, ``*.md``) is a
  heading of the document (GitHub's slug rule, which MyST's heading anchors follow);
* no file of the repository refers to the external theory summary the document replaces;
* every ``pytest tests/...::name`` node id, ``scripts/...py`` path and ``reduced-dynamics``
  command cited in the document exists;
* two formulas that the document derives and no other test covers: the per-head form of the
  gradient of L̃ and the lower bound L̃ >= 1 + σ² − η* behind "no finite minimiser".
"""

from __future__ import annotations

import ast
import math
import os
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "docs" / "theory.md"

#: Directories never searched: VCS data, virtual environments, caches, build and run outputs.
PRUNE_DIRS = {
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    "_build",
    "build",
    "dist",
    "results",
    "node_modules",
}
#: ``docs/theory.md#anchor`` written literally as an example of the citation syntax (docs/_ext).
PLACEHOLDER_ANCHORS = {"anchor"}
#: The name of the external summary that docs/theory.md replaces, built so this file does not contain it.
FORBIDDEN_NAME = "THEORY" + ".md"

CITATION = re.compile(r"\btheory\.md#([A-Za-z0-9_-]+)")
LOCAL_LINK = re.compile(r"\]\(#([^)\s]+)\)")
NODE_ID = re.compile(r"pytest\s+(tests/[\w/.-]+\.py)::(\w+)")
SCRIPT = re.compile(r"(?<![\w/])((?:scripts|benchmarks)/[\w/.-]+\.py)\b")
COMMAND = re.compile(r"\breduced-dynamics\s+([a-z][\w-]*)")
ONLY = re.compile(r"\breduced-dynamics\s+(check|figures)\b[^`\n]*?--only\s+([\w,]+)")


def _repo_files(suffixes: tuple[str, ...] | None = None):
    """Files of the working tree (minus :data:`PRUNE_DIRS` and ``*.egg-info``), optionally by suffix."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in PRUNE_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if suffixes is None or name.endswith(suffixes):
                yield Path(dirpath) / name


def _read_text(path: Path) -> str | None:
    """The file as UTF-8 text, or None for binary files."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation other than ``-``/``_`` dropped, spaces -> ``-``."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())  # inline code keeps its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its label
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def heading_anchors(markdown: str) -> list[str]:
    """Anchors of the ATX headings outside fenced code blocks, duplicates suffixed ``-1``, ``-2``, ..."""
    anchors: list[str] = []
    seen: dict[str, int] = {}
    fence = None
    for line in markdown.splitlines():
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker:
            if fence is None:
                fence = marker.group(1)[0]
            elif stripped.startswith(fence * 3):
                fence = None
            continue
        if fence is not None:
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.append(slug if n == 0 else f"{slug}-{n}")
    return anchors


@cache
def theory_text() -> str:
    return THEORY.read_text(encoding="utf-8")


@cache
def theory_anchors() -> frozenset[str]:
    return frozenset(heading_anchors(theory_text()))


# ----------------------------------------------------------------------------- the slug rule


@pytest.mark.parametrize(
    "heading, slug",
    [
        ("Data model", "data-model"),
        ("Finite-L results", "finite-l-results"),
        ("Theorem 1", "theorem-1"),
        ("What's `new`, (really)?", "whats-new-really"),
    ],
)
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_duplicate_headings_get_numbered_anchors():
    md = "# A\n```\n# not a heading\n```\n## A\n### B c\n"
    assert heading_anchors(md) == ["a", "a-1", "b-c"]


# ----------------------------------------------------------------------------- anchors

REQUIRED_ANCHORS = {
    "data-model",
    "full-model",
    "emergent-patterns",
    "reduced-model",
    "approximate-loss",
    "corrected-loss",
    "gradient-flow",
    "stages",
    "solution-manifold",
    "drift-law",
    "single-head",
    "predictors",
    "theorem-1",
    "approximation",
    "optimality",
    "bayes-ratio",
    "finite-l-results",
    "deviations",
    "extensions",
}


def test_required_sections_exist():
    missing = REQUIRED_ANCHORS - theory_anchors()
    assert not missing, f"docs/theory.md lacks the sections {sorted(missing)}"


def test_every_cited_anchor_is_a_heading():
    """Every ``docs/theory.md#<anchor>`` in a ``*.py`` or ``*.md`` file resolves to a heading."""
    bad, n_citations = [], 0
    for path in _repo_files((".py", ".md")):
        text = _read_text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for anchor in CITATION.findall(line):
                if anchor in PLACEHOLDER_ANCHORS:
                    continue
                n_citations += 1
                if anchor not in theory_anchors():
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: #{anchor}")
    assert n_citations > 0, "no citation of docs/theory.md found: is the search broken?"
    assert not bad, "citations of missing sections:\n" + "\n".join(bad)


def test_links_inside_the_document_resolve():
    bad = [a for a in LOCAL_LINK.findall(theory_text()) if a not in theory_anchors()]
    assert not bad, f"links to missing sections of docs/theory.md: {bad}"


def test_no_file_mentions_the_external_summary():
    """docs/theory.md replaces an external summary that users cannot see; nothing may refer to it."""
    hits = []
    for path in _repo_files():
        text = _read_text(path)
        if text is not None and FORBIDDEN_NAME in text:
            hits.append(str(path.relative_to(ROOT)))
    assert not hits, f"files mentioning {FORBIDDEN_NAME}: {hits}"


# ----------------------------------------------------------------------------- cited commands


def _functions_of(path: Path) -> set[str]:
    """Names of module-level functions and of methods of module-level classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def test_cited_test_node_ids_exist():
    cited = sorted(set(NODE_ID.findall(theory_text())))
    assert len(cited) >= 20, "the document cites its tests as `pytest tests/...::name`"
    bad = []
    for rel, name in cited:
        path = ROOT / rel
        if not path.is_file():
            bad.append(f"{rel} (no such file)")
        elif name not in _functions_of(path):
            bad.append(f"{rel}::{name} (no such test)")
    assert not bad, "node ids cited in docs/theory.md that do not exist:\n" + "\n".join(bad)


def test_cited_scripts_exist():
    cited = sorted(set(SCRIPT.findall(theory_text())))
    assert cited, "the document cites scripts/...py commands"
    missing = [rel for rel in cited if not (ROOT / rel).is_file()]
    assert not missing, f"scripts cited in docs/theory.md that do not exist: {missing}"


def test_cited_commands_exist():
    """``reduced-dynamics <command>``, ``check --only <check>`` and ``figures --only <figure>`` name real things."""
    from proofs_check.checks import CHECKS
    from reduced_dynamics.cli import COMMANDS
    from reduced_dynamics.figures.registry import FIGURES

    text = theory_text()
    commands = set(COMMAND.findall(text))
    assert commands, "the document cites reduced-dynamics commands"
    bad = sorted(c for c in commands if c not in COMMANDS)
    known = {"check": set(CHECKS), "figures": set(FIGURES)}
    for command, names in ONLY.findall(text):
        bad += [f"{command} --only {n}" for n in names.split(",") if n not in known[command]]
    assert not bad, f"commands cited in docs/theory.md that do not exist: {bad}"


# ----------------------------------------------------------------------------- derivations of the document


@cache
def _derived_loss(H: int):
    """The package's derived L̃ for H heads and its symbols, found by name (independent of helper APIs)."""
    from reduced_dynamics.derive.symbolic import derive_approx_loss

    expr = derive_approx_loss(H)
    sym = {s.name: s for s in expr.free_symbols}
    omega = [sym[f"omega_{h}"] for h in range(1, H + 1)]
    mu = [sym[f"mu_{h}"] for h in range(1, H + 1)]
    return expr, omega, mu, sym["d"], sym["L"], sym["sigma2"]


def test_per_head_form_of_the_gradient():
    """docs/theory.md#gradient-flow: ∂L̃/∂μ_h = 2G(ω_h) and ∂L̃/∂ω_h = 2μ_h G'(ω_h) with
    G(w) = −(1−u)w + c Σ_j μ_j e^{dω_j w}, u = μᵀω, c = (1+σ²)/L (exact, H = 3)."""
    H = 3
    expr, omega, mu, d, L, sigma2 = _derived_loss(H)
    w = sp.Symbol("w", real=True)
    u = sum(m * o for m, o in zip(mu, omega))
    G = -(1 - u) * w + (1 + sigma2) / L * sum(mu[j] * sp.exp(d * omega[j] * w) for j in range(H))
    Gp = sp.diff(G, w)
    for h in range(H):
        assert sp.simplify(sp.diff(expr, mu[h]) - 2 * G.subs(w, omega[h])) == 0
        assert sp.simplify(sp.diff(expr, omega[h]) - 2 * mu[h] * Gp.subs(w, omega[h])) == 0


@cache
def _loss_function(H: int):
    expr, omega, mu, d, L, sigma2 = _derived_loss(H)
    return sp.lambdify((*omega, *mu, d, L, sigma2), expr, modules="numpy")


@given(
    H=st.integers(1, 4),
    data=st.data(),
    d=st.integers(1, 20),
    L=st.integers(1, 500),
    sigma2=st.floats(0.0, 4.0),
)
def test_approximate_loss_lower_bound(H, data, d, L, sigma2):
    """docs/theory.md#solution-manifold: for every state and every H,
    L̃ >= σ² + (1−u)² + c(Σμ)² + cd u² >= 1 + σ² − η*, η* = 1/(1 + cd) (the k >= 2 Taylor terms dropped)."""
    omega = np.array(data.draw(st.lists(st.floats(-1.0, 1.0), min_size=H, max_size=H)))
    mu = np.array(data.draw(st.lists(st.floats(-20.0, 20.0), min_size=H, max_size=H)))
    loss = float(_loss_function(H)(*omega, *mu, d, L, sigma2))
    c = (1.0 + sigma2) / L
    u = float(mu @ omega)
    partial = sigma2 + (1.0 - u) ** 2 + c * float(mu.sum()) ** 2 + c * d * u * u
    inf_loss = 1.0 + sigma2 - 1.0 / (1.0 + c * d)
    # rounding scale of the closed form: its largest terms, which may cancel (μ of both signs)
    scale = 1.0 + u * u + c * float(np.abs(mu) @ np.exp(d * np.outer(omega, omega)) @ np.abs(mu))
    tol = 1e-12 * scale
    assert loss >= partial - tol
    assert partial >= inf_loss - 1e-12
    assert math.isfinite(loss)
