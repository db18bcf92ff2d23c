"""Integer softmax over rows of raw Q.K^T scores, ``lanes`` keys a cycle, bit-exact with ``numerics.softmax``.

Every row needs its maximum before its exponentials and its exponential sum before its outputs, so
a row passes four units in order, each working on a different row at the same time. A row lives in
one of ``slots`` row slots (score and exponent memories of one ``lanes``-wide word per beat, per-slot
statistics) from its first input to its last output; a slot's :class:`Phase` says which unit owns it::

    ingest:  accept ``row / lanes`` beats of (lanes scores, lanes mask bits), store them; register the
             beat, a pipelined max tree over its masked-in lanes, then a running max over the row's beats
    exp:     re-read a word a cycle; per lane u = (max - s) * mult >> shift (registered), q = min(u >> 8, 16),
             e = exp2_table[u & 255] >> q (0 where masked or q == 16), one table copy per lane;
             store the word of e; a pipelined adder tree, then a running sum over the row's beats.
             The product is split at bit 17 of (max - s) into two multiplier-sized
             partial products, each registered straight out of its multiplier (MULT18X18D, DSP48E1),
             and summed a cycle later (:func:`~mlo_hw.hw.mvau.split_product`); ``mult`` and ``shift`` are
             registered inside the block.
    divide:  rcp = floor(2**32 / sum), one quotient bit per cycle; ``dividers`` serial dividers take
             rows in turn (a fully masked row has sum 0 and every e 0: its rcp is never used)
    output:  p = min(e * rcp >> 24, 255) per lane, one beat of ``lanes`` probabilities a cycle (the exponent
             word registered out of its memory and again beside its multiplier, the product at the
             multiplier, then the saturated beat)
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..model import numerics as nx
from .divide import SerialDivider
from .mvau import SPLIT_BITS, split_parts, split_product
from .pipeline import delayed, kept_copy

__all__ = ["Softmax", "Phase", "score_layout", "prob_layout"]

SHIFT_BITS = 6                 # runtime shift 0..63 (numerics.quantize_multiplier's max_shift is 62)
INGEST_PIPE = 1                # cycles from an input beat to its max tree's leaves
EXP_PIPE = 8                   # cycles from a score word read to its exponent word (registered)
OUT_PIPE = 5                   # cycles from an exponent word read to its output beat (registered)
RECIP_QUOTIENT_BITS = nx.SOFTMAX_RECIP_BITS - nx.EXP_ONE_BITS + 1   # sum >= 2**15 -> rcp <= 2**17
DIVIDE_CYCLES = RECIP_QUOTIENT_BITS + 1                              # a SerialDivider's start-to-start period
EXP_BITS = nx.EXP_ONE_BITS + 1                                       # table[0] == 2**15


class Phase(enum.Enum, shape=3):
    """Who owns a row slot. Each unit takes a slot in its "ready" phase and hands it on with the next."""
    FREE = 0       # ingest fills it
    MAX = 1        # every beat is in; the max tree drains
    EXP = 2        # the exp unit may read it
    SUM = 3        # every word is read; the exp pipeline and sum tree drain
    DIV = 4        # waits for a divider
    RCP = 5        # a divider works on it
    OUT = 6        # the output unit may read it
    DRAIN = 7      # every word is read; the last beat is in the output pipeline


def score_layout(score_bits: int, lanes: int = 1) -> data.StructLayout:
    """One input beat: ``lanes`` raw scores (lane 0 = the lowest key, in the LSBs) and one mask bit per
    lane (bit l for lane l; 1 = the key may be attended)."""
    return data.StructLayout({"score": data.ArrayLayout(signed(score_bits), lanes), "mask": unsigned(lanes)})


def prob_layout(lanes: int = 1) -> data.ArrayLayout:
    """One output beat: ``lanes`` unsigned 8-bit probabilities, lane 0 in the LSBs (bytes of a word)."""
    return data.ArrayLayout(unsigned(nx.PROB_BITS), lanes)


def _tree(m, leaves, shape, combine, name):
    """Pairwise reduction of ``leaves`` with one register level per tree level: (result, levels)."""
    level, depth = list(leaves), 0
    while len(level) > 1:
        depth += 1
        nxt = []
        for j in range(0, len(level), 2):
            r = Signal(shape, name=f"{name}{depth}_{j // 2}")
            m.d.sync += r.eq(combine(level[j], level[j + 1]) if j + 1 < len(level) else level[j])
            nxt.append(r)
        level = nxt
    return level[0], depth


class Softmax(wiring.Component):
    """Row softmax: ``row`` scores in, ``row`` unsigned 8-bit probabilities out, ``lanes`` a beat, in order.

    Interface:
        ``i``: stream of :func:`score_layout` beats: ``lanes`` consecutive keys of a row (lane 0 the
        lowest), each with its mask bit; ``row / lanes`` beats make a row (no framing: rows are counted).
        In the engine these are groups of the matrix-vector unit's raw Q.K^T result beat, plus a mask vector the
        caller makes (for BERT padding: bit l = ``key0 + l < tokens``; any mask pattern is computed right).
        ``o``: stream of :func:`prob_layout` beats, the same keys' probabilities (units of 2**-8; masked
        keys and fully masked rows give 0).
        ``mult`` (unsigned 16) and ``shift`` (0..63): the layer's softmax multiplier and shift; hold
        them stable while rows are in flight (they are registered here: a change reaches the exp unit a
        cycle later, long before a row's first word, which needs ``row / lanes`` input beats first).
    ``i.ready`` comes from a register (a free row slot, judged a cycle ahead).
    Throughput: one beat (``lanes`` elements) per cycle in and out in steady state while every unit keeps
    up: ingest, exp and output take ``beats = row / lanes`` cycles a row, each divider
    ``DIVIDE_CYCLES = 19`` cycles a row. ``dividers`` defaults to ``ceil(19 / (beats * interval))`` and
    ``slots`` to the rows a row's lifetime covers (:meth:`default_slots`), so the default build keeps up
    with one beat every ``interval`` cycles (``interval = 1``: full rate; a producer slower than that, like
    the engine's MVAU at ``head_dim / simd`` cycles a beat, needs fewer slots and dividers); with fewer
    dividers the rate is ``min(1, dividers * beats / 19)`` beats a cycle. Measured (always
    valid, always ready, 12 rows, ``sim/tb_softmax.py::full_rate``): one beat every cycle, gapless across
    rows, for rows of 8/32/128 keys at 1, 4, 8 and 16 lanes (128 keys x 16 lanes: 96 beats in 96 cycles,
    16 elements a cycle).
    Latency: first input to first output :meth:`latency` = ``2 * beats + 2 * log2(lanes) + 31`` cycles,
    nothing stalled (measured, asserted exactly: 287 at 128 keys x 1 lane, 55 at 128 x 16, 47 at 8 x 1).
    Storage: scores ``slots * beats`` words of ``lanes * (score_bits + 1)`` bits, exponents as many
    words of ``lanes * 16`` bits, one 256 x 16 exp2 ROM per lane. DSP: ``2 * lanes`` multipliers
    ((max - s) * mult, e * rcp; the first is two partial products when ``score_bits`` > 17).
    """

    def __init__(self, row: int, score_bits: int, lanes: int = 1, *, dividers: int | None = None,
                 slots: int | None = None, interval: int = 1):
        if row < 1:
            raise ValueError(f"Softmax: row must be >= 1, got {row}")
        if score_bits < 2:
            raise ValueError(f"Softmax: score_bits must be >= 2, got {score_bits}")
        if lanes < 1 or row % lanes:
            raise ValueError(f"Softmax: lanes must be >= 1 and divide row {row}, got {lanes}")
        if interval < 1:
            raise ValueError(f"Softmax: interval must be >= 1, got {interval}")
        self.row, self.score_bits, self.lanes = row, score_bits, lanes
        self.beats = row // lanes
        self.dividers = dividers if dividers is not None else -(-DIVIDE_CYCLES // (self.beats * interval))
        self.slots = slots if slots is not None else self.default_slots(row, lanes, interval)
        if self.dividers < 1:
            raise ValueError(f"Softmax: dividers must be >= 1, got {self.dividers}")
        if self.slots < 2 or self.slots & (self.slots - 1):
            raise ValueError(f"Softmax: slots must be a power of two >= 2, got {self.slots}")
        super().__init__({
            "i": In(stream.Signature(score_layout(score_bits, lanes))),
            "o": Out(stream.Signature(prob_layout(lanes))),
            "mult": In(nx.MULT_BITS),
            "shift": In(SHIFT_BITS),
        })

    @classmethod
    def from_config(cls, cfg, lanes: int = 1, interval: int = 1) -> "Softmax":
        """Rows of ``seq_padded`` keys; scores are Q.K^T accumulators over ``head_dim`` terms. The engine's
        (:meth:`~mlo_hw.hw.layer_engine.EngineGeometry.softmax`) has the fewest lanes that keep up with the
        matrix-vector unit's ``pe`` scores every ``head_dim / simd`` cycles."""
        return cls(row=cfg.seq_padded, score_bits=cfg.acc_bits(cfg.head_dim), lanes=lanes, interval=interval)

    @staticmethod
    def latency(row: int, lanes: int = 1) -> int:
        """Cycles from a row's first input beat to its first output beat, nothing stalled."""
        beats, levels = row // lanes, (lanes - 1).bit_length()
        ingest = beats + INGEST_PIPE + levels         # last beat -> register -> tree -> running max -> EXP
        exp = beats + EXP_PIPE + levels               # last read -> e -> tree -> running sum -> DIV
        return ingest + exp + DIVIDE_CYCLES + 1 + OUT_PIPE

    @classmethod
    def default_slots(cls, row: int, lanes: int = 1, interval: int = 1) -> int:
        """Enough row slots for input beats every ``interval`` cycles: a row holds its slot from its first
        input to its last output (``latency + beats`` cycles, plus ``(interval - 1) * beats`` while its
        beats trickle in) while a new row arrives every ``interval * beats`` cycles; a power of two >= 4."""
        beats = row // lanes
        lifetime = cls.latency(row, lanes) + beats + (interval - 1) * beats
        rows_in_flight = -(-lifetime // (interval * beats))
        return max(4, 1 << (rows_in_flight - 1).bit_length())

    @classmethod
    def memory_shapes(cls, row: int, score_bits: int, lanes: int = 1, interval: int = 1,
                      slots: int | None = None) -> dict[str, tuple[int, int]]:
        """(width bits, depth) of the score and exponent memories (``slots`` None: :meth:`default_slots`); a
        memory address is Cat(beat index, slot), so the depth is ``slots`` times ``row / lanes`` rounded up to a
        power of two. (The ``lanes`` 256 x 16 exp2 ROMs are not included.)"""
        beats = row // lanes
        slots = cls.default_slots(row, lanes, interval) if slots is None else slots
        depth = slots << max(1, (beats - 1).bit_length())
        return {"scores": (lanes * (score_bits + 1), depth), "exps": (lanes * EXP_BITS, depth)}

    def elaborate(self, platform):
        m = Module()
        n, w, lanes = self.beats, self.score_bits, self.lanes
        idx_bits = max(1, (n - 1).bit_length())          # a memory address is Cat(beat index, slot)
        slot_bits = (self.slots - 1).bit_length()
        depth = self.slots << idx_bits                    # as memory_shapes says
        s = SimpleNamespace(
            idx_bits=idx_bits, slot_bits=slot_bits,
            sum_shape=unsigned((self.row << nx.EXP_ONE_BITS).bit_length()),
            phase=Signal(data.ArrayLayout(Phase, self.slots)),
            freeing=Signal(), freed_slot=Signal(slot_bits),        # the output unit frees a slot (a comb. signal)
            row_max=Signal(data.ArrayLayout(signed(w), self.slots)),
            scores=Memory(shape=score_layout(w, lanes), depth=depth, init=[]),
            exps=Memory(shape=data.ArrayLayout(unsigned(EXP_BITS), lanes), depth=depth, init=[]))
        s.row_sum = Signal(data.ArrayLayout(s.sum_shape, self.slots))
        s.row_rcp = Signal(data.ArrayLayout(unsigned(RECIP_QUOTIENT_BITS), self.slots))
        m.submodules.scores, m.submodules.exps = s.scores, s.exps
        self._ingest(m, s)
        self._exp(m, s)
        self._divide(m, s)
        self._output(m, s)
        return m

    def _meta(self, s):
        """What travels with a beat through a pipeline: valid, first/last beat of the row, its slot and index."""
        return data.StructLayout({"valid": 1, "first": 1, "last": 1, "slot": s.slot_bits, "idx": s.idx_bits})

    def _ingest(self, m, s):
        """Store the beats; the row max over masked-in keys (a lane tree per beat, then across beats)."""
        n, w = self.beats, self.score_bits
        in_slot = Signal(s.slot_bits)
        in_idx = Signal(s.idx_bits)
        beat = self.i.payload
        take, last = Signal(), Signal()
        score_w = s.scores.write_port()
        # ``i.ready`` is a register, a cycle ahead: the slot that takes the next beat (the next slot when this beat
        # ends a row) is free or freed in this cycle; only ingest takes a free slot. (The producer's word enables,
        # across the die, see a register, not the phase multiplexer.)
        m.d.comb += [take.eq(self.i.valid & self.i.ready), last.eq(in_idx == n - 1),
                     score_w.addr.eq(Cat(in_idx, in_slot)), score_w.data.eq(beat), score_w.en.eq(take)]

        def free(slot):
            return (s.phase[slot] == Phase.FREE) | (s.freeing & (s.freed_slot == slot))
        m.d.sync += self.i.ready.eq(Mux(take & last, free((in_slot + 1)[:s.slot_bits]), free(in_slot)))
        with m.If(take):
            with m.If(last):
                m.d.sync += [in_idx.eq(0), in_slot.eq(in_slot + 1), s.phase[in_slot].eq(Phase.MAX)]
            with m.Else():
                m.d.sync += in_idx.eq(in_idx + 1)
        # the beat's masked-in maximum: the beat registered (no comparison behind the producer's output
        # mux), then one register per tree level (none for one lane). A masked-out key counts as ``floor``, one below
        # any score (a row of them all has the maximum ``floor``, unused: its every e is 0), so that a step of the
        # running max below is a comparator and a 2:1 multiplexer (a flag for "any key yet" beside each value made it
        # an L6MUX tree: 7.07 ns at e49c98d's seed 3 on an ECP5-85F)
        ext = signed(w + 1)
        floor = -(1 << (w - 1)) - 1
        leaves = [Signal(ext, name=f"max_leaf{k}", reset_less=True) for k in range(self.lanes)]
        for k, leaf in enumerate(leaves):
            m.d.sync += leaf.eq(Mux(beat.mask[k], beat.score[k], floor))

        def larger(a, b):
            return Mux(b > a, b, a)

        beat_max, levels = _tree(m, leaves, ext, larger, "max_tree")
        meta = Signal(self._meta(s), name="max_meta")
        m.d.comb += [meta.valid.eq(take), meta.first.eq(in_idx == 0), meta.last.eq(in_idx == n - 1),
                     meta.slot.eq(in_slot)]
        end = delayed(m, meta, levels + INGEST_PIPE, "max_meta")
        # across the row's beats
        run = Signal(ext, reset_less=True)
        with m.If(end.valid):
            m.d.sync += run.eq(Mux(end.first | (beat_max > run), beat_max, run))
            with m.If(end.last):
                m.d.sync += s.phase[end.slot].eq(Phase.EXP)
        # the row's max goes into its slot a cycle after the last step, from ``run``: the comparison drives ``run``
        # alone, not every slot's row max as well (a 23-bit compare and the row max's write, 5 ns of wire, were 7.04 ns
        # at e3a54ec's seed 1 on an ECP5-85F). In that cycle the slot is already EXP: the exp unit takes ``run``
        # (``s.max_of``), which holds the row's max for that one cycle (the next row's first step lands at its end)
        row_done = delayed(m, end.valid & end.last, 1, "max_row_done")
        row_slot = delayed(m, end.slot, 1, "max_row_slot")
        with m.If(row_done):
            m.d.sync += s.row_max[row_slot].eq(run[:w])
        s.max_of = lambda slot: Mux(row_done & (row_slot == slot), run[:w], s.row_max[slot])

    def _exp(self, m, s):
        """Exponents of a word of scores a cycle (a fixed pipeline, no stalls), stored; the row sum."""
        n, w = self.beats, self.score_bits
        ex_slot = Signal(s.slot_bits)
        ex_idx = Signal(s.idx_bits)
        issue = Signal()
        score_r = s.scores.read_port()
        m.d.comb += [issue.eq(s.phase[ex_slot] == Phase.EXP), score_r.addr.eq(Cat(ex_idx, ex_slot))]
        with m.If(issue):
            with m.If(ex_idx == n - 1):
                m.d.sync += [ex_idx.eq(0), ex_slot.eq(ex_slot + 1), s.phase[ex_slot].eq(Phase.SUM)]
            with m.Else():
                m.d.sync += ex_idx.eq(ex_idx + 1)
        meta = Signal(self._meta(s), name="ex_meta")
        row_max = Signal(signed(w))
        m.d.sync += [meta.valid.eq(issue), meta.first.eq(ex_idx == 0), meta.last.eq(ex_idx == n - 1),
                     meta.slot.eq(ex_slot), meta.idx.eq(ex_idx), row_max.eq(s.max_of(ex_slot))]
        # stage 1 (score word from memory) .. EXP_PIPE (exponents), per lane
        word = score_r.data
        e = Signal(data.ArrayLayout(unsigned(EXP_BITS), self.lanes), reset_less=True)   # ``end`` says which hold one
        for k in range(self.lanes):
            # the layer's multiplier and shift (held stable for rows in flight), registered next to their users: a
            # copy per lane, without reset (a reset would be the block's flush at their reset pins)
            mult, shift = kept_copy(m, self.mult, f"ex_mult{k}"), kept_copy(m, self.shift, f"ex_shift{k}")
            # the lane's datapath registers have no reset (``meta``, which has, says which hold a word)
            # stage 2: the distance below the row max; when the product is two multipliers' partial products, each part
            # is a register of its own from a subtractor of its own (the high part's from a copy of the row max), so
            # that each can sit by its multiplier (one register for both was 5.4 ns of wire from the low part's
            # MULT18X18D: e49c98d's seed 2, 7.91 ns)
            keep = [Signal(name=f"masked_in{k}_{j}", reset_less=True) for j in range(EXP_PIPE - 2)]
            m.d.sync += keep[0].eq(word.mask[k])

            def below(top, lo, hi, name):        # bits lo..hi - 1 of top - s (0 where masked out), registered
                r = Signal(hi - lo, name=f"{name}{k}", reset_less=True)
                m.d.sync += r.eq(Mux(word.mask[k], top - word.score[k], 0)[lo:hi])
                return r
            # stage 3: each part again, a register of the register (the multiplier's operand register: the proxy flow
            # moves it into the MULT18X18D, Vivado into the DSP48E1), so that the wire from the subtractor to the
            # multiplier is a path of its own (dist_hi0 -> the high part's MULT18X18D, 5.05 ns of wire, was 18f3507's
            # critical path on the ECP5-85F, seed 1, 7.54 ns)
            if split_parts(w, False) == 1:
                dist = kept_copy(m, below(row_max, 0, w, "dist"), f"dist_in{k}")
            else:
                row_max_high = kept_copy(m, s.max_of(ex_slot), f"ex_row_max_high{k}", signed(w))
                dist = Cat(kept_copy(m, below(row_max, 0, SPLIT_BITS, "dist_lo"), f"dist_lo_in{k}"),
                           kept_copy(m, below(row_max_high, SPLIT_BITS, w, "dist_hi"), f"dist_hi_in{k}"))
            # stages 4 and 5: the product, its partial products registered at their multipliers, each multiplier with
            # a copy of the multiplier of its own (ex_mult0 -> the high part's MULT18X18D was bert_tiny_auto's critical
            # path on an ECP5-85F at 9fb44e8, seed 4, 7.93 ns)
            mult_high = kept_copy(m, self.mult, f"ex_mult_high{k}")
            prod = split_product(m, dist, mult, f"prod{k}", b_high=mult_high)
            m.d.sync += [keep[1].eq(keep[0]), keep[2].eq(keep[1]), keep[3].eq(keep[2])]
            u = Signal(unsigned(w + nx.MULT_BITS), name=f"u{k}", reset_less=True)     # stage 6: the scaled distance
            m.d.sync += [u.eq(prod >> shift), keep[4].eq(keep[3])]
            # stage 7: table index, shift q (a shift of 16 or more leaves 0: ``over``; a flag, not a constant
            # loaded into q, so that the test is no reset input of q's flip-flops)
            q = Signal(4, name=f"q{k}", reset_less=True)
            over = Signal(name=f"over{k}", reset_less=True)
            table = Memory(shape=unsigned(EXP_BITS), depth=nx.EXP_TABLE_SIZE,
                           init=[int(v) for v in nx.exp2_table()])
            m.submodules[f"exp2_{k}"] = table
            table_r = table.read_port()
            m.d.comb += table_r.addr.eq(u[:nx.EXP_FRAC_BITS])
            m.d.sync += [q.eq(u[nx.EXP_FRAC_BITS:nx.EXP_FRAC_BITS + 4]), over.eq(u[nx.EXP_FRAC_BITS + 4:].any()),
                         keep[5].eq(keep[4])]
            # stage 8: e registered, so that the block RAM's output, the shift by q and the row sum's carry chain
            # are not one path (bert_tiny's critical one on an ECP5-85F, 8.06 ns)
            m.d.sync += e[k].eq(Mux(keep[5] & ~over, table_r.data >> q, 0))
        end = delayed(m, meta, EXP_PIPE - 1, "ex_meta")
        exp_w = s.exps.write_port()
        m.d.comb += [exp_w.addr.eq(Cat(end.idx, end.slot)), exp_w.data.eq(e), exp_w.en.eq(end.valid)]
        # the row sum: a lane tree per word, then across the row's words
        beat_sum, levels = _tree(m, [e[k] for k in range(self.lanes)], s.sum_shape, lambda a, b: a + b, "sum_tree")
        tail = delayed(m, end, levels, "sum_meta")
        acc = Signal(s.sum_shape)
        total = Signal(s.sum_shape)
        m.d.comb += total.eq(Mux(tail.first, 0, acc) + beat_sum)
        with m.If(tail.valid):
            m.d.sync += acc.eq(total)
            with m.If(tail.last):
                m.d.sync += [s.row_sum[tail.slot].eq(total), s.phase[tail.slot].eq(Phase.DIV)]

    def _divide(self, m, s):
        """Reciprocals of the row sums, rows dealt to the dividers in turn."""
        dv_slot = Signal(s.slot_bits)
        turn = Signal(range(max(self.dividers, 2)))
        go = Signal()
        busy = Signal(self.dividers)
        m.d.comb += go.eq((s.phase[dv_slot] == Phase.DIV) & ~busy.bit_select(turn, 1))
        with m.If(go):
            m.d.sync += [dv_slot.eq(dv_slot + 1), s.phase[dv_slot].eq(Phase.RCP),
                         turn.eq(Mux(turn == self.dividers - 1, 0, turn + 1))]
        for k in range(self.dividers):
            div = SerialDivider(nx.SOFTMAX_RECIP_BITS + 1, s.sum_shape.width, RECIP_QUOTIENT_BITS)
            m.submodules[f"divider{k}"] = div
            slot = Signal(s.slot_bits, name=f"divider{k}_slot")
            start = go & (turn == k)
            # a fully masked row (sum 0) gets some quotient, but all its exponents are 0: p = 0 regardless
            m.d.comb += [div.dividend.eq(1 << nx.SOFTMAX_RECIP_BITS), div.divisor.eq(s.row_sum[dv_slot]),
                         div.start.eq(start), busy[k].eq(div.busy)]
            with m.If(start):
                m.d.sync += slot.eq(dv_slot)
            with m.If(div.done):
                m.d.sync += [s.row_rcp[slot].eq(div.quotient), s.phase[slot].eq(Phase.OUT)]

    def _output(self, m, s):
        """Probabilities out, a word a cycle (a pipeline that stalls on output backpressure)."""
        n = self.beats
        out_slot = Signal(s.slot_bits)
        out_idx = Signal(s.idx_bits)
        advance = Signal()
        take = Signal()
        exp_r = s.exps.read_port()
        m.d.comb += [advance.eq(self.o.ready | ~self.o.valid), take.eq(advance & (s.phase[out_slot] == Phase.OUT)),
                     exp_r.addr.eq(Cat(out_idx, out_slot)), exp_r.en.eq(advance)]
        with m.If(take):
            with m.If(out_idx == n - 1):
                m.d.sync += [out_idx.eq(0), out_slot.eq(out_slot + 1), s.phase[out_slot].eq(Phase.DRAIN)]
            with m.Else():
                m.d.sync += out_idx.eq(out_idx + 1)
        stage = data.StructLayout({"valid": 1, "last": 1, "slot": s.slot_bits})
        o = [None] + [Signal(stage, name=f"out_meta{k}") for k in range(1, OUT_PIPE + 1)]   # o[-1]: the beat's
        rcp1 = Signal(unsigned(RECIP_QUOTIENT_BITS), name="out_rcp1")
        top = (1 << nx.PROB_BITS) - 1
        with m.If(advance):
            # the row's reciprocal a stage behind the read (the slot's stays until its last beat has left)
            m.d.sync += [o[1].valid.eq(take), o[1].last.eq(out_idx == n - 1), o[1].slot.eq(out_slot),
                         rcp1.eq(s.row_rcp[o[1].slot])]
            m.d.sync += [o[k].eq(o[k - 1]) for k in range(2, OUT_PIPE + 1)]
            for k in range(self.lanes):
                # the block RAM's word registered beside it, again beside the multiplier, then the product
                # registered at its multiplier: the block RAM's output, its wire and the multiplier were one path
                # of 8 ns on an ECP5-85F; with one register between, the block RAM -> a LUT -> the wire across
                # the die to the multiplier's operand was 7.30 ns (624f44f's seed 3; the multipliers fill 93 % of
                # the sites, so the nearest free one can be far from the block RAM)
                near = kept_copy(m, exp_r.data[k], f"out_exp_near{k}")
                word = kept_copy(m, near, f"out_exp{k}")
                # and the reciprocal copied beside each multiplier (one register for every lane's was 4.9 ns of
                # wire from one of them: c1c1896's seed 2, 7.41 ns)
                rcp2 = kept_copy(m, rcp1, f"out_rcp2_{k}")
                scaled = Signal(unsigned(EXP_BITS + RECIP_QUOTIENT_BITS), name=f"scaled{k}", reset_less=True)
                m.d.sync += scaled.eq(word * rcp2)
                shifted = scaled >> (nx.SOFTMAX_RECIP_BITS - nx.PROB_BITS)
                m.d.sync += self.o.payload[k].eq(Mux(shifted > top, top, shifted))
        m.d.comb += self.o.valid.eq(o[-1].valid)
        # the slot is free once its last probability has left
        m.d.comb += [s.freeing.eq(self.o.valid & self.o.ready & o[-1].last), s.freed_slot.eq(o[-1].slot)]
        with m.If(s.freeing):
            m.d.sync += s.phase[s.freed_slot].eq(Phase.FREE)
