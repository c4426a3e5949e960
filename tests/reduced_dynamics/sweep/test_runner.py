"""Running sweeps: same code path as the command, resume, failures recorded, corruption recomputed, any executor."""

import io
import json
import multiprocessing as mp

import pytest

from reduced_dynamics.cli import main as cli_main
from reduced_dynamics.sweep import LocalExecutor, ProgressBar, Store, plan_sweep, run_sweep

from .conftest import comparable, tiny_spec


def _strip(result):
    return {k: v for k, v in result.items() if k != "seconds"}


def test_a_point_is_the_command(tmp_path, spec, capsys):
    run = run_sweep(spec, out=tmp_path, workers=1)
    assert (run.n_points, run.n_done, run.n_failed, run.n_cached) == (4, 4, 0, 0)
    store = Store(tmp_path)
    for inv in plan_sweep(spec).invocations:
        rec = store.get(inv.key)
        # the same command typed by hand prints the same JSON (timing aside)
        capsys.readouterr()
        assert cli_main(list(inv.argv)) == 0
        direct = json.loads(capsys.readouterr().out)
        assert _strip(rec["result"]) == _strip(direct)


def test_rerun_skips_finished_points(tmp_path, spec, monkeypatch):
    run_sweep(spec, out=tmp_path, workers=1)
    import reduced_dynamics.sweep.commands as commands

    monkeypatch.setattr(commands, "run_point", lambda argv: pytest.fail("a finished point ran again"))
    again = run_sweep(spec, out=tmp_path, workers=1)
    assert (again.n_done, again.n_cached) == (4, 4)


def test_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    # plain SGD at lr 10 diverges within a few steps: `train` exits 3 (failed numerically), a result of the sweep
    spec = {
        "command": "train",
        "name": "lr",
        "fixed": {"steps": 20, "optimizer": "sgd", "d": 2, "L": 4, "batch": 8, "eval-prompts": 64},
        "axes": {"lr": [1e-3, 10.0, 2e-3]},
    }
    run = run_sweep(spec, out=tmp_path, workers=1)
    assert (run.n_done, run.n_failed) == (2, 1)
    (failure,) = run.failures
    assert failure["params"]["lr"] == 10.0 and "failed numerically" in failure["error"] and "`--lr`" in failure["error"]
    _, rows = comparable(tmp_path)
    assert sorted(r["status"] for r in rows) == ["done", "done", "failed"]
    # a recorded failure is a finished point; --retry-failed runs it again
    assert run_sweep(spec, out=tmp_path, workers=1).n_cached == 3
    assert run_sweep(spec, out=tmp_path, workers=1, retry_failed=True).n_cached == 2


def test_a_start_outside_the_domain_is_refused_before_any_point_runs(tmp_path):
    """omega0 = ±30 passed the dry run and overflowed in the flow: cached as a failed point, the sweep exited 1
    (issue 23). The start is checked before the command's Progress now: the sweep is refused up front."""
    spec = tiny_spec(axes={"omega0": ["0.1,-0.1", "30,-30"]}, fixed={"t-end": 1.0, "mu0": "1,1", "n_eval": 5})
    spec.pop("seeds")
    with pytest.raises(ValueError, match="point \\(omega0='30,-30'\\).*`--omega0`"):
        plan_sweep(spec)
    with pytest.raises(ValueError):
        run_sweep(spec, out=tmp_path, workers=1)
    assert Store(tmp_path).records() == []


def test_a_point_refusing_its_input_when_run_is_not_stored(tmp_path, spec, monkeypatch):
    """Bad input that only the run itself sees (its command exits 2) is not a result: it is not stored (so it is
    not skipped as "failed" next time), the other points run and are stored, and the sweep raises ValueError
    naming the point (the command line: exit 2)."""
    import reduced_dynamics.sweep.commands as commands

    real = commands.run_point

    def refuses_heads_3(argv):
        if "--heads" in argv and argv[argv.index("--heads") + 1] == "3" and "--seed" in argv:
            return {**real(argv), "exit_code": 2, "result": None, "error": "reduced-dynamics run: error: `--x` bad"}
        return real(argv)

    monkeypatch.setattr(commands, "run_point", refuses_heads_3)
    with pytest.raises(ValueError, match="point \\(heads=3, seed=0\\): run: error: `--x` bad") as err:
        run_sweep(spec, out=tmp_path, workers=1)
    assert "2 points refused" in str(err.value)
    recs = Store(tmp_path).records()
    assert len(recs) == 2 and {r["params"]["heads"] for r in recs} == {2}


def test_truncated_record_is_recomputed(tmp_path, spec):
    run_sweep(spec, out=tmp_path, workers=1)
    before = comparable(tmp_path)
    key = plan_sweep(spec).invocations[2].key
    p = Store(tmp_path).path(key)
    p.write_bytes(p.read_bytes()[:100])
    run = run_sweep(spec, out=tmp_path, workers=1)
    assert (run.n_corrupt, run.n_cached, run.n_done) == (1, 3, 4)
    assert comparable(tmp_path) == before


