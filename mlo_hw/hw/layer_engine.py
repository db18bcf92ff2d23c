"""The rolled layer engine: one BERT encoder layer in hardware, every layer of the model run through it.

:class:`LayerEngine` composes the blocks: the memory system (:class:`~mlo_hw.hw.loop_ctrl.WeightStreamer`,
weight tiles double-buffered while the previous tile computes), one matrix-vector unit
(:class:`~mlo_hw.hw.mvau.MVAU`) for every product, :class:`~mlo_hw.hw.softmax.Softmax`,
:class:`~mlo_hw.hw.layernorm.LayerNorm` (used for both LayerNorms, parameters reloaded per use),
:class:`~mlo_hw.hw.gelu.GeluTable`, the control registers (:class:`~mlo_hw.hw.regs.ControlRegs`) and an input
activation mover (:class:`~mlo_hw.hw.engine.block_mover.BlockMover`) on the same AXI4 port. Activations stay on
chip between layers when the plan (:func:`mlo_hw.plan.plan`) allows it; otherwise the engine runs the DRAM-tiled
schedule (``docs/tiling.md``): two passes over token blocks per layer, activations in scratch DRAM.

Interface (clock domain ``sync``; :class:`EngineTop` renames it to ``aclk``/``aresetn``):
    ``m_axi_*``  AXI4 master (2-bit IDs: reads are tagged by the master inside, writes use ID 0): reads the
                 weight image and the input activations, writes the output (and, tiled, the scratch).
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
weight read's, else the activations'). The activation mover and the weight streamer share AR/R through
:class:`~mlo_hw.hw.axi_interconnect.ReadArbiter` (round robin per burst, both in flight at once).

Schedule of a layer (one phase after another). The sequencer has one state variable, its FSM: a state names
the phase and its step (``Q_TILE_WAIT``, ``Q_LATCH``, ``Q_JOB``, ``Q_WAIT``, ..., ``SCORES_JOB``, ``LN1_RUN``),
and ``op``, which every datapath multiplexer selects on, is a register the sequencer loads with the next state's op
at every transition (so it is the state's op in every cycle, with no decode in front of the multiplexers)::

    Q, K, V   tiles of tile_rows channels: per tile every token row of X streams through the MVAU
              (narrowed per channel from int16 to int8 by the header's ``narrow`` shifts);
              Q row-major, K in PE banks by token (K rows are the MVAU's weight words for Q.K^T),
              V transposed in PE banks by channel (V^T rows are the weight words for P.V)
    per head  SCORES: Q_h . K_h^T raw -> softmax (mask; a beat's pe keys in groups of softmax_lanes, the
              MVAU's rate) -> P [S, S] uint8
              PV: P . V_h requantized (ctx_mult, ctx_shift, zero bias) -> CTX, started once the scores are all in
              the softmax (reading the rows of P it has written, ``p_behind``)
    O         CTX -> Y (int16);  LN1: LayerNorm(X + Y) -> Y (int16, in place)
    FFN_UP    Y (narrowed) -> GELU table -> F [S, I] (uint8);  FFN_DOWN: F -> X (int16);
    LN2       LayerNorm(Y + X) -> X (int16, in place): the next layer's input
A pre-LN (GPT-2) layer (``model.norm: pre``, ``docs/engine.md``): LN1 LayerNorm(X) -> R; Q, K, V from R; the
heads as above; O added into X (:class:`~mlo_hw.hw.engine.residual_add.ResidualAdd`, int16 saturation); LN2
LayerNorm(X) -> R; FFN up from R; FFN down added into X: the next layer's input.

Buffers (words of ``simd`` elements, row-major ``[rows, cols]`` at word ``row * cols/simd + col/simd``),
reused by phase so that only four exist, five for pre-LN layers (sizes: :func:`mlo_hw.perf.onchip_plan`):
    X [S, H]     int16: the layer input; FFN down's output; LN2 writes the next layer's input in place
    Y [S, H]     int16: Q (int8 values) during attention, then O's output, LN1's output in place (FFN
                 input, LN2's residual)
    P [S, S]     one head's probabilities (uint8)
    WORK         ``pe`` banks: K (bank = token % pe) and V^T (bank = channel % pe) side by side, so
                 one word of every bank is one MVAU weight word; CTX row-major (word a in bank a % pe);
                 then the FFN intermediate [S, I] (uint8 GELU codes) over all of it.
    R [S, H]     int16, pre-LN layers only: LN1's output (Q, K, V's input), then LN2's (FFN up's)
P and WORK hold bytes; X, Y and R hold int16 elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from amaranth import Array, Cat, ClockDomain, ClockSignal, Const, Module, Mux, Signal, signed, unsigned
from amaranth.hdl import DomainRenamer
from amaranth.lib import enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..model import numerics as nx
from .axi import AxiParams, axi_read_master_members, axi_write_master_members, axil_slave_members, forward_ports
from .axi_interconnect import ReadArbiter
from .buffers import NO_COLLISION, ParamGeometry, TileBuffer
from .pipeline import KEEP, delayed, kept_copy
from ..config import ConfigError
from .engine.block_mover import BlockMover, zero_extended
from .engine.sequencer import Sequencer, ln_is_layout
from .engine.vector_io import Serializer, VectorReader
from .engine.layernorm_lanes import LayerNormLanes
from .engine.activation_operand import ActivationOperand, Narrow
from .engine.attention_weights import AttentionWeights
from .engine.param_copier import ParamCopier
from .engine.residual_add import ResidualAdd
from .engine.result_writer import ResultWriter
from .engine.tile_params import TileParamLatch
from .gelu import GeluTable
from .loop_ctrl import WeightStreamer
from .mvau import MVAU, MVAUParams
from ..plan import plan
from .regs import AXIL_ADDR_BITS, ControlRegs
from .softmax import Softmax, score_layout
from ..model.tiled import scratch_layout
from ..model.weight_image import header_fields, layout

__all__ = ["Op", "EngineGeometry", "with_seq_len", "VectorReader", "Narrow", "trace_members",
           "LayerEngine", "EngineTop", "engine_top"]


class Op(enum.Enum, shape=5):
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
    XQ = 15            # an encoder-decoder's cross-attention: Q of LN1's output
    XK = 16            # the memory's cross K and V (pass 0)
    XV = 17
    XO = 18            # the cross-attention's output projection
    LNX = 19           # LayerNorm(LN1 output + XO output): the FFN's input


# tiled: the weight streamer's bursts and how many may be in flight. A block load queues behind at most their product of
# weight beats (the memory answers in order), and the first head's scores read Q_t as it loads: bert_tiny_auto's waited
# 514 cycles a block behind two bursts of 256 beats, 66 behind two of 32 (run 475,951 -> 472,559 cycles). Two of 32 hide
# a read latency of up to 32 cycles (bert_base_l2_arty, bus-bound, with the DDR3 timing model: +0.3 %)
TILED_WEIGHT_BURST_BEATS, TILED_WEIGHT_BURSTS = 32, 2
RES_BYTES = nx.RES_BITS // 8   # bytes of one element of the residual stream (X, Y, DRAM input and output)
# registers between the MVAU's result (the op's result mux) and the result writer (by the buffers)
RESULT_HOPS = 2
MATRIX_OPS = {"q": Op.Q, "k": Op.K, "v": Op.V, "o": Op.O, "ffn_up": Op.FFN_UP, "ffn_down": Op.FFN_DOWN,
              "xq": Op.XQ, "xk": Op.XK, "xv": Op.XV, "xo": Op.XO}


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
    rows: int          # token rows of a block (the plan's; ``seq`` when every activation stays on chip)
    blocks: int        # blocks of the DRAM-tiled schedule (1: on chip)

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

    @property
    def max_tiles(self) -> int:
        """Weight tiles of the largest matrix (FFN up's ``intermediate`` output channels, or ``hidden``)."""
        return max(self.hidden, self.inter) // self.tile_rows

    def words(self, cols: int) -> int:
        """Buffer words per row of ``cols`` elements."""
        return cols // self.simd

    @property
    def score_interval(self) -> int:
        """Cycles between the MVAU's Q.K^T result beats (``pe`` keys of a score row) at its full rate: one per
        ``head_dim / simd`` column folds."""
        return self.words(self.head_dim)

    @property
    def softmax_lanes(self) -> int:
        """Keys the softmax takes a cycle: the fewest that keep up with the MVAU's ``pe / score_interval`` scores a
        cycle, a divisor of ``pe`` (1 on bert_tiny: 8 keys every 8 cycles; 16 on MiniLM at PE 16 x SIMD 32, whose
        32-wide heads make a beat a cycle). Each lane costs an exp2 table, two multipliers and its share of the
        score and exponent words, so lanes beyond the rate are LUTs for nothing."""
        return MVAUParams.shared_lanes(self.pe, self.score_interval)

    @property
    def softmax_interval(self) -> int:
        """Cycles between the softmax's input beats on average: a result beat every :attr:`score_interval` cycles
        is ``pe / softmax_lanes`` softmax beats. It sizes the softmax's row slots and dividers."""
        return max(1, self.score_interval * self.softmax_lanes // self.pe)

    def softmax(self, cfg) -> Softmax:
        """The engine's softmax: :attr:`softmax_lanes` keys a beat, a result beat's groups of keys in turn."""
        return Softmax.from_config(cfg, lanes=self.softmax_lanes, interval=self.softmax_interval)

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


def with_seq_len(cfg, seq_len: int, bram36_budget: float | None = None):
    """The config with another sequence length (e.g. bert_tiny at 32 tokens, or a decode step at 1) and, if
    given, another block RAM budget (``target.bram36_budget``: forces the DRAM-tiled plan on a small config),
    checked like a loaded config (registers, address width, the plan)."""
    import dataclasses
    from ..config import _check_fit, _validate
    target = cfg.target if bram36_budget is None else dataclasses.replace(cfg.target, bram36_budget=bram36_budget)
    new = dataclasses.replace(cfg, name=f"{cfg.name}_s{seq_len}", target=target,
                              model=dataclasses.replace(cfg.model, seq_len=seq_len))
    _validate(new)
    _check_fit(new)
    return new


BUFFER_READ_LATENCY = 2     # an activation buffer read: the request registered beside the block RAM, then the read
# a buffer's read data registered beside its block RAM (``word``: what the operand and the mover take; WORK's the
# bank select's over its banks' registered words)
BUFFER_WORD_LATENCY = BUFFER_READ_LATENCY + 1
# the MVAU operand's: its word registered after the buffer select
OPERAND_READ_LATENCY = BUFFER_WORD_LATENCY + 1
# what the MVAU operand's reads wait for (ActivationOperand.waits): a load into its buffer, LN1's rows (FFN up behind
# it), the softmax's P words (PV behind it)
OPERAND_WAITS = ("load", "ln", "p")


class _Buffer:
    """A word memory (``lanes`` elements of ``lane_bits`` a word, one write enable per element) with one
    read and one write port. A read is requested on ``rd_addr``/``rd_en`` (driven by the block that reads; the
    op's multiplexer in front), registered beside the block RAM and answered on ``r.data``
    :data:`BUFFER_READ_LATENCY` cycles later, and on ``word``, a register beside the block RAM, a cycle after that
    (:data:`BUFFER_WORD_LATENCY`: the readers far from it, the operand and the mover, take ``word``). A write (``w.addr``, ``w.data``, ``w.en``, one bit an element) is
    registered likewise and lands a cycle later, so a read requested in the cycle after a write's sees the old
    word; the engine reads nothing that soon after it was written (a reader waits for a row's or a transfer's
    completion, which the writers count as they write, before its request). The registers keep the op decode and
    the wire across the die off the block RAM's inputs."""

    def __init__(self, m, name: str, words: int, lanes: int, lane_bits: int = 8, halves=None):
        # collision free: no block reads a word in the cycle it is written (the LayerNorm lanes read rows the
        # writer has finished, ``ln_avail``); the traced engine checks it (:meth:`collision`, ``trace_collision``)
        self.mem = Memory(shape=unsigned(lane_bits * lanes), depth=words, init=[], attrs=NO_COLLISION)
        self.name = name
        m.submodules[name] = self.mem
        port = self.mem.write_port(granularity=lane_bits)
        self.r = self.mem.read_port()
        self._write_port = port
        fields = ("addr", "data", "en")
        self.w = SimpleNamespace(**{f: Signal.like(getattr(port, f), name=f"{name}_w_{f}") for f in fields})
        self.rd_addr = Signal.like(self.r.addr, name=f"{name}_rd_addr")
        self.rd_en = Signal(name=f"{name}_rd_en")
        self.req_addr = Signal.like(self.r.addr, name=f"{name}_req_addr", reset_less=True)
        self.req_en = Signal(name=f"{name}_req_en", reset_less=True)
        held = {f: Signal.like(getattr(port, f), name=f"{name}_wq_{f}", reset_less=True) for f in fields}
        m.d.sync += [held["data"].eq(self.w.data), held["en"].eq(self.w.en), self.req_en.eq(self.rd_en)]
        if halves is None:
            m.d.sync += [held["addr"].eq(self.w.addr), self.req_addr.eq(self.rd_addr)]
        else:    # (rd_half, wr_half): every read in the half rd_half names, every write in wr_half's; the readers and
            rd_half, wr_half = halves       # writers address a half (words // 2 words)
            m.d.sync += [held["addr"].eq(self._in_half(self.w.addr, wr_half, words // 2)),
                         self.req_addr.eq(self._in_half(self.rd_addr, rd_half, words // 2))]
        m.d.comb += [*(getattr(port, f).eq(held[f]) for f in held),
                     self.r.addr.eq(self.req_addr), self.r.en.eq(self.req_en)]
        self.word = Signal.like(self.r.data, name=f"{name}_word", reset_less=True)
        m.d.sync += self.word.eq(self.r.data)

    @staticmethod
    def _in_half(addr, half, size: int):
        """``addr`` (below ``size``) in the half ``half`` names: the half as the top bit when ``size`` is a power of
        two, else ``size`` added (no block RAM spent on a power-of-two half)."""
        if size & (size - 1) == 0:
            return Cat(addr[:(size - 1).bit_length()], half)
        return addr + Mux(half, size, 0)

    def collision(self, m):
        """High when the block RAM reads and writes one word at the same clock edge (``NO_COLLISION`` says
        never): what the traced engine's ``trace_collision`` reports."""
        hit = Signal(name=f"{self.name}_collision")
        wp = self._write_port
        m.d.comb += hit.eq(self.r.en & wp.en.any() & (self.r.addr == wp.addr))
        return hit


# The bits of a bank word each copy of its bank select drives (:class:`_Banks`)
BANK_SELECT_BITS = 64


class _Banks:
    """``n`` (a power of two) banks of words. Row-major word ``a`` lives in bank ``a % n`` at ``a // n``;
    the attention operands (K rows, V^T rows) use the banks side by side, one word each."""

    def __init__(self, m, name: str, words_per_bank: int, word_bytes: int, n: int):
        self.banks = [_Buffer(m, f"{name}{b}", words_per_bank, word_bytes) for b in range(n)]
        self.lp = (n - 1).bit_length()
        self.sel = Signal(range(max(n, 2)), name=f"{name}_sel")             # the bank of the word on r.data
        self.rd_bank = Signal.like(self.sel, name=f"{name}_rd_bank")        # of a one-bank read request
        req_bank = Signal.like(self.sel, name=f"{name}_req_bank")           # registered with the request
        m.d.sync += req_bank.eq(self.rd_bank)
        with m.If(self.banks[0].req_en):
            m.d.sync += self.sel.eq(req_bank)
        # every one-bank read (row-major operand, the mover's K and V^T): the one multiplexer over the banks' registered
        # words, ``word`` (BUFFER_WORD_LATENCY cycles after the request, as a buffer's): the block RAMs' outputs,
        # spread over the die, no longer reach the bank select and a reader's register in one cycle (WORK's bank select
        # into the operand's word, 7.12 ns, and into the mover's, 7.08, at e3a54ec's seed 3 on an ECP5-85F)
        # The select is kept once per BANK_SELECT_BITS of the word (kept_copy), each copy beside its slice of the
        # multiplexer: one register fanned out over the whole word across the die (WORK's select -> the bank
        # multiplexer -> the operand's word, 7.57 ns, 6.46 of it wire, at 624f44f's seed 4 on an ECP5-85F).
        self.word = Signal(8 * word_bytes, name=f"{name}_word")
        for k, lo in enumerate(range(0, 8 * word_bytes, BANK_SELECT_BITS)):
            word_sel = kept_copy(m, self.sel, f"{name}_word_sel{k}")
            hi = min(lo + BANK_SELECT_BITS, 8 * word_bytes)
            m.d.comb += self.word[lo:hi].eq(Array(b.word[lo:hi] for b in self.banks)[word_sel])

    def split(self, addr):
        """Row-major word ``addr``'s (bank, bank-local word)."""
        return (addr[:self.lp], addr[self.lp:]) if self.lp else (Const(0, 1), addr)

    def read_bank(self, bank, local, en) -> list:
        """The assignments of a read of word ``local`` of bank ``bank`` (its word on :attr:`word`
        :data:`BUFFER_WORD_LATENCY` cycles later), for the caller's ``m.d.comb``."""
        return [self.rd_bank.eq(bank), *(a for b in self.banks for a in (b.rd_addr.eq(local), b.rd_en.eq(en)))]

    def read_side_by_side(self, m, local):
        """One word of every bank, straight to the block RAMs (the MVAU's weight read: data a cycle later), in
        place of the registered request."""
        for b in self.banks:
            m.d.comb += [b.r.addr.eq(local), b.r.en.eq(1)]
        return Cat(*(b.r.data for b in self.banks))


def trace_members(cfg) -> dict:
    """Debug outputs of a traced engine (``LayerEngine(cfg, trace=True)``, simulation only): the handshakes
    of the tensors the engine produces on chip, for a harness that records them without looking inside.
    ``trace_mvau_*``: an MVAU result beat (``pe`` lanes of signed ``acc_bits``, lane 0 in the LSBs);
    ``trace_probs_*``: a softmax output beat (``softmax_lanes`` uint8 probabilities of consecutive keys, lane 0
    in the LSBs); ``trace_ln_*``: per LayerNorm lane (``folding.ln_lanes`` of them), an output beat of
    ``folding.ln_width`` int16 elements (channel order; lane i's in bits 16 w i .. with w the width), and ``trace_ln_op``, the LayerNorm it belongs to (LN1 starts during O's
    last tile and LN2 during FFN down's, so ``op`` may still name the matrix), ``trace_ln_layer`` its layer (the tiled
    engine's next layer starts while its last LN2 still writes). ``*_valid`` is high in the cycle the handshake completes.
    ``trace_compute`` and ``trace_stall`` are the COMPUTE_CYCLES and STALL_CYCLES counters' increments.
    ``trace_collision``: an activation buffer's block RAM reads and writes one word at the same clock edge (their
    memories are marked ``no_rw_check``, which assumes this never happens; the harness stops on it).
    ``trace_stale_op``: ``op`` or ``ln_op`` (registers) is not the sequencer's state's, or ``ln_op``'s decode
    ``ln_is`` not ``ln_op``'s (the harness stops on it)."""
    mp, lanes = MVAUParams.from_config(cfg), cfg.folding.ln_lanes
    return {"trace_mvau_valid": Out(1), "trace_mvau_data": Out(mp.pe * mp.acc_bits),
            "trace_probs_valid": Out(1), "trace_probs_data": Out(8 * EngineGeometry.from_config(cfg).softmax_lanes),
            "trace_ln_valid": Out(lanes), "trace_ln_data": Out(lanes * cfg.folding.ln_width * nx.RES_BITS),
            "trace_ln_op": Out(Op), "trace_ln_layer": Out(16),
            "trace_compute": Out(1), "trace_stall": Out(1), "trace_collision": Out(1),
            "trace_stale_op": Out(1)}


class LayerEngine(wiring.Component):
    """The engine (see the module docstring). Ports: ``m_axi_*``, ``s_axil_*``, ``irq`` and the
    debug outputs ``op`` (an :class:`Op`) and ``layer`` for testbenches and profiling; with ``trace``,
    also :func:`trace_members` (no logic of its own: wires out of the datapath)."""

    def __init__(self, cfg, trace: bool = False):
        self.cfg, self.trace = cfg, trace
        self.plan = plan(cfg)            # ConfigError with the numbers when no plan fits
        self.g = EngineGeometry.from_config(cfg, self.plan.block)
        # the port: one more ID bit than the masters inside (the read arbiter tags each burst with its master)
        self.axi = AxiParams.from_config(cfg, id_bits=2)
        self.mvau_params = MVAUParams.from_config(cfg)
        self.pre_ln = cfg.model.norm == "pre"
        super().__init__({
            **axi_read_master_members(self.axi), **axi_write_master_members(self.axi),
            **axil_slave_members(AXIL_ADDR_BITS), "irq": Out(1),
            "op": Out(Op), "layer": Out(16), **(trace_members(cfg) if trace else {}),
        })

    def elaborate(self, platform):
        m = Module()
        d = SimpleNamespace()           # the datapath's handles: what the sequencer drives and watches
        self._blocks(m, d)
        self._buffers(m, d)
        self._mvau_operands(m, d)
        self._mvau_results(m, d)
        self._softmax_layernorm_params(m, d)
        self._status(m, d)
        seq = Sequencer(m, d, self.cfg, self.g, Op)
        seq.build()
        if self.trace:
            mvau, softmax, ln_lanes, regs = d.mvau, d.softmax, d.ln_lanes, d.regs
            with m.If(ln_lanes.start):
                m.d.sync += self.trace_ln_layer.eq(d.layer)
            m.d.comb += [self.trace_mvau_valid.eq(mvau.o.valid & mvau.o.ready), self.trace_mvau_data.eq(mvau.o.payload),
                         self.trace_probs_valid.eq(softmax.o.valid & softmax.o.ready),
                         self.trace_probs_data.eq(softmax.o.payload),
                         self.trace_ln_valid.eq(ln_lanes.taps.valid), self.trace_ln_data.eq(ln_lanes.taps.data),
                         self.trace_ln_op.eq(d.ln_op),
                         self.trace_compute.eq(regs.compute_busy), self.trace_stall.eq(regs.dma_stall),
                         self.trace_collision.eq(Cat(*(b.collision(m) for b in (*d.bufs.values(), *d.work.banks))).any()),
                         self.trace_stale_op.eq(seq.stale_op())]
        return m

    def _blocks(self, m, d):
        """The control registers, the weight streamer, the compute blocks (reset by ``flush`` at START and soft
        reset two cycles after it, and by the engine's reset a cycle after it), the activation mover and the AXI port
        they share; the run's START checks."""
        cfg, g, ap, mp = self.cfg, self.g, self.axi, self.mvau_params
        H, I, S, simd, words = g.hidden, g.inter, g.seq, g.simd, g.words
        m.submodules.regs = d.regs = regs = ControlRegs(cfg)
        # tiled, a block load, which the compute may be reading as it comes, queues behind the weight bursts in flight:
        # they are few and short (TILED_WEIGHT_BURSTS of TILED_WEIGHT_BURST_BEATS)
        if g.tiled:
            ws = WeightStreamer(cfg, blocks=g.blocks, outstanding=TILED_WEIGHT_BURSTS,
                                burst_beats=TILED_WEIGHT_BURST_BEATS)
        else:
            ws = WeightStreamer(cfg)
        m.submodules.ws = d.ws = ws
        d.flush = Signal(name="flush")
        d.abandon = Signal(name="abandon")         # the run is abandoned: the mover cancels what it moves
        # the flush decode (START, a soft reset, every abandon) into one register beside the sequencer first: from the
        # decode straight to the blocks' registers was 8.4-8.6 ns on bert_tiny_auto's route at 2244104 (seed 1)
        d.flushing = flushing = delayed(m, d.flush, 1, "flushing")
        for name, handle, block in (
                ("mvau", "mvau", MVAU(mp)), ("softmax", "softmax", g.softmax(cfg)),
                ("score_groups", "score_groups", self._score_groups()),
                ("layernorm", "ln_lanes", LayerNormLanes.from_config(cfg, BUFFER_READ_LATENCY)), ("gelu", "gelu", GeluTable.from_config(cfg)),
                ("operand", "operand", ActivationOperand(H, simd, g.addr_bits, words(max(H, I, S)), S,
                                                                max_passes=g.max_tiles,
                                                                shift_sets=4 if cfg.seq2seq else 2,
                                                                read_latency=OPERAND_READ_LATENCY,
                                                                waits=len(OPERAND_WAITS)))):
            # flush two cycles later, from a register of the block's own (kept: synthesis does not merge the copies),
            # so that each block's reset fans out from beside it, not from one register across the die. The block runs
            # in a domain of its own on the engine's clock whose only reset is that register, which the engine's reset
            # sets (its init): the domain reset reaches the block a cycle later through it, never ORed into the
            # block's resets (that OR from the reset synchronizer across the die was 8.8 ns at 6cd8c8f, 120 MHz)
            flushed = Signal(name=f"flushed_{name}", init=1, attrs={KEEP: 1})
            m.d.sync += flushed.eq(flushing)
            m.domains += (cd := ClockDomain(name, local=True))
            m.d.comb += [cd.clk.eq(ClockSignal("sync")), cd.rst.eq(flushed)]
            m.submodules[name] = DomainRenamer({"sync": name})(block)
            setattr(d, handle, block)
        # activations to and from DRAM: the input and output (int16 [tokens, H]); tiled, every block
        ap_in = AxiParams.from_config(cfg)                # the masters inside (ID 1 bit)
        m.submodules.mover = d.mover = mover = BlockMover(ap_in, simd=simd, pe=g.pe, max_words=2 * words(g.rows * H),
                                                          max_runs=max(g.heads, H // g.pe), local_bits=g.addr_bits,
                                                          read_latency=BUFFER_WORD_LATENCY)
        forward_ports(m, self, regs, axil_slave_members(AXIL_ADDR_BITS))
        m.d.comb += self.irq.eq(regs.irq)
        # AXI: the weight streamer and the activation mover share AR/R at once (ReadArbiter: round robin per
        # burst, R routed by the ID bit it adds); W is the mover's (its ID zero-extended).
        m.submodules.read_port = rport = ReadArbiter(ap_in, 2)
        forward_ports(m, self, rport, axi_read_master_members(ap))
        for i, master in enumerate((ws, mover)):        # s0: the weight streamer, s1: the activation mover
            for name, member in axi_read_master_members(ap_in).items():
                sw, own = getattr(rport, name.replace("m_axi", f"s{i}_axi")), getattr(master, name)
                m.d.comb += sw.eq(own) if member.flow == Out else own.eq(sw)
        forward_ports(m, self, mover, axi_write_master_members(ap))
        d.tokens = Signal(range(g.tokens + 1), name="tokens")     # TOKENS, latched at START
        d.bad_tokens = Signal(name="bad_tokens")                   # START with TOKENS outside 1..seq_len (sticky until the next)
        d.bad_scratch = Signal(name="bad_scratch")                  # START with a misaligned or overlapping SCRATCH_BASE (tiled)
        d.scratch_ready = Signal(name="scratch_ready")                # tiled: this layer's K and V^T are in scratch DRAM
        d.blk = Signal(range(max(g.blocks, 2)), name="blk")   # the token block of the pass (tiled)
        # the pass's blocks done before this one, and whether this one is its last (a register beside blk): pass 2 runs
        # its blocks from the last one on (T - 1, 0, 1, .., T - 2: Sequencer.start_pass)
        d.pass_blk = Signal(range(max(g.blocks, 2)), name="pass_blk")
        d.last_blk = Signal(name="last_blk")
        # a decoder's KV cache (tiled): CACHE_LEN, latched at START; the keys a run attends end at key_end
        # (CACHE_LEN + TOKENS); a run after a prefill (CACHE_LEN > 0) computes one block (run_blocks)
        d.cache_len = Signal(range(g.seq + 1), name="cache_len")
        d.key_end = Signal(range(2 * g.seq + 1), name="key_end")
        d.bad_cache = Signal(name="bad_cache")               # START with a bad CACHE_LEN (sticky until the next)
        d.run_blocks = Signal(range(g.blocks + 1), name="run_blocks", init=g.blocks)
        d.scratch_bad = Const(0)      # SCRATCH_BASE misaligned or overlapping (tiled; the sequencer registers it)
        if g.tiled:
            sb = regs.scratch_base
            # the weights a run reads: the image (an encoder-decoder's run: the encoder's or the decoder's layers)
            lay = layout(cfg)
            img = max(cfg.model.layers, cfg.model.encoder_layers) * lay.stride if cfg.seq2seq else lay.total_bytes
            io = g.tokens * H * RES_BYTES

            # each comparison registered, their combination registered by the sequencer: two stages, as the base
            # registers change two cycles or more before START (Sequencer.start_states; in one stage, 15 nets deep,
            # 6.90 ns at e3a54ec's seed 1 on an ECP5-85F)
            def registered(check, name):
                return delayed(m, check, 1, f"scratch_{name}")

            def overlaps(base, n, name):
                return (registered(sb < base + n, f"below_{name}_end")
                        & registered(base < sb + scratch_layout(cfg).bytes, f"{name}_below_end"))
            d.scratch_bad = (registered(sb[:12] != 0, "misaligned") | overlaps(regs.weight_base, img, "weights")
                             | overlaps(regs.input_base, io, "input") | overlaps(regs.output_base, io, "output")
                             | (overlaps(regs.memory_base, io, "memory") if cfg.seq2seq else 0))
        d.op, d.layer, d.layers = Signal(Op, name="op"), Signal(16, name="layer"), Signal(16, name="layers")
        # the LayerNorm the lanes run (their buffer ports and shift select on it, not on op: LN1 starts during O's
        # last tile, LN2 during FFN down's) and the pair words they may read meanwhile
        d.ln_op = Signal(Op, name="ln_op")
        # ln_op decoded, a register loaded beside it (Sequencer.set_ln_op): what selects the lanes' buffer ports
        # without a compare of ln_op in front (its decode into Y's read address was 7.62 ns at 640aa25's seed 2)
        d.ln_is = Signal(ln_is_layout(), name="ln_is")
        ln_words = g.words(g.rows * g.hidden)
        d.ln_avail = Signal(range(ln_words + 1), name="ln_avail", init=ln_words)
        # post-LN: LN1 still runs while FFN up, started once the GELU table is in, reads the rows it has finished
        d.ln_behind = Signal(name="ln_behind")
        # tiled post-LN: LN2 still writes X'_t while the next block's heads run (its lanes have read every row)
        d.ln2_behind = Signal(name="ln2_behind")
        # tiled post-LN: the layer's last X'_t leaves behind LN2 (from LN2's start in FFN down's last tile until its
        # lanes have written every row): the store reads the rows LN2 has written, X's read port theirs in turn
        d.xout_behind = Signal(name="xout_behind")
        # PV runs while the softmax still writes the last rows of P (once the MVAU's scores are all in the softmax)
        d.p_behind = Signal(name="p_behind")
        d.scores_start = Signal(name="scores_start")        # a SCORES job starts (the sequencer's decode)
        m.d.comb += [self.op.eq(d.op), self.layer.eq(d.layer)]
        d.slot = d.layer[0]
        d.hdr = {f: Signal(32, name=f"hdr_{f}") for f in header_fields(cfg)}
        # an encoder-decoder: MEMORY_TOKENS latched at START (0: the encoder's run, else the decoder's, with
        # cross-attention); ``cross_phase`` while the heads of the cross-attention run (their Q, mask, multipliers)
        d.mem_tokens = Signal(range(g.tokens + 1), name="mem_tokens")
        # a relative position bias (T5's): the head's first table entry (head * 2R), stepped by the sequencer
        d.bias_head = Signal(range(max(g.heads * 2 * cfg.bias_radius, 2)), name="bias_head")
        d.cross_run, d.cross_phase = Signal(name="cross_run"), Signal(name="cross_phase")
        d.bad_memory = Signal(name="bad_memory")
        d.busy, d.done, d.stall = Signal(name="busy"), Signal(name="done"), Signal(name="stall")

    def _buffers(self, m, d):
        """X, Y (int16 words), P and WORK (``pe`` banks of byte words): see the module docstring; tiled, a block's
        rows (pass 1 keeps K and V^T in WORK, pass 2 CTX from word 0)."""
        g = self.g
        wsh = g.words(g.rows * g.hidden)
        d.K_LOCAL, d.V_LOCAL = 0, wsh // g.pe                     # bank-local word offsets of K and V^T
        d.CTX_BASE, d.F_BASE = (0 if g.tiled else 2 * wsh), 0     # row-major word offsets inside WORK
        r = (("r", wsh, nx.RES_BITS, None),) if self.pre_ln else ()     # pre-LN: the LayerNorms' outputs
        # tiled, X holds two blocks (the plan's [2B, H]): pass 1 loads X_{t+1} into one half while block t's K and
        # V read the other (the sequencer's x_rd_half and x_wr_half, the halves of every read and write; 0 outside
        # pass 1)
        d.x_rd_half, d.x_wr_half = Signal(name="x_rd_half"), Signal(name="x_wr_half")
        x = ("x", 2 * wsh, nx.RES_BITS, (d.x_rd_half, d.x_wr_half)) if g.tiled else ("x", wsh, nx.RES_BITS, None)
        d.bufs = {name: _Buffer(m, f"buf_{name}", n, g.simd, lane_bits, halves) for name, n, lane_bits, halves in (
            x, ("y", wsh, nx.RES_BITS, None), *r, ("p", g.words(g.rows * g.seq), 8, None))}
        d.work = _Banks(m, "buf_work", g.work_words // g.pe, g.simd, g.pe)
        for b in list(d.bufs.values()) + d.work.banks:
            m.d.comb += b.w.en.eq(0)

    def _mvau_operands(self, m, d):
        """The MVAU's parameters (a tile's bias/mult), weights (the tile buffer; on chip the attention products read
        K_h / V_h^T side by side from WORK) and x stream (the op's source buffer through the activation operand)."""
        g, mp = self.g, self.mvau_params
        S, H, R, pe, simd, tr, dh, words = g.seq, g.hidden, g.rows, g.pe, g.simd, g.tile_rows, g.head_dim, g.words
        mvau, ws, op, work, bufs, operand = d.mvau, d.ws, d.op, d.work, d.bufs, d.operand
        # registered (the op decode stays off the latch's read counter): the MVAU reads a job's parameters tens of
        # cycles after the op begins, and its last before the op ends
        is_matrix_op = Signal(name="is_matrix_op")
        m.d.sync += is_matrix_op.eq(Cat(*(op == o for o in MATRIX_OPS.values())).any())
        # a tile's bias/mult, latched in two sets so that jobs overlap (PV reads a fixed multiplier instead)
        m.submodules.tile_params = d.tparams = tparams = TileParamLatch(mp, tr, R,
                                                                        src_latency=TileBuffer.PARAM_READ_LATENCY)
        m.d.comb += [tparams.matrix.eq(is_matrix_op),
                     tparams.fixed_mult.eq(Mux(d.cross_phase, d.hdr["x_ctx_mult"], d.hdr["ctx_mult"])
                                           if self.cfg.seq2seq else d.hdr["ctx_mult"]),
                     ws.caddr.eq(tparams.src_addr), tparams.src_data.eq(Cat(ws.bias.as_value(), ws.mult.as_value()))]
        wiring.connect(m, tparams.params, mvau.params)
        m.d.comb += ws.waddr.eq(mvau.weights.addr)
        d.head_kword = Signal(range(words(H) + 1), name="head_kword")              # h * dh / simd: the head's columns of Q and K
        d.head_vrow = Signal(range(words(S * H) // pe + 1), name="head_vrow")     # (h * dh / pe) * S / simd: the head's V^T rows
        if g.tiled:      # K_h and V_h^T stream from scratch DRAM into the tile buffer like weight tiles
            m.d.comb += mvau.weights.data.eq(ws.wdata)
        else:
            m.submodules.attention = d.attw = attw = AttentionWeights(g.work_words // pe, words(max(S, dh)),
                                                                      max(S, dh) // pe)
            m.d.comb += attw.en.eq(mvau.weights.en)
            # registered: a job's first weight word is read at least a cycle after its op begins, its last
            # before the op ends (the op decode stays off the weight word's path to the MVAU)
            attention_words = Signal(name="attention_words")
            m.d.sync += attention_words.eq((op == Op.SCORES) | (op == Op.PV))
            with m.If(attention_words):
                m.d.comb += mvau.weights.data.eq(work.read_side_by_side(m, attw.addr))
            with m.Else():
                m.d.comb += mvau.weights.data.eq(ws.wdata)

        # the x stream: narrowed per channel for Q, K, V and FFN up; byte words zero-extended into its int16 lanes
        ln_out = "r" if self.pre_ln else "y"      # FFN up's input: LN2's output (pre-LN), LN1's (post-LN)
        qkv_in = "r" if self.pre_ln else "x"      # Q, K, V's: LN1's output (pre-LN), the layer input (post-LN)
        src = {Op.Q: qkv_in, Op.K: qkv_in, Op.V: qkv_in, Op.SCORES: "y", Op.PV: "p", Op.FFN_UP: ln_out}
        if self.cfg.seq2seq:     # the cross Q from LN1's output (Y; pre-LN: LNX's, R); the memory's K, V from X
            src.update({Op.XQ: "r" if self.pre_ln else "y", Op.XK: "x", Op.XV: "x"})
        # the requests go to the op's buffer; the read data is taken from the buffer read_src names, a register a
        # cycle behind op (a word arrives two cycles after its request, within the op), so that op's fanout stays
        # off the operand's data path, and registered (the operand's word OPERAND_READ_LATENCY cycles after its
        # request): the block RAM's output, WORK's bank select and this select do not reach the operand's queue in
        # the same cycle. (The mover's stores read their buffers' ports straight.)
        names = sorted({*src.values(), "x", "y"}) + ["work"]
        read_src = Signal(range(len(names)), name="read_src")
        with m.Switch(op):
            for o, name in src.items():
                with m.Case(o):
                    b = bufs[name]
                    m.d.comb += [b.rd_addr.eq(operand.rd_addr), b.rd_en.eq(operand.rd_en)]
                    m.d.sync += read_src.eq(names.index(name))
                    if o == Op.SCORES and self.cfg.seq2seq and not self.pre_ln:   # the cross heads: Q^c in X
                        x = bufs["x"]
                        with m.If(d.cross_phase):    # (the self-attention's heads: the residual loads into X)
                            m.d.comb += [x.rd_addr.eq(operand.rd_addr), x.rd_en.eq(operand.rd_en)]
                            m.d.sync += read_src.eq(names.index("x"))
            with m.Case(Op.O, Op.FFN_DOWN, Op.XO):
                m.d.comb += work.read_bank(*work.split(operand.rd_addr), operand.rd_en)
                m.d.sync += read_src.eq(names.index("work"))
        # the buffers' registered words (BUFFER_WORD_LATENCY), then the select into the operand's word:
        # OPERAND_READ_LATENCY cycles after its request, whatever the buffer
        late_src = delayed(m, read_src, 1, "operand_src")
        operand_word = Signal.like(operand.rd_data, name="operand_word", reset_less=True)
        m.d.comb += operand.rd_data.eq(operand_word)
        with m.Switch(late_src):
            for i, name in enumerate(names):
                with m.Case(i):
                    data = (work if name == "work" else bufs[name]).word
                    m.d.sync += operand_word.eq(zero_extended(data) if name in ("p", "work") else data)
        wiring.connect(m, operand.o, mvau.x)
        # a load into the buffer the operand reads (tiled: Q_t beside the first head's scores): the operand waits for
        # the words not loaded yet
        # (X: the half being read; pass 1's K and V read X_t while X_{t+1} loads into the other)
        loading = Mux(d.mover.load_y, names.index("y"), names.index("x"))
        same_half = d.mover.load_y | (d.x_rd_half == d.x_wr_half)
        load_wait = operand.waits[OPERAND_WAITS.index("load")]
        m.d.comb += [load_wait.on.eq(d.mover.load_busy & (read_src == loading) & same_half),
                     load_wait.limit.eq(d.mover.loaded_next)]

    def _mvau_results(self, m, d):
        """Each MVAU result beat to its consumer: scores to the softmax (a beat of ``pe`` keys as it comes), FFN up
        through the GELU table, everything else through the result writer into its buffer's layout."""
        g = self.g
        pe, simd = g.pe, g.simd
        mvau, gelu, op, bufs = d.mvau, d.gelu, d.op, d.bufs
        res_valid = Signal()
        res_data = Signal(8 * pe)
        mvau_bytes = Cat(*(mvau.o.payload[p][:8] for p in range(pe)))
        res_wide = Cat(*(mvau.o.payload[p][:nx.RES_BITS] for p in range(pe)))   # int16 (Q: int8 sign-extended)
        # the MVAU's results go where op says, decoded into two registers a cycle behind op: a job's first result
        # comes many cycles after op names it, and op moves on only once the last one is taken, so the late decode
        # routes every result as op would; op's decode is then not in front of the score groups' input handshake,
        # whose word enables are many (489916d's seed 3 on the ECP5-85F: op -> the decode -> the groups' word
        # enable, 10.12 ns)
        to_scores = delayed(m, op == Op.SCORES, 1, "results_to_scores")
        to_gelu = delayed(m, op == Op.FFN_UP, 1, "results_to_gelu")
        # the GELU table's output is always taken: it holds beats only under to_gelu (its input comes from nothing
        # else, and op leaves FFN up once its last result is in the writer), so its read enables are constant
        # (to_gelu into every table copy's output enable was 7.97 ns at 6cd8c8f's seed 2, 120 MHz)
        m.d.comb += [gelu.i.payload.eq(mvau_bytes), gelu.o.ready.eq(1)]
        with m.If(to_scores):
            m.d.comb += [d.score_groups.i.valid.eq(mvau.o.valid), mvau.o.ready.eq(d.score_groups.i.ready)]
        with m.Elif(to_gelu):
            m.d.comb += [gelu.i.valid.eq(mvau.o.valid), mvau.o.ready.eq(gelu.i.ready),
                         res_valid.eq(gelu.o.valid), res_data.eq(gelu.o.payload)]
        with m.Else():
            m.d.comb += [mvau.o.ready.eq(1), res_valid.eq(mvau.o.valid), res_data.eq(mvau_bytes)]
        m.submodules.results = d.writer = writer = ResultWriter(
            pe=pe, simd=simd, seq=g.rows, hidden=g.hidden, intermediate=g.inter, tile_rows=g.tile_rows,
            k_local=d.K_LOCAL, v_local=d.V_LOCAL, bank_words=g.work_words // pe)
        # the beat through RESULT_HOPS registers to the writer: the op's result mux (by the MVAU) and the writer's
        # registers (by the buffers, which the LayerNorm lanes' writes share) are far apart on the die, a single
        # hop was 10 ns of wire; a flush drops the beats in flight: those that reach the writer in the RESULT_HOPS
        # cycles after it. It does so from the flush's register (``d.flushing``, a cycle behind it), on the hops after
        # the first and at the writer's input, where the flush's decode (from the DMA errors, the soft reset, the
        # sequencer's state) into the first hop was 7.16 ns at 52ab33d's seed 1
        beat = Signal(writer.i.payload.shape(), name="result_beat", reset_less=True)    # (copies: no reset)
        m.d.comb += [beat.bytes.eq(res_data), beat.wide.eq(res_wide)]
        beat_valid = res_valid
        for k in range(RESULT_HOPS):
            beat_valid = delayed(m, beat_valid & (~d.flushing if k else 1), 1, f"result_beat_valid{k}_")
        m.d.comb += [writer.i.valid.eq(beat_valid & ~d.flushing),
                     writer.i.payload.eq(delayed(m, beat, RESULT_HOPS, "result_beat"))]
        for i, b in enumerate(d.work.banks):
            m.d.comb += [b.w.addr.eq(writer.banks[i].addr), b.w.data.eq(writer.banks[i].data),
                         b.w.en.eq(writer.banks[i].en)]
        rows_to = {Op.Q: "y"} if self.pre_ln else {Op.Q: "y", Op.O: "y", Op.FFN_DOWN: "x"}
        if self.cfg.seq2seq:      # post-LN: the cross Q and O's output over the layer input (X), spent once LN1 has
            # run; pre-LN: the cross Q where Q was (Y), XO added into the residual stream as O is
            rows_to.update({Op.XQ: "y"} if self.pre_ln else {Op.XQ: "x", Op.XO: "x"})
        # a buffer's write address and data matter only with an enable: the writer's are every row buffer's default
        # (the later writers override them under their conditions), so the multiplexers need no zero
        for name in sorted(set(rows_to.values())):      # sorted: the same Verilog every run
            m.d.comb += [bufs[name].w.addr.eq(writer.rows.addr), bufs[name].w.data.eq(writer.rows.data)]
        for o, name in rows_to.items():
            with m.If(op == o):
                m.d.comb += bufs[name].w.en.eq(writer.rows.en)
        if self.pre_ln:        # O's and FFN down's results added into the residual stream in X, saturated
            m.submodules.residual_add = add = ResidualAdd(writer.max_words, simd, BUFFER_READ_LATENCY)
            x = bufs["x"]
            with m.If((op == Op.O) | (op == Op.FFN_DOWN) | (op == Op.XO)):
                m.d.comb += [add.i.eq(writer.rows), x.rd_addr.eq(add.rd_addr), x.rd_en.eq(add.rd_en)]
            m.d.comb += add.rd_data.eq(x.r.data)
            m.d.comb += [x.w.addr.eq(add.o.addr), x.w.data.eq(add.o.data)]     # X's default writer
            with m.If(add.o.en.any()):          # a cycle after the beat (op is still the matrix's)
                m.d.comb += x.w.en.eq(add.o.en)

    def _softmax_layernorm_params(self, m, d):
        """Scores -> softmax -> P; the LayerNorm lanes on (X, Y) pairs, written back in place; then the mover's buffer
        ports (:meth:`_mover_ports`) and the parameter copies (:meth:`_param_copies`: ParamStore -> LayerNorm
        gains/biases, GELU table, narrowing shifts)."""
        cfg, g = self.cfg, self.g
        S, R, pe, simd, words = g.seq, g.rows, g.pe, g.simd, g.words
        softmax, ln_lanes, mover, bufs = d.softmax, d.ln_lanes, d.mover, d.bufs
        d.pgeo = ParamGeometry.from_config(cfg)
        m.submodules.copier = d.copier = ParamCopier.from_config(cfg)
        # scores: the MVAU's result beat (lane l = key key0 + l, raw accumulators truncated to the softmax's width)
        # with its mask, in groups of the softmax's lanes
        groups, L = d.score_groups, g.softmax_lanes
        d.key0 = key0 = Signal(range(S), name="key0")    # the beat's first key; 0 at a SCORES job's start
        step = groups.i.valid & groups.i.ready
        mask = self._key_mask(m, d, key0, step)
        bias = self._position_bias(m, d, key0, step) if cfg.model.position_bias else None
        sb = softmax.score_bits
        for l in range(pe):
            group = groups.i.payload[l // L]
            score = d.mvau.o.payload[l][:sb]
            if bias is not None:      # the sum saturated to the score's width (golden.position_bias)
                total = Signal(signed(sb + 1), name=f"biased_score{l}")
                m.d.comb += total.eq(score.as_signed() + bias[l])
                score = Mux(total > (1 << (sb - 1)) - 1, (1 << (sb - 1)) - 1,
                            Mux(total < -(1 << (sb - 1)), -(1 << (sb - 1)), total))
            m.d.comb += [group.score[l % L].eq(score), group.mask[l % L].eq(mask[l])]
        wiring.connect(m, groups.o, softmax.i)
        if cfg.seq2seq:
            m.d.comb += [softmax.mult.eq(Mux(d.cross_phase, d.hdr["x_softmax_mult"], d.hdr["softmax_mult"])),
                         softmax.shift.eq(Mux(d.cross_phase, d.hdr["x_softmax_shift"], d.hdr["softmax_shift"]))]
        else:
            m.d.comb += [softmax.mult.eq(d.hdr["softmax_mult"]), softmax.shift.eq(d.hdr["softmax_shift"])]
        # the score beats the softmax has taken in the SCORES job: PV starts once they are all in. They, key0 and the
        # P counters below restart a cycle after a SCORES job's start, from a register (the sequencer's state decode
        # with the MVAU's command handshake is not at their enables; 9fb44e8's seed 3 on the ECP5-85F: p_byte, 8.01
        # ns; 33c325b's: s_beats, 8.59 ns): the job's first score beat comes many cycles later, and SCORES_WAIT does
        # not count the beats in that cycle (it still holds the last job's)
        # (``scores_in``: all of them, a flag set with the last beat, so that SCORES_WAIT's end is no comparison)
        d.s_beats = Signal(range(R * S // pe + 1), name="s_beats")
        d.scores_in = Signal(name="scores_in")
        d.scores_restart = delayed(m, d.scores_start, 1, "scores_restart")
        with m.If(step):
            m.d.sync += [key0.eq(Mux(key0 == S - pe, 0, key0 + pe)), d.s_beats.eq(d.s_beats + 1)]
            with m.If(d.s_beats == R * S // pe - 1):
                m.d.sync += d.scores_in.eq(1)
        with m.If(d.scores_restart):
            m.d.sync += [key0.eq(0), d.s_beats.eq(0), d.scores_in.eq(0)]
        # probabilities: a beat is L bytes of a P word (L divides pe, which divides simd), written with its byte enables
        d.p_word = Signal(range(words(R * S) + 1), name="p_word")
        d.p_byte = Signal(range(simd), name="p_byte")
        d.p_count = Signal(range(R * S + 1), name="p_count")
        m.d.comb += softmax.o.ready.eq(1)
        with m.If(softmax.o.valid):
            b = bufs["p"]
            m.d.comb += [b.w.addr.eq(d.p_word), b.w.data.eq(softmax.o.payload.as_value().replicate(simd // L)),
                         b.w.en.eq(Const((1 << L) - 1, simd) << d.p_byte)]
            m.d.sync += [d.p_count.eq(d.p_count + L), d.p_byte.eq(d.p_byte + L)]
            with m.If(d.p_byte == simd - L):
                m.d.sync += [d.p_byte.eq(0), d.p_word.eq(d.p_word + 1)]
        # they restart with s_beats (the job's first probability comes many cycles later, and nothing reads them
        # before: p_behind is 0 until P.V starts)
        with m.If(d.scores_restart):
            m.d.sync += [d.p_count.eq(0), d.p_word.eq(0), d.p_byte.eq(0)]
        # PV behind the softmax (d.p_behind): its operand waits for the P words not written whole a cycle ago (the
        # limit is the next cycle's: p_word now)
        p_wait = d.operand.waits[OPERAND_WAITS.index("p")]
        m.d.comb += [p_wait.on.eq(d.p_behind), p_wait.limit.eq(d.p_word)]

        # LN1: a = X (layer input), b = Y (O output) -> Y; LN2: a = Y (LN1 output), b = X (FFN-down output)
        # -> X (a row is read whole before its output overwrites it)
        rb = nx.RES_BITS

        def pairs(a_word, b_word):
            return Cat(*(Cat(a_word.word_select(i, rb), b_word.word_select(i, rb)) for i in range(simd)))
        # the result writer never stalls: a LayerNorm word waits while it writes (the same buffer, when they overlap);
        # any of its lane enables (a beat of pe < simd lanes may leave lane 0 out)
        # the output shift of ln_op's LayerNorm, a register loaded the cycle after the lanes' start (ln_op named by
        # then; the lanes use it at their outputs, many cycles into a run: ln_op's decode into the output stage's
        # resets was 9.49 ns at 2ff8d72's seed 1), held through the run: the next layer's header may come in while
        # the layer's last LN2 still writes (Sequencer.block_behind_ln2)
        ln_is = d.ln_is
        ln_shift = Signal.like(ln_lanes.shift, name="ln_shift")
        with m.If(delayed(m, ln_lanes.start, 1, "ln_started")):
            m.d.sync += ln_shift.eq(Mux(ln_is.ln2, d.hdr["ln2_shift"],
                                        Mux(ln_is.lnx, d.hdr["lnx_shift"], d.hdr["ln1_shift"])
                                        if cfg.seq2seq else d.hdr["ln1_shift"]))
        m.d.comb += [ln_lanes.rows.eq(R), ln_lanes.avail.eq(d.ln_avail), ln_lanes.shift.eq(ln_shift),
                     ln_lanes.w.ready.eq(~d.writer.rows_writing)]
        # the lanes' word goes into its buffer in the cycles the result writer leaves it (their ready): its address
        # and data selected by that register alone, only the enable by their valid too (the handshake's decode
        # in front of every data bit's multiplexer was 7.48 ns at 52ab33d's seed 1)
        lanes_turn = ~d.writer.rows_writing
        # the pair words need no multiplexer (they are read only while a LayerNorm runs):
        if self.pre_ln:        # pre-LN: LN1, LN2 (and LNX) of the residual stream alone (X, b = 0) -> R
            x, r = bufs["x"], bufs["r"]
            m.d.comb += ln_lanes.rd_data.eq(pairs(x.r.data, Const(0, len(x.r.data))))
            with m.If(ln_is.as_value().any()):
                m.d.comb += [x.rd_addr.eq(ln_lanes.rd_addr), x.rd_en.eq(ln_lanes.rd_en)]
                with m.If(lanes_turn):
                    m.d.comb += [r.w.addr.eq(ln_lanes.w.payload.addr), r.w.data.eq(ln_lanes.w.payload.data),
                                 r.w.en.eq(ln_lanes.w.valid.replicate(simd))]
        else:                  # post-LN: the LayerNorm adds a and b, so every one takes (X, Y) pairs
            m.d.comb += ln_lanes.rd_data.eq(pairs(bufs["x"].r.data, bufs["y"].r.data))
        for running, b_buf in () if self.pre_ln else ((ln_is.ln1, "y"), (ln_is.ln2, "x")):
            with m.If(running):
                m.d.comb += [bufs["x"].rd_addr.eq(ln_lanes.rd_addr), bufs["x"].rd_en.eq(ln_lanes.rd_en)]
                # LN1 behind FFN up (d.ln_behind): the lanes take Y's read port in the cycles they read, and FFN up's
                # operand waits in them and for the rows the lanes have not written whole; LN2 behind the next
                # block's heads (d.ln2_behind) reads no more (the heads' scores read Q_{t+1} from Y)
                with m.If(~(d.ln_behind | d.ln2_behind) | ln_lanes.rd_en):
                    m.d.comb += [bufs["y"].rd_addr.eq(ln_lanes.rd_addr), bufs["y"].rd_en.eq(ln_lanes.rd_en)]
                with m.If(lanes_turn):   # the output overwrites the row's b buffer
                    b = bufs[b_buf]
                    m.d.comb += [b.w.addr.eq(ln_lanes.w.payload.addr), b.w.data.eq(ln_lanes.w.payload.data),
                                 b.w.en.eq(ln_lanes.w.valid.replicate(simd))]
        # the lanes read Y in their turns (ln_turn: they wanted to read in the cycle before, a register), FFN up's
        # operand in the others: neither reader's decision reaches the other's (the lanes' issue into the operand's
        # hold was bert_tiny_auto's critical path at f849c36 on the ECP5-85F, seed 3, 8.36 ns)
        ln_turn = Signal(name="ln_turn")
        m.d.sync += ln_turn.eq(ln_lanes.rd_want)
        # the layer's last X'_t store behind LN2 (d.xout_behind): X's read port alternates. In the cycles of x_turn
        # the lanes decide their reads and the store reads; the lanes' requests land a cycle later, out of turn, when
        # the port is theirs. The store reads only the rows the lanes have written whole (two byte words an X word).
        x_turn = Signal(name="x_turn")
        m.d.sync += x_turn.eq(~x_turn & d.xout_behind)
        store_avail = Signal.like(mover.store_avail, name="store_avail", init=mover.store_avail.init)
        m.d.sync += store_avail.eq(Mux(d.xout_behind, ln_lanes.rows_done * (2 * words(g.hidden)),
                                       mover.store_avail.init))
        m.d.comb += [ln_lanes.rd_hold.eq((d.ln_behind & ~ln_turn) | (d.xout_behind & ~x_turn)),
                     mover.store_hold.eq(d.xout_behind & ~x_turn), mover.store_avail.eq(store_avail)]
        # FFN up behind LN1 waits for the rows not written whole (rows_done only grows while the lanes run: it falls
        # to 0 the cycle after their start) and in the lanes' turns
        ln_wait = d.operand.waits[OPERAND_WAITS.index("ln")]
        m.d.comb += [ln_wait.on.eq(d.ln_behind), ln_wait.limit.eq(ln_lanes.rows_done * words(g.hidden)),
                     ln_wait.restart.eq(ln_lanes.start), d.operand.hold.eq(d.ln_behind & ln_turn)]
        if cfg.seq2seq and not self.pre_ln:    # LNX: a = Y (LN1's output), b = X (XO's) -> Y, in place of a
            with m.If(ln_is.lnx):
                for name in ("x", "y"):
                    m.d.comb += [bufs[name].rd_addr.eq(ln_lanes.rd_addr), bufs[name].rd_en.eq(ln_lanes.rd_en)]
                with m.If(lanes_turn):
                    y = bufs["y"]
                    m.d.comb += [y.w.addr.eq(ln_lanes.w.payload.addr), y.w.data.eq(ln_lanes.w.payload.data),
                                 y.w.en.eq(ln_lanes.w.valid.replicate(simd))]

        self._mover_ports(m, d, x_turn)
        self._param_copies(m, d)

    def _mover_ports(self, m, d, x_turn):
        """The mover's buffer writes (its loads) and reads (its stores); X's read port the lanes' in the cycles out
        of ``x_turn`` while the layer's last X'_t leaves behind LN2."""
        mover, bufs = d.mover, d.bufs
        # LOAD: X <- DRAM; STORE: X -> DRAM; tiled also LOAD_Q: Y <- DRAM, STORE_QKV: Y, WORK -> DRAM
        # a load's words go where the mover says (tiled, the residual X_t loads while the heads compute)
        wr = mover.wr
        for to_y, name in ((0, "x"), (1, "y")):
            with m.If(wr.valid & (wr.y == to_y)):
                b = bufs[name]
                m.d.comb += [b.w.addr.eq(wr.addr), b.w.data.eq(wr.data), b.w.en.eq(wr.en)]
        # the stores read their buffer's port straight, whatever the op (tiled: X'_t leaves while the next block's
        # heads compute, K_t and V_t^T while its Q does)
        x, y = bufs["x"], bufs["y"]
        for reads, b in ((mover.reads_x & ~(d.xout_behind & ~x_turn), x), (mover.reads_y, y)):
            with m.If(reads):
                m.d.comb += [b.rd_addr.eq(mover.rd_addr), b.rd_en.eq(mover.rd_en)]
        with m.If(mover.rd_banks & mover.store_busy):
            m.d.comb += d.work.read_bank(mover.rd_bank, mover.rd_addr, mover.rd_en)
        m.d.comb += [mover.x_word.eq(x.word), mover.y_word.eq(y.word), mover.work_word.eq(d.work.word)]

    def _param_copies(self, m, d):
        """The parameter copier between the ParamStore slot in use and the blocks it fills."""
        ws, ln_lanes = d.ws, d.ln_lanes
        copier = d.copier
        m.d.comb += [ws.param_slot.eq(d.slot), ws.param_addr.eq(copier.param_addr), copier.param_data.eq(ws.param_data),
                     copier.loaded.eq(ws.param_loaded[d.slot]), copier.flush.eq(d.flush),
                     ws.param_release.eq(copier.release & d.last_blk)]   # the pass's last LN2 copy: slot done
        wiring.connect(m, copier.shift, d.operand.shift)
        wiring.connect(m, copier.gelu, d.gelu.table_w)
        wiring.connect(m, copier.ln, ln_lanes.param)

    def _score_groups(self) -> Serializer:
        """An MVAU score beat (``pe`` keys) to the softmax in groups of :attr:`EngineGeometry.softmax_lanes` keys, one
        group a cycle; the MVAU makes a beat every ``score_interval`` cycles, so the groups keep up. Its ``i.ready``
        is a register: the softmax's input handshake does not reach the MVAU's output credit in the same cycle."""
        g = self.g
        lanes = g.softmax_lanes
        return Serializer(g.pe // lanes, score_layout(self.cfg.acc_bits(g.head_dim), lanes), registered_ready=True)

    def _position_bias(self, m, d, key0, step):
        """T5's relative position bias of a score beat (``model.position_bias``): lane l's entry ``key0 + l - query +
        R - 1`` of the head's table (0 in the cross heads). The table (the copier's BIAS copy, [heads, 2R] int entries)
        lives in ``pe`` banks of distributed RAM (entry i in bank i % pe), so a beat's ``pe`` consecutive entries are
        one read of each bank, rotated. The beat's first entry (``bias_base``) is a register, kept equal to
        ``bias_head + key0 + R - 1 - query`` by stepping it with ``key0`` and ``query``; it takes that sum anew until
        a SCORES job's first beat (``bias_head`` changes between the jobs, the beat comes cycles after the job)."""
        g, cfg, pe, S = self.g, self.cfg, self.g.pe, self.g.seq
        lp, r = (pe - 1).bit_length(), cfg.bias_radius
        n = g.heads * 2 * r
        bits = self.cfg.acc_bits(g.head_dim)
        banks = []
        for b in range(pe):
            mem = Memory(shape=signed(bits), depth=n // pe, init=[], attrs={"ram_style": "distributed"})
            m.submodules[f"position_bias{b}"] = mem
            w, rd = mem.write_port(), mem.read_port(domain="comb")
            c = d.copier.bias
            m.d.comb += [w.addr.eq(c.addr >> lp), w.data.eq(c.data), w.en.eq(c.en & (c.addr[:lp] == b))]
            banks.append(rd)
        base = Signal(range(n + 2 * r), name="bias_base")
        stepped = Signal(name="bias_stepped")      # a beat of this SCORES job has been taken
        with m.If(d.op != Op.SCORES):
            m.d.sync += stepped.eq(0)
        with m.Elif(step):
            m.d.sync += stepped.eq(1)
        with m.If(step):            # a row's last beat: key0 back to 0, the query one row on
            m.d.sync += base.eq(Mux(key0 == S - pe, base - (S - pe) - 1, base + pe))
        with m.Elif(~stepped):
            m.d.sync += base.eq(d.bias_head + key0 + (r - 1) - d.query)
        for b, rd in enumerate(banks):          # bank b holds the entry of the lane (b - base) % pe
            m.d.comb += rd.addr.eq((base >> lp) + (b < base[:lp]))
        data = Array(rd.data for rd in banks)
        out = []
        for l in range(pe):
            lane = Signal(signed(bits), name=f"position_bias_lane{l}")
            m.d.comb += lane.eq(Mux(d.cross_phase, 0, data[(base[:lp] + l)[:lp]]))
            out.append(lane)
        return out

    def _key_mask(self, m, d, key0, step):
        """The attention mask of a score beat: bit l is 1 when key ``key0 + l`` may be attended. BERT padding: the
        first TOKENS keys (a prefix); keys beyond them and the padding up to ``seq`` are masked. With
        ``model.causal`` also no key after the beat's query row: the block's first row plus the rows of this SCORES
        job so far (``step``: a beat taken; a row ends with the beat of key ``seq - pe``). The row count restarts
        whenever the op is not SCORES (a PV separates every two heads)."""
        g = self.g
        if not self.cfg.model.causal:
            return Cat(*(key0 + l < d.tokens for l in range(g.pe)))
        if self.cfg.seq2seq:     # the encoder's run is not causal; the cross heads attend the memory's rows
            own = self._causal_mask(m, d, key0, step)
            return Mux(d.cross_phase, Cat(*(key0 + l < d.mem_tokens for l in range(g.pe))),
                       Mux(d.cross_run, own, Cat(*(key0 + l < d.tokens for l in range(g.pe)))))
        return self._causal_mask(m, d, key0, step)

    def _causal_mask(self, m, d, key0, step):
        g = self.g
        # the query row's position: CACHE_LEN (0 without a KV cache) + the block's first row + the job's rows
        d.query = query = Signal(range(2 * g.seq), name="query_row")
        with m.If(d.op != Op.SCORES):
            m.d.sync += query.eq(d.cache_len + d.blk * g.rows if g.tiled else 0)
        with m.Elif(step & (key0 == g.seq - g.pe)):
            m.d.sync += query.eq(query + 1)
        return Cat(*((key0 + l < d.key_end) & (key0 + l <= query) for l in range(g.pe)))

    def _status(self, m, d):
        """STATUS, ERROR_*, the counters' inputs and the weight streamer's and mover's run controls. STATUS.busy: a
        run, or AXI transactions still in flight after it was abandoned (a soft reset or an error): no AR pending,
        no R beat, W beat or B response owed. CTRL.start is ignored until then."""
        regs, ws, mover = d.regs, d.ws, d.mover
        # registered: STATUS.busy falls a cycle after the bus went idle (the masters' busy logic stays off the
        # START -> weight streamer path)
        drained = Signal(init=1)
        m.d.sync += drained.eq(~self.m_axi_arvalid & ~ws.busy & ~mover.busy)
        # the mover's cancel a cycle after the abandon, from a register: an error of one of its sides, decoded by the
        # sequencer, no longer reaches the other side's W stage in the same cycle (the mover is busy or idle
        # through that cycle; the sequencer, idle after abandoning, starts no transfer in it)
        cancel_moves = Signal(name="cancel_moves")
        m.d.sync += cancel_moves.eq(regs.soft_reset | d.abandon)
        m.d.comb += [regs.busy.eq(d.busy | ~drained), regs.done.eq(d.done),
                     regs.error.eq(ws.error | mover.error | d.bad_tokens | d.bad_scratch | d.bad_cache | d.bad_memory),
                     regs.error_addr.eq(Mux(ws.error, ws.error_addr, mover.error_addr)),
                     regs.error_code.eq(Cat(Mux(ws.error, ws.error_code, mover.error_code), d.bad_tokens,
                                            d.bad_scratch, d.bad_cache, d.bad_memory)),
                     regs.read_beat.eq((self.m_axi_rvalid & self.m_axi_rready)),
                     regs.compute_busy.eq(d.mvau.busy), regs.dma_stall.eq(d.stall),
                     ws.layers.eq(d.layers), ws.run_blocks.eq(d.run_blocks), ws.weight_base.eq(regs.weight_base),
                     ws.cross.eq(d.cross_run), ws.prefill.eq(d.cache_len == 0),
                     ws.cancel.eq(regs.soft_reset),
                     ws.clear.eq(regs.start), mover.cancel.eq(cancel_moves), mover.clear.eq(regs.start),
                     ws.scratch_base.eq(regs.scratch_base), ws.scratch_ready.eq(d.scratch_ready)]


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
