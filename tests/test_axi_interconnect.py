"""The AXI read arbiter and the aclk/aresetn top-level wrapper: two ReadDmas behind a ReadArbiter,
wrapped by AxiTop, under cocotb + Verilator against cocotbext-axi's AxiRamRead; lint, synthesis, ports."""

import re

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mlo_hw.hw.axi import AxiParams, axi_read_master_members, forward_ports
from mlo_hw.hw.axi_interconnect import AxiTop, ReadArbiter
from mlo_hw.config import load_config
from mlo_hw.synth import synth_verilog
from mlo_hw.hw.weight_dma import ReadDma, beat_layout, command_layout
from sim.runner import lint, simulate, to_verilog

BEATS_BITS, TAG_BITS = 16, 4


class TwoReaders(wiring.Component):
    """Test design: ReadDma 0 and 1 (ports ``cmd<i>``, ``beats<i>``, ``clear<i>``, ``busy<i>``,
    ``error<i>``, ``error_addr<i>``, ``error_code<i>``) sharing ``m_axi`` through a ReadArbiter."""

    def __init__(self, p):
        self.p = p
        self.arb = ReadArbiter(p, 2)
        members = {}
        for i in range(2):
            members.update({
                f"cmd{i}": In(stream.Signature(command_layout(p, BEATS_BITS, TAG_BITS))),
                f"beats{i}": Out(stream.Signature(beat_layout(p, TAG_BITS))),
                f"clear{i}": In(1), f"busy{i}": Out(1), f"error{i}": Out(1),
                f"error_addr{i}": Out(p.addr_bits), f"error_code{i}": Out(3),
            })
        members.update(axi_read_master_members(self.arb.out_params))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.arb = arb = self.arb
        forward_ports(m, self, arb, axi_read_master_members(arb.out_params))
        for i in range(2):
            dma = ReadDma(self.p, beats_bits=BEATS_BITS, tag_bits=TAG_BITS)
            m.submodules[f"dma{i}"] = dma
            for name, member in axi_read_master_members(self.p).items():
                port = getattr(arb, name.replace("m_axi", f"s{i}_axi"))
                inner = getattr(dma, name)
                m.d.comb += port.eq(inner) if member.flow == Out else inner.eq(port)
            wiring.connect(m, wiring.flipped(getattr(self, f"cmd{i}")), dma.cmd)
            wiring.connect(m, dma.beats, wiring.flipped(getattr(self, f"beats{i}")))
            m.d.comb += [
                dma.clear.eq(getattr(self, f"clear{i}")), dma.cancel.eq(0),
                getattr(self, f"busy{i}").eq(dma.busy), getattr(self, f"error{i}").eq(dma.error),
                getattr(self, f"error_addr{i}").eq(dma.error_addr), getattr(self, f"error_code{i}").eq(dma.error_code),
            ]
        return m


def _top(cfg_name):
    p = AxiParams.from_config(load_config(cfg_name))
    return p, AxiTop(TwoReaders(p))


def test_top_has_aclk_aresetn_and_flat_axi_ports():
    _, top = _top("small")
    v = to_verilog(top, "arb_top_ports")
    ports = re.findall(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?(\w+);", v, re.M)
    names = {n: (d, int(w) + 1 if w else 1) for d, w, n in ports}
    assert names["aclk"] == ("input", 1) and names["aresetn"] == ("input", 1)
    assert "clk" not in names and "rst" not in names
    assert names["m_axi_arid"] == ("output", 2) and names["m_axi_rid"] == ("input", 2)   # 1 id bit + 1 index bit
    for ch in ("araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot", "arvalid", "arready",
               "rdata", "rresp", "rlast", "rvalid", "rready"):
        assert f"m_axi_{ch}" in names
    assert names["cmd0__valid"] == ("input", 1) and names["beats1__payload"][0] == "output"


def test_arbiter_with_two_dmas_against_axi_ram():
    p, top = _top("small")
    v = to_verilog(top, "arb_top_small")
    assert lint(v, "arb_top_small") == []
    simulate(v, "arb_top_small", "tb_axi_interconnect",
             {"addr_bits": p.addr_bits, "data_bits": p.data_bits, "max_burst": p.max_burst_beats,
              "beats_bits": BEATS_BITS, "tag_bits": TAG_BITS, "seeds": list(range(10)), "error_trials": 6})


def test_arbiter_rready_does_not_follow_the_masters_ready():
    """R passes a registered stage with a skid register: RREADY is the same whether the addressed master's rready is
    high or low in that cycle, and every beat reaches its master (by RID's index bit) in order, none twice, under a
    master that stalls (an Amaranth simulation)."""
    from amaranth.sim import Simulator
    arb = ReadArbiter(AxiParams(id_bits=1), 2)
    beats = [(i % 2 * 2, 200 + i) for i in range(8)]        # (RID: index bit 1, lower bit 0; data)
    seen = {"rready": [], "got": {0: [], 1: []}}

    async def bench(ctx):
        sent = 0
        stalls = [0, 1, 1, 0, 1, 1, 1, 0, 0, 1] + [0] * 12
        for stall in stalls:
            ctx.set(arb.m_axi_rvalid, sent < len(beats))
            if sent < len(beats):
                ctx.set(arb.m_axi_rid, beats[sent][0])
                ctx.set(arb.m_axi_rdata, beats[sent][1])
                ctx.set(arb.m_axi_rlast, 1)
            for ready in (0, 1):                # RREADY under either master ready, the same cycle
                for i in range(2):
                    ctx.set(getattr(arb, f"s{i}_axi_rready"), ready)
                seen["rready"].append(ctx.get(arb.m_axi_rready))
            assert seen["rready"][-1] == seen["rready"][-2]
            for i in range(2):
                ctx.set(getattr(arb, f"s{i}_axi_rready"), 1 - stall)
                if ctx.get(getattr(arb, f"s{i}_axi_rvalid")) and not stall:
                    seen["got"][i].append(ctx.get(getattr(arb, f"s{i}_axi_rdata")))
            taken = ctx.get(arb.m_axi_rvalid) and ctx.get(arb.m_axi_rready)
            await ctx.tick()
            sent += taken

    sim = Simulator(arb)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["got"][0] == [200, 202, 204, 206] and seen["got"][1] == [201, 203, 205, 207], seen["got"]
    assert 0 in seen["rready"] and 1 in seen["rready"]      # the skid filled: RREADY fell while R was held


def test_arbiter_lints_at_three_masters():
    arb = ReadArbiter(AxiParams(id_bits=2), 3)
    assert arb.out_params.id_bits == 4
    assert lint(to_verilog(arb, "arb3"), "arb3") == []


def test_arbiter_synthesizes_without_latches():
    arb = ReadArbiter(AxiParams.from_config(load_config("bert_tiny")), 2)
    r = synth_verilog(to_verilog(AxiTop(arb), "arb_syn"), "arb_syn")
    print("ReadArbiter bert_tiny:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
    assert r.used["DSP"] == 0 and r.used["LUT"] < 200, r.used


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="n: expected at least 2"):
        ReadArbiter(AxiParams(), 1)
    with pytest.raises(ValueError, match="aclk"):
        AxiTop(AxiTop(ReadArbiter(AxiParams(), 2)))
