"""The sweep specification: expansion of axes, and one clear error for every bad spec before any work."""

import pytest

from reduced_dynamics.sweep import load_spec, plan_sweep

BASE = {"command": "run", "fixed": {"t-end": 10.0}}


def test_grid_order_and_sizes():
    spec = load_spec(
        {
            "command": "run",
            "seeds": 2,
            "fixed": {"t-end": 10.0},
            "axes": {"heads": [2, 3], "L": {"range": [10, 31, 10]}},
            "zip": [{"d": [2, 5], "sigma2": [0.5, 0.1]}],
        }
    )
    pts = spec.points()
    assert spec.n_points == len(pts) == 2 * 3 * 2 * 2
    assert spec.axis_names == ["heads", "L", "d", "sigma2", "seed"]
    # the last factor (seeds) varies fastest, zip groups move together
    assert [p["seed"] for p in pts[:4]] == [0, 1, 0, 1]
    assert {(p["d"], p["sigma2"]) for p in pts} == {(2, 0.5), (5, 0.1)}
    assert sorted({p["L"] for p in pts}) == [10, 20, 30]
    assert all(p["t_end"] == 10.0 for p in pts)


@pytest.mark.parametrize(
    ("axis", "expected"),
    [
        ({"linspace": [0.0, 1.0, 5]}, [0.0, 0.25, 0.5, 0.75, 1.0]),
        ({"logspace": [0.01, 1.0, 3]}, [0.01, 0.1, 1.0]),
        ({"range": [5, 0, -2]}, [5, 3, 1]),
        ([0.3], [0.3]),
    ],
)
def test_axis_forms(axis, expected):
    spec = load_spec(
        {**BASE, "axes": {"sigma2": axis}}
        if not isinstance(axis, dict) or "range" not in axis
        else {**BASE, "axes": {"L": axis}}
    )
    vals = [v for _, v in spec.axes][0]
    assert vals == pytest.approx(expected, rel=1e-12)


def test_logspace_of_an_integer_option_is_rounded():
    spec = load_spec({**BASE, "axes": {"L": {"logspace": [10, 1000, 3]}}})
    assert spec.axes[0][1] == [10, 100, 1000]
    assert all(isinstance(v, int) for v in spec.axes[0][1])


def test_quick_overrides_key_by_key():
    spec = {
        "command": "run",
        "seeds": [0, 1, 2],
        "fixed": {"t-end": 1e5, "d": 5},
        "axes": {"heads": [2, 3, 4], "L": [20, 40]},
        "quick": {"seeds": [0], "fixed": {"t-end": 10.0, "L": 8}, "axes": {"heads": [2], "d": [2, 3]}},
    }
    q = load_spec(spec, quick=True)
    assert q.seeds == (0,)
    assert q.fixed == {"t_end": 10.0, "L": 8}  # the quick axis `d` replaces the fixed d; the quick fixed L the axis
    assert dict(q.axes) == {"heads": [2], "d": [2, 3]}
    full = load_spec(spec)
    assert full.n_points == 3 * 3 * 2 and q.n_points == 2


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"command": "nope"}, "`command`"),
        ({"fixed": {}}, "`command`"),
        ({**BASE, "axes": {"heads": []}}, "`axes.heads`"),
        ({**BASE, "axes": {"headz": [1]}}, "`axes.headz`"),
        ({**BASE, "fixed": {"out": "x"}}, "`fixed.out`"),
        ({**BASE, "axes": {"t_end": [1.0]}}, "set twice"),  # fixed and axis
        ({**BASE, "axes": {"L": {"range": [1, 5]}}}, "`axes.L`"),
        ({**BASE, "axes": {"L": {"range": [1.5, 5, 1]}}}, "`axes.L`"),
        ({**BASE, "axes": {"sigma2": {"logspace": [0, 1, 3]}}}, "`axes.sigma2`"),
        ({**BASE, "axes": {"sigma2": [0.1, 0.1]}}, "`axes.sigma2`"),
        ({**BASE, "zip": [{"d": [2, 3], "L": [10]}]}, "`zip[0]`"),
        ({**BASE, "seeds": 0}, "`seeds`"),
        ({**BASE, "seeds": [1, 1]}, "`seeds`"),
        ({**BASE, "seeds": 2, "axes": {"seed": [1]}}, "`seeds`"),
        ({"command": "check", "seeds": 2}, "`seeds`"),  # check has no --seed
        ({**BASE, "colour": 1}, "`colour`"),
        ({**BASE, "quick": {"steps": 1}}, "`quick.steps`"),
    ],
)
def test_bad_specs_are_one_error(spec, named):
    with pytest.raises(ValueError) as err:
        load_spec(spec)
    assert named in str(err.value)


def test_quick_without_quick_table():
    with pytest.raises(ValueError, match="`quick`"):
        load_spec(BASE, quick=True)


