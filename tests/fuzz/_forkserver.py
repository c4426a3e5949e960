"""Fork server of the CLI fuzz suite: import the package once, then fork one child per invocation.

Started as ``python tests/fuzz/_forkserver.py`` by ``tests/fuzz/test_cli_fuzz.py``. It
imports ``reduced_dynamics`` (and the modules its commands import lazily) once, so that
an invocation costs its own work and not ~1 s of imports. Protocol: one JSON request
per line on stdin, ``{"argv", "cwd", "stdout", "stderr", "timeout", "mem_bytes"}``,
one JSON reply per line on the original stdout, ``{"code", "signal", "timeout",
"seconds", "maxrss_kb"}``.

Each request runs in a forked child that is the same as ``python -m reduced_dynamics
ARGV`` after its imports: it sets ``RLIMIT_AS`` to ``mem_bytes``, changes to ``cwd``,
points file descriptors 1 and 2 at the files ``stdout`` and ``stderr``, runs the module
``reduced_dynamics.__main__`` as ``__main__`` and exits with the status the interpreter
would give (``SystemExit`` code; an uncaught exception prints its traceback through
``sys.excepthook`` and exits 1). A child still running after ``timeout`` seconds of wall
time is killed (``"timeout": true``).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import runpy
import signal
import sys
import time

#: imported before forking when present (the commands import them lazily); a missing one is skipped
PRELOAD = (
    "numpy",
    "scipy.integrate",
    "scipy.optimize",
    "matplotlib",
    "reduced_dynamics",
    "reduced_dynamics.cli",
    "proofs_check.checks",
    "reduced_dynamics.dynamics.portrait",
    "reduced_dynamics.plots.portrait",
    "reduced_dynamics.plots.style",
    "reduced_dynamics.figures.registry",
    # what the commands import lazily inside their functions: pandas and pyarrow (sweep, sweep-table, ~0.2 s a
    # child), pyplot and its font manager (portrait, figures, ~0.4 s a child), the modules of each model
    "matplotlib.pyplot",
    "pandas",
    "pyarrow.parquet",
    "tomllib",
    "reduced_dynamics.sweep.commands",
    "reduced_dynamics.sweep.runner",
    "reduced_dynamics.sweep.table",
    "reduced_dynamics.sweep.plot",
    "reduced_dynamics.models.isotropic",
    "reduced_dynamics.models._risk",
    "reduced_dynamics.model.training",
    "reduced_dynamics.exact.evaluator",
    "reduced_dynamics.exact.single_head",
    "reduced_dynamics.importers.analysis",
)


def _preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    cli = sys.modules.get("reduced_dynamics.cli")
    for modname in getattr(cli, "COMMANDS", {}).values():
        try:
            importlib.import_module(modname)
        except ImportError:
            pass


def _child(req: dict) -> None:
    """Run one invocation in this (forked) process; never returns."""
    code = 1
    try:
        mem = int(req["mem_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        os.chdir(req["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        sys.argv = [os.path.join(os.path.dirname(sys.modules["reduced_dynamics"].__file__), "__main__.py")]
        sys.argv += list(req["argv"])
        try:
            runpy.run_module("reduced_dynamics", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                sys.stderr.write(f"{exc.code}\n")
                code = 1
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    finally:
        os._exit(code & 0xFF)


def _run(req: dict) -> dict:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(req)
    deadline = t0 + float(req["timeout"])
    timed_out = False
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            wpid, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.005)
    return {
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timeout": timed_out,
        "seconds": time.monotonic() - t0,
        "maxrss_kb": usage.ru_maxrss,
    }


def serve() -> None:
    """Answer requests from stdin until it closes."""
    reply = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing the server itself prints can corrupt the replies
    _preload()
    gc.freeze()  # the preloaded objects: a child's collections do not touch (copy) their pages
    reply.write(json.dumps({"ready": True}) + "\n")
    reply.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply.write(json.dumps(_run(json.loads(line))) + "\n")
        reply.flush()


if __name__ == "__main__":
    serve()
