"""The rolled layer engine: one BERT encoder layer in hardware, every layer of the model run through it.

:class:`LayerEngine` composes the blocks: the memory system (:class:`~mlo_hw.hw.loop_ctrl.WeightStreamer`,
weight tiles double-buffered while the previous tile computes), one matrix-vector unit
(:class:`~mlo_hw.hw.mvau.MVAU`) for every product, :class:`~mlo_hw.hw.softmax.Softmax`,
:class:`~mlo_hw.hw.layernorm.LayerNorm` (used for both LayerNorms, parameters reloaded per use),
:class:`~mlo_hw.hw.gelu.GeluTable`, the control registers (:class:`~mlo_hw.hw.regs.ControlRegs`) and an input
reader / output writer on the same AXI4 port. Activations stay on chip between layers.

Interface (clock domain ``sync``; :class:`EngineTop` renames it to ``aclk``/``aresetn``):
    ``m_axi_*``  AXI4 master: reads the weight image and the input activations, writes the output.
    ``s_axil_*`` AXI4-Lite slave: the register map of :mod:`mlo_hw.hw.regs`.
    ``irq``      high while DONE or ERROR is set and CTRL.irq_enable.
DRAM formats: input int16 [seq_len, hidden] row-major at INPUT_BASE (the residual stream, see
``docs/numerics.md``), output likewise at OUTPUT_BASE (both multiples of the AXI beat). Attention mask: the first TOKENS keys are attended (register TOKENS, 1..seq_len,
read at START; outside that range START sets ERROR with ERROR_CODE.bad_tokens and does not run), keys at
TOKENS and beyond, and the padding up to ``seq_padded``, are masked (BERT padding masks are prefixes).
Every ``seq_len`` row is computed and stored; rows of padding tokens are don't-cares for the host.
CTRL.soft_reset (in any phase) and a weight read error abandon the run: the AXI masters issue no new
burst and complete those in flight (weight streamer ``cancel``/DMA drop, :class:`~mlo_hw.hw.engine.activation_io.BufferLoad` and
:class:`~mlo_hw.hw.engine.activation_io.BufferStore` ``cancel``); STATUS.busy stays 1 until the bus is idle and CTRL.start is refused
until then. An error response on the input (the first failing read beat) or the output (the failing write
burst) likewise ends the run with ERROR, not DONE; ERROR_ADDR and ERROR_CODE name the first error (a
weight read's, else the input's, else the output's). The input reader and the weight streamer share AR/R through
:class:`~mlo_hw.hw.axi_interconnect.ReadPortSwitch` (handed over only when the port is quiet).

Schedule of a layer (one phase after another). The sequencer has one state variable, its FSM: a state names
the phase and its step (``Q_TILE_WAIT``, ``Q_LATCH``, ``Q_JOB``, ``Q_WAIT``, ..., ``SCORES_JOB``, ``LN1_RUN``),
and ``op``, which every datapath multiplexer selects on, is decoded from it::

    Q, K, V   tiles of tile_rows channels: per tile every token row of X streams through the MVAU
              (narrowed per channel from int16 to int8 by the header's ``narrow`` shifts);
              Q row-major, K in PE banks by token (K rows are the MVAU's weight words for Q.K^T),
              V transposed in PE banks by channel (V^T rows are the weight words for P.V)
    per head  SCORES: Q_h . K_h^T raw -> serializer -> softmax (mask) -> P [S, S] uint8
              PV: P . V_h requantized (ctx_mult, ctx_shift, zero bias) -> CTX
    O         CTX -> Y (int16);  LN1: LayerNorm(X + Y) -> Y (int16, in place)
    FFN_UP    Y (narrowed) -> GELU table -> F [S, I] (uint8);  FFN_DOWN: F -> X (int16);
    LN2       LayerNorm(Y + X) -> X (int16, in place): the next layer's input

Buffers (words of ``simd`` elements, row-major ``[rows, cols]`` at word ``row * cols/simd + col/simd``),
reused by phase so that only four exist (sizes: :func:`mlo_hw.perf.onchip_plan`):
    X [S, H]     int16: the layer input; FFN down's output; LN2 writes the next layer's input in place
    Y [S, H]     int16: Q (int8 values) during attention, then O's output, LN1's output in place (FFN
                 input, LN2's residual)
    P [S, S]     one head's probabilities (uint8)
    WORK         ``pe`` banks: K (bank = token % pe) and V^T (bank = channel % pe) side by side, so
                 one word of every bank is one MVAU weight word; CTX row-major (word a in bank a % pe);
                 then the FFN intermediate [S, I] (uint8 GELU codes) over all of it.
P and WORK hold bytes; X and Y hold int16 elements.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Array, Cat, ClockDomain, Const, Module, Mux, Signal, unsigned
from amaranth.hdl import ResetInserter
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..model import numerics as nx
from .axi import AxiParams, axi_read_master_members, axi_write_master_members, axil_slave_members, forward_ports
from .axi_interconnect import ReadPortSwitch
from .buffers import PARAM_SECTIONS, ParamGeometry
from ..config import ConfigError
from .engine.block_mover import BlockMover, Transfer
from .engine.vector_io import Serializer, VectorReader
from .engine.layernorm_lanes import LN_LANES, LayerNormLanes
from .engine.activation_operand import ActivationOperand, Narrow
from .engine.attention_weights import AttentionWeights
from .engine.param_copier import CopyKind, ParamCopier
from .engine.result_writer import Placement, ResultWriter
from .engine.tile_params import TileParamLatch
from .gelu import GeluTable
from .loop_ctrl import WeightStreamer
from .mvau import MVAU, MVAUParams
from ..perf import check_fit
from .regs import AXIL_ADDR_BITS, ControlRegs
from .softmax import Softmax
from ..model.tiled import scratch_layout
from ..model.weight_image import HEADER_FIELDS, layout

__all__ = ["Op", "EngineGeometry", "with_seq_len", "VectorReader", "Serializer", "Narrow", "trace_members",
           "LayerEngine", "EngineTop", "engine_top"]


class Op(enum.Enum, shape=4):
    """The phase the engine is in: selects every multiplexer of the datapath."""
    IDLE = 0
    LOAD = 1           # X from DRAM (the input; tiled: a block of the layer input or the residual)
    Q = 2
    K = 3
    V = 4
    SCORES = 5
    PV = 6
    O = 7
    LN1 = 8
    FFN_UP = 9
    FFN_DOWN = 10
    LN2 = 11
    STORE = 12         # X to DRAM (the output; tiled: a block of the layer output)
    LOAD_Q = 13        # tiled: a block of Q from scratch into Y
    STORE_QKV = 14     # tiled: a block's Q, K and V^T into scratch


RES_BYTES = nx.RES_BITS // 8   # bytes of one element of the residual stream (X, Y, DRAM input and output)
MATRIX_OPS = {"q": Op.Q, "k": Op.K, "v": Op.V, "o": Op.O, "ffn_up": Op.FFN_UP, "ffn_down": Op.FFN_DOWN}


@dataclass(frozen=True)
class EngineGeometry:
    """Sizes of the engine, from the config (checked: the layouts below need them)."""
    seq: int           # seq_padded: rows of every activation buffer, keys of a score row
    tokens: int        # model.seq_len: rows read from / written to DRAM
    hidden: int
    inter: int
    heads: int
    head_dim: int
    pe: int
    simd: int
    tile_rows: int
    beat_bytes: int
    rows: int = 0      # token rows of a block (the plan's; ``seq`` when every activation stays on chip)
    blocks: int = 1    # blocks of the DRAM-tiled schedule (1: on chip)

    @property
    def tiled(self) -> bool:
        return self.blocks > 1

    @classmethod
    def from_config(cls, cfg, block: int | None = None) -> "EngineGeometry":
        """The geometry of ``cfg``'s engine with activation blocks of ``block`` token rows (None: all on chip;
        the engine takes the plan's, :func:`mlo_hw.plan.plan`)."""
        f, m = cfg.folding, cfg.model
        for name in ("weight_bits", "act_bits"):
            if getattr(cfg.numerics, name) != 8:
                raise ConfigError(f"numerics.{name}: the engine's buffers hold bytes; expected 8, got "
                                  f"{getattr(cfg.numerics, name)}")
        if f.simd % f.pe:
            raise ConfigError(f"folding.pe: the engine writes PE results into SIMD-byte words, so pe={f.pe} "
                              f"must divide simd={f.simd}")
        if f.tile_rows % f.simd:
            raise ConfigError(f"folding.tile_rows: {f.tile_rows} must be a multiple of folding.simd={f.simd} "
                              f"(a tile's channels start on a buffer word)")
        if f.pe & (f.pe - 1):
            raise ConfigError(f"folding.pe: the engine's attention banks need a power of two, got {f.pe}")
        b, rw = cfg.axi_data_bytes, f.simd * RES_BYTES
        if b % rw and rw % b:
            raise ConfigError(f"folding.simd: a word of {f.simd} int16 elements ({rw} bytes) must divide or be a "
                              f"multiple of the AXI beat ({b} bytes)")
        if (m.seq_len * m.hidden * RES_BYTES) % b:
            raise ConfigError(f"model.hidden: an activation tensor ({m.seq_len} x {m.hidden} int16) is not a "
                              f"whole number of {b}-byte AXI beats")
        if f.simd % 2 or (b % f.simd and f.simd % b):
            raise ConfigError(f"folding.simd: activations move in words of simd bytes, so simd={f.simd} must be even "
                              f"and divide or be a multiple of the AXI beat ({b} bytes)")
        rows = cfg.seq_padded if block is None else block
        return cls(cfg.seq_padded, m.seq_len, m.hidden, m.intermediate, m.heads, cfg.head_dim, f.pe, f.simd,
                   f.tile_rows, b, rows, cfg.seq_padded // rows)

    def words(self, cols: int) -> int:
        """Buffer words per row of ``cols`` elements."""
        return cols // self.simd

    @property
    def work_words(self) -> int:
        """On chip WORK holds K, V^T and CTX (3 x [S, H]) during attention, then the FFN intermediate [S, I];
        tiled, a block's K and V^T (pass 1), then its CTX and its FFN intermediate (pass 2)."""
        r, h = self.rows, self.hidden
        return self.words(max(2 * r * h, r * self.inter) if self.tiled else max(3 * r * h, r * self.inter))

    @property
    def addr_bits(self) -> int:
        """Width of a word address into any activation buffer."""
        return max(self.work_words, self.words(self.rows * self.seq)).bit_length()


def with_seq_len(cfg, seq_len: int):
    """The config with another sequence length (e.g. bert_tiny at 32 tokens, or a decode step at 1), checked
    like a loaded config (registers, address width, the part's block RAM)."""
    import dataclasses
    from ..config import _check_fit, _validate
    new = dataclasses.replace(cfg, name=f"{cfg.name}_s{seq_len}",
                              model=dataclasses.replace(cfg.model, seq_len=seq_len))
    _validate(new)
    _check_fit(new)
    return new


class _Buffer:
    """A word memory (``lanes`` elements of ``lane_bits`` a word, one write enable per element) with one
    read and one write port."""

    def __init__(self, m, name: str, words: int, lanes: int, lane_bits: int = 8):
        self.mem = Memory(shape=unsigned(lane_bits * lanes), depth=words, init=[])
        m.submodules[name] = self.mem
        self.w = self.mem.write_port(granularity=lane_bits)
        self.r = self.mem.read_port()


class _Banks:
    """``n`` (a power of two) banks of words. Row-major word ``a`` lives in bank ``a % n`` at ``a // n``;
    the attention operands (K rows, V^T rows) use the banks side by side, one word each."""

    def __init__(self, m, name: str, words_per_bank: int, word_bytes: int, n: int):
        self.banks = [_Buffer(m, f"{name}{b}", words_per_bank, word_bytes) for b in range(n)]
        self.lp = (n - 1).bit_length()
        self.sel = Signal(range(max(n, 2)), name=f"{name}_sel")

    def _split(self, addr):
        return (addr[:self.lp], addr[self.lp:]) if self.lp else (Const(0, 1), addr)

    def read(self, m, addr, en):
        """Row-major read: the word arrives one cycle later on the returned value."""
        bank, local = self._split(addr)
        for b in self.banks:
            m.d.comb += [b.r.addr.eq(local), b.r.en.eq(en)]
        with m.If(en):
            m.d.sync += self.sel.eq(bank)
        return Array(b.r.data for b in self.banks)[self.sel]

    def write(self, m, addr, data, lanes):
        bank, local = self._split(addr)
        for i, b in enumerate(self.banks):
            m.d.comb += [b.w.addr.eq(local), b.w.data.eq(data), b.w.en.eq(Mux(bank == i, lanes, 0))]

    def read_side_by_side(self, m, local):
        for b in self.banks:
            m.d.comb += b.r.addr.eq(local)
        return Cat(*(b.r.data for b in self.banks))


def trace_members(cfg) -> dict:
    """Debug outputs of a traced engine (``LayerEngine(cfg, trace=True)``, simulation only): the handshakes
    of the tensors the engine produces on chip, for a harness that records them without looking inside.
    ``trace_mvau_*``: an MVAU result beat (``pe`` lanes of signed ``acc_bits``, lane 0 in the LSBs);
    ``trace_probs_*``: a softmax probability (uint8); ``trace_ln_*``: per LayerNorm lane, an output element
    (int16, lane i in bits 16i..16i+15). ``*_valid`` is high in the cycle the handshake completes.
    ``trace_compute`` and ``trace_stall`` are the COMPUTE_CYCLES and STALL_CYCLES counters' increments."""
    mp = MVAUParams.from_config(cfg)
    return {"trace_mvau_valid": Out(1), "trace_mvau_data": Out(mp.pe * mp.acc_bits),
            "trace_probs_valid": Out(1), "trace_probs_data": Out(8),
            "trace_ln_valid": Out(LN_LANES), "trace_ln_data": Out(LN_LANES * nx.RES_BITS),
            "trace_compute": Out(1), "trace_stall": Out(1)}


class LayerEngine(wiring.Component):
    """The engine (see the module docstring). Ports: ``m_axi_*``, ``s_axil_*``, ``irq`` and the
    debug outputs ``op`` (an :class:`Op`) and ``layer`` for testbenches and profiling; with ``trace``,
    also :func:`trace_members` (no logic of its own: wires out of the datapath)."""

    def __init__(self, cfg, trace: bool = False):
        self.cfg, self.trace = cfg, trace
        self.plan = check_fit(cfg)
        self.g = g = EngineGeometry.from_config(cfg, self.plan.block)
        self.axi = AxiParams.from_config(cfg)
        self.mvau_params = MVAUParams.from_config(cfg)
        super().__init__({
            **axi_read_master_members(self.axi), **axi_write_master_members(self.axi),
            **axil_slave_members(AXIL_ADDR_BITS), "irq": Out(1),
            "op": Out(Op), "layer": Out(16), **(trace_members(cfg) if trace else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, g, ap, mp = self.cfg, self.g, self.axi, self.mvau_params
        S, H, I, pe, simd, tr = g.seq, g.hidden, g.inter, g.pe, g.simd, g.tile_rows
        R, T, tiled = g.rows, g.blocks, g.tiled        # a block's token rows (S on chip), blocks per pass
        dh, ab = g.head_dim, cfg.numerics.act_bits
        words = g.words
        word_bits = 8 * simd                  # a word of P, WORK: simd bytes
        res_bits = nx.RES_BITS * simd         # a word of X, Y: simd int16 elements

        # ---- control registers, memory system, compute blocks ----------------------------------------
        m.submodules.regs = regs = ControlRegs(cfg)
        m.submodules.ws = ws = WeightStreamer(cfg, blocks=T)
        flush = Signal()            # resets the compute blocks at start and soft reset
        compute = {}
        for name, block in (("mvau", MVAU(mp)), ("softmax", Softmax.from_config(cfg)),
                            ("layernorm", LayerNormLanes.from_config(cfg)),
                            ("gelu", GeluTable.from_config(cfg)), ("score_ser", Serializer(pe, mp.acc_bits)),
                            ("operand", ActivationOperand(H, simd, g.addr_bits, words(max(H, I, S)), S))):
            m.submodules[name] = ResetInserter({"sync": flush})(block)
            compute[name] = block
        mvau, softmax, gelu = compute["mvau"], compute["softmax"], compute["gelu"]
        score_ser, operand, ln_lanes = (compute[n] for n in ("score_ser", "operand", "layernorm"))
        # activations to and from DRAM: the input and output (int16 [tokens, H]); tiled, every block
        m.submodules.mover = mover = BlockMover(ap, simd=simd, pe=pe, max_words=2 * words(R * H),
                                                max_runs=max(g.heads, H // pe), local_bits=g.addr_bits)

        for name in axil_slave_members(AXIL_ADDR_BITS):
            port, inner = getattr(self, name), getattr(regs, name)
            flow = axil_slave_members(AXIL_ADDR_BITS)[name].flow
            m.d.comb += (port.eq(inner) if flow == Out else inner.eq(port))
        m.d.comb += self.irq.eq(regs.irq)
        tokens = Signal(range(g.tokens + 1))     # TOKENS, latched at START
        bad_tokens = Signal()                   # START with TOKENS outside 1..seq_len (sticky until the next)
        bad_scratch = Signal()                  # START with a misaligned or overlapping SCRATCH_BASE (tiled)
        scratch_ready = Signal()                # tiled: this layer's K and V^T are in scratch DRAM
        blk = Signal(range(max(g.blocks, 2)))   # the token block of the pass (tiled)
        scratch_bad = Signal()
        if g.tiled:
            sb = regs.scratch_base
            img, io = layout(cfg).total_bytes, g.tokens * H * RES_BYTES

            def overlaps(base, n):
                return (sb < base + n) & (base < sb + scratch_layout(cfg).bytes)
            m.d.comb += scratch_bad.eq((sb[:12] != 0) | overlaps(regs.weight_base, img)
                                       | overlaps(regs.input_base, io) | overlaps(regs.output_base, io))

        # AXI: the activation mover owns AR/R while it loads, the weight streamer otherwise (the port changes
        # hands only when it is quiet, see ReadPortSwitch); W is the mover's.
        m.submodules.read_port = rport = ReadPortSwitch(ap, max_bursts=ws.outstanding + 1)
        loading = Signal()
        m.d.comb += rport.sel.eq(loading)
        forward_ports(m, self, rport, axi_read_master_members(ap))
        for i, master in enumerate((ws, mover)):        # s0: the weight streamer, s1: the activation mover
            for name, member in axi_read_master_members(ap).items():
                sw, own = getattr(rport, name.replace("m_axi", f"s{i}_axi")), getattr(master, name)
                m.d.comb += sw.eq(own) if member.flow == Out else own.eq(sw)
        for name, member in axi_write_master_members(ap).items():
            port, inner = getattr(self, name), getattr(mover, name)
            m.d.comb += (port.eq(inner) if member.flow == Out else inner.eq(port))

        # ---- activation buffers --------------------------------------------------------------------
        # X: layer input/output; Y: Q during attention, then O's and LN1's output (int16); P: one head's
        # probabilities; WORK (pe banks): K, V^T and CTX during attention, then the FFN intermediate.
        # (tiled: a block's rows; pass 1 keeps K and V^T in WORK, pass 2 CTX from word 0)
        wsh = words(R * H)
        K_LOCAL, V_LOCAL = 0, wsh // pe                 # bank-local word offsets of K and V^T
        CTX_BASE, F_BASE = (0 if tiled else 2 * wsh), 0  # row-major word offsets inside WORK
        bufs = {name: _Buffer(m, f"buf_{name}", n, simd, lane_bits) for name, n, lane_bits in (
            ("x", wsh, nx.RES_BITS), ("y", wsh, nx.RES_BITS), ("p", words(R * S), 8))}
        work = _Banks(m, "buf_work", g.work_words // pe, simd, pe)
        for b in list(bufs.values()) + work.banks:
            m.d.comb += b.w.en.eq(0)

        op = Signal(Op)
        m.d.comb += self.op.eq(op)
        layer = Signal(16)
        m.d.comb += self.layer.eq(layer)
        slot = layer[0]

        # ---- layer header --------------------------------------------------------------------------
        hdr = {f: Signal(32, name=f"hdr_{f}") for f in HEADER_FIELDS}

        # ---- MVAU operands --------------------------------------------------------------------------
        nfg = tr // pe
        is_matrix_op = Signal()
        m.d.comb += is_matrix_op.eq(Cat(*(op == o for o in MATRIX_OPS.values())).any())
        # a tile's bias/mult, latched in two sets so that jobs overlap (PV reads a fixed multiplier instead)
        m.submodules.tile_params = tparams = TileParamLatch(mp, tr, R)
        m.d.comb += [tparams.matrix.eq(is_matrix_op), tparams.fixed_mult.eq(hdr["ctx_mult"]),
                     ws.caddr.eq(tparams.src_addr), tparams.src_data.eq(Cat(ws.bias.as_value(), ws.mult.as_value()))]
        wiring.connect(m, tparams.params, mvau.params)
        att_words = R * S * dh // (pe * simd)                   # weight words an attention product reads
        issued = Signal(range(max(R * nfg * words(max(H, I)), att_words) + 1))   # weight words read by the job
        with m.If(mvau.weights.en):
            m.d.sync += issued.eq(issued + 1)
        m.d.comb += ws.waddr.eq(mvau.weights.addr)
        head_kword = Signal(range(words(H) + 1))                # h * dh / simd: the head's columns of Q and K
        head_vrow = Signal(range(words(S * H) // pe + 1))      # (h * dh / pe) * S / simd: the head's V^T rows
        # the attention products read K_h / V_h^T side by side from WORK's banks, following the MVAU's reads
        # (tiled: K_h and V_h^T stream from scratch DRAM into the tile buffer like weight tiles)
        if tiled:
            m.d.comb += mvau.weights.data.eq(ws.wdata)
        else:
            m.submodules.attention = attw = AttentionWeights(g.work_words // pe, words(max(S, dh)), max(S, dh) // pe)
            m.d.comb += attw.en.eq(mvau.weights.en)
            with m.If((op == Op.SCORES) | (op == Op.PV)):
                m.d.comb += mvau.weights.data.eq(work.read_side_by_side(m, attw.addr))
            with m.Else():
                m.d.comb += mvau.weights.data.eq(ws.wdata)

        # the x stream: the op's source buffer through the activation operand (narrowed per channel for Q, K, V
        # and FFN up); the byte buffers' words are spread into its int16 lanes
        def spread(byte_word):
            return Cat(*(Cat(byte_word.word_select(i, 8), Const(0, nx.RES_BITS - 8)) for i in range(simd)))

        src = {Op.Q: "x", Op.K: "x", Op.V: "x", Op.SCORES: "y", Op.PV: "p", Op.FFN_UP: "y"}
        with m.Switch(op):
            for o, name in src.items():
                with m.Case(o):
                    b = bufs[name]
                    m.d.comb += [b.r.addr.eq(operand.rd_addr), b.r.en.eq(operand.rd_en),
                                 operand.rd_data.eq(b.r.data if name != "p" else spread(b.r.data))]
            with m.Case(Op.O, Op.FFN_DOWN):
                m.d.comb += operand.rd_data.eq(spread(work.read(m, operand.rd_addr, operand.rd_en)))
        wiring.connect(m, operand.o, mvau.x)

        # ---- MVAU results -------------------------------------------------------------------------------
        res_valid = Signal()
        res_data = Signal(8 * pe)
        mvau_bytes = Cat(*(mvau.o.payload[p][:8] for p in range(pe)))
        res_wide = Cat(*(mvau.o.payload[p][:nx.RES_BITS] for p in range(pe)))   # int16 (Q: int8 sign-extended)
        with m.Switch(op):
            with m.Case(Op.SCORES):
                m.d.comb += [score_ser.i.valid.eq(mvau.o.valid), score_ser.i.payload.eq(mvau.o.payload),
                             mvau.o.ready.eq(score_ser.i.ready)]
            with m.Case(Op.FFN_UP):
                m.d.comb += [gelu.i.valid.eq(mvau.o.valid), gelu.i.payload.eq(mvau_bytes),
                             mvau.o.ready.eq(gelu.i.ready), gelu.o.ready.eq(1),
                             res_valid.eq(gelu.o.valid), res_data.eq(gelu.o.payload)]
            with m.Default():
                m.d.comb += [mvau.o.ready.eq(1), res_valid.eq(mvau.o.valid), res_data.eq(mvau_bytes)]

        # the result writer places each beat (PE channels of one vector) in its consumer's layout
        m.submodules.results = writer = ResultWriter(
            pe=pe, simd=simd, seq=R, hidden=H, intermediate=I, tile_rows=tr, k_local=K_LOCAL, v_local=V_LOCAL,
            bank_words=g.work_words // pe)
        m.d.comb += [writer.i.valid.eq(res_valid), writer.i.payload.bytes.eq(res_data),
                     writer.i.payload.wide.eq(res_wide)]
        for i, b in enumerate(work.banks):
            m.d.comb += [b.w.addr.eq(writer.banks[i].addr), b.w.data.eq(writer.banks[i].data),
                         b.w.en.eq(writer.banks[i].en)]
        for o, name in {Op.Q: "y", Op.O: "y", Op.FFN_DOWN: "x"}.items():
            with m.If(op == o):
                b = bufs[name]
                m.d.comb += [b.w.addr.eq(writer.rows.addr), b.w.data.eq(writer.rows.data), b.w.en.eq(writer.rows.en)]
        res_count = writer.count

        # ---- scores -> softmax -> P ---------------------------------------------------------------------
        key = Signal(range(S))
        m.d.comb += [softmax.i.valid.eq(score_ser.o.valid), score_ser.o.ready.eq(softmax.i.ready),
                     softmax.i.payload.score.eq(score_ser.o.payload), softmax.i.payload.mask.eq(key < tokens),
                     softmax.mult.eq(hdr["softmax_mult"]), softmax.shift.eq(hdr["softmax_shift"])]
        with m.If(softmax.i.valid & softmax.i.ready):
            m.d.sync += key.eq(Mux(key == S - 1, 0, key + 1))
        p_word = Signal(range(words(R * S) + 1))
        p_lane = Signal(range(simd))
        p_count = Signal(range(R * S + 1))
        m.d.comb += softmax.o.ready.eq(1)
        with m.If(softmax.o.valid):
            b = bufs["p"]
            m.d.comb += [b.w.addr.eq(p_word), b.w.data.eq(softmax.o.payload.as_value().replicate(simd)),
                         b.w.en.eq(1 << p_lane)]
            m.d.sync += [p_count.eq(p_count + 1), p_lane.eq(p_lane + 1)]
            with m.If(p_lane == simd - 1):
                m.d.sync += [p_lane.eq(0), p_word.eq(p_word + 1)]

        # ---- LayerNorm: int16 pairs (a, b) from X and Y, output written back in place -------------------
        # LN1: a = X (layer input), b = Y (O output) -> Y; LN2: a = Y (LN1 output), b = X (FFN-down output)
        # -> X (a row is read whole before its output overwrites it)
        rb = nx.RES_BITS

        def pairs(a_word, b_word):
            return Cat(*(Cat(a_word.word_select(i, rb), b_word.word_select(i, rb)) for i in range(simd)))

        is_ln2 = op == Op.LN2
        m.d.comb += [ln_lanes.rows.eq(R), ln_lanes.shift.eq(Mux(is_ln2, hdr["ln2_shift"], hdr["ln1_shift"])),
                     ln_lanes.w.ready.eq(1)]
        for o, a_buf, b_buf in ((Op.LN1, "x", "y"), (Op.LN2, "y", "x")):
            with m.If(op == o):
                for name in ("x", "y"):
                    m.d.comb += [bufs[name].r.addr.eq(ln_lanes.rd_addr), bufs[name].r.en.eq(ln_lanes.rd_en)]
                m.d.comb += ln_lanes.rd_data.eq(pairs(bufs[a_buf].r.data, bufs[b_buf].r.data))
                with m.If(ln_lanes.w.valid):               # the output overwrites the row's b buffer
                    b = bufs[b_buf]
                    m.d.comb += [b.w.addr.eq(ln_lanes.w.payload.addr), b.w.data.eq(ln_lanes.w.payload.data),
                                 b.w.en.eq((1 << simd) - 1)]
        ln_words, ln_start = ln_lanes.written, ln_lanes.start

        # ---- input and output ----------------------------------------------------------------------------
        # LOAD: X <- DRAM; STORE: X -> DRAM; tiled also LOAD_Q: Y <- DRAM, STORE_QKV: Y, WORK -> DRAM
        wr = mover.wr
        for o, name in ((Op.LOAD, "x"), (Op.LOAD_Q, "y")):
            with m.If(op == o):
                b = bufs[name]
                m.d.comb += [b.w.addr.eq(wr.addr), b.w.data.eq(wr.data), b.w.en.eq(Mux(wr.valid, wr.en, 0))]
        for o, name in ((Op.STORE, "x"), (Op.STORE_QKV, "y")):
            with m.If(op == o):
                b = bufs[name]
                m.d.comb += [b.r.addr.eq(mover.rd_addr), b.r.en.eq(mover.rd_en), mover.rd_word.eq(b.r.data)]
        with m.If(op == Op.STORE_QKV):
            m.d.comb += [c for b in work.banks for c in (b.r.addr.eq(mover.rd_addr), b.r.en.eq(mover.rd_en))]
        m.d.comb += mover.rd_banks.eq(Cat(*(b.r.data for b in work.banks)))

        # ---- parameter copies (ParamStore -> LayerNorm gains/biases, GELU table, narrowing shifts) ----------
        pgeo = ParamGeometry.from_config(cfg)
        m.submodules.copier = copier = ParamCopier.from_config(cfg)
        m.d.comb += [ws.param_slot.eq(slot), ws.param_addr.eq(copier.param_addr), copier.param_data.eq(ws.param_data),
                     copier.loaded.eq(ws.param_loaded[slot]), copier.flush.eq(flush),
                     ws.param_release.eq(copier.release & (blk == g.blocks - 1))]   # the last LN2 copy: slot done
        wiring.connect(m, copier.shift, operand.shift)
        wiring.connect(m, copier.gelu, gelu.table_w)
        wiring.connect(m, copier.ln, ln_lanes.param)
        copy_done = copier.done

        def wait_for_copy():
            # a phase waiting for its parameter copy: a DMA stall only while the section is not in from DRAM
            m.d.comb += [busy.eq(1), stall.eq(copier.waiting)]

        def request_copy(kind):
            m.d.comb += [copier.request.eq(1), copier.kind.eq(kind)]

        # ---- the sequencer -----------------------------------------------------------------------------
        tile = Signal(range(max(I, H) // tr + 1))
        tiles = Signal.like(tile)
        head = Signal(range(g.heads + 1))
        layers = Signal(16)
        hdr_idx = Signal(range(len(HEADER_FIELDS) + 2))
        busy = Signal()
        done = Signal()
        stall = Signal()
        # STATUS.busy: a run, or AXI transactions still in flight after it was abandoned (a soft reset or an
        # error): no AR pending, no R beat, W beat or B response owed. CTRL.start is ignored until then.
        drained = Signal()
        m.d.comb += drained.eq(rport.idle & ~ws.busy & ~mover.busy)
        m.d.comb += [regs.busy.eq(busy | ~drained), regs.done.eq(done),
                     regs.error.eq(ws.error | mover.error | bad_tokens | bad_scratch),
                     regs.error_addr.eq(Mux(ws.error, ws.error_addr, mover.error_addr)),
                     regs.error_code.eq(Cat(Mux(ws.error, ws.error_code, mover.error_code), bad_tokens, bad_scratch)),
                     regs.read_beat.eq((self.m_axi_rvalid & self.m_axi_rready)),
                     regs.compute_busy.eq(mvau.busy), regs.dma_stall.eq(stall),
                     ws.layers.eq(layers), ws.weight_base.eq(regs.weight_base), ws.cancel.eq(regs.soft_reset),
                     ws.clear.eq(regs.start), mover.cancel.eq(regs.soft_reset), mover.clear.eq(regs.start),
                     ws.scratch_base.eq(regs.scratch_base), ws.scratch_ready.eq(scratch_ready)]
        mat_cols = {Op.Q: H, Op.K: H, Op.V: H, Op.O: H, Op.FFN_UP: H, Op.FFN_DOWN: I}
        mat_rows = {Op.Q: H, Op.K: H, Op.V: H, Op.O: H, Op.FFN_UP: I, Op.FFN_DOWN: H}
        mat_shift = {Op.Q: "q_shift", Op.K: "k_shift", Op.V: "v_shift", Op.O: "o_shift",
                     Op.FFN_UP: "ffn_up_shift", Op.FFN_DOWN: "ffn_down_shift"}
        dst_cols = {Op.Q: H, Op.PV: H, Op.O: H, Op.FFN_UP: I, Op.FFN_DOWN: H}
        expected = Signal.like(writer.count)
        cmd = mvau.cmd.payload

        placement = {Op.Q: Placement.ROWS16, Op.K: Placement.K, Op.V: Placement.VT, Op.O: Placement.ROWS16,
                     Op.FFN_UP: Placement.ROWS8, Op.FFN_DOWN: Placement.ROWS16}

        def start_writer(where, beats, row_step, chan_word=0, base=0, tiles=0):
            c = writer.cfg
            m.d.comb += [writer.start.eq(1), c.placement.eq(where), c.beats.eq(beats), c.row_step.eq(row_step),
                         c.chan_word.eq(chan_word), c.base.eq(base), c.tiles.eq(tiles)]

        def operand_command(base, stride, n_words, narrowed=False, shift_base=0):
            c = operand.cmd
            m.d.comb += [c.base.eq(base), c.stride.eq(stride), c.words.eq(n_words), c.vectors.eq(R),
                         c.narrowed.eq(narrowed), c.shift_base.eq(shift_base)]

        def start_matrix(o):
            m.d.sync += [tile.eq(0), tiles.eq(mat_rows[o] // tr - 1), expected.eq(R * mat_rows[o] // pe)]
            m.d.comb += tparams.clear.eq(1)
            start_writer(placement[o], nfg, words(dst_cols.get(o, H)), base=F_BASE if o == Op.FFN_UP else 0, tiles=1)
            m.next = f"{o.name}_TILE_WAIT"

        def abandon():
            # the blocks are reset now and at the next start; the AXI masters drain what is in flight
            m.d.comb += flush.eq(1)
            m.next = "IDLE"

        def abort():
            # an AXI error on the weights or the activations, or a soft reset, abandons the run
            with m.If(regs.soft_reset | ws.error | mover.error):
                abandon()

        def matrix_states(o, then):
            """A weight matrix: per tile, wait for it, latch its bias/mult, issue the job (all R vectors), and
            release the bank once the MVAU has read its last weight word (the last tile: once every result
            is written); then ``then()``."""
            cols, name = mat_cols[o], o.name
            with m.State(f"{name}_TILE_WAIT"):
                m.d.comb += [op.eq(o), busy.eq(1), stall.eq(~ws.tile_ready)]
                with m.If(ws.tile_ready):
                    m.next = f"{name}_LATCH"
                abort()
            with m.State(f"{name}_LATCH"):
                # the tile's bias/mult into the free parameter set (the previous job may still read the other)
                m.d.comb += [op.eq(o), busy.eq(1), tparams.latch.eq(1)]
                with m.If(tparams.latched):
                    m.next = f"{name}_JOB"
                abort()
            with m.State(f"{name}_JOB"):
                m.d.comb += [op.eq(o), busy.eq(1), mvau.cmd.valid.eq(1),
                             cmd.col_folds.eq(cols // simd), cmd.row_folds.eq(tr // pe), cmd.vectors.eq(R),
                             cmd.shift.eq(hdr[mat_shift[o]]), cmd.raw.eq(0),
                             cmd.act_unsigned.eq(o == Op.FFN_DOWN),      # uint8 GELU codes
                             cmd.wide.eq(o in (Op.O, Op.FFN_DOWN))]     # int16 residual stream
                operand_command(CTX_BASE if o == Op.O else 0, words(cols), words(cols),
                                narrowed=o in (Op.Q, Op.K, Op.V, Op.FFN_UP), shift_base=words(H) if o == Op.FFN_UP else 0)
                with m.If(mvau.cmd.ready):
                    m.d.comb += [operand.start.eq(1), tparams.job.eq(1)]
                    m.d.sync += issued.eq(0)
                    m.next = f"{name}_WAIT"
                abort()
            with m.State(f"{name}_WAIT"):
                m.d.comb += [op.eq(o), busy.eq(1)]
                with m.If(tile != tiles):
                    with m.If(issued == R * nfg * words(cols)):
                        m.d.comb += ws.tile_release.eq(1)
                        m.d.sync += tile.eq(tile + 1)
                        m.next = f"{name}_TILE_WAIT"
                with m.Elif(res_count == expected):
                    m.d.comb += ws.tile_release.eq(1)
                    m.d.sync += tile.eq(tile + 1)
                    then()
                abort()

        def attention_states(o, job_rows, cols, then):
            """One attention product of the current head (SCORES: Q_h K_h^T; PV: P V_h); on chip its weight
            operand (K_h, V_h^T) is read from WORK, tiled it is a tile of the weight stream."""
            if tiled:
                with m.State(f"{o.name}_TILE_WAIT"):
                    m.d.comb += [op.eq(o), busy.eq(1), stall.eq(~ws.tile_ready)]
                    with m.If(ws.tile_ready):
                        m.next = f"{o.name}_JOB"
                    abort()
            with m.State(f"{o.name}_JOB"):
                m.d.comb += [op.eq(o), busy.eq(1), mvau.cmd.valid.eq(1),
                             cmd.col_folds.eq(cols // simd), cmd.row_folds.eq(job_rows // pe), cmd.vectors.eq(R)]
                if o == Op.SCORES:
                    m.d.comb += cmd.raw.eq(1)
                    operand_command(head_kword, words(H), words(dh))
                else:
                    m.d.comb += [cmd.shift.eq(hdr["ctx_shift"]), cmd.act_unsigned.eq(1)]
                    operand_command(0, words(S), words(S))
                with m.If(mvau.cmd.ready):
                    m.d.comb += operand.start.eq(1)
                    m.d.sync += [issued.eq(0), p_count.eq(0), p_word.eq(0), p_lane.eq(0)]
                    if not tiled:
                        a = attw.cfg
                        m.d.comb += [attw.start.eq(1), a.cols.eq(words(cols)), a.rows.eq(job_rows // pe),
                                     a.base.eq(K_LOCAL + head_kword if o == Op.SCORES else V_LOCAL + head_vrow),
                                     a.stride.eq(words(H) if o == Op.SCORES else words(S))]
                    if o == Op.PV:
                        m.d.sync += expected.eq(R * dh // pe)
                        start_writer(Placement.ROWS8, dh // pe, words(H), chan_word=head_kword, base=CTX_BASE)
                    m.next = f"{o.name}_WAIT"
                abort()
            with m.State(f"{o.name}_WAIT"):
                m.d.comb += [op.eq(o), busy.eq(1)]
                with m.If((p_count == R * S) if o == Op.SCORES else (res_count == expected)):
                    if tiled:       # every weight word has been read long before the last result
                        m.d.comb += ws.tile_release.eq(1)
                    then()
                abort()

        def first_attention_step():
            m.next = "SCORES_TILE_WAIT" if tiled else "SCORES_JOB"

        def next_head():
            m.d.sync += [head.eq(head + 1), head_kword.eq(head_kword + words(dh)),
                         head_vrow.eq(head_vrow + (dh // pe) * words(S))]
            with m.If(head == g.heads - 1):
                start_matrix(Op.O)
                request_copy(CopyKind.LN1)
            with m.Else():
                first_attention_step()

        def params_state(o, then):
            """Once the parameter copy of ``o`` (Q: the narrowing shifts; FFN up: the GELU table) is done, ``then()``."""
            with m.State(f"{o.name}_PARAMS"):
                m.d.comb += op.eq(o)
                wait_for_copy()
                with m.If(copy_done):
                    then()
                abort()

        def layernorm_states(o, then):
            """LayerNorm ``o`` over the R rows, once its gains and biases (copied during the phase before) are in."""
            with m.State(f"{o.name}_PARAMS"):
                m.d.comb += op.eq(o)
                wait_for_copy()
                with m.If(copy_done):
                    m.d.comb += ln_start.eq(1)
                    if o == Op.LN1:
                        request_copy(CopyKind.GELU)
                    m.next = f"{o.name}_RUN"
                abort()
            with m.State(f"{o.name}_RUN"):
                m.d.comb += [op.eq(o), busy.eq(1)]
                with m.If(ln_words == words(R * H)):
                    then()
                abort()

        # ---- activation transfers (tiled: every block; on chip: the input and the output) ----------------
        sc = scratch_layout(cfg)
        io_words = 2 * words(g.tokens * H)                 # byte words of the DRAM input / output (tokens rows)
        x_off = Signal(ap.addr_bits)                       # the block's byte offset in an int16 [S, H] tensor,
        q_off, k_off, vt_off = (Signal(ap.addr_bits) for _ in range(3))   # in Q [S, H], a head's K_h and V_h^T runs
        io_left = Signal(range(io_words + 1))              # byte words of the input / output from this block on
        src = Signal(ap.addr_bits)                         # the layer's input, output
        dst = Signal(ap.addr_bits)
        first_layer, last_layer = layer == 0, layer == layers - 1
        m.d.comb += [src.eq(Mux(first_layer, regs.input_base, regs.scratch_base + Mux(layer[0], sc.x1, sc.x0))),
                     dst.eq(Mux(last_layer, regs.output_base, regs.scratch_base + Mux(layer[0], sc.x0, sc.x1)))]
        block_words = 2 * words(R * H)
        io_block = Signal.like(io_left)                    # byte words of this block inside the input / output
        m.d.comb += io_block.eq(Mux(io_left > block_words, block_words, io_left))

        def transfer(kind, base, n_words, runs=1, step=0, local=0, local_step=0, inner=1, outer_stride=0):
            c = mover.cmd
            # (not when the run is abandoned in this cycle; ws.error is stale while START clears it)
            m.d.comb += [mover.start.eq(~(regs.soft_reset | (ws.error & ~regs.start))), c.kind.eq(kind), c.base.eq(base), c.words.eq(n_words), c.runs.eq(runs),
                         c.step.eq(step), c.local.eq(local), c.local_step.eq(local_step), c.inner.eq(inner),
                         c.outer_stride.eq(outer_stride)]

        def transfer_wait(name, o, then, reading=False):
            """Wait for the mover; an error ends the run (ERROR, see ``regs.error``)."""
            with m.State(name):
                m.d.comb += [op.eq(o), busy.eq(1), loading.eq(reading)]
                with m.If(regs.soft_reset):                # the mover finishes its bursts (cancel)
                    abandon()
                with m.Elif(~mover.busy):                  # busy from the cycle after start
                    with m.If(mover.error):
                        abandon()
                    with m.Else():
                        then()

        def start_pass(first):
            m.d.sync += [blk.eq(0), x_off.eq(0), q_off.eq(0), k_off.eq(0), vt_off.eq(0), io_left.eq(io_words)]
            m.next = first

        def next_block(more, last):
            m.d.sync += [blk.eq(blk + 1), x_off.eq(x_off + 2 * R * H), q_off.eq(q_off + R * H),
                         k_off.eq(k_off + R * dh), vt_off.eq(vt_off + R * pe),
                         io_left.eq(Mux(io_left > block_words, io_left - block_words, 0))]
            with m.If(blk == T - 1):
                last()
            with m.Else():
                m.next = more

        def end_of_layer():
            m.d.sync += layer.eq(layer + 1)
            with m.If(last_layer):
                if tiled:
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"
                else:
                    transfer(Transfer.STORE_X, regs.output_base, io_words)
                    m.next = "STORE"
            with m.Else():
                m.next = "HEADER_WAIT"

        # One state variable: the FSM's state names the phase and its step; ``op`` (which every datapath
        # multiplexer selects on) is decoded from it.
        with m.FSM(name="seq"):
            with m.State("IDLE"):
                m.d.comb += flush.eq(regs.start | regs.soft_reset)
                with m.If(regs.start):
                    m.d.sync += [tokens.eq(regs.tokens), bad_tokens.eq(0), bad_scratch.eq(0)]
                    with m.If((regs.tokens == 0) | (regs.tokens > g.tokens)):
                        m.d.sync += bad_tokens.eq(1)
                    with m.Elif(scratch_bad):
                        m.d.sync += bad_scratch.eq(1)
                    with m.Else():
                        m.d.sync += [layer.eq(0), layers.eq(regs.layers), scratch_ready.eq(0)]
                        if tiled:
                            m.next = "FETCH"
                        else:
                            transfer(Transfer.LOAD_X, regs.input_base, io_words)
                            m.next = "LOAD"
            if tiled:
                with m.State("FETCH"):                     # LAYERS is latched: the weight stream starts
                    m.d.comb += [busy.eq(1), ws.start.eq(~regs.soft_reset)]
                    m.next = "HEADER_WAIT"
            else:
                def after_input():
                    m.d.comb += ws.start.eq(1)
                    m.next = "HEADER_WAIT"
                transfer_wait("LOAD", Op.LOAD, after_input, reading=True)
            with m.State("HEADER_WAIT"):
                m.d.comb += [busy.eq(1), stall.eq(1), ws.param_addr.eq(0)]
                m.d.sync += [hdr_idx.eq(0), scratch_ready.eq(0)]
                with m.If(ws.param_loaded[slot][PARAM_SECTIONS.index("header")]):
                    m.next = "HEADER_READ"
                abort()
            with m.State("HEADER_READ"):
                m.d.comb += [busy.eq(1), ws.param_addr.eq(pgeo.word("header") + hdr_idx)]
                m.d.sync += hdr_idx.eq(hdr_idx + 1)
                with m.Switch(hdr_idx):
                    for i, f in enumerate(HEADER_FIELDS):
                        with m.Case(i + 1):
                            m.d.sync += hdr[f].eq(ws.param_data)
                with m.If(hdr_idx == len(HEADER_FIELDS)):
                    # the narrowing shifts of Q/K/V's and FFN up's inputs (the section follows the header)
                    request_copy(CopyKind.NARROW)
                    m.next = "Q_PARAMS"
                abort()

            def to_attention():
                m.d.sync += [head.eq(0), head_kword.eq(0), head_vrow.eq(0)]
                first_attention_step()

            if tiled:
                # pass 1, per block: X_t in; Q, K, V; Q_t, K_t (a run per head), V_t^T (a run per pe channels) out
                params_state(Op.Q, lambda: start_pass("P1_LOAD_X"))
                with m.State("P1_LOAD_X"):
                    m.d.comb += [op.eq(Op.LOAD), busy.eq(1)]
                    transfer(Transfer.LOAD_X, src + x_off, Mux(first_layer, io_block, block_words))
                    m.next = "P1_LOAD_X_WAIT"
                transfer_wait("P1_LOAD_X_WAIT", Op.LOAD, lambda: start_matrix(Op.Q), reading=True)

                def store_q():
                    transfer(Transfer.STORE_Q, regs.scratch_base + sc.q + q_off, words(R * H))
                    m.next = "P1_STORE_Q"
                matrix_states(Op.Q, lambda: start_matrix(Op.K))
                matrix_states(Op.K, lambda: start_matrix(Op.V))
                matrix_states(Op.V, store_q)

                def store_k():
                    transfer(Transfer.STORE_K, regs.scratch_base + sc.k + k_off, words(R * dh),
                             runs=g.heads, step=S * dh, local=K_LOCAL, local_step=words(dh), inner=words(dh),
                             outer_stride=words(H))
                    m.next = "P1_STORE_K"

                def store_vt():
                    transfer(Transfer.STORE_VT, regs.scratch_base + sc.vt + vt_off, words(R * pe),
                             runs=H // pe, step=S * pe, local=V_LOCAL, local_step=words(R), inner=words(R))
                    m.next = "P1_STORE_VT"

                def pass1_done():
                    m.d.sync += scratch_ready.eq(1)
                    start_pass("P2_LOAD_Q")
                transfer_wait("P1_STORE_Q", Op.STORE_QKV, store_k)
                transfer_wait("P1_STORE_K", Op.STORE_QKV, store_vt)
                transfer_wait("P1_STORE_VT", Op.STORE_QKV, lambda: next_block("P1_LOAD_X", pass1_done))

                # pass 2, per block: Q_t and the residual X_t in; attention (K_h, V_h^T streamed), O, LN1, FFN, LN2
                with m.State("P2_LOAD_Q"):
                    m.d.comb += [op.eq(Op.LOAD_Q), busy.eq(1)]
                    transfer(Transfer.LOAD_Q, regs.scratch_base + sc.q + q_off, words(R * H))
                    m.next = "P2_LOAD_Q_WAIT"

                def load_residual():
                    transfer(Transfer.LOAD_X, src + x_off, Mux(first_layer, io_block, block_words))
                    m.next = "P2_LOAD_X_WAIT"
                transfer_wait("P2_LOAD_Q_WAIT", Op.LOAD_Q, load_residual, reading=True)
                transfer_wait("P2_LOAD_X_WAIT", Op.LOAD, to_attention, reading=True)

                def store_block():
                    transfer(Transfer.STORE_X, dst + x_off, Mux(last_layer, io_block, block_words))
                    m.next = "P2_STORE_X"
                transfer_wait("P2_STORE_X", Op.STORE, lambda: next_block("P2_LOAD_Q", end_of_layer))
                to_ln2_done = store_block
            else:
                params_state(Op.Q, lambda: start_matrix(Op.Q))
                matrix_states(Op.Q, lambda: start_matrix(Op.K))
                matrix_states(Op.K, lambda: start_matrix(Op.V))
                matrix_states(Op.V, to_attention)
                to_ln2_done = end_of_layer

            def to_pv():
                m.next = "PV_TILE_WAIT" if tiled else "PV_JOB"
            attention_states(Op.SCORES, S, dh, to_pv)
            attention_states(Op.PV, dh, S, next_head)

            def to_ln1():
                m.next = "LN1_PARAMS"
            matrix_states(Op.O, to_ln1)

            def to_ffn_up():
                m.next = "FFN_UP_PARAMS"
            layernorm_states(Op.LN1, to_ffn_up)
            params_state(Op.FFN_UP, lambda: start_matrix(Op.FFN_UP))

            def to_ffn_down():
                start_matrix(Op.FFN_DOWN)
                request_copy(CopyKind.LN2)
            matrix_states(Op.FFN_UP, to_ffn_down)

            def to_ln2():
                m.next = "LN2_PARAMS"
            matrix_states(Op.FFN_DOWN, to_ln2)
            layernorm_states(Op.LN2, to_ln2_done)
            if not tiled:
                def stored():
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"
                transfer_wait("STORE", Op.STORE, stored)
        if self.trace:
            m.d.comb += [self.trace_mvau_valid.eq(mvau.o.valid & mvau.o.ready), self.trace_mvau_data.eq(mvau.o.payload),
                         self.trace_probs_valid.eq(softmax.o.valid & softmax.o.ready),
                         self.trace_probs_data.eq(softmax.o.payload),
                         self.trace_ln_valid.eq(ln_lanes.taps.valid), self.trace_ln_data.eq(ln_lanes.taps.data),
                         self.trace_compute.eq(regs.compute_busy), self.trace_stall.eq(regs.dma_stall)]
        return m


class EngineTop(wiring.Component):
    """Plain top level: ``aclk``, ``aresetn`` (active low, synchronous), ``m_axi_*``, ``s_axil_*``, ``irq``."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.engine = LayerEngine(cfg)
        members = {n: mb for n, mb in self.engine.signature.members.items() if n not in ("op", "layer")}
        super().__init__({"aclk": In(1), "aresetn": In(1), **members})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain("sync")
        m.d.comb += [cd.clk.eq(self.aclk), cd.rst.eq(~self.aresetn)]
        m.submodules.engine = eng = self.engine
        for name, member in eng.signature.members.items():
            if name in ("op", "layer"):
                continue
            outer, inner = getattr(self, name), getattr(eng, name)
            m.d.comb += (outer.eq(inner) if member.flow == Out else inner.eq(outer))
        return m


def engine_top(cfg) -> EngineTop:
    """The hook :mod:`mlo_hw.synth` and :mod:`mlo_hw.boards` build: the engine's plain top level."""
    return EngineTop(cfg)
