"""The layer engine's sequencer: one FSM whose state names the phase and its step.

:class:`Sequencer` writes the FSM of :class:`~mlo_hw.hw.layer_engine.LayerEngine` into the engine's module. It
drives the datapath's components through their start/command ports (the MVAU's job stream, the activation
operand, the result writer, the tile parameter latch, the parameter copier, the LayerNorm lanes, the activation
mover, the weight streamer's tile and parameter handshakes) and watches their progress counters. ``op`` (which
every datapath multiplexer selects on) and ``ln_op`` (the LayerNorm lanes') are registers, loaded with the next
state's at every transition (:meth:`Sequencer.goto`), so that no state decode sits in front of a multiplexer;
``busy``, ``stall`` and ``done`` are decoded from the state. The states, per layer (``docs/engine.md``, ``docs/tiling.md``)::

    IDLE -> LOAD (on chip) or FETCH (tiled) -> HEADER_WAIT -> HEADER_READ -> Q_PARAMS
    on chip:  Q, K, V -> per head SCORES, PV -> O -> LN1 -> FFN_UP -> FFN_DOWN -> LN2 -> (next layer | STORE)
    tiled:    pass 1 per block: P1_LOAD_X (the first, post-LN in the run's first layer once K's first tile is in; the
              others load beside Q before: P1_BLOCK), K, V, P1_NEXT_X
              (X_{t+1} loads into X's other half beside Q), P1_STORE_KV (K_t's and V_t^T's stores, beside Q), Q,
              P1_STORE_Q (Q_t's store, beside the next block's K and V; the pass's last Q_t stays in Y; the pass's
              scratch is ready once the last K_t and V_t^T have left, beside the last Q)
              pass 2 per block, from the last block on (T - 1, then 0 .. T - 2: the first's Q_t is in Y): P2_BLOCK
              (the others' Q_t loading since the block before's LN2), per head SCORES, PV (K_h/V_h^T tiles;
              X'_{t-1} leaves, then the residual X_t loads meanwhile), O, LN1, FFN_UP, FFN_DOWN, LN2, P2_NEXT_Q
              (the next block's Q_t loads, its heads start at once, reading Q_t's rows as they come, and X'_t
              leaves beside them; post-LN the next block starts once LN2's lanes have read every row, P2_BLOCK,
              and X'_t leaves once they have written it: ``block_behind_ln2``) or, the layer's last block,
              P2_STORE_X (post-LN its X'_t leaves from LN2's start on, reading the rows the lanes have written:
              ``store_behind_ln2``) -> (next layer | IDLE); a pass's first
              state (P1_LOAD_X, P2_BLOCK, P0_LOAD_M) follows a one-cycle ``<state>_START``, in which the
              block's addresses load (``block_registers``)
    pre-LN:   LN1 before Q (on chip after Q_PARAMS; tiled after each P1_LOAD_X), then O -> LN2 -> FFN_UP ->
              FFN_DOWN, the layer's end (``model.norm: pre``: ``docs/engine.md``, "Pre-LN layers")
    an encoder-decoder's decoder run (MEMORY_TOKENS > 0, ``docs/seq2seq.md``): a prefill first runs pass 0 per
              memory block: P0_LOAD_M, XK, XV, P0_STORE_K/VT (the memory's cross K and V^T into the scratch);
              pass 2 runs, after LN1, XQ -> per head SCORES, PV over the cross K_h / V_h^T (``cross_phase``) ->
              XO -> LNX, then FFN_UP (pre-LN: after O, LNX -> XQ -> the cross heads -> XO, then LN2)

A weight matrix is four states per tile (``*_TILE_WAIT``, ``*_LATCH``, ``*_JOB``, ``*_WAIT``); CTRL.soft_reset,
a weight read error or an activation transfer error abandons the run in any state, a cycle later (``halt``, a
register; the blocks are flushed; the AXI masters complete what is in flight).

It is a generator, not a component: it runs inside ``LayerEngine.elaborate`` on the handles the datapath
exposes (``d``, a namespace built there) so that each job's handshake is written once, next to its state.
"""

from __future__ import annotations

from contextlib import contextmanager

from amaranth import Cat, Const, Mux, Signal, Value, signed
from amaranth.lib import data

from ...model.tiled import scratch_layout
from ...perf import layernorm_overlaps
from ...plan import kv_cache
from ..buffers import PARAM_SECTIONS
from ..pipeline import delayed, split_sum
from ...model.weight_image import header_fields
from .block_mover import Transfer
from .param_copier import CopyKind
from .result_writer import Placement

__all__ = ["Sequencer", "ln_is_layout"]


def ln_is_layout():
    """``ln_op`` decoded: a flag per LayerNorm (``d.ln_is``, loaded beside it)."""
    return data.StructLayout({"ln1": 1, "ln2": 1, "lnx": 1})


