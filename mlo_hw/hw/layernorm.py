"""Residual add + integer LayerNorm, streaming, bit-exact with
``numerics.layernorm(a + b, gain, bias, shift, bits=RES_BITS)``, ``width`` elements a beat (1, 2, 4, ..).

Both inputs of the residual add are on the same per-tensor scale, so the add is a plain ``a + b``
(int16 + int16, no multipliers) and the output is int16, the residual stream's width.

A row passes four units in order, each working on a different row at the same time. A row lives in
one of ``SLOTS`` row slots (the residual sums r and per-slot statistics) from its first input to
its last output; a slot's phase says which unit owns it::

    phase 0 ingest:  r = a + b per element; store r; S = sum(r), Q = sum(r*r)   (in LayerNorm itself)
    phase 1 mean:    m = floor((32*S + H) / (2*H))          (serial division)
                     D = sum((16r - m)**2) = 256*Q - m*(32*S - H*m)   (serial multiplication)
                                                                                 (MeanVariance)
    phase 2 scale:   k = max(0, (48 - bitlen(D)) // 2), s = isqrt(D << 2k) (serial square root),
                     e = bitlen(s), inv = floor(2**(e+15) / s) (serial division; 0 when s == 0)
                                                                                 (InverseStd)
    phase 3 output:  d = 16r - m, t = ((d << k) * inv) >> e,
                     out = sat16(rshift_round(t * gain[c] + bias[c], shift)), then the slot is free
                                                                                 (NormaliseOutput)

Each unit serves the slots in turn through the same handshake: it shows the slot it serves next
(``slot``), LayerNorm answers whether that slot is in the unit's phase (``pending``; the output unit is told
every slot's a cycle ahead, ``ready``), and the unit hands the slot on with a one-cycle ``done`` (LayerNorm then
moves the slot to the next phase).

The variance identity is exact in integers, so one pass over the row gives S and Q and the
statistics never re-read the row. Every width below derives from ``residual_bits`` (r = a + b has
``residual_bits + 1`` bits, |r| <= 2**residual_bits), which must leave r inside ``LN_INPUT_BITS``.
"""

from __future__ import annotations

from amaranth import C, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..model import numerics as nx
from .divide import SerialDivider, SerialMultiplyAdd, SerialSqrt, bit_length
from .mvau import SPLIT_BITS, split_product
from .pipeline import KEEP, delayed, fits_signed, kept_copy, queue_credit, split_sum

__all__ = ["PARAM_LUTRAM_DEPTH", "OUT_LATENCY", "ROW_STATS_CYCLES", "row_sums_delay", "LayerNorm", "ParamWriteSignature", "pair_layout", "beat_layout",
           "MeanVariance", "InverseStd", "NormaliseOutput"]

SLOTS = 4                       # rows in flight (a power of two: the slot pointers wrap)
SHIFT_BITS = 6                  # runtime output shift 0..63
# The gain and bias memories (a word per channel) are distributed RAM up to this many channels (``ram_style``, which
# yosys honours for Xilinx and ECP5): at hidden 128 a lane's 32-bit biases would otherwise take a RAMB18 of their
# own. Deeper ones are left to the tool (block RAM at hidden 384 and 768).
PARAM_LUTRAM_DEPTH = 128
OUT_STAGES = 13                 # NormaliseOutput's pipeline: memory read to output register
# NormaliseOutput's output queue, in beats: a credit's round trip (taken, OUT_STAGES to the queue, two cycles to its
# output, popped, back in the credit's register) is OUT_STAGES + 3 cycles, so as many credits keep one beat a cycle
# (the full-rate bench fails with one fewer)
OUT_QUEUE = OUT_STAGES + 3
OUT_LATENCY = OUT_STAGES + 2   # a row's first take to its first beat on o: the pipeline, then the queue's two cycles
# A row's last beat in to its first take by the output unit, at most: the ingest's stages, the mean unit's 50 cycles,
# the scale unit's 48..50 and the phases' hand-offs (reached at H = 128, width 1: sim/tb_layernorm.py's full_rate)
ROW_STATS_CYCLES = 103


def row_sums_delay(width: int) -> int:
    """Cycles a row's sum of squares Q takes beyond its last beat's accumulation at ``width`` elements a beat: none
    at 1; else a cycle and two per level of the tree (:func:`~mlo_hw.hw.pipeline.split_sum`) that adds the elements'
    own sums."""
    return 0 if width == 1 else 1 + 2 * (width.bit_length() - 1)


def pair_layout(residual_bits: int = nx.RES_BITS) -> data.StructLayout:
    """One input beat: the residual source ``a`` (LSBs) and the branch output ``b``, both signed
    ``residual_bits`` on the same scale."""
    return data.StructLayout({"a": signed(residual_bits), "b": signed(residual_bits)})


def beat_layout(width: int = 1, residual_bits: int = nx.RES_BITS) -> data.ArrayLayout:
    """One input beat of a :class:`LayerNorm` of ``width`` elements a beat: ``width`` :func:`pair_layout` pairs,
    the lowest channel in the LSBs."""
    return data.ArrayLayout(pair_layout(residual_bits), width)


class ParamWriteSignature(wiring.Signature):
    """Gain/bias write port seen from the writer, in weight-image order: words ``0 .. H-1`` are the
    gains (signed, the low 18 bits are kept), words ``H .. 2H-1`` the biases (int32)."""

    def __init__(self, hidden: int):
        super().__init__({"addr": Out(range(2 * hidden)), "data": Out(signed(32)), "en": Out(1)})


