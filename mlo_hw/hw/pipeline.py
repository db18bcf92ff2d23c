"""Small pipeline helpers shared by the blocks."""

from __future__ import annotations

from amaranth import Shape, Signal

__all__ = ["delayed", "replicas"]


def delayed(m, value, cycles: int, name: str):
    """``value`` delayed by ``cycles`` registers (``value`` itself for 0), named ``name0``, ``name1``, ..."""
    out = value
    for k in range(cycles):
        nxt = Signal.like(value, name=f"{name}{k}")
        m.d.sync += nxt.eq(out)
        out = nxt
    return out


def replicas(m, value, copies: int, name: str, shape=None) -> list[Signal]:
    """``copies`` registers that all load ``value`` every cycle (no reset), named ``name_r0``, ``name_r1``, ...

    One copy for each group of consumers far apart on the die (the multipliers that share an operand), so that
    placement can put each copy next to its consumers and the wire across the die is a register-to-register
    hop of its own. Synthesis merges flip-flops that load the same value (yosys' ``opt_merge``), but not ones
    with different power-up values, so copy ``k`` powers up as ``k``: for data whose power-up value is never
    used. ``shape`` defaults to ``value``'s.
    """
    shape = value.shape() if shape is None else shape
    if copies > 1 << (Shape.cast(shape).width - Shape.cast(shape).signed):
        raise ValueError(f"replicas: {copies} copies need distinct power-up values, more than {shape} holds")
    regs = []
    for k in range(copies):
        r = Signal(shape, name=f"{name}_r{k}", reset_less=True, init=k)
        m.d.sync += r.eq(value)
        regs.append(r)
    return regs
