"""Matrix-vector activation unit (MVAU): PE x SIMD multiply-accumulates a cycle, bias and requantization.

One MVAU serves every matrix product of the rolled layer, one *job* at a time. A job multiplies
``vectors`` activation vectors of ``cols`` elements by a weight tile of ``rows`` x ``cols`` and
emits, per vector, ``rows`` results in beats of ``pe`` channels::

    for v in vectors:                       # each vector is streamed in once (x)
        for nf in rows / pe:                # neuron fold: replayed from the vector buffer for nf > 0
            for sf in cols / simd:          # synapse fold: one PE x SIMD step per cycle
                acc[p] += sum_s W[nf*pe + p, sf*simd + s] * x[v, sf*simd + s]
            emit o: lane p = requant(acc[p] + bias[nf*pe + p], mult[nf*pe + p], shift)   (requant mode)
                             acc[p]                                                  (raw mode)

Interface (clock domain ``sync``):

``cmd`` (in, stream of :meth:`MVAUParams.cmd_layout`)
    One beat starts a job: ``col_folds = cols / simd``, ``row_folds = rows / pe``, ``vectors``,
    ``shift`` (requant shift, one per matrix), ``raw`` (1: emit the accumulator, no bias, no
    requantization), ``act_unsigned`` (1: activation bytes are uint8, e.g. softmax probabilities;
    0: int8), ``wide`` (1: saturate the requantized result to ``numerics.RES_BITS`` (int16, the
    residual stream) instead of ``act_bits``). Every count is at least 1. :meth:`MVAUParams.command` builds and checks the word.
    The next command is taken in the cycle the current job issues its last step, so jobs run
    back to back without a bubble.
``x`` (in, stream, payload ``simd`` lanes of ``act_bits``, lane 0 in the LSBs)
    Per vector, ``col_folds`` beats of input elements ``sf*simd + s``. Each vector is sent once per
    job; the MVAU keeps it in a vector buffer (depth ``max_cols / simd``) for the folds ``nf > 0``.
``weights`` (read port, ``amaranth.lib.memory.ReadPort.Signature``, flipped: the MVAU drives ``addr``, ``en``)
    Synchronous, read latency 1 (``data`` holds ``mem[addr]`` the cycle after ``en``). Word
    ``nf * col_folds + sf`` of the tile holds ``pe * simd`` signed weights, ``W[nf*pe + p, sf*simd + s]``
    in lane ``p*simd + s`` (the DRAM weight image order, see :mod:`mlo_hw.model.weight_image`).
``params`` (read port, same convention, addressed by ``nf``)
    ``data`` is :meth:`MVAUParams.param_layout`: ``bias`` (``pe`` x int32, LSBs) then ``mult``
    (``pe`` x uint16) of channels ``nf*pe + p``. Read once per output beat (``en`` high one cycle,
    after the fold's last step has been summed). Ignored in raw mode.
``o`` (out, stream, payload ``pe`` lanes of signed ``acc_bits``, lane p = channel ``nf*pe + p``)
    Requant mode: ``numerics.requant(acc + bias, mult, shift, act_bits)`` (``RES_BITS`` when ``wide``) sign-extended. Raw mode:
    the dot product ``acc`` itself. Beats leave in (vector, nf) order.
``busy`` (out)
    High from a command's acceptance until its last result has left ``o``.
``issuing`` (out, a register)
    High from the cycle after a command's acceptance until the clock edge after its job's last step issued (its
    weights all read): low again in the cycle after the last read, unless the next command was taken with it.

Throughput: one PE x SIMD step per cycle whenever ``x`` has data (only needed in folds ``nf == 0``)
and the output buffer has room: no bubbles between folds, vectors or jobs. A job of ``V`` vectors
takes ``V * row_folds * col_folds`` cycles plus :attr:`MVAU.latency` (``15 + ceil(log2(simd))``, plus
``pe / requant_lanes`` with a shared requantizer: 26 for bert_tiny's 8 x 8 with one requant lane) from its
command handshake to its last output handshake (without backpressure). Backpressure on ``o`` stalls issue, never drops:
the pipeline after issue runs freely and its results land in an output FIFO that issue never
overfills (issue only goes ahead while FIFO level + results in flight < FIFO depth; that count is
kept in one register and the comparison registered, so ``x.ready`` comes from flip-flops).

DSP packing (DSP48E1, 25 x 18 multiplier): two output channels ``p = 2i, 2i+1`` share each activation,
so their weights are packed into one multiplicand ``w_lo + w_hi * 2**16`` (25 bits, the A port) and one multiply
by the 9-bit activation yields ``w_lo*a + w_hi*a * 2**16``. Each product fits in 16 signed bits
(``|w*a| <= 128 * 255``), so ``lo = sext(P[0:16])`` and ``hi = (P >> 16) + P[15]`` (the borrow of a
negative low lane) recover both exactly; sums over SIMD and folds happen after the split, in the
fabric. An odd last channel uses its own multiplier. This is FINN's 8-bit two-lane scheme
(``finn-rtllib/mvu``) without the cascade.

Attention products on the same unit: both operands of ``Q.K^T`` and ``P.V`` are activations. The
engine presents the second operand through the ``weights`` read port (for ``Q.K^T`` the K rows, int8,
rows = keys; for ``P.V`` the rows of V^T, int8, cols = keys) and the first through ``x`` (Q rows,
int8; probability rows, ``act_unsigned=1``). Activation lanes are therefore extended to 9 signed
bits inside, and ``acc_bits`` must cover ``max_cols`` products of int8 x uint8 (checked).
Shared requantization: a result beat leaves the accumulators once per ``col_folds`` cycles, so the
requantizer (two DSP48E1 a channel) needs only ``requant_lanes = pe / min col_folds`` lanes (rounded up to a
divisor of ``pe``), each taking its channels of a beat in turn (:class:`Requantizer`); the engine's shortest
product is Q.K^T over ``head_dim`` columns. bert_tiny (PE 8, head_dim 64 = 8 folds): 1 lane, 2 DSPs instead
of 16; MiniLM at SIMD 32 (head_dim 32 = 1 fold): all 16 lanes.

``Q.K^T`` runs in raw mode (the softmax needs raw scores); ``P.V`` runs in requant mode with one
multiplier and zero bias for all channels (the engine's ``params`` port returns constants). This
reuses the array instead of building a second one that would idle during the weight matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..model import numerics as nx
from .buffers import NO_COLLISION
from .pipeline import fits_signed, kept_copy, queue_credit, split_sum

__all__ = ["MVAUParams", "MVAU", "MVAUIssue", "MACArray", "Requantizer", "multiplier_ports"]

DSP_A_BITS = 25         # DSP48E1 multiplier: 25 x 18 signed
DSP_B_BITS = 18
ECP5_MULT_BITS = 18     # ECP5 MULT18X18D: 18 x 18 signed (a packed weight does not fit it)


def multiplier_ports(part_family: str) -> tuple[int, int]:
    """The signed (A, B) widths of one hardware multiplier of a part family: the DSP48E1's on 7-series, the
    MULT18X18D's on ECP5 (``lfe5...``), where two channels cannot share a multiplier."""
    if part_family.startswith("lfe5"):
        return ECP5_MULT_BITS, ECP5_MULT_BITS
    return DSP_A_BITS, DSP_B_BITS
