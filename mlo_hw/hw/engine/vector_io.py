"""Word streams out of a buffer and lanes into elements: the engine's vector reader and serializer."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..pipeline import queue_credit

__all__ = ["VectorReader", "Serializer"]


class VectorReader(wiring.Component):
    """Streams ``vectors`` x ``words`` words of a memory: word ``base + v * stride + w``, ``passes`` times over.

    ``start`` (pulse) latches ``base``, ``stride``, ``words``, ``vectors`` (all >= 1) and ``passes`` (at most
    ``max_passes``; 0 or left undriven: 1); start it only when not ``busy``. The memory read port is driven
    through ``addr``/``en`` and answers on ``data`` ``latency`` cycles after ``en``. ``o``: one word per cycle
    while ``o.ready``, the passes back to back, none while ``hold`` (the next word may not be read yet); ``busy``
    until the last word has left.

    Timing: ``addr`` and ``en`` come from registers (``o.ready`` reaches neither): a read is issued while the
    words in flight and queued leave room in a queue of ``latency + 2`` words, which keeps one word a cycle
    flowing. A word is on ``o`` ``latency + 1`` cycles after its read.

    ``registered_request``: ``addr`` and ``en`` are the read decided a cycle earlier, registered (``hold`` and the
    reader's state then reach only registers beside the reader, not the memory's address and enable multiplexer
    across the die); a word is on ``o`` ``latency + 2`` cycles after it was decided, the queue one word deeper.
    ``head`` is the word the reader reads next (what ``hold`` judges) and ``issue`` is high in the cycle a read is
    decided (its ``en`` follows a cycle later). Without it ``head`` is ``addr`` and ``issue`` is ``en``.
    ``head_next`` is the word read after ``head`` (a register: a caller judges both a cycle ahead, and registers the
    judgement of the one ``issue`` makes the head; undefined after the last word).
    ``wants``: a read would be decided this cycle but for ``hold`` (the reader runs and its queue has room); a caller
    that shares the memory's port between two readers gives the turns from it a cycle ahead (the engine's LN1
    behind FFN up), so that neither reader's decision reaches the other's.
    """

    def __init__(self, addr_bits: int, word_bits: int, max_words: int, max_vectors: int, max_passes: int = 1,
                 latency: int = 1, registered_request: bool = False):
        self.max_words, self.max_vectors, self.max_passes = max_words, max_vectors, max_passes
        self.word_bits, self.latency, self.registered_request = word_bits, latency, registered_request
        super().__init__({
            "start": In(1), "base": In(addr_bits), "stride": In(addr_bits),
            "words": In(range(max_words + 1)), "vectors": In(range(max_vectors + 1)),
            "passes": In(range(max_passes + 1), init=1), "hold": In(1),
            "busy": Out(1), "addr": Out(addr_bits), "en": Out(1), "data": In(word_bits),
            "head": Out(addr_bits), "head_next": Out(addr_bits), "issue": Out(1), "wants": Out(1),
            "o": Out(stream.Signature(word_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        latency = self.latency + self.registered_request     # from a read's decision to its data
        depth = latency + 2
        m.submodules.queue = queue = SyncFIFO(width=self.word_bits, depth=depth)
        active = Signal()
        # ``at`` is the word read next (``head``); the cursor (``w``, ``v``, ``p``, ``row``: its column, vector, pass
        # and vector's first word) is at the word after it, ``nxt`` (``head_next``), and ``final`` says that ``at``
        # is the last word: a read moves ``at`` to ``nxt`` and steps the cursor
        w = Signal(range(max(self.max_words, 2)))
        v = Signal(range(max(self.max_vectors, 2)))
        at, nxt, row, base = (Signal.like(self.addr) for _ in range(4))
        final = Signal()
        words, vectors, stride = Signal.like(self.words), Signal.like(self.vectors), Signal.like(self.stride)
        passes, p = Signal.like(self.passes), Signal(range(max(self.max_passes, 2)))
        flight = Signal(latency)                     # bit i: a read decided i + 1 cycles ago
        issue = self.issue
        pop = queue.r_rdy & queue.r_en
        # the queue's entries taken (words queued or in flight) and "one left": registers, +- 1 and the test chosen last
        # by the read's decision and the pop (which then feed no carry chain: the LayerNorm reader's owed -> its test
        # -> the decision -> owed was 6.59 ns at 1d63e36's seed 1 on an ECP5-85F)
        room, owed = queue_credit(m, depth, issue, pop, "owed")
        m.d.comb += [self.wants.eq(active & room), issue.eq(self.wants & ~self.hold), self.head.eq(at),
                     self.head_next.eq(nxt),
                     queue.w_en.eq(flight[-1]), queue.w_data.eq(self.data),
                     self.o.valid.eq(queue.r_rdy), self.o.payload.eq(queue.r_data), queue.r_en.eq(self.o.ready),
                     self.busy.eq(active | (owed != 0))]
        request = m.d.sync if self.registered_request else m.d.comb
        request += [self.en.eq(issue), self.addr.eq(at)]
        m.d.sync += flight.eq(Cat(issue, flight[:-1]))

        def step(col, vec, pss, first, word, words, vectors, passes, stride, base):
            """The cursor to the word after ``word`` (column ``col`` of vector ``vec`` of pass ``pss``, the vector's
            first word ``first``); ``final`` if there is none."""
            m.d.sync += [w.eq(col + 1), nxt.eq(word + 1), v.eq(vec), row.eq(first), p.eq(pss), final.eq(0)]
            with m.If(col == words - 1):
                m.d.sync += [w.eq(0), v.eq(vec + 1), row.eq(first + stride), nxt.eq(first + stride)]
                with m.If(vec == vectors - 1):
                    m.d.sync += [v.eq(0), row.eq(base), nxt.eq(base), p.eq(pss + 1)]
                    with m.If(pss + 1 >= passes):
                        m.d.sync += final.eq(1)
        with m.If(issue):
            m.d.sync += at.eq(nxt)
            with m.If(final):
                m.d.sync += active.eq(0)
            with m.Else():
                step(w, v, p, row, nxt, words, vectors, passes, stride, base)
        with m.If(self.start):
            m.d.sync += [active.eq(1), at.eq(self.base), base.eq(self.base), words.eq(self.words),
                         vectors.eq(self.vectors), stride.eq(self.stride), passes.eq(self.passes)]
            step(0, 0, 0, self.base, self.base, self.words, self.vectors, self.passes, self.stride, self.base)
        return m


class Serializer(wiring.Component):
    """A word of ``lanes`` elements in, one element a beat out (lane 0 first): one element a cycle.

    ``i`` payload: ``ArrayLayout(shape, lanes)`` (lane 0 in the LSBs); ``o`` payload: ``shape`` (an int is
    ``unsigned(shape)``; a layout lets ``o`` connect to a typed stream). A word is taken when the last element
    of the previous one leaves, so back-to-back words stream without a gap; the first element leaves the
    cycle after its word is taken.

    ``registered_ready``: ``i.ready`` comes from a register instead of from ``o.ready``: the words go into a ring
    of two word registers, so the next word is taken while the current one leaves (the consumer's ready then ends
    at this block, not in the producer's handshake logic across the die), at the cost of a word of flip-flops. A
    word register follows the input while its slot is free, so its enable is the ring's own registers (``o.ready``
    and the input handshake move only the element index, the ring's read pointer and its two fill flags), and
    ``o.payload`` is a 2:1 multiplexer wider.

    ``registered_output`` (with ``registered_ready``): ``o.payload`` and ``o.valid`` come from an output register,
    loaded whenever it is empty or taken, so the element multiplexer ends at a flip-flop beside it rather than at
    the consumer's input across the die; the first element leaves a cycle later, the rate stays one a cycle.
    """

    def __init__(self, lanes: int, shape, registered_ready: bool = False, registered_output: bool = False):
        if registered_output and not registered_ready:
            raise ValueError("Serializer: registered_output needs registered_ready")
        self.lanes, self.registered_ready, self.registered_output = lanes, registered_ready, registered_output
        self.shape = unsigned(shape) if isinstance(shape, int) else shape
        super().__init__({"i": In(stream.Signature(data.ArrayLayout(self.shape, lanes))),
                          "o": Out(stream.Signature(self.shape))})

    def elaborate(self, platform):
        m = Module()
        word = Signal(data.ArrayLayout(self.shape, self.lanes))
        idx = Signal(range(max(self.lanes, 2)))             # (a lane of its own at one lane: no zero-width signal)
        full = Signal()
        last = idx == self.lanes - 1
        # an element leaves the words (``give``): into ``o``, or into the output register when it is empty or taken
        element = Signal(self.shape)
        if self.registered_output:
            out, out_valid = Signal(self.shape, name="out"), Signal(name="out_valid")
            give = full & (~out_valid | self.o.ready)
            with m.If(~out_valid | self.o.ready):
                m.d.sync += [out.eq(element), out_valid.eq(full)]
            m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(out)]
        else:
            give = full & self.o.ready
            m.d.comb += [self.o.valid.eq(full), self.o.payload.eq(element)]
        vacate = give & last                                # the word's last element leaves
        with m.If(give):
            m.d.sync += idx.eq(idx + 1)
            with m.If(last):
                m.d.sync += [full.eq(0), idx.eq(0)]
        take = self.i.valid & self.i.ready
        if not self.registered_ready:
            m.d.comb += [element.eq(word[0] if self.lanes == 1 else word[idx]), self.i.ready.eq(~full | vacate)]
            with m.If(take):
                m.d.sync += [word.eq(self.i.payload), full.eq(1), idx.eq(0)]
            return m
        ring = [word, Signal.like(word, name="word1")]
        rd_at = Signal(name="rd_at")                                  # the ring's read end
        both_full = Signal()                                          # (full: at least one word)
        head = Signal.like(word, name="head")                         # the word leaving
        m.d.comb += [head.eq(Mux(rd_at, ring[1], ring[0])), self.i.ready.eq(~both_full),
                     element.eq(head[0] if self.lanes == 1 else head[idx])]
        # a word register follows the input while its slot is free (a word taken lands in the free slot the ring
        # reads next: rd_at's when empty, the other one's when one word is held), so its enable is the ring's
        # registers alone, not the input handshake (the MVAU's output valid into the score groups' word enables
        # was 6.92 ns at 18f3507's seed 2 on the ECP5-85F)
        for k, w in enumerate(ring):
            with m.If(~both_full & ~(full & (rd_at == k))):
                m.d.sync += w.eq(self.i.payload)
        with m.If(vacate):
            m.d.sync += rd_at.eq(~rd_at)
        with m.If(take):
            m.d.sync += full.eq(1)
            with m.If(~vacate):
                m.d.sync += both_full.eq(full)
        with m.Elif(vacate):
            m.d.sync += [full.eq(both_full), both_full.eq(0)]
        return m
