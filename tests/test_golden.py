"""Golden model, quantizer and weight image."""

import dataclasses
import json
import time

import numpy as np
import pytest

from mlo_hw.model import numerics as nx
from mlo_hw.config import load_config
from mlo_hw.elaborate import main as elaborate
from mlo_hw.model.golden import PRE_LN_TRACE_ORDER, TRACE_ORDER, IntLayer, int_stack
from mlo_hw.model.quantize import build_model, random_inputs, run_int
from mlo_hw.model.reference import float_stack, gelu, gelu_tanh
from mlo_hw.model.weight_image import ALIGN, LAYER_ALIGN, layout, manifest, pack_image, unpack_image


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config("bert_tiny")
    layers, model = build_model(cfg)
    return cfg, layers, model


def test_int_model_is_close_to_float_and_fast(tiny):
    cfg, layers, model = tiny
    x, mask = random_inputs(cfg, np.random.default_rng(5), 2)[1]
    assert 0 < mask.sum() <= cfg.model.seq_len
    t0 = time.perf_counter()
    traces = []
    y = run_int(model, model.quantize_input(x), mask, cfg, traces)
    assert time.perf_counter() - t0 < 1.0
    assert y.dtype == np.int64 and y.min() >= -2**15 and y.max() < 2**15     # the int16 residual stream
    assert np.abs(y).max() > 2**11                                          # and it uses its range
    assert [tuple(t) for t in traces] == [TRACE_ORDER] * cfg.model.layers
    f = float_stack(x, layers, mask, cfg.model.heads)
    deq = model.dequantize_output(y)[mask]
    cos = (deq * f[mask]).sum(-1) / np.linalg.norm(deq, axis=-1) / np.linalg.norm(f[mask], axis=-1)
    assert cos.min() > 0.98
    # masked keys get zero probability in every head and row
    assert (traces[0]["probs"][:, :, ~mask] == 0).all()


@pytest.fixture(scope="module")
def tiny_pre():
    """bert_tiny's sizes as a GPT-2-style layer: pre-LN, causal, tanh GELU."""
    cfg = load_config("bert_tiny")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, norm="pre", causal=True, gelu="tanh"))
    layers, model = build_model(cfg)
    return cfg, layers, model


