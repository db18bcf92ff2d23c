"""Small helpers shared by the blocks: a delay line, deliberate register copies, a signed range test, a sum and a
counter in two halves, the credit of a queue behind a pipeline, a registered stage with a skid register."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["KEEP", "KEEP_REGISTERS", "kept_copy", "delayed", "fits_signed", "split_sum", "SplitCounter", "queue_credit",
           "skid_stage"]

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


def queue_credit(m, depth: int, commit, release, name: str):
    """The credit of a queue of ``depth`` entries behind a pipeline that never stalls: ``used`` (a register) counts
    the entries committed (``commit``: a beat enters the pipeline, so an entry is kept for it) and not yet released
    (``release``: a beat leaves the queue); ``room`` (a register, 1 after reset) is ``used < depth`` in the next
    cycle, so a producer that commits only with ``room`` never overfills the queue. ``used +- 1`` and the comparisons
    come from the register alone, chosen last by ``commit`` and ``release`` (which then feed no carry chain: into
    the MVAU's count it was 6.79 ns at 52ab33d's seed 2, into LayerNorm's 7.80 at c1c1896's seed 1, on the ECP5-85F).
    Returns ``(room, used)``, named ``<name>_room`` and ``<name>_used``."""
    used = Signal(range(depth + 1), name=f"{name}_used")
    room = Signal(name=f"{name}_room", init=1)
    # used + commit - release < depth, from used <= depth
    below, below_by_2 = used < depth, used < depth - 1
    m.d.sync += [used.eq(Mux(commit & ~release, used + 1, Mux(release & ~commit, used - 1, used))),
                 room.eq(Mux(commit, Mux(release, below, below_by_2), release | below))]
    return room, used


def skid_stage(m, offered, offered_valid, ready, name: str) -> SimpleNamespace:
    """A registered stage with a skid register, so that neither side's handshake reaches the other side's registers
    in the same cycle. The producer's beat is ``offered`` (a value of the beat's shape) with ``offered_valid``; the
    stage takes it (``take``) whenever the skid is empty, so the producer's ready is ``~skid_full``, a register. The
    output register (``valid``, ``payload``) loads on its own handshake alone (``~valid | ready``, ``ready`` the
    consumer's): the skid's beat if it holds one, else the offered one. A beat taken while the output is held waits
    in the skid, which follows the offered beat whenever it is empty (its enable is its own fill flag). One beat a
    cycle, each leaving the cycle after it is taken. Returns ``SimpleNamespace(valid, payload, skid_full, take)``,
    the registers named ``<name>_valid``, ``<name>_out``, ``<name>_skid_full`` and ``<name>_skid``."""
    skid, payload = Signal.like(offered, name=f"{name}_skid"), Signal.like(offered, name=f"{name}_out")
    valid, skid_full, take = Signal(name=f"{name}_valid"), Signal(name=f"{name}_skid_full"), Signal()
    m.d.comb += take.eq(offered_valid & ~skid_full)
    with m.If(~skid_full):
        m.d.sync += skid.eq(offered)
    with m.If(~valid | ready):
        m.d.sync += [valid.eq(skid_full | take), payload.eq(Mux(skid_full, skid, offered)), skid_full.eq(0)]
    with m.Elif(take):
        m.d.sync += skid_full.eq(1)
    return SimpleNamespace(valid=valid, payload=payload, skid_full=skid_full, take=take)


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


def split_sum(m, a, b, name: str, width: int):
    """A register of ``a + b`` (unsigned, modulo ``2**width``) two cycles after its terms: the halves' sums
    side by side (the high half both with and without the low half's carry), then the carry chooses. For a sum
    whose terms change well before it is used (an address stepped a block's work earlier): the deepest path is a
    half's carry chain, not the whole width's. Call it outside any ``If`` (its registers follow the terms in every
    cycle)."""
    half = width // 2
    a_w, b_w = Signal(width, name=f"{name}_a"), Signal(width, name=f"{name}_b")
    m.d.comb += [a_w.eq(a), b_w.eq(b)]
    low = Signal(half + 1, name=f"{name}_low")
    high, high_carried = (Signal(width - half, name=f"{name}_{n}") for n in ("high", "high_carried"))
    # the high half plus one as one carry chain: (2a + 1) + (2b + 1) = 2 (a + b + 1), not a second adder behind the
    # first (the two chains were bert_tiny_auto's routed critical path at d126af5, seed 2, 7.75 ns)
    m.d.sync += [low.eq(a_w[:half] + b_w[:half]), high.eq(a_w[half:] + b_w[half:]),
                 high_carried.eq((Cat(C(1, 1), a_w[half:]) + Cat(C(1, 1), b_w[half:]))[1:])]
    out = Signal(width, name=name)
    m.d.sync += out.eq(Cat(low[:half], Mux(low[half], high_carried, high)))
    return out


class SplitCounter(wiring.Component):
    """A ``width``-bit counter (``width`` >= 2) whose increment is two carry chains of half the width side by side.

    Interface: ``inc`` (count one this cycle), ``clear`` (to 0 this cycle; over ``inc``), ``count`` (a register,
    whole in every cycle: the halves never disagree).

    Timing: the low half counts; the high half adds one in the cycle the low half wraps, on a register
    ``low_full`` ("the low half is all ones") kept a cycle ahead from the low half and ``inc``. The deepest path is
    a half's increment, not the whole width's (a 32-bit counter: 16-bit chains, where the 7-series carry chain
    of 32 bits alone is 8 cells deep).
    """

    def __init__(self, width: int):
        if width < 2:
            raise ValueError(f"SplitCounter: width must be at least 2, got {width}")
        self.width = width
        super().__init__({"inc": In(1), "clear": In(1), "count": Out(width)})

    def elaborate(self, platform):
        m = Module()
        half = self.width // 2
        low, high = self.count[:half], self.count[half:]
        low_full = Signal()
        with m.If(self.inc):
            m.d.sync += [low.eq(low + 1), low_full.eq(low == (1 << half) - 2)]
            with m.If(low_full):
                m.d.sync += high.eq(high + 1)
        with m.If(self.clear):
            m.d.sync += [self.count.eq(0), low_full.eq(0)]
        return m
