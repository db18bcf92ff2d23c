"""Sequential (one result bit per cycle) integer division, square root and multiplication.

The row statistics of LayerNorm and softmax need one division (and one square root) per row, so
these units trade cycles for area: no DSP, one adder each. All three share one interface:

* ``start`` (in): pulse for one cycle with the operands valid; they are sampled on that cycle.
* ``busy`` (out): high from the cycle after ``start`` until the result is ready.
* ``done`` (out): high for exactly one cycle when the result is ready; the result output stays
  valid until the next ``start``. The results and the data registers have no reset (only ``busy`` and ``done``
  have), so a reset reaches few flip-flops. ``start`` while ``busy`` is not allowed.

Latency from ``start`` to ``done``: ``steps + 1`` cycles, where ``steps`` is the number of result
bits computed (``quotient_bits`` or ``root_bits``), and ``multiplier_bits + 1`` for the multiply-add (a
last step adds the carry between its two halves).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SerialDivider", "SerialSqrt", "SerialMultiplyAdd", "bit_length"]


def bit_length(value) -> Value:
    """The number of significant bits of an unsigned value (0 for 0), as a balanced mux tree."""
    value = Value.cast(value)
    n = len(value)
    if n == 1:
        return value
    half = 1 << ((n - 1).bit_length() - 1)      # the largest power of two below n
    high, low = value[half:], value[:half]
    return Mux(high.any(), bit_length(high) + half, bit_length(low))


class SerialDivider(wiring.Component):
    """``quotient = floor(dividend / divisor)`` by restoring division, one quotient bit per cycle.

    Unsigned operands. The caller guarantees ``divisor > 0`` and ``quotient < 2**quotient_bits``
    (equivalently ``dividend >> quotient_bits < divisor``); a zero divisor gives an unspecified
    quotient, so callers special-case it.
    """

    def __init__(self, dividend_bits: int, divisor_bits: int, quotient_bits: int):
        if min(dividend_bits, divisor_bits, quotient_bits) < 1:
            raise ValueError("SerialDivider: every width must be >= 1")
        self.quotient_bits = quotient_bits
        super().__init__({
            "start": In(1), "dividend": In(dividend_bits), "divisor": In(divisor_bits),
            "busy": Out(1), "done": Out(1), "quotient": Out(quotient_bits),
        })

    def elaborate(self, platform):
        m = Module()
        qb, db = self.quotient_bits, len(self.divisor)
        rem = Signal(db, reset_less=True)       # partial remainder, always < divisor (data: no reset)
        low = Signal(qb, reset_less=True)       # dividend bits still to bring down, MSB first
        divisor = Signal(db, reset_less=True)
        count = Signal(range(qb + 1), reset_less=True)      # steps left, loaded at start (``busy`` has the reset)
        quotient = Signal(qb, reset_less=True)
        trial = Signal(db + 1)
        m.d.comb += [trial.eq(Cat(low[-1], rem)), self.quotient.eq(quotient)]
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            m.d.sync += [rem.eq(self.dividend >> qb), low.eq(self.dividend[:qb]), divisor.eq(self.divisor),
                         count.eq(qb), self.busy.eq(1)]
        with m.Elif(self.busy):
            fits = trial >= divisor
            m.d.sync += [rem.eq(Mux(fits, trial - divisor, trial)), low.eq(low << 1),
                         quotient.eq(Cat(fits, quotient)), count.eq(count - 1)]
            with m.If(count == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m


class SerialSqrt(wiring.Component):
    """``root = floor(sqrt(radicand))`` by the digit-by-digit method, one root bit per cycle.

    ``root_bits = ceil(radicand_bits / 2)``.
    """

    def __init__(self, radicand_bits: int):
        if radicand_bits < 1:
            raise ValueError("SerialSqrt: radicand_bits must be >= 1")
        self.root_bits = (radicand_bits + 1) // 2
        super().__init__({
            "start": In(1), "radicand": In(radicand_bits),
            "busy": Out(1), "done": Out(1), "root": Out(self.root_bits),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.root_bits
        x = Signal(2 * n, reset_less=True)      # radicand bits still to bring down, two per step (data: no reset)
        rem = Signal(n + 1, reset_less=True)    # remainder <= 2 * root
        count = Signal(range(n + 1), reset_less=True)       # steps left, loaded at start (``busy`` has the reset)
        root = Signal(n, reset_less=True)
        rem4 = Signal(n + 3)
        trial = Signal(n + 2)
        m.d.comb += [rem4.eq(Cat(x[-2:], rem)), trial.eq(Cat(Const(1, 2), root)), self.root.eq(root)]
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            m.d.sync += [x.eq(self.radicand), rem.eq(0), root.eq(0), count.eq(n), self.busy.eq(1)]
        with m.Elif(self.busy):
            fits = rem4 >= trial
            m.d.sync += [rem.eq(Mux(fits, rem4 - trial, rem4)), x.eq(x << 2),
                         root.eq(Cat(fits, root)), count.eq(count - 1)]
            with m.If(count == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m


class SerialMultiplyAdd(wiring.Component):
    """``result = c + a * b`` (``c - a * b`` with ``subtract``), signed, by shift-and-add over the bits of
    ``|b|``, one bit per cycle.

    ``b`` must satisfy ``|b| < 2**multiplier_bits``; ``c`` and ``result`` are ``a_bits + multiplier_bits`` bits
    wide (signed), and the result must fit them. ``a``, ``b`` are read at ``start``, ``c`` in the cycle after it
    (the first step). Timing: ``done`` ``multiplier_bits + 2`` cycles after ``start``.
    The running sum is two halves, each with its own carry chain: a step's carry out of the low half enters the
    high half in the next step, and a last step with no term adds the final one (the logic depth is that of a
    half-width adder, not the full one).
    """

    def __init__(self, a_bits: int, multiplier_bits: int, *, subtract: bool = False):
        if min(a_bits, multiplier_bits) < 1:
            raise ValueError("SerialMultiplyAdd: every width must be >= 1")
        self.multiplier_bits, self.subtract = multiplier_bits, subtract
        width = a_bits + multiplier_bits
        super().__init__({
            "start": In(1), "a": In(signed(a_bits)), "b": In(signed(multiplier_bits + 1)), "c": In(signed(width)),
            "busy": Out(1), "done": Out(1), "result": Out(signed(width)),
        })

    def elaborate(self, platform):
        m = Module()
        nb = self.multiplier_bits
        width = len(self.result)
        lo_bits = (width + 1) // 2
        # data and the step count: no reset (loaded at start; ``busy`` has the reset)
        addend = Signal(width, reset_less=True)             # a << step
        negative = Signal(reset_less=True)                  # subtract the addends: b < 0, or b >= 0 with subtract
        bits = Signal(unsigned(nb), reset_less=True)        # |b|, LSB first; zero in the last step
        count = Signal(range(nb + 2), reset_less=True)
        # the running sum starts from c in the first step (``first``) rather than being loaded at ``start``:
        # the choice sits in the LUT before the carry chain, not in one after it
        lo, hi = Signal(lo_bits, reset_less=True), Signal(width - lo_bits, reset_less=True)
        carry = Signal(reset_less=True)                     # the low half's carry out, into the high half next
        first = Signal(reset_less=True)
        base = Mux(first, self.c, Cat(lo, hi))
        sub = negative & bits[0]                            # base - term = base + ~term + 1
        term = Mux(bits[0], addend ^ sub.replicate(width), 0)
        low = Signal(lo_bits + 1)
        m.d.comb += [low.eq(base[:lo_bits] + term[:lo_bits] + sub), self.result.eq(Cat(lo, hi))]
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            m.d.sync += [addend.eq(self.a), negative.eq((self.b < 0) ^ self.subtract), bits.eq(abs(self.b)),
                         first.eq(1), count.eq(nb + 1), self.busy.eq(1)]
        with m.Elif(self.busy):
            m.d.sync += [lo.eq(low[:lo_bits]), carry.eq(low[lo_bits]),
                         hi.eq(base[lo_bits:] + term[lo_bits:] + (carry & ~first)), first.eq(0),
                         addend.eq(addend << 1), bits.eq(bits >> 1), count.eq(count - 1)]
            with m.If(count == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m
