"""Reliability on the real engines: a dask worker killed mid-sweep, the sweep process SIGKILLed mid-run.

Both use real processes on this machine (a dask LocalCluster with 2 worker processes,
a ``reduced-dynamics sweep`` subprocess) and real SIGKILLs.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reduced_dynamics.sweep import Store, plan_sweep, run_sweep

from .conftest import comparable, tiny_spec

ROOT = Path(__file__).resolve().parents[3]


def slow_spec():
    """8 points of ~0.2 s each (long enough that a kill lands mid-sweep, short enough for a test)."""
    return tiny_spec(
        seeds=[0, 1, 2, 3], fixed={"t-end": 8.0, "n-eval": 5, "d": 3, "L": 10, "method": "RK45", "rtol": 1e-6}
    )


def test_dask_worker_killed_mid_sweep(tmp_path):
    pytest.importorskip("distributed")
    from reduced_dynamics.sweep import DaskExecutor

    spec = slow_spec()
    killed = []
    with DaskExecutor("local", workers=2) as ex:
        pids = ex.client.run(os.getpid)  # worker address -> pid
        assert len(pids) == 2

        def kill_one_after_first_point(status):
            if status.record is not None and not killed:
                pid = next(iter(pids.values()))
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        run = run_sweep(spec, out=tmp_path / "dask", executor=ex, progress=kill_one_after_first_point)
        # the same cluster through its address (the `--scheduler tcp://...` path): a new store, same results
        address = ex.client.scheduler.address
        assert address.startswith("tcp://127.0.0.1:")
        remote = run_sweep(spec, out=tmp_path / "remote", scheduler=address)
        assert remote.executor == f"dask:{address}" and remote.n_done == 8
    assert killed and run.n_failed == 0
    keys = [inv.key for inv in plan_sweep(spec).invocations]
    records = Store(tmp_path / "dask").records()
    assert sorted(r["key"] for r in records) == sorted(keys)  # every point present, once
    # the killed worker never reported a point after its death; the others finished them
    assert run.n_done == len(keys) == 8
    run_sweep(spec, out=tmp_path / "serial", workers=1)
    assert comparable(tmp_path / "dask") == comparable(tmp_path / "serial")
    assert comparable(tmp_path / "remote") == comparable(tmp_path / "serial")


def _children(pid):
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.split(")")[-1].split()[0] != "Z"


def test_sigkill_of_the_sweep_process_then_resume(tmp_path):
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        'command = "run"\nname = "slow"\nseeds = [0, 1, 2, 3, 4, 5]\n'
        '[fixed]\nt-end = 8.0\nn-eval = 5\nd = 3\nL = 10\nmethod = "RK45"\nrtol = 1e-6\n'
        "[axes]\nheads = [2, 3]\n"
    )
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "reduced_dynamics", "sweep", str(spec_file), "--out", str(out), "--workers", "2"]
    proc = subprocess.Popen([*cmd, "--quiet"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = Store(out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(out.glob("points/*/*.json"))) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.02)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    n_before = len(store.records())
    stale = set(out.rglob("*.tmp"))  # a write cut by the SIGKILL may leave its temporary file (never read)
    assert 2 <= n_before < 12, "the kill must land mid-sweep"
    # the pool's workers die with the sweep process (no orphans computing on)
    t0 = time.monotonic()
    while any(_alive(w) for w in workers) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert workers and not any(_alive(w) for w in workers)
    # rerun: the finished points are kept, the rest are computed
    res = subprocess.run([*cmd, "--json", "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    import json

    summary = json.loads(res.stdout)
    assert summary["n_cached"] >= n_before and summary["n_done"] == 12 and summary["n_failed"] == 0
    run_sweep(spec_file, out=tmp_path / "uninterrupted", workers=1)
    assert comparable(out) == comparable(tmp_path / "uninterrupted")
    assert set(out.rglob("*.tmp")) <= stale  # the rerun's own writes all completed
