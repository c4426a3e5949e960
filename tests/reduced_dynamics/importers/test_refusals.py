"""Checkpoints that are not a one-layer attention model of the paper's kind: one-line CheckpointError each.

Files that are not checkpoints, wrong shapes, NaN weights, unknown formats, layouts with something
extra (an MLP key, a second layer, biases, separate key/value dimensions) and disagreeing options.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reduced_dynamics.importers import AuthorsAttention, CheckpointError, export, load
from reduced_dynamics.model.attention import AttentionModel

torch.set_num_threads(1)


def _authors_sd(H=2, d=3, n_out=1, seed=0):
    torch.manual_seed(seed)
    return AuthorsAttention(H, d, n_out).state_dict()


def _mha_sd(H=2, E=4, **kw):
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(E, H, **kw).state_dict()


def _tl_sd():
    rng = np.random.default_rng(0)
    return {f"blocks.0.attn.{w}": torch.tensor(rng.standard_normal((2, 4, 4))) for w in ("W_Q", "W_K", "W_V", "W_O")}


def _arrays():
    m = AttentionModel(2, 3)
    return m.init(seed=0)


@pytest.mark.parametrize(
    ("suffix", "match"),
    [
        (".pt", "not a readable PyTorch file"),
        (".pth", "not a readable PyTorch file"),
        (".bin", "not a readable PyTorch file"),
        (".npz", "not a readable .npz file"),
        (".safetensors", "not a readable .safetensors file"),
    ],
)
def test_random_bytes_are_refused(suffix, match, tmp_path, refused):
    path = tmp_path / f"junk{suffix}"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    refused(load, path, match=match)


def test_pickled_module_is_refused_by_weights_only(tmp_path, refused):
    """torch.save(model) pickles code, which weights_only=True loading refuses: the message says so in one line."""
    torch.save(AuthorsAttention(2, 3), tmp_path / "whole.pt")
    refused(load, tmp_path / "whole.pt", match="weights_only=True")


@pytest.mark.parametrize(
    ("name", "match"),
    [("missing.pt", "file not found"), ("model.onnx", "must be a .pt, .pth, .bin, .safetensors or .npz")],
)
def test_missing_file_and_unknown_suffix(name, match, tmp_path, refused):
    refused(load, tmp_path / name, match=match)


@pytest.mark.parametrize("fmt", ["onnx", "AUTHORS", "", None, 3])
def test_unknown_format_is_refused(fmt, refused):
    refused(load, _arrays(), format=fmt, match="`format` must be one of")


def test_format_must_fit_the_file_and_the_object(tmp_path, refused):
    export(AttentionModel(2, 3), tmp_path / "m.npz", format="npz", params=_arrays())
    refused(load, tmp_path / "m.npz", format="safetensors", match="reads .safetensors files")
    refused(load, torch.nn.MultiheadAttention(4, 2), format="authors", match="does not read an nn.MultiheadAttention")
    refused(load, _arrays(), format="authors", match="no key ends in 'q_proj.weight'")


def _nan(sd, key):
    sd = dict(sd)
    v = sd[key].clone() if isinstance(sd[key], torch.Tensor) else np.array(sd[key])
    v.reshape(-1)[1] = float("nan")
    sd[key] = v
    return sd


@pytest.mark.parametrize(
    ("make", "key", "kw"),
    [
        (_authors_sd, "attention_layer.k_proj.weight", {}),
        (_authors_sd, "attention_layer.o_proj.weight", {}),
        (_mha_sd, "in_proj_weight", {"n_heads": 2}),
        (_tl_sd, "blocks.0.attn.W_V", {}),
        (_arrays, "Q", {}),
        (_arrays, "o", {}),
    ],
)
def test_nan_weights_are_refused_naming_the_key(make, key, kw, refused):
    msg = refused(load, _nan(make(), key), match="NaN", **kw)
    assert key in msg


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda sd: {**sd, "attention_layer.k_proj.weight": torch.zeros(8, 3)}, "must have shape"),
        (lambda sd: {**sd, "attention_layer.o_proj.weight": torch.zeros(1, 6)}, r"must have shape \(n_out, H·D\)"),
        (lambda sd: {**sd, "attention_layer.o_proj.weight": torch.zeros(4, 8)}, "d = D - n_out must be >= 1"),
        (lambda sd: {**sd, "attention_layer.q_proj.weight": torch.zeros(6, 4)}, r"\(H·D, D\)"),
        (lambda sd: {**sd, "mlp.weight": torch.zeros(3)}, "unexpected key 'mlp.weight'"),
        (lambda sd: {**sd, "attention_layer.v_proj.bias": torch.full((8,), 0.5)}, "nonzero bias"),
        (
            lambda sd: {k: v for k, v in sd.items() if k != "attention_layer.o_proj.weight"},
            "no 'attention_layer.o_proj.weight' or 'o_proj.weight'",
        ),
        (lambda sd: {**{f"layers.{i}.{k}": v for i in (0, 1) for k, v in sd.items()}}, "more than one attention layer"),
    ],
    ids=["k_shape", "o_cols", "o_rows", "q_rows", "extra_key", "bias", "no_o", "two_layers"],
)
def test_authors_layout_refusals(change, match, refused):
    refused(load, change(_authors_sd()), match=match)


def test_authors_layout_accepts_wrappers_zero_biases_and_o_proj_beside():
    """``module.`` prefix, o_proj beside attention_layer (not inside), explicit zero biases: read as the plain
    layout."""
    sd = _authors_sd()
    want = load(sd)
    wrapped = {
        ("module.o_proj.weight" if k == "attention_layer.o_proj.weight" else "module." + k): v for k, v in sd.items()
    }
    wrapped["module.attention_layer.q_proj.bias"] = torch.zeros(8)
    got = load(wrapped)
    assert np.array_equal(got.KQ, want.KQ) and np.array_equal(got.OV, want.OV)
    assert "module.attention_layer." in got.conventions[1]


@pytest.mark.parametrize(
    ("sd", "kw", "match"),
    [
        (lambda: {**_mha_sd(), "in_proj_bias": torch.full((12,), 0.1)}, {"n_heads": 2}, "nonzero bias"),
        (lambda: {**_mha_sd(), "out_proj.bias": torch.full((4,), 0.1)}, {"n_heads": 2}, "nonzero bias"),
        (lambda: _mha_sd(kdim=3, vdim=3), {"n_heads": 2}, "kdim or vdim differ"),
        (lambda: _mha_sd(add_bias_kv=True), {"n_heads": 2}, "add_bias_kv"),
        (lambda: _mha_sd(), {}, "`n_heads` is required"),
        (lambda: _mha_sd(), {"n_heads": 3}, "`n_heads` must divide"),
        (lambda: _mha_sd(), {"n_heads": 2, "n_out": 4}, "`n_out` must be in"),
    ],
    ids=["in_bias", "out_bias", "kdim", "bias_kv", "no_heads", "heads_not_dividing", "n_out_too_big"],
)
def test_mha_refusals(sd, kw, match, refused):
    refused(load, sd(), match=match, **kw)


def test_mha_object_refusals(refused):
    refused(load, torch.nn.MultiheadAttention(4, 2, add_zero_attn=True), match="add_zero_attn")
    refused(load, torch.nn.MultiheadAttention(4, 2), n_heads=1, match="disagrees with the module's num_heads")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: {**a, "KQ": np.zeros((2, 4, 4))}, "mixed layouts"),
        (lambda a: {**a, "o": np.zeros((2, 3))}, r"`o` must have shape \(2, 4\)"),
        (lambda a: {**a, "K": np.zeros((2, 4, 3))}, r"`K` must have shape \(2, 4, 4\)"),
        (lambda a: {**a, "extra": np.zeros(2)}, "unexpected key 'extra'"),
        (lambda a: {**a, "d": np.array(2)}, "disagrees with D - n_out"),
        (lambda a: {**a, "query_attends_self": np.array(2)}, "must be 0 or 1"),
        (lambda a: {"KQ": np.zeros((2, 4, 4)), "OV": np.zeros((2, 4, 4))}, "`OV` must have shape"),
        (
            lambda a: {"KQ": np.zeros((2, 4, 4)), "ov": np.zeros((2, 4)), "OV": np.zeros((2, 1, 4))},
            "both `ov` and `OV`",
        ),
        (lambda a: {"fc.weight": np.zeros((3, 3))}, "not a one-layer attention checkpoint"),
        (lambda a: {"Q": np.zeros((2, 4, 4))}, "not a one-layer attention checkpoint"),
    ],
    ids=[
        "mixed",
        "o_shape",
        "k_shape",
        "extra",
        "bad_d",
        "bad_self",
        "OV_shape",
        "ov_and_OV",
        "not_attention",
        "incomplete",
    ],
)
def test_arrays_refusals(change, match, refused):
    refused(load, change(_arrays()), match=match)


@pytest.mark.parametrize(
    ("source", "kw", "match"),
    [
        (_authors_sd, {"n_out": 2}, "`n_out` = 2 disagrees"),
        (_authors_sd, {"n_heads": 3}, "`n_heads` = 3 disagrees"),
        (_tl_sd, {"n_heads": 3}, "`n_heads` = 3 disagrees"),
        (_arrays, {"n_out": 2}, "`n_out` = 2 disagrees"),
        (_tl_sd, {"n_out": 4}, "`n_out` must be in"),
    ],
)
def test_options_that_disagree_with_the_checkpoint(source, kw, match, refused):
    refused(load, source(), match=match, **kw)


@pytest.mark.parametrize("bad", [42, "not/a/dict", [1, 2], {"step": 3, "optimizer": {}}])
def test_sources_that_hold_no_state_dict(bad, refused):
    match = "must be a path|must be a .pt|not a state dict|is a list"
    refused(load, bad, match=match)


def test_checkpoint_errors_are_value_errors():
    """The CLI turns ValueError into one line and exit 2: CheckpointError is one."""
    assert issubclass(CheckpointError, ValueError)
