"""Softmax block: cocotb + Verilator bit-exact against numerics.softmax, lint, synthesis."""

import gc

import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.softmax import Softmax
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog

CONFIGS = ("small", "bert_tiny")      # rows of 8 and 128 keys


def _verilog(cfg_name):
    cfg = load_config(cfg_name)
    top = f"softmax_{cfg_name}"
    return to_verilog(Softmax.from_config(cfg), top), top


@pytest.mark.parametrize("cfg_name,rows", [("small", 24), ("bert_tiny", 6)])
def test_softmax_bit_exact_under_backpressure(cfg_name, rows):
    v, top = _verilog(cfg_name)
    assert lint(v, top) == []
    simulate(v, top, "tb_softmax", {"config": cfg_name, "seed": 7, "rows": rows})


def test_softmax_testbench_catches_a_wrong_result():
    v, top = _verilog("small")
    with pytest.raises(AssertionError, match="realistic_rows"):
        simulate(v, top, "tb_softmax", {"config": "small", "seed": 7, "rows": 24, "corrupt": True},
                 testcase="realistic_rows")


@pytest.mark.slow
def test_softmax_synthesizes_without_latches():
    v, top = _verilog("small")
    r = synth_verilog(v, top)
    assert r.latches == 0
    assert r.logic_depth <= 20, f"logic depth {r.logic_depth}"
    assert r.used["LUT"] > 0


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_softmax_rejects_bad_parameters():
    with pytest.raises(ValueError, match="row"):
        Softmax(row=0, score_bits=20)
    with pytest.raises(ValueError, match="score_bits"):
        Softmax(row=8, score_bits=1)
    gc.collect()      # the rejected components' "never used" warnings fire here, filtered


def test_softmax_odd_row_in_amaranth_simulator():
    """Rows of 12 keys (not a power of two), random stalls, Amaranth's simulator."""
    import random

    import numpy as np
    from sim.amaranth_streams import run_stream_test

    from mlo_hw.model import numerics as nx
    n, bits, rows = 12, 21, 6
    rng = random.Random(12)
    dut = Softmax(row=n, score_bits=bits)
    scores = np.array([[rng.randint(-3000, 3000) for _ in range(n)] for _ in range(rows)])
    masks = np.array([[rng.random() < 0.8 for _ in range(n)] for _ in range(rows)])
    masks[2] = False                                                    # fully masked
    scores[3] = 77                                                      # all equal
    mult, shift = 41000, 16
    want = nx.softmax(scores, masks, mult, shift).ravel().tolist()

    async def set_scale(ctx):
        ctx.set(dut.mult, mult)
        ctx.set(dut.shift, shift)

    beats = [{"score": int(s), "mask": int(k)} for s, k in zip(scores.ravel(), masks.ravel())]
    got = run_stream_test(dut, dut.i, beats, dut.o, len(want), rng, setup=set_scale)
    assert any(0 < w < 255 for w in want)
    assert got == want
