"""Small pipeline helpers shared by the blocks."""

from __future__ import annotations

from amaranth import Signal

__all__ = ["delayed"]


def delayed(m, value, cycles: int, name: str):
    """``value`` delayed by ``cycles`` registers (``value`` itself for 0), named ``name0``, ``name1``, ..."""
    out = value
    for k in range(cycles):
        nxt = Signal.like(value, name=f"{name}{k}")
        m.d.sync += nxt.eq(out)
        out = nxt
    return out
