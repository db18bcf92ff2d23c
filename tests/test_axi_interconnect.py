"""The AXI read arbiter and the aclk/aresetn top-level wrapper: two ReadDmas behind a ReadArbiter,
wrapped by AxiTop, under cocotb + Verilator against cocotbext-axi's AxiRamRead; lint, synthesis, ports.
The read-port switch (two masters taking turns) under the Amaranth simulator with random traffic."""

import random
import re

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mlo_hw.hw.axi import AxiParams, axi_read_master_members, forward_ports
from mlo_hw.hw.axi_interconnect import AxiTop, ReadArbiter, ReadPortSwitch
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


def test_read_port_switch_hands_over_only_when_quiet():
    """Two masters with random bursts, a random ``sel``, a slave answering in order with random ARREADY/RVALID
    and masters with random RREADY: the AR on the port never changes or drops before it is accepted, every
    handshake reaches the right side, each R beat goes to the master whose burst it belongs to, ``outstanding``
    and ``idle`` follow the bursts, and ownership changes hands both ways."""
    from amaranth.sim import Simulator
    p = AxiParams(addr_bits=16, data_bits=32, id_bits=1)
    dut = ReadPortSwitch(p, max_bursts=4)
    rng = random.Random(3)
    stats = {"handovers": 0, "beats": [0, 0]}

    async def bench(ctx):
        s = [{ch: getattr(dut, f"s{i}_axi_{ch}") for ch in ("arvalid", "araddr", "arlen", "arready", "rvalid",
                                                                "rdata", "rlast", "rready")} for i in range(2)]
        port = {ch: getattr(dut, f"m_axi_{ch}") for ch in ("arvalid", "araddr", "arlen", "arready", "rvalid",
                                                              "rdata", "rlast", "rready")}
        offer = [None, None]            # (addr, len) each master holds on its AR until accepted
        owed = [[], []]                 # per master: [addr, beats left] of its accepted bursts, in order
        slave = []                      # the slave's queue: [addr, beat index, beats] in AR order
        held, owner_q, serial = None, 0, 0
        for cycle in range(6000):
            if rng.random() < 0.05:
                ctx.set(dut.sel, rng.getrandbits(1))
            for i in range(2):
                if offer[i] is None and len(owed[i]) < 2 and rng.random() < 0.3:
                    serial += 1
                    offer[i] = ((serial << 1 | i) << 4, rng.randrange(4))     # bit 4 of the address: the master
                ctx.set(s[i]["arvalid"], offer[i] is not None)
                if offer[i] is not None:
                    ctx.set(s[i]["araddr"], offer[i][0])
                    ctx.set(s[i]["arlen"], offer[i][1])
                ctx.set(s[i]["rready"], rng.random() < 0.7)
            ctx.set(port["arready"], len(slave) < 4 and rng.random() < 0.5)
            r_on = bool(slave) and rng.random() < 0.6
            ctx.set(port["rvalid"], r_on)
            if r_on:
                addr, k, n = slave[0]
                ctx.set(port["rdata"], addr + k)
                ctx.set(port["rlast"], k == n - 1)
            owner = ctx.get(dut.owner)
            ar = (ctx.get(port["araddr"]), ctx.get(port["arlen"])) if ctx.get(port["arvalid"]) else None
            if held is not None:
                assert ar == held, f"cycle {cycle}: AR on offer {held} changed to {ar} before ARREADY"
            if owner != owner_q:
                stats["handovers"] += 1
                assert ctx.get(dut.outstanding) == 0 and offer[owner_q] is None, f"cycle {cycle}: handover while busy"
            assert ctx.get(dut.outstanding) == sum(len(o) for o in owed)
            assert ctx.get(dut.idle) == (not any(owed) and offer == [None, None])
            ar_hs = ar is not None and ctx.get(port["arready"])
            held = ar if ar is not None and not ar_hs else None
            r_hs = r_on and ctx.get(port["rready"])
            for i in range(2):
                s_ar = offer[i] is not None and ctx.get(s[i]["arready"])
                assert s_ar == (ar_hs and owner == i), f"cycle {cycle}: AR handshake of master {i} not on the port"
                if s_ar:
                    assert ar == offer[i]
                    owed[i].append([offer[i][0], offer[i][1] + 1])
                    slave.append([offer[i][0], 0, offer[i][1] + 1])
                    offer[i] = None
                s_r = ctx.get(s[i]["rvalid"]) and ctx.get(s[i]["rready"])
                assert s_r == (r_hs and owner == i), f"cycle {cycle}: R handshake of master {i} not on the port"
                if s_r:
                    assert owed[i], f"cycle {cycle}: an R beat reached master {i}, which is owed none"
                    burst = owed[i][0]
                    want = burst[0] + (slave[0][2] - burst[1])
                    assert ctx.get(s[i]["rdata"]) == want, f"cycle {cycle}: master {i} got another master's beat"
                    burst[1] -= 1
                    if burst[1] == 0:
                        owed[i].pop(0)
                    stats["beats"][i] += 1
            if r_hs:
                slave[0][1] += 1
                if slave[0][1] == slave[0][2]:
                    slave.pop(0)
            owner_q = owner
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert stats["handovers"] > 20 and min(stats["beats"]) > 500, stats
