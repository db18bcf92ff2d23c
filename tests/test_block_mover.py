"""The activation mover (``BlockMover``) alone under cocotb + Verilator: every transfer kind bit-exact against
the numpy layouts of the tiled schedule (cocotbext-axi RAM with random stalls on all five channels, SLVERR,
cancel, zero-word runs, ``busy``), lint, synthesis."""

import pytest
from amaranth import Array, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mlo_hw.hw.axi import AxiParams, axi_read_master_members, axi_write_master_members, forward_ports
from mlo_hw.hw.engine.block_mover import BlockMover, Transfer
from mlo_hw.hw.layer_engine import BUFFER_READ_LATENCY
from mlo_hw.model import numerics as nx
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog

CMD_FIELDS = ("base", "step", "runs", "words", "local", "local_step", "inner", "outer_stride")


class MoverTop(wiring.Component):
    """Test top: a ``BlockMover`` with the engine's buffers as real memories and flat ports.

    X and Y: ``rows * hidden / simd`` words of ``simd`` int16 lanes (16-bit write granularity, one read port);
    WORK: ``pe`` banks of ``simd``-byte words, one read port each. Every read request of the mover is registered
    in front of the memories (data ``BUFFER_READ_LATENCY`` cycles after ``rd_en``), as in ``LayerEngine``. A load's
    words go where ``wr.y`` says (as in the engine): LOAD_X writes X, LOAD_Q writes Y; the store's reads are routed by
    the store kind latched at its ``start`` (as the engine routes them by its op): STORE_X reads X, STORE_Q reads Y,
    STORE_K and STORE_VT read every WORK bank. A load and a store may run at once.

    The testbench preloads and reads back through a backdoor: ``bd_we`` writes ``bd_data`` (all lanes) at
    ``bd_addr`` of buffer ``bd_sel`` (0 X, 1 Y, 2 + b WORK bank b); ``bd_re`` reads X (``bd_rsel`` 0) or Y (1)
    at ``bd_addr``, the word on ``bd_rdata`` one cycle later. The backdoor is used only while the mover is idle, but
    for a store's WORK words poked while a load runs.
    ``wr_valid`` and ``rd_en`` show the mover's buffer writes and reads (the testbench checks where they happen),
    ``loaded`` the mover's count of buffer words a load has written whole.
    """

    def __init__(self, p: AxiParams, *, simd: int, pe: int, rows: int, hidden: int, max_runs: int):
        self.p, self.simd, self.pe = p, simd, pe
        self.x_words = rows * hidden // simd                 # X and Y: a block [rows, hidden] of int16
        self.bank_words = 2 * self.x_words // pe             # WORK: a block's K and V^T side by side (as tiled)
        self.max_words = 2 * self.x_words                    # byte words of an int16 block
        self.local_bits = max(self.max_words, self.bank_words).bit_length()
        self.mover = BlockMover(p, simd=simd, pe=pe, max_words=self.max_words, max_runs=max_runs,
                                local_bits=self.local_bits, read_latency=BUFFER_READ_LATENCY)
        cmd = self.mover.cmd
        members = {**axi_read_master_members(p), **axi_write_master_members(p),
                   "start": In(1), "cancel": In(1), "clear": In(1), "kind": In(Transfer),
                   **{f: In(len(getattr(cmd, f))) for f in CMD_FIELDS},
                   "busy": Out(1), "load_busy": Out(1), "store_busy": Out(1), "error": Out(1), "error_addr": Out(p.addr_bits), "error_code": Out(3),
                   "wr_valid": Out(1), "rd_en": Out(1), "loaded": Out(len(self.mover.loaded)),
                   "bd_we": In(1), "bd_sel": In(range(2 + pe)), "bd_addr": In(self.local_bits),
                   "bd_data": In(nx.RES_BITS * simd), "bd_re": In(1), "bd_rsel": In(1),
                   "bd_rdata": Out(nx.RES_BITS * simd)}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        simd, pe, mover = self.simd, self.pe, self.mover
        m.submodules.mover = mover
        forward_ports(m, self, mover, axi_read_master_members(self.p))
        forward_ports(m, self, mover, axi_write_master_members(self.p))
        m.d.comb += [mover.start.eq(self.start), mover.cancel.eq(self.cancel), mover.clear.eq(self.clear),
                     mover.cmd.kind.eq(self.kind),
                     *(getattr(mover.cmd, f).eq(getattr(self, f)) for f in CMD_FIELDS),
                     self.busy.eq(mover.busy), self.load_busy.eq(mover.load_busy),
                     self.store_busy.eq(mover.store_busy), self.error.eq(mover.error), self.error_addr.eq(mover.error_addr),
                     self.error_code.eq(mover.error_code), self.wr_valid.eq(mover.wr.valid), self.rd_en.eq(mover.rd_en),
                     self.loaded.eq(mover.loaded)]
        route = Signal(Transfer)         # the store's kind
        with m.If(self.start & (self.kind != Transfer.LOAD_X) & (self.kind != Transfer.LOAD_Q)):
            m.d.sync += route.eq(self.kind)
        rd_addr, rd_en = Signal.like(mover.rd_addr), Signal()    # the request's register beside the memories
        m.d.sync += [rd_addr.eq(mover.rd_addr), rd_en.eq(mover.rd_en)]

        # X and Y: the mover writes (loads) or reads (stores) one of them; the backdoor otherwise
        rsel = Signal()
        with m.If(self.bd_re):
            m.d.sync += rsel.eq(self.bd_rsel)
        data = []
        for i, store in enumerate((Transfer.STORE_X, Transfer.STORE_Q)):
            mem = Memory(shape=unsigned(nx.RES_BITS * simd), depth=self.x_words, init=[])
            m.submodules[("x", "y")[i]] = mem
            w, r = mem.write_port(granularity=nx.RES_BITS), mem.read_port()
            with m.If(self.bd_we & (self.bd_sel == i)):     # (a load into one runs on while WORK is poked)
                m.d.comb += [w.addr.eq(self.bd_addr), w.data.eq(self.bd_data), w.en.eq((1 << simd) - 1)]
            with m.Else():
                m.d.comb += [w.addr.eq(mover.wr.addr), w.data.eq(mover.wr.data),
                             w.en.eq(Mux(mover.wr.valid & (mover.wr.y == i), mover.wr.en, 0))]
            with m.If(self.bd_re):
                m.d.comb += [r.addr.eq(self.bd_addr), r.en.eq(self.bd_rsel == i)]
            with m.Else():
                m.d.comb += [r.addr.eq(rd_addr), r.en.eq(rd_en & (route == store))]
            data.append(r.data)
        m.d.comb += [mover.x_word.eq(data[0]), mover.y_word.eq(data[1])]
        m.d.comb += self.bd_rdata.eq(Mux(rsel, data[1], data[0]))

        # WORK: pe banks of simd bytes, read side by side at the same bank-local word
        banks = []
        for b in range(pe):
            mem = Memory(shape=unsigned(8 * simd), depth=self.bank_words, init=[])
            m.submodules[f"work{b}"] = mem
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.addr.eq(self.bd_addr), w.data.eq(self.bd_data), w.en.eq(self.bd_we & (self.bd_sel == 2 + b)),
                         r.addr.eq(rd_addr), r.en.eq(rd_en)]
            banks.append(r.data)
        # the bank of the word on the read ports, registered with the request and then with the read, as the engine's WORK
        req_bank, bank_q = Signal.like(mover.rd_bank), Signal.like(mover.rd_bank)
        m.d.sync += req_bank.eq(mover.rd_bank)
        with m.If(rd_en):
            m.d.sync += bank_q.eq(req_bank)
        bank_word = Array(banks)[bank_q]
        m.d.comb += mover.work_word.eq(bank_word)
        return m


