"""The MVAU's activation operand: vectors read from a buffer, narrowed per channel from int16 to int8.

Matrix inputs are int8. The residual stream (X, Y) holds int16, which Q/K/V and FFN up narrow per channel
with the shifts of the layer's ``narrow`` section (copied into this component's shift memory at the layer's
start: words 0.. for the layer input, words ``hidden / simd``.. for LN1's output); the other operands (Q in
Y, P, CTX and F in the byte buffers) pass through, their bytes spread into the int16 lanes by the engine.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...model import numerics as nx
from .param_copier import SHIFT_LANE_BITS, ShiftWriteSignature
from .vector_io import VectorReader

__all__ = ["Narrow", "operand_command_layout", "ActivationOperand"]


class Narrow(wiring.Component):
    """``lanes`` int16 elements of the residual stream narrowed to int8, or ``lanes`` bytes passed through.

    ``i`` payload: ``data`` (``lanes`` x 16 bits, lane 0 in the LSBs), ``shift`` (``lanes`` x 4 bits) and
    ``bypass``. Lane s of ``o`` is ``numerics.narrow(data[s], shift[s])`` =
    ``sat_8(rshift_round(data[s], shift[s]))``, or the low byte of ``data[s]`` when ``bypass``.
    One register stage, one word a cycle; ``i.ready`` is high when the register is empty or drains.
    """

    def __init__(self, lanes: int):
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "data": unsigned(nx.RES_BITS * lanes), "shift": unsigned(SHIFT_LANE_BITS * lanes),
                "bypass": unsigned(1)}))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += self.o.valid.eq(1)
            for s in range(self.lanes):
                x = self.i.payload.data.word_select(s, nx.RES_BITS).as_signed()
                k = self.i.payload.shift.word_select(s, SHIFT_LANE_BITS)
                # rshift_round(x, k) = floor((floor(2x / 2**k) + 1) / 2) for every k >= 0
                rounded = (((x << 1) >> k) + 1) >> 1
                sat = Mux(rounded < -128, -128, Mux(rounded > 127, 127, rounded))
                m.d.sync += self.o.payload[s].eq(Mux(self.i.payload.bypass, x[:8], sat[:8]))
        return m


def operand_command_layout(addr_bits: int, max_words: int, max_vectors: int, shift_words: int) -> data.StructLayout:
    return data.StructLayout({"base": addr_bits, "stride": addr_bits, "words": range(max_words + 1),
                              "vectors": range(max_vectors + 1), "narrowed": 1, "shift_base": range(shift_words)})


class ActivationOperand(wiring.Component):
    """``vectors`` x ``words`` words of a buffer (word ``base + v * stride + w``) as the MVAU's x stream.

    Interface:
        start (pulse) with ``cmd`` (:func:`operand_command_layout`): ``base``, ``stride``, ``words``,
        ``vectors``; ``narrowed``: narrow int16 lanes (else pass the low bytes through); ``shift_base``: the
        shift memory word of the vector's first column (0: the layer input's shifts, ``hidden / simd``:
        LN1's output's). A narrowed vector is ``hidden / simd`` words.
        ``rd_addr``/``rd_en`` -> ``rd_data`` (``simd`` int16 lanes) one cycle later.
        ``shift``: the shift memory's write port (the parameter copier's).
        ``o``: ``simd`` int8 lanes a beat (connect to the MVAU's ``x``).

    Timing: one word a cycle while ``o.ready``; a word leaves two cycles after its read (the reader's
    register, then the narrowing register).
    """

    def __init__(self, hidden: int, simd: int, addr_bits: int, max_words: int, max_vectors: int):
        self.hidden, self.simd = hidden, simd
        self.shift_words = 2 * hidden // simd
        self.max_words, self.max_vectors, self.addr_bits = max_words, max_vectors, addr_bits
        super().__init__({
            "start": In(1), "cmd": In(operand_command_layout(addr_bits, max_words, max_vectors, self.shift_words)),
            "rd_addr": Out(addr_bits), "rd_en": Out(1), "rd_data": In(nx.RES_BITS * simd),
            "shift": In(ShiftWriteSignature(self.shift_words, simd)),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), simd))),
        })

    def elaborate(self, platform):
        m = Module()
        simd, row_words = self.simd, self.hidden // self.simd
        m.submodules.reader = reader = VectorReader(self.addr_bits, nx.RES_BITS * simd, self.max_words,
                                                    self.max_vectors)
        m.submodules.narrow = narrow = Narrow(simd)
        m.submodules.shifts = shifts = Memory(shape=unsigned(SHIFT_LANE_BITS * simd), depth=self.shift_words,
                                              init=[])
        sw, sr = shifts.write_port(granularity=SHIFT_LANE_BITS), shifts.read_port(domain="comb")
        m.d.comb += [sw.addr.eq(self.shift.addr), sw.data.eq(self.shift.data), sw.en.eq(self.shift.en)]
        c = self.cmd
        m.d.comb += [reader.start.eq(self.start), reader.base.eq(c.base), reader.stride.eq(c.stride),
                     reader.words.eq(c.words), reader.vectors.eq(c.vectors),
                     self.rd_addr.eq(reader.addr), self.rd_en.eq(reader.en), reader.data.eq(self.rd_data)]
        narrowed = Signal()
        shift_base = Signal.like(c.shift_base)
        col = Signal(range(max(row_words, 2)))                 # column word of the beat on offer
        with m.If(reader.o.valid & reader.o.ready & narrowed):
            m.d.sync += col.eq(Mux(col == row_words - 1, 0, col + 1))
        with m.If(self.start):
            m.d.sync += [col.eq(0), narrowed.eq(c.narrowed), shift_base.eq(c.shift_base)]
        m.d.comb += [sr.addr.eq(shift_base + col),
                     narrow.i.valid.eq(reader.o.valid), narrow.i.payload.data.eq(reader.o.payload),
                     narrow.i.payload.shift.eq(sr.data), narrow.i.payload.bypass.eq(~narrowed),
                     reader.o.ready.eq(narrow.i.ready)]
        wiring.connect(m, narrow.o, wiring.flipped(self.o))
        return m
