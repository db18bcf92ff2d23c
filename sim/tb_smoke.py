"""Smoke testbench for the runner: a registered stream adder (sum of two int8 lanes)."""
import random

import cocotb

from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, to_signed


@cocotb.test()
async def adds_under_backpressure(dut):
    p = tb_params()
    rng = random.Random(p["seed"])
    await start_clock_and_reset(dut)
    pairs = [(rng.randint(-128, 127), rng.randint(-128, 127)) for _ in range(200)]
    src = StreamSource(dut, "i", rng, p_valid=0.7)
    sink = StreamSink(dut, "o", rng, p_ready=0.6)
    cocotb.start_soon(src.send(pack(pr, 8) for pr in pairs))
    got = await sink.receive(len(pairs))
    assert [to_signed(v, 9) for v in got] == [a + b for a, b in pairs]
