"""The analysis of an imported model (reduced_dynamics.importers.analysis) against independent routes.

The models are built here: ideal circuits on the solution manifold (whose every verdict must pass,
with η_eff = 2γμ_γ in closed form), a short package-trained model, random circuits (the negative
control), ideal circuits under Σ and with several tasks. The paired risks are checked against a plain
per-prompt loop over the same prompts (the prompts of length L come from the documented generator
``default_rng(SeedSequence(seed, spawn_key=(L,)))``), against ``precond_cross_check`` on the same
prompts, against the exact closed forms within their Monte Carlo error, and their standard errors
against the spread over seeds.
"""

import json
import math

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.dynamics.manifold import mu_gamma, single_head_optimum
from reduced_dynamics.estimation.prompts import sample_prompts
from reduced_dynamics.importers import ImportedAttention
from reduced_dynamics.importers.analysis import THRESHOLDS, analyze
from reduced_dynamics.io import to_jsonable
from reduced_dynamics.model.circuits import extract_circuits
from reduced_dynamics.precond.covariance import covariance_from_eigs
from reduced_dynamics.precond.exact import optimal_dpgd

PAPER = Setting(d=5, L=40, sigma2=0.1)


def ideal_isotropic(omega, mu, d):
    """Circuits ``KQ_h = ω_h I_d`` (plus a junk last column, which multiplies z_q's zero), ``OV_h = μ_h e_y``."""
    H = len(omega)
    KQ = np.zeros((H, d + 1, d + 1))
    OV = np.zeros((H, 1, d + 1))
    for h in range(H):
        KQ[h, :d, :d] = omega[h] * np.eye(d)
        KQ[h, :, d] = 0.7  # never matters
        OV[h, 0, d] = mu[h]
    return ImportedAttention(KQ=KQ, OV=OV, d=d)


def on_manifold(gamma, setting, n_plus=1, n_minus=1):
    """The state of S_γ with the positive (negative) mass μ_γ split evenly over n_plus (n_minus) heads."""
    m = float(mu_gamma(gamma, setting))
    omega = [gamma] * n_plus + [-gamma] * n_minus
    mu = [m / n_plus] * n_plus + [-m / n_minus] * n_minus
    return ideal_isotropic(omega, mu, setting.d)


def loop_prediction(KQ, OV, X, y, xq, *, self_attend):
    """One prompt, head by head and token by token (softmax written out; no vectorisation)."""
    L, d = X.shape
    zq = np.append(xq, 0.0)
    tokens = [np.append(X[l], y[l]) for l in range(L)] + ([zq] if self_attend else [])
    out = 0.0
    for h in range(KQ.shape[0]):
        s = [float(z @ KQ[h] @ zq) for z in tokens]
        top = max(s)
        w = [math.exp(v - top) for v in s]
        ctx = sum((wi / sum(w)) * z for wi, z in zip(w, tokens))
        out += float(OV[h, 0] @ ctx)
    return out


def loop_debiased_gd(X, y, xq, eta):
    L = X.shape[0]
    xbar = X.mean(axis=0)
    return eta / L * sum(y[l] * float((X[l] - xbar) @ xq) for l in range(L))


def generator(seed, L):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(L,)))


@pytest.fixture(scope="module")
def trained():
    """A package model trained briefly (merged circuits, d = 2, L = 40, Adam lr 1e-2, 1500 steps; ~0.5 s)."""
    from reduced_dynamics.model.training import TrainConfig, train

    s = Setting(d=2, L=40, sigma2=0.1)
    cfg = TrainConfig(setting=s, seed=0, n_heads=2, steps=1500, lr=1e-2, batch=128, parameterisation="merged")
    r = train(cfg)
    return s, cfg.model(), r.params


# ------------------------------------------------------------------------------------ patterns
@pytest.mark.parametrize("gamma", [0.02, 0.05, 0.2])
@pytest.mark.parametrize("heads", [(1, 1), (2, 2), (2, 1)])
def test_ideal_manifold_circuits_pass_every_verdict(gamma, heads):
    """On S_γ: every verdict passes, η_eff = γ²/(γ² + c sinh dγ²) (= 2γμ_γ) and the manifold gap is 0."""
    s = PAPER
    rep = analyze(on_manifold(gamma, s, *heads), setting=s, lengths=[20], n_prompts=200, seed=0)
    assert rep.matches, rep.message
    assert all(v.passed for v in rep.verdicts.values())
    c, d = (1 + s.sigma2) / s.L, s.d
    eta = gamma**2 / (gamma**2 + c * math.sinh(d * gamma**2))
    assert rep.location["eta_eff"] == pytest.approx(eta, rel=1e-12)
    assert rep.location["eta_rel_gap"] == pytest.approx(eta / (1 / (1 + c * d)) - 1, rel=1e-9, abs=1e-14)
    gap = rep.location["manifold"]
    assert abs(gap.rel_gap_plus) < 1e-12 and abs(gap.rel_gap_minus) < 1e-12
    for key in ("diagonal", "response_row", "last_entry_ov", "zero_sum", "homogeneous_heads"):
        assert rep.verdicts[key].value == pytest.approx(0.0, abs=1e-15), key
    # the theory's ideal pattern is the model itself (the junk last column is left out of the distance)
    assert np.all(rep.ideal["distance"] < 1e-15)


