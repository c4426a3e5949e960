"""What a release needs, checked against each other: one version, the license metadata, the citation.

The version is written in four places that nothing derives from one another (pyproject.toml,
``reduced_dynamics.__version__``, CITATION.cff and the top entry of CHANGELOG.md); they must agree.
The build itself (``python -m build``, ``twine check``, the wheel installed into a clean venv and
run) is ``make dist-check``, part of ``make test``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import reduced_dynamics

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package (pip vendors it too)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _cff_value(key: str, text: str | None = None) -> str:
    """A top-level scalar of CITATION.cff (``key: value``, value optionally quoted)."""
    text = text if text is not None else (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    match = re.search(rf"^{key}: *\"?([^\"\n]+)\"?$", text, re.M)
    assert match, f"CITATION.cff has no top-level {key}"
    return match.group(1).strip()


def _versions() -> dict[str, str]:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return {
        "pyproject.toml": PYPROJECT["project"]["version"],
        "reduced_dynamics.__version__": reduced_dynamics.__version__,
        "CITATION.cff": _cff_value("version"),
        "CHANGELOG.md (top entry)": re.search(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M).group(1),
    }


def test_one_version_everywhere():
    versions = _versions()
    assert len(set(versions.values())) == 1, versions
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions["pyproject.toml"])


def test_changelog_entries_are_newest_first_and_distinct():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    entries = [tuple(map(int, v.split("."))) for v in re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)]
    assert len(entries) >= 2
    assert entries == sorted(set(entries), reverse=True)


def test_license_is_an_spdx_expression_with_its_file():
    """PEP 639 metadata (no setuptools deprecation of the old ``license = {text = ...}`` table)."""
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project.get("classifiers", ()))  # PEP 639 forbids both
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    requires = PYPROJECT["build-system"]["requires"]
    setuptools = [r for r in requires if r.startswith("setuptools")]
    assert setuptools and tuple(map(int, re.search(r">=(\d+)", setuptools[0]).group(1).split("."))) >= (77,)
    assert _cff_value("license") == "MIT"


@pytest.mark.parametrize("extra", ["test", "docs"])
def test_the_tools_make_test_uses_are_in_its_extras(extra):
    """make test installs .[test,docs,...]: the packaging tools and the documentation's extensions are there."""
    needed = {
        "test": {"pytest", "build", "twine", "setuptools"},
        "docs": {"sphinx", "sphinx-mathjax-offline", "pydata-sphinx-theme", "sphinx-gallery"},
    }[extra]
    names = {
        re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in PYPROJECT["project"]["optional-dependencies"][extra]
    }
    assert needed <= names


def test_citation_cites_the_paper_as_the_documentation_names_it():
    """The paper's title, authors and arXiv id in CITATION.cff are those docs/theory.md and the README give."""
    cff = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert cff.startswith("# ") and "cff-version: 1.2.0" in cff
    preferred = cff[cff.index("preferred-citation:") :]
    title = re.search(r'^  title: "([^"]+)"$', preferred, re.M).group(1)
    theory = " ".join((ROOT / "docs" / "theory.md").read_text(encoding="utf-8").split())
    assert f"*{title}*" in theory
    assert re.findall(r"family-names: (\w+)", preferred) == ["He", "Pan", "Chen", "Yang"]
    assert "He, Pan, Chen, Yang" in (ROOT / "README.md").read_text(encoding="utf-8")
    arxiv = re.search(r"arXiv:(\d{4}\.\d{5})", preferred).group(1)
    assert f"arXiv {arxiv}" in theory and "ICML 2025" in theory
