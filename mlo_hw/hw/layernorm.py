"""Residual add + integer LayerNorm, streaming, bit-exact with
``numerics.layernorm(a + b, gain, bias, shift, bits=RES_BITS)``.

Both inputs of the residual add are on the same per-tensor scale, so the add is a plain ``a + b``
(int16 + int16, no multipliers) and the output is int16, the residual stream's width.

A row passes four units in order, each working on a different row at the same time. A row lives in
one of ``SLOTS`` row slots (the residual sums r and per-slot statistics) from its first input to
its last output; a slot's phase says which unit owns it::

    phase 0 ingest:  r = a + b per beat; store r; S = sum(r), Q = sum(r*r)
    phase 1 mean:    m = floor((32*S + H) / (2*H))          (serial division)
                     D = sum((16r - m)**2) = 256*Q - m*(32*S - H*m)   (serial multiplication)
    phase 2 scale:   k = max(0, (48 - bitlen(D)) // 2), s = isqrt(D << 2k) (serial square root),
                     e = bitlen(s), inv = floor(2**(e+15) / s) (serial division; 0 when s == 0)
    phase 3 output:  d = 16r - m, t = ((d << k) * inv) >> e,
                     out = sat16(rshift_round(t * gain[c] + bias[c], shift)), then the slot is free

The variance identity is exact in integers, so one pass over the row gives S and Q and the
statistics never re-read the row. Every width below derives from ``residual_bits`` (r = a + b has
``residual_bits + 1`` bits, |r| <= 2**residual_bits), which must leave r inside ``LN_INPUT_BITS``.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..model import numerics as nx
from .divide import SerialDivider, SerialMultiplier, SerialSqrt, bit_length

__all__ = ["LayerNorm", "ParamWriteSignature", "pair_layout"]

SLOTS = 4                       # rows in flight (a power of two: the slot pointers wrap)
SHIFT_BITS = 6                  # runtime output shift 0..63


def pair_layout(residual_bits: int = nx.RES_BITS) -> data.StructLayout:
    """One input beat: the residual source ``a`` (LSBs) and the branch output ``b``, both signed
    ``residual_bits`` on the same scale."""
    return data.StructLayout({"a": signed(residual_bits), "b": signed(residual_bits)})


class ParamWriteSignature(wiring.Signature):
    """Gain/bias write port seen from the writer, in weight-image order: words ``0 .. H-1`` are the
    gains (signed, the low 18 bits are kept), words ``H .. 2H-1`` the biases (int32)."""

    def __init__(self, hidden: int):
        super().__init__({"addr": Out(range(2 * hidden)), "data": Out(signed(32)), "en": Out(1)})


class LayerNorm(wiring.Component):
    """Residual add and LayerNorm over rows of ``hidden`` channels, one element per beat.

    Interface:
        ``i``: stream of :func:`pair_layout` beats (a, b), channel 0 first; ``hidden`` beats make a
        row (rows are counted, no framing signal).
        ``a`` and ``b`` are signed ``residual_bits`` (16) on one shared scale; the block adds them.
        ``o``: stream of signed(residual_bits), the normalised row in channel order, saturated.
        ``shift`` (0..63): output shift; hold it stable while rows are in flight.
        ``param``: :class:`ParamWriteSignature` write port for the per-channel gain and bias; the
        output pass reads them per element, so load them before the phase's first row (a write
        while rows are in flight changes the outputs not yet produced).
    Throughput: one element per cycle in and out in steady state when ``hidden >= 52`` (the mean
    unit takes 49 cycles per row, the scale unit 45..47, each overlapped with other rows; for H = 49..51
    the four row slots are the bound); shorter rows run at one row per 49 cycles (measured: 8 rows of
    32 in 375 cycles, 0.68 elements per cycle; 8 rows of 52 in 416 cycles, gapless). Latency: from a
    row's last input to its first output ~103 cycles (measured: first output 135 cycles after the
    first input at H = 32, 232 at H = 128). The matrix-vector unit produces the branch
    output b at ``pe * simd / cols`` per cycle (0.5 for the O projection of bert_tiny and small,
    less for FFN down), so the block never holds it back.
    Storage: r ``SLOTS * hidden * 17`` bits (``residual_bits + 1``), gain ``hidden * 18``, bias
    ``hidden * 32`` bits. DSP: r*r, (d << k) * inv, t * gain (the residual add is an adder).
    """

    def __init__(self, hidden: int, residual_bits: int = nx.RES_BITS):
        if hidden < 1:
            raise ValueError(f"LayerNorm: hidden must be >= 1, got {hidden}")
        if not 2 <= residual_bits <= nx.LN_INPUT_BITS - 2:       # |a + b| <= 2**residual_bits < 2**19
            raise ValueError(f"LayerNorm: residual_bits must be 2..{nx.LN_INPUT_BITS - 2}, got {residual_bits}")
        self.hidden, self.residual_bits = hidden, residual_bits
        super().__init__({
            "i": In(stream.Signature(pair_layout(residual_bits))),
            "o": Out(stream.Signature(signed(residual_bits))),
            "shift": In(SHIFT_BITS),
            "param": In(ParamWriteSignature(hidden)),
        })

    @classmethod
    def from_config(cls, cfg) -> "LayerNorm":
        """H = ``cfg.model.hidden``, the residual stream's width ``numerics.RES_BITS``."""
        return cls(hidden=cfg.model.hidden)

    def elaborate(self, platform):
        m = Module()
        h, rb = self.hidden, self.residual_bits
        idx_bits = max(1, (h - 1).bit_length())
        slot_bits = (SLOTS - 1).bit_length()
        r_bits = rb + 1                                          # r = a + b, signed
        r_abs = 1 << rb                                          # |r| <= 2**rb (a = b = -2**(rb-1))
        d_bits = r_bits + nx.LN_MEAN_FRAC_BITS + 1               # |d| = |16r - m| < 2**(rb+5)
        mean_offset = 1 << (rb + nx.LN_MEAN_FRAC_BITS)          # > |m|: keeps the mean division unsigned
        d_max = (1 << (d_bits - 1)) - 1
        sum_bits = (h * r_abs).bit_length() + 1                  # S, signed
        sq_bits = (h * r_abs * r_abs).bit_length()               # Q, unsigned
        var_bits = (h * d_max * d_max).bit_length()              # D, unsigned
        rad_bits = max(var_bits, nx.LN_SQRT_NORM_BITS)           # D << 2k
        rad_bits += rad_bits % 2
        root_bits = rad_bits // 2                                # s, and |d << k| <= s
        inv_bits = nx.LN_NORM_BITS + 2                           # inv <= 2**16
        mean_q_bits = (2 * mean_offset).bit_length() + 1
        t_bits = nx.LN_NORM_BITS + 2                             # |t| <= 2**15

        phase = Signal(data.ArrayLayout(2, SLOTS))
        row_sum = Signal(data.ArrayLayout(signed(sum_bits), SLOTS))
        row_sq = Signal(data.ArrayLayout(unsigned(sq_bits), SLOTS))
        row_mean = Signal(data.ArrayLayout(signed(d_bits), SLOTS))
        row_var = Signal(data.ArrayLayout(unsigned(var_bits), SLOTS))
        row_k = Signal(data.ArrayLayout(range(nx.LN_SQRT_NORM_BITS // 2 + 1), SLOTS))
        row_e = Signal(data.ArrayLayout(range(root_bits + 1), SLOTS))
        row_inv = Signal(data.ArrayLayout(unsigned(inv_bits), SLOTS))

        m.submodules.rows = rows = Memory(shape=signed(r_bits), depth=SLOTS << idx_bits, init=[])
        m.submodules.gain = gain = Memory(shape=signed(nx.LN_GAIN_BITS), depth=h, init=[])
        m.submodules.bias = bias = Memory(shape=signed(32), depth=h, init=[])

        # ---- parameter writes ----------------------------------------------------------------------
        gain_w, bias_w = gain.write_port(), bias.write_port()
        is_bias = self.param.addr >= h
        m.d.comb += [gain_w.addr.eq(self.param.addr), gain_w.data.eq(self.param.data),
                     gain_w.en.eq(self.param.en & ~is_bias),
                     bias_w.addr.eq(self.param.addr - h), bias_w.data.eq(self.param.data),
                     bias_w.en.eq(self.param.en & is_bias)]

        # ---- phase 0: ingest; r, S and Q (a fixed pipeline behind the input handshake) -------------
        in_slot = Signal(slot_bits)
        in_idx = Signal(range(h))
        m.d.comb += self.i.ready.eq(phase[in_slot] == 0)
        meta = data.StructLayout({"valid": 1, "first": 1, "last": 1, "addr": idx_bits + slot_bits})
        a1 = Signal(meta)
        pair = Signal(pair_layout(rb))
        with m.If(self.i.valid & self.i.ready):
            with m.If(in_idx == h - 1):
                m.d.sync += [in_idx.eq(0), in_slot.eq(in_slot + 1)]
            with m.Else():
                m.d.sync += in_idx.eq(in_idx + 1)
        m.d.sync += [a1.valid.eq(self.i.valid & self.i.ready), a1.first.eq(in_idx == 0),
                     a1.last.eq(in_idx == h - 1), a1.addr.eq(Cat(in_idx, in_slot)), pair.eq(self.i.payload)]
        # stage 1: the residual sum, stored
        r = Signal(signed(r_bits))
        m.d.comb += r.eq(pair.a + pair.b)
        rows_w = rows.write_port()
        m.d.comb += [rows_w.addr.eq(a1.addr), rows_w.data.eq(r), rows_w.en.eq(a1.valid)]
        a2, a3 = Signal(meta), Signal(meta)
        r2, r3 = Signal.like(r), Signal.like(r)
        sq3 = Signal(unsigned((r_abs * r_abs).bit_length()))
        m.d.sync += [a2.eq(a1), r2.eq(r), a3.eq(a2), r3.eq(r2), sq3.eq(r2 * r2)]
        # stage 3: row sums
        acc_s, acc_q = Signal(signed(sum_bits)), Signal(unsigned(sq_bits))
        tot_s, tot_q = Signal.like(acc_s), Signal.like(acc_q)
        m.d.comb += [tot_s.eq(Mux(a3.first, 0, acc_s) + r3), tot_q.eq(Mux(a3.first, 0, acc_q) + sq3)]
        a3_slot = a3.addr[idx_bits:]
        with m.If(a3.valid):
            m.d.sync += [acc_s.eq(tot_s), acc_q.eq(tot_q)]
            with m.If(a3.last):
                m.d.sync += [row_sum[a3_slot].eq(tot_s), row_sq[a3_slot].eq(tot_q), phase[a3_slot].eq(1)]

        # ---- phase 1: mean, then the variance sum -------------------------------------------------
        mn_slot = Signal(slot_bits)
        m.submodules.mean_div = mean_div = SerialDivider(mean_q_bits + (2 * h).bit_length(),
                                                         (2 * h).bit_length(), mean_q_bits)
        centre_bits = max(sum_bits + 5, h.bit_length() + d_bits) + 1      # 32*S - H*m, signed
        m.submodules.var_mul = var_mul = SerialMultiplier(centre_bits, d_bits - 1)
        s_cur = row_sum[mn_slot]
        mean = row_mean[mn_slot]
        centre = Signal(signed(centre_bits))
        with m.FSM(name="mean_fsm"):
            with m.State("IDLE"):
                with m.If(phase[mn_slot] == 1):
                    m.d.comb += mean_div.start.eq(1)
                    m.next = "DIVIDE"
            with m.State("DIVIDE"):
                with m.If(mean_div.done):
                    m.d.sync += row_mean[mn_slot].eq(mean_div.quotient - mean_offset)
                    m.next = "CENTRE"
            with m.State("CENTRE"):
                m.d.sync += centre.eq((s_cur << 5) - h * mean)
                m.next = "START"
            with m.State("START"):
                m.d.comb += var_mul.start.eq(1)
                m.next = "MULTIPLY"
            with m.State("MULTIPLY"):
                with m.If(var_mul.done):
                    m.d.sync += [row_var[mn_slot].eq((row_sq[mn_slot] << 8) - var_mul.product),
                                 phase[mn_slot].eq(2), mn_slot.eq(mn_slot + 1)]
                    m.next = "IDLE"
        m.d.comb += [mean_div.dividend.eq((s_cur << 5) + h + 2 * h * mean_offset),
                     mean_div.divisor.eq(2 * h),
                     var_mul.b.eq(mean),
                     var_mul.a.eq(centre)]

        # ---- phase 2: normalisation shift, square root, reciprocal --------------------------------
        sc_slot = Signal(slot_bits)
        var = row_var[sc_slot]
        var_len = Signal(range(var_bits + 1))
        k = Signal.like(row_k[0])
        m.d.comb += k.eq(Mux(var_len < nx.LN_SQRT_NORM_BITS, (nx.LN_SQRT_NORM_BITS - var_len) >> 1, 0))
        m.submodules.sqrt = sqrt = SerialSqrt(rad_bits)
        m.submodules.recip = recip = SerialDivider(root_bits + nx.LN_NORM_BITS + 1, root_bits, inv_bits)
        root_len = Signal(range(root_bits + 1))
        m.d.comb += root_len.eq(bit_length(sqrt.root))
        m.d.comb += [sqrt.radicand.eq(var << (k << 1)),
                     recip.dividend.eq(1 << (root_len + nx.LN_NORM_BITS)), recip.divisor.eq(sqrt.root)]
        with m.FSM(name="scale_fsm"):
            with m.State("IDLE"):
                with m.If(phase[sc_slot] == 2):
                    m.d.sync += var_len.eq(bit_length(var))
                    m.next = "NORMALISE"
            with m.State("NORMALISE"):
                m.d.comb += sqrt.start.eq(1)
                m.d.sync += row_k[sc_slot].eq(k)
                m.next = "SQRT"
            with m.State("SQRT"):
                with m.If(sqrt.done):
                    m.d.comb += recip.start.eq(1)
                    m.d.sync += row_e[sc_slot].eq(root_len)
                    m.next = "RECIP"
            with m.State("RECIP"):
                with m.If(recip.done):
                    zero = sqrt.root == 0             # zero variance: t = 0, out = sat(rshift_round(bias))
                    m.d.sync += [row_inv[sc_slot].eq(Mux(zero, 0, recip.quotient)),
                                 phase[sc_slot].eq(3), sc_slot.eq(sc_slot + 1)]
                    m.next = "IDLE"

        # ---- phase 3: output (a pipeline that stalls on output backpressure) ----------------------
        out_slot = Signal(slot_bits)
        out_idx = Signal(range(h))
        advance, take = Signal(), Signal()
        rows_r, gain_r, bias_r = rows.read_port(), gain.read_port(), bias.read_port()
        m.d.comb += [advance.eq(self.o.ready | ~self.o.valid), take.eq(advance & (phase[out_slot] == 3)),
                     rows_r.addr.eq(Cat(out_idx, out_slot)), gain_r.addr.eq(out_idx), bias_r.addr.eq(out_idx),
                     rows_r.en.eq(advance), gain_r.en.eq(advance), bias_r.en.eq(advance)]
        with m.If(take):
            with m.If(out_idx == h - 1):
                m.d.sync += [out_idx.eq(0), out_slot.eq(out_slot + 1)]
            with m.Else():
                m.d.sync += out_idx.eq(out_idx + 1)
        ometa = data.StructLayout({"valid": 1, "last": 1, "slot": slot_bits})
        o = [Signal(ometa, name=f"out_meta{j}") for j in range(7)]   # o[j]: stage j; o[6] is the output beat
        dk = Signal(signed(root_bits + 1))
        scaled = Signal(signed(root_bits + 1 + inv_bits))
        t = Signal(signed(t_bits))
        y0_bits = t_bits + nx.LN_GAIN_BITS + 1                   # t * gain + bias
        y = Signal(signed(y0_bits + 2))                          # ... + 2**(shift-1)
        g2, g3, g4 = (Signal(signed(nx.LN_GAIN_BITS), name=f"gain{j}") for j in (2, 3, 4))
        b2, b3 = (Signal(signed(32), name=f"bias{j}") for j in (2, 3))
        b4 = Signal(signed(y0_bits + 1))
        # a shift >= y0_bits rounds every value to 0, as y0_bits does: clamp it to keep the adders short
        shift = Signal(range(y0_bits + 1))
        half = Signal(unsigned(y0_bits))      # 2**(shift-1): rshift_round's rounding term, added to the bias
        m.d.sync += [shift.eq(Mux(self.shift > y0_bits, y0_bits, self.shift)),
                     half.eq(Mux(shift == 0, 0, 1 << (shift - 1)[:len(shift)]))]
        with m.If(advance):
            m.d.sync += [o[1].valid.eq(take), o[1].last.eq(out_idx == h - 1), o[1].slot.eq(out_slot)]
            m.d.sync += [o[j].eq(o[j - 1]) for j in range(2, 7)]
            # stage 1 -> 2: d << k (|d << k| <= s, so it fits root_bits + 1)
            d = (rows_r.data << nx.LN_MEAN_FRAC_BITS) - row_mean[o[1].slot]
            m.d.sync += [dk.eq(d << row_k[o[1].slot]), g2.eq(gain_r.data), b2.eq(bias_r.data)]
            # stage 2 -> 3: times the reciprocal
            m.d.sync += [scaled.eq(dk * row_inv[o[2].slot]), g3.eq(g2), b3.eq(b2)]
            # stage 3 -> 4: t = floor(. / 2**e), |t| <= 2**15
            m.d.sync += [t.eq(scaled >> row_e[o[3].slot]), g4.eq(g3), b4.eq(b3 + half)]
            # stage 4 -> 5: gain, bias and the rounding half
            m.d.sync += y.eq(t * g4 + b4)
            # stage 5 -> 6 (the output register): shift, saturate (in range: the bits above the
            # output's sign bit all equal the sign)
            shifted = Signal.like(y)
            m.d.comb += shifted.eq(y >> shift)
            above = shifted[rb - 1:]
            in_range = (above == 0) | (above == (1 << len(above)) - 1)
            lo, hi = -(1 << (rb - 1)), (1 << (rb - 1)) - 1
            m.d.sync += self.o.payload.eq(Mux(in_range, shifted[:rb], Mux(shifted[-1], lo, hi)))
        m.d.comb += self.o.valid.eq(o[6].valid)
        with m.If(self.o.valid & self.o.ready & o[6].last):
            m.d.sync += phase[o[6].slot].eq(0)
        return m
