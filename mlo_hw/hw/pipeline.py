"""Small helpers shared by the blocks: a delay line, deliberate register copies, a signed range test."""

from __future__ import annotations

from amaranth import C, Signal

__all__ = ["KEEP", "KEEP_REGISTERS", "kept_copy", "delayed", "fits_signed"]

# The attribute of a register that is a deliberate copy (one per block of a signal that fans out across the die):
# yosys' opt_merge merges flip-flops with equal inputs, and a keep attribute on the wire does not stop it, so the
# synthesis flows (mlo_hw.synth, mlo_hw.ecp5) run KEEP_REGISTERS after reading the design: the flip-flops that
# drive a wire marked so are marked keep themselves, which opt_merge respects between two marked flip-flops (it still
# folds an unmarked one into a marked one with the same input: mark every copy, the original too).
KEEP = "keep"
KEEP_REGISTERS = f"proc; setattr -set keep 1 a:{KEEP} %ci1:+$dff[Q] t:$dff %i"


def kept_copy(m, value, name: str, shape=None):
    """A register of ``value`` (of ``shape``, else ``value``'s; no reset, as data) marked :data:`KEEP`: a copy
    of its own for one user of a value that fans out across the die (a multiplier's operand, a lane's parameter)."""
    r = Signal(value.shape() if shape is None else shape, name=name, reset_less=True, attrs={KEEP: 1})
    m.d.sync += r.eq(value)
    return r


def delayed(m, value, cycles: int, name: str):
    """``value`` delayed by ``cycles`` registers (``value`` itself for 0), named ``name0``, ``name1``, ..."""
    out = value
    for k in range(cycles):
        nxt = Signal.like(value, name=f"{name}{k}")
        m.d.sync += nxt.eq(out)
        out = nxt
    return out


def fits_signed(value, bits: int):
    """``value`` (signed) fits ``bits`` signed bits: the bits from ``bits - 1`` up are all zeros or all ones. A LUT
    tree over the high bits, where two comparisons with the range's ends would be carry chains (saturation)."""
    if bits >= len(value):
        return C(1)
    above = value[bits - 1:]
    return above.all() | ~above.any()