BIAS_BITS = 32          # bias words in the weight image are int32
SHIFT_BITS = 6          # requant shift 0..63 (numerics.quantize_multiplier caps it at 62)


@dataclass(frozen=True)
class MVAUParams:
    """Elaboration parameters of an :class:`MVAU`."""
    pe: int
    simd: int
    max_cols: int
    max_rows: int
    max_vectors: int
    acc_bits: int
    weight_bits: int = 8
    act_bits: int = 8
    mult_bits: int = nx.MULT_BITS
    pack_dsp: bool = True       # two channels per multiplier (see the module docstring)
    dsp_a_bits: int = DSP_A_BITS   # the part's multiplier ports (multiplier_ports): packing needs the wide A port
    dsp_b_bits: int = DSP_B_BITS
    requant_lanes: int | None = None    # requantizer lanes (None: pe); fewer take a beat in pe / lanes cycles

    def __post_init__(self):
        for name in ("pe", "simd", "max_cols", "max_rows", "max_vectors", "acc_bits", "weight_bits",
                     "act_bits", "mult_bits", "dsp_a_bits", "dsp_b_bits"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"MVAUParams.{name}: expected a positive integer, got {v!r}")
        if self.max_cols % self.simd:
            raise ValueError(f"MVAUParams.max_cols: {self.max_cols} is not a multiple of simd={self.simd}")
        if self.max_rows % self.pe:
            raise ValueError(f"MVAUParams.max_rows: {self.max_rows} is not a multiple of pe={self.pe}")
        lanes = self.requant_lanes
        if lanes is not None and (isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1
                                  or self.pe % lanes):
            raise ValueError(f"MVAUParams.requant_lanes: expected a divisor of pe={self.pe}, got {lanes!r}")
        if self.acc_bits < self.min_acc_bits:
            raise ValueError(f"MVAUParams.acc_bits: {self.acc_bits} cannot hold {self.max_cols} products of "
                             f"int{self.weight_bits} x uint{self.act_bits}; expected >= {self.min_acc_bits}")

    @classmethod
    def from_config(cls, cfg, **overrides) -> "MVAUParams":
        """The one MVAU of the rolled layer: every weight matrix tile and both attention products. Its jobs have
        at least ``head_dim`` columns (Q.K^T), so a result beat comes at most every ``head_dim / simd`` cycles
        and the requantizer needs only the lanes that keep up with that (:meth:`shared_lanes`)."""
        m, f = cfg.model, cfg.folding
        max_cols = max(m.hidden, m.intermediate, cfg.seq_padded)          # P.V has K = seq_padded
        min_cols = min(m.hidden, m.intermediate, cfg.seq_padded, cfg.head_dim)
        max_rows = max(f.tile_rows, cfg.seq_padded, cfg.head_dim)  # Q.K^T: rows = keys
        kw = dict(pe=f.pe, simd=f.simd, max_cols=max_cols, max_rows=max_rows,
                  max_vectors=cfg.seq_padded, acc_bits=cfg.acc_bits(max_cols),
                  weight_bits=cfg.numerics.weight_bits, act_bits=cfg.numerics.act_bits)
        kw["dsp_a_bits"], kw["dsp_b_bits"] = multiplier_ports(cfg.part_family)
        kw.update(overrides)
        if "requant_lanes" not in overrides:
            kw["requant_lanes"] = cls.shared_lanes(kw["pe"], max(1, min_cols // kw["simd"]))
        return cls(**kw)

    @staticmethod
    def shared_lanes(pe: int, min_col_folds: int) -> int:
        """The fewest lanes (a divisor of ``pe``) that take a beat of ``pe`` results in at most ``min_col_folds``
        cycles, the shortest gap between two result beats: the requantizer's and the engine's softmax's."""
        return next(n for n in range(1, pe + 1) if pe % n == 0 and n * min_col_folds >= pe)

    # ---- derived figures ----------------------------------------------------------------------
    @property
    def requant_groups(self) -> int:
        """Cycles the requantizer takes a beat: ``pe / requant_lanes`` (1: a beat every cycle)."""
        return self.pe // (self.requant_lanes or self.pe)

    @property
    def prod_bits(self) -> int:
        """Signed width of one weight x (int8 or uint8) activation product."""
        return self.weight_bits + self.act_bits

    @property
    def min_acc_bits(self) -> int:
        """Signed width of a ``max_cols``-term sum of products, the worst being int x uint."""
        bound = self.max_cols * (1 << (self.weight_bits - 1)) * ((1 << self.act_bits) - 1)
        return bound.bit_length() + 1

    @property
    def max_col_folds(self) -> int:
        return self.max_cols // self.simd

    @property
    def max_row_folds(self) -> int:
        return self.max_rows // self.pe

    @property
    def packed(self) -> bool:
        """Two channels share one DSP48E1 multiply (needs the packed weight to fit the A port: not on ECP5)."""
        return (self.pack_dsp and self.pe >= 2 and self.packed_bits <= self.dsp_a_bits
                and self.act_bits + 1 <= self.dsp_b_bits)

    @property
    def packed_bits(self) -> int:
        """Signed width of ``w_lo + w_hi * 2**prod_bits``."""
        return self.weight_bits + self.prod_bits + 1

    @property
    def sum_bits(self) -> int:
        """``acc + bias`` before the requant multiply."""
        return max(self.acc_bits, BIAS_BITS) + 1

    @property
    def tree_levels(self) -> int:
        return ceil_log2(self.simd)

    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "col_folds": unsigned(ceil_log2(self.max_col_folds + 1)),
            "row_folds": unsigned(ceil_log2(self.max_row_folds + 1)),
            "vectors": unsigned(ceil_log2(self.max_vectors + 1)),
            "shift": unsigned(SHIFT_BITS),
            "raw": unsigned(1),
            "act_unsigned": unsigned(1),
            "wide": unsigned(1),
        })

    def param_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "bias": data.ArrayLayout(signed(BIAS_BITS), self.pe),
            "mult": data.ArrayLayout(unsigned(self.mult_bits), self.pe),
        })

    def command(self, *, cols: int, rows: int, vectors: int, shift: int = 0, raw: bool = False,
                act_unsigned: bool = False, wide: bool = False) -> int:
        """The ``cmd`` payload of a job, as an integer; bad values raise a one-line ValueError."""
        checks = (("cols", cols, self.simd, self.max_cols), ("rows", rows, self.pe, self.max_rows),
                  ("vectors", vectors, 1, self.max_vectors))
        for name, v, unit, top in checks:
            if not (1 <= v <= top) or v % unit:
                raise ValueError(f"MVAU command {name}: expected a multiple of {unit} in {unit}..{top}, got {v}")
        if not 0 <= shift < (1 << SHIFT_BITS):
            raise ValueError(f"MVAU command shift: expected 0..{(1 << SHIFT_BITS) - 1}, got {shift}")
        if cols // self.simd < self.requant_groups:
            raise ValueError(f"MVAU command cols: the shared requantizer takes {self.requant_groups} cycles a beat; "
                             f"expected at least {self.requant_groups * self.simd}, got {cols}")
        fields = {"col_folds": cols // self.simd, "row_folds": rows // self.pe, "vectors": vectors,
                  "shift": shift, "raw": int(raw), "act_unsigned": int(act_unsigned), "wide": int(wide)}
        word, lay = 0, self.cmd_layout()
        for name, value in fields.items():
            word |= value << lay[name].offset
        return word


