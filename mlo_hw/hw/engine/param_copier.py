"""The parameter copier: a section of the current layer's ParamStore slot into the block that uses it.

The small per-layer sections (:data:`mlo_hw.hw.buffers.PARAM_SECTIONS`) stream from DRAM into the ParamStore
(:mod:`mlo_hw.hw.loop_ctrl`) ahead of the layer; before a phase needs them, they are copied into their block:
LN1's and LN2's gains and biases into the LayerNorm lanes, the GELU table into the table, the narrowing
shifts (one 4-bit shift per channel: the layer input's, then LN1's output's) into the operand side's shift
memory. A copy is requested while its destination idles and runs as soon as its section has arrived. Post-LN:
the shifts after the header, LN1's during O, GELU's during LN1, LN2's during FFN down. Pre-LN: LN1's after the
header (tiled: during each pass-1 block's load), the shifts during LN1, LN2's during O, GELU's during LN2.
An encoder-decoder's (``cross``): the shifts are [4H] (also the cross Q input's and the memory's), and LNX, the
cross block's norm, has its gains and biases after LN1's in the ln1 section; its copy runs during the cross heads.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from ..buffers import PARAM_SECTIONS, ParamGeometry
from ..gelu import TableWriteSignature
from ..layernorm import ParamWriteSignature

__all__ = ["CopyKind", "ShiftWriteSignature", "ParamCopier", "SHIFT_LANE_BITS"]

SHIFT_LANE_BITS = 4     # one narrowing shift (0..NARROW_SHIFT_MAX)


class CopyKind(enum.Enum, shape=3):
    LN1 = 0
    GELU = 1
    LN2 = 2
    NARROW = 3
    LNX = 4            # an encoder-decoder's cross block's norm (after LN1's words in the ln1 section)
    BIAS = 5           # the relative position bias table (after the GELU table in its section)


SECTION = {CopyKind.LN1: "ln1", CopyKind.GELU: "gelu", CopyKind.LN2: "ln2", CopyKind.NARROW: "narrow",
           CopyKind.LNX: "ln1", CopyKind.BIAS: "gelu"}
LN_KINDS = (CopyKind.LN1, CopyKind.LN2, CopyKind.LNX)


class ShiftWriteSignature(wiring.Signature):
    """The shift memory's write port seen from the writer: ``en`` (one bit per lane) writes ``data`` (the shift
    replicated over the ``lanes`` lanes) into word ``addr``."""

    def __init__(self, words: int, lanes: int):
        super().__init__({"addr": Out(range(max(words, 2))), "data": Out(SHIFT_LANE_BITS * lanes), "en": Out(lanes)})


class ParamCopier(wiring.Component):
    """Copies one section of the ParamStore slot in use to its destination, one element a cycle (the narrowing
    shifts a word of four a cycle when the shift memory's lanes are a multiple of four: the copy is on the path of
    every layer's start, between the header and the first matrix).

    Interface:
        request (pulse) with kind (:class:`CopyKind`): start a copy (a request while a copy runs restarts it);
        flush (pulse): abandon it (``busy`` and ``done`` fall).
        busy; done (from the copy's end until the next request or flush); waiting (``busy`` while the section
        has not arrived from DRAM: the engine counts it as a DMA stall); release (pulse, the end of a copy of
        kind ``last``, the layer's last: LN2's for post-LN, the GELU table's for pre-LN; the slot is done with,
        its ``loaded`` bits may clear).
        ParamStore side: ``param_addr`` (32-bit word in the slot, from a register) -> ``param_data`` one cycle
        later;
        ``loaded`` (the slot's bits, one per :data:`PARAM_SECTIONS`).
        ``ln``: the LayerNorm lanes' gain/bias write port (word i = element i: gains then biases);
        ``gelu``: the GELU table's write port (byte i = entry i); ``shift``: the shift memory's write port
        (channel c of the layer input at word c // lanes, lane c % lanes; LN1's output's from word H / lanes on).

    Timing: ``request`` is registered on the way in: ``busy`` rises, ``done`` falls and ``kind`` is taken at the
    edge of the request (so a state that waits for ``done`` right after requesting waits), the copy restarts from
    the register a cycle later (the request is the sequencer's decode: into every counter's reset it was 8.01 ns at
    bc0335c's seed 2). Once the section is loaded, element i is read in cycle i and written in cycle i + 2 (the
    read data is registered before it leaves: the store's block RAM output drives no long wire); a section of n
    elements takes n + 2 cycles from the first read to ``done`` (the shifts: n / 4 + 2), the first read two cycles
    after the request at the earliest.
    """

    def __init__(self, hidden: int, lanes: int, pgeo: ParamGeometry, act_bits: int = 8,
                 last: CopyKind = CopyKind.LN2, cross: bool = False, bias_words: int = 0):
        self.hidden, self.lanes, self.pgeo, self.act_bits, self.last = hidden, lanes, pgeo, act_bits, last
        self.cross = cross
        self.count = {CopyKind.LN1: 2 * hidden, CopyKind.GELU: 1 << act_bits, CopyKind.LN2: 2 * hidden,
                      CopyKind.NARROW: (4 if cross else 2) * hidden}
        if cross:
            self.count[CopyKind.LNX] = 2 * hidden
        if bias_words:
            self.count[CopyKind.BIAS] = bias_words
        # elements a read: the narrowing shifts go a word (four bytes) at a time into four lanes of the shift memory
        self.per_read = {k: 1 for k in self.count}
        if lanes % 4 == 0:
            self.per_read[CopyKind.NARROW] = 4
        super().__init__({
            "request": In(1), "kind": In(CopyKind), "flush": In(1),
            "busy": Out(1), "done": Out(1), "waiting": Out(1), "release": Out(1),
            "param_addr": Out(range(pgeo.slot_bytes // 4)), "param_data": In(32),
            "loaded": In(len(PARAM_SECTIONS)),
            "ln": Out(ParamWriteSignature(hidden)),
            "gelu": Out(TableWriteSignature(1 << act_bits, unsigned(act_bits))),
            "shift": Out(ShiftWriteSignature(self.count[CopyKind.NARROW] // lanes, lanes)),
            "bias": Out(ParamWriteSignature(max(bias_words, 2) // 2)),     # entry i of the position bias table
        })

    @classmethod
    def from_config(cls, cfg) -> "ParamCopier":
        # a layer's last copy: LN2's after FFN down (post-LN), the GELU table's after LN2 (pre-LN)
        last = CopyKind.GELU if cfg.model.norm == "pre" else CopyKind.LN2
        from ...model.weight_image import bias_words
        return cls(cfg.model.hidden, cfg.folding.simd, ParamGeometry.from_config(cfg), cfg.numerics.act_bits, last,
                   cfg.seq2seq, bias_words(cfg))

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        # the request, registered: the copy restarts from it (``restart``), a cycle after the request (``kind``, which
        # ``loaded`` and ``waiting`` follow, is taken at the request itself)
        restart = Signal()
        m.d.sync += restart.eq(self.request & ~self.flush)
        kind = Signal(CopyKind)
        idx = Signal(range(max(self.count.values()) + 2))      # the element being read
        prev = Signal.like(idx)                                 # the element read last cycle (its data is out)
        write = Signal()                                        # ``prev`` is valid: register it to write it
        loaded, last = Signal(), Signal()
        # the word being read, a register: the section's first word, then one more a element (a byte: every fourth)
        addr, next_word = Signal.like(self.param_addr), Signal()
        m.d.sync += [prev.eq(idx), write.eq(0)]
        m.d.comb += self.param_addr.eq(addr)
        # the element read last cycle, registered: it is written from here, a cycle later
        data_q, at = Signal(32, reset_less=True), Signal.like(prev, reset_less=True)
        put, ending = Signal(), Signal()          # (a request or a flush drops the element in flight)
        m.d.sync += [data_q.eq(self.param_data), at.eq(prev), put.eq(write & ~restart & ~self.flush),
                     ending.eq(0)]
        kinds = {k: v for k, v in SECTION.items() if k in self.count}
        with m.Switch(kind):
            for k, section in kinds.items():
                bytewise = k in (CopyKind.GELU, CopyKind.NARROW) and self.per_read[k] == 1   # else whole words
                with m.Case(k):
                    m.d.comb += [loaded.eq(self.loaded[PARAM_SECTIONS.index(section)]),
                                 last.eq(idx == self.count[k] // self.per_read[k]),
                                 next_word.eq(idx[:2] == 3 if bytewise else 1)]
        byte = data_q.word_select(at[:2], 8)
        m.d.comb += [self.ln.addr.eq(at), self.ln.data.eq(data_q.as_signed()),
                     self.ln.en.eq(put & Cat(*(kind == k for k in LN_KINDS if k in self.count)).any()),
                     self.gelu.addr.eq(at), self.gelu.data.eq(byte), self.gelu.en.eq(put & (kind == CopyKind.GELU)),
                     self.bias.addr.eq(at), self.bias.data.eq(data_q.as_signed()),
                     self.bias.en.eq(put & (kind == CopyKind.BIAS) if CopyKind.BIAS in self.count else 0)]
        # the narrowing shifts, one per channel, fill the shift memory's words lane by lane (``per`` lanes a write:
        # byte j of the word read to lane lane + j)
        per = self.per_read[CopyKind.NARROW]
        word, lane = Signal.like(self.shift.addr), Signal(range(max(lanes, 2)))
        shifts = Cat(*(data_q.word_select(j, 8)[:SHIFT_LANE_BITS] for j in range(per))) if per > 1 \
            else byte[:SHIFT_LANE_BITS]
        m.d.comb += [self.shift.addr.eq(word), self.shift.data.eq(shifts.replicate(lanes // per))]
        with m.If(put & (kind == CopyKind.NARROW)):
            m.d.comb += self.shift.en.eq(((1 << per) - 1) << lane)
            m.d.sync += lane.eq(lane + per)
            with m.If(lane == lanes - per):
                m.d.sync += [lane.eq(0), word.eq(word + 1)]

        copying = self.busy & ~restart                  # (the counters are the copy's from here)
        m.d.comb += [self.waiting.eq(self.busy & ~loaded),
                     self.release.eq(copying & loaded & last & (kind == self.last))]
        with m.If(copying & loaded):
            with m.If(last):
                m.d.sync += [self.busy.eq(0), ending.eq(1)]
            with m.Else():
                m.d.sync += [idx.eq(idx + 1), write.eq(1), addr.eq(addr + next_word)]
        with m.If(ending & ~restart):       # the last element is written this cycle (not a copy's a request ended)
            m.d.sync += self.done.eq(1)
        with m.If(self.request):
            m.d.sync += [self.busy.eq(1), self.done.eq(0), kind.eq(self.kind)]
        with m.If(restart):
            m.d.sync += [ending.eq(0), idx.eq(0), word.eq(0), lane.eq(0)]
            with m.Switch(kind):
                for k, section in kinds.items():
                    with m.Case(k):      # LNX: after LN1's gains and biases; BIAS: after the GELU table
                        skip = {CopyKind.LNX: 8 * self.hidden, CopyKind.BIAS: 1 << self.act_bits}.get(k, 0)
                        m.d.sync += addr.eq(self.pgeo.word(section, skip))
        with m.If(self.flush):
            m.d.sync += [self.busy.eq(0), self.done.eq(0), ending.eq(0)]
        return m
