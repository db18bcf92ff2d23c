"""Encoder-decoder models (T5, BART) from their ONNX fixtures: the float reference against onnxruntime, the integer
golden model against the float reference, and the pieces T5 adds (RMSNorm, the relative position bias as a
table over key - query, ReLU). RTL runs: tests/test_encoder_decoder.py (docs/seq2seq.md)."""

from pathlib import Path

import numpy as np
import pytest

from mlo_hw.frontend import FrontendError, load
from mlo_hw.frontend.__main__ import main as cli
from mlo_hw.model import numerics as nx
from mlo_hw.model.golden import int_layer
from mlo_hw.model.reference import Memory, _layernorm

pytest.importorskip("onnxruntime")
from mlo_hw.frontend.seq2seq import (Seq2SeqHost, float_check, integer_check, seq2seq_inputs,  # noqa: E402
                                     seq2seq_model)

FIXTURES = Path(__file__).parent / "fixtures" / "onnx"


@pytest.fixture(scope="module", params=["t5", "bart"])
def s2s(request):
    fe = load(FIXTURES / f"{request.param}.onnx")
    host = Seq2SeqHost(fe)
    rng = np.random.default_rng(5)
    return request.param, seq2seq_model(fe), host, seq2seq_inputs(host, 16, 8, rng, 4), \
        seq2seq_inputs(host, 16, 8, rng, 4)


def test_layer_kind(s2s):
    name, model, host, _, _ = s2s
    assert (model.norm, model.rms, model.gelu) == {"t5": ("pre", True, "relu"), "bart": ("post", False, "erf")}[name]
    assert len(model.encoder) == len(model.decoder) == 2 and model.heads == 2
    assert all(p.cross is None for p in model.encoder) and all(p.cross is not None for p in model.decoder)
    # T5's cross-attention reads the encoder's output after its final norm, on the host; BART's reads it directly
    assert (host._between is not None) == (name == "t5")


def test_float_reference_matches_onnxruntime(s2s):
    """Each stack alone (onnxruntime's inputs) and end to end (the reference's encoder output through the host's
    part between the stacks) within 1e-4 of onnxruntime (about 2e-6 measured); a wrong weight is caught."""
    name, model, host, inputs, _ = s2s
    err = float_check(model, host, inputs)
    print(name, err)
    assert max(err.values()) < 1e-4
    c = model.decoder[1].cross
    c.k_w, c.v_w = c.v_w, c.k_w
    try:
        bad = float_check(model, host, inputs)
    finally:
        c.k_w, c.v_w = c.v_w, c.k_w
    assert bad["decoder"] > 1e-3 and bad["encoder"] < 1e-4


def test_integer_golden_model_tracks_float(s2s):
    name, model, host, inputs, calib = s2s
    got = integer_check(model, host, calib, inputs)
    print(name, {k: v for k, v in got.items() if k != "model"})
    assert got["encoder"] > 0.99 and got["decoder"] > 0.99
    q = got["model"]
    assert all(layer.rms == (name == "t5") for layer in q.encoder + q.decoder)
    assert all(layer.cross is not None for layer in q.decoder) and q.memory_on_host == (name == "t5")


