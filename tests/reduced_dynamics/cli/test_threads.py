"""The command runs its BLAS on one thread unless the user set a thread count; ``main([...])`` from Python never
touches the environment (reduced_dynamics.cli.one_blas_thread_by_default)."""

import json
import os
import subprocess
import sys

import pytest

from reduced_dynamics import cli

# the child runs the command as the console script does (main() without argv), then reports what it saw
CHILD = """
import json, os, sys
sys.argv = ["reduced-dynamics", "exact-risk", "--quiet", "--json"]
from reduced_dynamics.cli import main
rc = main()
from threadpoolctl import threadpool_info
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({"rc": rc, "env": {v: os.environ.get(v) for v in VARS}, "blas": blas}))
""".replace("VARS", repr(cli.BLAS_THREAD_VARS))


def _child(env_extra):
    env = {k: v for k, v in os.environ.items() if k not in cli.BLAS_THREAD_VARS}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_command_limits_blas_to_one_thread():
    got = _child({})
    assert got["rc"] == 0
    assert got["env"] == {v: "1" for v in cli.BLAS_THREAD_VARS}
    assert got["blas"] and set(got["blas"]) == {1}


@pytest.mark.parametrize("var", ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"])
def test_a_thread_count_the_user_set_is_kept(var):
    got = _child({var: "2"})
    assert got["rc"] == 0
    assert got["env"][var] == "2"
    assert all(got["env"][v] is None for v in cli.BLAS_THREAD_VARS if v != var)


def test_main_called_from_python_leaves_the_environment_alone(monkeypatch, capsys):
    for v in cli.BLAS_THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    assert cli.main(["exact-risk", "--quiet", "--json"]) == 0
    assert all(v not in os.environ for v in cli.BLAS_THREAD_VARS)
    # and once numpy is loaded (it is here), the default cannot apply: the function says so and sets nothing
    assert cli.one_blas_thread_by_default() is False
    assert all(v not in os.environ for v in cli.BLAS_THREAD_VARS)