def test_ideal_model_is_the_reduced_model_on_every_prompt():
    """Ideal circuits predict exactly what the reduced model MultiHead(ω, μ) predicts: paired difference 0."""
    rep = analyze(on_manifold(0.1, PAPER), setting=PAPER, lengths=[10, 80], n_prompts=500, seed=0)
    r = rep.risks
    assert np.all(np.abs(r.diff["reduced"]) < 1e-12) and np.all(r.diff_stderr["reduced"] < 1e-12)
    np.testing.assert_allclose(r.risk["model"], r.risk["reduced"], rtol=1e-12)


def test_single_head_at_its_optimum_passes():
    opt = single_head_optimum(PAPER)
    rep = analyze(ideal_isotropic([opt.omega], [opt.mu], 5), setting=PAPER, lengths=[20], n_prompts=200, seed=0)
    assert rep.matches and set(rep.verdicts) >= {"single_head", "diagonal", "sign_match"}
    assert "zero_sum" not in rep.verdicts and rep.theory["inf_loss"] is None
    assert rep.verdicts["single_head"].value < 1e-12


def test_package_trained_model(trained):
    """A short package-trained model: the patterns are found, the state is the package's own extraction."""
    s, model, params = trained
    rep = analyze(ImportedAttention.from_package(model, params), setting=s, lengths=[10, 40], n_prompts=4000, seed=0)
    c = extract_circuits(model, params)
    np.testing.assert_array_equal(rep.state["omega"], c.omega)
    np.testing.assert_array_equal(rep.state["mu"], c.mu)
    for key in ("diagonal", "response_row", "last_entry_ov", "sign_match", "zero_sum", "homogeneous_heads"):
        assert rep.verdicts[key].passed, (key, rep.verdicts[key])
    assert rep.matches, rep.message
    assert rep.location["eta_eff"] == pytest.approx(c.eta_eff, rel=1e-14)
    # Monte Carlo against the exact risks, in units of the standard error
    r = rep.risks
    for name in ("debiased_gd", "debiased_gd_own", "reduced"):
        z = (r.risk[name] - r.exact[name]) / r.stderr[name]
        assert np.all(np.abs(z) < 4), (name, z)
    i = r.at(s.L)
    assert rep.theory["exact"]["risk"] == pytest.approx(r.exact["reduced"][i], rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_circuits_do_not_match(seed):
    """Negative control: Gaussian circuits fail the pattern verdicts."""
    rng = np.random.default_rng(seed)
    imp = ImportedAttention(KQ=0.3 * rng.standard_normal((2, 6, 6)), OV=rng.standard_normal((2, 1, 6)), d=5)
    rep = analyze(imp, setting=PAPER, lengths=[20], n_prompts=200, seed=0)
    assert not rep.matches
    for key in ("diagonal", "homogeneous_diagonal", "last_entry_ov"):
        assert not rep.verdicts[key].passed, key
    assert "does not match" in rep.message and "diagonal" in rep.message


def test_thresholds_are_used_and_reported():
    imp = on_manifold(0.05, PAPER)
    KQ = np.array(imp.KQ)
    KQ[0, 0, 1] = KQ[0, 1, 0] = 0.01  # off-diagonal energy 2e-4 / (5·0.05² + 2e-4) = 0.0157
    imp = ImportedAttention(KQ=KQ, OV=imp.OV, d=5)
    v = analyze(imp, setting=PAPER, lengths=[20], n_prompts=50, seed=0).verdicts["diagonal"]
    assert v.passed and v.threshold == THRESHOLDS["kq_offdiag"] and v.value == pytest.approx(2e-4 / (0.0125 + 2e-4))
    v = analyze(imp, setting=PAPER, lengths=[20], n_prompts=50, thresholds={"kq_offdiag": 0.01}, seed=0).verdicts[
        "diagonal"
    ]
    assert not v.passed and v.threshold == 0.01


# --------------------------------------------------------------------------- paired risks
@pytest.mark.parametrize("self_attend", [False, True])
def test_paired_risks_match_a_per_prompt_loop(self_attend):
    """Model risk and model − debiased GD at η*(L), mean and standard error, from the same prompts by hand."""
    rng = np.random.default_rng(7)
    d, L, n, seed = 3, 12, 150, 5
    KQ = 0.4 * rng.standard_normal((2, d + 1, d + 1))
    OV = rng.standard_normal((2, 1, d + 1))
    imp = ImportedAttention(KQ=KQ, OV=OV, d=d, query_attends_self=self_attend)
    s = Setting(d=d, L=L, sigma2=0.2)
    rep = analyze(imp, setting=s, lengths=[L], n_prompts=n, seed=seed)
    p = sample_prompts(n, s, seed=generator(seed, L))
    X, y, xq, yq = p.X, p.y, p.x_q, p.y_q
    a = np.array([(loop_prediction(KQ, OV, X[i], y[i], xq[i], self_attend=self_attend) - yq[i]) ** 2 for i in range(n)])
    g = np.array([(loop_debiased_gd(X[i], y[i], xq[i], float(s.eta_star)) - yq[i]) ** 2 for i in range(n)])
    r = rep.risks
    assert r.risk["model"][0] == pytest.approx(a.mean(), rel=1e-10)
    assert r.stderr["model"][0] == pytest.approx(a.std(ddof=1) / math.sqrt(n), rel=1e-8)
    assert r.risk["debiased_gd"][0] == pytest.approx(g.mean(), rel=1e-10)
    assert r.diff["debiased_gd"][0] == pytest.approx((a - g).mean(), rel=1e-9)
    assert r.diff_stderr["debiased_gd"][0] == pytest.approx((a - g).std(ddof=1) / math.sqrt(n), rel=1e-8)
    assert any("attends to itself" in note for note in rep.notes) == self_attend


@pytest.mark.parametrize("sigma", [False, True])
def test_paired_risks_match_precond_cross_check(trained, sigma):
    """The same prompts through precond_cross_check (the package model's own forward): identical numbers."""
    from reduced_dynamics.model.circuits import precond_cross_check

    s, model, params = trained
    if sigma:
        s = s.replace(Sigma=covariance_from_eigs(np.array([0.5, 2.0]), seed=1))
    n, seed = 300, 11
    rep = analyze(ImportedAttention.from_package(model, params), setting=s, lengths=[s.L], n_prompts=n, seed=seed)
    cc = precond_cross_check(model, params, s, n_prompts=n, seed=generator(seed, s.L))
    r = rep.risks
    assert r.risk["model"][0] == pytest.approx(cc.risks["model"].risk, rel=1e-12)
    assert r.stderr["model"][0] == pytest.approx(cc.risks["model"].stderr, rel=1e-9)
    assert r.diff["debiased_gd"][0] == pytest.approx(cc.diffs["dpgd_optimal"].risk, rel=1e-9, abs=1e-15)
    assert r.diff_stderr["debiased_gd"][0] == pytest.approx(cc.diffs["dpgd_optimal"].stderr, rel=1e-7)
    if sigma:  # the model's own limit predictor: P = P_eff, step 1
        assert r.diff["debiased_gd_own"][0] == pytest.approx(cc.diffs["dpgd_own"].risk, rel=1e-9, abs=1e-15)


def test_standard_errors_match_the_spread_over_seeds(trained):
    """16 seeds of 400 prompts: the spread of the estimates is the reported standard error (χ²₁₅, 99.9 %)."""
    s, model, params = trained
    imp = ImportedAttention.from_package(model, params)
    reps = [analyze(imp, setting=s, lengths=[s.L], n_prompts=400, seed=k).risks for k in range(16)]
    for key, se_key, name in (("risk", "stderr", "model"), ("diff", "diff_stderr", "debiased_gd")):
        est = np.array([getattr(r, key)[name][0] for r in reps])
        se = np.array([getattr(r, se_key)[name][0] for r in reps])
        ratio = est.std(ddof=1) / np.sqrt(np.mean(se**2))
        # (k−1) s²/σ² ~ χ²₁₅ (approximately); its 0.05 % and 99.95 % quantiles are 3.48 and 37.7
        assert math.sqrt(3.48 / 15) < ratio < math.sqrt(37.7 / 15), (name, ratio)


def test_same_seed_same_report_other_seed_other_prompts():
    imp = on_manifold(0.1, PAPER)
    a = json.dumps(to_jsonable(analyze(imp, setting=PAPER, lengths=[10], n_prompts=300, seed=3).to_dict()))
    b = json.dumps(to_jsonable(analyze(imp, setting=PAPER, lengths=[10], n_prompts=300, seed=3).to_dict()))
    c = analyze(imp, setting=PAPER, lengths=[10], n_prompts=300, seed=4)
    assert a == b
    assert json.loads(a)["risks"]["risk"]["model"] != c.risks.risk["model"].tolist()


def test_one_length_does_not_depend_on_the_others():
    imp = on_manifold(0.1, PAPER)
    one = analyze(imp, setting=PAPER, lengths=[20], n_prompts=200, seed=0).risks
    many = analyze(imp, setting=PAPER, lengths=[10, 20, 80], n_prompts=200, seed=0).risks
    assert one.risk["model"][one.at(20)] == many.risk["model"][many.at(20)]


# ------------------------------------------------------------------------------------------ Σ
def _sigma_setting(d=3):
    return Setting(d=d, L=40, sigma2=0.1, Sigma=covariance_from_eigs(np.array([0.5, 1.0, 2.5])[:d], seed=0))


def _precond_ideal(s, gamma=0.05, W=None):
    """Blocks ±γW (W = the direction of P*, tr W = d) with μ = ±m such that P_eff = Σ_h μ_h B_h = η*P*."""
    d = s.d
    opt = optimal_dpgd(s)
    W = opt.P * d / np.trace(opt.P) if W is None else W
    m = opt.eta * np.trace(opt.P) / (2 * gamma * d)
    KQ = np.zeros((2, d + 1, d + 1))
    KQ[0, :d, :d], KQ[1, :d, :d] = gamma * W, -gamma * W
    OV = np.zeros((2, 1, d + 1))
    OV[0, 0, d], OV[1, 0, d] = m, -m
    return ImportedAttention(KQ=KQ, OV=OV, d=d), opt


def _distance(A, B):
    """sqrt(1 − cos²(A, B)) written out (Frobenius cosine)."""
    cos = np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B))
    return math.sqrt(max(0.0, 1.0 - cos**2))


