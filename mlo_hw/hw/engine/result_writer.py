"""The result writer: where each beat of the MVAU's results goes, in the layout its consumer reads.

A beat is ``pe`` results: output channels ``nf * pe ..`` of one token (or, for the attention products, of one
query). Matrices write them row-major (the residual stream's int16 words of X or Y, or bytes of WORK); K goes
into WORK's ``pe`` banks by token and V transposed by channel, so that one word of every bank side by side is
one MVAU weight word of the attention products (:mod:`mlo_hw.hw.layer_engine`'s buffer map).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ...model import numerics as nx
from ..pipeline import delayed

__all__ = ["Placement", "result_layout", "start_layout", "rows_write_layout", "bank_write_layout", "ResultWriter"]


class Placement(enum.Enum, shape=2):
    ROWS16 = 0      # row-major int16 words (Q, O -> Y; FFN down -> X): the ``rows`` port
    ROWS8 = 1       # row-major bytes in WORK from ``base`` (PV -> CTX, FFN up -> F): word a in bank a % pe
    K = 2           # token s in bank s % pe, word (s // pe) * words(H) + channel word
    VT = 3          # channel c in bank c % pe, row (c // pe) * words(S) + token word, one byte a token


def result_layout(pe: int) -> data.StructLayout:
    """A result beat: ``pe`` channels as bytes (int8 / uint8 codes) and as int16 (the residual stream)."""
    return data.StructLayout({"bytes": 8 * pe, "wide": nx.RES_BITS * pe})


def start_layout(max_words: int, max_beats: int) -> data.StructLayout:
    return data.StructLayout({
        "placement": Placement, "beats": range(max_beats + 1), "row_step": range(max_words + 1),
        "chan_word": range(max_words + 1), "base": range(max_words + 1), "tiles": 1})


def rows_write_layout(words: int, simd: int) -> data.StructLayout:
    """A write of one word of ``simd`` int16 lanes: ``addr``, ``data`` (lane i in bits 16 i ..), per-lane ``en``."""
    return data.StructLayout({"addr": range(max(words, 2)), "data": nx.RES_BITS * simd, "en": simd})


def bank_write_layout(bank_words: int, simd: int) -> data.StructLayout:
    return data.StructLayout({"addr": range(max(bank_words, 2)), "data": 8 * simd, "en": simd})


class ResultWriter(wiring.Component):
    """Places result beats into the buffers, one beat a cycle, never stalling.

    Interface:
        start (pulse) with ``cfg`` (:func:`start_layout`): ``placement``; ``beats`` per vector (output
        channels / pe: a tile's, or a head's); ``row_step``: words from one vector's row to the next;
        ``chan_word``: the first channel's word in a row (a head's columns for PV); ``base``: WORK's word
        offset for ROWS8; ``tiles``: a weight matrix, whose writer moves to the next tile's channels by
        itself after ``vectors * tile_rows / pe`` beats (jobs overlap). ``start`` and ``cfg`` are registered on
        the way in: every counter but ``count`` restarts in the cycle after ``start`` (from a register, not from
        the decode that starts the writer), and no beat may arrive in that cycle (the MVAU's first result of a
        job comes many cycles after its command); ``count`` too, so it reads 0 from the second cycle after
        ``start`` and still holds the job before's count in the first (its reader masks that cycle).
        ``i``: the result beats (``ready`` is always 1).
        ``rows``: a write of ``simd`` int16 lanes (``addr``, ``data``, per-lane ``en``) for ROWS16;
        ``rows_writing``: ``rows.en`` has a bit set (a register of its own, for the writers that yield to it);
        ``banks``: one byte-lane write per WORK bank for ROWS8, K and VT (bank-local ``addr``).
        ``count``: beats written since ``start`` (it moves with each beat's writes); ``count_next``: its value in
        the next cycle (its register's input, for a reader that registers its comparison).

    Timing: a beat's writes leave from registers in the cycle after it arrives (the placement's multiplexers
    and the buffers' write registers are a clock apart: the buffers are spread over the die), and ``count``
    moves at the end of that cycle, with the buffers' write registers.
    """

    def __init__(self, *, pe: int, simd: int, seq: int, hidden: int, intermediate: int, tile_rows: int,
                 k_local: int, v_local: int, bank_words: int):
        self.pe, self.simd, self.seq, self.hidden, self.tile_rows = pe, simd, seq, hidden, tile_rows
        self.k_local, self.v_local, self.bank_words = k_local, v_local, bank_words
        w = lambda cols: cols // simd      # noqa: E731
        self.max_words = w(seq * max(hidden, intermediate, seq)) + bank_words * pe
        self.max_beats = max(seq, hidden, tile_rows) // pe
        super().__init__({
            "start": In(1), "cfg": In(start_layout(self.max_words, self.max_beats)),
            "i": In(stream.Signature(result_layout(pe))),
            "rows": Out(rows_write_layout(self.max_words, simd)), "rows_writing": Out(1),
            "banks": Out(data.ArrayLayout(bank_write_layout(bank_words, simd), pe)),
            "count": Out(range(seq * max(seq, intermediate, hidden) // pe + 1)),
            "count_next": Out(range(seq * max(seq, intermediate, hidden) // pe + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        pe, simd, S, H, tr = self.pe, self.simd, self.seq, self.hidden, self.tile_rows
        nfg = tr // pe
        words = lambda cols: cols // simd      # noqa: E731
        cfg = Signal.like(self.cfg)
        started, given = delayed(m, self.start, 1, "started"), delayed(m, self.cfg, 1, "given")
        count = self.count
        nf = Signal(range(self.max_beats + 1))                 # channel group within the vector
        cw = Signal(range(self.max_words + 1))                 # channel word within the row
        cl = Signal(range(simd))                               # first lane of the group within the word
        row = Signal(range(self.max_words + 1))                # vector s * row_step
        chan_word = Signal.like(row)                           # the tile's (or head's) first channel word
        tile = Signal(range(S * nfg + 1))                      # beats of the current tile
        k_bank, k_row = Signal(range(pe)), Signal(range(self.bank_words + 1))
        vt_base, vt_nf = Signal.like(k_row), Signal.like(k_row)  # V^T: the tile's first row, the group's row
        sw, sl = Signal(range(words(S) + 1)), Signal(range(simd))   # V^T: token word and lane
        lanes = (Const((1 << pe) - 1, simd) << cl)[:simd]
        # the beat's writes, registered onto rows/banks (the enables and count with reset, the rest without)
        rows, banks = Signal(self.rows.shape()), Signal(self.banks.shape())
        rows_q, banks_q = Signal(self.rows.shape(), reset_less=True), Signal(self.banks.shape(), reset_less=True)
        rows_en, banks_en = Signal(simd), Signal(simd * pe)
        wrote = Signal()
        m.d.sync += [rows_q.eq(rows), banks_q.eq(banks), rows_en.eq(rows.en), self.rows_writing.eq(rows.en.any()),
                     banks_en.eq(Cat(*(b.en for b in banks))), wrote.eq(self.i.valid)]
        m.d.comb += [self.rows.addr.eq(rows_q.addr), self.rows.data.eq(rows_q.data), self.rows.en.eq(rows_en)]
        for i, b in enumerate(self.banks):
            m.d.comb += [b.addr.eq(banks_q[i].addr), b.data.eq(banks_q[i].data), b.en.eq(banks_en[i * simd:(i + 1) * simd])]
        # restarted from the register: ``start`` itself, the sequencer's decode, into count's reset was 6.80 ns at
        # e5b69cb's seed 3 on an ECP5-85F (7.69 at 7204dd3's)
        m.d.comb += self.count_next.eq(Mux(started, 0, count + wrote))
        m.d.sync += count.eq(self.count_next)
        rep = self.i.payload.bytes.replicate(simd // pe)
        addr = row + chan_word + cw
        # ROWS8's ``cfg.base + row + chan_word``, kept in a register beside the counters (stepped with ``row`` and
        # ``chan_word``): three adders in a row before the bank decode and its enables were 8 ns on an ECP5-85F
        row_base = Signal(len(cfg.base + row + chan_word))
        m.d.comb += self.i.ready.eq(1)

        with m.If(self.i.valid):
            with m.Switch(cfg.placement):
                with m.Case(Placement.ROWS16):
                    m.d.comb += [rows.addr.eq(addr), rows.data.eq(self.i.payload.wide.replicate(simd // pe)),
                                 rows.en.eq(lanes)]
                with m.Case(Placement.ROWS8):
                    a = row_base + cw
                    bank, local = (a[:(pe - 1).bit_length()], a >> (pe - 1).bit_length()) if pe > 1 else (0, a)
                    for i, b in enumerate(banks):
                        m.d.comb += [b.addr.eq(local), b.data.eq(rep), b.en.eq(Mux(bank == i, lanes, 0))]
                with m.Case(Placement.K):
                    for i, b in enumerate(banks):
                        m.d.comb += [b.addr.eq(self.k_local + k_row + chan_word + cw), b.data.eq(rep),
                                     b.en.eq(Mux(k_bank == i, lanes, 0))]
                with m.Case(Placement.VT):
                    for i, b in enumerate(banks):
                        m.d.comb += [b.addr.eq(self.v_local + vt_base + vt_nf + sw),
                                     b.data.eq(self.i.payload.bytes[8 * i: 8 * i + 8].replicate(simd)),
                                     b.en.eq(1 << sl)]
            m.d.sync += [nf.eq(nf + 1), cl.eq(cl + pe), vt_nf.eq(vt_nf + words(S))]
            with m.If(cl == simd - pe):
                m.d.sync += [cl.eq(0), cw.eq(cw + 1)]
            with m.If(nf == cfg.beats - 1):                     # the vector's last group: next vector
                m.d.sync += [nf.eq(0), cw.eq(0), cl.eq(0), row.eq(row + cfg.row_step), vt_nf.eq(0),
                             k_bank.eq(k_bank + 1), sl.eq(sl + 1), row_base.eq(row_base + cfg.row_step)]
                with m.If(k_bank == pe - 1):
                    m.d.sync += [k_bank.eq(0), k_row.eq(k_row + words(H))]
                with m.If(sl == simd - 1):
                    m.d.sync += [sl.eq(0), sw.eq(sw + 1)]
            with m.If(cfg.tiles):                               # a matrix: on to the next tile's channels
                m.d.sync += tile.eq(tile + 1)
                with m.If(tile == S * nfg - 1):
                    m.d.sync += [tile.eq(0), row.eq(0), k_bank.eq(0), k_row.eq(0), sw.eq(0), sl.eq(0),
                                 chan_word.eq(chan_word + words(tr)), vt_base.eq(vt_base + nfg * words(S)),
                                 row_base.eq(cfg.base + chan_word + words(tr))]
        with m.If(started):
            m.d.sync += [cfg.eq(given), nf.eq(0), cw.eq(0), cl.eq(0), row.eq(0), tile.eq(0),
                         chan_word.eq(given.chan_word), k_bank.eq(0), k_row.eq(0), vt_base.eq(0), vt_nf.eq(0),
                         sw.eq(0), sl.eq(0), row_base.eq(given.base + given.chan_word)]
        return m
