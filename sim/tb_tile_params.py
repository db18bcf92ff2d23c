"""cocotb test of mlo_hw.hw.engine.tile_params.TileParamLatch: tiles latched from a tile-buffer model while an
MVAU model reads the previous job's parameters at random times; every read returns its own tile's group (a set
is never overwritten while a job still reads it); at most two jobs hold sets; the fixed (PV) mode; a negative
check."""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from runner import tb_params

P = tb_params()
PE, NFG, S, BIAS_BITS, MULT_BITS = P["pe"], P["groups"], P["vectors"], P["bias_bits"], P["mult_bits"]
LATENCY = P["src_latency"]
GROUP_BITS = PE * (BIAS_BITS + MULT_BITS)


def group(tile, j):
    """A recognisable (bias, mult) group: a function of the tile and the group."""
    r = random.Random(tile * 1000 + j)
    return [r.randint(-(1 << 20), 1 << 20) for _ in range(PE)], [r.randrange(1 << MULT_BITS) for _ in range(PE)]


def pack(bias, mult):
    v = sum((b & ((1 << BIAS_BITS) - 1)) << (BIAS_BITS * p) for p, b in enumerate(bias))
    return v | sum(m << (MULT_BITS * p) for p, m in enumerate(mult)) << (BIAS_BITS * PE)


@cocotb.test()
async def jobs_overlap_without_overwriting(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for n in ("rst", "clear", "latch", "job", "matrix", "params__en"):
        getattr(dut, n).value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    state = {"tile": 0, "src": [0] * LATENCY}
    jobs, errors, max_pending = [], [], [0]
    rng = random.Random(3)

    async def tile_buffer():                 # src_data = group(src tile, src_addr of LATENCY cycles before)
        while True:
            dut.src_data.value = state["src"][0]
            await ReadOnly()
            a = int(dut.src_addr.value)
            state["src"] = state["src"][1:] + [pack(*group(state["tile"], a)) if a < NFG else 0]
            await RisingEdge(dut.clk)

    async def mvau():                        # reads every accepted job's S * NFG groups in order, at random
        expect = None
        while True:
            en = bool(jobs) and rng.random() < 0.6
            a = rng.randrange(NFG)
            dut.params__en.value, dut.params__addr.value = int(en), a
            await ReadOnly()
            if expect is not None:
                got = int(dut.params__data.value)
                if got != pack(*group(*expect)):
                    errors.append(f"tile {expect[0]} group {expect[1]}: wrong parameters")
            expect = None
            if en:
                jobs[0][1] -= 1
                expect = (jobs[0][0], a)
                if jobs[0][1] == 0:
                    jobs.pop(0)
            max_pending[0] = max(max_pending[0], len(jobs))
            await RisingEdge(dut.clk)

    cocotb.start_soon(tile_buffer())
    cocotb.start_soon(mvau())
    dut.matrix.value = 1
    dut.clear.value = 1
    await RisingEdge(dut.clk)
    dut.clear.value = 0
    await RisingEdge(dut.clk)       # the clear takes effect from a register, in this cycle: nothing else may come
    for t in range(8):
        state["tile"] = t
        dut.latch.value = 1
        for _ in range(100000):
            await ReadOnly()
            done = int(dut.latched.value)
            await RisingEdge(dut.clk)
            if done:
                break
        dut.latch.value = 0
        dut.job.value = 1
        jobs.append([t, S * NFG])
        await RisingEdge(dut.clk)
        dut.job.value = 0
    for _ in range(100000):
        await RisingEdge(dut.clk)
        if not jobs:
            break
    await ClockCycles(dut.clk, 3)
    assert not errors, f"{len(errors)} wrong reads, first: {errors[0]}"
    assert max_pending[0] == 2, f"at most {max_pending[0]} jobs were pending (expected the latch to run ahead by one)"
    # fixed mode (PV): bias 0, every channel the fixed multiplier
    dut.matrix.value, dut.fixed_mult.value = 0, 12345 & ((1 << MULT_BITS) - 1)
    dut.params__en.value = 0
    await ClockCycles(dut.clk, 2)
    assert int(dut.params__data.value) == pack([0] * PE, [12345 & ((1 << MULT_BITS) - 1)] * PE)
    assert pack(*group(1, 0)) != pack(*group(2, 0))      # negative check: tiles are told apart