def _row_cosines(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_pre_ln_int_model_is_close_to_float(tiny_pre):
    """Pre-LN: the int16 stream saturates at each add, the LayerNorms read it alone; the output and what the layers
    add to their input (y - x, the part the residual does not carry through) both track the float reference."""
    cfg, layers, model = tiny_pre
    x, mask = random_inputs(cfg, np.random.default_rng(5), 2)[1]
    xi = model.quantize_input(x)
    traces = []
    y = run_int(model, xi, mask, cfg, traces)
    assert [tuple(t) for t in traces] == [PRE_LN_TRACE_ORDER] * cfg.model.layers
    assert y.min() >= -2**15 and y.max() < 2**15 and np.abs(y).max() > 2**11
    t = traces[0]
    assert np.array_equal(t["res1"], nx.saturate(xi + t["attn_out"], nx.RES_BITS))
    assert np.array_equal(t["out"], nx.saturate(t["res1"] + t["ffn_down"], nx.RES_BITS))
    assert np.array_equal(t["ln1"], nx.layernorm(xi, model.layers[0].ln1_gain, model.layers[0].ln1_bias,
                                                 model.layers[0].ln1_shift, nx.RES_BITS))
    assert model.input_scale == model.output_scale       # one residual scale for the whole pre-LN stack
    f = float_stack(x, layers, nx.attention_mask(mask, True), cfg.model.heads, norm="pre", gelu="tanh")
    deq = model.dequantize_output(y)[mask]
    assert _row_cosines(deq, f[mask]).min() > 0.999
    assert _row_cosines(deq - model.dequantize_output(xi)[mask], f[mask] - x[mask]).min() > 0.98


def test_the_tiled_schedule_runs_pre_ln(tiny_pre):
    """The DRAM-tiled schedule (the RTL's) runs pre-LN layers: one block of every row equals the golden model (smaller
    blocks: tests/test_prenorm.py)."""
    from mlo_hw.model.tiled import tiled_stack
    cfg, _, model = tiny_pre
    rng = np.random.default_rng(4)
    x = rng.integers(-4000, 4000, (cfg.seq_padded, cfg.model.hidden))
    keys = np.ones(cfg.seq_padded, bool)
    want = int_stack(x, model.layers, nx.attention_mask(keys, cfg.model.causal), cfg.model.heads)
    assert np.array_equal(tiled_stack(cfg, model.layers, x, keys, cfg.seq_padded).output, want)


def test_tanh_gelu_is_only_a_different_table():
    x = np.linspace(-6, 6, 1001)
    assert np.abs(gelu_tanh(x) - gelu(x)).max() < 1e-3 and np.abs(gelu_tanh(x) - gelu(x)).max() > 1e-5
    erf, tanh = nx.gelu_table(0.05, 0.02, 9), nx.gelu_table(0.05, 0.02, 9, flavour="tanh")
    assert erf.shape == tanh.shape == (256,) and 0 < np.abs(erf - tanh).max() <= 1
    with pytest.raises(ValueError, match="flavour 'swish'"):
        nx.gelu_table(0.05, 0.02, 9, flavour="swish")


def test_int_model_is_deterministic_and_integer_only(tiny):
    cfg, _, model = tiny
    x, mask = random_inputs(cfg, np.random.default_rng(6), 1)[0]
    xi = model.quantize_input(x)
    assert (run_int(model, xi, mask, cfg) == run_int(model, xi.copy(), mask, cfg)).all()
    p = model.layers[0]
    for m in IntLayer.MATRICES:
        mat = getattr(p, m)
        assert mat.w.dtype == np.int64 and np.abs(mat.w).max() <= 127
        assert mat.mult.max() < 2**nx.MULT_BITS and mat.mult.min() >= 1 and 1 <= mat.shift < 63
    assert np.abs(p.ln1_gain).max() < 2**17 and p.gelu.shape == (256,) and p.gelu.min() >= 0
    assert (p.narrow_in >= 0).all() and (p.narrow_in <= nx.NARROW_SHIFT_MAX).all() and p.narrow_ln1.shape == (cfg.model.hidden,)


@pytest.mark.parametrize("name", ["bert_tiny", "small"])
def test_weight_image_round_trip(name):
    cfg = load_config(name)
    _, model = build_model(cfg)
    img = pack_image(cfg, model.layers)
    lay = layout(cfg)
    assert len(img) == lay.stride * cfg.model.layers and lay.stride % LAYER_ALIGN == 0
    assert all(s.offset % ALIGN == 0 and s.bytes % ALIGN == 0 for s in lay.sections)
    for p, d in zip(model.layers, unpack_image(cfg, img)):
        for m in IntLayer.MATRICES:
            mat = getattr(p, m)
            assert (d[f"{m}.w"] == mat.w).all() and (d[f"{m}.bias"] == mat.bias).all()
            assert (d[f"{m}.mult"] == mat.mult).all() and d[f"{m}_shift"] == mat.shift
        assert (d["ln1.gain"] == p.ln1_gain).all() and (d["ln2.bias"] == p.ln2_bias).all()
        assert (d["gelu"] == p.gelu).all() and d["softmax_mult"] == p.softmax_mult
        assert (d["narrow_in"] == p.narrow_in).all() and (d["narrow_ln1"] == p.narrow_ln1).all()
        assert (d["ln1_shift"], d["ln2_shift"]) == (p.ln1_shift, p.ln2_shift)


def test_tile_weights_are_pe_simd_interleaved():
    cfg = load_config("small")
    _, model = build_model(cfg)
    img = np.frombuffer(pack_image(cfg, model.layers), np.int8)
    pe, simd = cfg.folding.pe, cfg.folding.simd
    sec = layout(cfg)["ffn_down"]
    w = model.layers[0].ffn_down.w
    t, nf, sf = 1, 1, 3                       # word j = nf * SF + sf of tile t
    word = img[sec.tile_offset(t) + (nf * (sec.cols // simd) + sf) * pe * simd:][: pe * simd].reshape(pe, simd)
    rows = t * cfg.folding.tile_rows + nf * pe
    assert (word == w[rows: rows + pe, sf * simd: (sf + 1) * simd]).all()


def test_manifest_lists_every_tensor_without_overlap():
    cfg = load_config("small")
    man = manifest(cfg, base=0x1000_0000)
    spans = sorted((t["offset"], t["offset"] + t["bytes"]) for layer in man["layers"] for t in layer["tensors"])
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert spans[0][0] == 0x1000_0000 and spans[-1][1] <= 0x1000_0000 + man["total_bytes"]
    names = {t["name"] for t in man["layers"][1]["tensors"]}
    assert {"header", "q.tile0.weight", "ffn_down.tile1.mult", "ln2.gain", "gelu.table", "narrow.in", "narrow.ln1"} <= names
    json.dumps(man)


def test_elaborate_writes_image_manifest_report(tmp_path):
    assert elaborate(["--config", "small", "-o", str(tmp_path)]) == 0
    cfg = load_config("small")
    assert (tmp_path / "weights.bin").stat().st_size == layout(cfg).total_bytes
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["layer_stride"] == layout(cfg).stride
    rep = (tmp_path / "report.md").read_text()
    assert "Analytical cycle bound" in rep and "## Memory plan (mlo_hw.plan)" in rep and "Mode: on-chip" in rep
    x = np.frombuffer((tmp_path / "golden_input.bin").read_bytes(), "<i2")
    assert x.size == cfg.model.seq_len * cfg.model.hidden
