"""Round trips: package model → exported checkpoint (a file) → load → the same predictions.

Bit for bit (``np.array_equal``, float64) whenever the format holds the model's own parameters;
to one rounding of KQ when the exporter has to factor circuits (``K_h = V_h = I``,
``Q_h = √D · KQ_h``); refused, with one line, when the format cannot hold the model at all (a
self-attending query in a format that excludes it, or the reverse; general KQ_h in the narrow
heads of ``nn.MultiheadAttention(D, H > 1)``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.importers import CheckpointError, ImportedAttention, export, load
from reduced_dynamics.model.attention import AttentionModel

EPS = np.finfo(np.float64).eps
SUFFIX = {"authors": ".pt", "transformerlens": ".pth", "mha": ".bin", "safetensors": ".safetensors", "npz": ".npz"}


def _source(kind: str) -> ImportedAttention:
    """The package models of the round trips (d = 3)."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    if kind in ("separate", "merged", "separate_self"):
        m = AttentionModel(2, 3, "merged" if kind == "merged" else "separate")
        imp = ImportedAttention.from_package(m, m.init(seed=1))
        return dataclasses.replace(imp, query_attends_self=True) if kind == "separate_self" else imp
    if kind == "single_head":
        m = AttentionModel(1, 3)
        return ImportedAttention.from_package(m, m.init(seed=2))
    if kind == "multitask":
        from reduced_dynamics import Setting
        from reduced_dynamics.multitask.attention import init_mt_attention

        s = Setting(d=3, L=10, sigma2=0.1, tasks=((0, 1), (1, 2)))
        return ImportedAttention.from_package(init_mt_attention(2, s, init_scale=0.5, seed=3))
    if kind in ("narrow_heads", "narrow_heads_self"):  # what from_mha gives for nn.MultiheadAttention(4, 2)
        Q, K, V = rng.uniform(-0.5, 0.5, (3, 2, 2, 4))
        O = rng.uniform(-0.5, 0.5, (2, 1, 2))
        return ImportedAttention.from_factors(
            Q, K, V, O, d=3, attn_scale=math.sqrt(2), query_attends_self=kind.endswith("self")
        )
    if kind == "multitask_factors":  # the authors' layout with two outputs
        Q, K, V = rng.uniform(-0.5, 0.5, (3, 2, 5, 5))
        return ImportedAttention.from_factors(Q, K, V, rng.uniform(-0.5, 0.5, (2, 2, 5)), d=3, attn_scale=math.sqrt(5))
    raise AssertionError(kind)


EXACT, CLOSE = "exact", "close"
#: (model, format) -> expected outcome: EXACT, CLOSE, or a refusal's message pattern
MATRIX = {
    ("separate", "authors"): EXACT,
    ("separate", "transformerlens"): "query attend to itself",
    ("separate", "mha"): "cannot export to mha",
    ("separate", "safetensors"): EXACT,
    ("separate", "npz"): EXACT,
    ("single_head", "mha"): EXACT,
    ("single_head", "authors"): EXACT,
    ("merged", "authors"): CLOSE,
    ("merged", "mha"): "cannot export to mha",
    ("merged", "safetensors"): EXACT,
    ("merged", "npz"): EXACT,
    ("multitask", "authors"): CLOSE,
    ("multitask", "safetensors"): EXACT,
    ("multitask", "npz"): EXACT,
    ("multitask_factors", "authors"): EXACT,
    ("multitask_factors", "npz"): EXACT,
    ("separate_self", "transformerlens"): EXACT,
    ("separate_self", "authors"): "attends to itself",
    ("separate_self", "mha"): "attends to itself",
    ("separate_self", "npz"): EXACT,
    ("narrow_heads", "mha"): EXACT,
    ("narrow_heads", "authors"): CLOSE,
    ("narrow_heads", "safetensors"): EXACT,
    ("narrow_heads_self", "transformerlens"): CLOSE,  # d_head = 2 < d is refused on import: written with d_head = D
}


