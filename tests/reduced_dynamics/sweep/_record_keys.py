"""Record the store keys of the specs in ``KEY_SPECS`` (the fixture ``data/keys_before_issue23.json``).

Run once, on the code before the fast validation of issue 23 (``PYTHONPATH=<that checkout> python
tests/reduced_dynamics/sweep/_record_keys.py OUT.json``): the test ``test_keys_unchanged`` checks that
today's :func:`~reduced_dynamics.sweep.runner.plan_sweep` gives every point the same argv, configuration
and key (the content-addressed store must not move).
"""

from __future__ import annotations

import json
import sys

#: specs covering every sweepable command, switches, lists, hyphenated names, zips, seeds, ``run``
#: setting ``--heads`` from ``--omega0`` (its main writes args.heads: part of the key)
KEY_SPECS = {
    "run-grid": {
        "command": "run",
        "seeds": [0, 3],
        "fixed": {"t-end": 1e3, "n-times": 8},
        "axes": {"d": [2, 5], "L": {"range": [10, 30, 10]}, "sigma2": {"logspace": [0.01, 1, 3]}},
    },
    "run-omega0": {
        "command": "run",
        "fixed": {"t_end": 10.0, "mu0": "1,-1,0.5"},
        "axes": {"omega0": ["0.1,-0.1,0.2", "0.3,0.1,-0.2"], "init": ["random", "symmetric"]},
    },
    "run-models": {
        "command": "run",
        "fixed": {"t-end": 10.0, "d": 6},
        "axes": {"activation": ["exp", "affine"], "n_init": [2, 3], "method": ["Radau", "batch-Radau"]},
    },
    "run-tasks-zip": {
        "command": "run",
        "seeds": 2,
        "fixed": {"t-end": 10.0},
        "zip": [{"d": [4, 6], "tasks": ["1-2,3-4", "1-4,3-6"]}],
    },
    "risk-grid": {
        "command": "risk",
        "seeds": 3,
        "fixed": {"prompts": 1000},
        "axes": {"L": [10, 20], "conditional": [True, False], "sigma2": {"linspace": [0.1, 0.3, 3]}},
    },
    "risk-omega": {
        "command": "risk",
        "fixed": {"mu": "4.4,-4.4"},
        "axes": {"omega": ["0.1,-0.1", "0.2,-0.2"], "activation": ["exp", "tanh"]},
    },
    "train-grid": {
        "command": "train",
        "seeds": [0, 1],
        "fixed": {"steps": 10, "batch": 8, "n-eval": 64},
        "axes": {"heads": [1, 2], "optimizer": ["adam", "sgd"], "lr": {"logspace": [1e-3, 1e-2, 2]}},
    },
    "check-grid": {
        "command": "check",
        "fixed": {"quick": True},
        "axes": {"only": ["approximation", "optimality"], "d": [3, 5]},
    },
    "exact-risk-grid": {"command": "exact-risk", "axes": {"L": [4, 8], "grad": [False, True], "tol": [1e-12, 1e-10]}},
    "single-head-grid": {"command": "single-head", "axes": {"L": [40, 80], "omega_tol": [1e-7, 1e-6]}},
}


def record() -> dict:
    from reduced_dynamics.sweep.commands import package_version
    from reduced_dynamics.sweep.runner import plan_sweep

    out = {"version": package_version(), "specs": {}}
    for name, spec in KEY_SPECS.items():
        plan = plan_sweep(spec)
        out["specs"][name] = {
            "spec": spec,
            "n_duplicates": plan.n_duplicates,
            "points": [{"argv": list(i.argv), "config": i.config, "key": i.key} for i in plan.invocations],
        }
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(record(), f, indent=1)  # key order kept: it is the grid order
        f.write("\n")
