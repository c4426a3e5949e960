"""scripts/train_torch_paper.py: the authors' model in PyTorch (the library's AuthorsAttention; forward against the
package's numpy model and the literal per-head form; trains bit for bit as the script's own copy of the module at
commit fcad534 did), the prompt sampler's data model, --quick training, bit-identical resume and the refusals."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from reduced_dynamics.estimation.prompts import Prompts
from reduced_dynamics.model.attention import AttentionModel

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "train_torch_paper.py"


def _load():
    spec = importlib.util.spec_from_file_location("train_torch_paper", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MOD = _load()


def _trained_like(d, H, *, seed, scale=3.0):
    """The authors' model with weights scaled up from the init so that the softmax is far from uniform."""
    torch.manual_seed(seed)
    m = MOD.build_model(d, H).double()
    with torch.no_grad():
        for w in m.parameters():
            w.mul_(scale)
    return m


@pytest.mark.parametrize("H", [1, 2, 4])
def test_state_dict_is_the_authors_layout(H):
    d = 5
    D = d + 1
    shapes = {k: tuple(v.shape) for k, v in MOD.build_model(d, H).state_dict().items()}
    assert shapes == {
        "attention_layer.q_proj.weight": (H * D, D),
        "attention_layer.k_proj.weight": (H * D, D),
        "attention_layer.v_proj.weight": (H * D, D),
        "attention_layer.o_proj.weight": (1, H * D),
    }


def _model_at_fcad534(d, n_heads):
    """The module scripts/train_torch_paper.py defined for itself at commit fcad534 (which trained the paper-scale
    checkpoints of docs/findings/imported.md), verbatim but for the names; forward takes the query token zq."""
    nn = torch.nn

    class _AttentionLayer(nn.Module):
        def __init__(self):
            super().__init__()
            D = d + 1
            self.q_proj = nn.Linear(D, n_heads * D, bias=False)
            self.k_proj = nn.Linear(D, n_heads * D, bias=False)
            self.v_proj = nn.Linear(D, n_heads * D, bias=False)
            self.o_proj = nn.Linear(n_heads * D, 1, bias=False)

    class OldAuthorsAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.d, self.n_heads = d, n_heads
            self.attention_layer = _AttentionLayer()

        def forward(self, Z, zq):
            n, L, D = Z.shape
            H, a = self.n_heads, self.attention_layer
            q = a.q_proj(zq).view(n, H, D)
            u = torch.einsum("nhi,hij->nhj", q, a.k_proj.weight.view(H, D, D))
            p = torch.softmax(torch.bmm(u, Z.transpose(1, 2)) / math.sqrt(D), dim=-1)
            zbar = torch.bmm(p, Z)
            heads = torch.einsum("hij,nhj->nhi", a.v_proj.weight.view(H, D, D), zbar)
            return a.o_proj(heads.reshape(n, H * D)).squeeze(-1)

    return OldAuthorsAttention()


