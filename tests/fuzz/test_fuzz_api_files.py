"""API fuzz suite of the file-facing subpackages (issue 23): io, sweep, figures, plots, importers.

Every public callable of :mod:`reduced_dynamics.io`, :mod:`reduced_dynamics.sweep` (spec, store,
runner, table, plot, executors, commands), :mod:`reduced_dynamics.figures` (the registry's cheap paths:
``check_names``, ``replot``, ``load_data``, ``save_data`` and every figure's plot function on data
mappings), :mod:`reduced_dynamics.plots` and :mod:`reduced_dynamics.importers` (``load``, ``export``,
``read_arrays``, the ``from_*`` importers, ``analyze`` on a tiny model) is called from a small valid
baseline with ONE argument replaced by a hostile value (the shared harness ``tests/api_fuzz.py``):
its numbers and wrong types, and for every path argument :func:`api_fuzz.hostile_paths` (wrong
types, a missing file, a folder, a named pipe, ``/dev/null``, a 200-byte ``.npy``/``.npz`` declaring
100000 x 100000 floats, truncated files, files of the wrong format, a name with a newline). The
contract: finite results, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, bounded time and memory. Each call runs in a fresh temporary working folder.

``python tests/fuzz/test_fuzz_api_files.py`` prints the calls tried and misbehaving, per subpackage.
"""

from __future__ import annotations

import atexit
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

import api_fuzz
import numpy as np

from reduced_dynamics import io as rio
from reduced_dynamics import sweep
from reduced_dynamics.figures import registry
from reduced_dynamics.figures._base import load_data, save_data
from reduced_dynamics.setting import Setting
from reduced_dynamics.sweep import commands, executors, table
from reduced_dynamics.sweep import plot as splot

E = api_fuzz.E


def EA(label, fn, n_pos, args, fuzz=None, paths=()):
    """:func:`api_fuzz.E` for a callable with an argument called ``name`` (E's own first parameter)."""
    return api_fuzz.Entry(label, fn, dict(args), n_pos, tuple(fuzz or args), tuple(paths))


REPO = Path(__file__).resolve().parents[2]

#: the baselines' files: made once per process, on import (a few tiny files and one 1-point sweep)
BASE = Path(tempfile.mkdtemp(prefix="fuzz-files-"))
atexit.register(shutil.rmtree, BASE, True)

NPY = BASE / "a.npy"
np.save(NPY, np.arange(6.0).reshape(2, 3))
FIG = BASE / "fig"
FIG.mkdir()
shutil.copy(REPO / "figures" / "bayes_ratio.npz", FIG / "bayes_ratio.npz")
SPEC = {
    "command": "run",
    "name": "fuzz",
    "seeds": [0, 1],
    "fixed": {"t-end": 1.0, "n-eval": 3, "d": 2, "L": 10, "method": "RK45", "heads": 2},
    "axes": {"rtol": [1e-6]},
}
SPEC_FILE = BASE / "spec.toml"
SPEC_FILE.write_text(
    'command = "run"\nname = "fuzz"\nseeds = [0, 1]\n[fixed]\nt-end = 1.0\nn-eval = 3\nd = 2\nL = 10\n'
    'method = "RK45"\nheads = 2\n[axes]\nrtol = [1e-6]\n'
)
SWEEP = BASE / "sweep"
RUN = sweep.run_sweep(SPEC, out=SWEEP, workers=1)
KEY = RUN.keys[0]
INV = commands.validate("run", {k: v for k, v in SPEC["fixed"].items()} | {"rtol": 1e-6, "seed": 0})


def _figure_data(name):
    return load_data(REPO / "figures" / f"{name}.npz")


def _closing(fig):
    """Close what a plot function drew (many open figures are a RuntimeWarning of matplotlib)."""
    import matplotlib.pyplot as plt

    plt.close(getattr(fig, "figure", fig))
    return None


def _small_figure():
    import matplotlib.pyplot as plt

    return plt.figure(figsize=(1, 1))


