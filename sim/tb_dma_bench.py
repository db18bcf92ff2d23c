"""Bandwidth bench of the memory system: one layer from an always-ready AxiRamRead, compute releasing
each tile bank as soon as it is full. Writes {"bytes", "cycles"} to params["result_path"]."""
import json
import logging

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus

from runner import tb_params

P = tb_params()


async def release_tiles(dut):
    while True:
        await ReadOnly()
        ready = int(dut.tile_ready.value)
        await RisingEdge(dut.clk)
        dut.tile_release.value = ready
        if ready:
            await RisingEdge(dut.clk)
            dut.tile_release.value = 0


@cocotb.test()
async def one_layer_bandwidth(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=1 << 22)
    ram.log.setLevel(logging.WARNING)
    for sig in (dut.start, dut.cancel, dut.tile_release, dut.waddr, dut.caddr, dut.param_slot, dut.param_addr):
        sig.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    ram.write(P["base"], open(P["image_path"], "rb").read()[:P["stride"]])
    cocotb.start_soon(release_tiles(dut))
    dut.weight_base.value = P["base"]
    dut.layers.value = 1
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    cycles, beats = 0, 0
    while True:
        await ReadOnly()
        beats += int(dut.beat.value)
        assert not int(dut.error.value)
        if int(dut.done.value):
            break
        await RisingEdge(dut.clk)
        cycles += 1
    with open(P["result_path"], "w") as f:
        json.dump({"bytes": beats * P["beat_bytes"], "cycles": cycles + 1}, f)