class Sequencer:
    """The engine's FSM (module docstring), written into ``m`` over the datapath handles ``d``."""

    def __init__(self, m, d, cfg, g, ops):
        self.m, self.d, self.cfg, self.g, self.Op = m, d, cfg, g, ops
        self.free_registers = {}         # transfer_wait's, by the busy they wait on
        Op, H, I = ops, g.hidden, g.inter
        self.mat_cols = {Op.Q: H, Op.K: H, Op.V: H, Op.O: H, Op.FFN_UP: H, Op.FFN_DOWN: I}
        self.mat_rows = {Op.Q: H, Op.K: H, Op.V: H, Op.O: H, Op.FFN_UP: I, Op.FFN_DOWN: H}
        self.mat_shift = {Op.Q: "q_shift", Op.K: "k_shift", Op.V: "v_shift", Op.O: "o_shift",
                          Op.FFN_UP: "ffn_up_shift", Op.FFN_DOWN: "ffn_down_shift"}
        self.dst_cols = {Op.Q: H, Op.PV: H, Op.O: H, Op.FFN_UP: I, Op.FFN_DOWN: H}
        self.placement = {Op.Q: Placement.ROWS16, Op.K: Placement.K, Op.V: Placement.VT, Op.O: Placement.ROWS16,
                          Op.FFN_UP: Placement.ROWS8, Op.FFN_DOWN: Placement.ROWS16}
        self.seq2seq = cfg.seq2seq
        if self.seq2seq:      # the cross-attention's matrices: as Q, K, V, O
            for o, like in ((Op.XQ, Op.Q), (Op.XK, Op.K), (Op.XV, Op.V), (Op.XO, Op.O)):
                self.mat_cols[o], self.mat_rows[o], self.placement[o] = H, H, self.placement[like]
                self.mat_shift[o] = f"x{like.name.lower()}_shift"
                self.dst_cols[o] = H
        self.narrowed = {Op.Q: 0, Op.K: 0, Op.V: 0, Op.FFN_UP: 1, Op.XQ: 2, Op.XK: 3, Op.XV: 3}   # shift set
        self.tile = Signal(range(g.max_tiles + 1), name="tile")
        self.tiles = Signal.like(self.tile, name="tiles")
        self.last_tile = Signal(name="last_tile")        # tile == tiles, registered (it gates the overlap logic)
        self.head = Signal(range(g.heads + 1), name="head")
        # the parameter store's read port: the header's word (hdr_addr) while hdr_sel, else the copier's; both
        # registers, so that no state decode sits in front of the store's address adder. hdr_addr also counts
        # the header's fields (header_states).
        self.hdr_sel = Signal(name="hdr_sel")
        self.hdr_addr = Signal.like(d.ws.param_addr, name="hdr_addr")
        # HEADER_READ's cycle, one-hot (bit k in its cycle k; shifted every cycle, so 0 after it): field i's
        # registers take the store's data at bit i + 1, an enable straight from a flip-flop, not a decode of hdr_addr
        self.hdr_field = Signal(len(header_fields(cfg)) + 1, name="hdr_field")
        self.expected = Signal.like(d.writer.count, name="expected")
        # the writer has written ``expected`` beats since its start: a register, its count's next value compared a
        # cycle ahead (the count, which still holds the job before's in the cycle after a start, and its comparison were
        # in front of the states' decisions: the writer's start register -> the comparison -> the WAIT states' tile
        # release -> the tile buffer's ``used`` enable, 7.04 ns at 18f3507's seed 2 on the ECP5-85F). ``expected`` is
        # set only with a writer start, whose next cycle reads 0
        self.all_written = Signal(name="all_written")
        m.d.sync += self.all_written.eq(~d.writer.start & (d.writer.count_next == self.expected))
        # the next tile's bias/mult latched during the current tile's job (from the other bank): started, done
        self.ahead_started, self.ahead = Signal(name="ahead_started"), Signal(name="ahead")
        # the LayerNorm after O / FFN down started during the matrix's last tile (``ln_early``, until the next
        # matrix); ``ln_partial`` while that tile still writes (``ln_op`` names it); the rows it has finished
        self.ln_early, self.ln_partial = Signal(name="ln_early"), Signal(name="ln_partial")
        self.ln_rows = Signal(range(g.rows + 1), name="ln_rows")
        # tiled: the residual X_t is to load (from the heads' start, once the mover is idle: pending_transfers)
        self.x_pending = Signal(name="x_pending")
        # tiled: block t's V_t^T store is to go once its K_t store ends (beside block t's Q: pending_transfers)
        # tiled, post-LN: block t's X'_t store is to go once LN2, running behind block t + 1's heads, has written it
        # (from xout_at, xout_words: x_out_at's and x_out_words' of block t; pending_transfers)
        self.xout_pending = Signal(name="xout_pending")
        self.vt_pending = Signal(name="vt_pending")
        # tiled: the pass's last K_t and V_t^T stores are under way; scratch_ready rises once they have ended (the
        # first head's K_h then streams in beside the last block's Q: pending_transfers)
        self.kv_leaving = Signal(name="kv_leaving")
        self.overlap_layernorm = layernorm_overlaps(cfg)
        self.pre_ln = cfg.model.norm == "pre"      # the layer kind: LayerNorm before (GPT-2) or after (BERT)
        # every state's (op, ln_op) and, per state a transition names, the constants goto() loads (driven in build,
        # once every state is known); per state, its transitions in the order written, each with the two flags
        # (constants, driven in build) that say whether it loads op and ln_op (:meth:`goto`)
        self.state_ops, self.next_ops, self.transitions = {}, {}, {}
        # the state being written (``state``), and per state the mover's command its transfers drive (``transfer``)
        self.current_state, self.commands = None, {}

    # ---- states and transitions ---------------------------------------------------------------------------
    @contextmanager
    def state(self, name, op=None, ln_op=None):
        """State ``name`` of the FSM, in which ``op`` and ``ln_op`` are the given ops (``None``: IDLE)."""
        assert name not in self.state_ops, name
        self.state_ops[name] = tuple(self.Op.IDLE if o is None else o for o in (op, ln_op))
        with self.m.State(name):
            self.current_state = name
            yield
            self.current_state = None

    def goto(self, name):
        """The transition to state ``name`` (``m.next``), loading ``op`` and ``ln_op`` with its ops in the same edge;
        where transitions compete, the last one written wins for the registers as for the state. A transition in a
        state loads a register only where it may change it (:meth:`load_flags`): the registers' enables then decode
        the few transitions that change them, not every transition of the FSM (``ln_is``'s enable was 7.55 ns at
        485a352's seed 2)."""
        if name not in self.next_ops:
            self.next_ops[name] = tuple(Signal(self.Op, name=f"{kind}_of_{name.lower()}") for kind in ("op", "ln_op"))
        m, src = self.m, self.current_state
        m.next = name
        if src is None:
            loads = (1, 1)
        else:
            loads = tuple(Signal(name=f"loads_{kind}_{src.lower()}_{len(self.transitions.get(src, []))}")
                          for kind in ("op", "ln_op"))
            self.transitions.setdefault(src, []).append((name, loads))
        with m.If(loads[0]):
            m.d.sync += self.d.op.eq(self.next_ops[name][0])
        with m.If(loads[1]):
            self.set_ln_op(self.next_ops[name][1])

    def load_flags(self):
        """Drive each transition's load flags (:meth:`goto`): a transition loads ``op`` (``ln_op``) when its target's
        differs from its state's, or when a transition written before it in the state does (it may then override
        that one's load, as it overrides its target). ``op`` is always its state's, so a transition that keeps it
        need not load it; ``ln_op`` may name a LayerNorm running behind or started early in a state whose own is IDLE,
        but only in states that leave it through a transition that changes it (the early start's O and FFN down
        wait for their LayerNorm's RUN), through :meth:`abandon` (which loads IDLE itself) or while
        :meth:`behind_layernorm` loads it every cycle."""
        for src, moves in self.transitions.items():
            changed = [False, False]
            for target, flags in moves:
                for k in range(2):
                    changed[k] |= self.state_ops[src][k] != self.state_ops[target][k]
                    self.m.d.comb += flags[k].eq(changed[k])

    def ln_flags(self, ln_op):
        """``ln_op``'s decode, as ``ln_is`` holds it (a field per LayerNorm op, in the layout's order)."""
        return Cat(*(ln_op == getattr(self.Op, name.upper()) for name, _ in ln_is_layout()))

    def set_ln_op(self, ln_op):
        """``ln_op`` and its decode ``ln_is`` loaded with ``ln_op`` (a constant, or a transition's constant)."""
        self.m.d.sync += [self.d.ln_op.eq(ln_op), self.d.ln_is.eq(self.ln_flags(ln_op))]

    def stale_op(self):
        """1 while ``op`` or ``ln_op`` is not the current state's (a transition written without :meth:`goto`): the
        traced engine's ``trace_stale_op``, a simulation check (also 1 while ``ln_is`` is not ``ln_op``'s decode).
        Outside the LayerNorm's states ``ln_op`` may name the LayerNorm started early (``ln_partial``), or, while
        ``halt`` (a state that does not abort may see the flags cleared before the next one abandons), one behind."""
        d, Op = self.d, self.Op
        stale = Cat(*(self.fsm.ongoing(name) & ((d.op != o) | ((d.ln_op != lo) & (~(self.ln_partial | d.ln_behind
                                                                                    | d.ln2_behind | self.halt)
                                                                                  if lo == Op.IDLE else 1)))
                      for name, (o, lo) in self.state_ops.items())).any()
        return stale | (d.ln_is.as_value() != self.ln_flags(d.ln_op))

    # ---- small actions (combinational in the current state) ------------------------------------------
    def results_written(self):
        """The result writer has written ``expected`` beats since its start (``all_written``, a register)."""
        return self.all_written

    def start_writer(self, where, beats, row_step, chan_word=0, base=0, tiles=0):
        w = self.d.writer
        c = w.cfg
        self.m.d.comb += [w.start.eq(1), c.placement.eq(where), c.beats.eq(beats), c.row_step.eq(row_step),
                          c.chan_word.eq(chan_word), c.base.eq(base), c.tiles.eq(tiles)]

    def operand_command(self, base, stride, n_words, narrowed=False, shift_base=0, passes=1):
        c = self.d.operand.cmd
        self.m.d.comb += [c.base.eq(base), c.stride.eq(stride), c.words.eq(n_words), c.vectors.eq(self.g.rows),
                          c.passes.eq(passes), c.narrowed.eq(narrowed), c.shift_base.eq(shift_base)]

    def result_beats(self, o):
        """The result writer's beats of matrix ``o``: ``pe`` output channels of a row a beat."""
        return self.g.rows * self.mat_rows[o] // self.g.pe

    def start_matrix(self, o):
        m, d, g = self.m, self.d, self.g
        m.d.sync += [self.tile.eq(0), self.tiles.eq(self.mat_rows[o] // g.tile_rows - 1),
                     self.last_tile.eq(self.mat_rows[o] == g.tile_rows),
                     self.expected.eq(self.result_beats(o)), self.ahead_started.eq(0), self.ahead.eq(0),
                     self.ln_early.eq(0)]
        m.d.comb += d.tparams.clear.eq(1)
        self.start_writer(self.placement[o], g.tile_rows // g.pe, g.words(self.dst_cols.get(o, g.hidden)),
                          base=d.F_BASE if o == self.Op.FFN_UP else 0, tiles=1)
        self.goto(f"{o.name}_TILE_WAIT")

    def abandon(self):
        # the blocks are reset (two cycles later, from registers) and at the next start; the AXI masters drain what is in flight
        # (the mover is cancelled, also a transfer started in this very cycle)
        # (the run's flags are cleared by ``halt`` itself, outside the FSM: :meth:`clear_run_flags`)
        self.m.d.comb += [self.d.flush.eq(1), self.d.abandon.eq(1)]
        self.goto("IDLE")
        self.set_ln_op(self.Op.IDLE)      # (a LayerNorm started early or behind: ln_op not its state's)

    def clear_run_flags(self):
        """Outside the FSM, after every other writer of these flags: ``halt`` (a register) clears the run's flags
        (the header's selects, the LayerNorm and softmax behind flags, the pending transfers), not the abandon's
        decode: that decode, with the mover's error in it, fanned out across the die into the flags' enables
        (bert_tiny_auto's routed critical path on seed 4 at 25d1348: the mover's ``started`` -> the store's error
        -> the abandon -> ``xout_behind``'s enable, 7.62 ns). ``halt`` stays high until the run is abandoned (an
        error until the next START), so a state that does not abort (a pass's one-cycle start) sets no flag that
        outlives it; START's cycle sets none of them."""
        m = self.m
        flags = [self.ln_partial, self.hdr_sel, self.hdr_field, self.d.ln_behind, self.d.p_behind, self.d.ln2_behind,
                 self.d.xout_behind, self.x_pending, self.xout_pending, self.vt_pending, self.kv_leaving]
        with m.If(self.halt):
            m.d.sync += [f.eq(0) for f in flags]

    def halt_register(self):
        """``halt``: a register, high from the cycle after a soft reset or an AXI error (the weight streamer's, the
        mover's) until the run is abandoned, so that the errors, which come from across the die, reach the FSM's
        next-state logic from a flip-flop beside it (the mover's error into every state's abort was 7.32 ns at
        e3a54ec's seed 1 on an ECP5-85F). The soft reset, a pulse, is kept (``soft_reset_pending``) until the run is
        abandoned: a state that does not abort (a pass's one-cycle start) hands it on. The errors stay set until the
        next START clears them; START's cycle is kept out, so a run does not see the last run's."""
        m, d = self.m, self.d
        regs = d.regs
        self.halt = Signal(name="halt")
        pending = Signal(name="soft_reset_pending")
        with m.If(regs.soft_reset):
            m.d.sync += pending.eq(1)
        with m.Elif(d.abandon | regs.start):
            m.d.sync += pending.eq(0)
        m.d.sync += self.halt.eq((pending | regs.soft_reset | d.ws.error | d.mover.error) & ~regs.start)

    def tile_ready_register(self):
        """``tile_ready``: the weight streamer's, registered beside the FSM (from the tile buffer's flush register into
        the state's enable was 7.20 ns, 5.7 of it wire, at 22d8044's seed 1 on an ECP5-85F). It reads 0 in the cycle
        after a release, when the buffer's ``ready`` turns to the next bank; a TILE_WAIT state follows a release a cycle
        later at the earliest, so it never sees the released bank's."""
        self.tile_ready = Signal(name="tile_ready_q")
        self.m.d.sync += self.tile_ready.eq(self.d.ws.tile_ready & ~self.d.ws.tile_release)

    def abort(self):
        # an AXI error on the weights or the activations, or a soft reset, abandons the run (a cycle later: halt)
        with self.m.If(self.halt):
            self.abandon()

    def request_copy(self, kind):
        self.m.d.comb += [self.d.copier.request.eq(1), self.d.copier.kind.eq(kind)]

    def wait_for_copy(self):
        # a phase waiting for its parameter copy: a DMA stall only while the section is not in from DRAM
        self.m.d.comb += [self.d.busy.eq(1), self.d.stall.eq(self.d.copier.waiting)]

    def transfer(self, kind, base, n_words, runs=1, step=0, local=0, local_step=0, inner=1, outer_stride=0, start=1):
        """The mover's ``start`` (``start``: when it starts) with its command. In a state the command is the state's
        alone (:meth:`drive_commands`, whatever the conditions around the start): a state issues one command.
        Outside the FSM (``pending_transfers``) it is driven here, over the states'."""
        fields = {"kind": kind, "base": base, "words": n_words, "runs": runs, "step": step, "local": local,
                  "local_step": local_step, "inner": inner, "outer_stride": outer_stride}
        self.m.d.comb += self.d.mover.start.eq(start)
        if self.current_state is None:
            self.drive_command(fields)
            return
        known = self.commands.setdefault(self.current_state, fields)
        assert all(repr(Value.cast(known[f])) == repr(Value.cast(v)) for f, v in fields.items()), \
            f"state {self.current_state} issues two different transfers"

    def drive_command(self, fields):
        c = self.d.mover.cmd
        self.m.d.comb += [getattr(c, f).eq(v) for f, v in fields.items()]

    def drive_commands(self):
        """Outside the FSM, after it: the mover's command of the current state, from the state register alone, so
        that the conditions of a transfer's start (a count reached, the mover idle, an error) are not in front of the
        mover's command register (bert_tiny_auto's routed critical path on seed 4 at 7da924b: LayerNorm's ``written``
        -> the LN2 state's decisions -> the command's base multiplexer -> ``given``, 7.14 ns; the XC7A35T's deepest
        register, depth 10)."""
        with self.m.Switch(self.fsm.state):
            for name, fields in self.commands.items():
                with self.m.Case(self.fsm.encoding[name]):
                    self.drive_command(fields)

    # ---- state families -----------------------------------------------------------------------------
    def tile_wait_state(self, o, then: str):
        """``o``'s next tile is not in the tile buffer yet: a DMA stall."""
        m, d = self.m, self.d
        with self.state(f"{o.name}_TILE_WAIT", o):
            m.d.comb += [d.busy.eq(1), d.stall.eq(~self.tile_ready)]
            with m.If(self.tile_ready):
                self.goto(then)
            self.abort()

    def matrix_states(self, o, then):
        """A weight matrix: per tile, wait for it, latch its bias/mult, issue the job (all block rows), and
        release the bank once the MVAU has read its last weight word (the last tile: once every result is
        written); then ``then()``. The activation operand streams the block's rows once a tile from the first
        job on, and the next tile's bias/mult are latched from its bank while the current job reads its
        weights, so that a tile's job follows the last weight read of the one before two cycles later."""
        m, d, g, Op = self.m, self.d, self.g, self.Op
        cols, name, cmd = self.mat_cols[o], o.name, d.mvau.cmd.payload
        self.tile_wait_state(o, f"{name}_LATCH")
        with self.state(f"{name}_LATCH", o):
            # the tile's bias/mult into the free parameter set (the previous job may still read the other)
            m.d.comb += [d.busy.eq(1), d.tparams.latch.eq(1)]
            with m.If(d.tparams.latched):
                self.goto(f"{name}_JOB")
            self.abort()
        with self.state(f"{name}_JOB", o):
            m.d.comb += [d.busy.eq(1), d.mvau.cmd.valid.eq(1),
                         cmd.col_folds.eq(cols // g.simd), cmd.row_folds.eq(g.tile_rows // g.pe),
                         cmd.vectors.eq(g.rows), cmd.shift.eq(d.hdr[self.mat_shift[o]]), cmd.raw.eq(0),
                         cmd.act_unsigned.eq(o == Op.FFN_DOWN),      # uint8 GELU codes
                         cmd.wide.eq(o in (Op.O, Op.FFN_DOWN, Op.XO))]     # int16 residual stream
            self.operand_command(d.CTX_BASE if o in (Op.O, Op.XO) else 0, g.words(cols), g.words(cols),
                                 narrowed=o in self.narrowed,
                                 shift_base=self.narrowed.get(o, 0) * g.words(g.hidden), passes=self.tiles + 1)
            with m.If(d.mvau.cmd.ready):
                m.d.comb += [d.operand.start.eq(self.tile == 0), d.tparams.job.eq(1)]
                self.goto(f"{name}_WAIT")
            self.abort()
        with self.state(f"{name}_WAIT", o):
            m.d.comb += d.busy.eq(1)
            with m.If(~self.last_tile):
                # the next tile's bias/mult from the other bank once it is full; once begun, without a gap
                latching = Signal(name=f"{name.lower()}_latching")
                m.d.comb += latching.eq(~self.ahead & (self.ahead_started | d.ws.tile_next_ready))
                with m.If(latching):
                    m.d.comb += [d.tparams.latch.eq(1), d.ws.cnext.eq(1)]
                    m.d.sync += [self.ahead_started.eq(1), self.ahead.eq(d.tparams.latched)]
                # the tile's weights all read: its job (one a tile) has issued its last step (the MVAU's register,
                # not a count of its reads: that count's adder and comparator behind the MVAU's issue decision and
                # its command's ready into the state's decode were 7.69 ns at 485a352's seed 2)
                with m.If(~d.mvau.issuing):
                    m.d.comb += d.ws.tile_release.eq(1)
                    m.d.sync += [self.tile.eq(self.tile + 1), self.last_tile.eq(self.tile + 1 == self.tiles),
                                 self.ahead_started.eq(0), self.ahead.eq(0)]
                    with m.If(self.ahead | (latching & d.tparams.latched)):
                        self.goto(f"{name}_JOB")
                    with m.Elif(latching):         # the rest of the latch, from the same bank, now the read bank
                        self.goto(f"{name}_LATCH")
                    with m.Else():
                        self.goto(f"{name}_TILE_WAIT")
            with m.Else():
                if o in (Op.O, Op.FFN_DOWN) and self.overlap_layernorm:
                    self.early_layernorm(Op.LN1 if o == Op.O else Op.LN2)
                with m.If(self.results_written()):
                    m.d.comb += d.ws.tile_release.eq(1)
                    m.d.sync += [self.tile.eq(self.tile + 1), self.ln_partial.eq(0)]
                    if o in (Op.O, Op.FFN_DOWN) and self.overlap_layernorm:
                        with m.If(self.ln_early):
                            self.goto("LN1_RUN" if o == Op.O else "LN2_RUN")
                        with m.Else():
                            then()
                    else:
                        then()
            self.abort()

    def start_layernorm(self, o):
        """Start the lanes on LayerNorm ``o`` (its gains and biases are in); the LayerNorm before FFN up (LN1
        post-LN, LN2 pre-LN; LNX in a decoder run with cross-attention) hands the copier on to the GELU table,
        which FFN up needs next."""
        m, Op = self.m, self.Op
        m.d.comb += self.d.ln_lanes.start.eq(1)
        if o == Op.LN2 and self.g.tiled and not self.pre_ln:
            self.store_behind_ln2()
        if self.pre_ln:
            if o == Op.LN2:
                self.request_copy(CopyKind.GELU)
        elif o == Op.LNX:
            self.request_copy(CopyKind.GELU)
        elif o == Op.LN1:
            with m.If(~self.d.cross_run):
                self.request_copy(CopyKind.GELU)

    def store_behind_ln2(self):
        """Tiled post-LN, as LN2 starts on the layer's last block: X'_t's store pends (``xout_pending``; the mover is
        idle in FFN down) and, once issued, reads the rows the lanes have written whole, X's read port theirs in turn
        (``d.xout_behind``, the engine), so that it leaves beside LN2 rather than after it; P2_STORE_X waits for its
        end."""
        m, d = self.m, self.d
        with m.If(d.last_blk):
            m.d.sync += [self.xout_pending.eq(1), self.xout_at.eq(self.x_out_at),
                         self.xout_words.eq(self.x_out_words()), d.xout_behind.eq(1)]

    def early_layernorm(self, ln):
        """In the last tile of the matrix before LayerNorm ``ln`` (O, FFN down): once its gains and biases are in,
        start the lanes; while the tile writes (``ln_partial``), :meth:`partial_layernorm` lets them read the rows
        it has finished."""
        m, d = self.m, self.d
        with m.If(~self.ln_early & d.copier.done):
            self.start_layernorm(ln)
            m.d.sync += [self.ln_early.eq(1), self.ln_partial.eq(1), self.ln_rows.eq(0)]
            self.set_ln_op(ln)

    def partial_layernorm(self):
        """Outside the FSM, from registers only: while ``ln_partial``, the lanes follow ``ln_op`` and may
        read ``ln_rows`` rows, registered a cycle behind the result writer's count (row-major result beats,
        ``tile_rows / pe`` a row, from the last tile's first beat on)."""
        m, d, g = self.m, self.d, self.g
        groups = g.tile_rows // g.pe
        Op = self.Op
        assert self.result_beats(Op.O) == self.result_beats(Op.FFN_DOWN)
        first = self.result_beats(Op.O) - g.rows * groups       # O's and FFN down's last tile's first beat
        since = Signal(signed(len(d.writer.count) + 1), name="ln_since")
        m.d.comb += since.eq(d.writer.count - first)
        with m.If(self.ln_partial):
            m.d.comb += d.ln_avail.eq(self.ln_rows * g.words(g.hidden))
            with m.If(since >= 0):
                m.d.sync += self.ln_rows.eq(since >> (groups.bit_length() - 1))

    def attention_states(self, o, job_rows, cols, then):
        """One attention product of the current head (SCORES: Q_h K_h^T; PV: P V_h); on chip its weight
        operand (K_h, V_h^T) is read from WORK, tiled it is a tile of the weight stream."""
        m, d, g, Op = self.m, self.d, self.g, self.Op
        S, R, cmd = g.seq, g.rows, d.mvau.cmd.payload
        if g.tiled:
            self.tile_wait_state(o, f"{o.name}_JOB")
        with self.state(f"{o.name}_JOB", o):
            m.d.comb += [d.busy.eq(1), d.mvau.cmd.valid.eq(1),
                         cmd.col_folds.eq(cols // g.simd), cmd.row_folds.eq(job_rows // g.pe), cmd.vectors.eq(R)]
            if o == Op.SCORES:
                m.d.comb += cmd.raw.eq(1)
                self.operand_command(d.head_kword, g.words(g.hidden), g.words(g.head_dim))
            else:
                shift = Mux(d.cross_phase, d.hdr["x_ctx_shift"], d.hdr["ctx_shift"]) if self.seq2seq \
                    else d.hdr["ctx_shift"]
                m.d.comb += [cmd.shift.eq(shift), cmd.act_unsigned.eq(1)]
                self.operand_command(0, g.words(S), g.words(S))
            with m.If(d.mvau.cmd.ready):
                m.d.comb += d.operand.start.eq(1)
                if o == Op.SCORES:       # (PV starts while the softmax still writes P: behind_softmax; s_beats,
                    # key0 and the P counters restart a cycle later, d.scores_restart)
                    m.d.comb += d.scores_start.eq(1)
                if not g.tiled:
                    a = d.attw.cfg
                    m.d.comb += [d.attw.start.eq(1), a.cols.eq(g.words(cols)), a.rows.eq(job_rows // g.pe),
                                 a.base.eq(d.K_LOCAL + d.head_kword if o == Op.SCORES else d.V_LOCAL + d.head_vrow),
                                 a.stride.eq(g.words(g.hidden) if o == Op.SCORES else g.words(S))]
                if o == Op.PV:
                    m.d.sync += self.expected.eq(R * g.head_dim // g.pe)
                    self.start_writer(Placement.ROWS8, g.head_dim // g.pe, g.words(g.hidden), chan_word=d.head_kword,
                                      base=d.CTX_BASE)
                self.goto(f"{o.name}_WAIT")
            self.abort()
        with self.state(f"{o.name}_WAIT", o):
            m.d.comb += d.busy.eq(1)
            # SCORES: every score beat is in the softmax (PV runs behind it: behind_softmax)
            done = d.scores_in & ~d.scores_restart if o == Op.SCORES else self.results_written()
            if g.tiled and o == Op.PV:       # and the residual X_t's load (pending_transfers)
                done &= ~d.mover.busy & ~self.x_pending
            with m.If(done):
                if g.tiled:       # every weight word has been read long before the last result
                    m.d.comb += d.ws.tile_release.eq(1)
                then()
            self.abort()

    def first_attention_step(self):
        self.goto("SCORES_TILE_WAIT" if self.g.tiled else "SCORES_JOB")

    def next_head(self):
        m, d, g = self.m, self.d, self.g
        m.d.sync += [self.head.eq(self.head + 1), d.head_kword.eq(d.head_kword + g.words(g.head_dim)),
                     d.head_vrow.eq(d.head_vrow + (g.head_dim // g.pe) * g.words(g.seq)),
                     d.bias_head.eq(d.bias_head + 2 * self.cfg.bias_radius)]
        with m.If(self.head == g.heads - 1):
            if self.seq2seq:     # post-LN: O, LN1, XQ .. XO, LNX; pre-LN: O, LNX, XQ .. XO, LN2
                with m.If(d.cross_phase):        # the cross heads' end: XO, then the norm after it
                    m.d.sync += d.cross_phase.eq(0)
                    self.start_matrix(self.Op.XO)
                    self.request_copy(CopyKind.LN2 if self.pre_ln else CopyKind.LNX)
                with m.Else():
                    self.start_matrix(self.Op.O)
                    if self.pre_ln:
                        with m.If(d.cross_run):
                            self.request_copy(CopyKind.LNX)
                        with m.Else():
                            self.request_copy(CopyKind.LN2)
                    else:
                        self.request_copy(CopyKind.LN1)
            else:
                self.start_matrix(self.Op.O)
                self.request_copy(CopyKind.LN2 if self.pre_ln else CopyKind.LN1)
        with m.Else():
            self.first_attention_step()

    def to_attention(self, cross=False):
        """The heads (``cross``: of the cross-attention, over the memory's K and V)."""
        d = self.d
        self.m.d.sync += [self.head.eq(0), d.head_kword.eq(0), d.head_vrow.eq(0), d.bias_head.eq(0)]
        if cross:
            self.m.d.sync += d.cross_phase.eq(1)
        self.first_attention_step()

    def params_state(self, o, then):
        """Once the parameter copy of ``o`` (Q: the narrowing shifts; FFN up: the GELU table) is done, ``then()``."""
        m, d = self.m, self.d
        with self.state(f"{o.name}_PARAMS", o):
            self.wait_for_copy()
            with m.If(d.copier.done):
                then()
            self.abort()

    def layernorm_states(self, o, then, behind=None, read_behind=None):
        """LayerNorm ``o`` over the block's rows, once its gains and biases (copied during the phase before) are in;
        then ``then()``, or, with ``behind`` (post-LN LN1: FFN up's start), ``behind()`` once the GELU table is in,
        the lanes running on (``d.ln_behind``, :meth:`behind_layernorm`), or, with ``read_behind`` (tiled post-LN LN2:
        the next block's start, :meth:`block_behind_ln2`), ``read_behind()`` once the lanes have read every row
        (``rd_done``): it decides whether it goes."""
        m, d, g = self.m, self.d, self.g
        with self.state(f"{o.name}_PARAMS", o, ln_op=o):
            self.wait_for_copy()
            with m.If(d.copier.done):
                self.start_layernorm(o)
                self.goto(f"{o.name}_RUN")
            self.abort()
        with self.state(f"{o.name}_RUN", o, ln_op=o):
            m.d.comb += d.busy.eq(1)
            with m.If(d.ln_lanes.all_written):
                then()
            if behind is not None:       # the GELU table (requested as LN1 started, not in a cross run) is in
                with m.Elif(d.copier.done & (~d.cross_run if self.seq2seq else 1)):
                    behind()
                    m.d.sync += d.ln_behind.eq(1)
                    self.set_ln_op(o)     # over the transition's IDLE
            if read_behind is not None:
                with m.Elif(d.ln_lanes.rd_done):
                    read_behind()
            self.abort()

    def behind_layernorm(self):
        """Outside the FSM, after it: while ``d.ln_behind`` (``d.ln2_behind``), ``ln_op`` stays LN1 (LN2) (the
        states' transitions load IDLE) until the lanes have written every row; so does ``d.xout_behind``."""
        m, d, g = self.m, self.d, self.g
        for behind, o in ((d.ln_behind, self.Op.LN1), (d.ln2_behind, self.Op.LN2)):
            with m.If(behind & ~self.halt):
                with m.If(d.ln_lanes.all_written):
                    m.d.sync += behind.eq(0)
                    self.set_ln_op(self.Op.IDLE)
                with m.Else():
                    self.set_ln_op(o)
        if self.g.tiled:         # the layer's last X'_t store reads X's port in turns until LN2 has written every row
            with m.If(d.xout_behind & d.ln_lanes.all_written):
                m.d.sync += d.xout_behind.eq(0)

    def behind_softmax(self):
        """Outside the FSM, after it: ``d.p_behind`` (PV started once the MVAU's scores were all in the softmax; its
        operand waits for the P words the softmax has not written) until the softmax has written every probability."""
        m, d, g = self.m, self.d, self.g
        with m.If(d.p_behind & (d.p_count == g.rows * g.seq)):
            m.d.sync += d.p_behind.eq(0)

    def transfer_wait(self, name, o, then, until=None):
        """Wait for the mover (busy from the cycle after its start; ``until``: the busy to wait for, one side's, the
        other running on); an error ends the run: ``halt``, a register, abandons it. The wait ends on a register
        beside the FSM (``mover_free``, or ``<name>_free`` for a wait on one side; one per busy waited on): the mover
        was free in the cycle before (``until`` low, no error) and started nothing then; busy rises only the cycle
        after a start, so the mover is free now too, and the wait ends a cycle after busy falls. The mover's busy and error, from across the die, reach no state decision
        (bert_tiny_auto's routed critical path on seed 1 at 624f44f: the mover's load runs' state -> its busy and
        error -> P2_STORE_X's end of the layer -> ``first_layer``'s enable, 7.39 ns)."""
        m, d = self.m, self.d
        busy = d.mover.busy if until is None else until
        free = self.free_registers.get(repr(busy))          # (one register for the waits on the same busy)
        if free is None:
            free = Signal(name="mover_free" if until is None else f"{name.lower()}_free")
            self.free_registers[repr(busy)] = free
            m.d.sync += free.eq(~busy & ~d.mover.error & ~d.mover.start)
        with self.state(name, o):
            m.d.comb += d.busy.eq(1)
            with m.If(self.halt):                # the mover finishes its bursts (cancel)
                self.abandon()
            with m.Elif(free):
                then()

    # ---- the FSM --------------------------------------------------------------------------------------
    def build(self):
        m, g, Op = self.m, self.g, self.Op
        self.halt_register()
        self.tile_ready_register()
        self.blocks_setup()
        if g.tiled:
            self.block_registers()
        if self.overlap_layernorm:
            self.partial_layernorm()
        with m.If(self.hdr_sel):                # the header's reads (header_states), else the copier's
            m.d.comb += self.d.ws.param_addr.eq(self.hdr_addr)
        # the header's fields (HEADER_READ): the store's read data is a cycle behind its address, so field i arrives
        # in the state's cycle i + 1; hdr_field shifts here, HEADER_WAIT (below) loads it
        m.d.sync += self.hdr_field.eq(self.hdr_field << 1)
        for i, f in enumerate(header_fields(self.cfg)):
            with m.If(self.hdr_field[i + 1]):
                m.d.sync += self.d.hdr[f].eq(self.d.ws.param_data)
        with m.FSM(name="seq") as self.fsm:
            self.start_states()
            self.header_states()
            if self.pre_ln:        # LN1 before Q, K, V (tiled: before K, V, Q of every block in pass 1)
                self.layernorm_states(Op.LN1, lambda: self.start_matrix(Op.K if g.tiled else Op.Q))
            if g.tiled:
                self.tiled_states()
                after_layer = self.store_block
            else:
                self.params_state(Op.Q, self.pre_ln_first if self.pre_ln else lambda: self.start_matrix(Op.Q))
                self.matrix_states(Op.Q, lambda: self.start_matrix(Op.K))
                self.matrix_states(Op.K, lambda: self.start_matrix(Op.V))
                self.matrix_states(Op.V, self.to_attention)
                after_layer = self.end_of_layer
            self.layer_tail_states(after_layer)
        if not self.pre_ln:
            self.behind_layernorm()
        self.behind_softmax()
        self.drive_commands()
        if g.tiled:
            self.pending_transfers()
        self.clear_run_flags()
        for name, sigs in self.next_ops.items():
            assert name in self.state_ops, f"a transition to {name}, which is no state"
            m.d.comb += [sig.eq(o) for sig, o in zip(sigs, self.state_ops[name])]
        self.load_flags()

    def pre_ln_first(self):
        """Pre-LN, on chip: once the narrowing shifts are in, LN1's gains and biases, then LN1."""
        self.request_copy(CopyKind.LN1)
        self.goto("LN1_PARAMS")

    def blocks_setup(self):
        """The block counter's companions: each block's offsets in DRAM, the layer's source and destination."""
        m, d, g, cfg = self.m, self.d, self.g, self.cfg
        self.sc = sc = scratch_layout(cfg)
        addr_bits = len(d.regs.input_base)
        self.io_words = 2 * g.words(g.tokens * g.hidden)   # byte words of the DRAM input / output (tokens rows)
        self.block_words = 2 * g.words(g.rows * g.hidden)  # byte words of a block of an int16 [S, H] tensor
        # the address of the block's rows of Q [S, H] in the scratch (an address, not an offset: a transfer's base is
        # then one adder from a register at most), and the block's K_h and V_h^T runs' offsets from the layer's KV base
        # kv_at (their region's offset included: the pass's, K and V^T, or the memory pass's cross XK and XV^T)
        self.q_at, self.k_off, self.vt_off = (Signal(addr_bits, name=n) for n in ("q_at", "k_off", "vt_off"))
        # the block's rows of the layer's input and output, and of an encoder-decoder's memory (src, dst, MEMORY_BASE
        # plus the block's offset in an int16 [S, H] tensor: addresses, loaded at a pass's start)
        self.x_in_at, self.x_out_at, self.x_mem_at = (Signal(addr_bits, name=n) for n in
                                                       ("x_in_at", "x_out_at", "x_mem_at"))
        self.io_left = Signal(range(self.io_words + 1), name="io_left")   # byte words of the input / output from this block on
        self.io_block = Signal.like(self.io_left, name="io_block")          # byte words of this block inside the input / output
        self.src, self.dst = Signal(addr_bits, name="src"), Signal(addr_bits, name="dst")   # the layer's input, output
        # layer == 0, layer == layers - 1: registers, set where the layer changes (START, end_of_layer); src and
        # dst follow them a cycle later (the header comes between a layer's change and its first transfer)
        self.first_layer, self.last_layer = Signal(name="first_layer"), Signal(name="last_layer")
        # layer + 2 == layers, compared a cycle ahead (a layer lasts far longer): no adder in front of last_layer
        self.penultimate_layer = delayed(m, d.layer + 2 == d.layers, 1, "penultimate_layer")
        regs = d.regs
        m.d.sync += [
            self.src.eq(Mux(self.first_layer, regs.input_base, regs.scratch_base + Mux(d.layer[0], sc.x1, sc.x0))),
            self.dst.eq(Mux(self.last_layer, regs.output_base, regs.scratch_base + Mux(d.layer[0], sc.x0, sc.x1)))]
        # the next block's (its X_t loads during this block's stores): a register that follows io_left a cycle later
        # (io_block takes it at the next block)
        self.io_next = Signal.like(self.io_left, name="io_next")
        rest = Mux(self.io_left > self.block_words, self.io_left - self.block_words, 0)
        m.d.sync += self.io_next.eq(Mux(rest > self.block_words, self.block_words, rest))
        # the KV cache (kv_cache): the layer's K and V^T regions (from kv_at, SCRATCH_BASE plus the layer's stride), the
        # words of a block's K_h and of a V_h^T run that fit below the cache's capacity (a block written from key
        # CACHE_LEN on)
        self.kv_at = Signal(addr_bits, name="kv_at")
        # the block's K_h and V_h^T addresses (kv_at plus k_off, vt_off), and the next block's rows of X and Q: sums two
        # cycles behind their terms (which change a block's work before the transfers that use them), so that every
        # transfer's base is a register
        self.k_at = split_sum(m, self.kv_at, self.k_off, "k_at", addr_bits)
        self.vt_at = split_sum(m, self.kv_at, self.vt_off, "vt_at", addr_bits)
        self.x_next_at = split_sum(m, self.x_in_at, 2 * g.rows * g.hidden, "x_next_at", addr_bits)
        self.q_next_at = split_sum(m, self.q_at, g.rows * g.hidden, "q_next_at", addr_bits)
        self.vt_base = Signal(addr_bits, name="vt_base")    # vt_at of the block whose V^T store is pending
        self.xout_at = Signal(addr_bits, name="xout_at")    # x_out_at of the block whose X' store is pending
        self.xout_words = Signal.like(self.io_left, name="xout_words")
        # the pulses that load them (block_registers): a pass's start (and whether it is the memory pass), a block's
        # advance
        self.pass_start, self.pass_cross = Signal(name="pass_start"), Signal(name="pass_cross")
        self.pass_rotated = Signal(name="pass_rotated")     # pass 2: its first block is the last
        self.advancing, self.wrapping = Signal(name="advancing"), Signal(name="wrapping")
        self.k_words = Signal(range(g.words(g.rows * g.head_dim) + 1), name="k_words")
        self.vt_words = Signal(range(g.words(g.rows * g.pe) + 1), name="vt_words")

    def start_kv(self, cache_len):
        """At START: the per-block K_h and V_h^T store lengths of a run from key ``cache_len`` on."""
        g = self.g
        keys = Signal(range(g.rows + 1), name="kv_keys")
        self.m.d.comb += keys.eq(Mux(g.seq - cache_len < g.rows, g.seq - cache_len, g.rows))
        self.m.d.sync += [self.kv_at.eq(self.d.regs.scratch_base), self.k_words.eq(keys * (g.head_dim // g.simd)),
                          self.vt_words.eq(keys >> (g.simd // g.pe).bit_length() - 1)]

    def cache_bad(self, cache_len, tokens):
        """CACHE_LEN not a multiple of the KV cache's unit, above 0 with more than a block's tokens, or CACHE_LEN +
        TOKENS beyond its capacity (``ERROR_CODE.bad_cache``); never without a KV cache (CACHE_LEN reads 0)."""
        kv = kv_cache(self.cfg)
        if kv is None:
            return Const(0)
        return ((cache_len[:kv.unit.bit_length() - 1] != 0) | ((cache_len != 0) & (tokens > kv.block))
                | (cache_len + tokens > kv.capacity))

    def memory_bad(self, memory_tokens, cache_len):
        """An encoder-decoder: MEMORY_TOKENS above the sequence, or a decode step (CACHE_LEN > 0) of the encoder's run
        (MEMORY_TOKENS 0) (``ERROR_CODE.bad_memory``); never in another build (MEMORY_TOKENS reads 0)."""
        if not self.seq2seq:
            return Const(0)
        return (memory_tokens > self.g.tokens) | ((memory_tokens == 0) & (cache_len != 0))

    def start_pass(self, first, cross=False, rotated=False):
        """The pass's block counter, and its addresses (a cycle later, ``block_registers``), then state ``first``
        through its one-cycle ``<first>_START``; ``cross``: the memory pass, whose K and V^T stores go to the cross
        regions (XK, XV^T); ``rotated``: pass 2, which starts with the last block (pass 1's last Q_t is still in Y),
        then runs blocks 0 .. T - 2."""
        m, d = self.m, self.d
        m.d.sync += [d.blk.eq(d.run_blocks - 1 if rotated else 0), d.pass_blk.eq(0), d.last_blk.eq(d.run_blocks == 1),
                     self.pass_start.eq(1), self.pass_cross.eq(cross), self.pass_rotated.eq(rotated),
                     self.advancing.eq(0), d.x_rd_half.eq(0), d.x_wr_half.eq(0)]
        self.goto(f"{first}_START")

    def advance_block(self):
        """The block counter, and its companions a cycle later (``block_registers``), to the next block: from the last
        block (pass 2's first) to block 0 (``wrapping``): a rotated pass's first advance, told by two registers."""
        m, d = self.m, self.d
        wrap = self.pass_rotated & (d.pass_blk == 0)
        m.d.sync += [d.blk.eq(Mux(wrap, 0, d.blk + 1)), d.pass_blk.eq(d.pass_blk + 1),
                     d.last_blk.eq(d.pass_blk + 2 == d.run_blocks), self.advancing.eq(1), self.wrapping.eq(wrap)]

    def block_registers(self):
        """Outside the FSM: the block's addresses and lengths load a cycle after a pass's start or a block's advance,
        from the two pulses (``pass_start``, ``advancing``), so that the FSM's decisions (a transfer's end, its error,
        the soft reset, the block count) are not at the enables of their ~250 flip-flops (33c325b's seed 2 on the
        ECP5-85F: ``blk``'s enable into ``io_block``, ``x_out_at`` and ``io_left``, 8.08-8.13 ns). Nothing reads them
        in that cycle: a pass's first state follows its ``_START`` state, a block's next transfer comes two cycles
        or more after its advance."""
        m, d, g, sc = self.m, self.d, self.g, self.sc
        R, H = g.rows, g.hidden
        m.d.sync += [self.pass_start.eq(0), self.advancing.eq(0)]        # pulses (the FSM's assignments win)
        # pass 2's first block is the last (T - 1, of the run's blocks: one, or the plan's T), then block 0's addresses
        # (the Q_t of the block after T - 1, block 0's, at q_at + R H: q_at starts a block before the Q region)
        last_io = max(self.io_words - (g.blocks - 1) * self.block_words, 0)
        one = d.run_blocks == 1
        x_last = Mux(one, 0, (g.blocks - 1) * 2 * R * H)
        first_io_block, last_io_block = min(self.io_words, self.block_words), min(last_io, self.block_words)
        with m.If(self.advancing & self.wrapping):
            m.d.sync += [self.x_in_at.eq(self.src), self.x_out_at.eq(self.dst), self.q_at.eq(self.q_next_at),
                         self.io_left.eq(self.io_words), self.io_block.eq(first_io_block)]
        with m.Elif(self.advancing):
            # x_in_at and q_at step to their next-block sums (split_sum registers, settled a block's work after the
            # last step)
            m.d.sync += [self.x_in_at.eq(self.x_next_at),
                         self.x_out_at.eq(self.x_out_at + 2 * R * H), self.x_mem_at.eq(self.x_mem_at + 2 * R * H),
                         self.q_at.eq(self.q_next_at),
                         self.k_off.eq(self.k_off + R * g.head_dim), self.vt_off.eq(self.vt_off + R * g.pe),
                         self.io_left.eq(Mux(self.io_left > self.block_words, self.io_left - self.block_words, 0)),
                         self.io_block.eq(self.io_next)]
        with m.If(self.pass_start & self.pass_rotated):
            m.d.sync += [self.x_in_at.eq(self.src + x_last), self.x_out_at.eq(self.dst + x_last),
                         self.q_at.eq(d.regs.scratch_base + sc.q - R * H),
                         self.io_left.eq(Mux(one, self.io_words, last_io)),
                         self.io_block.eq(Mux(one, first_io_block, last_io_block))]
        with m.Elif(self.pass_start):
            # K_h's and V_h^T's first key: CACHE_LEN (a multiple of pe and simd, so of a weight word's keys)
            k_region, vt_region = (Mux(self.pass_cross, sc.xk, sc.k), Mux(self.pass_cross, sc.xvt, sc.vt)) \
                if self.seq2seq else (sc.k, sc.vt)
            m.d.sync += [self.x_in_at.eq(self.src), self.x_out_at.eq(self.dst),
                         self.x_mem_at.eq(d.regs.memory_base), self.q_at.eq(d.regs.scratch_base + sc.q),
                         self.k_off.eq(k_region + d.cache_len * g.head_dim),
                         self.vt_off.eq(vt_region + d.cache_len * g.pe), self.io_left.eq(self.io_words),
                         self.io_block.eq(min(self.io_words, self.block_words))]

    def next_block(self, more, last):
        m, d = self.m, self.d
        self.advance_block()
        with m.If(d.last_blk):
            last()
        with m.Else():
            self.goto(more)

    def end_of_layer(self):
        m, d = self.m, self.d
        m.d.sync += [d.layer.eq(d.layer + 1), self.first_layer.eq(0), self.last_layer.eq(self.penultimate_layer),
                     self.kv_at.eq(self.kv_at + self.sc.kv_stride)]
        with m.If(self.last_layer):
            if self.g.tiled:
                m.d.comb += d.done.eq(1)
                self.goto("IDLE")
            else:
                self.transfer(Transfer.STORE_X, d.regs.output_base, self.io_words)
                self.goto("STORE")
        with m.Else():
            self.goto("HEADER_WAIT")

    def start_states(self):
        """IDLE (START checks TOKENS and, tiled, the scratch base), then the input load (on chip) or the weight
        stream's start (tiled, once LAYERS is latched)."""
        m, d, g, Op = self.m, self.d, self.g, self.Op
        regs = d.regs
        # START's checks of TOKENS, SCRATCH_BASE, CACHE_LEN and MEMORY_TOKENS, registered: those registers change only
        # by AXI-Lite writes, at least two cycles before CTRL.start's (a write waits for the last one's B: a register
        # written in cycle t holds its value from t + 1, START comes in t + 3 at the earliest), so the checks are
        # current at START, and its acceptance (the enables of op, seq_state and the run's registers) does not wait on
        # their comparisons. SCRATCH_BASE's takes both cycles (its comparisons registered in ``d.scratch_bad``). A
        # build without a check has a constant, kept one.
        def registered(check, name):
            return check if isinstance(check, Const) else delayed(m, check, 1, name)
        tokens_bad = registered((regs.tokens == 0) | (regs.tokens > g.tokens), "tokens_bad")
        scratch_bad = registered(d.scratch_bad, "scratch_bad")
        cache_bad = registered(self.cache_bad(regs.cache_len, regs.tokens), "cache_bad")
        memory_bad = registered(self.memory_bad(regs.memory_tokens, regs.cache_len), "memory_bad")
        with self.state("IDLE"):
            m.d.comb += d.flush.eq(regs.start | regs.soft_reset)
            with m.If(regs.start):
                m.d.sync += [d.tokens.eq(regs.tokens), d.bad_tokens.eq(0), d.bad_scratch.eq(0), d.bad_cache.eq(0),
                             d.bad_memory.eq(0), d.mem_tokens.eq(regs.memory_tokens),
                             d.cross_run.eq(regs.memory_tokens != 0), d.cross_phase.eq(0),
                             d.cache_len.eq(regs.cache_len), d.key_end.eq(regs.cache_len + regs.tokens),
                             d.run_blocks.eq(Mux(regs.cache_len == 0, g.blocks, 1))]
                if g.tiled:
                    self.start_kv(regs.cache_len)
                with m.If(tokens_bad):
                    m.d.sync += d.bad_tokens.eq(1)
                with m.Elif(scratch_bad):
                    m.d.sync += d.bad_scratch.eq(1)
                with m.Elif(cache_bad):
                    m.d.sync += d.bad_cache.eq(1)
                with m.Elif(memory_bad):
                    m.d.sync += d.bad_memory.eq(1)
                with m.Else():
                    m.d.sync += [d.layer.eq(0), d.layers.eq(regs.layers), d.scratch_ready.eq(0),
                                 self.first_layer.eq(1), self.last_layer.eq(regs.layers == 1)]
                    if g.tiled:
                        self.goto("FETCH")
                    else:
                        self.transfer(Transfer.LOAD_X, regs.input_base, self.io_words)
                        self.goto("LOAD")
        if g.tiled:
            with self.state("FETCH"):
                m.d.comb += [d.busy.eq(1), d.ws.start.eq(~regs.soft_reset)]
                self.goto("HEADER_WAIT")
        else:
            def after_input():
                m.d.comb += d.ws.start.eq(1)
                self.goto("HEADER_WAIT")
            self.transfer_wait("LOAD", Op.LOAD, after_input)

    def header_states(self):
        """The layer's header fields from the parameter store, then the narrowing shifts' copy."""
        m, d = self.m, self.d
        header = d.pgeo.word("header")
        fields = header_fields(self.cfg)
        with self.state("HEADER_WAIT"):
            m.d.comb += [d.busy.eq(1), d.stall.eq(1)]
            m.d.sync += [self.hdr_sel.eq(1), self.hdr_addr.eq(header), self.hdr_field.eq(1), d.scratch_ready.eq(0)]
            with m.If(d.ws.param_loaded[d.slot][PARAM_SECTIONS.index("header")]):
                self.goto("HEADER_READ")
            self.abort()
        with self.state("HEADER_READ"):
            m.d.comb += d.busy.eq(1)
            m.d.sync += self.hdr_addr.eq(self.hdr_addr + 1)
            with m.If(self.hdr_field[len(fields)]):
                # the narrowing shifts of Q/K/V's and FFN up's inputs (the section follows the header)
                self.request_copy(CopyKind.NARROW)
                m.d.sync += self.hdr_sel.eq(0)
                self.goto("Q_PARAMS")
            self.abort()

    def tiled_states(self):
        """Pass 1 per block: X_t in; Q, K, V; Q_t, K_t (a run per head), V_t^T (a run per pe channels) out, and
        X_{t+1} in beside them (the mover's load and store sides run at once).
        Pass 2 per block: Q_t in; then the attention, with the residual X_t loading beside it, and the rest
        (``layer_tail_states``); Q_{t+1} in, and X'_t out beside the next block's heads."""
        m, d, g, Op = self.m, self.d, self.g, self.Op
        R, H = g.rows, g.hidden
        words = g.words
        def first_pass():
            if not self.pre_ln:   # the layer before's last X'_t may still be leaving X (block_behind_ln2)
                with m.If(self.x_free()):
                    first_pass_now()
            else:
                first_pass_now()

        def first_pass_now():
            if self.seq2seq:      # a decoder run's prefill: the memory's cross K and V first (pass 0)
                with m.If(d.cross_run & (d.cache_len == 0)):
                    self.start_pass("P0_LOAD_M", cross=True)
                with m.Else():
                    self.start_pass("P1_LOAD_X")
            else:
                self.start_pass("P1_LOAD_X")
        self.params_state(Op.Q, first_pass)
        # a cycle before a pass's first state (and, in the memory pass, before a block's load): the block's registers
        # load (block_registers)
        firsts = [("P1_LOAD_X", Op.LOAD), ("P2_BLOCK", Op.LOAD_Q)] + ([("P0_LOAD_M", Op.LOAD)] if self.seq2seq else [])
        for first, o in firsts:
            with self.state(f"{first}_START", o):
                m.d.comb += d.busy.eq(1)
                self.goto(first)
        if self.seq2seq:
            self.memory_pass_states()
        with self.state("P1_LOAD_X", Op.LOAD):
            m.d.comb += d.busy.eq(1)
            if self.pre_ln:        # LN1's gains and biases while the block loads
                self.transfer(Transfer.LOAD_X, self.x_in_at, Mux(self.first_layer, self.io_block, self.block_words))
                self.request_copy(CopyKind.LN1)
                self.goto("P1_LOAD_X_WAIT")
            else:                  # K reads X_t's rows as they come (the operand's load wait); the run's first block loads once K's
                # first tile is in (the weights and X_0 share the read port: K's tile first, then X_0 at K's pace)
                with m.If(self.tile_ready | ~self.first_layer):
                    self.transfer(Transfer.LOAD_X, self.x_in_at,
                                  Mux(self.first_layer, self.io_block, self.block_words))
                    self.start_matrix(Op.K)
                m.d.comb += d.stall.eq(~self.tile_ready & self.first_layer)
            self.abort()

        def to_ln1():
            self.goto("LN1_PARAMS")
        if self.pre_ln:
            # (the load side alone: the block before's Q_t store, from Y, runs on beside LN1 and K)
            self.transfer_wait("P1_LOAD_X_WAIT", Op.LOAD, to_ln1, until=d.mover.load_busy)
        with self.state("P1_BLOCK", Op.LOAD):      # the next block, its X_t loading since the block before's V
            m.d.comb += d.busy.eq(1)
            if self.pre_ln:        # LN1 reads X_t once it is in
                self.request_copy(CopyKind.LN1)
                self.goto("P1_LOAD_X_WAIT")
            else:                  # K reads its rows as they come; Q_{t-1} leaves meanwhile
                self.start_matrix(Op.K)

        def pass1_done():
            if self.cfg.model.position_bias:
                self.request_copy(CopyKind.BIAS)
            self.start_pass("P2_BLOCK", rotated=True)
        self.matrix_states(Op.K, lambda: self.start_matrix(Op.V))
        self.matrix_states(Op.V, lambda: self.goto("P1_NEXT_X"))
        # X holds two blocks: X_{t+1} loads into the half Q_t does not read (X_t's load is over: K_t read it all), so
        # the next block's K finds it in
        with self.state("P1_NEXT_X", Op.STORE_QKV):
            m.d.comb += d.busy.eq(1)
            with m.If(d.last_blk):
                self.goto("P1_STORE_KV")
            with m.Elif(~d.mover.load_busy):
                self.transfer(Transfer.LOAD_X, self.x_next_at, Mux(self.first_layer, self.io_next, self.block_words))
                m.d.sync += d.x_wr_half.eq(~d.x_rd_half)
                self.goto("P1_STORE_KV")
            self.abort()
        # K_t and V_t^T leave WORK beside Q_t (the store side is idle by then: Q_{t-1}'s store ran beside K and V;
        # V_t^T pends until K_t's has ended, and no state issues a transfer meanwhile); the pass's last: scratch_ready
        # once they have ended (kv_leaving), so that the first head's K_h streams in beside the last Q
        with self.state("P1_STORE_KV", Op.STORE_QKV):
            m.d.comb += d.busy.eq(1)
            with m.If(~d.mover.store_busy):
                self.store_k(None)
                m.d.sync += [self.vt_pending.eq(1), self.vt_base.eq(self.vt_at),
                             self.kv_leaving.eq(d.last_blk)]
                self.start_matrix(Op.Q)
            self.abort()
        self.matrix_states(Op.Q, lambda: self.goto("P1_STORE_Q"))
        # Q_t leaves Y once K_t and V_t^T have left WORK (the next block's K writes WORK; its Q writes Y once this
        # store has ended: P1_STORE_KV), beside the next block's K and V; the pass's last Q_t stays in Y, where pass 2's
        # first block, this one, reads it (once K_t's and V_t^T's stores are under way: no transfer pends)
        with self.state("P1_STORE_Q", Op.STORE_QKV):
            m.d.comb += d.busy.eq(1)
            with m.If(~self.vt_pending & ~d.mover.store_busy):
                with m.If(~d.last_blk):
                    self.transfer(Transfer.STORE_Q, self.q_at, words(R * H))
                    m.d.sync += d.x_rd_half.eq(~d.x_rd_half)
                    self.advance_block()
                    self.goto("P1_BLOCK")
                with m.Else():
                    pass1_done()
            self.abort()

        def heads_and_residual():
            # the residual X_t loads while the heads compute, once X'_{t-1} has left (pending_transfers)
            m.d.sync += self.x_pending.eq(1)
            if self.cfg.model.position_bias:      # the pass's first heads wait for the bias table (copied from pass 2 on)
                with m.If(d.pass_blk == 0):
                    self.goto("SCORES_PARAMS")
                with m.Else():
                    self.to_attention()
            else:
                self.to_attention()
        # pass 2's first block (Q_t in Y since pass 1), or the next block, its Q_t loading since the block before ended
        # (the scores read its rows as they come)
        with self.state("P2_BLOCK", Op.LOAD_Q):
            m.d.comb += d.busy.eq(1)
            heads_and_residual()
        if self.cfg.model.position_bias:
            self.params_state(Op.SCORES, self.to_attention)

        with self.state("P2_NEXT_Q", Op.STORE):   # Q_{t+1} loads; X'_t leaves beside the next block's heads
            m.d.comb += d.busy.eq(1)
            self.store_x()
            self.next_block("P2_BLOCK", self.end_of_layer)
        # the layer's last block: the end of X'_t's store, pending or under way since LN2 started (the next layer loads X)
        self.transfer_wait("P2_STORE_X", Op.STORE, lambda: self.next_block("P2_BLOCK", self.end_of_layer),
                           until=d.mover.busy | self.xout_pending)

    def pending_transfers(self):
        """Outside the FSM (tiled), the transfers that wait for the mover, each issued once it allows: the residual
        X_t's load, pending from the heads' start (``x_pending``) until the mover is idle and X'_{t-1} has left X
        (the last head's PV waits for the load); post-LN, X'_{t-1}'s store, pending (``xout_pending``) while LN2 writes
        it behind the heads (:meth:`block_behind_ln2`); and block t's V_t^T store, pending (``vt_pending``) while its
        K_t store runs beside block t's Q (Q_t's store, and so the next block's K, waits for both: P1_STORE_Q). The
        first two pend together (pass 2: X'_{t-1}'s command then drives the mover, the load waits for its end), never
        with the third (pass 1), and no FSM state issues a transfer meanwhile, so the command is driven while it
        pends, and only its start waits for the mover (its busy and ``halt``, which
        its errors decide, stay out of the command's multiplexers: bert_tiny_auto's routed critical path on seed 2 at
        2244104, the store's error -> the abandon -> the pending load's select -> the mover's command register, 9.07 ns)."""
        m, d = self.m, self.d
        # (X'_t's store and X_{t+1}'s load pend together: the store first, its command driven over the load's)
        for pending, busy, issue in (
                (self.x_pending, d.mover.busy | self.xout_pending, lambda go: self.transfer(
                    Transfer.LOAD_X, self.x_in_at, Mux(self.first_layer, self.io_block, self.block_words), start=go)),
                (self.xout_pending, d.mover.store_busy | d.ln2_behind, lambda go: self.transfer(
                    Transfer.STORE_X, self.xout_at, self.xout_words, start=go)),
                (self.vt_pending, d.mover.store_busy, lambda go: self.store_vt(None, self.vt_base, start=go))):
            # (the flag falls with the start, or with halt, which clears it too: not on the abandon's decode)
            with m.If(pending):
                issue(~busy & ~self.halt)
                with m.If(~busy):
                    m.d.sync += pending.eq(0)
        # the pass's last K_t and V_t^T have their B responses: the fetch program's scratch entries (K_h, V_h^T) may
        # read them (the first head's K_h then streams in beside the last block's Q)
        with m.If(self.kv_leaving & ~self.vt_pending & ~d.mover.store_busy & ~d.mover.error):
            m.d.sync += [d.scratch_ready.eq(1), self.kv_leaving.eq(0)]

    def store_k(self, state):
        """A block's K (a run per head, from WORK's banks) into the pass's K region of the layer's scratch, at
        ``k_at`` (then ``state``)."""
        d, g = self.d, self.g
        self.transfer(Transfer.STORE_K, self.k_at, self.k_words,
                      runs=g.heads, step=g.seq * g.head_dim, local=d.K_LOCAL, local_step=g.words(g.head_dim),
                      inner=g.words(g.head_dim), outer_stride=g.words(g.hidden))
        if state is not None:
            self.goto(state)

    def store_vt(self, state, at, start=1):
        """A block's V^T (a run per ``pe`` channels) into the layer's scratch at ``at`` (``vt_at``, or ``vt_base`` for
        a pending store, started when ``start``) (then ``state``)."""
        d, g = self.d, self.g
        self.transfer(Transfer.STORE_VT, at, self.vt_words,
                      runs=g.hidden // g.pe, step=g.seq * g.pe, local=d.V_LOCAL, local_step=g.words(g.rows),
                      inner=g.words(g.rows), start=start)
        if state is not None:
            self.goto(state)

    def memory_pass_states(self):
        """Pass 0 of a decoder run's prefill, per memory block: the block in (MEMORY_BASE, like the input: its
        MEMORY_TOKENS rows of the sequence's), the cross K and V of it (narrowed by the memory's shifts), their K_h
        and V_h^T runs into the layer's ``xk`` and ``xvt`` regions; then pass 1."""
        m, d, Op = self.m, self.d, self.Op
        with self.state("P0_LOAD_M", Op.LOAD):
            m.d.comb += d.busy.eq(1)
            self.transfer(Transfer.LOAD_X, self.x_mem_at, self.io_block)
            self.goto("P0_LOAD_M_WAIT")
        self.transfer_wait("P0_LOAD_M_WAIT", Op.LOAD, lambda: self.start_matrix(Op.XK))
        self.matrix_states(Op.XK, lambda: self.start_matrix(Op.XV))
        self.matrix_states(Op.XV, lambda: self.store_k("P0_STORE_K"))
        self.transfer_wait("P0_STORE_K", Op.STORE_QKV, lambda: self.store_vt("P0_STORE_VT", self.vt_at))
        self.transfer_wait("P0_STORE_VT", Op.STORE_QKV,
                           lambda: self.next_block("P0_LOAD_M_START", lambda: self.start_pass("P1_LOAD_X")))

    def store_block(self):
        """Tiled: after the layer's last phase, the next block's Q_{t+1} in (Y is read no more), and X'_t out to the
        next layer's input (or the output), both beside that block's heads (whose scores follow Q_{t+1}'s rows:
        the operand's load wait); the layer's last block: X'_t out alone, post-LN leaving since LN2 started
        (:meth:`store_behind_ln2`), P2_STORE_X waiting for its end."""
        m, d = self.m, self.d
        with m.If(d.last_blk):
            if self.pre_ln:
                self.block_end_transfer()
            self.goto("P2_STORE_X")
        with m.Else():
            self.block_end_transfer()
            self.goto("P2_NEXT_Q")

    def block_end_transfer(self):
        """The command of the layer's last phase's state: the next block's Q_{t+1} load; pre-LN, chosen by the block,
        the layer's last block's X'_t store instead (post-LN that store is under way: :meth:`store_behind_ln2`)."""
        d, g = self.d, self.g
        if not self.pre_ln:
            self.transfer(Transfer.LOAD_Q, self.q_next_at, g.words(g.rows * g.hidden))
            return
        last = d.last_blk
        self.transfer(Mux(last, Transfer.STORE_X, Transfer.LOAD_Q), Mux(last, self.x_out_at, self.q_next_at),
                      Mux(last, self.x_out_words(), g.words(g.rows * g.hidden)))

    def block_behind_ln2(self):
        """Tiled post-LN, once LN2's lanes have read every row of X and Y (but the run's last block): the next
        block's Q_{t+1} loads into Y and its heads start, while the lanes write X'_t on behind them
        (``d.ln2_behind``); X'_t's store pends until they have written it (``xout_pending``, from block t's address
        and length, latched here), the residual X_{t+1}'s load until that store has ended (pending_transfers). The
        heads read neither X nor LN2's parameters, and the next block's LN1 copy follows its last head's P . V,
        which waits for the residual's load. The layer's last block (not the run's): the next layer's header and
        narrowing shifts come in while the lanes write on and X'_t leaves behind them (:meth:`store_behind_ln2`);
        its first pass waits for that store's end (:meth:`x_free`)."""
        m, d = self.m, self.d
        with m.If(~d.last_blk):
            self.block_end_transfer()
            m.d.sync += [self.xout_pending.eq(1), self.xout_at.eq(self.x_out_at),
                         self.xout_words.eq(self.x_out_words()), d.ln2_behind.eq(1)]
            self.advance_block()
            self.goto("P2_BLOCK")
            self.set_ln_op(self.Op.LN2)     # over the transition's IDLE (then behind_layernorm)
        with m.Elif(~self.last_layer):
            m.d.sync += d.ln2_behind.eq(1)
            self.advance_block()
            self.end_of_layer()
            self.set_ln_op(self.Op.LN2)

    def x_free(self):
        """Tiled post-LN: X holds no block still to leave (the layer's last X'_t, stored behind its LN2, has left: its
        store's last B response is in; the lanes have then written every row it read)."""
        return ~self.xout_pending & ~self.d.mover.store_busy

    def store_x(self):
        self.transfer(Transfer.STORE_X, self.x_out_at, self.x_out_words())

    def x_out_words(self):
        return Mux(self.last_layer, self.io_block, self.block_words)

    def layer_tail_states(self, after_layer):
        """Per head SCORES and PV, then O, LN1, FFN up (GELU), FFN down, LN2 (pre-LN: O, LN2, FFN up, FFN down),
        then ``after_layer()``; on chip also the output store after the last layer."""
        m, d, g, Op = self.m, self.d, self.g, self.Op

        def to_pv():              # while the softmax writes the last rows of P (behind_softmax)
            m.d.sync += d.p_behind.eq(1)
            self.goto("PV_TILE_WAIT" if g.tiled else "PV_JOB")

        def to_ln1():
            self.goto("LN1_PARAMS")

        def to_ffn_up():
            self.goto("FFN_UP_PARAMS")

        def to_lnx():
            self.goto("LNX_PARAMS")

        def after_ln1():          # post-LN: the FFN next, or in a decoder run the cross-attention block first
            if self.seq2seq:
                with m.If(d.cross_run):
                    self.start_matrix(Op.XQ)
                with m.Else():
                    to_ffn_up()
            else:
                to_ffn_up()

        def to_ffn_down():
            self.start_matrix(Op.FFN_DOWN)
            if not self.pre_ln:
                self.request_copy(CopyKind.LN2)

        def to_ln2():
            self.goto("LN2_PARAMS")
        self.attention_states(Op.SCORES, g.seq, g.head_dim, to_pv)
        self.attention_states(Op.PV, g.head_dim, g.seq, self.next_head)
        self.params_state(Op.FFN_UP, lambda: self.start_matrix(Op.FFN_UP))
        self.matrix_states(Op.FFN_UP, to_ffn_down)
        if self.pre_ln:
            def after_o():       # pre-LN: LN2 next, or in a decoder run the cross-attention block first (LNX, XQ ..)
                if self.seq2seq:
                    with m.If(d.cross_run):
                        self.goto("LNX_PARAMS")
                    with m.Else():
                        to_ln2()
                else:
                    to_ln2()
            self.matrix_states(Op.O, after_o)
            self.layernorm_states(Op.LN2, to_ffn_up)
            self.matrix_states(Op.FFN_DOWN, after_layer)
            if self.seq2seq:
                self.layernorm_states(Op.LNX, lambda: self.start_matrix(Op.XQ))
                self.matrix_states(Op.XQ, lambda: self.to_attention(cross=True))
                self.matrix_states(Op.XO, to_ln2)
        else:
            self.matrix_states(Op.O, to_ln1)
            self.layernorm_states(Op.LN1, after_ln1, behind=lambda: self.start_matrix(Op.FFN_UP))
            self.matrix_states(Op.FFN_DOWN, to_ln2)
            self.layernorm_states(Op.LN2, after_layer, read_behind=self.block_behind_ln2 if g.tiled else None)
            if self.seq2seq:
                self.matrix_states(Op.XQ, lambda: self.to_attention(cross=True))
                self.matrix_states(Op.XO, to_lnx)
                self.layernorm_states(Op.LNX, to_ffn_up)
        if not g.tiled:
            def stored():
                m.d.comb += d.done.eq(1)
                self.goto("IDLE")
            self.transfer_wait("STORE", Op.STORE, stored)