class _Widths:
    """Every width of the block, derived from ``hidden``, ``residual_bits`` and the elements a beat ``width``
    (module docstring)."""

    def __init__(self, h: int, rb: int, width: int = 1):
        self.h, self.rb, self.width = h, rb, width
        self.beats = h // width                                       # beats a row
        self.idx_bits = max(1, (self.beats - 1).bit_length())         # a beat's index in its row
        self.slot_bits = (SLOTS - 1).bit_length()
        self.r_bits = rb + 1                                          # r = a + b, signed
        self.r_abs = 1 << rb                                          # |r| <= 2**rb (a = b = -2**(rb-1))
        self.d_bits = self.r_bits + nx.LN_MEAN_FRAC_BITS + 1          # |d| = |16r - m| < 2**(rb+5)
        self.mean_offset = 1 << (rb + nx.LN_MEAN_FRAC_BITS)          # > |m|: keeps the mean division unsigned
        d_max = (1 << (self.d_bits - 1)) - 1
        self.sum_bits = (h * self.r_abs).bit_length() + 1             # S, signed
        self.sq_bits = (h * self.r_abs * self.r_abs).bit_length()     # Q, unsigned
        self.var_bits = (h * d_max * d_max).bit_length()              # D, unsigned
        rad_bits = max(self.var_bits, nx.LN_SQRT_NORM_BITS)           # D << 2k
        self.rad_bits = rad_bits + rad_bits % 2
        self.root_bits = self.rad_bits // 2                           # s, and |d << k| <= s
        self.inv_bits = nx.LN_NORM_BITS + 2                           # inv <= 2**16
        self.mean_q_bits = (2 * self.mean_offset).bit_length() + 1
        self.t_bits = nx.LN_NORM_BITS + 2                             # |t| <= 2**15
        self.k_shape = range(nx.LN_SQRT_NORM_BITS // 2 + 1)

    def slots(self, shape) -> data.ArrayLayout:
        """One ``shape`` value per row slot."""
        return data.ArrayLayout(shape, SLOTS)


class MeanVariance(wiring.Component):
    """Phase 1 of :class:`LayerNorm`: a row's mean ``m`` and variance sum ``D``, from its S and Q.

    Interface:
        ``slot`` (out): the row slot served next; ``pending`` (in): that slot is in phase 1.
        ``sum``, ``sq`` (in): S and Q of the row in ``slot`` (held while the row is served).
        ``mean``, ``var`` (out): per slot, ``m = floor((32*S + H) / (2*H))`` and
        ``D = 256*Q - m*(32*S - H*m)``; a slot's values are final from the cycle after its ``done``
        until the unit serves that slot again.
        ``done`` (out): one cycle when ``slot``'s row is finished; ``slot`` advances at that edge.
    Timing: one row at a time, 50 cycles from ``pending`` at H = 32..128 (a serial division with
    ``mean_q_bits`` quotient bits, then a serial multiply-subtract ``256Q - m*c`` with ``d_bits - 1`` steps and
    one for its carry).
    ``rms`` (RMSNorm, T5's and Llama's: ``numerics.layernorm(..., rms=True)``): ``m = 0`` and ``D = 256*Q``, done in
    the cycle after ``pending``.
    """

    def __init__(self, w: _Widths, rms: bool = False):
        self.w, self.rms = w, rms
        super().__init__({
            "slot": Out(w.slot_bits), "pending": In(1),
            "sum": In(signed(w.sum_bits)), "sq": In(unsigned(w.sq_bits)),
            "mean": Out(w.slots(signed(w.d_bits))), "var": Out(w.slots(unsigned(w.var_bits))),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w, h = self.w, self.w.h
        mn_slot = self.slot
        m.submodules.mean_div = mean_div = SerialDivider(w.mean_q_bits + (2 * h).bit_length(),
                                                         (2 * h).bit_length(), w.mean_q_bits)
        centre_bits = max(w.sum_bits + 5, h.bit_length() + w.d_bits) + 1      # 32*S - H*m, signed
        m.submodules.var_mul = var_mul = SerialMultiplyAdd(centre_bits, w.d_bits - 1, subtract=True)  # 256Q - m*c
        assert w.sq_bits + 8 < len(var_mul.result) and w.var_bits < len(var_mul.result)
        s_cur = self.sum
        # the slots' results: data without reset (the phases say which are final), driven onto the outputs
        means, vars_ = Signal.like(self.mean, reset_less=True), Signal.like(self.var, reset_less=True)
        m.d.comb += [self.mean.eq(means), self.var.eq(vars_)]
        mean = means[mn_slot]
        centre = Signal(signed(centre_bits), reset_less=True)
        with m.FSM(name="mean_fsm"):
            with m.State("IDLE"):
                with m.If(self.pending):
                    if self.rms:          # no mean: D = sum((16 r)**2)
                        m.d.sync += [means[mn_slot].eq(0), vars_[mn_slot].eq(self.sq << 8),
                                     mn_slot.eq(mn_slot + 1)]
                        m.d.comb += self.done.eq(1)
                    else:
                        m.d.comb += mean_div.start.eq(1)
                        m.next = "DIVIDE"
            with m.State("DIVIDE"):
                with m.If(mean_div.done):
                    m.d.sync += means[mn_slot].eq(mean_div.quotient - w.mean_offset)
                    m.next = "CENTRE"
            with m.State("CENTRE"):
                m.d.sync += centre.eq((s_cur << 5) - h * mean)
                m.next = "START"
            with m.State("START"):
                m.d.comb += var_mul.start.eq(1)
                m.next = "MULTIPLY"
            with m.State("MULTIPLY"):
                with m.If(var_mul.done):
                    m.d.comb += self.done.eq(1)
                    m.d.sync += [vars_[mn_slot].eq(var_mul.result), mn_slot.eq(mn_slot + 1)]
                    m.next = "IDLE"
        m.d.comb += [mean_div.dividend.eq((s_cur << 5) + h + 2 * h * w.mean_offset),
                     mean_div.divisor.eq(2 * h),
                     var_mul.b.eq(mean),
                     var_mul.a.eq(centre), var_mul.c.eq(self.sq << 8)]
        return m


class InverseStd(wiring.Component):
    """Phase 2 of :class:`LayerNorm`: the normalisation shift ``k``, ``e = bitlen(s)`` and the
    reciprocal ``inv`` of the square root ``s = isqrt(D << 2k)``.

    Interface:
        ``slot`` (out): the row slot served next; ``pending`` (in): that slot is in phase 2.
        ``var`` (in): D of the row in ``slot`` (held while the row is served).
        ``k``, ``e``, ``inv`` (out): per slot, ``k = max(0, (48 - bitlen(D)) // 2)``, ``e`` and
        ``inv = floor(2**(e+15) / s)`` (0 when ``s == 0``); final from the cycle after the slot's
        ``done`` until the unit serves that slot again.
        ``done`` (out): one cycle when ``slot``'s row is finished; ``slot`` advances at that edge.
    Timing: one row at a time, 48..50 cycles from ``pending`` (``bitlen(D)``, then ``k``, then ``D << 2k``, then a
    serial square root of it with ``root_bits`` steps, a cycle to register ``e``, then a serial division with
    ``inv_bits`` quotient bits). Each of ``bitlen(D)``, ``k`` and the shift by ``2k`` has a cycle of its own.
    """

    def __init__(self, w: _Widths):
        self.w = w
        super().__init__({
            "slot": Out(w.slot_bits), "pending": In(1), "var": In(unsigned(w.var_bits)),
            "k": Out(w.slots(w.k_shape)), "e": Out(w.slots(range(w.root_bits + 1))),
            "inv": Out(w.slots(unsigned(w.inv_bits))),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.w
        sc_slot = self.slot
        var = self.var
        # the slots' results: data without reset, driven onto the outputs
        ks, es, invs = (Signal.like(port, reset_less=True) for port in (self.k, self.e, self.inv))
        m.d.comb += [self.k.eq(ks), self.e.eq(es), self.inv.eq(invs)]
        var_len = Signal(range(w.var_bits + 1), reset_less=True)
        k = Signal(w.k_shape)
        m.d.comb += k.eq(Mux(var_len < nx.LN_SQRT_NORM_BITS, (nx.LN_SQRT_NORM_BITS - var_len) >> 1, 0))
        k_now = Signal(w.k_shape, reset_less=True)     # k of the row served, registered: the radicand's shift select
        m.submodules.sqrt = sqrt = SerialSqrt(w.rad_bits)
        m.submodules.recip = recip = SerialDivider(w.root_bits + nx.LN_NORM_BITS + 1, w.root_bits, w.inv_bits)
        root_len = Signal(range(w.root_bits + 1), reset_less=True)  # bitlen(s), registered: not before the divider
        radicand = Signal(w.rad_bits, reset_less=True)   # D << 2k, registered: not in front of the root's load
        m.d.comb += [sqrt.radicand.eq(radicand),
                     recip.dividend.eq(1 << (root_len + nx.LN_NORM_BITS)), recip.divisor.eq(sqrt.root)]
        # the units' starts are registers, set by the state before SHIFT and LENGTH: each fans out to the enables of
        # its unit's data registers (the state decode there was 7.43 ns at e49c98d's seed 1 on an ECP5-85F)
        sqrt_start, recip_start = Signal(), Signal()
        m.d.comb += [sqrt.start.eq(sqrt_start), recip.start.eq(recip_start)]
        m.d.sync += [sqrt_start.eq(0), recip_start.eq(0)]
        with m.If(recip_start):                     # in LENGTH, e of the slot: enabled by the register, not the state
            m.d.sync += es[sc_slot].eq(root_len)
        with m.FSM(name="scale_fsm"):
            with m.State("IDLE"):
                with m.If(self.pending):
                    m.d.sync += var_len.eq(bit_length(var))
                    m.next = "NORMALISE"
            with m.State("NORMALISE"):
                m.d.sync += [ks[sc_slot].eq(k), k_now.eq(k)]
                m.next = "SHIFT"
            with m.State("SHIFT"):
                m.d.sync += [radicand.eq(var << (k_now << 1)), sqrt_start.eq(1)]
                m.next = "SQRT"
            with m.State("SQRT"):
                with m.If(sqrt.done):
                    m.d.sync += [root_len.eq(bit_length(sqrt.root)), recip_start.eq(1)]
                    m.next = "LENGTH"
            with m.State("LENGTH"):                 # recip.start
                m.next = "RECIP"
            with m.State("RECIP"):
                with m.If(recip.done):
                    # zero variance (s = 0, so bitlen(s) = 0: a register, not a 24-input test of the root): t = 0,
                    # out = sat(rshift_round(bias))
                    zero = root_len == 0
                    m.d.comb += self.done.eq(1)
                    m.d.sync += [invs[sc_slot].eq(Mux(zero, 0, recip.quotient)), sc_slot.eq(sc_slot + 1)]
                    m.next = "IDLE"
        return m


class NormaliseOutput(wiring.Component):
    """Phase 3 of :class:`LayerNorm`: normalise, scale and saturate a row, with the gain and bias memories.

    Interface:
        ``slot`` (out): the row slot read next; ``ready`` (in, a bit a slot): the slots in phase 3 from the next
        cycle on (LayerNorm's phase registers' next values): the unit registers whether its next cycle's slot is one,
        so that the take is a register's, not the phase multiplexer's.
        ``rows`` (read port, the unit drives ``addr``, ``en``; read latency 1): beat ``c`` (r of channels
        ``c * width ..``) of slot ``s`` at address ``Cat(c, s)`` (``idx_bits`` + slot bits).
        ``mean``, ``k``, ``e``, ``inv`` (in): the per-slot statistics of the earlier phases.
        ``param``: :class:`ParamWriteSignature` write port of the gain and bias memories (one per element of a
        beat: channel ``c`` in memory ``c % width``, word ``c // width``).
        ``shift`` (in): the output shift. ``o``: stream of ``width`` signed(residual_bits), in channel order.
        ``done`` (out): one cycle when the last beat of a row leaves the pipeline for the output queue (the row's
        slot is read whole by then); ``done_slot`` (out): its slot.
    Timing: a free-running 13-stage (:data:`OUT_STAGES`) pipeline (memory read, 16r - m, << k, the multipliers'
    operands copied at each multiplier, the two partial products of the multiplication by inv, their sum, >> e, t
    and the gain copied at their multiplier, times gain, plus bias, the shift by its multiple of 8, the rest of the
    shift, saturate; every multiplier's inputs and output are registers beside it), ``width`` elements side by
    side, into an output queue of :data:`OUT_QUEUE` beats (``o`` leaves its register). A beat is taken from a pending
    slot, one a cycle, while the queue has a credit for it (a counter of the queue's free entries less the beats in
    the pipeline, so nothing is ever dropped): ``o.ready`` reaches the queue and the counter, not the pipeline's
    registers, which have no enable. The first beat of a row is on ``o`` 16 cycles after its ``ready``; at one beat a
    cycle taken by ``o`` the credit never runs out. ``shift`` reaches the elements three cycles after it is driven
    (copies of its own beside each).
    """

    def __init__(self, w: _Widths):
        self.w = w
        super().__init__({
            "slot": Out(w.slot_bits), "ready": In(SLOTS),
            "rows": In(memory.ReadPort.Signature(addr_width=w.idx_bits + w.slot_bits,
                                                 shape=data.ArrayLayout(signed(w.r_bits), w.width))),
            "mean": In(w.slots(signed(w.d_bits))), "k": In(w.slots(w.k_shape)),
            "e": In(w.slots(range(w.root_bits + 1))), "inv": In(w.slots(unsigned(w.inv_bits))),
            "param": In(ParamWriteSignature(w.h)),
            "shift": In(SHIFT_BITS),
            "o": Out(stream.Signature(data.ArrayLayout(signed(w.rb), w.width))),
            "done": Out(1), "done_slot": Out(w.slot_bits),
        })

    def elaborate(self, platform):
        m = Module()
        w, h, n = self.w, self.w.h, self.w.width
        style = {"ram_style": "distributed"} if h <= PARAM_LUTRAM_DEPTH else {}
        # ---- parameter writes: channel c into element c % n's memories, word c // n --------------------
        lanes = range(n)
        elem_bits = (n - 1).bit_length()
        is_bias = self.param.addr >= h
        chan = Signal.like(self.param.addr)
        m.d.comb += chan.eq(Mux(is_bias, self.param.addr - h, self.param.addr))
        gain_r, bias_r = [], []
        for j in lanes:
            gain = Memory(shape=signed(nx.LN_GAIN_BITS), depth=w.beats, init=[], attrs=style)
            bias = Memory(shape=signed(32), depth=w.beats, init=[], attrs=style)
            m.submodules[f"gain{j}" if n > 1 else "gain"] = gain
            m.submodules[f"bias{j}" if n > 1 else "bias"] = bias
            gain_w, bias_w = gain.write_port(), bias.write_port()
            mine = self.param.en & (chan[:elem_bits] == j) if n > 1 else self.param.en
            m.d.comb += [gain_w.addr.eq(chan[elem_bits:]), gain_w.data.eq(self.param.data), gain_w.en.eq(mine & ~is_bias),
                         bias_w.addr.eq(chan[elem_bits:]), bias_w.data.eq(self.param.data), bias_w.en.eq(mine & is_bias)]
            gain_r.append(gain.read_port())
            bias_r.append(bias.read_port())

        # ---- the output pipeline, running free into the output queue -------------------------------
        out_slot = self.slot
        out_idx = Signal(range(w.beats))
        take = Signal()
        rows_r = self.rows
        # the output queue and its credit: a beat is taken only with an entry of the queue kept for it, so the
        # pipeline never stalls (an enable on all of its registers, from o.ready, was a net across the lane: 7.77 ns
        # at 485a352's seed 4)
        m.submodules.queue = queue = SyncFIFOBuffered(width=len(self.o.payload.as_value()), depth=OUT_QUEUE)
        room, _ = queue_credit(m, OUT_QUEUE, take, queue.r_rdy & queue.r_en, "queue")
        # (the row, gain and bias memories are read every cycle: their ports' enables stay at their init, 1)
        # the slot served is pending: a register, set from ``ready`` of the slot served in the next cycle (the next
        # slot when this take ends a row); the phase multiplexer into the take, and its fanout to the row and parameter
        # reads' addresses, was 6.99 ns at 1d63e36's seed 1 on an ECP5-85F
        pending, row_end = Signal(), Signal()
        m.d.comb += row_end.eq(out_idx == w.beats - 1)
        m.d.sync += pending.eq(Mux(take & row_end, self.ready.bit_select((out_slot + 1)[:w.slot_bits], 1),
                                   self.ready.bit_select(out_slot, 1)))
        m.d.comb += [take.eq(room & pending), rows_r.addr.eq(Cat(out_idx, out_slot))]
        # each gain and bias memory reads at a copy of out_idx of its own, counted alike (KEEP: not merged): one
        # index into every element's distributed RAM fanned out to some 200 cells a bit (into the gain's read
        # register, 7.14 ns at 52ab33d's seed 1)
        param_idx = [Signal.like(out_idx, name=f"param_idx{k}", attrs={KEEP: 1}) for k in range(2 * n)]
        m.d.comb += [p.addr.eq(i) for p, i in zip(gain_r + bias_r, param_idx)]
        with m.If(take):
            for idx in (out_idx, *param_idx):
                m.d.sync += idx.eq(Mux(idx == w.beats - 1, 0, idx + 1))
            with m.If(row_end):
                m.d.sync += out_slot.eq(out_slot + 1)
        ometa = data.StructLayout({"valid": 1, "last": 1, "slot": w.slot_bits})
        o = [Signal(ometa, name=f"out_meta{j}") for j in range(OUT_STAGES + 1)]   # o[j]: stage j (o[-1]: the beat)
        # the statistics and the shift, shared by the elements of a beat (no reset: they follow the input a cycle
        # and two later, and a reset would join the decode at their flip-flops' reset pins)
        mean1, k1, k2 = (Signal(signed(w.d_bits), reset_less=True), Signal(w.k_shape, reset_less=True),
                          Signal(w.k_shape, name="k2", reset_less=True))
        inv = {j: Signal(unsigned(w.inv_bits), name=f"inv{j}", reset_less=True) for j in (2, 3)}
        e = {j: Signal(range(w.root_bits + 1), name=f"e{j}", reset_less=True) for j in range(2, 7)}
        y0_bits = w.t_bits + nx.LN_GAIN_BITS + 1                 # t * gain + bias
        # a shift >= y0_bits rounds every value to 0, as y0_bits does: clamp it to keep the adders short
        shift = Signal(range(y0_bits + 1), reset_less=True)
        half = Signal(unsigned(y0_bits), reset_less=True)   # 2**(shift-1): rshift_round's rounding term, for the bias
        m.d.sync += [shift.eq(Mux(self.shift > y0_bits, y0_bits, self.shift)),
                     half.eq(Mux(shift == 0, 0, 1 << (shift - 1)[:len(shift)]))]
        m.d.sync += [o[1].valid.eq(take), o[1].last.eq(out_idx == w.beats - 1), o[1].slot.eq(out_slot),
                     mean1.eq(self.mean[out_slot]), k1.eq(self.k[out_slot])]   # the slot's, with the read
        m.d.sync += [o[j].eq(o[j - 1]) for j in range(2, OUT_STAGES + 1)]
        m.d.sync += [inv[3].eq(inv[2])] + [e[j].eq(e[j - 1]) for j in range(3, 7)]
        # the slot's inv and e ride along, selected at stage 1 -> 2: no slot mux in front of the multiplier
        m.d.sync += [k2.eq(k1), inv[2].eq(self.inv[o[1].slot]), e[2].eq(self.e[o[1].slot])]
        beat = Signal.like(self.o.payload, name="beat", reset_less=True)   # stage 13: the output register
        for j in lanes:
            self._element(m, w, j, rows_r.data[j], gain_r[j].data, bias_r[j].data, mean1, k2, inv[3],
                          e[6], shift, half, y0_bits, beat[j])
        m.d.comb += [queue.w_en.eq(o[-1].valid), queue.w_data.eq(beat),
                     self.o.valid.eq(queue.r_rdy), self.o.payload.eq(queue.r_data), queue.r_en.eq(self.o.ready),
                     self.done.eq(o[-1].valid & o[-1].last), self.done_slot.eq(o[-1].slot)]
        return m

    def _element(self, m, w, j, r, gain, bias, mean1, k2, inv3, e6, shift, half, y0_bits, out):
        """Element ``j`` of a beat through stages 2..13, from its row memory word ``r``, gain and bias (read at
        stage 1) to ``out``, its part of the output register."""
        rb = w.rb
        # the element's own copies of the shift, beside its shifter (one register for every element was 1.8 ns of
        # wire away from one of them: 52ab33d's seed 2, 7.30 ns): its multiple of 8, and the rest
        shift_8 = kept_copy(m, shift >> 3, f"shift_8_{j}", unsigned(max(len(shift) - 3, 1)))
        shift_1 = kept_copy(m, shift[:3], f"shift_1_{j}")

        def named(name):
            return f"{name}_{j}" if w.width > 1 else name

        def reg(shape, name):          # the datapath: no reset
            return Signal(shape, name=named(name), reset_less=True)
        d2, dk = reg(signed(w.d_bits), "d2"), reg(signed(w.root_bits + 1), "dk")
        lo_bits = min(w.root_bits, SPLIT_BITS)                   # dk * inv in two multiplier-sized parts
        t, tg = reg(signed(w.t_bits), "t"), reg(signed(w.t_bits + nx.LN_GAIN_BITS), "tg")
        y = reg(signed(y0_bits + 2), "y")                        # ... + 2**(shift-1)
        y8 = reg(signed(y0_bits + 2), "y8")                      # y >> (shift rounded down to a multiple of 8)
        g = {i: reg(signed(nx.LN_GAIN_BITS), f"gain{i}") for i in range(2, 8)}
        b = {i: reg(signed(32), f"bias{i}") for i in range(2, 7)}
        # bias + half over two stages (the low half, then the high half with its carry): a short carry chain each
        b_split = (y0_bits + 1) // 2
        b7_lo, b7_hi = reg(unsigned(b_split + 1), "bias7_lo"), reg(signed(32 - b_split), "bias7_hi")
        b8, b9 = reg(signed(y0_bits + 1), "bias8"), reg(signed(y0_bits + 1), "bias9")
        m.d.sync += [g[i].eq(g[i - 1]) for i in range(3, 8)] + [b[i].eq(b[i - 1]) for i in range(3, 7)]
        # stage 1 -> 2: d = 16r - m, straight from the row memory (the slot's mean and k selected a stage earlier)
        m.d.sync += [d2.eq((r << nx.LN_MEAN_FRAC_BITS) - mean1), g[2].eq(gain), b[2].eq(bias)]
        # stage 2 -> 3: d << k (|d << k| <= s, so it fits root_bits + 1)
        m.d.sync += dk.eq(d2 << k2)
        # stage 3 -> 4: each multiplier's operands, copies of their own beside it (KEEP: the route from dk's
        # flip-flops to a MULT18X18D was a critical path of the ECP5 proxy)
        dk_lo, dk_hi = kept_copy(m, dk[:lo_bits], named("dk_lo")), kept_copy(m, dk[lo_bits:], named("dk_hi"))
        inv_lo, inv_hi = kept_copy(m, inv3, named("inv_lo")), kept_copy(m, inv3, named("inv_hi"))
        # stage 4 -> 5 -> 6: times the reciprocal (mvau.split_product: two partial products registered at their
        # multipliers, then their sum)
        scaled = split_product(m, Cat(dk_lo, dk_hi).as_signed(), inv_lo, named("scaled"), b_high=inv_hi)
        # stage 6 -> 7: t = floor(. / 2**e), |t| <= 2**15; the bias's low half with the rounding half
        m.d.sync += [t.eq(scaled >> e6), b7_lo.eq(b[6][:b_split] + half[:b_split]), b7_hi.eq(b[6][b_split:])]
        # stage 7 -> 8: t and the gain copied beside their multiplier; the bias's high half with its carry
        t_k, g_k = kept_copy(m, t, named("t_k")), kept_copy(m, g[7], named("gain_k"))
        m.d.sync += b8.eq(Cat(b7_lo[:b_split], b7_hi + half[b_split:] + b7_lo[b_split]))
        # stage 8 -> 9: times the gain (registered at the multiplier); stage 9 -> 10: bias and rounding half
        m.d.sync += [tg.eq(t_k * g_k), b9.eq(b8)]
        m.d.sync += y.eq(tg + b9)
        # stage 10 -> 11: the shift's multiple of 8; stage 11 -> 12: the rest of the shift; stage 12 -> 13 (the
        # output register): saturate (in range: the bits above the output's sign bit all equal the sign). Two
        # arithmetic shifts in turn are one: floor(floor(y / 2**a) / 2**b) = floor(y / 2**(a + b)). (In one stage,
        # the shifter's six levels and the saturation spread over the die: 8.27 ns at 8e7e1f1's seed 1; the rest of
        # the shift and the saturation in one, 7.49 ns at 5406415's seed 3.)
        m.d.sync += y8.eq(y >> Cat(C(0, 3), shift_8))
        shifted = reg(signed(len(y)), "shifted")
        m.d.sync += shifted.eq(y8 >> shift_1)
        lo, hi = -(1 << (rb - 1)), (1 << (rb - 1)) - 1
        m.d.sync += out.eq(Mux(fits_signed(shifted, rb), shifted[:rb], Mux(shifted[-1], lo, hi)))


class LayerNorm(wiring.Component):
    """Residual add and LayerNorm over rows of ``hidden`` channels, ``width`` elements per beat.

    Interface:
        ``i``: stream of :func:`beat_layout` beats, ``width`` pairs (a, b) of consecutive channels, channel 0
        first; ``hidden / width`` beats make a row (rows are counted, no framing signal).
        ``a`` and ``b`` are signed ``residual_bits`` (16) on one shared scale; the block adds them.
        ``o``: stream of ``width`` signed(residual_bits), the normalised row in channel order, saturated.
        ``shift`` (0..63): output shift; hold it stable while rows are in flight.
        ``param``: :class:`ParamWriteSignature` write port for the per-channel gain and bias; the
        output pass reads them per element, so load them before the phase's first row (a write
        while rows are in flight changes the outputs not yet produced).
    Throughput: one beat per cycle in and out in steady state when ``hidden / width >= 52`` (the mean
    unit takes 50 cycles per row, the scale unit 48..50, each overlapped with other rows; for 50..51 beats
    the four row slots are the bound); shorter rows run at one row per 50 cycles (measured: 8 rows of
    32 in 382 cycles, 0.67 elements per cycle; 375 when the mean unit took 49). At ``width`` > 1 a row's sum of
    squares takes :func:`row_sums_delay` cycles more (the elements' sums added). Latency (at ``width`` 1): from a
    row's last input to its first output ~108 cycles (first output 140 cycles after the first input
    at H = 32, 237 at H = 128: measured 135 and 232 with a 6-stage output pipeline, plus its 3 new stages,
    the mean unit's carry cycle and the scale unit's k register). The matrix-vector unit produces the branch
    output b at ``pe * simd / cols`` per cycle (0.5 for the O projection of bert_tiny and small,
    less for FFN down), so the block never holds it back.
    Storage: r ``SLOTS * hidden * 17`` bits (``residual_bits + 1``), gain ``hidden * 18``, bias
    ``hidden * 32`` bits. DSP per element of a beat: r*r, (d << k) * inv, t * gain (the residual add is an adder).

    LayerNorm holds the row slots (their phase, r, S and Q) and does the ingest itself; the later
    phases are :class:`MeanVariance`, :class:`InverseStd` and :class:`NormaliseOutput`.
    """

    def __init__(self, hidden: int, residual_bits: int = nx.RES_BITS, rms: bool = False, width: int = 1):
        if hidden < 1:
            raise ValueError(f"LayerNorm: hidden must be >= 1, got {hidden}")
        if width < 1 or width & (width - 1) or hidden % width:
            raise ValueError(f"LayerNorm: width must be a power of two dividing hidden={hidden}, got {width}")
        if not 2 <= residual_bits <= nx.LN_INPUT_BITS - 2:       # |a + b| <= 2**residual_bits < 2**19
            raise ValueError(f"LayerNorm: residual_bits must be 2..{nx.LN_INPUT_BITS - 2}, got {residual_bits}")
        self.hidden, self.residual_bits, self.rms, self.width = hidden, residual_bits, rms, width
        super().__init__({
            "i": In(stream.Signature(beat_layout(width, residual_bits))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(residual_bits), width))),
            "shift": In(SHIFT_BITS),
            "param": In(ParamWriteSignature(hidden)),
        })

    @classmethod
    def from_config(cls, cfg) -> "LayerNorm":
        """H = ``cfg.model.hidden``, the residual stream's width ``numerics.RES_BITS``, RMSNorm if
        ``model.rmsnorm``, ``folding.ln_width`` elements a beat."""
        return cls(hidden=cfg.model.hidden, rms=cfg.model.rmsnorm, width=cfg.folding.ln_width)

    def elaborate(self, platform):
        m = Module()
        w = _Widths(self.hidden, self.residual_bits, self.width)
        n, rb, idx_bits = w.width, w.rb, w.idx_bits

        phase = Signal(data.ArrayLayout(2, SLOTS))
        # the datapath's registers have no reset (the phases and the valid bits say what they hold): fewer flip-flops
        # on the block's flush
        row_sum = Signal(w.slots(signed(w.sum_bits)), reset_less=True)
        row_sq = Signal(w.slots(unsigned(w.sq_bits)), reset_less=True)
        m.submodules.rows = rows = Memory(shape=data.ArrayLayout(signed(w.r_bits), n), depth=SLOTS << idx_bits,
                                          init=[])
        m.submodules.mean_var = mean_var = MeanVariance(w, self.rms)
        m.submodules.inv_std = inv_std = InverseStd(w)
        m.submodules.norm_out = output = NormaliseOutput(w)

        # ---- phase 0: ingest; r, S and Q (a fixed pipeline behind the input handshake) -------------
        in_slot = Signal(w.slot_bits)
        in_idx = Signal(range(w.beats))
        m.d.comb += self.i.ready.eq(phase[in_slot] == 0)
        meta = data.StructLayout({"valid": 1, "first": 1, "last": 1, "addr": idx_bits + w.slot_bits})
        a1 = Signal(meta, name="a1")
        beat = Signal(beat_layout(n, rb), reset_less=True)
        with m.If(self.i.valid & self.i.ready):
            with m.If(in_idx == w.beats - 1):
                m.d.sync += [in_idx.eq(0), in_slot.eq(in_slot + 1)]
            with m.Else():
                m.d.sync += in_idx.eq(in_idx + 1)
        m.d.sync += [a1.valid.eq(self.i.valid & self.i.ready), a1.first.eq(in_idx == 0),
                     a1.last.eq(in_idx == w.beats - 1), a1.addr.eq(Cat(in_idx, in_slot)), beat.eq(self.i.payload)]
        # stage 1: the residual sums, stored
        r = Signal(data.ArrayLayout(signed(w.r_bits), n))
        m.d.comb += [r[j].eq(beat[j].a + beat[j].b) for j in range(n)]
        rows_w = rows.write_port()
        m.d.comb += [rows_w.addr.eq(a1.addr), rows_w.data.eq(r), rows_w.en.eq(a1.valid)]
        # stage 2: r registered; stage 3: each element's copy beside its squarer (KEEP: the route from r's flip-flops
        # to a MULT18X18D was a critical path of the ECP5 proxy) and the beat's sum of r; stage 4: the squares
        # (registered at the multipliers). The row sums accumulate from stage 4: S the beats' sums, Q each element's
        # squares on its own (a multiply-accumulate, as at one element a beat: no adder of the squares in front of
        # the accumulator's carry chain)
        sq_shape = unsigned((w.r_abs * w.r_abs).bit_length())
        r2 = Signal.like(r, name="r2", reset_less=True)
        s3 = Signal(signed(w.r_bits + (n - 1).bit_length()), name="r3" if n == 1 else "beat_sum3", reset_less=True)
        s4 = Signal.like(s3, name="r4" if n == 1 else "beat_sum4", reset_less=True)
        m.d.sync += [r2.eq(r), s3.eq(sum(r2[j] for j in range(n))), s4.eq(s3)]
        r3 = [kept_copy(m, r2[j], f"r3_{j}" if n > 1 else "r3_k") for j in range(n)]
        sq4 = [Signal(sq_shape, name=f"sq4_{j}" if n > 1 else "sq4", reset_less=True) for j in range(n)]
        m.d.sync += [sq4[j].eq(r3[j] * r3[j]) for j in range(n)]
        a2, a3, a4 = Signal(meta, name="a2"), Signal(meta, name="a3"), Signal(meta, name="a4")
        m.d.sync += [a2.eq(a1), a3.eq(a2), a4.eq(a3)]
        acc_s = Signal(signed(w.sum_bits), reset_less=True)
        acc_q = [Signal(unsigned(w.sq_bits), name=f"acc_q{j}" if n > 1 else "acc_q", reset_less=True) for j in range(n)]
        tot_s, tot_q = Signal.like(acc_s), [Signal.like(q, name=f"tot_{q.name}") for q in acc_q]
        m.d.comb += [tot_s.eq(Mux(a4.first, 0, acc_s) + s4)]
        m.d.comb += [t.eq(Mux(a4.first, 0, q) + sq) for t, q, sq in zip(tot_q, acc_q, sq4)]
        a4_slot = a4.addr[idx_bits:]
        with m.If(a4.valid):
            m.d.sync += [acc_s.eq(tot_s)] + [q.eq(t) for q, t in zip(acc_q, tot_q)]
            with m.If(a4.last):
                m.d.sync += row_sum[a4_slot].eq(tot_s)
                if n == 1:
                    m.d.sync += [row_sq[a4_slot].eq(tot_q[0]), phase[a4_slot].eq(1)]
        if n > 1:
            # Q: the elements' sums added in a tree of split sums (their registers follow the accumulators in every
            # cycle), stored row_sums_delay(n) cycles after the row's last beat joined them
            level = acc_q
            while len(level) > 1:
                level = [split_sum(m, level[i], level[i + 1], f"row_sq_{len(level)}_{i}", w.sq_bits)
                         for i in range(0, len(level), 2)]
            ended = delayed(m, Cat(a4.valid & a4.last, a4_slot), row_sums_delay(n), "row_end")
            with m.If(ended[0]):
                m.d.sync += [row_sq[ended[1:]].eq(level[0]), phase[ended[1:]].eq(1)]

        # ---- phase 1: mean, then the variance sum -------------------------------------------------
        m.d.comb += [mean_var.pending.eq(phase[mean_var.slot] == 1),
                     mean_var.sum.eq(row_sum[mean_var.slot]), mean_var.sq.eq(row_sq[mean_var.slot])]
        with m.If(mean_var.done):
            m.d.sync += phase[mean_var.slot].eq(2)

        # ---- phase 2: normalisation shift, square root, reciprocal --------------------------------
        m.d.comb += [inv_std.pending.eq(phase[inv_std.slot] == 2), inv_std.var.eq(mean_var.var[inv_std.slot])]
        with m.If(inv_std.done):
            m.d.sync += phase[inv_std.slot].eq(3)

        # ---- phase 3: output ----------------------------------------------------------------------
        wiring.connect(m, output.rows, rows.read_port())
        wiring.connect(m, wiring.flipped(self.param), output.param)
        wiring.connect(m, output.o, wiring.flipped(self.o))
        # the slots in phase 3 from the next cycle on: in it and not freed now, or entering it now
        m.d.comb += [output.ready[j].eq(((phase[j] == 3) & ~(output.done & (output.done_slot == j)))
                                        | (inv_std.done & (inv_std.slot == j))) for j in range(SLOTS)]
        m.d.comb += [output.shift.eq(self.shift),
                     output.mean.eq(mean_var.mean), output.k.eq(inv_std.k), output.e.eq(inv_std.e),
                     output.inv.eq(inv_std.inv)]
        with m.If(output.done):
            m.d.sync += phase[output.done_slot].eq(0)
        return m
