"""scripts/precond_experiment.py (--quick, a few steps): trains every run, resumes/skips, writes a consistent report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "precond_experiment.py"


def _load():
    spec = importlib.util.spec_from_file_location("precond_experiment", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_train_resume_and_report(tmp_path, capsys):
    mod = _load()
    out = tmp_path / "runs"
    argv = ["train", "--quick", "--steps", "30", "--steps-for", "40=20", "--out", str(out), "--checkpoint-every", "10"]
    assert mod.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["L20_H2", "L20_H3", "L40_H2", "L40_H3"]
    capsys.readouterr()
    assert mod.main(argv) == 0  # finished runs are skipped, not retrained
    assert capsys.readouterr().out.count(": done (") == 4
    assert (
        mod.main(["report", "--quick", "--steps", "30", "--steps-for", "40=20", "--out", str(out), "--n-eval", "300"])
        == 0
    )
    rep = json.loads((out / "report.json").read_text())
    S = np.array(rep["Sigma"])
    np.testing.assert_allclose(np.linalg.eigvalsh(S), np.linspace(0.5, 4.0, 5), atol=1e-12)
    assert [(r["L"], r["H"], r["steps"]) for r in rep["runs"]] == [(20, 2, 30), (20, 3, 30), (40, 2, 20), (40, 3, 20)]
    for r in rep["runs"]:
        assert len(r["kq_cosine_sigma_inv"]) == r["H"] and np.array(r["kq"]).shape == (r["H"], 5, 5)
        d = r["diffs"]["model-dpgd_optimal"]
        assert abs(d["risk"] - (r["risks"]["model"]["risk"] - r["risks"]["dpgd_optimal"]["risk"])) < 1e-12
        assert r["optimal_distance_sigma_inv"] > 0 and len(r["loss_windows"]["mean"]) == 5


def test_bad_steps_for_is_exit_2(capsys):
    assert _load().main(["train", "--quick", "--steps-for", "40:10"]) == 2
    assert "`--steps-for`" in capsys.readouterr().err
