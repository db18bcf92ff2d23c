"""Softmax block: cocotb + Verilator bit-exact against numerics.softmax, lint, synthesis."""

import gc

import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.mvau import split_parts
from mlo_hw.hw.softmax import Softmax
from mlo_hw.synth import BLOCK_SYNTH_EXTRA, synth_verilog
from sim.runner import lint, simulate, to_verilog

BITS = load_config("bert_tiny").acc_bits(64)       # 23-bit scores: a head size up to 64
SMALL_BITS = load_config("small").acc_bits(load_config("small").head_dim)
# (row, lanes, score_bits, config for real score rows): one key a beat for the small config's rows of 8 (today's
# engine), and a multi-lane build (rows of 32 at 4 lanes) in the default suite
FAST = [(8, 1, SMALL_BITS, "small"), (32, 4, BITS, None)]
# the rest of rows of 8, 32 and 128 keys at 1, 4, 8 and 16 lanes (lanes <= row); bert_tiny's real rows (128 keys)
# at 16 lanes, minilm_l6's PE
SWEEP = [(128, 16, BITS, "bert_tiny")] + [(n, lanes, BITS, None) for n in (8, 32, 128) for lanes in (1, 4, 8, 16)
                                          if lanes <= n and (n, lanes) not in ((8, 1), (32, 4), (128, 16))]


def _verilog(row, lanes, bits=BITS):
    top = f"softmax_r{row}_l{lanes}_b{bits}"
    return to_verilog(Softmax(row=row, score_bits=bits, lanes=lanes), top), top


def _run(row, lanes, bits, config, rows):
    v, top = _verilog(row, lanes, bits)
    assert lint(v, top) == []
    params = {"row": row, "lanes": lanes, "score_bits": bits, "seed": 7, "rows": rows}
    simulate(v, top, "tb_softmax", params | ({"config": config} if config else {}))


