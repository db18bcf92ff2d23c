"""Activations between DRAM and an on-chip word buffer: a width converter, a buffer loader and a buffer storer.

The buffers hold words of ``word_bits`` (``simd`` int16 elements of the residual stream); the AXI port
carries beats of ``data_bits``. One of the two widths divides the other, and the bytes of a transfer are
a whole number of both (``config`` checks that an activation row is a whole number of beats).

:class:`Regroup` splits wide stream items into narrow ones or gathers narrow ones into a wide one, first
in at the low end (little endian, like the bytes in DRAM). :class:`BufferLoad` is an
:class:`~mlo_hw.hw.act_dma.ActReader` followed by a ``Regroup`` that writes numbered words into a buffer;
:class:`BufferStore` reads numbered words from a buffer into a ``Regroup`` followed by an
:class:`~mlo_hw.hw.act_dma.ActWriter`. Both use the one AXI read DMA and the one write DMA of the package
(:mod:`mlo_hw.hw.weight_dma`, :mod:`mlo_hw.hw.act_dma`): bursts up to ``max_burst_beats``, never across 4 KiB,
several in flight, errors and ``cancel`` handled there (see those modules).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.hdl import ResetInserter
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..act_dma import ActReader, ActWriter
from ..axi import AxiParams, axi_read_master_members, axi_write_master_members, forward_ports
from ..pipeline import queue_credit

__all__ = ["Regroup", "word_write_layout", "BufferLoad", "BufferStore"]


class Regroup(wiring.Component):
    """A stream of ``i_bits`` items regrouped into ``o_bits`` items (one width a multiple of the other).

    Interface:
        i: In stream of ``unsigned(i_bits)``; o: Out stream of ``unsigned(o_bits)``.
        Split (``i_bits > o_bits``): an input item leaves as ``i_bits // o_bits`` output items, its low
        bits first. Gather (``i_bits < o_bits``): ``o_bits // i_bits`` input items, the first in the low
        bits, leave as one output item. Equal widths: a register stage.

    Timing: the output is registered (the first part leaves the cycle after its input is taken); one
    output item a cycle while ``o.ready`` holds, so a gather takes one input a cycle and a split one input
    every ``i_bits // o_bits`` cycles. ``i.ready`` does not depend on ``i.valid``.
    """

    def __init__(self, i_bits: int, o_bits: int):
        if max(i_bits, o_bits) % min(i_bits, o_bits):
            raise ValueError(f"Regroup: {i_bits} and {o_bits} bits: one width must be a multiple of the other")
        self.i_bits, self.o_bits = i_bits, o_bits
        super().__init__({"i": In(stream.Signature(unsigned(i_bits))),
                          "o": Out(stream.Signature(unsigned(o_bits)))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        free = ~o.valid | o.ready                   # the output register is empty after this cycle
        with m.If(o.valid & o.ready):
            m.d.sync += o.valid.eq(0)
        if self.i_bits >= self.o_bits:
            parts = self.i_bits // self.o_bits
            held = Signal(self.i_bits)              # the input item being split
            left = Signal(range(parts + 1))         # parts of ``held`` not yet sent
            m.d.comb += i.ready.eq(free & (left == 0))
            with m.If(free & (left != 0)):
                m.d.sync += [o.payload.eq(held[:self.o_bits]), o.valid.eq(1),
                             held.eq(held >> self.o_bits), left.eq(left - 1)]
            with m.If(i.valid & i.ready):
                m.d.sync += [o.payload.eq(i.payload[:self.o_bits]), o.valid.eq(1),
                             held.eq(i.payload >> self.o_bits), left.eq(parts - 1)]
        else:
            parts = self.o_bits // self.i_bits
            acc = Signal(self.o_bits - self.i_bits)  # the parts gathered so far, first at the low end
            have = Signal(range(parts))
            m.d.comb += i.ready.eq(free | (have != parts - 1))
            with m.If(i.valid & i.ready):
                with m.If(have == parts - 1):
                    m.d.sync += [o.payload.eq(Cat(acc, i.payload)), o.valid.eq(1), have.eq(0)]
                with m.Else():
                    m.d.sync += [acc.eq(Cat(acc[self.i_bits:], i.payload)), have.eq(have + 1)]
        return m


def word_write_layout(word_bits: int, max_words: int) -> data.StructLayout:
    """One buffer word write: the word address and the word."""
    return data.StructLayout({"addr": range(max(max_words, 2)), "data": word_bits})


class BufferLoad(wiring.Component):
    """``words`` buffer words read from DRAM at ``base`` and written to the buffer from word ``word_base``.

    Interface:
        start (pulse: latches ``base``, ``words``, ``word_base``), cancel, clear (clears ``error``)
        base: byte address, beat aligned (else ``error`` with the bad-command code, nothing read)
        words: words to transfer (``words * word_bits / 8`` bytes, a whole number of beats)
        w: Out stream of ``word_write_layout``: the buffer writes, in address order. A buffer port that
           always takes a write holds ``w.ready`` high; a lower ``ready`` backpressures the R channel.
        busy, done (pulse after the last word left), error, error_addr, error_code: the reader's (the
        failing beat's byte address and RRESP, see :mod:`mlo_hw.hw.weight_dma`)
        m_axi_ar* / m_axi_r*

    Timing: the first AR one cycle after ``start``, several bursts in flight; then one word a cycle
    (word >= beat: one per ``word / beat`` beats; word < beat: ``beat / word`` a beat, one a cycle), each
    written two cycles after its last beat arrived.
    """

    def __init__(self, p: AxiParams, word_bits: int, max_words: int, *, outstanding: int = 8):
        self.p, self.word_bits, self.max_words, self.outstanding = p, word_bits, max_words, outstanding
        super().__init__({
            "start": In(1), "cancel": In(1), "clear": In(1),
            "base": In(p.addr_bits), "words": In(range(max_words + 1)), "word_base": In(range(max(max_words, 2))),
            "w": Out(stream.Signature(word_write_layout(word_bits, max_words))),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_addr": Out(p.addr_bits), "error_code": Out(3),
            **axi_read_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p, wb = self.p, self.word_bits // 8
        m.submodules.reader = reader = ActReader(p, self.max_words * wb, outstanding=self.outstanding)
        regroup = Regroup(p.data_bits, self.word_bits)
        # a new transfer drops stale parts, a cycle after start: the reset is a register, not start's logic
        # (the first beat arrives two cycles after start at the earliest: AR one cycle after, R after AR; and
        # ``busy`` covers the regrouped output, so nothing is waiting there at a start)
        restart = Signal()
        m.d.sync += restart.eq(self.start)
        m.submodules.regroup = ResetInserter(restart)(regroup)
        forward_ports(m, self, reader, axi_read_master_members(p))
        m.d.comb += [reader.start.eq(self.start), reader.cancel.eq(self.cancel), reader.clear.eq(self.clear),
                     reader.base.eq(self.base), reader.length.eq(self.words * wb),
                     regroup.i.payload.eq(reader.lanes.payload.data), regroup.i.valid.eq(reader.lanes.valid),
                     reader.lanes.ready.eq(regroup.i.ready),
                     self.error.eq(reader.error), self.error_addr.eq(reader.error_addr),
                     self.error_code.eq(reader.error_code)]
        addr = Signal.like(self.w.payload.addr)
        left = Signal.like(self.words)              # words still to write
        with m.If(self.start):
            m.d.sync += [addr.eq(self.word_base), left.eq(self.words)]
        with m.Elif(self.cancel | reader.error):         # the reader forwards nothing more
            m.d.sync += left.eq(0)
        with m.Elif(self.w.valid & self.w.ready):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
        # after a cancel or an error the regrouped words still drain (dropped): the reader never blocks
        m.d.comb += [self.w.payload.addr.eq(addr), self.w.payload.data.eq(regroup.o.payload),
                     self.w.valid.eq(regroup.o.valid & (left != 0) & ~reader.error),
                     regroup.o.ready.eq(self.w.ready | (left == 0) | reader.error),
                     self.busy.eq(reader.busy | regroup.o.valid | (left != 0))]
        m.d.sync += self.done.eq(self.w.valid & self.w.ready & (left == 1))
        return m


class BufferStore(wiring.Component):
    """``words`` buffer words from word ``word_base`` written to DRAM at ``base``.

    Interface:
        start (pulse: latches ``base``, ``words``, ``word_base``), cancel, clear (clears ``error``)
        base: byte address, beat aligned (else ``error`` with the bad-command code, nothing written)
        words: words to transfer (``words * word_bits / 8`` bytes, a whole number of beats)
        r_addr, r_en: Out; r_data: In, the buffer word at ``r_addr`` ``read_latency`` cycles after ``r_en``
        hold: read nothing this cycle (another reader's turn at the buffer's port); avail: only buffer words below
        ``avail`` may be read (all when left undriven), so that a store may follow the writer of its words: judged a
        cycle late, from a register, so it may rise at any time and fall only before ``start``
        busy, done (pulse: every B response OKAY), error, error_addr, error_code: the writer's (the
        failing burst's first byte address and BRESP, see :mod:`mlo_hw.hw.act_dma`)
        m_axi_aw* / m_axi_w* / m_axi_b*

    Timing: reads run ahead into a queue of ``read_latency + 2`` words, so the W channel gets one beat a cycle
    (word >= beat), or one beat per ``beat / word`` cycles (word < beat: one buffer read a cycle); the first W
    beat ``read_latency + 3`` cycles after ``start``: the regrouped beats pass a two-entry queue (``beats``) on
    their way to the writer, so the W channel's ready, which the writer decodes from its burst state, ends there
    instead of in the regroup's register enables. A ``cancel`` stops the reads; the writer completes the bursts already
    issued with WSTRB 0 (see :class:`~mlo_hw.hw.act_dma.WriteDma`).
    """

    def __init__(self, p: AxiParams, word_bits: int, max_words: int, *, outstanding: int = 8, read_latency: int = 1):
        self.p, self.word_bits, self.max_words, self.outstanding = p, word_bits, max_words, outstanding
        self.read_latency = read_latency
        # a read is in flight read_latency cycles and queued a cycle before it can leave: this many keep one a cycle
        self.queue_depth = read_latency + 2
        super().__init__({
            "start": In(1), "cancel": In(1), "clear": In(1),
            "base": In(p.addr_bits), "words": In(range(max_words + 1)), "word_base": In(range(max(max_words, 2))),
            "r_addr": Out(range(max(max_words, 2))), "r_en": Out(1), "r_data": In(word_bits),
            "hold": In(1), "avail": In(range(max_words + 1), init=max_words),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_addr": Out(p.addr_bits), "error_code": Out(3),
            **axi_write_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p, wb = self.p, self.word_bits // 8
        m.submodules.writer = writer = ActWriter(p, self.max_words * wb, outstanding=self.outstanding)
        m.submodules.queue = queue = fifo.SyncFIFO(width=self.word_bits, depth=self.queue_depth)
        regroup = Regroup(self.word_bits, p.data_bits)
        # stale parts dropped, a cycle after start or cancel: the reset is a register, not the command's logic (a
        # read's word reaches the regroup read_latency + 2 cycles after start at the earliest; nothing is pending there at a
        # start, which ``busy`` covers; after a cancel its words drop, ``active`` being low)
        restart = Signal()
        m.d.sync += restart.eq(self.start | self.cancel)
        m.submodules.regroup = ResetInserter(restart)(regroup)
        m.submodules.beats = beats = ResetInserter(restart)(fifo.SyncFIFO(width=p.data_bits, depth=2))
        forward_ports(m, self, writer, axi_write_master_members(p))
        m.d.comb += [writer.start.eq(self.start), writer.cancel.eq(self.cancel), writer.clear.eq(self.clear),
                     writer.base.eq(self.base), writer.length.eq(self.words * wb),
                     self.done.eq(writer.done), self.error.eq(writer.error), self.error_addr.eq(writer.error_addr),
                     self.error_code.eq(writer.error_code)]
        addr = Signal.like(self.r_addr)
        left = Signal.like(self.words)              # words still to read
        more = Signal()                             # left != 0, a register
        flight = Signal(self.read_latency)          # bit i: a read issued i + 1 cycles ago (the last: its word is here)
        in_flight = flight[-1]
        # the queue's room for a read: registers counting the reads issued and the words popped, so that neither the
        # queue's level nor an adder is in front of the read decision, which enables ``left`` and ``addr`` (the room's
        # sum -> r_en -> ``left``'s enable was 6.65 ns at 46c7007's seed 1 on the ECP5-85F)
        room, _ = queue_credit(m, self.queue_depth, self.r_en, queue.r_rdy & queue.r_en, "store_queue")
        # the next word is not yet available: a register, judged a cycle ahead from the word after this cycle's read
        past = Signal()
        with m.If(self.start):
            m.d.sync += past.eq(self.word_base >= self.avail)
        with m.Else():
            m.d.sync += past.eq(Mux(self.r_en, addr + 1 >= self.avail, addr >= self.avail))
        m.d.comb += [self.r_en.eq(more & room & ~self.cancel & ~self.hold & ~past), self.r_addr.eq(addr)]
        with m.If(self.start):
            m.d.sync += [addr.eq(self.word_base), left.eq(self.words), more.eq(self.words != 0)]
        with m.Elif(self.cancel):
            m.d.sync += [left.eq(0), more.eq(0)]
        with m.Elif(self.r_en):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1), more.eq(left != 1)]
        m.d.sync += flight.eq(Cat(self.r_en, flight[:-1]))
        active = Signal()                           # from start to cancel: words go to the writer
        with m.If(self.start):
            m.d.sync += active.eq(1)
        with m.Elif(self.cancel):
            m.d.sync += active.eq(0)
        m.d.comb += [queue.w_data.eq(self.r_data), queue.w_en.eq(in_flight),
                     regroup.i.payload.eq(queue.r_data), regroup.i.valid.eq(queue.r_rdy),
                     queue.r_en.eq(regroup.i.ready),
                     beats.w_data.eq(regroup.o.payload), beats.w_en.eq(regroup.o.valid & active),
                     regroup.o.ready.eq(beats.w_rdy | ~active),     # a cancelled transfer's words drop
                     writer.lanes.payload.data.eq(beats.r_data), writer.lanes.valid.eq(beats.r_rdy),
                     beats.r_en.eq(writer.lanes.ready),
                     self.busy.eq(writer.busy | more | flight.any() | queue.r_rdy | regroup.o.valid
                                  | beats.r_rdy)]
        with m.If(self.start):
            m.d.comb += queue.r_en.eq(1)            # nothing stale survives into a new transfer
        return m