def test_t5_relative_position_bias_matters():
    """Without its relative position bias T5's reference leaves onnxruntime; the bias is a function of key - query
    (a table per stack), which each layer of the integer model holds in its own score units."""
    fe = load(FIXTURES / "t5.onnx")
    model, host = seq2seq_model(fe), Seq2SeqHost(fe)
    ids, mask, dec = seq2seq_inputs(host, 12, 6, np.random.default_rng(1), 1)[0]
    r = host.run(ids, mask, dec)
    assert r["encoder"].bias.shape == (2, 12, 12) and r["self"].bias.shape == (2, 6, 6) and r["cross"].bias is None
    assert np.abs(model.encode(r["enc_in"], r["encoder"]) - r["enc_out"]).max() < 1e-4
    unbiased = type(r["encoder"])(r["encoder"].mask, None)
    assert np.abs(model.encode(r["enc_in"], unbiased) - r["enc_out"]).max() > 1e-2
    from mlo_hw.model.golden import position_bias
    from mlo_hw.model.seq2seq import quantize_seq2seq, relative_table
    table = relative_table(r["encoder"].bias, 16, r["encoder"].mask)
    keep = r["encoder"].mask
    assert table.shape == (2, 31) and np.allclose(position_bias(table, 12, 12)[:, keep], r["encoder"].bias[:, keep])
    assert not table[:, :3].any()                              # distances -15..-13: beyond the 12 tokens
    with pytest.raises(ValueError, match="not a function of key - query"):
        relative_table(r["encoder"].bias + np.random.default_rng(0).normal(0, 1, (2, 12, 12)), 16)
    q = quantize_seq2seq(model, [r], True, radius=16)
    layer = q.encoder[1]
    unit = layer.scales["q"] * layer.scales["k"] / np.sqrt(16)
    assert layer.score_bias.shape == (2, 31) and np.abs(layer.score_bias * unit - table).max() <= unit / 2 + 1e-12
    assert q.decoder[0].score_bias is not None and q.decoder[0].cross is not None


def test_position_bias_of_a_decode_step():
    """The bias of query rows after P cached keys is the full sequence's rows P.. (what a decode step uses)."""
    from mlo_hw.model.golden import position_bias
    table = np.random.default_rng(3).integers(-50, 50, (2, 19))            # radius 10
    full = position_bias(table, 10, 10)
    assert np.array_equal(position_bias(table, 3, 8, first_query=5), full[:, 5:8, :8])
    assert full[0, 4, 6] == table[0, 6 - 4 + 9] and full[1, 6, 4] == table[1, 4 - 6 + 9]


def test_integer_rmsnorm():
    """RMSNorm is the integer LayerNorm without the mean: close to the float one for a row with a large mean."""
    rng = np.random.default_rng(2)
    h = 64
    x = rng.normal(3.0, 1.0, (4, h))
    r = np.floor(x * 1000 + 0.5).astype(np.int64)
    gamma = rng.normal(1, 0.1, h)
    from mlo_hw.model.quantize import _layernorm_params
    s_out = 4.0 / 32767
    gain, bias, shift = _layernorm_params(gamma, np.zeros(h), s_out, h)
    got = nx.layernorm(r, gain, bias, shift, nx.RES_BITS, rms=True) * s_out
    want = _layernorm(r / 1000, gamma, 0.0, 1e-12, rms=True)
    assert np.abs(got - want).max() < 2e-3
    assert np.abs(nx.layernorm(r, gain, bias, shift, nx.RES_BITS) * s_out - want).max() > 0.5   # LayerNorm differs


def test_cross_block_needs_a_memory(s2s):
    name, model, host, inputs, calib = s2s
    q = integer_check(model, host, calib, inputs[:1])["model"]
    x = np.zeros((4, model.hidden), np.int64)
    with pytest.raises(ValueError, match="go together"):
        int_layer(x, q.decoder[0], np.ones(4, bool), model.heads)
    with pytest.raises(ValueError, match="go together"):
        from mlo_hw.model.reference import float_layer
        float_layer(x, model.encoder[0], np.ones(4, bool), model.heads, memory=Memory(x, np.ones(4, bool)))


def test_cli_check(capsys):
    assert cli([str(FIXTURES / "bart.onnx"), "--check", "--seq-len", "12"]) == 0
    out = capsys.readouterr().out
    assert "engine: runnable as an encoder-decoder" in out
    line = out.strip().splitlines()[-1]
    assert line.startswith("encoder-decoder (post-LayerNorm, erf; 4 inputs of 12 + 8 tokens)")
    assert cli([str(FIXTURES / "bert.onnx"), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --check: 1 layer group(s)") and "\n" not in err


def test_one_stack_is_not_an_encoder_decoder():
    with pytest.raises(FrontendError, match="1 layer group"):
        seq2seq_model(load(FIXTURES / "bert.onnx"))
