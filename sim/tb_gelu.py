"""GELU table block against ``numerics.table_lookup``, bit for bit, with random valid/ready backpressure.

Params: ``config`` (name), ``seed``, ``lanes``, ``corrupt`` (compare against a table with one entry
changed: the run must fail; the negative check of the test suite).
"""
import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from mlo_hw.model import numerics as nx
from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, unpack


async def _load_table(dut, table):
    for addr, v in enumerate(table):
        dut.table_w__addr.value = addr
        dut.table_w__data.value = int(v) & 0xFF
        dut.table_w__en.value = 1
        await RisingEdge(dut.clk)
    dut.table_w__en.value = 0


async def _run(dut, table, beats, lanes, rng, p_valid, p_ready):
    await _load_table(dut, table)
    src = StreamSource(dut, "i", rng, p_valid=p_valid)
    sink = StreamSink(dut, "o", rng, p_ready=p_ready)
    cocotb.start_soon(src.send(pack(b, 8) for b in beats))
    got = [unpack(w, lanes, 8, signed=False) for w in await sink.receive(len(beats))]
    return got, sink


def _check(got, beats, table, what, corrupt=False):
    want_table = np.array(table)
    if corrupt:
        want_table[200] = want_table[200] + 1 if want_table[200] < 255 else want_table[200] - 1
    want = nx.table_lookup(np.array(beats), want_table).tolist()
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} beats differ, first at {bad[0]}: "
                     f"got {got[bad[0]]}, want {want[bad[0]]}")


@cocotb.test()
async def tables_under_backpressure(dut):
    """The model's GELU tables and a random table, every input value, random valid/ready."""
    from mlo_hw.config import load_config
    from mlo_hw.model.quantize import build_model
    p = tb_params()
    rng = random.Random(p["seed"])
    lanes = p["lanes"]
    await start_clock_and_reset(dut)
    _, model = build_model(load_config(p["config"]))
    tables = [layer.gelu.tolist() for layer in model.layers] + [[rng.randint(0, 255) for _ in range(256)]]
    for t, table in enumerate(tables):
        values = list(range(-128, 128)) * lanes
        rng.shuffle(values)
        beats = [values[j:j + lanes] for j in range(0, len(values), lanes)]
        beats += [[rng.choice((-128, 127, 0, -1)) for _ in range(lanes)] for _ in range(20)]
        got, _ = await _run(dut, table, beats, lanes, rng, 0.7, 0.6)
        _check(got, beats, table, f"table {t}", corrupt=p.get("corrupt", False))


@cocotb.test()
async def one_beat_per_cycle(dut):
    p = tb_params()
    rng = random.Random(p["seed"] + 1)
    lanes = p["lanes"]
    await start_clock_and_reset(dut)
    table = [rng.randint(0, 255) for _ in range(256)]
    beats = [[rng.randint(-128, 127) for _ in range(lanes)] for _ in range(200)]
    got, sink = await _run(dut, table, beats, lanes, rng, 1.0, 1.0)
    _check(got, beats, table, "full rate")
    span = sink.cycles[-1] - sink.cycles[0] + 1
    assert span == len(beats), f"{len(beats)} beats took {span} cycles"
    assert sink.cycles[0] <= 2, f"first beat after {sink.cycles[0]} cycles"