def test_sigma_ideal_circuits_at_the_optimal_preconditioner():
    s = _sigma_setting()
    imp, opt = _precond_ideal(s)
    rep = analyze(imp, setting=s, lengths=[40], n_prompts=300, seed=0)
    assert rep.model == "precond" and rep.matches, rep.message
    assert "diagonal" not in rep.verdicts and {"shared_direction", "preconditioner"} <= set(rep.verdicts)
    loc = rep.location
    np.testing.assert_allclose(rep.state["P_eff"], opt.eta * opt.P, rtol=1e-12, atol=1e-14)
    assert loc["eta_eff_sigma"] == pytest.approx(opt.eta, rel=1e-12)
    Si = np.linalg.inv(s.Sigma)
    assert loc["P_eff_distance_sigma_inv"] == pytest.approx(_distance(opt.P, Si), rel=1e-9)
    assert loc["P_eff_distance_optimal"] < 1e-7
    np.testing.assert_allclose(loc["kq_distance_identity"], _distance(opt.P, np.eye(3)), rtol=1e-9)
    # debiased GD at P* is both references here
    r = rep.risks
    assert r.diff["debiased_gd"][0] == pytest.approx(r.diff["debiased_gd_own"][0], abs=1e-12)
    assert abs((r.risk["debiased_gd"][0] - r.exact["debiased_gd"][0]) / r.stderr["debiased_gd"][0]) < 4


