"""The imported model's forward pass equals torch's own, for the authors' layout and nn.MultiheadAttention.

Independent route: torch's forward on the same prompts (``AuthorsAttention.forward``,
``nn.MultiheadAttention.forward``), against :meth:`ImportedAttention.predict` in float64 numpy.
In float64 the two agree to ~1e-15; with float32 torch weights the difference is float32 rounding,
measured in units of ``eps32 · max|ŷ|``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reduced_dynamics import Setting, sample_prompts
from reduced_dynamics.importers import AuthorsAttention, export, load
from reduced_dynamics.model.attention import AttentionModel

torch.set_num_threads(1)

EPS32 = float(np.finfo(np.float32).eps)
#: float32 agreement bound, in units of eps32 · max|ŷ| (measured: about 1-2 units)
F32_UNITS = 32
F64_ATOL = 1e-12


def _close(ours: np.ndarray, theirs: np.ndarray, dtype) -> None:
    scale = max(1.0, float(np.max(np.abs(theirs))))
    err = float(np.max(np.abs(ours - theirs)))
    if dtype == torch.float64:
        assert err <= F64_ATOL * scale, err
    else:
        assert err <= F32_UNITS * EPS32 * scale, (err, err / (EPS32 * scale))


def _prompts(n, L, d, n_out, seed, dtype):
    rng = np.random.default_rng(seed)
    Z = torch.tensor(rng.standard_normal((n, L, d + n_out)), dtype=dtype)
    xq = torch.tensor(rng.standard_normal((n, d)), dtype=dtype)
    return Z, xq


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("H", "d", "n_out"), [(1, 3, 1), (2, 3, 1), (4, 5, 1), (2, 3, 2), (3, 2, 3)])
def test_authors_module_forward_equals_import(H, d, n_out, dtype):
    """AuthorsAttention (PyTorch default init) and its import predict the same on random prompts."""
    torch.manual_seed(H + 10 * d + 100 * n_out)
    net = AuthorsAttention(H, d, n_out, dtype=dtype)
    Z, xq = _prompts(200, 16, d, n_out, seed=1, dtype=dtype)
    imp = load(net)
    assert (imp.n_heads, imp.d, imp.n_out, imp.source_format) == (H, d, n_out, "authors")
    _close(imp.predict(Z.double().numpy(), xq.double().numpy()), net(Z, xq).detach().double().numpy(), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("H", "d", "n_out"), [(1, 3, 1), (2, 3, 1), (4, 3, 1), (2, 2, 2)])
@pytest.mark.parametrize("form", ["object", "state_dict"])
def test_multihead_attention_forward_equals_import(H, d, n_out, dtype, form):
    """nn.MultiheadAttention used as mha(query=z_q[:, None], key=Z, value=Z): its output's response slots."""
    torch.manual_seed(7 * H + d)
    D = d + n_out
    mha = torch.nn.MultiheadAttention(D, H, bias=False, batch_first=True, dtype=dtype)
    imp = load(mha, n_out=n_out) if form == "object" else load(mha.state_dict(), n_out=n_out, n_heads=H)
    Z, xq = _prompts(200, 16, d, n_out, seed=2, dtype=dtype)
    zq = torch.cat([xq, xq.new_zeros(xq.shape[0], n_out)], dim=1)
    with torch.no_grad():
        out = mha(zq[:, None], Z, Z, need_weights=False)[0][:, 0, d:]
    want = out.double().numpy()
    _close(imp.predict(Z.double().numpy(), xq.double().numpy()), want[:, 0] if n_out == 1 else want, dtype)
    assert imp.head_dim == D // H
    assert bool(imp.warnings) is (D // H < d)


def test_mha_with_zero_biases_is_accepted_and_batch_first_false_reads_the_same():
    """Default nn.MultiheadAttention (zero-initialised biases, batch_first=False) imports; forward agrees."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 1, dtype=torch.float64)
    imp = load(mha)
    Z, xq = _prompts(50, 10, 3, 1, seed=3, dtype=torch.float64)
    zq = torch.cat([xq, xq.new_zeros(50, 1)], dim=1)
    with torch.no_grad():
        out = mha(zq[None], Z.transpose(0, 1), Z.transpose(0, 1))[0][0, :, 3]
    _close(imp.predict(Z.numpy(), xq.numpy()), out.numpy(), torch.float64)


@pytest.mark.parametrize("fmt", ["authors", "mha"])
def test_exported_package_model_runs_in_torch_as_in_the_package(fmt):
    """A package model exported to a torch layout, loaded into the torch module, predicts as the package does."""
    H = 2 if fmt == "authors" else 1
    m = AttentionModel(H, 3)
    p = m.init(seed=4)
    b = sample_prompts(100, Setting(d=3, L=12, sigma2=0.1), seed=5)
    want = m.predict(p, b)
    sd = export(m, format=fmt, params=p)
    Z, xq = torch.tensor(b.tokens), torch.tensor(b.x_q)
    if fmt == "authors":
        net = AuthorsAttention(H, 3, dtype=torch.float64)
        net.load_state_dict(sd)
        got = net(Z, xq).detach().numpy()
    else:
        net = torch.nn.MultiheadAttention(4, H, batch_first=True, dtype=torch.float64)
        net.load_state_dict(sd)
        zq = torch.cat([xq, xq.new_zeros(100, 1)], dim=1)
        got = net(zq[:, None], Z, Z)[0][:, 0, 3].detach().numpy()
    _close(got, want, torch.float64)


def _train_authors(steps: int, *, seed: int):
    """AuthorsAttention(H=2, d=3) trained in PyTorch (Adam 1e-2, batch 128, fresh prompts, L = 20, σ² = 0.1)."""
    torch.manual_seed(seed)
    s = Setting(d=3, L=20, sigma2=0.1)
    net = AuthorsAttention(2, 3)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        b = sample_prompts(128, s, seed=1000 * seed + step)
        loss = (
            (
                net(torch.tensor(b.tokens, dtype=torch.float32), torch.tensor(b.x_q, dtype=torch.float32))
                - torch.tensor(b.y_q, dtype=torch.float32)
            )
            ** 2
        ).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, losses


@pytest.fixture(scope="module")
def trained_authors():
    return _train_authors(300, seed=0)


@pytest.mark.parametrize("route", ["module", "state_dict_file"])
def test_model_trained_in_pytorch_imports_with_the_same_forward(trained_authors, route, tmp_path):
    """300 Adam steps in PyTorch (the loss falls), then the import's forward equals torch's to float32 rounding."""
    net, losses = trained_authors
    assert np.mean(losses[-20:]) < 0.6 * np.mean(losses[:20])
    if route == "module":
        imp = load(net)
    else:
        torch.save({"model_state_dict": net.state_dict(), "step": 300}, tmp_path / "ckpt.pt")
        imp = load(tmp_path / "ckpt.pt")
        assert any("model_state_dict" in c for c in imp.conventions)
    b = sample_prompts(500, Setting(d=3, L=20, sigma2=0.1), seed=99)
    Z, xq = torch.tensor(b.tokens, dtype=torch.float32), torch.tensor(b.x_q, dtype=torch.float32)
    _close(imp.predict(Z.double().numpy(), xq.double().numpy()), net(Z, xq).detach().double().numpy(), torch.float32)


def test_authors_module_refuses_bad_shapes():
    net = AuthorsAttention(2, 3)
    with pytest.raises(ValueError, match="`Z` must have shape"):
        net(torch.zeros(2, 5, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="`n_heads` must be a positive integer"):
        AuthorsAttention(0, 3)


@pytest.mark.parametrize(("H", "d", "n_out"), [(1, 3, 1), (2, 5, 1), (4, 5, 1), (2, 3, 2), (3, 2, 3)])
def test_authors_module_fast_forward_equals_the_literal_form(H, d, n_out):
    """forward (re-associated products) = forward_reference (per-head q, k, v) in float64 to ~1e-13, with weights
    scaled up so that the softmax is far from uniform; and the state dict is the authors' layout."""
    torch.manual_seed(H + d + n_out)
    net = AuthorsAttention(H, d, n_out, dtype=torch.float64)
    with torch.no_grad():
        for w in net.parameters():
            w.mul_(3.0)
    Z, xq = _prompts(100, 24, d, n_out, seed=4, dtype=torch.float64)
    with torch.no_grad():
        fast, literal = net(Z, xq).numpy(), net.forward_reference(Z, xq).numpy()
        zq = torch.cat([xq, xq.new_zeros(100, n_out)], dim=1)
        D = d + n_out
        q = net.attention_layer.q_proj(zq).view(100, H, D)
        k = net.attention_layer.k_proj(Z).view(100, 24, H, D)
        p = torch.softmax(torch.einsum("nhi,nlhi->nhl", q, k) / D**0.5, dim=-1)
    assert p.max() > 0.3  # far from uniform (1/L ≈ 0.04)
    assert fast.shape == ((100,) if n_out == 1 else (100, n_out))
    np.testing.assert_allclose(fast, literal, rtol=0, atol=1e-12 * max(1.0, np.abs(literal).max()))
    assert {k: tuple(v.shape) for k, v in net.state_dict().items()} == {
        "attention_layer.q_proj.weight": (H * D, D),
        "attention_layer.k_proj.weight": (H * D, D),
        "attention_layer.v_proj.weight": (H * D, D),
        "attention_layer.o_proj.weight": (n_out, H * D),
    }
