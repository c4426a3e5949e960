"""TransformerLens: a real one-layer attention-only HookedTransformer, imported and held against its own forward.

The continuous-input usage ``model(resid, start_at_layer=0, stop_at_layer=1)`` is what the importer
assumes (module docstring of reduced_dynamics.importers.transformerlens); these tests run it on a
``HookedTransformer`` and compare its query-position response slot with
:meth:`ImportedAttention.predict` (which includes the query's own term). transformer_lens is
imported once for the module (about 4 s).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from reduced_dynamics import Setting, sample_prompts
from reduced_dynamics.importers import export, from_transformerlens, load
from reduced_dynamics.model.attention import AttentionModel

torch.set_num_threads(1)

EPS32 = float(np.finfo(np.float32).eps)
F32_UNITS = 32  # float32 agreement bound in units of eps32 · max|ŷ| (measured: about 1)
D_MODEL, D, L = 4, 3, 20  # d_model = D = d + 1 with d = 3


@pytest.fixture(scope="module")
def lens():
    """``(HookedTransformer, HookedTransformerConfig)``, imported once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    return HookedTransformer, HookedTransformerConfig


def build(lens, *, seed=0, dtype=torch.float32, **overrides):
    """A HookedTransformer with the importable configuration, changed by ``overrides``."""
    HookedTransformer, Config = lens
    kw = dict(
        n_layers=1,
        d_model=D_MODEL,
        d_head=D_MODEL,
        n_heads=2,
        n_ctx=L + 1,
        d_vocab=3,
        attn_only=True,
        normalization_type=None,
        act_fn="relu",
        seed=seed,
        dtype=dtype,
    )
    kw.update(overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return HookedTransformer(Config(**kw))


def lens_forward(model, Z: torch.Tensor, xq: torch.Tensor, n_out: int = 1) -> np.ndarray:
    """The residual stream's response slot(s) at the query position, query last."""
    zq = torch.cat([xq, xq.new_zeros(xq.shape[0], n_out)], dim=1)
    resid = torch.cat([Z, zq[:, None]], dim=1)
    with torch.no_grad():
        out = model(resid, start_at_layer=0, stop_at_layer=1)[:, -1, -n_out:]
    out = out.double().numpy()
    return out[:, 0] if n_out == 1 else out


def _close(ours, theirs, dtype):
    scale = max(1.0, float(np.max(np.abs(theirs))))
    err = float(np.max(np.abs(ours - theirs)))
    bound = 1e-12 * scale if dtype == torch.float64 else F32_UNITS * EPS32 * scale
    assert err <= bound, (err, bound)


def _prompts(n, d, n_out, seed, dtype):
    rng = np.random.default_rng(seed)
    return (
        torch.tensor(rng.standard_normal((n, L, d + n_out)), dtype=dtype),
        torch.tensor(rng.standard_normal((n, d)), dtype=dtype),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("form", ["object", "state_dict"])
def test_hooked_transformer_forward_equals_import(lens, dtype, attention_dir, form):
    """Random init (W_pos nonzero, unused): the import with the self term predicts as the HookedTransformer."""
    model = build(lens, seed=1, dtype=dtype, attention_dir=attention_dir)
    assert torch.any(model.pos_embed.W_pos != 0)
    imp = load(model) if form == "object" else load(model.state_dict())
    assert imp.source_format == "transformerlens" and imp.query_attends_self and imp.warnings
    Z, xq = _prompts(200, D, 1, seed=2, dtype=dtype)
    _close(imp.predict(Z.double().numpy(), xq.double().numpy()), lens_forward(model, Z, xq), dtype)


def test_self_term_is_what_the_lens_computes(lens):
    """Control: the same circuits without the self term miss the HookedTransformer's forward by far more than rounding."""
    import dataclasses

    model = build(lens, seed=1, dtype=torch.float64)
    imp = dataclasses.replace(load(model), query_attends_self=False)
    Z, xq = _prompts(200, D, 1, seed=2, dtype=torch.float64)
    assert np.max(np.abs(imp.predict(Z.numpy(), xq.numpy()) - lens_forward(model, Z, xq))) > 1e-3


@pytest.mark.parametrize(("d_head", "n_out", "attn_scale"), [(3, 1, None), (6, 1, None), (4, 2, None), (4, 1, 1.0)])
def test_other_head_sizes_outputs_and_scales(lens, d_head, n_out, attn_scale):
    """d_head ≠ d_model, two response slots, and a config attn_scale (read from the object) all match torch."""
    extra = {} if attn_scale is None else {"attn_scale": attn_scale}
    model = build(lens, seed=3, dtype=torch.float64, d_head=d_head, **extra)
    d = D_MODEL - n_out
    imp = load(model, n_out=n_out)
    assert imp.head_dim == d_head and imp.d == d
    Z, xq = _prompts(100, d, n_out, seed=4, dtype=torch.float64)
    _close(imp.predict(Z.numpy(), xq.numpy()), lens_forward(model, Z, xq, n_out), torch.float64)


def test_package_model_exported_to_lens_runs_there_as_imported(lens):
    """export(format='transformerlens') loads into a HookedTransformer (strict=False) whose forward is the import's."""
    import dataclasses

    from reduced_dynamics.importers import ImportedAttention

    m = AttentionModel(2, D)
    src = dataclasses.replace(ImportedAttention.from_package(m, m.init(seed=0)), query_attends_self=True)
    model = build(lens, dtype=torch.float64)
    missing, unexpected = model.load_state_dict(export(src, format="transformerlens"), strict=False)
    assert not unexpected and all(not k.startswith("blocks.0.attn.W_") for k in missing)
    Z, xq = _prompts(100, D, 1, seed=5, dtype=torch.float64)
    _close(src.predict(Z.numpy(), xq.numpy()), lens_forward(model, Z, xq), torch.float64)


@pytest.fixture(scope="module")
def trained_lens(lens):
    """HookedTransformer(n_layers=1, attn_only, no normalization, d_model = d_head = 4, H = 2) trained 300 Adam steps
    on continuous prompts (d = 3, L = 20, σ² = 0.1) through the residual stream; the biases stay frozen at zero."""
    torch.manual_seed(0)
    model = build(lens, seed=0)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("blocks.0.attn.W_"))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    s = Setting(d=D, L=L, sigma2=0.1)
    losses = []
    for step in range(300):
        b = sample_prompts(128, s, seed=step)
        Z, xq = torch.tensor(b.tokens, dtype=torch.float32), torch.tensor(b.x_q, dtype=torch.float32)
        resid = torch.cat([Z, torch.cat([xq, torch.zeros(128, 1)], dim=1)[:, None]], dim=1)
        pred = model(resid, start_at_layer=0, stop_at_layer=1)[:, -1, D]
        loss = ((pred - torch.tensor(b.y_q, dtype=torch.float32)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


@pytest.mark.parametrize("route", ["object", "state_dict_file"])
def test_trained_hooked_transformer_imports_with_the_same_forward(trained_lens, route, tmp_path):
    """After training (the loss falls) the import's forward equals the HookedTransformer's to float32 rounding."""
    model, losses = trained_lens
    assert np.mean(losses[-20:]) < 0.6 * np.mean(losses[:20])
    if route == "object":
        imp = load(model)
    else:
        torch.save(model.state_dict(), tmp_path / "lens.pt")
        imp = load(tmp_path / "lens.pt", format="transformerlens")
    b = sample_prompts(500, Setting(d=D, L=L, sigma2=0.1), seed=10**6)
    Z, xq = torch.tensor(b.tokens, dtype=torch.float32), torch.tensor(b.x_q, dtype=torch.float32)
    _close(imp.predict(Z.double().numpy(), xq.double().numpy()), lens_forward(model, Z, xq), torch.float32)


def _with_bias(model):
    with torch.no_grad():
        model.blocks[0].attn.b_Q += 0.1
    return model


NEGATIVE = {  # name -> (overrides, change, message pattern)
    "mlp": ({"attn_only": False, "d_mlp": 8}, None, "MLP"),
    "layernorm": ({"normalization_type": "LN"}, None, "LayerNorm"),
    "two_layers": ({"n_layers": 2}, None, "more than one layer"),
    "nonzero_bias": ({}, _with_bias, "nonzero bias"),
    "d_head_below_d": ({"d_head": 2}, None, "d_head = 2 < d = 3"),
    "rotary": ({"positional_embedding_type": "rotary", "rotary_dim": 4}, None, "rotary"),
}


@pytest.mark.parametrize("form", ["object", "state_dict"])
@pytest.mark.parametrize("case", list(NEGATIVE))
def test_models_outside_the_paper_are_refused_with_one_line(lens, case, form, refused):
    """MLP, LayerNorm, two layers, nonzero biases, d_head < d, rotary positions: one line naming it."""
    overrides, change, match = NEGATIVE[case]
    model = build(lens, **overrides)
    if change is not None:
        model = change(model)
    refused(load, model if form == "object" else model.state_dict(), match=match)


def test_lnpre_is_refused_on_the_object(lens, refused):
    """normalization_type='LNPre' has no weights, so only the object shows it; the object is refused."""
    refused(from_transformerlens, build(lens, normalization_type="LNPre"), match="LayerNorm")


# ------------------------------------------------------------------ the command line


def test_analyze_command_reads_a_hooked_transformer_checkpoint(lens, capsys, tmp_path):
    """`analyze` on ``torch.save`` of a one-layer attention-only HookedTransformer's state dict: the command's
    state is the one the lens's own weights give (read off by hand: ω_h the mean diagonal of the covariate block
    of W_K W_Qᵀ / attn_scale, μ_h the response entry of W_V W_O), and the file and the live object are one model
    (same prompts, same risk to the last digit). The ``transformerlens`` case of
    tests/reduced_dynamics/cli/test_analyze_formats.py, kept in this file so that one test file imports
    transformer_lens (:func:`test_no_other_test_file_imports_transformer_lens`)."""
    from reduced_dynamics.cli import main
    from reduced_dynamics.importers import analyze

    d_cov, heads = 3, 2
    net = build(
        lens, seed=2, d_model=d_cov + 1, d_head=d_cov + 1, n_heads=heads, n_ctx=32, d_vocab=5, dtype=torch.float64
    )
    a = net.blocks[0].attn
    WQ, WK, WV, WO = (t.detach().numpy() for t in (a.W_Q, a.W_K, a.W_V, a.W_O))
    KQ = np.stack([WK[h] @ WQ[h].T / a.attn_scale for h in range(heads)])
    omega = np.array([np.diag(k[:d_cov, :d_cov]).mean() for k in KQ])
    mu = np.array([WV[h] @ WO[h][:, d_cov] for h in range(heads)])[:, d_cov]
    path = tmp_path / "lens.pt"
    torch.save(net.state_dict(), path)
    for how in ("auto", "transformerlens"):
        rc = main(
            ["analyze", str(path), "--format", how, "--n-prompts", "300", "--lengths", "10", "--L", "20"]
            + ["--quiet", "--json"]
        )
        out, err = capsys.readouterr()
        assert rc == 0, err
        doc = json.loads(out)
        np.testing.assert_allclose(doc["state"]["omega"], omega, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(doc["state"]["mu"], mu, rtol=1e-12, atol=1e-15)
    setting = Setting(d=d_cov, L=20, sigma2=0.1)
    live = analyze(load(net, n_heads=heads), setting=setting, lengths=[10], n_prompts=300, seed=0)
    assert doc["risks"]["risk"]["model"] == pytest.approx(live.to_dict()["risks"]["risk"]["model"], rel=1e-12)


def test_no_other_test_file_imports_transformer_lens():
    """Importing transformer_lens costs ~9 s of CPU: the suite does it in this one file, which runs on one
    worker (`make test`: ``--dist loadfile``)."""
    tests = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"^\s*(from|import) transformer_lens\b", re.M)
    users = sorted(p.relative_to(tests).as_posix() for p in tests.rglob("*.py") if pattern.search(p.read_text("utf-8")))
    assert users == ["reduced_dynamics/importers/test_transformerlens.py"]