def test_results_do_not_depend_on_the_executor(tmp_path, spec):
    run_sweep(spec, out=tmp_path / "serial", workers=1)
    with LocalExecutor(2) as ex:
        run = run_sweep(spec, out=tmp_path / "pool", executor=ex)
    assert run.executor == "local:2"
    assert comparable(tmp_path / "serial") == comparable(tmp_path / "pool")  # bit for bit: floats compared exactly
    workers = {s: {r["worker"] for r in Store(tmp_path / s).records()} for s in ("serial", "pool")}
    assert workers["serial"].isdisjoint(workers["pool"])  # really other processes


def _sweep_into(out, spec):
    run_sweep(spec, out=out, workers=1)


def test_concurrent_sweeps_on_one_store(tmp_path):
    spec = tiny_spec(seeds=[0, 1, 2])
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_sweep_into, args=(tmp_path / "shared", spec)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    store = Store(tmp_path / "shared")
    keys = [inv.key for inv in plan_sweep(spec).invocations]
    assert all(store.get(k) is not None for k in keys)  # every record intact
    assert sorted(r["key"] for r in store.records()) == sorted(keys)  # each point once
    assert not list((tmp_path / "shared").rglob("*.tmp"))  # no temporary file left behind
    run_sweep(spec, out=tmp_path / "alone", workers=1)
    assert comparable(tmp_path / "shared") == comparable(tmp_path / "alone")


def test_progress_reports_and_eta(tmp_path, spec):
    statuses = []
    run_sweep(spec, out=tmp_path, workers=1, progress=statuses.append)
    assert [s.done for s in statuses] == [0, 1, 2, 3, 4]
    assert [s.remaining for s in statuses] == [4, 3, 2, 1, 0]
    assert statuses[0].eta is None and statuses[1].eta is not None and statuses[-1].eta == 0
    buf = io.StringIO()
    bar = ProgressBar(stream=buf, every=0.0)
    bar(statuses[2])
    line = buf.getvalue()
    assert "2/4 done (0 cached), 0 failed, 2 remaining" in line and "ETA" in line


_REAL_RUN_POINT = None
_MARKER = None


def _die_once(argv):
    """Kill the worker process the first time any point runs (a crashed worker); then run points normally."""
    import os

    if not os.path.exists(_MARKER):
        open(_MARKER, "w").close()
        os._exit(1)
    return _REAL_RUN_POINT(argv)


def test_a_dead_pool_worker_is_replaced_and_its_points_rerun(tmp_path, spec, monkeypatch):
    global _REAL_RUN_POINT, _MARKER
    import reduced_dynamics.sweep.commands as commands

    _REAL_RUN_POINT, _MARKER = commands.run_point, str(tmp_path / "died")
    monkeypatch.setattr(commands, "run_point", _die_once)  # the forked workers inherit the patched module
    with LocalExecutor(2) as ex:
        run = run_sweep(spec, out=tmp_path / "pool", executor=ex)
    assert (tmp_path / "died").exists()  # a worker really died
    assert (run.n_done, run.n_failed) == (4, 0)
    monkeypatch.setattr(commands, "run_point", _REAL_RUN_POINT)
    run_sweep(spec, out=tmp_path / "serial", workers=1)
    assert comparable(tmp_path / "pool") == comparable(tmp_path / "serial")


# ----------------------------------------------------------------------------- issue 23: one name, one sweep


def test_two_specs_of_one_name_do_not_replace_each_others_manifest(tmp_path):
    """Two specs with the same `name` in one `--out` silently replaced each other's manifest: the second is refused
    (naming `name` and `--out`) before any point runs; the same spec again resumes; `force` replaces it."""
    a = tiny_spec(seeds=[0], axes={"heads": [2]})
    b = tiny_spec(seeds=[1], axes={"heads": [2]})
    run_sweep(a, out=tmp_path, workers=1)
    before = (tmp_path / "sweeps" / "tiny.json").read_text()
    with pytest.raises(ValueError, match="`name` 'tiny' is taken") as err:
        run_sweep(b, out=tmp_path, workers=1)
    assert "`--force`" in str(err.value) and (tmp_path / "sweeps" / "tiny.json").read_text() == before
    assert len(Store(tmp_path).records()) == 1  # b's point did not run
    assert run_sweep(a, out=tmp_path, workers=1).n_cached == 1  # the same spec: its own sweep, resumed
    run_sweep(b, out=tmp_path, workers=1, force=True)
    assert json.loads((tmp_path / "sweeps" / "tiny.json").read_text())["spec"]["seeds"] == [1]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [({"executor": 1}, "`executor`"), ({"executor": "local"}, "`executor`"), ({"progress": 3}, "`progress`")],
)
def test_run_sweep_refuses_a_wrong_executor_or_progress(tmp_path, spec, kwargs, param):
    """`run_sweep(executor=1)` was an AttributeError: a TypeError naming the parameter, before any work."""
    with pytest.raises(TypeError, match=param):
        run_sweep(spec, out=tmp_path / "s", workers=1, **kwargs)
    assert not (tmp_path / "s").exists()
