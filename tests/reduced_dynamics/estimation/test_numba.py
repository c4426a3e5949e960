"""The optional compiled backend (``backend="numba"``) against the numpy path on the same random stream.

Skipped only when numba is not installed (``pip install 'reduced-dynamics[numba]'``).
"""

from __future__ import annotations

import numpy as np
import pytest

from reduced_dynamics.estimation.predictors import BayesRidge, Zero
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.setting import Setting

from .conftest import stats_predictors

numba = pytest.importorskip("numba")

SETTING = Setting(d=5, L=40, sigma2=0.1)


def _stats_preds():
    return stats_predictors(SETTING, hot_omega=(900.0, -700.0, 3.0))


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize(
    "setting, kind",
    [(SETTING, "stats"), (SETTING, "gram"), (Setting(d=1, L=7, sigma2=0.3), "stats"), (Setting(d=3, L=3), "gram")],
)
def test_numba_backend_equals_numpy_backend_on_the_same_stream(setting, kind, conditional):
    preds = _stats_preds() if kind == "stats" else {"ridge": BayesRidge(), "ridge2": BayesRidge(2.0), "zero": Zero()}
    if kind == "stats" and setting.d == 1:
        preds = {k: v for k, v in preds.items() if k != "hot_heads"}
    kw = dict(n_prompts=5000, seed=7, conditional=conditional)
    a = estimate_risks(preds, setting, backend="numpy", precision="double", **kw)
    b = estimate_risks(preds, setting, backend="numba", **kw)
    assert a.sampler == b.sampler == kind
    np.testing.assert_allclose(b.mean, a.mean, rtol=1e-10)
    np.testing.assert_allclose(b.cov, a.cov, rtol=1e-8, atol=1e-14)


def test_numba_backend_refuses_what_it_cannot_serve():
    with pytest.raises(ValueError, match="`backend`"):
        estimate_risks({"z": Zero()}, SETTING, n_prompts=10, seed=0, backend="numba", precision="single")
    with pytest.raises(ValueError, match="`backend`"):
        estimate_risks({"z": Zero()}, SETTING, n_prompts=10, seed=0, backend="numba", sampler="full")
