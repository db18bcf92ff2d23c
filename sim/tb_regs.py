"""cocotb tests of mlo_hw.hw.regs.ControlRegs through cocotbext-axi's AxiLiteMaster."""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster
from cocotbext.axi.constants import AxiResp

from runner import tb_params

P = tb_params()
REGS = {r["name"]: r for r in P["registers"]}


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for s in ("busy", "done", "error", "error_addr", "error_code", "compute_busy", "dma_stall", "read_beat"):
        getattr(dut, s).value = 0
    dut.rst.value = 1
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    axil.write_if.log.setLevel(logging.WARNING)
    axil.read_if.log.setLevel(logging.WARNING)
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return axil


async def rd(axil, name):
    return int.from_bytes((await axil.read(REGS[name]["offset"], 4)).data, "little")


async def wr(axil, name, value):
    await axil.write(REGS[name]["offset"], value.to_bytes(4, "little"))


async def count_pulses(dut, sig, box):
    while True:
        await ReadOnly()
        box[0] += int(sig.value)
        await RisingEdge(dut.clk)


@cocotb.test()
async def reset_values_match_the_map(dut):
    axil = await setup(dut)
    for r in P["registers"]:
        got = int.from_bytes((await axil.read(r["offset"], 4)).data, "little")
        assert got == r["reset"], f"{r['name']}: {got:#x} != reset {r['reset']:#x}"
    assert await rd(axil, "ID") == 0x4D4C4F01


@cocotb.test()
async def read_write_and_byte_strobes(dut):
    axil = await setup(dut)
    rng = random.Random(P["seed"])
    for _ in range(20):
        v = rng.getrandbits(32)
        await wr(axil, "WEIGHT_BASE_LO", v)
        assert await rd(axil, "WEIGHT_BASE_LO") == v
        await ReadOnly()
        assert int(dut.weight_base.value) == v
        await RisingEdge(dut.clk)
    await wr(axil, "INPUT_BASE_LO", 0x11223344)
    await axil.write(REGS["INPUT_BASE_LO"]["offset"] + 2, b"\xAB")       # WSTRB = 0b0100
    assert await rd(axil, "INPUT_BASE_LO") == 0x11AB3344
    await wr(axil, "LAYERS", 0xFFFF0005)
    assert await rd(axil, "LAYERS") == 5 + (0xFFFF0000 & ((1 << REGS["LAYERS"]["fields"][0]["width"]) - 1))
    await ReadOnly()
    assert int(dut.layers.value) == 5
    await RisingEdge(dut.clk)
    await wr(axil, "OUTPUT_BASE_LO", 0xDEADBEE0)
    await ReadOnly()
    assert int(dut.output_base.value) == 0xDEADBEE0
    await RisingEdge(dut.clk)
    # read-only registers ignore writes
    await wr(axil, "ID", 0)
    assert await rd(axil, "ID") == 0x4D4C4F01


@cocotb.test()
async def unmapped_addresses_answer_slverr(dut):
    axil = await setup(dut)
    r = await axil.read(0xFC, 4)
    assert r.resp == AxiResp.SLVERR
    w = await axil.write(0xFC, b"\x01\x00\x00\x00")
    assert w.resp == AxiResp.SLVERR
    r = await axil.read(REGS["ID"]["offset"], 4)
    assert r.resp == AxiResp.OKAY


@cocotb.test()
async def start_done_irq_and_counters(dut):
    axil = await setup(dut)
    starts, resets = [0], [0]
    cocotb.start_soon(count_pulses(dut, dut.start, starts))
    cocotb.start_soon(count_pulses(dut, dut.soft_reset, resets))
    ctrl = {f["name"]: f["lsb"] for f in REGS["CTRL"]["fields"]}
    status = {f["name"]: f["lsb"] for f in REGS["STATUS"]["fields"]}
    await wr(axil, "CTRL", 1 << ctrl["irq_enable"])
    await wr(axil, "CTRL", 1 << ctrl["irq_enable"] | 1 << ctrl["start"])
    assert starts[0] == 1 and resets[0] == 0
    assert await rd(axil, "CTRL") == 1 << ctrl["irq_enable"]           # W1P bits read 0
    # the engine runs for 100 cycles: 60 compute, 25 stalled, 40 beats read
    dut.busy.value = 1
    for i in range(100):
        dut.compute_busy.value = int(i < 60)
        dut.dma_stall.value = int(60 <= i < 85)
        dut.read_beat.value = int(i % 5 < 2)
        await RisingEdge(dut.clk)
    dut.busy.value = dut.compute_busy.value = dut.dma_stall.value = dut.read_beat.value = 0
    dut.done.value = 1
    await RisingEdge(dut.clk)
    dut.done.value = 0
    assert await rd(axil, "CYCLES") == 100
    assert await rd(axil, "COMPUTE_CYCLES") == 60
    assert await rd(axil, "STALL_CYCLES") == 25
    assert await rd(axil, "BYTES_READ") == 40 * P["beat_bytes"]
    assert await rd(axil, "STATUS") == 1 << status["done"]
    await ReadOnly()
    assert int(dut.irq.value) == 1
    await RisingEdge(dut.clk)
    await wr(axil, "STATUS", 1 << status["done"])                        # W1C
    assert await rd(axil, "STATUS") == 0
    await ReadOnly()
    assert int(dut.irq.value) == 0
    await RisingEdge(dut.clk)
    # error status and address pass through
    dut.error.value = 1
    dut.error_addr.value = 0x12345678
    dut.error_code.value = 3
    assert await rd(axil, "STATUS") == 1 << status["error"]
    assert await rd(axil, "ERROR_ADDR_LO") == 0x12345678
    assert await rd(axil, "ERROR_CODE") == 3
    await ReadOnly()
    assert int(dut.irq.value) == 1
    await RisingEdge(dut.clk)
    await wr(axil, "CTRL", 1 << ctrl["soft_reset"])
    assert resets[0] == 1 and starts[0] == 1
    assert await rd(axil, "CYCLES") == 0, "soft reset clears the counters"
    # START while busy (a run, or the AXI drain after a soft reset) is refused: no pulse
    dut.busy.value = 1
    await wr(axil, "CTRL", 1 << ctrl["start"])
    await wr(axil, "CTRL", 1 << ctrl["start"] | 1 << ctrl["soft_reset"])
    assert starts[0] == 1 and resets[0] == 2, "START while busy must not pulse"
    dut.busy.value = 0
    await wr(axil, "CTRL", 1 << ctrl["start"])
    assert starts[0] == 2
