"""Issue 9: every Monte Carlo path stays within the memory budget whatever L, d or n_prompts,
and the engines refuse (with the size and the budget) what cannot fit; BLAS threads; NaN/inf results."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from reduced_dynamics import DebiasedGD, MultiHead, Prompts, Setting, VanillaGD, Zero, estimate_risks, sample_prompts
from reduced_dynamics.crosscheck import CovariateSample
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.estimation.prompts import CHUNK_BUDGET, MEMORY_BUDGET, iter_prompts, sample_tokens
from reduced_dynamics.model.training import TrainConfig

_LARGE_L = """
import numpy as np
from reduced_dynamics import DebiasedGD, MultiHead, Setting, estimate_risks
from proofs_check.approximation import approximation_error
from reduced_dynamics.model.attention import make_model
from reduced_dynamics.model.training import mc_risk
s = Setting(d=5, L=10**6, sigma2=0.1)
# 24 prompts of L = 10⁶: drawn at once they need over 1 GiB of working arrays
q = approximation_error(0.1, s.eta_star, s, n_prompts=24, seed=0)
r = estimate_risks([MultiHead([0.1, -0.1], [4.0, -4.0]), DebiasedGD(s.eta_star)], s, n_prompts=24, seed=0)
m = mc_risk(make_model("reduced", n_heads=2, d=5), {"omega": np.array([0.1, -0.1]), "mu": np.array([4.0, -4.0])},
            s.replace(L=2 * 10**5), n_prompts=24, seed=0)
assert np.isfinite(q) and np.all(np.isfinite(r.mean)) and np.isfinite(m.risk)
print("ok")
"""


#: run first in the subprocess: the imports, then the address-space cap at their size (VmPeak) + 700 MiB
_CAP = """
import resource
import reduced_dynamics, proofs_check.approximation, reduced_dynamics.model.training
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmPeak:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + 700 * 2**20, vm + 700 * 2**20))
"""


def _env():
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
def test_large_L_monte_carlo_runs_under_a_memory_limit():
    """L = 10⁶ through the approximation check's sampler, the risk engine and the model evaluator, in a
    subprocess whose address space is capped at its import size + 700 MiB (before the chunking the
    first call alone allocated over 1 GiB and died with MemoryError; under the same cap a 1.1 GiB array still
    raises MemoryError, so the cap bites)."""
    prog = _CAP + _LARGE_L  # (one interpreter: the cap is measured and set in the process that runs the calls)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert time.perf_counter() - t0 < 60


def test_sample_prompts_refuses_a_batch_beyond_the_budget():
    s = Setting(d=5, L=10**9, sigma2=0.1)
    for call in (
        lambda: sample_prompts(2, s, seed=0),
        lambda: sample_prompts(2, s, seed=0, stats_only=True),
        lambda: sample_tokens(2, s, seed=0),
        lambda: sample_prompts(10**6, Setting(d=100, L=100), seed=0),
    ):
        with pytest.raises(ValueError, match=r"`n_prompts`.*MiB.*memory budget.*estimate_risks"):
            call()
    sample_prompts(2, Setting(d=5, L=10**6), seed=0, stats_only=True)  # 32 MB: fine


def test_engines_refuse_a_single_prompt_beyond_the_budget():
    s = Setting(d=5, L=10**9, sigma2=0.1)
    with pytest.raises(ValueError, match="`L`.*too large for Monte Carlo"):
        estimate_risks([Zero()], s, n_prompts=10, seed=0)
    with pytest.raises(ValueError, match="`L`.*too large for Monte Carlo"):
        CovariateSample(10, s, seed=0)
    with pytest.raises(ValueError, match="`batch`.*memory budget"):
        TrainConfig(Setting(d=5, L=10**6), seed=0, batch=256)


def test_chunked_draw_equals_one_batch_when_it_fits():
    """The chunked sampler reproduces sample_prompts bit for bit when one chunk holds everything."""
    s = Setting(d=3, L=7, sigma2=0.2)
    (one,) = list(iter_prompts(50, s, seed=4, per_prompt_bytes=100, stats_only=True))
    ref = sample_prompts(50, s, seed=4, stats_only=True)
    np.testing.assert_array_equal(one.scores, ref.scores)
    np.testing.assert_array_equal(one.y, ref.y)
    parts = list(iter_prompts(50, s, seed=4, per_prompt_bytes=CHUNK_BUDGET // 20, stats_only=True))
    assert [p.n for p in parts] == [20, 20, 10]
    assert MEMORY_BUDGET == 2**30 and CHUNK_BUDGET == MEMORY_BUDGET // 4


def test_engine_slices_a_block_larger_than_the_budget_without_changing_numbers():
    """A budget smaller than one RNG block evaluates the block in slices: same numbers, bit for bit."""
    s = Setting(d=5, L=40, sigma2=0.1)
    preds = [MultiHead([0.1, -0.1], [4.0, -4.0]), DebiasedGD(0.8)]
    a = estimate_risks(preds, s, n_prompts=3000, seed=2, conditional=True)
    b = estimate_risks(preds, s, n_prompts=3000, seed=2, conditional=True, memory_budget=50_000)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.cov, b.cov)


def test_single_blas_thread_limits_and_restores():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    with single_blas_thread():
        inside = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    after = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert all(n == 1 for n in inside) and after == before


def test_single_blas_thread_rescans_after_an_import_and_restores_the_live_setting(monkeypatch):
    """The library scan is kept until sys.modules grows; the limit restores the live count, not the scanned one."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import types

    from reduced_dynamics.estimation import _threads

    def blas():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    first = _threads._blas_controller()
    assert _threads._blas_controller() is first
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):  # the scan is made with one thread
        monkeypatch.setitem(sys.modules, "_rd_fake_module_for_the_scan", types.ModuleType("_rd_fake"))
        assert _threads._blas_controller() is not first
    before = blas()  # the default pools again
    if max(before, default=1) < 2:
        pytest.skip("one BLAS thread by default: the live and the scanned counts cannot differ")
    with single_blas_thread():
        assert all(n == 1 for n in blas())
    assert blas() == before


# ------------------------------------------------------------ wrong or NaN results (issue 9)


def test_estimate_risks_needs_two_prompts_for_a_standard_error():
    with pytest.raises(ValueError, match="`n_prompts` must be an integer in \\[2,"):
        estimate_risks([Zero()], Setting(), n_prompts=1, seed=0)
    with pytest.raises(ValueError, match="`n_prompts`"):
        CovariateSample(1, Setting(), seed=0)


@pytest.mark.parametrize("cls", [VanillaGD, DebiasedGD])
def test_gd_step_is_bounded(cls):
    with pytest.raises(ValueError, match=r"`eta` must be a finite number with \|eta\| <= 1e\+12"):
        cls(1e308)
    p = sample_prompts(5, Setting(), seed=0)
    assert np.all(np.isfinite(cls(1e12)(p)))


def test_predictions_that_overflow_raise_instead_of_inf():
    with pytest.raises(ValueError, match="`omega`, `mu`"):  # L = 1: the weight is μ₁ + μ₂ = 2e308
        MultiHead([0.1, -0.1], [1e308, 1e308]).weights(sample_prompts(5, Setting(L=1), seed=0, stats_only=True))
    with pytest.raises(ValueError, match="predictions of MultiHead"):
        big = Prompts.from_stats([[1.0, 2.0]], [1.0], y=[[1e300, 1e300]], y_q=[0.0])
        MultiHead([0.0, 0.0], [1e10, 1e10])(big)
    with pytest.raises(ValueError, match="must be real"):
        MultiHead([0.1 + 1j, -0.1], [1.0, -1.0])
