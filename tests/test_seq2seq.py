"""Encoder-decoder models (T5, BART) from their ONNX fixtures: the float reference against onnxruntime, the integer
golden model against the float reference, and the pieces T5 adds (RMSNorm, the relative position bias in the
softmax's units, ReLU). The engine does not run them in RTL yet (docs/seq2seq.md)."""

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
    """Without its relative position bias T5's reference leaves onnxruntime, and the bias reaches the integer
    softmax as int16 in 2**-8 of log2 (the same table for every layer)."""
    fe = load(FIXTURES / "t5.onnx")
    model, host = seq2seq_model(fe), Seq2SeqHost(fe)
    ids, mask, dec = seq2seq_inputs(host, 12, 6, np.random.default_rng(1), 1)[0]
    r = host.run(ids, mask, dec)
    assert r["encoder"].bias.shape == (2, 12, 12) and r["self"].bias.shape == (2, 6, 6) and r["cross"].bias is None
    assert np.abs(model.encode(r["enc_in"], r["encoder"]) - r["enc_out"]).max() < 1e-4
    unbiased = type(r["encoder"])(r["encoder"].mask, None)
    assert np.abs(model.encode(r["enc_in"], unbiased) - r["enc_out"]).max() > 1e-2
    from mlo_hw.model.seq2seq import score_bias
    b = score_bias(r["encoder"].bias)
    assert b.dtype == np.int64 and np.abs(b).max() > 0
    np.testing.assert_array_less(np.abs(b / 256 * np.log(2) - r["encoder"].bias), 1 / 256 * np.log(2) / 2 + 1e-12)


def test_softmax_bias():
    """A zero bias is no bias, bit for bit; a bias constant along a row changes nothing; a bias of one log2 unit
    (256) on one key doubles its exponent."""
    rng = np.random.default_rng(0)
    s = rng.integers(-5000, 5000, (3, 5, 9))
    mask = rng.random((5, 9)) < 0.8
    mask[:, 0] = True
    plain = nx.softmax(s, mask, 1234, 14)
    assert np.array_equal(nx.softmax(s, mask, 1234, 14, np.zeros_like(s)), plain)
    row = rng.integers(-300, 300, (3, 5, 1))
    assert np.array_equal(nx.softmax(s, mask, 1234, 14, np.broadcast_to(row, s.shape)), plain)
    flat = np.zeros((1, 1, 4), np.int64)
    bias = flat.copy()
    bias[..., 1] = 256
    p = nx.softmax(flat, np.ones(4, bool), 1, 0, bias)
    assert p[0, 0, 1] == 2 * p[0, 0, 0] - 1 or p[0, 0, 1] == 2 * p[0, 0, 0]


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
