"""The residual add of a pre-LN layer: a matrix's int16 result added into the residual stream in place.

A pre-LN (GPT-2) layer keeps its residual stream in X and adds O's output (``x + Attn``) and FFN down's
(``res1 + FFN``) into it, each sum saturated to int16 (:func:`mlo_hw.model.golden.int_layer`). The result writer
offers those beats as row writes of ``simd`` int16 lanes (``pe`` of them enabled); :class:`ResidualAdd` turns each
into a read-modify-write of X.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...model import numerics as nx
from ..pipeline import delayed
from .result_writer import rows_write_layout

__all__ = ["ResidualAdd"]


class ResidualAdd(wiring.Component):
    """``X[addr] = saturate16(X[addr] + data)`` on the enabled lanes of every write offered on ``i``.

    Interface:
        ``i``: a row write (:func:`~mlo_hw.hw.engine.result_writer.rows_write_layout`; a write when any ``en`` bit is set), every cycle if need be.
        ``rd_addr``/``rd_en`` -> ``rd_data`` ``read_latency`` cycles later: X's read port (non-transparent).
        ``o``: X's write port, the enabled lanes' sums.

    Timing: a write offered in cycle t reads X in t and writes the sum in t + ``read_latency``, so a write may
    follow every cycle. Two writes in a row to the same word are safe when their lanes differ (the result writer's beats of
    one row fill a word ``pe`` lanes at a time): each writes only its own lanes, and the read of the second sees
    the first's lanes stale but never writes them. X's ports must be the adder's alone while it runs.
    """

    def __init__(self, words: int, simd: int, read_latency: int = 1):
        self.words, self.simd, self.read_latency = words, simd, read_latency
        layout = rows_write_layout(words, simd)
        super().__init__({
            "i": In(layout),
            "rd_addr": Out(range(max(words, 2))), "rd_en": Out(1), "rd_data": In(nx.RES_BITS * simd),
            "o": Out(layout),
        })

    def elaborate(self, platform):
        m = Module()
        rb, lo, hi = nx.RES_BITS, -(1 << (nx.RES_BITS - 1)), (1 << (nx.RES_BITS - 1)) - 1
        m.d.comb += [self.rd_addr.eq(self.i.addr), self.rd_en.eq(self.i.en.any())]
        held = delayed(m, self.i, self.read_latency, "held")     # the write whose old word is on rd_data
        sums = []
        for lane in range(self.simd):
            s = Signal(signed(rb + 1), name=f"sum{lane}")
            m.d.comb += s.eq(self.rd_data.word_select(lane, rb).as_signed() + held.data.word_select(lane, rb).as_signed())
            sat = Signal(signed(rb), name=f"sat{lane}")
            with m.If(s > hi):
                m.d.comb += sat.eq(hi)
            with m.Elif(s < lo):
                m.d.comb += sat.eq(lo)
            with m.Else():
                m.d.comb += sat.eq(s)
            sums.append(sat)
        m.d.comb += [self.o.addr.eq(held.addr), self.o.data.eq(Cat(*sums)), self.o.en.eq(held.en)]
        return m
