"""The attention products' "weights": K_h and V_h^T read side by side from WORK's banks.

For SCORES (Q_h K_h^T) and PV (P V_h) the MVAU's weight words are not a tile from DRAM but rows of K (by token)
and V^T (by channel) that the result writer left in WORK's ``pe`` banks: one word of every bank at the same
bank-local address is one MVAU weight word. The MVAU walks its weight words in (nf, sf) order; this component
follows it and gives the bank-local address of each, rows ``stride`` words apart (a row of K holds every
head's columns, so SCORES reads ``dh / simd`` of its ``hidden / simd`` words).
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["attention_layout", "AttentionWeights"]


def attention_layout(max_addr: int, max_cols: int, max_rows: int) -> data.StructLayout:
    return data.StructLayout({"base": range(max_addr + 1), "cols": range(max_cols + 1),
                              "rows": range(max_rows + 1), "stride": range(max_addr + 1)})


class AttentionWeights(wiring.Component):
    """The bank-local address of the MVAU's next attention weight word.

    Interface:
        start (pulse) with ``cfg`` (:func:`attention_layout`): ``base`` (the head's first row), ``cols`` (words
        a row: the MVAU's column folds), ``rows`` (its row folds), ``stride`` (words from one row to the next).
        ``en``: the MVAU read a weight word (``weights.en``); ``addr``: the bank-local word of that read, the
        data arriving a cycle later as for any block RAM read. After ``rows x cols`` reads the walk restarts
        (the next vector).
    """

    def __init__(self, max_addr: int, max_cols: int, max_rows: int):
        self.max_addr, self.max_cols, self.max_rows = max_addr, max_cols, max_rows
        super().__init__({"start": In(1), "cfg": In(attention_layout(max_addr, max_cols, max_rows)),
                          "en": In(1), "addr": Out(range(max_addr + 1))})

    def elaborate(self, platform):
        m = Module()
        cfg = Signal.like(self.cfg)
        sf = Signal(range(self.max_cols + 1))
        nf = Signal(range(self.max_rows + 1))
        row = Signal(range(self.max_addr + 1))      # base + nf * stride: the first word of the row being read
        # ``addr`` is a register (base + row + sf, kept by stepping): it drives WORK's block RAMs directly
        with m.If(self.en):
            m.d.sync += [sf.eq(sf + 1), self.addr.eq(self.addr + 1)]
            with m.If(sf == cfg.cols - 1):
                m.d.sync += [sf.eq(0), nf.eq(nf + 1), row.eq(row + cfg.stride), self.addr.eq(row + cfg.stride)]
                with m.If(nf == cfg.rows - 1):
                    m.d.sync += [nf.eq(0), row.eq(cfg.base), self.addr.eq(cfg.base)]
        with m.If(self.start):
            m.d.sync += [cfg.eq(self.cfg), sf.eq(0), nf.eq(0), row.eq(self.cfg.base), self.addr.eq(self.cfg.base)]
        return m
