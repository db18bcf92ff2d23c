"""Amaranth simulator (``amaranth.sim``) helpers for ``lib.stream`` ports with random valid/ready gaps:
the in-process counterpart of :mod:`sim.streams` (cocotb), for block tests without Verilator."""
from __future__ import annotations

import random

from amaranth.sim import Simulator

__all__ = ["run_stream_test"]


def run_stream_test(dut, i, payloads, o, count: int, rng: random.Random, setup=None,
                    p_gap: float = 0.3, p_ready: float = 0.6, max_cycles: int | None = None) -> list:
    """Send ``payloads`` into stream ``i`` (a gap after a beat with probability ``p_gap``) after the
    coroutine ``setup(ctx)`` (e.g. loading parameters) has run, and collect ``count`` payloads from stream
    ``o`` with random ready (``p_ready``); returns them. ``max_cycles``: fail (a hang) when ``count``
    payloads have not come out by then."""
    got = []

    async def feed(ctx):
        if setup is not None:
            await setup(ctx)
        for payload in payloads:
            ctx.set(i.payload, payload)
            ctx.set(i.valid, 1)
            await ctx.tick().until(i.ready)
            ctx.set(i.valid, 0)
            if rng.random() < p_gap:
                await ctx.tick()

    async def drain(ctx):
        cycles = 0
        while len(got) < count:
            cycles += 1
            assert max_cycles is None or cycles <= max_cycles, \
                f"{len(got)} of {count} payloads out after {max_cycles} cycles"
            ready = rng.random() < p_ready
            ctx.set(o.ready, ready)
            if ready and ctx.get(o.valid):
                got.append(ctx.get(o.payload))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed, background=True)
    sim.add_testbench(drain)
    sim.run()
    return got