@pytest.mark.parametrize("H", [1, 2, 4])
def test_trains_bit_for_bit_as_the_module_at_fcad534(H):
    """Same seed, same prompts, 30 Adam steps of the paper's protocol (d = 5, L = 40, batch 64): the library's
    AuthorsAttention (what the script builds now) and the script's former copy end with equal weights (torch.equal)
    and equal Adam moments, so the script still reproduces the committed checkpoints."""
    from reduced_dynamics.importers import AuthorsAttention

    d, L, steps = 5, 40, 30
    runs = []
    for build in (MOD.build_model, _model_at_fcad534):
        torch.manual_seed(0)
        m = build(d, H)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=False)
        gen = torch.Generator().manual_seed(2**32)
        for _ in range(steps):
            Z, xq, yq = MOD.sample_batch(gen, d=d, L=L, sigma2=0.1, batch=64)
            q_in = xq if isinstance(m, AuthorsAttention) else torch.cat([xq, torch.zeros(64, 1)], dim=1)
            loss = torch.mean((m(Z, q_in) - yq) ** 2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        runs.append((m.state_dict(), opt.state_dict()["state"]))
    (new_sd, new_opt), (old_sd, old_opt) = runs
    assert isinstance(MOD.build_model(d, H), AuthorsAttention)
    assert list(new_sd) == list(old_sd)
    torch.manual_seed(0)
    init = MOD.build_model(d, H).state_dict()
    for k in new_sd:
        assert torch.equal(new_sd[k], old_sd[k]), k
        assert not torch.equal(new_sd[k], init[k]), k  # training moved every weight
    for i in new_opt:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(new_opt[i][key], old_opt[i][key]), (i, key)


@pytest.mark.parametrize("H", [1, 2, 4])
def test_forward_matches_the_package_model_and_the_literal_form(H):
    """In float64 the re-associated forward equals the package's numpy AttentionModel with Q_h, K_h, V_h the row
    blocks [hD, (h+1)D) and o_h = o_proj[0, hD:(h+1)D] (an independent implementation) and the literal per-head
    q/k/v form, to ~1e-13."""
    d, L, n = 5, 40, 64
    D = d + 1
    m = _trained_like(d, H, seed=H)
    Z, xq, _ = MOD.sample_batch(torch.Generator().manual_seed(7), d=d, L=L, sigma2=0.1, batch=n)
    Z, xq = Z.double(), xq.double()
    zq = torch.cat([xq, torch.zeros(n, 1, dtype=torch.float64)], dim=1)
    with torch.no_grad():
        fast, literal = m(Z, xq).numpy(), m.forward_reference(Z, xq).numpy()
    sd = {k.split(".")[1]: v.numpy() for k, v in m.state_dict().items()}
    params = {
        "Q": sd["q_proj"].reshape(H, D, D),
        "K": sd["k_proj"].reshape(H, D, D),
        "V": sd["v_proj"].reshape(H, D, D),
        "o": sd["o_proj"].reshape(H, D),
    }
    prompts = Prompts.from_arrays(Z[:, :, :d].numpy(), Z[:, :, d].numpy(), xq.numpy())
    ref = AttentionModel(H, d).predict(params, prompts)
    assert np.abs(ref).max() > 0.5  # a non-trivial function
    KQ = torch.from_numpy(AttentionModel(H, d).circuits(params)[0])
    p = torch.softmax(torch.einsum("nld,hde,ne->nhl", Z, KQ, zq), dim=-1)
    assert p.max() > 0.3  # the softmax is far from uniform (1/L = 0.025)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(literal, ref, rtol=0, atol=1e-12)


def test_sampler_follows_the_data_model():
    """Long prompts: y_l = βᵀx_l + ε with ε ~ N(0, σ²) (the OLS residual variance is σ² within 4 SE), the query's
    target has the same noise, and |β|² ~ χ²_d/d (mean 1, variance 2/d; within 4 SE)."""
    d, L, sigma2 = 4, 4000, 0.3
    Z, xq, yq = MOD.sample_batch(torch.Generator().manual_seed(3), d=d, L=L, sigma2=sigma2, batch=200)
    Z, xq, yq = Z.double().numpy(), xq.double().numpy(), yq.double().numpy()
    assert Z.shape == (200, L, d + 1) and xq.shape == (200, d) and yq.shape == (200,)
    X, y = Z[:, :, :d], Z[:, :, d]
    beta = np.stack([np.linalg.lstsq(X[i], y[i], rcond=None)[0] for i in range(200)])
    resid = y - np.einsum("nld,nd->nl", X, beta)
    s2 = resid.var() * L / (L - d)
    se = sigma2 * math.sqrt(2 / (200 * (L - d)))
    assert abs(s2 - sigma2) < 4 * se
    b2 = (beta**2).sum(1)  # E|β|² = 1, Var|β|² = 2/d (plus a negligible estimation error)
    assert abs(b2.mean() - 1) < 4 * math.sqrt(2 / d / 200)
    r_q = yq - np.einsum("nd,nd->n", xq, beta)  # the query's noise is N(0, σ²) too
    assert abs(r_q.var() - sigma2) < 4 * sigma2 * math.sqrt(2 / 200)


def _run(out, *extra):
    return MOD.main(["--quick", "--out", str(out), "--print-every", "5", *extra])


def _load_pt(path):
    return torch.load(path, weights_only=True)


def _assert_same_tree(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_tree(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same_tree(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a == b


def test_quick_run_writes_the_authors_checkpoints(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["checkpoint.pt", "config.json", "final.json", "final.pt", *(f"model_step{s}.pt" for s in (10, 20, 30, 40))]
    )
    final, ck = _load_pt(out / "final.pt"), _load_pt(out / "checkpoint.pt")
    _assert_same_tree(final, ck["model"])
    _assert_same_tree(final, _load_pt(out / "model_step40.pt"))
    assert not torch.equal(
        final["attention_layer.q_proj.weight"], _load_pt(out / "model_step10.pt")["attention_layer.q_proj.weight"]
    )
    assert ck["step"] == 40 and ck["losses"].shape == (40,) and torch.isfinite(ck["losses"]).all()
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["seed"], cfg["data_seed"], cfg["heads"], cfg["quick"]) == (0, 2**32, 2, True)
    text = capsys.readouterr().out
    assert "steps/s" in text and "ETA" in text and "loss (mean of steps 36-40)" in text


def test_resume_after_a_stop_is_bit_identical(tmp_path, capsys):
    """Stop at step 17 (not a checkpoint boundary), resume: model, Adam state, data generator and loss history end
    exactly as in an uninterrupted run; so does extending a finished 40-step run to 60 steps."""
    assert _run(tmp_path / "whole", "--steps", "60") == 0
    assert _run(tmp_path / "cut", "--steps", "60", "--stop-after", "17") == 1
    mid = _load_pt(tmp_path / "cut" / "checkpoint.pt")
    assert mid["step"] == 17 and not (tmp_path / "cut" / "final.pt").exists()
    capsys.readouterr()
    assert _run(tmp_path / "cut", "--steps", "60") == 0
    assert "resuming at step 17" in capsys.readouterr().out
    assert _run(tmp_path / "ext", "--steps", "40") == 0
    assert _run(tmp_path / "ext", "--steps", "60") == 0
    whole = _load_pt(tmp_path / "whole" / "checkpoint.pt")
    assert not torch.equal(
        whole["model"]["attention_layer.k_proj.weight"], mid["model"]["attention_layer.k_proj.weight"]
    )
    for other in ("cut", "ext"):
        ck = _load_pt(tmp_path / other / "checkpoint.pt")
        for k in ("step", "model", "optim", "data_rng", "losses"):
            _assert_same_tree(whole[k], ck[k])
        _assert_same_tree(_load_pt(tmp_path / "whole" / "final.pt"), _load_pt(tmp_path / other / "final.pt"))


@pytest.mark.parametrize(
    ("flag", "value"), [("--heads", "3"), ("--seed", "1"), ("--data-seed", "5"), ("--lr", "0.02"), ("--L", "9")]
)
def test_out_of_another_configuration_is_refused(tmp_path, capsys, flag, value):
    out = tmp_path / "run"
    assert _run(out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert _run(out, flag, value) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"({flag})" in err and "use another --out" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_finished_run_is_not_rewritten_and_shorter_steps_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert _run(out) == 0
    assert "already holds the run to step 40" in capsys.readouterr().out
    assert _run(out, "--steps", "30") == 2
    assert "`--steps` must be >= 40" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_foreign_directory_is_refused(tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    assert _run(foreign) == 2
    assert "is not empty and holds no config.json" in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--heads", "0"], "`--heads`"),
        (["--steps", "0"], "`--steps`"),
        (["--sigma2", "nan"], "`--sigma2`"),
        (["--lr", "0"], "`--lr`"),
        (["--seed", "-1"], "`--seed`"),
        (["--batch", "100000", "--L", "100000"], "`--batch`"),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(tmp_path, capsys, argv, flag):
    assert _run(tmp_path / "new", *argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err
    assert not (tmp_path / "new").exists()
