"""Narrow's saturation without comparators (mlo_hw/hw/engine/activation_operand.py, ``Narrow._shift`` then
``Narrow._round_saturate``):
every shift 0..15 at the inputs around each edge of the int8 range (where floor(2x / 2**k) crosses
-258..-255 and 253..256) and at the int16 extremes, against numerics.narrow (Amaranth's simulator)."""
from amaranth import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from mlo_hw.hw.engine.activation_operand import Narrow
from mlo_hw.model import numerics as nx


def _edge_inputs(k):
    xs = {-(1 << 15), (1 << 15) - 1, -1, 0, 1}
    for t in range(-260, -253):
        xs.update(x for x in range((t << k) >> 1, ((t + 1) << k >> 1) + 2) if -(1 << 15) <= x < (1 << 15))
    for t in range(252, 258):
        xs.update(x for x in range((t << k) >> 1, ((t + 1) << k >> 1) + 2) if -(1 << 15) <= x < (1 << 15))
    return sorted(xs)


def test_narrow_saturation_at_the_range_edges():
    m = Module()
    x, k = Signal(signed(nx.RES_BITS)), Signal(unsigned(4))
    t, y = Signal(signed(nx.RES_BITS + 1)), Signal(signed(8))
    m.d.comb += [t.eq(Narrow._shift(x, k)), y.eq(Narrow._round_saturate(t))]
    cases = [(xv, kv) for kv in range(nx.NARROW_SHIFT_MAX + 1) for xv in _edge_inputs(kv)]
    sim = Simulator(m)
    bad = []

    async def bench(ctx):
        for xv, kv in cases:
            ctx.set(x, xv)
            ctx.set(k, kv)
            if ctx.get(y) != int(nx.narrow(xv, kv)):
                bad.append((xv, kv, ctx.get(y), int(nx.narrow(xv, kv))))

    sim.add_testbench(bench)
    sim.run()
    assert len(cases) > 1000
    assert not bad, f"{len(bad)} of {len(cases)} differ, first (x, k, got, want) {bad[0]}"