def test_sigma_isotropic_pattern_is_not_the_optimum():
    """The isotropic pattern (blocks ±γI) under an anisotropic Σ: P_eff is far from P*, the verdict fails."""
    s = _sigma_setting()
    imp, opt = _precond_ideal(s, W=np.eye(3))
    rep = analyze(imp, setting=s, lengths=[40], n_prompts=200, seed=0)
    v = rep.verdicts["preconditioner"]
    assert not v.passed and v.value == pytest.approx(_distance(np.eye(3), opt.P), rel=1e-9)
    assert rep.verdicts["shared_direction"].passed and not rep.matches


# -------------------------------------------------------------------------------------- tasks
def _dedicated(s, gamma=0.05):
    """H = 4 heads, a ± pair per task, each reading its task's support; A = MᵀΩ = per-task debiased GD."""
    from reduced_dynamics.multitask.predictors import limit_predictor

    d, N = s.d, s.n_tasks
    eta = limit_predictor(4, s).A.max(axis=1)
    KQ, OV = np.zeros((4, d + N, d + N)), np.zeros((4, N, d + N))
    for h, (n, sg) in enumerate([(0, 1), (0, -1), (1, 1), (1, -1)]):
        for j in s.tasks[n]:
            KQ[h, j, j] = sg * gamma
        OV[h, n, d + n] = sg * eta[n] / (2 * gamma)
    return ImportedAttention(KQ=KQ, OV=OV, d=d, n_out=N)