def _save_small(fig, path):
    """``save_figure`` of a new 1 x 1 in figure (``fig="new"``) or of ``fig``; the new figure closed even if refused."""
    from reduced_dynamics.plots import style

    new = _small_figure() if isinstance(fig, str) and fig == "new" else None
    try:
        return style.save_figure(fig if new is None else new, path)
    finally:
        if new is not None:
            _closing(new)


def _plotter(fn):
    return lambda data, fig=None: _closing(fn(data, fig=fig))


def _model():
    from reduced_dynamics.model.attention import AttentionModel

    m = AttentionModel(2, 3)
    return m, m.init(seed=0)


MODEL, PARAMS = _model()
MODEL_NPZ = BASE / "model.npz"


def _importers():
    from reduced_dynamics import importers

    importers.export(MODEL, MODEL_NPZ, format="npz", params=PARAMS)
    return importers


IMP = _importers()
ARRAYS = IMP.export(MODEL, format="npz", params=PARAMS)
IMPORTED = IMP.load(ARRAYS)


def _on_executor(make):
    def run(*args):
        ex = make(*args)
        try:
            return ex.name
        finally:
            ex.close()

    return run


ENTRIES_IO = [
    E("io.output_stem", rio.output_stem, 2, prefix="flow", fields={"d": 2, "sigma2": 0.1, "m": "x"}),
    E("io.atomic_write_bytes", rio.atomic_write_bytes, 2, paths=("path",), path="out.bin", data=b"abc"),
    E("io.atomic_write_text", rio.atomic_write_text, 2, paths=("path",), path="out.txt", text="abc"),
    E("io.atomic_write_json", rio.atomic_write_json, 2, paths=("path",), path="o.json", obj={"a": 1.0}, indent=2),
    E("io.atomic_savez", lambda path, a: rio.atomic_savez(path, a=a), 2, paths=("path",), path="o.npz", a=[1.0]),
    E("io.to_jsonable", rio.to_jsonable, 1, obj={"a": np.arange(3.0)}),
    # `name` is what errors name (a CLI passes its flag): here the parameter `path` itself
    EA(
        "io.read_npy",
        rio.read_npy,
        1,
        {"path": NPY, "name": "path", "shape": (2, 3), "max_bytes": 2**20},
        paths=("path",),
    ),  # fmt: skip
]

