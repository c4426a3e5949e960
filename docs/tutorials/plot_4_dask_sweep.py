"""
A sweep on a local dask cluster
===============================

A grid of runs is one specification — a command, fixed parameters, axes and
seeds — that :func:`~reduced_dynamics.sweep.run_sweep` validates point by
point, runs on an executor and stores, one content-addressed record per point;
:func:`~reduced_dynamics.sweep.load_table` collects the records into a pandas
table. On a machine this is ``reduced-dynamics sweep SPEC.toml`` (a process
pool on all cores) or ``reduced-dynamics sweep SPEC.toml --scheduler
tcp://host:8786`` (a dask cluster); see :doc:`/findings/sweeps`.

Here the cluster is a dask.distributed ``LocalCluster`` inside this process
(one worker, one thread: the page builds on a small machine) and the grid is
the drift law over :math:`(d, L)`: the gradient flow of two heads from a random
start, whose :math:`\\gamma(t)` should follow
:math:`(16 c d^3 (pn/H) t)^{-1/6}` at every grid point (theory:
:theory:`drift-law`). Needs the ``sweep`` extra (dask, pandas).
"""

# %%
# The specification
# -----------------
# The same content as a TOML file (``examples/sweeps/drift_law.toml`` is the
# full-size one); every parameter is a flag of ``reduced-dynamics run``.
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from distributed import LocalCluster

from reduced_dynamics import Setting, drift_law_gamma
from reduced_dynamics.sweep import DaskExecutor, load_table, plan_sweep, run_sweep

spec = {
    "name": "drift_law_small",
    "command": "run",
    "seeds": [0, 1],
    "fixed": {"heads": 2, "t-end": 1e5, "sigma2": 0.1},
    "axes": {"d": [3, 5], "L": [20, 40, 80]},
}
plan = plan_sweep(
    spec
)  # every point validated as `reduced-dynamics run` would, before any work
print(f"{len(plan.invocations)} points")

# %%
# Run it on the cluster
# ---------------------
# Any dask scheduler address works the same way; ``inproc://`` is the
# in-process one of ``LocalCluster(processes=False)``.
out = Path(tempfile.mkdtemp(prefix="rd-sweep-")) / "drift_law_small"
with LocalCluster(
    n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
) as cluster:
    executor = DaskExecutor(cluster.scheduler_address)
    try:
        run = run_sweep(plan, out=out, executor=executor)
    finally:
        executor.close()
print(
    f"{run.n_done}/{run.n_points} points done, {run.n_failed} failed, {run.seconds:.1f} s on {run.executor.split(':')[0]}"
)

# %%
# Running it again finds every point in the store and recomputes nothing:
again = run_sweep(plan, out=out, workers=1)
print(f"second run: {again.n_cached} of {again.n_points} points cached")

# %%
# The table
# ---------
# One row per point: the point's parameters, then the command's result fields
# (here the end state of each flow).
df = load_table(out)
table = df[
    ["d", "L", "seed", "t", "gamma", "eta_eff", "eta_star", "n_positive", "n_negative"]
].sort_values(["d", "L", "seed"])
table["drift law"] = [
    float(
        drift_law_gamma(
            t,
            Setting(d=int(d), L=int(L), sigma2=0.1),
            n_positive=int(p),
            n_negative=int(n),
        )
    )
    for t, d, L, p, n in zip(
        table["t"], table["d"], table["L"], table["n_positive"], table["n_negative"]
    )
]
table["gamma / law"] = table["gamma"] / table["drift law"]
columns = ["d", "L", "seed", "gamma", "drift law", "gamma / law", "eta_eff", "eta_star"]
print(table[columns].to_string(index=False, float_format=lambda v: f"{v:.5g}"))

# %%
# The ratio of the measured :math:`\gamma` to the drift law at :math:`t = 10^5`,
# mean over the two seeds, for each :math:`(d, L)`: the law holds over the
# whole grid, not only at the paper's setting.
ratio = table.groupby(["d", "L"])["gamma / law"].mean().unstack("d")
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for d in ratio.columns:
    ax.plot(ratio.index, (ratio[d] - 1) * 1e4, "o-", label=f"d = {d}")
ax.axhline(0.0, ls="--", c="k", lw=1)
ax.set(
    xscale="log",
    xlabel="prompt length $L$",
    ylabel=r"($\gamma$ / drift law $-$ 1) $\times 10^4$",
)
ax.minorticks_off()
ax.set_xticks(ratio.index, [str(v) for v in ratio.index])
ax.legend()
fig.tight_layout()
print(np.round(ratio, 4))

# %%
# The sweep folder was a temporary one; a real sweep keeps it (rerunning the
# spec resumes it, ``reduced-dynamics sweep-table DIR`` rewrites the table).
shutil.rmtree(out.parent)
