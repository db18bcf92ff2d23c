"""The burst split of the AXI DMAs (mlo_hw/hw/axi.py): ``burst_beats`` and the registered ``planned_burst``
against a Python model (remaining beats, at most max_burst_beats, never across a 4 KiB page), for every beat
index of a page and several beat sizes and burst limits (Amaranth's simulator)."""
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mlo_hw.hw.axi import PAGE_BYTES, AxiParams, burst_beats, planned_burst


def _want(p, addr, remaining):
    to_page = (PAGE_BYTES - addr % PAGE_BYTES) >> p.size_log2
    return min(remaining, p.max_burst_beats, to_page)


@pytest.mark.parametrize("data_bits,max_burst", [(64, 16), (64, 256), (32, 4), (128, 256), (256, 256), (64, 1)])
def test_burst_split_matches_the_page_and_length_rules(data_bits, max_burst):
    p = AxiParams(addr_bits=20, data_bits=data_bits, max_burst_beats=max_burst)
    m = Module()
    addr, remaining, changed = Signal(p.addr_bits), Signal(16), Signal()
    length = burst_beats(m, p, addr, remaining)
    plan_len, plan_last, planned = planned_burst(m, p, addr, remaining, changed)
    page_beats = PAGE_BYTES >> p.size_log2
    cases = [(0x3000 + (i << p.size_log2), r) for i in range(page_beats)
             for r in {1, 2, max_burst - 1, max_burst, max_burst + 1, page_beats - i, 1000} if r >= 1]
    bad = []

    async def bench(ctx):
        for a, r in cases:
            ctx.set(addr, a)
            ctx.set(remaining, r)
            ctx.set(changed, 1)
            await ctx.tick()
            ctx.set(changed, 0)
            want = _want(p, a, r)
            if ctx.get(length) != want:
                bad.append(("burst_beats", a, r, ctx.get(length), want))
            assert not ctx.get(planned)
            await ctx.tick()
            got = (ctx.get(plan_len), ctx.get(plan_last), ctx.get(planned))
            if got != (want, int(r == want), 1):
                bad.append(("planned_burst", a, r, got, (want, int(r == want), 1)))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, f"{len(bad)} of {len(cases)} differ, first {bad[0]}"
