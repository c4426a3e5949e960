"""Numbers quoted in the documentation still match what their commands print.

Each row names a page, the number as the page writes it, the command the page cites for it, the field
of the command's ``--json`` output, and the format the page rounds it to. The test runs the command
(in process, through ``reduced_dynamics.cli.main``) and compares the printed value, rounded as the page
rounds it, with the quoted text; so a change of the code that moves a quoted number fails here, and so
does an edit of the page that no longer says what the command prints. The expected values are the
pages' text, not the code's.

The rows are a representative set: commands that run in about a second at the size the page quotes.
Numbers that are full-size only (the full ``check`` run, paper-scale trainings, benchmarks, sweeps,
figures) are listed in docs/findings/index.md under "Which numbers are tested"; the Python examples of
docs/index.md and docs/python.md are checked by tests/test_docs_build.py.
"""

from __future__ import annotations

import contextlib
import io
import json
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

SQUARE = ("run", "--activation", "square", "--activation-c", "1", "--json")
MULTITASK_H2 = ("run", "--d", "6", "--tasks", "1-4,3-6", "--heads", "2", "--json")

#: (page, quoted text, command, JSON field (dotted; [i] indexes a list), format of the quoted number)
QUOTED = [
    ("findings/exact_risk.md", "ω* = 0.517905", ("single-head", "--L", "40", "--json"), "omega", "{:.6f}"),
    ("findings/exact_risk.md", "0.406455", ("single-head", "--L", "160", "--json"), "omega", "{:.6f}"),
    ("findings/exact_risk.md", "ω∞ = 0.352419", ("single-head", "--L", "40", "--json"), "omega_limit", "{:.6f}"),
    ("findings/paper_claims.md", "ω* = 0.5179 at L = 40", ("single-head", "--L", "40", "--json"), "omega", "{:.4f}"),
    ("findings/paper_claims.md", "ω∞ = 0.3524", ("single-head", "--L", "40", "--json"), "omega_limit", "{:.4f}"),
    ("findings/activations.md", "measured 0.0229 vs 0.0231", SQUARE, "gamma", "{:.4f}"),
    ("findings/activations.md", "measured 0.0229 vs 0.0231", SQUARE, "gamma_drift_law", "{:.4f}"),
    ("findings/activations.md", "0.88188\nclaimed vs 0.87867 actual for square", SQUARE, "eta_claim", "{:.5f}"),
    ("findings/activations.md", "0.88188\nclaimed vs 0.87867 actual for square", SQUARE, "eta_tilt", "{:.5f}"),
    ("findings/activations.md", "η* = 0.87912", SQUARE, "eta_star", "{:.5f}"),
    ("findings/multitask.md", "0.4022, 0.2397 and 0.1993", MULTITASK_H2, "loss_per_task[0]", "{:.4f}"),
    ("findings/multitask.md", "0.4022, 0.2397 and 0.1993", MULTITASK_H2, "loss_per_task[1]", "{:.4f}"),
    (
        "findings/multitask.md",
        "| 2 | one weighted debiased GD shared by both tasks | 0.2397 |",
        MULTITASK_H2,
        "loss_per_task[0]",
        "{:.4f}",
    ),
]


@cache
def _json_of(command: tuple[str, ...]) -> dict:
    from reduced_dynamics.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(list(command))
    assert status == 0, f"reduced-dynamics {' '.join(command)} exited {status}"
    return json.loads(out.getvalue())


def _field(data: dict, path: str) -> float:
    for part in path.split("."):
        name, _, index = part.partition("[")
        data = data[name]
        if index:
            data = data[int(index.rstrip("]"))]
    return float(data)


@pytest.mark.parametrize(
    ("page", "quoted", "command", "field", "fmt"),
    QUOTED,
    ids=[f"{page}:{field}:{' '.join(cmd[:3])}" for page, _, cmd, field, _ in QUOTED],
)
def test_quoted_number_is_what_its_command_prints(page, quoted, command, field, fmt):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert quoted in text, f"{page} no longer quotes {quoted!r}"
    assert f"reduced-dynamics {command[0]}" in text, f"{page} does not cite the command it quotes"
    printed = fmt.format(_field(_json_of(command), field))
    assert printed in quoted, (
        f"{page} quotes {quoted!r}; `reduced-dynamics {' '.join(command)}` prints {field} = {printed}"
    )
