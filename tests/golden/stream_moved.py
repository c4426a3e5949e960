"""Record the golden numbers that a Monte Carlo stream version moved (``tests/golden/stream<N>_moved.json``).

Usage (from the repository root)::

    python tests/golden/stream_moved.py --version N CASE [CASE ...] [--figures]

For each named CLI case (and, with ``--figures``, each figure of ``figures --quick``) it runs the
recorded command with this checkout, walks the expected output (the recording, with the numbers that the
tables of earlier stream versions moved replaced by their last values) next to the new one exactly as
``tests/test_golden.py`` compares them, and stores every leaf (number, text line, array record) that
no longer matches as ``{label: {path: [before, new]}}``. ``tests/test_golden.py`` (``STREAM_MOVED``)
chains the tables: the recorded value must be the first entry, each table's ``before`` the previous
table's ``after``, and the new output must match the last; everything else is still compared with the
original recording, which is not rewritten. Run only for a documented stream change (CHANGELOG.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import test_golden as tg  # noqa: E402


def _leaves(expected, actual, path, key, out, chain):
    if key in tg.IGNORED_KEYS or key in tg.FREE_TEXT_KEYS:
        return
    if path in chain:  # moved by an earlier stream version: compare with where it went
        expected = chain[path][-1]
    if isinstance(expected, dict) and not tg._is_array_record(expected) and isinstance(actual, dict):
        actual = dict(actual)
        for old, new in tg.RENAMED_KEYS.items():
            if old in expected and old not in actual and new in actual:
                actual[old] = actual[new]
        for k in expected:
            if k in actual:
                _leaves(expected[k], actual[k], f"{path}.{k}" if path else k, k, out, chain)
        return
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (e, a) in enumerate(zip(expected, actual)):
            _leaves(e, a, f"{path}[{i}]", key, out, chain)
        return
    diff = tg._Diff(tg.RTOL, tg.ATOL)
    tg.compare(expected, actual, path, diff, key=key)
    if diff.errors:
        out[path] = [expected, actual]


def moved(label, expected, actual, chains):
    out: dict = {}
    chain = chains.get(label, {})
    for k in sorted(set(expected) - tg.META_KEYS - tg.FREE_TEXT_KEYS - {"exit"}):
        if k in actual:
            _leaves(expected[k], actual[k], k, k, out, chain)
    return out


def main(argv):
    if "--version" not in argv:
        raise SystemExit("usage: stream_moved.py --version N CASE [CASE ...] [--figures]")
    i = argv.index("--version")
    version = int(argv[i + 1])
    argv = argv[:i] + argv[i + 2 :]
    OUT = Path(__file__).resolve().parent / f"stream{version}_moved.json"
    chains = tg._chain_tables({v: t for v, t in tg.STREAM_TABLES.items() if v < version})
    table = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}
    cases = [a for a in argv if not a.startswith("--")]
    for case in cases:
        exp = tg.CLI_BASELINE[case]
        table[case] = moved(case, exp, tg.record.run_case(exp["argv"]), chains)
    if "--figures" in argv:
        run = tg.record.run_figures()
        for fig, rec in tg.FIGURES_BASELINE["figures"].items():
            exp, act = {"npz": rec}, {"npz": run["figures"][fig]}
            if fig in tg.FIGURES_BASELINE["json"]:
                exp["json"], act["json"] = tg.FIGURES_BASELINE["json"][fig], run["json"].get(fig)
            m = moved(f"figure {fig}", exp, act, chains)
            if m:
                table[f"figure {fig}"] = m
    table = {k: v for k, v in sorted(table.items()) if v}
    OUT.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: " + ", ".join(f"{k} ({len(v)})" for k, v in table.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