def _tag_layout(p: MVAUParams) -> data.StructLayout:
    """Per-step tag that travels down the MVAU pipeline with its data."""
    return data.StructLayout({
        "valid": 1, "first": 1, "last": 1, "from_stream": 1, "act_unsigned": 1, "raw": 1, "wide": 1,
        "nf": Shape.cast(range(p.max_row_folds)), "shift": unsigned(SHIFT_BITS)})


def _dsp_product(m: Module, a, b, name: str) -> Signal:
    """``a * b`` through the DSP48E1's M and P registers (no reset, as a DSP's): valid two cycles after its
    operands."""
    mreg = Signal(signed(len(a) + len(b)), name=f"{name}_m", reset_less=True)
    preg = Signal(signed(len(a) + len(b)), name=f"{name}_p", reset_less=True)
    m.d.sync += [mreg.eq(a * b), preg.eq(mreg)]
    return preg


SPLIT_BITS = 17     # a wide operand splits into a 17-bit unsigned low part and a high part of its signedness


def split_parts(a_bits: int, is_signed: bool) -> int:
    """How many multipliers :func:`split_product` takes for an ``a_bits`` operand: 1, or 2 beyond one port."""
    return 1 if a_bits <= SPLIT_BITS + is_signed else 2


def split_product(m: Module, a, b, name: str, b_high=None) -> Signal:
    """``a`` times unsigned ``b`` (at most 17 bits), valid two cycles after its operands. When ``a`` fits a
    multiplier's 18-bit port: through its M and P registers. Wider: as two partial products ``a[:17] * b`` and
    ``a[17:] * b_high`` (``b_high``: a register equal to ``b``, so that each multiplier has an operand register of
    its own; ``b`` when not given), each registered at its multiplier's output (M), then their sum (P), so that no
    adder sits between a multiplier and its register (an ECP5 MULT18X18D or a DSP48E1 without cascade takes one
    part each).
    The registers have no reset, as a DSP's.
    The product is signed when ``a`` is (the requantizer's ``acc + bias``), else unsigned (the softmax's
    distance below the row max)."""
    is_signed = a.shape().signed
    width = len(a) + len(b)
    preg = Signal(signed(width) if is_signed else unsigned(width), name=f"{name}_p", reset_less=True)
    if split_parts(len(a), is_signed) == 1:
        mreg = Signal.like(preg, name=f"{name}_m", reset_less=True)
        m.d.sync += [mreg.eq(a * b), preg.eq(mreg)]
        return preg
    high = a[SPLIT_BITS:].as_signed() if is_signed else a[SPLIT_BITS:]
    lo = Signal(unsigned(SPLIT_BITS + len(b)), name=f"{name}_mlo", reset_less=True)
    hi = Signal(signed(len(a) - SPLIT_BITS + len(b)) if is_signed else unsigned(len(a) - SPLIT_BITS + len(b)),
                name=f"{name}_mhi", reset_less=True)
    m.d.sync += [lo.eq(a[:SPLIT_BITS] * b), hi.eq(high * (b if b_high is None else b_high)),
                 preg.eq(lo + (hi << SPLIT_BITS))]
    return preg


