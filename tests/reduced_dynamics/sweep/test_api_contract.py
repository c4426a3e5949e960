"""The sweep's Python API meets the contract (issue 23): wrong types and paths get an error naming the argument."""

import numpy as np
import pytest

from reduced_dynamics import sweep
from reduced_dynamics.sweep import commands, executors, table

from .conftest import tiny_spec


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("swept")
    sweep.run_sweep(tiny_spec(axes={"heads": [2]}), out=out, workers=1)
    return out


def test_run_sweep_names_out_of_the_wrong_type(tmp_path):
    for bad in (5, None, ["a"], b"a"):
        with pytest.raises(TypeError, match="`out` must be a path"):  # was "expected str, bytes or os.PathLike"
            sweep.run_sweep(tiny_spec(), out=bad, workers=1)


def test_run_sweep_flags_must_be_bools(tmp_path):
    for flag in ("quick", "force", "retry_failed"):
        with pytest.raises(TypeError, match=f"`{flag}` must be True or False"):  # was "truth value ... ambiguous"
            sweep.run_sweep(tiny_spec(), out=tmp_path, workers=1, **{flag: np.array([1.0, 2.0])})


def test_plot_sweep_and_sweep_curves_name_table(swept):
    with pytest.raises(TypeError, match="`table` must be a pandas DataFrame"):  # was AttributeError: no .columns
        sweep.plot_sweep(None, metric="gamma", x="heads")
    with pytest.raises(ValueError, match="`table`"):
        sweep.sweep_curves(swept / "missing", metric="gamma", x="heads")
    with pytest.raises(TypeError, match="`metric` must be a column name"):  # was "unhashable type: 'list'"
        sweep.sweep_curves(swept, metric=["gamma"], x="heads")
    with pytest.raises(ValueError, match="`over` must name columns"):  # a typo was silently ignored
        sweep.sweep_curves(swept, metric="gamma", x="heads", over="sede")
    with pytest.raises(TypeError, match="`logx` must be True or False"):
        sweep.plot_sweep(swept, metric="gamma", x="heads", logx="no")


def test_store_names_root_key_and_name(swept, tmp_path):
    with pytest.raises(TypeError, match="`root` must be a path"):
        sweep.Store(3.0)
    with pytest.raises(ValueError, match="`key` must be a point's key"):  # was TypeError: not subscriptable
        sweep.Store(swept).get(1.0)
    with pytest.raises(ValueError, match="`name` must be a file-name-safe string"):  # would write outside sweeps/
        sweep.Store(tmp_path).write_manifest("../../escaped", {"axes": []})
    assert not (tmp_path.parent / "escaped.json").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="`root` must be a folder to write into"):  # was NotADirectoryError
        sweep.Store(tmp_path / "file").write_manifest("m", {"axes": []})
    with pytest.raises(TypeError, match="`obj` holds a complex"):  # was "Object of type complex is not JSON"
        sweep.Store(tmp_path).write_manifest("m", {"axes": [], "x": 1j})


def test_tables_name_out_status_and_records(swept):
    with pytest.raises(TypeError, match="`out` must be a path"):
        table.load_table(None)
    with pytest.raises(ValueError, match="`status`"):  # was "truth value ... ambiguous"
        table.load_table(swept, status=np.array([1, 2]))
    with pytest.raises(TypeError, match="`parquet` must be True or False"):
        table.write_table(swept, parquet="no")
    with pytest.raises(ValueError, match="`records` must hold store records"):  # was TypeError / IndexError
        table.table_rows([1.0])


def test_commands_name_command_and_params():
    with pytest.raises(ValueError, match="`command` must be one of"):  # was KeyError
        commands.parameters("nope")
    with pytest.raises(ValueError, match="`command` must be one of"):
        commands.to_argv(None, {})
    with pytest.raises(TypeError, match="`params` must be a mapping"):  # was AttributeError: no .items
        commands.to_argv("run", [1])
    with pytest.raises(TypeError, match="`dry_run` must be True or False"):
        commands.validate("run", {"L": 10}, dry_run=np.array([]))


def test_executors_and_progress_bar_name_their_arguments():
    with pytest.raises(ValueError, match="`scheduler`"):  # was "truth value ... ambiguous"
        executors.check_scheduler(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="`scheduler`"):
        executors.make_executor(workers=1, scheduler=np.array([]))
    with pytest.raises(ValueError, match="`every`"):  # was "float() argument must be ..."
        sweep.ProgressBar(every=None)
    with pytest.raises(TypeError, match="`quiet`"):
        sweep.ProgressBar(quiet=np.array([True, False]))


def test_load_spec_names_quick_and_a_missing_command(tmp_path):
    with pytest.raises(TypeError, match="`quick` must be True or False"):
        sweep.load_spec(tiny_spec(), quick=np.array([1, 2]))
    with pytest.raises(ValueError, match="`spec` has no `command`"):
        sweep.plan_sweep({})


def test_run_sweep_refuses_an_executor_class_and_a_closed_executor(tmp_path):
    with pytest.raises(TypeError, match="`executor` must be an Executor instance"):  # was TypeError / AttributeError
        sweep.run_sweep(tiny_spec(), out=tmp_path, executor=sweep.LocalExecutor)  # from inside the sweep
    ex = sweep.LocalExecutor(1)
    ex.close()
    with pytest.raises(ValueError, match="`executor` local:1 is closed"):  # was "cannot schedule new futures"
        sweep.run_sweep(tiny_spec(), out=tmp_path, executor=ex)
    assert not (tmp_path / "points").exists()
