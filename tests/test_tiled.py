"""The DRAM-tiled schedule (mlo_hw/model/tiled.py) equals the golden model bit for bit for every block size, moves
exactly the bytes its layout implies, and lays K_h and V_h^T out in the MVAU's weight-word order."""
import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.model.golden import int_stack
from mlo_hw.model.quantize import build_model, random_inputs
from mlo_hw.model.tiled import layer_traffic, scratch_layout, tiled_stack
from mlo_hw.model.weight_image import layout


def _case(name, seed=3):
    cfg = load_config(name)
    _, model = build_model(cfg)
    rng = np.random.default_rng(seed)
    s = cfg.seq_padded
    x = np.zeros((s, cfg.model.hidden), np.int64)
    xf, mask = random_inputs(cfg, rng, 2)[1]
    x[:cfg.model.seq_len] = model.quantize_input(xf)
    full = np.zeros(s, bool)
    full[:cfg.model.seq_len] = mask
    return cfg, model, x, full


def _blocks(cfg):
    unit = int(np.lcm(cfg.folding.pe, cfg.folding.simd))
    return [b for b in range(unit, cfg.seq_padded + 1, unit) if cfg.seq_padded % b == 0]


@pytest.mark.parametrize("name", ["small", "bert_tiny"])
def test_every_block_size_equals_the_golden_model(name):
    cfg, model, x, mask = _case(name)
    want = int_stack(x, model.layers, mask, cfg.model.heads)
    for block in _blocks(cfg)[:4]:
        got = tiled_stack(cfg, model.layers, x, mask, block).output
        assert np.array_equal(got, want), f"block {block}: first difference at " \
                                          f"{np.argwhere(got != want)[0]}"


def test_traffic_per_layer_follows_from_the_dimensions():
    cfg, model, x, mask = _case("small")
    s, h, heads = cfg.seq_padded, cfg.model.hidden, cfg.model.heads
    lay = layout(cfg)
    small = sum(lay[n].bytes for n in ("header", "narrow", "ln1", "gelu", "ln2"))
    for block in _blocks(cfg):
        t = s // block
        log = tiled_stack(cfg, model.layers, x, mask, block).transfers
        for li in range(cfg.model.layers):
            got = layer_traffic(log, li)
            # the small sections once per layer (kept on chip), every matrix once per block
            assert got["weights_read"] == small + t * sum(lay[m.name].bytes for m in cfg.matrices)
            # X twice (pass 1, residual), Q once but the last block's (kept on chip), K and V^T of every head once
            # per query block
            assert got["activations_read"] == 2 * s * h * 2 + s * h - block * h + t * 2 * s * h
            # Q (but the last block's), K, V^T int8 and X' int16
            assert got["activations_written"] == 3 * s * h - block * h + 2 * s * h
        assert heads * (s * cfg.head_dim) == s * h


def test_k_and_vt_are_the_mvau_weight_order():
    """After a layer, scratch K_h / V_h^T read in the MVAU's (nf, sf, pe, simd) word order are the golden model's
    K_h and V_h^T, and each block wrote them in the runs the layout promises."""
    from mlo_hw.model.golden import int_layer
    from mlo_hw.model.weight_image import unpack_tile_weights
    cfg, model, x, mask = _case("small")
    s, h, dh, pe, simd = cfg.seq_padded, cfg.model.hidden, cfg.head_dim, cfg.folding.pe, cfg.folding.simd
    trace = {}
    int_layer(x, model.layers[0], mask, cfg.model.heads, trace)
    sc = scratch_layout(cfg)
    for block in _blocks(cfg):
        run = tiled_stack(cfg, model.layers[:1], x, mask, block)
        base = run.scratch_base
        for hh in range(cfg.model.heads):
            k = np.frombuffer(bytes(run.mem[base + sc.k + hh * s * dh:][:s * dh]), np.int8)
            vt = np.frombuffer(bytes(run.mem[base + sc.vt + hh * s * dh:][:s * dh]), np.int8)
            assert np.array_equal(unpack_tile_weights(k, s, dh, pe, simd), trace["k"][:, hh * dh:(hh + 1) * dh])
            assert np.array_equal(unpack_tile_weights(vt, dh, s, pe, simd), trace["v"][:, hh * dh:(hh + 1) * dh].T)
        q = np.frombuffer(bytes(run.mem[base + sc.q:][:s * h]), np.int8).reshape(s, h)
        assert np.array_equal(q[:s - block], trace["q"][:s - block])     # (the last block's stays on chip)
        assert not any(t.what == "q" and t.addr >= base + sc.q + (s - block) * h for t in run.transfers)
        k_runs = [t for t in run.transfers if t.what == "k" and t.kind == "write"]
        vt_runs = [t for t in run.transfers if t.what == "vt" and t.kind == "write"]
        assert len(k_runs) == (s // block) * cfg.model.heads and all(t.bytes == block * dh for t in k_runs)
        assert len(vt_runs) == (s // block) * cfg.model.heads * (dh // pe)
        assert all(t.bytes == block * pe for t in vt_runs)


def test_bad_block_is_rejected():
    cfg, model, x, mask = _case("small")
    with pytest.raises(ValueError, match="block"):
        tiled_stack(cfg, model.layers, x, mask, 3)


def test_a_corrupted_scratch_layout_is_caught():
    """Negative check: swapping two heads' K in the readback changes the output (the test can fail)."""
    import mlo_hw.model.tiled as tiled
    cfg, model, x, mask = _case("small")
    want = int_stack(x, model.layers, mask, cfg.model.heads)
    orig = tiled.unpack_tile_weights
    try:
        tiled.unpack_tile_weights = lambda flat, r, c, pe, simd: orig(flat, r, c, pe, simd)[::-1]
        got = tiled_stack(cfg, model.layers, x, mask, _blocks(cfg)[0]).output
    finally:
        tiled.unpack_tile_weights = orig
    assert not np.array_equal(got, want)