def test_tasks_dedicated_heads_reach_the_limit_predictor():
    s = Setting.paper_multitask()
    rep = analyze(_dedicated(s), setting=s, lengths=[40], n_prompts=300, seed=0)
    assert rep.model == "multitask" and rep.matches, rep.message
    assert rep.state["roles"] == ["T1+", "T1-", "T2+", "T2-"]
    assert rep.verdicts["limit"].value < 1e-12
    r = rep.risks
    assert r.risk["model"].shape == (1, 2)
    # the ideal N-output model is the reduced model, prompt by prompt
    assert np.all(np.abs(r.diff["reduced"]) < 1e-12)


def test_tasks_random_circuits_fail():
    s = Setting.paper_multitask()
    rng = np.random.default_rng(0)
    imp = ImportedAttention(KQ=0.3 * rng.standard_normal((3, 8, 8)), OV=rng.standard_normal((3, 2, 8)), d=6, n_out=2)
    rep = analyze(imp, setting=s, lengths=[40], n_prompts=100, seed=0)
    assert not rep.matches and not rep.verdicts["diagonal"].passed


# -------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(setting=Setting(d=4, L=40)), "`setting.d`"),
        (dict(setting=Setting(d=5, L=1)), "`setting.L`"),
        (dict(setting=Setting(d=5, L=40, activation="tanh")), "`setting.activation`"),
        (dict(setting=Setting(d=5, L=40, tasks=((0, 1), (2, 3)))), "`setting.tasks`"),
        (dict(lengths=[1]), "`lengths`"),
        (dict(lengths=[]), "`lengths`"),
        (dict(lengths="10"), "`lengths`"),
        (dict(lengths=[10, 2.5]), "`lengths`"),
        (dict(lengths=[10**6]), "`lengths`"),
        (dict(n_prompts=1), "`n_prompts`"),
        (dict(n_prompts=0), "`n_prompts`"),
        (dict(seed=-1), "`seed`"),
        (dict(seed=1.5), "`seed`"),
        (dict(dummy_tol=0.0), "`dummy_tol`"),
        (dict(dummy_tol=1.0), "`dummy_tol`"),
        (dict(thresholds={"bogus": 0.1}), "`thresholds`"),
        (dict(thresholds={"zero_sum": -1}), "thresholds"),
        (dict(format="npz"), "`format`"),
        (dict(format="bogus"), "`format`"),
    ],
)
def test_bad_input_is_one_line_naming_the_parameter(kwargs, match):
    kw = {"setting": PAPER, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match) as exc:
        analyze(on_manifold(0.1, PAPER), setting=kw.pop("setting"), **kw)
    assert "\n" not in str(exc.value)


def test_several_outputs_need_tasks_and_sigma_with_tasks_is_refused():
    s = Setting.paper_multitask()
    imp = _dedicated(s)
    with pytest.raises(ValueError, match="`setting.tasks` must give the checkpoint's 2 tasks"):
        analyze(imp, setting=Setting(d=6, L=40), seed=0)
    with pytest.raises(ValueError, match="`setting.Sigma` together with `setting.tasks`"):
        analyze(imp, setting=s.replace(Sigma=np.eye(6) * 2.0), seed=0)


def test_summary_and_json_hold_the_numbers():
    rep = analyze(on_manifold(0.1, PAPER), setting=PAPER, lengths=[20], n_prompts=200, seed=0)
    text = rep.summary()
    assert rep.message in text and "pass  zero_sum" in text and f"{rep.location['eta_eff']:.5f}" in text
    doc = json.loads(json.dumps(to_jsonable(rep.to_dict()), allow_nan=False))
    assert doc["matches"] is True and doc["verdicts"]["eta_eff"]["threshold"] == THRESHOLDS["eta"]
    assert doc["config"] == {
        "lengths": [20, 40],
        "n_prompts": 200,
        "seed": 0,
        "dummy_tol": 0.05,
        "thresholds": THRESHOLDS,
    }
