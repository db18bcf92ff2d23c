"""Integer softmax over rows of raw Q.K^T scores, streaming, bit-exact with ``numerics.softmax``.

Every row needs its maximum before its exponentials and its exponential sum before its outputs, so
a row passes four units in order, each working on a different row at the same time. A row lives in
one of ``SLOTS`` row slots (score and exponent memories, per-slot statistics) from its first input
to its last output; a slot's phase says which unit owns it::

    phase 0 ingest:  accept ``row`` (score, mask) beats, store them, running max over masked-in keys
    phase 1 exp:     re-read the scores: u = (max - s) * mult >> shift, q = min(u >> 8, 16),
                     e = exp2_table[u & 255] >> q (0 where masked or q == 16); store e; sum e
    phase 2 divide:  rcp = floor(2**32 / sum) (0 when sum == 0), one quotient bit per cycle
    phase 3 output:  p = min(e * rcp >> 24, 255), one per beat, then the slot is free again
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..model import numerics as nx
from .divide import SerialDivider

__all__ = ["Softmax", "score_layout"]

SLOTS = 4                      # rows in flight (a power of two: the slot pointers wrap)
SHIFT_BITS = 6                 # runtime shift 0..63 (numerics.quantize_multiplier's max_shift is 62)
EXP_PIPE = 4                   # cycles from a score read to its exponent write
RECIP_QUOTIENT_BITS = nx.SOFTMAX_RECIP_BITS - nx.EXP_ONE_BITS + 1   # sum >= 2**15 -> rcp <= 2**17
EXP_BITS = nx.EXP_ONE_BITS + 1                                       # table[0] == 2**15


def score_layout(score_bits: int) -> data.StructLayout:
    """One input beat: a raw score (LSBs) and its mask bit (true = the key may be attended)."""
    return data.StructLayout({"score": signed(score_bits), "mask": 1})


class Softmax(wiring.Component):
    """Row softmax: ``row`` scores in, ``row`` unsigned 8-bit probabilities out, in order.

    Interface:
        ``i``: stream of :func:`score_layout` beats, one key per beat; ``row`` beats make a row (no
        framing signal: rows are counted).
        ``o``: stream of unsigned(8), one probability per beat, units of 2**-8.
        ``mult`` (unsigned 16) and ``shift`` (0..63): the layer's softmax multiplier and shift; hold
        them stable while rows are in flight.
    Throughput: one element per cycle in and out in steady state when ``row >= 20``: every unit
    takes at most ``row`` cycles per row (the exp pipeline overlaps rows; the divider needs
    ``RECIP_QUOTIENT_BITS + 2 = 20`` cycles per row). Shorter rows run at one row per ~20 cycles
    (measured: 12 rows of 8 keys in 228 cycles; 12 rows of 128 keys in 1536 cycles, gapless).
    The matrix-vector unit produces Q.K^T scores at ``pe * simd / head_dim`` per cycle (1 for
    bert_tiny and small), so a row of >= 20 keys never holds it back.
    Latency: from a row's last input to its first output ``row + ~27`` cycles (exp pass ``row + 4``,
    reciprocal 20, output 3); measured from the first input: 283 cycles at 128 keys, 43 at 8.
    Storage: scores ``SLOTS * row * (score_bits + 1)`` bits, exponents ``SLOTS * row * 16`` bits.
    DSP: the two multipliers ((max - s) * mult, e * rcp).
    """

    def __init__(self, row: int, score_bits: int):
        if row < 1:
            raise ValueError(f"Softmax: row must be >= 1, got {row}")
        if score_bits < 2:
            raise ValueError(f"Softmax: score_bits must be >= 2, got {score_bits}")
        self.row, self.score_bits = row, score_bits
        super().__init__({
            "i": In(stream.Signature(score_layout(score_bits))),
            "o": Out(stream.Signature(unsigned(nx.PROB_BITS))),
            "mult": In(nx.MULT_BITS),
            "shift": In(SHIFT_BITS),
        })

    @classmethod
    def from_config(cls, cfg) -> "Softmax":
        """Rows of ``seq_padded`` keys; scores are Q.K^T accumulators over ``head_dim`` terms."""
        return cls(row=cfg.seq_padded, score_bits=cfg.acc_bits(cfg.head_dim))

    def elaborate(self, platform):
        m = Module()
        n, w = self.row, self.score_bits
        idx_bits = max(1, (n - 1).bit_length())
        slot_bits = (SLOTS - 1).bit_length()
        depth = SLOTS << idx_bits

        phase = Signal(data.ArrayLayout(2, SLOTS))
        row_max = Signal(data.ArrayLayout(signed(w), SLOTS))
        row_sum = Signal(data.ArrayLayout(unsigned(EXP_BITS + idx_bits + 1), SLOTS))
        row_rcp = Signal(data.ArrayLayout(unsigned(RECIP_QUOTIENT_BITS), SLOTS))

        m.submodules.scores = scores = Memory(shape=score_layout(w), depth=depth, init=[])
        m.submodules.exps = exps = Memory(shape=unsigned(EXP_BITS), depth=depth, init=[])
        m.submodules.exp2 = exp2 = Memory(shape=unsigned(EXP_BITS), depth=nx.EXP_TABLE_SIZE,
                                          init=[int(v) for v in nx.exp2_table()])

        # ---- phase 0: ingest, running max over masked-in keys ------------------------------------
        in_slot = Signal(slot_bits)
        in_idx = Signal(range(n))
        in_any = Signal()                     # a masked-in key was seen earlier in this row
        score_w = scores.write_port()
        beat = self.i.payload
        m.d.comb += [self.i.ready.eq(phase[in_slot] == 0),
                     score_w.addr.eq(Cat(in_idx, in_slot)), score_w.data.eq(beat),
                     score_w.en.eq(self.i.valid & self.i.ready)]
        with m.If(self.i.valid & self.i.ready):
            first = in_idx == 0
            with m.If(beat.mask & (first | ~in_any | (beat.score > row_max[in_slot]))):
                m.d.sync += row_max[in_slot].eq(beat.score)
            m.d.sync += in_any.eq(beat.mask | (in_any & ~first))
            with m.If(in_idx == n - 1):
                m.d.sync += [in_idx.eq(0), in_slot.eq(in_slot + 1), phase[in_slot].eq(1)]
            with m.Else():
                m.d.sync += in_idx.eq(in_idx + 1)

        # ---- phase 1: exponents and their sum (a fixed pipeline, no stalls) ----------------------
        ex_slot = Signal(slot_bits)
        ex_idx = Signal(range(n))
        issue = Signal()
        score_r = scores.read_port()
        m.d.comb += [issue.eq(phase[ex_slot] == 1), score_r.addr.eq(Cat(ex_idx, ex_slot))]
        with m.If(issue):
            with m.If(ex_idx == n - 1):
                m.d.sync += [ex_idx.eq(0), ex_slot.eq(ex_slot + 1)]
            with m.Else():
                m.d.sync += ex_idx.eq(ex_idx + 1)
        # metadata travelling with each element: valid, first, last, memory address
        meta = data.StructLayout({"valid": 1, "first": 1, "last": 1, "addr": idx_bits + slot_bits})
        stage = [Signal(meta, name=f"ex_meta{k}") for k in range(EXP_PIPE + 1)]
        m.d.sync += [stage[1].valid.eq(issue), stage[1].first.eq(ex_idx == 0),
                     stage[1].last.eq(ex_idx == n - 1), stage[1].addr.eq(Cat(ex_idx, ex_slot))]
        for k in range(2, EXP_PIPE + 1):
            m.d.sync += stage[k].eq(stage[k - 1])
        slot_of = lambda s: s.addr[idx_bits:]     # noqa: E731
        # stage 1: score from memory; distance below the row max (0 for masked keys)
        dist = Signal(unsigned(w))
        masked_in = Signal(EXP_PIPE + 1)
        m.d.sync += [dist.eq(Mux(score_r.data.mask, row_max[slot_of(stage[1])] - score_r.data.score, 0)),
                     masked_in[2].eq(score_r.data.mask)]
        # stage 2: times the multiplier
        prod = Signal(unsigned(w + nx.MULT_BITS))
        m.d.sync += [prod.eq(dist * self.mult), masked_in[3].eq(masked_in[2])]
        # stage 3: shift, split into table index f and exponent shift q (saturated at 16)
        u = Signal(unsigned(w + nx.MULT_BITS))
        q = Signal(range(17))
        exp2_r = exp2.read_port()
        m.d.comb += [u.eq(prod >> self.shift), exp2_r.addr.eq(u[:nx.EXP_FRAC_BITS])]
        m.d.sync += [q.eq(Mux(u >= (16 << nx.EXP_FRAC_BITS), 16, u[nx.EXP_FRAC_BITS:])),
                     masked_in[4].eq(masked_in[3])]
        # stage 4: e = table[f] >> q; store it and accumulate the row sum
        e = Signal(unsigned(EXP_BITS))
        m.d.comb += e.eq(Mux(masked_in[4] & (q < 16), exp2_r.data >> q, 0))
        exp_w = exps.write_port()
        end = stage[EXP_PIPE]
        m.d.comb += [exp_w.addr.eq(end.addr), exp_w.data.eq(e), exp_w.en.eq(end.valid)]
        acc = Signal.like(row_sum[0])
        total = Signal.like(row_sum[0])
        m.d.comb += total.eq(Mux(end.first, 0, acc) + e)
        with m.If(end.valid):
            m.d.sync += acc.eq(total)
            with m.If(end.last):
                m.d.sync += [row_sum[slot_of(end)].eq(total), phase[slot_of(end)].eq(2)]

        # ---- phase 2: reciprocal of the row sum ----------------------------------------------------
        m.submodules.divider = divider = SerialDivider(nx.SOFTMAX_RECIP_BITS + 1, len(row_sum[0]),
                                                       RECIP_QUOTIENT_BITS)
        dv_slot = Signal(slot_bits)
        dv_running = Signal()
        m.d.comb += [divider.dividend.eq(1 << nx.SOFTMAX_RECIP_BITS), divider.divisor.eq(row_sum[dv_slot]),
                     divider.start.eq((phase[dv_slot] == 2) & ~dv_running)]
        with m.If(divider.start):
            m.d.sync += dv_running.eq(1)
        with m.If(divider.done):
            zero = row_sum[dv_slot] == 0      # a fully masked row: all probabilities 0
            m.d.sync += [row_rcp[dv_slot].eq(Mux(zero, 0, divider.quotient)), phase[dv_slot].eq(3),
                         dv_slot.eq(dv_slot + 1), dv_running.eq(0)]

        # ---- phase 3: probabilities out (a pipeline that stalls on output backpressure) -----------
        out_slot = Signal(slot_bits)
        out_idx = Signal(range(n))
        advance = Signal()
        take = Signal()
        exp_r = exps.read_port()
        m.d.comb += [advance.eq(self.o.ready | ~self.o.valid), take.eq(advance & (phase[out_slot] == 3)),
                     exp_r.addr.eq(Cat(out_idx, out_slot)), exp_r.en.eq(advance)]
        with m.If(take):
            with m.If(out_idx == n - 1):
                m.d.sync += [out_idx.eq(0), out_slot.eq(out_slot + 1)]
            with m.Else():
                m.d.sync += out_idx.eq(out_idx + 1)
        o1 = Signal(data.StructLayout({"valid": 1, "last": 1, "slot": slot_bits}))
        o2 = Signal.like(o1)
        o3 = Signal.like(o1)                  # the registered output beat
        scaled = Signal(unsigned(EXP_BITS + RECIP_QUOTIENT_BITS))
        with m.If(advance):
            m.d.sync += [o1.valid.eq(take), o1.last.eq(out_idx == n - 1), o1.slot.eq(out_slot),
                         o2.eq(o1), o3.eq(o2),
                         scaled.eq(exp_r.data * row_rcp[o1.slot])]
            shifted = scaled >> (nx.SOFTMAX_RECIP_BITS - nx.PROB_BITS)
            top = (1 << nx.PROB_BITS) - 1
            m.d.sync += self.o.payload.eq(Mux(shifted > top, top, shifted))
        m.d.comb += self.o.valid.eq(o3.valid)
        # the slot is free once its last probability has left
        with m.If(self.o.valid & self.o.ready & o3.last):
            m.d.sync += phase[o3.slot].eq(0)
        return m