@pytest.mark.parametrize(("kind", "fmt"), list(MATRIX), ids=[f"{k}-{f}" for k, f in MATRIX])
def test_round_trip_through_a_file(kind, fmt, tmp_path, tokens, refused):
    """export(model, file, format) then load(file): predictions equal (bitwise where the format holds the parameters)."""
    src = _source(kind)
    want = MATRIX[(kind, fmt)]
    path = tmp_path / f"model{SUFFIX[fmt]}"
    if want not in (EXACT, CLOSE):
        refused(export, src, path, format=fmt, match=want)
        assert not path.exists()
        return
    assert export(src, path, format=fmt) == path
    back = load(path, n_out=src.n_out, n_heads=src.n_heads)
    Z, xq = tokens(64, 12, src.d, src.n_out, seed=4)
    assert back.query_attends_self == src.query_attends_self
    assert (back.n_heads, back.d, back.n_out) == (src.n_heads, src.d, src.n_out)
    if want == EXACT:
        assert np.array_equal(back.predict(Z, xq), src.predict(Z, xq))
        assert np.array_equal(back.KQ, src.KQ) and np.array_equal(back.OV, src.OV)
    else:
        assert np.all(np.abs(back.KQ - src.KQ) <= 2 * EPS * np.abs(src.KQ))
        assert np.array_equal(back.OV, src.OV)
        np.testing.assert_allclose(back.predict(Z, xq), src.predict(Z, xq), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize(
    ("kind", "fmt"),
    [("separate", "authors"), ("separate_self", "transformerlens"), ("narrow_heads", "mha"), ("separate", "npz")],
)
def test_imported_model_exports_back_to_its_own_format_bit_for_bit(kind, fmt, tmp_path, tokens):
    """import → export (same format) → import: identical circuits and head factors (nothing re-factored)."""
    path = tmp_path / f"a{SUFFIX[fmt]}"
    export(_source(kind), path, format=fmt)
    first = load(path, n_heads=2)
    export(first, tmp_path / f"b{SUFFIX[fmt]}", format=fmt)
    second = load(tmp_path / f"b{SUFFIX[fmt]}", n_heads=2)
    for key in ("Q", "K", "V", "O"):
        assert np.array_equal(first.head_factors[key], second.head_factors[key])
    Z, xq = tokens(32, 8, 3, 1, seed=5)
    assert np.array_equal(first.predict(Z, xq), second.predict(Z, xq))


@pytest.mark.parametrize("parameterisation", ["separate", "merged"])
def test_export_takes_the_package_model_and_its_params(parameterisation):
    """export(AttentionModel, format=..., params=...) equals exporting its ImportedAttention."""
    m = AttentionModel(2, 3, parameterisation)
    p = m.init(seed=0)
    a = export(m, format="npz", params=p)
    b = export(ImportedAttention.from_package(m, p), format="npz")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert np.array_equal(load(a).KQ, m.circuits(p)[0])


def test_separate_round_trip_restores_the_package_model():
    """The authors'-layout import of a 'separate' model gives back its model and exactly its parameters."""
    m = AttentionModel(2, 3)
    p = m.init(seed=0)
    model, params = load(export(m, format="authors", params=p)).attention_model()
    assert model == m
    assert all(np.array_equal(params[k], p[k]) for k in p)


@given(
    H=st.integers(1, 3),
    d=st.integers(1, 4),
    n_out=st.integers(1, 2),
    seed=st.integers(0, 2**16),
    fmt=st.sampled_from(["authors", "npz"]),
)
def test_square_factor_round_trip_is_bitwise_for_any_shape(H, d, n_out, seed, fmt):
    """For square factors with the package's logit scale, load(export(m)) predicts bit for bit, any H, d, n_out."""
    D = d + n_out
    rng = np.random.default_rng(seed)
    Q, K, V = rng.standard_normal((3, H, D, D))
    src = ImportedAttention.from_factors(Q, K, V, rng.standard_normal((H, n_out, D)), d=d, attn_scale=math.sqrt(D))
    back = load(export(src, format=fmt))
    Z, xq = rng.standard_normal((8, 5, D)), rng.standard_normal((8, d))
    assert np.array_equal(back.predict(Z, xq), src.predict(Z, xq))


def test_export_refuses_unknown_format_and_wrong_suffix(tmp_path, refused):
    src = _source("separate")
    refused(export, src, format="onnx", match="`format` must be one of")
    refused(export, src, tmp_path / "m.npz", format="authors", match="`path` must end in")
    refused(export, src, tmp_path / "m.pt", format="npz", match="`path` must end in .npz")
    refused(export, object(), format="npz", match="`model` must be")
    with pytest.raises(CheckpointError):
        export(AttentionModel(2, 3), format="npz", params=None)
