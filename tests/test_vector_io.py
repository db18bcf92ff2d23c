"""The Serializer (a word of lanes in, an element a beat out) under cocotb + Verilator with random valid and ready
(the Regroup testbench: a split of a word into its lanes, lane 0 first, is the same stream), lint, and the timing
property of ``registered_ready``: ``i.ready`` does not follow ``o.ready`` within a cycle."""

import pytest
from amaranth.sim import Simulator

from mlo_hw.hw.engine.vector_io import Serializer
from sim.runner import lint, simulate, to_verilog


@pytest.mark.parametrize("lanes,registered_ready", [(4, False), (4, True), (1, True)])
def test_serializer_under_random_backpressure(lanes, registered_ready):
    name = f"serializer_{lanes}_{int(registered_ready)}"
    v = to_verilog(Serializer(lanes, 16, registered_ready=registered_ready), name)
    assert lint(v, name) == []
    simulate(v, name, "tb_activation_io", {"dut": "regroup", "i_bits": 16 * lanes, "o_bits": 16})


def _ready_follows_o_ready(registered_ready: bool) -> bool:
    """Fill the serializer with o.ready low, then raise o.ready on the last element of a word: whether i.ready
    rises in that same cycle."""
    dut = Serializer(2, 8, registered_ready=registered_ready)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, [1, 2])
        for _ in range(4):                  # the word and (registered_ready) the spare fill up
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        await ctx.tick()                    # element 0 leaves; element 1 is the word's last
        seen["before"] = ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 0)
        seen["held"] = ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 1)
        seen["taking"] = ctx.get(dut.i.ready)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen["held"] != seen["taking"]


def test_registered_ready_does_not_follow_o_ready():
    assert _ready_follows_o_ready(False)        # the plain serializer: ready with the last element's ready
    assert not _ready_follows_o_ready(True)
