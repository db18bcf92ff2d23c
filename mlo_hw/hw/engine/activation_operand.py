"""The MVAU's activation operand: vectors read from a buffer, narrowed per channel from int16 to int8.

Matrix inputs are int8. The residual stream (X, Y) holds int16, which Q/K/V and FFN up narrow per channel
with the shifts of the layer's ``narrow`` section (copied into this component's shift memory at the layer's
start: words 0.. for the layer input, words ``hidden / simd``.. for LN1's output); the other operands (Q in
Y, P, CTX and F in the byte buffers) pass through, their bytes spread into the int16 lanes by the engine.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
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

    Timing: three register stages, one word a cycle; a word taken in cycle t is on ``o`` from cycle t + 3.
    Stage 1 registers the input word (block RAM data arrive straight from the buffers); stage 2 the variable
    shift ``t = (2x) >> k`` (a mux tree per lane); stage 3 rounds and saturates into ``o``: the saturation is
    a range test on ``t``'s high bits and the rounding a 9-bit increment beside it, no comparator. Each stage
    takes a word when it is empty or its successor takes one, so bubbles close up under backpressure. Stage 3
    has a skid register beside ``o``: it takes a word whenever the skid is empty, and a word that arrives while
    ``o`` is held goes to the skid (``o`` takes it back when ``o.ready``). So ``o.ready`` reaches only ``o`` and
    the skid, never ``i.ready = ~full1 | ~full2 | ~skid_full``, all three flip-flops.
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
        # the stages' data registers have no reset (``full1``, ``full2``, ``skid_full`` and ``o.valid`` say what
        # they hold)
        held = Signal.like(self.i.payload, reset_less=True)                        # stage 1: the input word
        shifted = Signal(data.ArrayLayout(signed(nx.RES_BITS + 1), self.lanes), reset_less=True)  # stage 2: t
        low = Signal(data.ArrayLayout(signed(8), self.lanes), reset_less=True)     # stage 2: the bypass bytes
        bypass = Signal(reset_less=True)
        skid = Signal.like(self.o.payload, reset_less=True)                        # stage 3's second place
        full1, full2, skid_full = Signal(), Signal(), Signal()
        take3 = ~skid_full
        take2 = ~full2 | take3
        take1 = ~full1 | take2
        m.d.comb += self.i.ready.eq(take1)
        with m.If(take1):
            m.d.sync += [full1.eq(self.i.valid), held.eq(self.i.payload)]
        with m.If(take2):
            m.d.sync += [full2.eq(full1), bypass.eq(held.bypass)]
            for s in range(self.lanes):
                x = held.data.word_select(s, nx.RES_BITS).as_signed()
                k = held.shift.word_select(s, SHIFT_LANE_BITS)
                m.d.sync += [shifted[s].eq(self._shift(x, k)), low[s].eq(x[:8])]
        result = Signal.like(self.o.payload)
        for s in range(self.lanes):
            m.d.comb += result[s].eq(Mux(bypass, low[s], self._round_saturate(shifted[s])))
        held_out = self.o.valid & ~self.o.ready
        with m.If(skid_full):                       # nothing arrives: o takes the skid's word when it can
            with m.If(~held_out):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_full.eq(0)]
        with m.Elif(held_out):                      # o is held: an arriving word waits in the skid
            m.d.sync += [skid.eq(result), skid_full.eq(full2)]
        with m.Else():
            m.d.sync += [self.o.payload.eq(result), self.o.valid.eq(full2)]
        return m

    @staticmethod
    def _shift(x, k):
        """``t = floor(2x / 2**k)``: the shift and the rounding bit, one more bit than ``x``."""
        return (x << 1) >> k

    @staticmethod
    def _round_saturate(t):
        """``sat_8(rshift_round(x, k))`` from ``t = floor(2x / 2**k)`` (combinational): rshift_round(x, k) =
        floor((t + 1) / 2), which is in -128..127 exactly when t is in -257..254: t in -256..255 (bits 8..16
        all equal) but not 255; t = -257 saturates to -128, which is what the sign gives."""
        hi = t[8:]
        fits = hi.all() | (~hi.any() & ~t[:8].all())
        return Mux(fits, (t[:9] + 1)[1:9], Mux(t[-1], -128, 127))


def operand_command_layout(addr_bits: int, max_words: int, max_vectors: int, shift_words: int,
                           max_passes: int = 1) -> data.StructLayout:
    return data.StructLayout({"base": addr_bits, "stride": addr_bits, "words": range(max_words + 1),
                              "vectors": range(max_vectors + 1), "passes": range(max_passes + 1), "narrowed": 1,
                              "shift_base": range(shift_words)})


class ActivationOperand(wiring.Component):
    """``vectors`` x ``words`` words of a buffer (word ``base + v * stride + w``), ``passes`` times over, as the
    MVAU's x stream.

    Interface:
        start (pulse) with ``cmd`` (:func:`operand_command_layout`): ``base``, ``stride``, ``words``,
        ``vectors``, ``passes`` (0 counts as 1; one pass a weight tile of a matrix, so that a tile's job finds
        its x words waiting instead of refilling the pipeline); ``narrowed``: narrow int16 lanes (else pass the low bytes through); ``shift_base``: the
        shift memory word of the vector's first column (0: the layer input's shifts, ``hidden / simd``:
        LN1's output's; an encoder-decoder's (``shift_sets`` 4) ``2 hidden / simd`` the cross Q input's, ``3 hidden /
        simd`` the memory's). A narrowed vector is ``hidden / simd`` words.
        ``rd_addr``/``rd_en`` -> ``rd_data`` (``simd`` int16 lanes) ``read_latency`` cycles later; ``hold``: no
        read decided this cycle (the buffer's read port is another's in the next cycle).
        ``waits`` (``waits`` of them; none: no port), each ``on``, ``limit``, ``restart``: the words at or past
        ``limit`` are not written yet. ``limit`` is the writer's count in the next cycle, or less (the reader judges
        its next head against it a cycle early, into a register); ``restart``: the count falls in the next cycle
        (``limit`` is not a bound of it). While ``on``, no read of a word at or past it is decided; ``on`` counts in
        its own cycle.
        ``shift``: the shift memory's write port (the parameter copier's).
        ``o``: ``simd`` int8 lanes a beat (connect to the MVAU's ``x``).

    Timing: ``start`` and ``cmd`` are registered (the sequencer decides ``start`` from the MVAU's command
    handshake, and the reader's and column's resets are spread over the block), so the first read is decided two
    cycles after ``start`` and on ``rd_en`` three; one word a cycle while ``o.ready``; a word leaves
    ``read_latency + 4`` cycles after its read (the buffer, :class:`~mlo_hw.hw.engine.vector_io.VectorReader`'s
    queue, then :class:`Narrow`'s three stages). ``rd_addr`` and ``rd_en`` are the read decided a cycle earlier,
    registered (the reader's ``registered_request``): ``hold`` reaches the reader's registers, not the buffers' read
    multiplexer. A wait's comparison is a register (``past``): the reader's head and the word after it
    (:class:`~mlo_hw.hw.engine.vector_io.VectorReader`'s ``head_next``) are each compared with ``limit``, and the one
    the cycle's read decision makes the head is kept, so that no carry chain is in front of the decision (the
    engine's three waits, a comparison each behind its read decision, were 7.24 ns at 46c7007's seed 2 on the
    ECP5-85F); the head's first word after ``start`` waits a cycle.
    """

    def __init__(self, hidden: int, simd: int, addr_bits: int, max_words: int, max_vectors: int, max_passes: int = 1,
                 shift_sets: int = 2, read_latency: int = 1, waits: int = 0):
        self.hidden, self.simd, self.read_latency, self.wait_count = hidden, simd, read_latency, waits
        self.shift_words = shift_sets * hidden // simd
        self.max_words, self.max_vectors, self.max_passes, self.addr_bits = max_words, max_vectors, max_passes, addr_bits
        super().__init__({
            "start": In(1), "cmd": In(operand_command_layout(addr_bits, max_words, max_vectors, self.shift_words,
                                                             max_passes)),
            "rd_addr": Out(addr_bits), "rd_en": Out(1), "rd_data": In(nx.RES_BITS * simd), "hold": In(1),
            **({"waits": In(data.ArrayLayout(data.StructLayout({"on": 1, "limit": addr_bits + 1, "restart": 1}),
                                            waits))} if waits else {}),
            "shift": In(ShiftWriteSignature(self.shift_words, simd)),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), simd))),
        })

    def elaborate(self, platform):
        m = Module()
        simd, row_words = self.simd, self.hidden // self.simd
        m.submodules.reader = reader = VectorReader(self.addr_bits, nx.RES_BITS * simd, self.max_words,
                                                    self.max_vectors, self.max_passes, self.read_latency,
                                                    registered_request=True)
        m.submodules.narrow = narrow = Narrow(simd)
        m.submodules.shifts = shifts = Memory(shape=unsigned(SHIFT_LANE_BITS * simd), depth=self.shift_words,
                                              init=[])
        sw, sr = shifts.write_port(granularity=SHIFT_LANE_BITS), shifts.read_port(domain="comb")
        m.d.comb += [sw.addr.eq(self.shift.addr), sw.data.eq(self.shift.data), sw.en.eq(self.shift.en)]
        start, c = Signal(), Signal.like(self.cmd, reset_less=True)
        m.d.sync += [start.eq(self.start), c.eq(self.cmd)]
        m.d.comb += [reader.start.eq(start), reader.base.eq(c.base), reader.stride.eq(c.stride),
                     reader.words.eq(c.words), reader.vectors.eq(c.vectors), reader.passes.eq(c.passes),
                     self.rd_addr.eq(reader.addr), self.rd_en.eq(reader.en), reader.data.eq(self.rd_data)]
        # past[i]: the head is at or past wait i's limit, judged in the cycle before (a read moves the head to
        # head_next; start to base, judged past: the first word waits a cycle)
        past = [Signal(name=f"past{i}") for i in range(self.wait_count)]
        waits = list(self.waits) if self.wait_count else []
        for i, wt in enumerate(waits):
            m.d.sync += past[i].eq(start | wt.restart | Mux(reader.issue, reader.head_next >= wt.limit,
                                                             reader.head >= wt.limit))
        m.d.comb += reader.hold.eq(self.hold | Cat(wt.on & past[i] for i, wt in enumerate(waits)).any())
        narrowed = Signal()
        shift_base = Signal.like(c.shift_base)
        col = Signal(range(max(row_words, 2)))                 # column word of the beat on offer
        with m.If(reader.o.valid & reader.o.ready & narrowed):
            m.d.sync += col.eq(Mux(col == row_words - 1, 0, col + 1))
        with m.If(start):
            m.d.sync += [col.eq(0), narrowed.eq(c.narrowed), shift_base.eq(c.shift_base)]
        m.d.comb += [sr.addr.eq(shift_base + col),
                     narrow.i.valid.eq(reader.o.valid), narrow.i.payload.data.eq(reader.o.payload),
                     narrow.i.payload.shift.eq(sr.data), narrow.i.payload.bypass.eq(~narrowed),
                     reader.o.ready.eq(narrow.i.ready)]
        wiring.connect(m, narrow.o, wiring.flipped(self.o))
        return m