@pytest.mark.parametrize(
    ("axes", "flag"),
    [
        ({"L": [10, 0]}, "`--L`"),
        ({"sigma2": [-1.0]}, "`--sigma2`"),
        ({"rtol": [1.0]}, "`--rtol`"),
        ({"heads": ["x"]}, "--heads"),
    ],
)
def test_bad_values_are_caught_before_any_point_runs(axes, flag, monkeypatch):
    # the command's own validation (a dry run of its main), naming the point and the flag; nothing runs
    import reduced_dynamics.sweep.commands as commands

    monkeypatch.setattr(commands, "run_point", lambda argv: pytest.fail("a point ran"))
    with pytest.raises(ValueError) as err:
        plan_sweep({**BASE, "axes": axes})
    assert flag in str(err.value) and "point (" in str(err.value)


def test_toml_file(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('command = "run"\nseeds = 2\n[fixed]\nt-end = 10.0\n[axes]\nheads = [2, 3]\n')
    spec = load_spec(p)
    assert spec.name == "s" and spec.n_points == 4
    p.write_text("command = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_spec(p)
    with pytest.raises(ValueError, match="no such file"):
        load_spec(tmp_path / "missing.toml")


# ----------------------------------------------------------------------------- issue 23: sizes decided first


@pytest.mark.parametrize(
    ("spec", "named", "count"),
    [
        ({**BASE, "axes": {"L": {"range": [1, 10**12, 1]}}}, "`axes.L`", "999999999999"),
        ({**BASE, "axes": {"sigma2": {"linspace": [0.1, 1.0, 10**11]}}}, "`axes.sigma2`", "100000000000"),
        ({**BASE, "axes": {"sigma2": {"logspace": [0.1, 1.0, 10**7]}}}, "`axes.sigma2`", "10000000"),
        ({**BASE, "seeds": 10**12}, "`seeds`", "1000000000000"),
        ({**BASE, "seeds": {"range": [0, 10**15, 1]}}, "`axes.seeds`", "1000000000000000"),
        # each axis is small, the grid is not: the product is refused before the grid is listed
        ({**BASE, "axes": {"L": {"range": [1, 10**4, 1]}, "d": {"range": [1, 10**4, 1]}}}, "`axes`", "99980001"),
    ],
)
def test_axis_sizes_are_counted_before_the_lists_are_built(spec, named, count):
    """A range of 10¹² values was a MemoryError traceback and a linspace of 10¹¹ one after 33 s at 3.5 GB: the
    point cap was checked after the list was built. The count is arithmetic now; under a 200 MB allocation cap
    (more than the refused lists would need by orders of magnitude) the refusal is immediate."""
    import resource
    import time

    from reduced_dynamics.sweep.spec import MAX_POINTS

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    t0 = time.perf_counter()
    resource.setrlimit(resource.RLIMIT_AS, (vm + 200 * 2**20, hard))
    try:
        with pytest.raises(ValueError) as err:
            load_spec(spec)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert time.perf_counter() - t0 < 1.0
    assert named in str(err.value) and count in str(err.value) and str(MAX_POINTS) in str(err.value)


def test_a_range_of_exactly_the_cap_is_accepted_and_counted_without_listing_the_grid():
    from reduced_dynamics.sweep.spec import MAX_POINTS

    spec = load_spec({**BASE, "axes": {"L": {"range": [1, MAX_POINTS + 1, 1]}}})
    assert spec.n_points == MAX_POINTS
    first = next(spec.iter_points())
    assert first == {"t_end": 10.0, "L": 1}


def test_plan_sweep_reports_validation_progress():
    """Validating a point takes about a millisecond, so a 10⁶-point grid validates for minutes: plan_sweep reports
    each point it validated (the command line writes a line every 2 s)."""
    seen = []
    plan = plan_sweep({**BASE, "axes": {"L": [10, 20, 30]}}, progress=lambda i, n: seen.append((i, n)))
    assert seen == [(1, 3), (2, 3), (3, 3)] and len(plan.invocations) == 3
    with pytest.raises(TypeError, match="`progress`"):
        plan_sweep(BASE, progress=3)


@pytest.mark.parametrize("name", ["a\nb", "tab\there", "del\x7f", "x" * 201, " padded", "../up", ".hidden", ""])
def test_a_name_that_is_not_a_safe_file_name_is_refused(name):
    """A name holding a newline was accepted as the manifest's file name (issue 23)."""
    with pytest.raises(ValueError, match="`name`"):
        load_spec({**BASE, "name": name})


def test_a_name_of_ordinary_characters_is_accepted():
    assert load_spec({**BASE, "name": "risk vs L (σ² = 0.1)"}).name == "risk vs L (σ² = 0.1)"


@pytest.mark.parametrize("path", ["/etc/passwd", "/dev/null", "/tmp"])
def test_a_sigma_that_is_not_a_npy_file_is_refused_before_any_point_runs(path):
    """A spec's `sigma = "/etc/passwd"` made the sweep open any readable file as .npy: the point's dry run reads the
    header only (a text file, a device, a folder are refused), naming `--sigma`."""
    with pytest.raises(ValueError, match="`--sigma`"):
        plan_sweep({**BASE, "fixed": {**BASE["fixed"], "sigma": path}})
