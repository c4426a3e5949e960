"""The fast validation of a grid (issue 23): the same points, configurations and keys as before, and every refusal kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reduced_dynamics.sweep import commands
from reduced_dynamics.sweep.runner import plan_sweep

FIXTURE = Path(__file__).with_name("data") / "keys_before_issue23.json"


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_keys_unchanged(recorded, monkeypatch):
    """Every spec's points have the argv, configuration and store key recorded from the code before the change."""
    monkeypatch.setattr(commands, "package_version", lambda: recorded["version"])
    for name, case in recorded["specs"].items():
        plan = plan_sweep(case["spec"])
        got = [
            {"argv": list(i.argv), "config": json.loads(json.dumps(i.config)), "key": i.key} for i in plan.invocations
        ]
        assert got == case["points"], name
        assert plan.n_duplicates == case["n_duplicates"], name


def test_fast_path_matches_validate():
    """PointValidator gives each point exactly what validate() gives (argv, config, key)."""
    from reduced_dynamics.sweep.spec import load_spec

    spec = load_spec(
        {
            "command": "run",
            "seeds": 2,
            "fixed": {"t-end": 10.0, "mu0": "1,-1"},
            "axes": {"omega0": ["0.1,-0.1", "0.2,-0.3"], "d": [2, 3], "init": ["random", "symmetric"]},
        }
    )
    v = commands.PointValidator(spec.command, spec.fixed)
    for p in spec.iter_points():
        assert v.validate(p) == commands.validate(spec.command, p)
    assert v.runs < spec.n_points


def _count_main(monkeypatch, command_module):
    calls = []
    main = command_module.main

    def counted(args):
        calls.append(1)
        return main(args)

    monkeypatch.setattr(command_module, "main", counted)
    return calls


def test_grid_of_seeds_runs_main_once_per_setting(monkeypatch):
    """Issue 23: 4000 points differing in --seed and --prompts only run `risk`'s checks twice, not 4000 times."""
    from reduced_dynamics.cli import risk

    calls = _count_main(monkeypatch, risk)
    plan = plan_sweep(
        {"command": "risk", "seeds": 1000, "axes": {"prompts": [100, 200], "L": [10, 20]}, "fixed": {"d": 3}}
    )
    assert len(plan.invocations) == 4000
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("axes", "flag"),
    [
        ({"seed": [0, 1, -1]}, "`--seed`"),
        ({"prompts": [100, 1]}, "`--prompts`"),
        ({"seed": [0, 2], "prompts": [5, 1]}, "`--prompts`"),
    ],
)
def test_replayed_checks_still_refuse(axes, flag):
    """A point whose only bad value is an option checked alone is refused, naming its flag (the check is replayed)."""
    with pytest.raises(ValueError, match=flag) as info:
        plan_sweep({"command": "risk", "axes": axes})
    assert str(info.value).startswith("point (")


def test_written_arguments_replayed():
    """`run` sets --heads from --omega0 (a write to its arguments): points reusing its checks get the same heads."""
    plan = plan_sweep(
        {"command": "run", "seeds": 3, "fixed": {"t-end": 10.0, "mu0": "1,-1,2"}, "axes": {"omega0": ["0.1,-0.1,0.3"]}}
    )
    assert [i.config["heads"] for i in plan.invocations] == [3, 3, 3]


def test_run_grid_of_seeds_checks_each_start(monkeypatch):
    """`run`'s checks run once per setting; each seed's random start is still drawn and checked (replayed)."""
    from reduced_dynamics.cli import run

    calls = _count_main(monkeypatch, run)
    starts = []
    check = run._check_starts
    monkeypatch.setattr(run, "_check_starts", lambda seed, *a: (starts.append(seed), check(seed, *a))[1])
    plan = plan_sweep({"command": "run", "seeds": 200, "fixed": {"t-end": 10.0}, "axes": {"L": [10, 20]}})
    assert len(plan.invocations) == 400
    assert len(calls) == 2
    assert sorted(starts) == sorted(list(range(200)) * 2)


def test_run_start_outside_domain_refused_on_a_reused_point(monkeypatch):
    """A seed whose start is outside the domain is refused although its setting's checks were reused."""
    from reduced_dynamics.cli import run

    def check(seed, *a):
        if seed == 3:
            raise OverflowError("the start `y0` is outside the domain (lower `--init-scale`)")

    monkeypatch.setattr(run, "_check_starts", check)
    with pytest.raises(ValueError, match=r"point \(seed=3\): run: .*`--init-scale`"):
        plan_sweep({"command": "run", "seeds": 5, "fixed": {"t-end": 10.0}})
