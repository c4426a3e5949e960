"""The README's Python example runs as written and prints what the README says it prints."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Python\n") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_example_runs_and_matches_its_prose():
    """Run the example; compare three printed numbers with the values quoted in the prose below it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_python_example(), str(README), "exec"), {"__name__": "readme_example"})
    lines = out.getvalue().splitlines()
    ratio = float(lines[3])  # γ(t_end) / drift law
    assert abs(ratio - 1.0003) < 5e-5
    mu_line = lines[-2]  # optimal_mu([0.1, -0.1]) = ±μ_γ(0.1) = ±4.3954
    assert re.search(r"4\.3953\d*\s+-4\.3953", mu_line)
    excess, slack = map(float, lines[-1].split())
    assert abs(excess - 0.93657) < 1e-5 and abs(slack - 0.14876) < 1e-5