@pytest.mark.parametrize("row,lanes,bits,config", FAST)
def test_softmax_bit_exact_full_rate_under_backpressure(row, lanes, bits, config):
    """Real and random/edge rows under random valid/ready; the full-rate throughput and latency."""
    _run(row, lanes, bits, config, rows=max(4, 96 // row))


@pytest.mark.slow
@pytest.mark.parametrize("row,lanes,bits,config", SWEEP)
def test_softmax_sweep(row, lanes, bits, config):
    _run(row, lanes, bits, config, rows=max(4, 256 // row))


@pytest.mark.slow
def test_softmax_realistic_rows_at_minilm_pe():
    cfg = load_config("minilm_l6")
    _run(cfg.seq_padded, cfg.folding.pe, cfg.acc_bits(cfg.head_dim), "minilm_l6", rows=8)


def test_softmax_testbench_catches_a_wrong_result():
    v, top = _verilog(8, 1, SMALL_BITS)          # a build of the fast suite
    with pytest.raises(AssertionError, match="realistic_rows"):
        simulate(v, top, "tb_softmax", {"row": 8, "lanes": 1, "score_bits": SMALL_BITS, "config": "small",
                                        "seed": 7, "rows": 24, "corrupt": True}, testcase="realistic_rows")


@pytest.mark.slow
@pytest.mark.parametrize("row,lanes", [(8, 1), (128, 16)])
def test_softmax_synthesizes_without_latches(row, lanes):
    v, top = _verilog(row, lanes)
    r = synth_verilog(v, top, extra=BLOCK_SYNTH_EXTRA["softmax"])
    assert r.latches == 0
    assert r.logic_depth <= 20, f"logic depth {r.logic_depth}"
    assert r.used["LUT"] > 0
    # per lane: (max - s) * mult, two partial products beyond one multiplier port (23-bit scores), and e * rcp
    assert r.used["DSP"] == (split_parts(BITS, False) + 1) * lanes


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_softmax_rejects_bad_parameters():
    with pytest.raises(ValueError, match="row"):
        Softmax(row=0, score_bits=20)
    with pytest.raises(ValueError, match="score_bits"):
        Softmax(row=8, score_bits=1)
    with pytest.raises(ValueError, match="lanes"):
        Softmax(row=12, score_bits=20, lanes=8)
    with pytest.raises(ValueError, match="dividers"):
        Softmax(row=8, score_bits=20, dividers=0)
    with pytest.raises(ValueError, match="slots"):
        Softmax(row=8, score_bits=20, slots=6)
    gc.collect()      # the rejected components' "never used" warnings fire here, filtered


def test_softmax_default_build_keeps_up():
    """Enough dividers for a row every ``row / lanes`` cycles; minilm_l6's PE lanes: 8 beats a row."""
    cfg = load_config("minilm_l6")
    sm = Softmax.from_config(cfg, lanes=cfg.folding.pe)
    assert (sm.beats, sm.dividers) == (8, 3)
    assert sm.dividers * sm.beats >= 19
    assert Softmax(row=128, score_bits=23).dividers == 1


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("name,lanes,score_interval,slots,dividers", [
    ("minilm_l6", 16, 1, 16, 3),      # a score beat every cycle (head_dim 32 = simd): 16 keys a cycle, full rate
                                      # (a row lives 65 cycles, 8 beats apart: 9 rows in flight, 16 slots)
    ("bert_tiny", 1, 8, 4, 1),        # 8 keys every 8 cycles (head_dim 64, simd 8): one lane keeps up
    ("minilm_l6_arty", 2, 4, 4, 1),   # 8 keys every 4 cycles: two lanes
])
def test_the_engine_softmax_is_sized_for_the_mvau_score_rate(name, lanes, score_interval, slots, dividers):
    """The engine's softmax takes the keys the MVAU makes a cycle (pe every head_dim / simd cycles) and no more:
    the fewest lanes dividing pe that keep up; its row memories are the shapes the planner counts."""
    from mlo_hw.hw.layer_engine import EngineGeometry
    cfg = load_config(name)
    g = EngineGeometry.from_config(cfg)
    sm = g.softmax(cfg)
    assert (sm.lanes, g.score_interval, sm.slots, sm.dividers) == (lanes, score_interval, slots, dividers)
    assert g.pe % sm.lanes == 0 and sm.lanes * g.score_interval >= g.pe          # keeps up with the MVAU
    assert sm.lanes == 1 or (sm.lanes // 2) * g.score_interval < g.pe              # and half as many would not
    shapes = Softmax.memory_shapes(sm.row, sm.score_bits, sm.lanes, g.softmax_interval)
    assert shapes["scores"] == (lanes * (sm.score_bits + 1), slots * sm.beats)
    assert shapes["exps"] == (lanes * 16, slots * sm.beats)


def _amaranth_rows(dut, rng, rows=6, max_cycles=None):
    """Random rows (one fully masked, one all equal) through ``dut`` with random stalls in Amaranth's
    simulator, checked against ``numerics.softmax``."""
    import numpy as np
    from sim.amaranth_streams import run_stream_test

    from mlo_hw.model import numerics as nx
    n, lanes = dut.row, dut.lanes
    scores = np.array([[rng.randint(-3000, 3000) for _ in range(n)] for _ in range(rows)])
    masks = np.array([[rng.random() < 0.8 for _ in range(n)] for _ in range(rows)])
    masks[2] = False                                                    # fully masked
    scores[3] = 77                                                      # all equal
    mult, shift = 41000, 16
    want = nx.softmax(scores, masks, mult, shift).ravel().tolist()

    async def set_scale(ctx):
        ctx.set(dut.mult, mult)
        ctx.set(dut.shift, shift)

    beats = [{"score": [int(v) for v in s], "mask": sum(int(b) << k for k, b in enumerate(m))}
             for s, m in zip(scores.reshape(-1, lanes), masks.reshape(-1, lanes))]
    got = run_stream_test(dut, dut.i, beats, dut.o, len(want) // lanes, rng, setup=set_scale,
                          max_cycles=max_cycles)
    got = [int(beat[k]) for beat in got for k in range(lanes)]
    assert any(0 < w < 255 for w in want)
    assert got == want


@pytest.mark.parametrize("n,lanes", [(12, 1), (12, 4), (12, 3)])
def test_softmax_odd_row_in_amaranth_simulator(n, lanes):
    """Rows of 12 keys (not a power of two), random stalls, Amaranth's simulator."""
    import random
    _amaranth_rows(Softmax(row=n, score_bits=21, lanes=lanes), random.Random(12))


@pytest.mark.parametrize("n,lanes,dividers,slots", [(8, 4, 1, 2), (8, 1, 2, 4)])
def test_softmax_small_divider_pool_in_amaranth_simulator(n, lanes, dividers, slots):
    """Fewer dividers and slots than full rate needs: rows wait for a free divider (its busy flag) and
    ingest for a free slot; still bit-exact (a divider restarted while busy loses a row: a hang)."""
    import random
    dut = Softmax(row=n, score_bits=21, lanes=lanes, dividers=dividers, slots=slots)
    rows = 10
    _amaranth_rows(dut, random.Random(5), rows=rows, max_cycles=rows * (40 + 4 * n))
