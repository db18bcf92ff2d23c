"""Activation transfers between DRAM and an on-chip buffer: Regroup, BufferLoad and BufferStore under cocotb +
Verilator (cocotbext-axi RAM with random stalls on all five channels, error responses, cancel), lint, synthesis."""

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mlo_hw.hw.axi import AxiParams, axi_read_master_members, axi_write_master_members, forward_ports
from mlo_hw.hw.engine.activation_io import BufferLoad, BufferStore, Regroup
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


class LoadStore(wiring.Component):
    """Test top: a word buffer filled by a BufferLoad (``ld_*``; ``ld_ready`` gates its write stream, so the
    testbench applies random backpressure) and drained by a BufferStore (``st_*``), on one AXI4 port. With
    ``read_latency`` 2 the store's read request is registered in front of the buffer (as in the engine).
    ``ld_written``: the buffer words the load has written since its start (a store may follow them: ``st_avail``)."""

    def __init__(self, p, word_bits, words, read_latency=1):
        self.p, self.read_latency = p, read_latency
        self.load = BufferLoad(p, word_bits, words)
        self.store = BufferStore(p, word_bits, words, read_latency=read_latency)
        self.buffer = Memory(shape=word_bits, depth=words, init=[])
        members = {**axi_read_master_members(p), **axi_write_master_members(p), "ld_ready": In(1),
                   "ld_written": Out(range(words + 1))}
        for prefix, block in (("ld", self.load), ("st", self.store)):
            for name, mem in block.signature.members.items():
                if not name.startswith("m_axi_") and name not in ("w", "r_addr", "r_en", "r_data"):
                    members[f"{prefix}_{name}"] = mem
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.load, m.submodules.store, m.submodules.buffer = self.load, self.store, self.buffer
        forward_ports(m, self, self.load, axi_read_master_members(self.p))
        forward_ports(m, self, self.store, axi_write_master_members(self.p))
        for prefix, block in (("ld", self.load), ("st", self.store)):
            for name, member in block.signature.members.items():
                outer = getattr(self, f"{prefix}_{name}", None)
                if outer is not None:
                    inner = getattr(block, name)
                    m.d.comb += outer.eq(inner) if member.flow == Out else inner.eq(outer)
        wp, rp = self.buffer.write_port(), self.buffer.read_port()
        w = self.load.w
        m.d.comb += [w.ready.eq(self.ld_ready), wp.addr.eq(w.payload.addr), wp.data.eq(w.payload.data),
                     wp.en.eq(w.valid & w.ready), self.store.r_data.eq(rp.data)]
        with m.If(self.ld_start):
            m.d.sync += self.ld_written.eq(0)
        with m.Elif(wp.en):
            m.d.sync += self.ld_written.eq(self.ld_written + 1)
        r_addr, r_en = self.store.r_addr, self.store.r_en
        for _ in range(self.read_latency - 1):
            r_addr, r_en = Signal.like(r_addr), Signal.like(r_en)
            m.d.sync += [r_addr.eq(self.store.r_addr), r_en.eq(self.store.r_en)]
        m.d.comb += [rp.addr.eq(r_addr), rp.en.eq(r_en)]
        return m


# (config-like parameters): AXI data bits, word bits (simd int16 lanes), buffer words, read latency
CASES = {
    "beat64_word128": (64, 128, 512, 2),   # bert_tiny: two beats a word, the engine's registered read
    "beat64_word64": (64, 64, 256, 1),     # small: a beat a word
    "beat128_word64": (128, 64, 256, 2),   # a wide bus: two words a beat
}


def _top(case, max_burst=16):
    data_bits, word_bits, words, read_latency = CASES[case]
    p = AxiParams(addr_bits=20, data_bits=data_bits, max_burst_beats=max_burst)
    return p, LoadStore(p, word_bits, words, read_latency)


# -m slow (29 s each): every full-stack harness run loads its input and stores its output through LoadStore
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_load_and_store_against_axi_ram(case):
    p, top = _top(case)
    name = f"act_io_{case}"
    v = to_verilog(top, name)
    assert lint(v, name) == []
    data_bits, word_bits, words, _ = CASES[case]
    simulate(v, name, "tb_activation_io", {"dut": "load_store", "addr_bits": p.addr_bits, "data_bits": data_bits,
                                           "word_bits": word_bits, "words": words, "max_burst": p.max_burst_beats})


@pytest.mark.parametrize("i_bits,o_bits", [(64, 16), (16, 64), (32, 32)])
def test_regroup_under_random_backpressure(i_bits, o_bits):
    name = f"regroup_{i_bits}_{o_bits}"
    v = to_verilog(Regroup(i_bits, o_bits), name)
    assert lint(v, name) == []
    simulate(v, name, "tb_activation_io", {"dut": "regroup", "i_bits": i_bits, "o_bits": o_bits})


def test_regroup_rejects_widths_that_do_not_divide():
    with pytest.raises(ValueError, match="multiple"):
        Regroup(48, 64)


@pytest.mark.slow
def test_load_store_synthesizes_without_latches():
    _, top = _top("beat64_word128", max_burst=256)
    r = synth_verilog(to_verilog(top, "act_io_syn"), "act_io_syn")
    print("BufferLoad + BufferStore + buffer:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