class MVAUIssue(wiring.Component):
    """The MVAU's issue stage: the job register and the (vector, nf, sf) fold counters.

    Interface:
        ``cmd``: stream of :meth:`MVAUParams.cmd_layout`; taken while idle (``cmd.ready`` is ``~active``, a
        register: a job taken while the one before issues its last step would save one cycle, but put the issue
        decision, with ``room`` and ``x_valid``, into the command's producer's decode).
        ``room`` (in): the pipeline behind issue can take one more result (credit from the output FIFO).
        ``x_valid`` (in) / ``x_ready`` (out): the activation stream's handshake; ``x_ready`` is high
        when a fold ``nf == 0`` step can issue, which then takes the beat.
        ``step`` (out, the pipeline tag layout): the step issued in this cycle (``step.valid``), its
        first/last synapse fold flags, ``nf``, ``from_stream`` (``nf == 0``) and the job's mode bits.
        ``sf`` (out): the step's synapse fold (the vector buffer address).
        ``waddr`` (out): the step's weight word ``nf * col_folds + sf``.
        ``active`` (out): a job is loaded and has steps left.
    Timing: ``step`` and ``x_ready`` are combinational in ``room`` and ``x_valid`` (and otherwise come from
    registers); the counters advance at the clock edge after a step issues; a job's first step can issue the cycle
    after its command is taken, so jobs follow each other with one cycle between them.
    """

    def __init__(self, p: MVAUParams, addr_width: int):
        self.p = p
        super().__init__({
            "cmd": In(stream.Signature(p.cmd_layout())),
            "room": In(1),
            "x_valid": In(1),
            "x_ready": Out(1),
            "step": Out(_tag_layout(p)),
            "sf": Out(range(p.max_col_folds)),
            "waddr": Out(addr_width),
            "active": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        job = Signal(p.cmd_layout())
        active = self.active
        sf = self.sf
        nf = Signal(range(p.max_row_folds))
        vec = Signal(range(p.max_vectors))
        waddr = self.waddr

        # the job's last fold and vector indices, registered with the job, and flags (registers) that say whether each
        # counter is at 0 and at its last index, set a cycle ahead from equality tests of the registers: ``issue``
        # then takes four flip-flops, not the counters' comparators (the fold counters through cmd.ready into the
        # sequencer's decode were 7.78 ns at 485a352's seed 2); ``cmd.ready`` is the job register's ``~active`` alone
        # (``issue & job_last`` in it, the room, x_valid and the flags through cmd.ready across the die into the
        # sequencer's state enables were 7.05 ns at 2d1c080's seed 3 on an ECP5-85F)
        sf_end, nf_end, vec_end = Signal.like(sf), Signal.like(nf), Signal.like(vec)
        sf_last, nf_last, vec_last = Signal(), Signal(), Signal()
        sf_first, from_stream = Signal(init=1), Signal(init=1)          # sf == 0, nf == 0
        issue = Signal()
        m.d.comb += issue.eq(active & self.room & (~from_stream | self.x_valid))
        m.d.comb += self.x_ready.eq(active & self.room & from_stream)
        job_last = sf_last & nf_last & vec_last
        m.d.comb += self.cmd.ready.eq(~active)

        with m.If(issue):
            m.d.sync += [sf.eq(Mux(sf_last, 0, sf + 1)), waddr.eq(waddr + 1), sf_first.eq(sf_last),
                         sf_last.eq(Mux(sf_last, sf_end == 0, sf + 1 == sf_end))]
            with m.If(sf_last):
                m.d.sync += [nf.eq(Mux(nf_last, 0, nf + 1)), from_stream.eq(nf_last),
                             nf_last.eq(Mux(nf_last, nf_end == 0, nf + 1 == nf_end))]
                with m.If(nf_last):
                    m.d.sync += [vec.eq(Mux(vec_last, 0, vec + 1)), waddr.eq(0),
                                 vec_last.eq(Mux(vec_last, vec_end == 0, vec + 1 == vec_end))]
        with m.If(issue & job_last):
            m.d.sync += active.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):     # the counters are at 0 here (the last step wraps them)
            c = self.cmd.payload
            m.d.sync += [job.eq(c), active.eq(1),
                         sf_end.eq(c.col_folds - 1), nf_end.eq(c.row_folds - 1), vec_end.eq(c.vectors - 1),
                         sf_last.eq(c.col_folds == 1), nf_last.eq(c.row_folds == 1), vec_last.eq(c.vectors == 1)]

        tag0 = self.step
        m.d.comb += [tag0.valid.eq(issue), tag0.first.eq(sf_first), tag0.last.eq(sf_last),
                     tag0.from_stream.eq(from_stream), tag0.act_unsigned.eq(job.act_unsigned),
                     tag0.raw.eq(job.raw), tag0.wide.eq(job.wide), tag0.nf.eq(nf), tag0.shift.eq(job.shift)]
        return m


class MACArray(wiring.Component):
    """PE x SIMD multipliers and the SIMD adder trees: one dot-product step per cycle.

    Interface:
        ``act`` (in): ``simd`` activation lanes of ``act_bits``, lane 0 in the LSBs;
        ``act_unsigned`` (in): the lanes are uint8 (zero-extended) instead of int8 (sign-extended).
        ``w`` (in): ``pe * simd`` signed weights, ``W[p, s]`` in lane ``p*simd + s``.
        ``dot`` (out): ``pe`` signed lanes, ``dot[p] = sum_s W[p, s] * act[s]``.
    Timing: a free-running pipeline without enable, one step per cycle: ``dot`` holds the step
    presented :attr:`latency` = ``5 + ceil(log2 simd)`` cycles earlier (input registers, operand registers,
    DSP M, DSP P, lane split, then one register level per adder-tree halving). The input registers take the
    weight word and the activations where they arrive, so that the wires from the buffers to the multipliers
    (across the die on a large part) are a register-to-register path of their own; each multiplier has operand
    registers of its own, the activation's a copy per multiplier (:data:`~mlo_hw.hw.pipeline.KEEP`).
    With ``p.packed`` two channels share each multiplier (see the module docstring). The registers have no reset
    (the MVAU's tags say which steps are valid), so a flush of the engine does not fan out to them.
    """

    def __init__(self, p: MVAUParams):
        self.p = p
        self.latency = 5 + p.tree_levels
        super().__init__({
            "act": In(data.ArrayLayout(unsigned(p.act_bits), p.simd)),
            "act_unsigned": In(1),
            "w": In(data.ArrayLayout(signed(p.weight_bits), p.pe * p.simd)),
            "dot": Out(data.ArrayLayout(signed(p.prod_bits + p.tree_levels), p.pe)),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        # ---- operand registers (DSP A and B inputs) ---------------------------------------------
        # Activations as 9-bit signed: int8 sign-extended or uint8 zero-extended, in the input registers (the ninth
        # bit's select joins the MVAU's operand select in front of them, not a LUT between a register and each
        # multiplier's copy: 6.82 ns at 46c7007's seed 1 on the ECP5-85F)
        act_in = Signal(data.ArrayLayout(signed(p.act_bits + 1), p.simd), name="act_in", reset_less=True)
        w_in = Signal.like(self.w, name="w_in", reset_less=True)
        m.d.sync += [act_in[s].eq(Mux(self.act_unsigned, self.act[s].as_unsigned(), self.act[s].as_signed()))
                     for s in range(p.simd)]
        m.d.sync += w_in.eq(self.w)
        w = lambda ch, s: w_in[ch * p.simd + s]        # noqa: E731  weight (channel, simd lane)
        groups = [(c, c + 1) for c in range(0, p.pe - 1, 2)] if p.packed else []
        singles = [c for c in range(p.pe) if not any(c in g for g in groups)]
        # every multiplier has its own copy of its activation operand (a deliberate copy, kept apart by synthesis):
        # one register feeding the pe / 2 multipliers of a lane was a wire across the die in front of a multiplier
        a2 = {(c, s): kept_copy(m, act_in[s], f"a{c}_{s}")
              for c in [lo for lo, _ in groups] + singles for s in range(p.simd)}
        wpk = {}
        for (lo, hi) in groups:
            for s in range(p.simd):
                r = Signal(signed(p.packed_bits), name=f"wpk{lo}_{s}", reset_less=True)
                m.d.sync += r.eq(w(lo, s) + (w(hi, s) << p.prod_bits))
                wpk[lo, s] = r
        w2 = {}
        for c in singles:
            for s in range(p.simd):
                r = Signal(signed(p.weight_bits), name=f"w{c}_{s}", reset_less=True)
                m.d.sync += r.eq(w(c, s))
                w2[c, s] = r

        # ---- products (DSP M and P registers) ---------------------------------------------------
        prods = {key: _dsp_product(m, wpk[key], a2[key], f"pk{key[0]}_{key[1]}") for key in wpk}
        prods.update({key: _dsp_product(m, w2[key], a2[key], f"pr{key[0]}_{key[1]}") for key in w2})

        # ---- split packed products into channel lanes -------------------------------------------
        lanes = [[Signal(signed(p.prod_bits), name=f"l{c}_{s}", reset_less=True) for s in range(p.simd)]
                 for c in range(p.pe)]
        for (lo, hi) in groups:
            for s in range(p.simd):
                pp = prods[lo, s]
                m.d.sync += [lanes[lo][s].eq(pp[:p.prod_bits].as_signed()),
                             lanes[hi][s].eq(pp[p.prod_bits:].as_signed() + pp[p.prod_bits - 1])]
        for c in singles:
            for s in range(p.simd):
                m.d.sync += lanes[c][s].eq(prods[c, s])

        # ---- SIMD adder tree, one register level per halving ------------------------------------
        level = lanes
        for t in range(p.tree_levels):
            nxt = []
            for c in range(p.pe):
                row = level[c]
                width = len(row[0]) + 1
                sums = []
                for i in range(0, len(row), 2):
                    r = Signal(signed(width), name=f"t{t}_{c}_{i // 2}", reset_less=True)
                    m.d.sync += r.eq(row[i] + row[i + 1] if i + 1 < len(row) else row[i])
                    sums.append(r)
                nxt.append(sums)
            level = nxt
        m.d.comb += [self.dot[c].eq(level[c][0]) for c in range(p.pe)]
        return m


class Requantizer(wiring.Component):
    """Bias, multiplier, rounding shift and saturation of ``pe`` accumulators, on ``requant_lanes`` lanes.

    Interface (all inputs presented in the same cycle):
        ``valid`` (in): a set is presented; ``acc`` (in): ``pe`` signed ``acc_bits`` accumulators; ``prm`` (in,
        :meth:`MVAUParams.param_layout`): their bias and multiplier; ``shift``, ``raw``, ``wide`` (in): the job's
        mode.
        ``result`` (out): ``pe`` signed ``acc_bits`` lanes,
        ``numerics.requant(acc + bias, mult, shift, bits)`` with ``bits = RES_BITS`` when ``wide`` else
        ``act_bits``, sign-extended; raw mode: ``acc`` (bias 0, mult 1, shift 0, no saturation).
    Timing: ``result`` holds the set presented :attr:`latency` cycles earlier. With ``pe`` lanes (``groups =
    1``) a free-running pipeline, one set a cycle, latency 7 (acc + bias, the multiplier's operand copies, product M,
    product P, shift, round, saturate); ``valid`` is not used. With fewer lanes a set is held and its ``groups = pe / requant_lanes``
    groups of channels pass the lanes one a cycle (the held set shifts down a group a cycle); a set may follow the previous one ``groups`` cycles later
    at the earliest (the MVAU's result beats are ``col_folds >= groups`` cycles apart: :meth:`MVAUParams.command`
    checks it), latency ``7 + groups``. DSP48E1: two per lane (the ``acc + bias`` x ``mult`` product, as two
    partial products, each registered at its multiplier, summed in the P stage: :func:`split_product`).
    """

    CORE_LATENCY = 7

    @staticmethod
    def latency_of(p: MVAUParams) -> int:
        g = p.requant_groups
        return Requantizer.CORE_LATENCY + (g if g > 1 else 0)

    def __init__(self, p: MVAUParams):
        self.p = p
        self.groups = p.requant_groups
        self.lanes = p.pe // self.groups
        self.latency = self.latency_of(p)
        super().__init__({
            "valid": In(1),
            "acc": In(data.ArrayLayout(signed(p.acc_bits), p.pe)),
            "prm": In(p.param_layout()),
            "shift": In(SHIFT_BITS),
            "raw": In(1),
            "wide": In(1),
            "result": Out(data.ArrayLayout(signed(p.acc_bits), p.pe)),
        })

    def elaborate(self, platform):
        m = Module()
        p, G, k = self.p, self.groups, self.lanes
        ctl_layout = data.StructLayout({"valid": 1, "raw": 1, "wide": 1, "shift": unsigned(SHIFT_BITS),
                                        "group": range(max(G, 2))})
        ctl0 = Signal(ctl_layout)
        shift = Mux(self.raw, 0, self.shift)         # raw's 0 chosen here: the shifters' select is a register
        if G == 1:                                   # every channel at once, straight from the inputs
            acc, bias, mult = list(self.acc), list(self.prm.bias), list(self.prm.mult)
            m.d.comb += [ctl0.raw.eq(self.raw), ctl0.wide.eq(self.wide), ctl0.shift.eq(shift)]
        else:                                        # hold the set; group ``grp`` of k channels a cycle
            held = Signal(data.StructLayout({"acc": self.acc.shape(), "prm": self.prm.shape(), "ctl": ctl_layout}),
                          reset_less=True)          # data: ``feeding`` says when it holds a set
            grp = Signal(range(G))
            feeding = Signal()
            # the held channels shift down by a group a cycle, so that the lanes always take the first k: no
            # multiplexer on ``grp`` in front of the ``acc + bias`` adders (grp -> the group select -> the sum's
            # carry chains was bert_tiny_auto's routed critical path at d126af5, seed 2, 7.75 ns)
            with m.If(feeding):
                m.d.sync += grp.eq(grp + 1)
                m.d.sync += [v[j].eq(v[j + k]) for v in (held.acc, held.prm.bias, held.prm.mult)
                             for j in range(p.pe - k)]
                with m.If(grp == G - 1):
                    m.d.sync += feeding.eq(0)
            with m.If(self.valid):
                m.d.sync += [held.acc.eq(self.acc), held.prm.eq(self.prm), held.ctl.raw.eq(self.raw),
                             held.ctl.wide.eq(self.wide), held.ctl.shift.eq(shift), grp.eq(0), feeding.eq(1)]
            acc = [held.acc[i] for i in range(k)]
            bias = [held.prm.bias[i] for i in range(k)]
            mult = [held.prm.mult[i] for i in range(k)]
            m.d.comb += [ctl0.eq(held.ctl), ctl0.valid.eq(feeding), ctl0.group.eq(grp)]
        out, ctl = self._lanes(m, acc, bias, mult, ctl0)
        if G == 1:
            m.d.comb += [self.result[c].eq(out[c]) for c in range(p.pe)]
        else:                                        # gather groups 0 .. G-2; the last one joins as it leaves
            gathered = [Signal(signed(p.acc_bits), name=f"gathered{c}") for c in range(p.pe - k)]
            for j in range(G - 1):
                with m.If(ctl.valid & (ctl.group == j)):
                    m.d.sync += [gathered[j * k + i].eq(out[i]) for i in range(k)]
            m.d.comb += [self.result[c].eq(gathered[c]) for c in range(p.pe - k)]
            m.d.comb += [self.result[p.pe - k + i].eq(out[i]) for i in range(k)]
        return m

    def _lanes(self, m, acc, bias, mult, ctl0):
        """The CORE_LATENCY-stage pipeline over len(acc) channels: (registered results, their ctl)."""
        p, n = self.p, len(acc)
        ctl = [ctl0] + [Signal.like(ctl0, name=f"ctl{j}") for j in range(1, self.CORE_LATENCY + 1)]
        m.d.sync += [ctl[j].eq(ctl[j - 1]) for j in range(1, self.CORE_LATENCY + 1)]
        raw0 = ctl0.raw
        factor = [Signal(unsigned(p.mult_bits), name=f"factor{c}", reset_less=True) for c in range(n)]
        # The multiplier's operands pass two registers: ``acc + bias`` and the factor where they are made, then copies
        # of their own at the multiplier (kept: opt_merge folds a copy without the mark into one with it), a copy per
        # partial product for the factor. With one register between the adder and the multiplier, the placer put it
        # by the adder: 3.1-3.6 ns of wire to the MULT18X18D, the critical path of five routes of bert_tiny and
        # bert_tiny_auto since 7562d43 (at 2244104 seed 1: ``sum0`` -> MULT18X18D -> ``rq0_mlo``, 8.78 ns).
        # ``acc + bias`` (33 bits) is a ``pipeline.split_sum``: its halves summed side by side, the carry choosing in the
        # second register (the one at the multiplier): no carry chain of the whole width (11 levels on the XC7A35T).
        split = split_parts(p.sum_bits, True) == 2
        scaled = []
        for c in range(n):
            m.d.sync += factor[c].eq(Mux(raw0, 1, mult[c]))
            operand = split_sum(m, acc[c], Mux(raw0, 0, bias[c]), f"sum_at_mult{c}", p.sum_bits).as_signed()
            scale = kept_copy(m, factor[c], f"mult{c}")
            scale_high = kept_copy(m, factor[c], f"mult_high{c}") if split else None
            scaled.append(split_product(m, operand, scale, f"rq{c}", scale_high))
        # rshift_round(v, s) = floor((floor(2v / 2**s) + 1) / 2) for every s >= 0 (raw: s = 0).
        halved = [Signal(signed(len(scaled[c]) + 1), name=f"rs{c}") for c in range(n)]
        for c in range(n):
            m.d.sync += halved[c].eq((scaled[c] << 1) >> ctl[4].shift)
        # The rounding adds only over the low ``kept`` bits of ``halved``, enough for the raw result (2 acc) and
        # for a saturation test at RES_BITS; a ``halved`` beyond them (``over``) saturates by its sign. A carry
        # chain of ``kept`` bits, not of the product's width.
        kept = max(p.acc_bits + 1, nx.RES_BITS + 2)
        rounded = [Signal(signed(kept), name=f"rd{c}") for c in range(n)]
        over = [Signal(name=f"rd_over{c}") for c in range(n)]
        negative = [Signal(name=f"rd_neg{c}") for c in range(n)]
        for c in range(n):
            m.d.sync += [rounded[c].eq((halved[c][:kept].as_signed() + 1) >> 1),
                         over[c].eq(~fits_signed(halved[c], kept)), negative[c].eq(halved[c][-1])]
        wide, raw = ctl[6].wide, ctl[6].raw
        lo_out = Mux(wide, -(1 << (nx.RES_BITS - 1)), -(1 << (p.act_bits - 1)))
        hi_out = Mux(wide, (1 << (nx.RES_BITS - 1)) - 1, (1 << (p.act_bits - 1)) - 1)
        out = [Signal(signed(p.acc_bits), name=f"rq_out{c}") for c in range(n)]
        for c in range(n):
            v = rounded[c]           # saturated by a range test on its high bits, no comparator's carry chain
            fits = ~over[c] & Mux(wide, fits_signed(v, nx.RES_BITS), fits_signed(v, p.act_bits))
            sat = Mux(fits, v, Mux(Mux(over[c], negative[c], v[-1]), lo_out, hi_out))
            m.d.sync += out[c].eq(Mux(raw, v, sat))
        return out, ctl[self.CORE_LATENCY]


class MVAU(wiring.Component):
    """Matrix-vector activation unit; see the module docstring for interface, latency and throughput.

    Built from :class:`MVAUIssue` (job and fold counters), a vector buffer, :class:`MACArray`
    (multipliers and adder trees), the accumulators, :class:`Requantizer` and an output FIFO.
    """

    # Register stages from issue to the output FIFO write, not counting the SIMD adder tree:
    # buffer/weight read, MAC input registers, operand registers (DSP A/B), product (DSP M), DSP P, lane split,
    # accumulator, acc + bias, the requant multiplier's operand copies, requant product (M), requant product (P),
    # shift, round, saturate.
    FIXED_STAGES = 14
    FIFO_LATENCY = 1        # SyncFIFO: a write is readable the next cycle

    def __init__(self, params: MVAUParams):
        self.p = params
        self.pipeline_stages = (self.FIXED_STAGES + params.tree_levels
                                + Requantizer.latency_of(params) - Requantizer.CORE_LATENCY)
        # cmd handshake (cycle 0) -> issues in cycles 1..N -> last FIFO write at N + pipeline_stages
        # -> last output handshake at N + pipeline_stages + FIFO_LATENCY.
        self.latency = self.pipeline_stages + self.FIFO_LATENCY
        self.fifo_depth = self.pipeline_stages + 2
        p = params
        super().__init__({
            "cmd": In(stream.Signature(p.cmd_layout())),
            "x": In(stream.Signature(data.ArrayLayout(signed(p.act_bits), p.simd))),
            "weights": In(memory.ReadPort.Signature(
                addr_width=max(1, ceil_log2(p.max_row_folds * p.max_col_folds)),
                shape=data.ArrayLayout(signed(p.weight_bits), p.pe * p.simd))),
            "params": In(memory.ReadPort.Signature(addr_width=max(1, ceil_log2(p.max_row_folds)),
                                                   shape=p.param_layout())),
            "o": Out(stream.Signature(data.ArrayLayout(signed(p.acc_bits), p.pe))),
            "busy": Out(1), "issuing": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        stages = 0
        tag_layout = _tag_layout(p)

        def stage(tag):
            nonlocal stages
            stages += 1
            nxt = Signal(tag_layout, name=f"tag{stages}")
            m.d.sync += nxt.eq(tag)
            return nxt

        # ---- issue: job registers and the (vector, nf, sf) counters, with credit from the FIFO ----
        m.submodules.fold_counters = issue_u = MVAUIssue(p, len(self.weights.addr))
        fifo = m.submodules.fifo = SyncFIFO(width=len(self.o.payload.as_value()), depth=self.fifo_depth)
        # credit: results committed at issue and not yet read out of the FIFO (those in the pipeline plus the
        # FIFO's level); ``room`` a register, so x.ready and issue come straight from flip-flops
        tag0 = issue_u.step
        issue = tag0.valid
        room, used = queue_credit(m, self.fifo_depth, issue & tag0.last, self.o.valid & self.o.ready, "fifo")
        wiring.connect(m, wiring.flipped(self.cmd), issue_u.cmd)
        m.d.comb += [issue_u.room.eq(room),
                     issue_u.x_valid.eq(self.x.valid), self.x.ready.eq(issue_u.x_ready)]

        # ---- stage 1: weight word and activation beat (buffer replay for nf > 0) ----------------
        m.d.comb += [self.weights.addr.eq(issue_u.waddr), self.weights.en.eq(issue)]
        # collision free: a word is read in the cycle it is written only on a stream step, which takes x_reg
        vbuf = m.submodules.vbuf = memory.Memory(shape=unsigned(p.simd * p.act_bits),
                                                 depth=p.max_col_folds, init=[], attrs=NO_COLLISION)
        wr = vbuf.write_port()
        rd = vbuf.read_port(transparent_for=())
        m.d.comb += [wr.addr.eq(issue_u.sf), wr.data.eq(self.x.payload.as_value()),
                     wr.en.eq(issue & tag0.from_stream), rd.addr.eq(issue_u.sf), rd.en.eq(issue)]
        x_reg = Signal(p.simd * p.act_bits)
        with m.If(issue):
            m.d.sync += x_reg.eq(self.x.payload.as_value())
        tag = stage(tag0)

        # ---- multiply and sum over SIMD ---------------------------------------------------------
        m.submodules.mac = mac = MACArray(p)
        m.d.comb += [mac.act.eq(Mux(tag.from_stream, x_reg, rd.data)), mac.act_unsigned.eq(tag.act_unsigned),
                     mac.w.eq(self.weights.data)]
        for _ in range(mac.latency):
            tag = stage(tag)

        # ---- accumulator over the synapse folds -------------------------------------------------
        # The per-channel parameters are read now so they arrive with the accumulator.
        m.d.comb += [self.params.addr.eq(tag.nf), self.params.en.eq(tag.valid & tag.last)]
        acc = [Signal(signed(p.acc_bits), name=f"acc{c}") for c in range(p.pe)]
        with m.If(tag.valid):
            for c in range(p.pe):
                m.d.sync += acc[c].eq(Mux(tag.first, mac.dot[c], acc[c] + mac.dot[c]))
        tag = stage(tag)
        done = Signal(tag_layout)        # only the last step of a fold carries a result onwards
        m.d.comb += [done.eq(tag), done.valid.eq(tag.valid & tag.last)]

        # ---- requantization (raw mode: bias 0, mult 1, shift 0, no saturation) ------------------
        m.submodules.requant = rq = Requantizer(p)
        m.d.comb += [rq.valid.eq(done.valid), rq.prm.eq(self.params.data), rq.shift.eq(done.shift),
                     rq.raw.eq(done.raw), rq.wide.eq(done.wide)]
        m.d.comb += [rq.acc[c].eq(acc[c]) for c in range(p.pe)]
        tag = done
        for _ in range(rq.latency):
            tag = stage(tag)
        assert stages == self.pipeline_stages, (stages, self.pipeline_stages)

        # ---- output FIFO with credit-based issue ------------------------------------------------
        m.d.comb += [fifo.w_en.eq(tag.valid), fifo.w_data.eq(rq.result.as_value())]
        m.d.comb += [self.o.valid.eq(fifo.r_rdy), self.o.payload.eq(fifo.r_data), fifo.r_en.eq(self.o.ready)]
        m.d.comb += [self.busy.eq(issue_u.active | (used != 0)), self.issuing.eq(issue_u.active)]
        return m