ENTRIES_SWEEP = [
    EA("sweep.load_spec", sweep.load_spec, 1, {"spec": SPEC_FILE, "quick": False, "name": None}, paths=("spec",)),
    EA("sweep.load_spec_dict", sweep.load_spec, 1, {"spec": SPEC, "quick": False, "name": "n"}, fuzz=("name",)),
    E("sweep.plan_sweep", sweep.plan_sweep, 1, paths=("spec",), spec=SPEC_FILE, quick=False, progress=None),
    E(
        "sweep.run_sweep",
        sweep.run_sweep,
        1,
        paths=("out",),
        spec=SPEC,
        out=SWEEP,
        workers=1,
        scheduler=None,
        executor=None,
        retry_failed=False,
        progress=None,
        force=False,
    ),  # fmt: skip
    E("sweep.Store.records", lambda root: sweep.Store(root).records(), 1, paths=("root",), root=SWEEP),
    E("sweep.Store.get", lambda root, key: sweep.Store(root).get(key), 2, paths=("root",), root=SWEEP, key=KEY),
    E("sweep.Store.is_corrupt", lambda key: sweep.Store(SWEEP).is_corrupt(key), 1, key=KEY),
    E("sweep.Store.manifests", lambda root: sweep.Store(root).manifests(), 1, paths=("root",), root=SWEEP),
    EA("sweep.Store.manifest", lambda name: sweep.Store(SWEEP).manifest(name), 1, {"name": "fuzz"}),
    EA(
        "sweep.Store.write_manifest",
        lambda root, name, manifest: sweep.Store(root).write_manifest(name, manifest),
        3,
        {"root": "store", "name": "m", "manifest": {"name": "m", "axes": []}},
        paths=("root",),
    ),
    E(
        "sweep.Store.clean_stale",
        lambda older_than: sweep.Store(SWEEP).clean_stale(older_than=older_than),
        1,
        older_than=3600.0,
    ),  # fmt: skip
    E("sweep.Store.put", lambda outcome: sweep.Store(BASE / "put").put(INV, outcome), 1, outcome={"exit_code": 2}),
    E("sweep.write_table", table.write_table, 1, paths=("out",), out=SWEEP, parquet=False),
    E("sweep.load_table", table.load_table, 1, paths=("out",), out=SWEEP, status="done"),
    E("sweep.table_rows", table.table_rows, 1, records=RUN and sweep.Store(SWEEP).records()),
    E(
        "sweep.sweep_curves",
        splot.sweep_curves,
        1,
        paths=("table",),
        table=SWEEP,
        metric="gamma",
        x="rtol",
        by=(),
        over="seed",
    ),  # fmt: skip
    E(
        "sweep.plot_sweep",
        lambda table, metric="gamma", x="rtol", logx=False, ylabel=None: _closing(
            splot.plot_sweep(table, metric=metric, x=x, logx=logx, ylabel=ylabel)
        ),
        1,
        paths=("table",),
        fuzz=("table", "metric", "x"),
        table=SWEEP,
        metric="gamma",
        x="rtol",
    ),  # fmt: skip
    E(
        "sweep.make_executor",
        _on_executor(lambda workers, scheduler: executors.make_executor(workers=workers, scheduler=scheduler)),
        2,
        workers=1,
        scheduler=None,
    ),  # fmt: skip
    E("sweep.check_scheduler", executors.check_scheduler, 1, scheduler="local"),
    E("sweep.sweep_command", commands.sweep_command, 1, command="run"),
    E("sweep.parameters", commands.parameters, 1, command="run"),
    E("sweep.to_argv", commands.to_argv, 2, command="run", params={"L": 20, "t_end": 1e3}),
    E("sweep.validate", commands.validate, 2, command="run", params={"L": 10, "d": 2, "heads": 2}, dry_run=True),
    E("sweep.run_point", commands.run_point, 1, argv=list(INV.argv)),
    E("sweep.ProgressBar", lambda quiet, every: sweep.ProgressBar(quiet=quiet, every=every), 0, quiet=True, every=2.0),
]


def _plot_entries():
    out = [
        E(
            "figures.plot_bayes_ratio_fig",
            _plotter(registry.FIGURES["bayes_ratio"].plot_function),
            1,
            fuzz=("fig",),
            data=_figure_data("bayes_ratio"),
            fig=None,
        )  # fmt: skip
    ]
    for name, spec in registry.FIGURES.items():
        fn = spec.plot_function
        out.append(E(f"figures.plot_{name}", _plotter(fn), 1, fuzz=("data",), data=_figure_data(name)))
    return out


ENTRIES_FIGURES = [
    E("figures.check_names", registry.check_names, 1, only=["bayes_ratio"]),
    EA("figures.replot", registry.replot, 2, {"name": "bayes_ratio", "out": FIG}, paths=("out",)),
    E("figures.load_data", load_data, 1, paths=("path",), path=FIG / "bayes_ratio.npz"),
    E("figures.save_data", save_data, 2, paths=("path",), path="d.npz", data={"a": np.arange(3.0)}),
    # out= and workers= are checked before any figure is computed (only=[] computes nothing)
    E(
        "figures.run_figures",
        lambda out, workers: registry.run_figures(out=out, only=[], seed=0, workers=workers),
        1,
        paths=("out",),
        out="figs",
        workers=1,
    ),  # fmt: skip
    *_plot_entries(),
]


