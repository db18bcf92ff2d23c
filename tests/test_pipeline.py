"""The small shared helpers of mlo_hw.hw.pipeline against plain arithmetic: SplitCounter (the performance counters)
and split_sum (the DRAM-tiled sequencer's transfer addresses)."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mlo_hw.hw.pipeline import SplitCounter, split_sum


@pytest.mark.parametrize("width", [2, 3, 8, 9])
def test_split_counter_counts_as_one_counter_through_every_wrap(width):
    """The performance counters' SplitCounter against a plain modulo counter, cycle by cycle, on random increments and
    clears, long enough to wrap the whole width several times (the high half's carry at every low wrap)."""
    dut, rng = SplitCounter(width), random.Random(width)
    steps = 6 << width

    async def bench(ctx):
        want = 0
        for _ in range(steps):
            inc, clear = rng.random() < 0.8, rng.random() < 0.01
            ctx.set(dut.inc, inc)
            ctx.set(dut.clear, clear)
            await ctx.tick()
            want = 0 if clear else (want + inc) % (1 << width)
            assert ctx.get(dut.count) == want

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_split_sum_is_the_sum_two_cycles_later():
    """split_sum (the tiled sequencer's transfer addresses) against a + b modulo 2**width, two cycles after random
    terms, with sums around every carry out of the low half (terms near the half's edge)."""
    width, rng = 12, random.Random(3)
    m = Module()
    a, b = Signal(width), Signal(width)
    out = split_sum(m, a, b, "out", width)
    half = width // 2
    edge = [(1 << half) - 1, 1 << half, 0, (1 << width) - 1]
    terms = [(rng.choice(edge + [rng.randrange(1 << width)]), rng.randrange(1 << width)) for _ in range(400)]

    async def bench(ctx):
        for i, (x, y) in enumerate(terms):
            ctx.set(a, x)
            ctx.set(b, y)
            await ctx.tick()
            if i >= 2:
                x2, y2 = terms[i - 1]        # the value now is the terms' of two ticks ago (set before tick i - 1)
                assert ctx.get(out) == (x2 + y2) % (1 << width)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
