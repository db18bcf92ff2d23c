"""Sequential divider, square root and multiplier (Amaranth simulator): exact on random and edge operands."""

import gc
import math
import random

import pytest
from amaranth.sim import Simulator

from mlo_hw.hw.divide import SerialDivider, SerialMultiplyAdd, SerialSqrt


def _run(dut, cases, set_inputs, get_result):
    """Start each case, wait for ``done``; returns [(case, result, cycles from start to done)]."""
    out = []

    async def bench(ctx):
        for case in cases:
            set_inputs(ctx, case)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 1
            while not ctx.get(dut.done):
                assert ctx.get(dut.busy)
                await ctx.tick()
                cycles += 1
                assert cycles < 200
            out.append((case, get_result(ctx), cycles))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def test_divider_reciprocals_and_general_quotients():
    rng = random.Random(0)
    dut = SerialDivider(33, 24, 18)
    cases = [(1 << 32, rng.randint(1 << 15, 1 << 22)) for _ in range(60)]
    cases += [(1 << 32, 1 << 15), (1 << 32, (1 << 15) + 1), (1 << 32, 1 << 22), (12345, 1), (0, 7)]
    cases += [(n, d) for d in (3, 1000, (1 << 24) - 1) for n in (rng.randrange(min(d << 18, 1 << 33)),)]
    res = _run(dut, cases, lambda ctx, c: (ctx.set(dut.dividend, c[0]), ctx.set(dut.divisor, c[1])),
               lambda ctx: ctx.get(dut.quotient))
    assert [q for _, q, _ in res] == [n // d for n, d in cases]
    assert {cycles for *_, cycles in res} == {18 + 1}


def test_divider_result_is_checked():
    """A corrupted expectation is caught (the comparison above can fail)."""
    dut = SerialDivider(33, 24, 18)
    (case, q, _), = _run(dut, [(1 << 32, 40000)], lambda ctx, c: (ctx.set(dut.dividend, c[0]),
                         ctx.set(dut.divisor, c[1])), lambda ctx: ctx.get(dut.quotient))
    assert q == (1 << 32) // 40000 and q != (1 << 32) // 40001


def test_sqrt_exact():
    rng = random.Random(1)
    dut = SerialSqrt(56)
    cases = [rng.randrange(1 << 56) for _ in range(60)] + [0, 1, 2, 3, 4, (1 << 56) - 1, (1 << 46), (1 << 47) - 1]
    cases += [x * x for x in (rng.randrange(1 << 28) for _ in range(10))]
    cases += [x * x - 1 for x in (rng.randrange(1, 1 << 28) for _ in range(10))]
    res = _run(dut, cases, lambda ctx, c: ctx.set(dut.radicand, c), lambda ctx: ctx.get(dut.root))
    assert [s for _, s, _ in res] == [math.isqrt(x) for x in cases]
    assert {cycles for *_, cycles in res} == {28 + 1}


def test_multiply_add_signed():
    """c + a*b and c - a*b, exact, at multiplier_bits + 2 cycles; the two halves carry into each other."""
    rng = random.Random(2)
    lim_a, lim_b = 1 << 33, (1 << 24) - 1
    cases = [(rng.randint(-lim_a, lim_a - 1), rng.randint(-lim_b, lim_b)) for _ in range(60)]
    cases += [(-lim_a, -lim_b), (-lim_a, lim_b), (lim_a - 1, lim_b), (0, lim_b), (5, 0), (-1, -1)]
    for subtract in (False, True):
        dut = SerialMultiplyAdd(34, 24, subtract=subtract)
        lim_c = (1 << 57) - 1 - lim_a * lim_b             # c +- a*b fits the 58 result bits
        cs = [rng.randint(-lim_c, lim_c) for _ in cases[:-6]] + [0, lim_c, -lim_c, -5, 1 << 40, 7]
        triples = [(a, b, c) for (a, b), c in zip(cases, cs)]
        res = _run(dut, triples, lambda ctx, t: (ctx.set(dut.a, t[0]), ctx.set(dut.b, t[1]), ctx.set(dut.c, t[2])),
                   lambda ctx: ctx.get(dut.result))
        assert [r for _, r, _ in res] == [c - a * b if subtract else c + a * b for a, b, c in triples]
        assert {cycles for *_, cycles in res} == {24 + 2}


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_bad_widths_rejected():
    with pytest.raises(ValueError, match="width"):
        SerialDivider(0, 8, 8)
    with pytest.raises(ValueError, match="radicand_bits"):
        SerialSqrt(0)
    with pytest.raises(ValueError, match="width"):
        SerialMultiplyAdd(8, 0)
    gc.collect()      # the rejected components' "never used" warnings fire here, filtered


def test_bit_length_tree():
    from amaranth import Module, Signal

    from mlo_hw.hw.divide import bit_length
    rng = random.Random(3)
    for width in (1, 5, 28, 56):
        x, y = Signal(width), Signal(8)
        m = Module()
        m.d.comb += y.eq(bit_length(x))
        values = [0, 1, (1 << width) - 1, 1 << (width - 1)]
        values += [rng.randrange(1 << rng.randrange(width + 1)) for _ in range(100)]
        got = []

        async def bench(ctx):
            for v in values:
                ctx.set(x, v)
                got.append(ctx.get(y))

        sim = Simulator(m)
        sim.add_testbench(bench)
        sim.run()
        assert got == [v.bit_length() for v in values]