def _plots():
    from reduced_dynamics.plots import portrait, style

    two = _figure_data("portrait_two_head")
    gen = _figure_data("portrait_general")
    return [
        E("plots.plot_two_head_portrait", _plotter(portrait.plot_two_head_portrait), 1, fuzz=("data",), data=two),
        E("plots.plot_general_portrait", _plotter(portrait.plot_general_portrait), 1, fuzz=("data",), data=gen),
        E("plots.plot_flow_summary", _plotter(style.plot_flow_summary), 1, fuzz=("result",), result=None),
        E(
            "plots.plot_analysis",
            _plotter(importlib.import_module("reduced_dynamics.plots.analysis").plot_analysis),
            1,
            fuzz=("report",),
            report=None,
        ),  # fmt: skip
        E("plots.new_figure", lambda fig: _closing(style.new_figure(fig, figsize=(2, 2))), 1, fig=None),
        E("plots.new_axes", lambda ax: _closing(style.new_axes(ax, figsize=(2, 2))), 1, ax=None),
        E("plots.tight_layout", style.tight_layout, 1, fig=None),
        E("plots.save_figure", _save_small, 2, paths=("path",), fig="new", path="f.png"),
    ]


ENTRIES_PLOTS = _plots()


def _importer_entries():
    authors = IMP.export(IMPORTED, format="authors")
    from reduced_dynamics.model.attention import AttentionModel

    one = AttentionModel(1, 2)
    mha = IMP.export(one, format="mha", params=one.init(seed=0))
    import dataclasses

    tl = IMP.export(dataclasses.replace(IMPORTED, query_attends_self=True), format="transformerlens")
    S = Setting(d=3, L=6, sigma2=0.1)
    return [
        E("importers.read_arrays", IMP.read_arrays, 1, paths=("path",), path=MODEL_NPZ),
        E("importers.load", IMP.load, 1, paths=("source",), source=MODEL_NPZ, format="auto", n_out=None, n_heads=None),
        E("importers.load_dict", IMP.load, 1, source=ARRAYS, format="npz", n_out=None, n_heads=None),
        E("importers.detect_format", IMP.detect_format, 1, state=ARRAYS),
        E("importers.export", IMP.export, 2, paths=("path",), model=IMPORTED, path="m.npz", format="npz", params=None),
        E("importers.export_model", IMP.export, 1, fuzz=("params",), model=MODEL, format="npz", params=PARAMS),
        E("importers.from_arrays", IMP.from_arrays, 1, arrays=ARRAYS, source_format="npz", n_out=None, n_heads=None),
        E("importers.from_authors", IMP.from_authors, 1, state=authors, n_out=None, n_heads=None),
        E("importers.from_mha", IMP.from_mha, 1, source=mha, n_out=None, n_heads=1),
        E(
            "importers.from_transformerlens",
            IMP.from_transformerlens,
            1,
            fuzz=("n_out", "n_heads"),
            source=tl,
            n_out=None,
            n_heads=None,
        ),  # fmt: skip
        E("importers.predict", IMPORTED.predict, 2, tokens=np.ones((2, 4, 4)), x_q=np.ones((2, 3))),
        E(
            "importers.analyze",
            IMP.analyze,
            1,
            paths=("source",),
            fuzz=("source", "setting", "lengths", "n_prompts", "seed", "dummy_tol", "thresholds"),
            source=MODEL_NPZ,
            setting=S,
            lengths=[4],
            n_prompts=20,
            seed=0,
            dummy_tol=0.05,
            thresholds=None,
        ),  # fmt: skip
    ]


ENTRIES_IMPORTERS = _importer_entries()

ENTRIES = ENTRIES_IO + ENTRIES_SWEEP + ENTRIES_FIGURES + ENTRIES_PLOTS + ENTRIES_IMPORTERS

#: a call blocked without computing (a named pipe opened for reading) is stopped after this many seconds
WALL_TIMEOUT = 10.0

#: besides the harness's HOSTILE: mappings (the data of a plot, the params of a point) and empty text/bytes
EXTRA = [{}, {"x": 1.0}, "", b"x"]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, wall_timeout=WALL_TIMEOUT, extra=EXTRA)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    only = set(sys.argv[1:])
    chosen = [e for e in ENTRIES if not only or e.name.split(".")[0] in only]
    sys.exit(api_fuzz.count(chosen, group=lambda name: name.split(".")[0], wall_timeout=WALL_TIMEOUT, extra=EXTRA))