# (config-like geometries): simd, pe, AXI data bits, block rows, hidden (the buffers hold a block [rows, hidden])
GEOMETRIES = {
    "small": (4, 4, 64, 32, 32),          # the small config: a byte word is half a beat, an X word a beat
    "bert_tiny": (8, 8, 64, 16, 64),      # bert_tiny's folding: a beat a byte word (odd counts: half an X word)
    "wide": (8, 4, 128, 16, 64),          # a 128-bit bus, pe != simd: two byte words a beat
    "bert_tiny_block": (8, 8, 64, 32, 128),   # bert_tiny's folding and hidden size, a block of 32 rows
}


def _top(geo, max_burst=16):
    simd, pe, data_bits, rows, hidden = GEOMETRIES[geo]
    p = AxiParams(addr_bits=20, data_bits=data_bits, max_burst_beats=max_burst)
    top = MoverTop(p, simd=simd, pe=pe, rows=rows, hidden=hidden, max_runs=hidden // pe)
    return p, top, {"dut": "mover", "addr_bits": p.addr_bits, "data_bits": data_bits, "max_burst": max_burst,
                    "simd": simd, "pe": pe, "rows": rows, "hidden": hidden, "max_runs": hidden // pe,
                    "x_words": top.x_words, "bank_words": top.bank_words}


TESTS = ["random_transfers", "load_beside_store", "error_responses", "cancel_single_run", "cancel_multi_run",
         "zero_words_and_busy", "corruption_is_detected"]


def _run(geo, tests, **sweep):
    p, top, params = _top(geo)
    name = f"mover_{geo}"
    v = to_verilog(top, name)
    assert lint(v, name) == []
    simulate(v, name, "tb_block_mover", {**params, **sweep}, testcase=tests)


# -m slow (27 s): the DRAM-tiled full-stack runs (tests/test_harness.py, tests/test_causal.py) move every block through
# the BlockMover under random stalls and DDR3 timing; bert_tiny's geometry is in the slow sweep too
@pytest.mark.slow
@pytest.mark.parametrize("geo", ["small"])
def test_block_mover_against_axi_ram(geo):
    _run(geo, TESTS)


@pytest.mark.slow
@pytest.mark.parametrize("geo", list(GEOMETRIES))
def test_block_mover_sweep(geo):
    """Three times the transfers, errors and cancels of the default test from other seeds; also a 128-bit bus
    and bert_tiny's hidden size."""
    _run(geo, TESTS, trials=3, seed0=10000)


@pytest.mark.slow
def test_block_mover_synthesizes_without_latches():
    """The mover as bert_tiny's tiled engine sizes it (blocks of 32 rows, 256-beat bursts, 32-bit addresses)."""
    p = AxiParams(addr_bits=32, data_bits=64, max_burst_beats=256)
    simd, pe, rows, hidden = 8, 8, 32, 128
    mover = BlockMover(p, simd=simd, pe=pe, max_words=2 * rows * hidden // simd, max_runs=hidden // pe,
                       local_bits=(2 * rows * hidden // simd).bit_length())
    v = to_verilog(mover, "mover_syn")
    assert lint(v, "mover_syn") == []
    r = synth_verilog(v, "mover_syn")
    print("BlockMover:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
