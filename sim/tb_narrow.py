"""The engine's narrowing stage (``engine.activation_operand.Narrow``) against ``numerics.narrow``, bit for bit, with
random valid/ready: random int16 lanes (with the extremes), random shifts 0..15, and bypassed words
(the low byte of each lane passes through). Params: ``lanes``, ``seed``, ``words``, ``corrupt`` (compare
against shift + 1: the run must fail)."""
import random

import cocotb
import numpy as np

from mlo_hw.model import numerics as nx
from mlo_hw.hw.engine.param_copier import SHIFT_LANE_BITS
from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, unpack


@cocotb.test()
async def random_words_under_backpressure(dut):
    p = tb_params()
    lanes, n = p["lanes"], p["words"]
    rng, nrng = random.Random(p["seed"]), np.random.default_rng(p["seed"])
    x = nrng.integers(-(1 << 15), 1 << 15, (n, lanes))
    x[nrng.random((n, lanes)) < 0.05] = -(1 << 15)
    x[nrng.random((n, lanes)) < 0.05] = (1 << 15) - 1
    k = nrng.integers(0, nx.NARROW_SHIFT_MAX + 1, (n, lanes))
    bypass = nrng.random(n) < 0.2
    width = {"data": nx.RES_BITS * lanes, "shift": SHIFT_LANE_BITS * lanes}
    words = [pack(x[i], nx.RES_BITS) | pack(k[i], SHIFT_LANE_BITS) << width["data"]
             | int(bypass[i]) << (width["data"] + width["shift"]) for i in range(n)]
    k_want = k + (1 if p.get("corrupt") else 0)
    want = [list(np.where(bypass[i], ((x[i] + 128) & 255) - 128, nx.narrow(x[i], k_want[i]))) for i in range(n)]
    await start_clock_and_reset(dut)
    cocotb.start_soon(StreamSource(dut, "i", rng, p_valid=0.7).send(words))
    got = [unpack(w, lanes, 8) for w in await StreamSink(dut, "o", rng, p_ready=0.6).receive(n, 20 * n + 100)]
    bad = [i for i in range(n) if got[i] != want[i]]
    assert not bad, f"{len(bad)} of {n} words differ, first {bad[0]}: got {got[bad[0]]}, want {want[bad[0]]}"
