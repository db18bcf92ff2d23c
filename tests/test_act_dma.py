"""Activation I/O: WriteDma, ActReader and ActWriter under cocotb + Verilator against cocotbext-axi RAM
models, lint and synthesis."""

import pytest
from amaranth import Module
from amaranth.lib import wiring

from mlo_hw.hw.act_dma import ActReader, ActWriter, WriteDma, activation_bytes
from mlo_hw.hw.axi import AxiParams, axi_read_master_members, axi_write_master_members, forward_ports
from mlo_hw.config import load_config
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


def _write_dma(cfg_name="small"):
    p = AxiParams.from_config(load_config(cfg_name))
    return p, WriteDma(p, beats_bits=16)


class ActIO(wiring.Component):
    """Test top: an ActReader and an ActWriter on one AXI4 port (reader ports ``rd_*``, writer ``wr_*``)."""

    def __init__(self, p, max_bytes):
        self.p = p
        self.reader = ActReader(p, max_bytes)
        self.writer = ActWriter(p, max_bytes)
        self.axi = {**axi_read_master_members(p), **axi_write_master_members(p)}
        members = dict(self.axi)
        for prefix, block in (("rd", self.reader), ("wr", self.writer)):
            for name, mem in block.signature.members.items():
                if not name.startswith("m_axi_"):
                    members[f"{prefix}_{name}"] = mem
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader, m.submodules.writer = self.reader, self.writer
        forward_ports(m, self, self.reader, axi_read_master_members(self.p))
        forward_ports(m, self, self.writer, axi_write_master_members(self.p))
        for prefix, block in (("rd", self.reader), ("wr", self.writer)):
            for path, member, inner in block.signature.flatten(block):
                if path[0].startswith("m_axi_"):
                    continue
                outer = self
                for i, part in enumerate(path):
                    outer = getattr(outer, f"{prefix}_{part}" if i == 0 else part)
                m.d.comb += (outer.eq(inner) if member.flow == wiring.Out else inner.eq(outer))
        return m


def test_port_names_follow_axi_conventions():
    p, dma = _write_dma()
    names = set(dma.signature.members.keys())
    for ch in ("awid", "awaddr", "awlen", "awsize", "awburst", "awcache", "awprot", "awvalid", "awready",
               "wdata", "wstrb", "wlast", "wvalid", "wready", "bid", "bresp", "bvalid", "bready"):
        assert f"m_axi_{ch}" in names
    v = to_verilog(dma, "write_dma_ports")
    assert "output [7:0] m_axi_wstrb;" in v and "input [1:0] m_axi_bresp;" in v and "output [31:0] m_axi_awaddr;" in v


@pytest.mark.parametrize("cfg_name,seeds,trials", [
    ("bert_tiny", range(100, 103), 2),                                    # 64-bit, bursts up to 256 beats
    pytest.param("small", range(12), 10, marks=pytest.mark.slow),          # bursts up to 16 beats
])
def test_write_dma_against_axi_ram(cfg_name, seeds, trials):
    p, dma = _write_dma(cfg_name)
    top = f"write_dma_{cfg_name}"
    v = to_verilog(dma, top)
    assert lint(v, top) == []
    simulate(v, top, "tb_act_dma",
             {"dut": "write_dma", "addr_bits": p.addr_bits, "data_bits": p.data_bits,
              "max_burst": p.max_burst_beats, "beats_bits": 16, "seeds": list(seeds), "error_trials": trials})


def test_write_dma_data_ready_does_not_follow_wready():
    """The W registers load on AXI's handshake alone and ``data.ready`` comes from registers: with a burst issued,
    W holding a beat and a beat waiting in the skid, ``data.ready`` is the same whether WREADY is high or low in
    that cycle, and every offered beat leaves on W in order, none twice (an Amaranth simulation)."""
    from amaranth.sim import Simulator
    p, dma = _write_dma("small")
    seen = {"ready": [], "w": []}

    async def bench(ctx):
        ctx.set(dma.cmd.payload.addr, 0)
        ctx.set(dma.cmd.payload.beats, 4)
        ctx.set(dma.cmd.valid, 1)
        await ctx.tick()
        ctx.set(dma.cmd.valid, 0)
        ctx.set(dma.m_axi_awready, 1)
        ctx.set(dma.data.valid, 1)
        sent, stalls = 0, [0, 0, 0, 0, 1, 1, 1, 0, 1, 0] + [0] * 6
        for stall in stalls:
            ctx.set(dma.data.payload.data, 100 + sent)
            ctx.set(dma.data.payload.strb, 0xFF)
            for wready in (0, 1):               # data.ready under either WREADY, the same cycle
                ctx.set(dma.m_axi_wready, wready)
                seen["ready"].append(ctx.get(dma.data.ready))
            assert seen["ready"][-1] == seen["ready"][-2]
            ctx.set(dma.m_axi_wready, 1 - stall)
            if ctx.get(dma.m_axi_wvalid) and not stall:
                seen["w"].append(ctx.get(dma.m_axi_wdata))
            taken = ctx.get(dma.data.ready) and sent < 4
            await ctx.tick()
            sent += taken
            ctx.set(dma.data.valid, sent < 4)

    sim = Simulator(dma)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["w"] == [100, 101, 102, 103], seen["w"]
    assert 0 in seen["ready"] and 1 in seen["ready"]        # the skid filled: data.ready fell while W held


@pytest.mark.slow
def test_write_dma_synthesizes_without_latches():
    _, dma = _write_dma("bert_tiny")
    r = synth_verilog(to_verilog(dma, "write_dma_syn"), "write_dma_syn")
    print("WriteDma bert_tiny:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
    assert r.used["DSP"] == 0 and r.used["LUT"] < 600, r.used


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="outstanding"):
        WriteDma(AxiParams(), outstanding=0)
    with pytest.raises(ValueError, match="max_bytes"):
        ActReader(AxiParams(), 0)


@pytest.mark.slow       # the DRAM-tiled full-stack runs drive the same reader and writer under stalls and DDR3 timing
@pytest.mark.parametrize("cfg_name", ["bert_tiny"])
def test_activation_reader_and_writer_against_axi_ram(cfg_name):
    cfg = load_config(cfg_name)
    p = AxiParams.from_config(cfg)
    top = f"act_io_{cfg_name}"
    v = to_verilog(ActIO(p, activation_bytes(cfg)), top)
    assert lint(v, top) == []
    simulate(v, top, "tb_act_dma",
             {"dut": "act_io", "addr_bits": p.addr_bits, "data_bits": p.data_bits, "max_burst": p.max_burst_beats,
              "max_bytes": activation_bytes(cfg), "seeds": list(range(3)), "error_trials": 2})


@pytest.mark.slow
def test_reader_and_writer_synthesize_without_latches():
    cfg = load_config("bert_tiny")
    for cls in (ActReader, ActWriter):
        r = synth_verilog(to_verilog(cls.from_config(cfg), "act_syn"), "act_syn")
        print(f"{cls.__name__} bert_tiny:", r.used, "logic depth", r.logic_depth)
        assert r.latches == 0 and r.used["DSP"] == 0, r.used
