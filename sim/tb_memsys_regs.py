"""The memory system driven through its AXI4-Lite registers (AxiLiteMaster) with AxiRamRead as DRAM:
runs reported in STATUS and the counters, an error response reported with its address in
ERROR_ADDR/ERROR_CODE, and a hard reset in the middle of a run."""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiReadBus
from cocotbext.axi.constants import AxiResp

from axi_faults import FaultyRam, set_pauses
from runner import tb_params
from tb_memsys import IMAGE, Compute

P = tb_params()
REGS = {r["name"]: r for r in P["registers"]}
BIT = {(r["name"], f["name"]): 1 << f["lsb"] for r in P["registers"] for f in r["fields"]}
BASE = 5 * 4096 - 64
STRIDE, LAYER_BYTES = P["stride"], P["layer_bytes"]


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    ram = FaultyRam(AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=1 << 20)
    ram.log.setLevel(logging.WARNING)
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    axil.write_if.log.setLevel(logging.WARNING)
    axil.read_if.log.setLevel(logging.WARNING)
    for sig in (dut.tile_release, dut.waddr, dut.caddr, dut.param_slot, dut.param_addr, dut.compute_busy,
                dut.dma_stall):
        sig.value = 0
    await reset(dut)
    ram.write(BASE, IMAGE[:2 * STRIDE])
    return ram, axil


async def reset(dut):
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def rd(axil, name):
    return int.from_bytes((await axil.read(REGS[name]["offset"], 4)).data, "little")


async def wr(axil, name, value):
    await axil.write(REGS[name]["offset"], value.to_bytes(4, "little"))


async def start(axil, layers):
    await wr(axil, "WEIGHT_BASE_LO", BASE)
    await wr(axil, "LAYERS", layers)
    await wr(axil, "CTRL", BIT["CTRL", "irq_enable"] | BIT["CTRL", "start"])


async def wait_status(axil, want_mask, limit=2000):
    for _ in range(limit):
        s = await rd(axil, "STATUS")
        if s & want_mask and not s & BIT["STATUS", "busy"]:
            return s
    raise AssertionError(f"STATUS {s:#x} never showed {want_mask:#x} with busy low")


@cocotb.test()
async def runs_report_done_and_counters(dut):
    ram, axil = await setup(dut)
    for seed in P["seeds"]:
        rng = random.Random(seed)
        set_pauses(ram, rng, rng.choice([0, 0.3]), rng.choice([0, 0.3]))
        layers = rng.choice([1, 2])
        comp = Compute(dut, IMAGE, BASE, layers, rng, 0.5)
        await start(axil, layers)
        task = cocotb.start_soon(comp.run())
        s = await wait_status(axil, BIT["STATUS", "done"])
        assert not s & BIT["STATUS", "error"]
        await task
        assert int(dut.irq.value) == 1
        assert await rd(axil, "BYTES_READ") == layers * LAYER_BYTES
        cycles = await rd(axil, "CYCLES")
        assert cycles >= layers * LAYER_BYTES // P["beat_bytes"], cycles
        await wr(axil, "STATUS", BIT["STATUS", "done"])
        assert await rd(axil, "STATUS") == 0
    set_pauses(ram, None, 0, 0)


@cocotb.test()
async def error_response_reported_in_the_registers(dut):
    ram, axil = await setup(dut)
    rng = random.Random(3)
    for resp in (AxiResp.SLVERR, AxiResp.DECERR):
        bad = BASE + rng.randrange(LAYER_BYTES // P["beat_bytes"]) * P["beat_bytes"]
        ram.faults = {bad: resp}
        comp = Compute(dut, IMAGE, BASE, 1, rng, 0.0)
        await start(axil, 1)
        task = cocotb.start_soon(comp.run())
        s = await wait_status(axil, BIT["STATUS", "error"])
        assert not s & BIT["STATUS", "done"]
        assert await rd(axil, "ERROR_ADDR_LO") == bad
        assert await rd(axil, "ERROR_CODE") == int(resp)
        assert int(dut.irq.value) == 1
        task.cancel()
        await RisingEdge(dut.clk)
        dut.tile_release.value = 0
        ram.faults = {}
    comp = Compute(dut, IMAGE, BASE, 1, rng, 0.0)
    await start(axil, 1)
    task = cocotb.start_soon(comp.run())
    s = await wait_status(axil, BIT["STATUS", "done"])
    assert not s & BIT["STATUS", "error"], "START clears the error"
    await task


@cocotb.test()
async def hard_reset_in_the_middle_of_a_run(dut):
    ram, axil = await setup(dut)
    rng = random.Random(5)
    set_pauses(ram, rng, 0.3, 0.3)
    comp = Compute(dut, IMAGE, BASE, 2, rng, 0.3)
    await start(axil, 2)
    task = cocotb.start_soon(comp.run())
    await ClockCycles(dut.clk, 700)
    assert (await rd(axil, "STATUS")) & BIT["STATUS", "busy"]
    task.cancel()
    dut.tile_release.value = 0
    await reset(dut)
    assert await rd(axil, "STATUS") == 0
    assert await rd(axil, "LAYERS") == REGS["LAYERS"]["reset"]
    comp = Compute(dut, IMAGE, BASE, 2, rng, 0.0)
    await start(axil, 2)
    task = cocotb.start_soon(comp.run())
    await wait_status(axil, BIT["STATUS", "done"])
    await task
    assert await rd(axil, "BYTES_READ") == 2 * LAYER_BYTES
    set_pauses(ram, None, 0, 0)
