"""LayerNorm block (int16 residual add + LayerNorm, int16 out): cocotb + Verilator bit-exact against
``numerics.layernorm(a + b, ..., bits=16)``, lint, synthesis."""

import gc

import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.layernorm import LayerNorm
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


def _verilog(cfg_name, rms=False, width=1):
    top = f"layernorm_{cfg_name}{'_rms' if rms else ''}{f'_w{width}' if width > 1 else ''}"
    return to_verilog(LayerNorm(load_config(cfg_name).model.hidden, rms=rms, width=width), top), top


@pytest.mark.parametrize("cfg_name,rows,rms,width", [
    ("small", 12, False, 1), ("bert_tiny", 4, False, 1),    # H = 32 and 128
    ("small", 6, True, 1),      # RMSNorm (T5, Llama); its rows have means, so a LayerNorm would fail it
    ("bert_tiny", 4, False, 2),                             # 2 elements a beat (folding.ln_width)
    pytest.param("small", 6, False, 4, marks=pytest.mark.slow)])
def test_layernorm_bit_exact_under_backpressure(cfg_name, rows, rms, width):
    v, top = _verilog(cfg_name, rms, width)
    assert lint(v, top) == []
    simulate(v, top, "tb_layernorm", {"config": cfg_name, "seed": 5, "rows": rows, "rms": rms, "width": width})


def test_layernorm_testbench_catches_a_wrong_result():
    v, top = _verilog("small")
    with pytest.raises(AssertionError, match="realistic_rows"):
        simulate(v, top, "tb_layernorm", {"config": "small", "seed": 5, "rows": 8, "corrupt": True},
                 testcase="realistic_rows")


@pytest.mark.slow
def test_layernorm_synthesizes_without_latches():
    v, top = _verilog("small")
    r = synth_verilog(v, top)
    assert r.latches == 0
    assert r.logic_depth <= 20, f"logic depth {r.logic_depth}"
    assert r.used["LUT"] > 0


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_layernorm_rejects_bad_parameters():
    with pytest.raises(ValueError, match="hidden"):
        LayerNorm(hidden=0)
    with pytest.raises(ValueError, match="residual_bits"):
        LayerNorm(hidden=32, residual_bits=19)      # |a + b| would reach 2**19: outside LN_INPUT_BITS
    with pytest.raises(ValueError, match="residual_bits"):
        LayerNorm(hidden=32, residual_bits=1)
    for width in (3, 0, 64):        # not a power of two; none; not dividing hidden
        with pytest.raises(ValueError, match="width"):
            LayerNorm(hidden=32 if width != 64 else 48, width=width)
    gc.collect()      # the rejected components' "never used" warnings fire here, filtered


@pytest.mark.parametrize("width", [1, 2, 4])
def test_layernorm_odd_hidden_in_amaranth_simulator(width):
    """H = 24 (not a power of two: the mean is a true division), full-range int16 inputs, random stalls,
    Amaranth's simulator; 1, 2 and 4 elements a beat (``folding.ln_width``)."""
    import random

    import numpy as np
    from sim.amaranth_streams import run_stream_test

    from mlo_hw.model import numerics as nx
    h, rows = 24, 6
    lo, hi = -(1 << (nx.RES_BITS - 1)), (1 << (nx.RES_BITS - 1)) - 1
    rng = random.Random(11)
    dut = LayerNorm(hidden=h, width=width)
    a = np.array([[rng.randint(lo, hi) for _ in range(h)] for _ in range(rows)])
    b = np.array([[rng.randint(lo, hi) for _ in range(h)] for _ in range(rows)])
    a[1], b[1] = 7, -3                                                   # zero variance
    a[3], b[3] = lo, lo                                                  # zero variance, r = -2**16
    a[4] = [(lo, hi)[j % 2] for j in range(h)]                           # the largest variance
    b[4] = a[4]
    gain = [rng.randint(-(1 << 17) + 1, (1 << 17) - 1) for _ in range(h)]
    bias = [rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(h)]
    shift = 14
    want = nx.layernorm(a + b, gain, bias, shift, bits=nx.RES_BITS).ravel().tolist()
    assert {lo, hi} <= set(want) and any(lo < w < hi for w in want)      # saturates both ways, not only

    async def load_params(ctx):
        ctx.set(dut.shift, shift)
        for addr, word in enumerate(gain + bias):
            ctx.set(dut.param.addr, addr)
            ctx.set(dut.param.data, word)
            ctx.set(dut.param.en, 1)
            await ctx.tick()
        ctx.set(dut.param.en, 0)

    pairs = [{"a": int(x), "b": int(y)} for x, y in zip(a.ravel(), b.ravel())]
    beats = [pairs[i:i + width] for i in range(0, len(pairs), width)]
    got = run_stream_test(dut, dut.i, beats, dut.o, len(want) // width, rng, setup=load_params)
    assert [int(beat[j]) for beat in got for j in range(width)] == want
