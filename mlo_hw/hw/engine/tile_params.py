"""The MVAU's per-channel parameters: a weight tile's bias and multiplier, latched in two sets.

A tile's bias/mult are copied out of the tile buffer into the free one of two register sets before its job
starts, so the tile's bank can be released as soon as the MVAU has read its last weight word and the next
tile's job follows without a gap (the previous job may still be reading the other set).
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..pipeline import delayed

__all__ = ["TileParamLatch"]


class TileParamLatch(wiring.Component):
    """Two sets of ``tile_rows / pe`` channel groups' (bias, mult), latched from the tile buffer, read by the MVAU.

    Interface:
        clear (pulse): a new matrix: no job pending, both sets free, set 0 first; from a register, so in the cycle
        after ``clear`` (no ``latch``, ``job`` or parameter read may come in that cycle, and none does: the sequencer
        waits for the matrix's first tile first).
        latch (level, the sequencer's latch step): copies group j of the tile buffer (``src_addr`` = j, the
        group on ``src_data`` ``src_latency`` cycles later) into the free set, one group a cycle, while fewer than
        two jobs hold a set; ``latched`` (combinational) in the cycle the last group is taken: the job may be
        issued.
        job (pulse): the job that reads the just-latched set was accepted.
        ``params``: the MVAU's parameter read port (connect with ``wiring.connect``): group ``addr`` of the
        set of the job being read, one cycle after ``en``; ``matrix`` (0 during the attention products):
        instead every channel reads bias 0 and ``fixed_mult`` (PV's requantization), and no read is counted.
        A job's set is free again after its ``vectors * tile_rows / pe`` reads.

    Timing: latching takes ``tile_rows / pe + src_latency`` cycles when a set is free. The sets are one distributed
    RAM (``2 x 2**ceil(log2(tile_rows / pe))`` words of the parameter layout), its write enable and address flip-flops
    (the group's read issue, delayed ``src_latency`` cycles), its read asynchronous from the registered address.
    """

    def __init__(self, mvau_params, tile_rows: int, vectors: int, src_latency: int = 1):
        if src_latency < 1:
            raise ValueError(f"TileParamLatch src_latency: expected at least 1 cycle, got {src_latency}")
        self.mp, self.tile_rows, self.vectors, self.src_latency = mvau_params, tile_rows, vectors, src_latency
        self.groups = tile_rows // mvau_params.pe
        layout = mvau_params.param_layout()
        super().__init__({
            "clear": In(1), "latch": In(1), "latched": Out(1), "job": In(1),
            "src_addr": Out(range(max(self.groups, 2))), "src_data": In(layout),
            "matrix": In(1), "fixed_mult": In(mvau_params.mult_bits),
            "params": Out(memory.ReadPort.Signature(addr_width=max(1, ceil_log2(mvau_params.max_row_folds)),
                                                    shape=layout)),
        })

    def elaborate(self, platform):
        m = Module()
        nfg, S, lat = self.groups, self.vectors, self.src_latency
        gb = ceil_log2(nfg)                        # set i's group j at word i * 2**gb + j
        # the two sets in one distributed RAM, written a group a cycle, read asynchronously from a registered
        # address (was 2 x groups registers and a multiplexer over them: at tile_rows 64, pe 8 about 1,800 LUTs)
        m.submodules.sets = sets = memory.Memory(shape=self.params.data.shape(), depth=2 << gb, init=[])
        wr, rd = sets.write_port(), sets.read_port(domain="comb")
        latch_set, read_set = Signal(), Signal()   # the set the next latch fills; the set the next job reads
        idx = Signal(range(nfg + lat + 1))         # the group being latched (beyond: the last reads' data arrive)
        reads = Signal(range(S * nfg + 1))         # parameter reads of the job being read
        pending = Signal(range(3))                 # jobs whose reads are not all done
        reads_done = Signal()
        addr, in_set = Signal.like(self.params.addr), Signal()    # the read in flight
        with m.If(self.params.en):
            m.d.sync += [addr.eq(self.params.addr), in_set.eq(read_set)]
        with m.If(self.params.en & self.matrix):
            m.d.sync += reads.eq(reads + 1)
            with m.If(reads == S * nfg - 1):
                m.d.sync += [reads.eq(0), read_set.eq(~read_set)]
                m.d.comb += reads_done.eq(1)
        m.d.sync += pending.eq(pending + self.job - reads_done)
        m.d.comb += rd.addr.eq(Cat(addr[:gb], in_set))
        with m.If(self.matrix):
            m.d.comb += self.params.data.eq(rd.data)
        with m.Else():
            for p in range(self.mp.pe):
                m.d.comb += [self.params.data.bias[p].eq(0), self.params.data.mult[p].eq(self.fixed_mult)]

        # group ``idx``'s write, its enable and address registered in the cycle its read is issued and delayed to
        # its data: the RAM's write enable comes from a flip-flop, not from the sequencer's latch step
        taken = self.latch & (pending < 2)
        m.d.comb += self.src_addr.eq(idx)
        m.d.comb += [wr.en.eq(delayed(m, taken & (idx < nfg), lat, "load")),
                     wr.addr.eq(delayed(m, Cat(idx[:gb], latch_set), lat, "load_at")), wr.data.eq(self.src_data)]
        with m.If(taken):
            m.d.sync += idx.eq(idx + 1)
            with m.If(idx == nfg + lat - 1):
                m.d.comb += self.latched.eq(1)
                m.d.sync += idx.eq(0)
        with m.If(self.job):
            m.d.sync += latch_set.eq(~latch_set)
        # the clear from a register: the sequencer's matrix-start decode into the LSR pins of these registers was
        # 8.2-8.6 ns on both seeds of bert_tiny_auto's route at 2244104
        with m.If(delayed(m, self.clear, 1, "clearing")):
            m.d.sync += [reads.eq(0), read_set.eq(0), latch_set.eq(0), pending.eq(0), idx.eq(0)]
        return m
