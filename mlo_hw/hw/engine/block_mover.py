"""Activation blocks between DRAM and the engine's buffers: the one AXI read and write path of the activations.

Every activation transfer of the engine is a :class:`Transfer` of one or more *runs* (a contiguous DRAM range
each), moved in words of ``simd`` bytes by one :class:`~mlo_hw.hw.engine.activation_io.BufferLoad` and one
:class:`~mlo_hw.hw.engine.activation_io.BufferStore`:

    LOAD_X    int16 rows from DRAM into X (the layer input; in the DRAM-tiled schedule also the residual):
              byte word i is half i % 2 of X's word i // 2
    LOAD_Q    int8 rows from DRAM into Y (the tiled schedule's Q block), each byte sign-extended to int16
    STORE_X   X's int16 rows to DRAM (the layer output)
    STORE_Q   the low bytes of Y's int16 lanes (Q, int8 values) to DRAM
    STORE_K   K from WORK's ``pe`` banks (token s in bank s % pe) as MVAU weight words of a head (``pe`` tokens x
              ``simd`` channels, token-major): a run per head
    STORE_VT  V^T from WORK's banks (channel c in bank c % pe) as weight words (``pe`` channels x ``simd``
              tokens): a run per group of ``pe`` channels

For STORE_K and STORE_VT a walker turns the store's word index into (bank, bank-local word): bank = index % pe;
the bank-local word starts at ``local`` (+ ``local_step`` per run), moves on by one every ``pe`` words, and
after ``inner`` such steps jumps by ``outer_stride`` (K: the next ``pe`` tokens' row). Run r moves ``words``
words between DRAM ``base + r * step`` and the buffers.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from ...model import numerics as nx
from ..pipeline import delayed
from ..axi import AxiParams, axi_read_master_members, axi_write_master_members, forward_ports
from .activation_io import BufferLoad, BufferStore

__all__ = ["Transfer", "mover_command_layout", "zero_extended", "BlockMover"]


class Transfer(enum.Enum, shape=3):
    LOAD_X = 0
    LOAD_Q = 1
    STORE_X = 2
    STORE_Q = 3
    STORE_K = 4
    STORE_VT = 5


def mover_command_layout(addr_bits: int, max_words: int, max_runs: int, local_bits: int) -> data.StructLayout:
    return data.StructLayout({"kind": Transfer, "base": addr_bits, "step": addr_bits, "runs": range(max_runs + 1),
                              "words": range(max_words + 1), "local": local_bits, "local_step": local_bits,
                              "inner": local_bits, "outer_stride": local_bits})


def zero_extended(byte_word):
    """A word of bytes as int16 lanes, byte i zero-extended into lane i: how the engine's read word (the MVAU's operand)
    carries a byte buffer's word."""
    return Cat(*(Cat(byte_word.word_select(i, 8), Const(0, nx.RES_BITS - 8)) for i in range(len(byte_word) // 8)))


class BlockMover(wiring.Component):
    """Runs a load and a store :class:`Transfer` (module docstring) at once, each on its own AXI master.

    Interface:
        start (pulse) with ``cmd`` (:func:`mover_command_layout`): to the load side (LOAD_X, LOAD_Q) or the store
        side (the rest); start a side only while it is idle. ``load_busy`` / ``store_busy`` until the side's last
        run's last word is in the buffer (loads) or its last B response is in (stores); ``busy``: either. A run of 0
        words moves nothing.
        cancel (soft reset: the AXI side completes what is in flight; no further run of the transfer starts),
        clear (clears ``error``).
        error, error_addr, error_code: the first failing beat's (see :mod:`mlo_hw.hw.act_dma`); no further run
        of either side is started after an error.
        Buffer reads (stores): ``rd_addr``/``rd_en`` (an X word while ``reads_x``, a Y word while ``reads_y``, or,
        when ``rd_banks``, the bank-local word of WORK bank ``rd_bank``; none while ``store_hold``, another reader's
        turn, and none of a byte word at or past ``store_avail``, judged a cycle late, so that a store may follow the
        writer of its words: the tiled engine's last X'_t behind LN2); ``read_latency`` cycles later the buffer's
        read data (the engine's buffers' registered words): ``x_word`` (STORE_X; X is free while the tiled engine's
        heads compute, when X'_t is stored), ``y_word`` (STORE_Q, int16 lanes) or ``work_word`` (STORE_K, STORE_VT;
        WORK is free while the next block's Q computes).
        Buffer writes (loads): ``wr`` (``valid``, word ``addr``, ``data``, per-int16-lane ``en``, ``y``; registers, a
        cycle after the load's word) into X (LOAD_X, ``y`` 0) or Y (LOAD_Q, ``y`` 1): the word names its buffer, so
        that a load may run beside the engine's other work. ``loaded``: the words of that buffer written whole since
        the load's start (a one-run load writes in address order from word 0: LOAD_Q a Y word a byte word, LOAD_X an
        X word every two), a register a cycle behind ``wr``, so that a reader may follow the load; ``loaded_next``:
        its value in the next cycle (its register's input, for a reader that judges a cycle ahead). ``load_busy``
        covers the last write on ``wr``. ``load_y``: the load side's command is a LOAD_Q (from its command
        register, ahead of ``wr.y``).
        ``m_axi_*``: an AXI4 read master (loads) and write master (stores).

    Timing: ``start`` and ``cmd`` are registered on the way in (the command latch and the side's choice then start
    from registers, not from the decode that names the transfer), so a transfer's side takes its command the cycle
    after ``start``; ``busy`` and the side's busy cover that cycle. A run starts two cycles after the previous one of
    its side ended (a transfer's first run three cycles after ``start``), from a state register: the decision to
    start it (runs left, an error, a cancel) is made the cycle before, when the run's registers step; words move at
    one a cycle (see ``BufferLoad``/``BufferStore``). A store's word, chosen from ``x_word``, ``y_word`` or
    ``work_word``, is registered twice before the store's queue (the store's read latency is ``read_latency + 2``).
    """

    def __init__(self, p: AxiParams, *, simd: int, pe: int, max_words: int, max_runs: int, local_bits: int,
                 read_latency: int = 1):
        if simd % 2:
            raise ValueError(f"BlockMover: simd={simd} bytes must hold whole int16 elements")
        self.p, self.simd, self.pe, self.max_words = p, simd, pe, max_words
        self.local_bits, self.read_latency = local_bits, read_latency
        super().__init__({
            "start": In(1), "cmd": In(mover_command_layout(p.addr_bits, max_words, max_runs, local_bits)),
            "cancel": In(1), "clear": In(1), "busy": Out(1), "load_busy": Out(1), "store_busy": Out(1),
            "error": Out(1), "error_addr": Out(p.addr_bits), "error_code": Out(3),
            "rd_addr": Out(local_bits), "rd_en": Out(1), "reads_x": Out(1), "reads_y": Out(1),
            "store_hold": In(1), "store_avail": In(range(max_words + 1), init=max_words),
            "x_word": In(nx.RES_BITS * simd), "y_word": In(nx.RES_BITS * simd), "work_word": In(8 * simd),
            "loaded": Out(range(max_words + 1)), "loaded_next": Out(range(max_words + 1)), "load_y": Out(1),
            "rd_banks": Out(1), "rd_bank": Out(range(max(pe, 2))),
            "wr": Out(data.StructLayout({"valid": 1, "addr": local_bits, "data": nx.RES_BITS * simd, "en": simd,
                                          "y": 1})),
            **axi_read_master_members(p), **axi_write_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p, simd, pe = self.p, self.simd, self.pe
        m.submodules.load = load = BufferLoad(p, 8 * simd, self.max_words)
        # the store's words two registers behind the buffers' (its read latency two more): see "buffer reads" below
        m.submodules.store = store = BufferStore(p, 8 * simd, self.max_words, read_latency=self.read_latency + 2)
        forward_ports(m, self, load, axi_read_master_members(p))
        forward_ports(m, self, store, axi_write_master_members(p))

        # the command registered on the way in; the two sides, each with its own command and runs: loads (LOAD_X,
        # LOAD_Q) and stores (the rest)
        started, given = delayed(m, self.start, 1, "started"), delayed(m, self.cmd, 1, "given")
        take_load = (given.kind == Transfer.LOAD_X) | (given.kind == Transfer.LOAD_Q)
        load_taken, store_taken = started & take_load, started & ~take_load
        lcmd, load_running, load_run_base, _ = self._runs(m, "load", load_taken, given, load)
        cmd, store_running, run_base, run_local = self._runs(m, "store", store_taken, given, store)
        run_start = store.start
        error = load.error | store.error
        m.d.comb += [load.cancel.eq(self.cancel), store.cancel.eq(self.cancel),
                     load.clear.eq(self.clear), store.clear.eq(self.clear),
                     self.error.eq(error), self.error_addr.eq(Mux(load.error, load.error_addr, store.error_addr)),
                     self.error_code.eq(Mux(load.error, load.error_code, store.error_code)),
                     load.base.eq(load_run_base), load.words.eq(lcmd.words), load.word_base.eq(0),
                     store.base.eq(run_base), store.words.eq(cmd.words), store.word_base.eq(0),
                     store.hold.eq(self.store_hold), store.avail.eq(self.store_avail)]

        # ---- the walker over WORK's banks (STORE_K, STORE_VT) ------------------------------------------
        # the bank-local word is run_local + outer + inner, kept in registers as it steps (walk_row = run_local +
        # outer, walk_word = walk_row + inner), so that no adder sits in front of the buffers' read requests (the
        # sum fed X's and Y's request registers through rd_addr's multiplexer: 33c325b's seed 2 on the ECP5-85F,
        # Y's request address, 8.15 ns)
        # The row's last step is an equality with ``inner - 1`` held in a register (the command is latched two cycles
        # before its first run starts): the subtractor's carry chain was in front of walk_word's select (the store's
        # command -> ``cmd.inner - 1`` -> the comparison -> ``walk_word``, 7.50 ns at 624f44f's seed 2 on an ECP5-85F)
        bank = Signal(range(pe))
        inner = Signal(self.local_bits)
        inner_last = Signal(self.local_bits, name="walk_inner_last")
        m.d.sync += inner_last.eq(cmd.inner - 1)
        walk_row = Signal(self.local_bits, name="walk_row")
        walk_word = Signal(self.local_bits, name="walk_word")
        with m.If(store.r_en):
            m.d.sync += bank.eq(bank + 1)
            with m.If(bank == pe - 1):
                m.d.sync += [bank.eq(0), inner.eq(inner + 1), walk_word.eq(walk_word + 1)]
                with m.If(inner == inner_last):
                    next_row = walk_row + cmd.outer_stride
                    m.d.sync += [inner.eq(0), walk_row.eq(next_row), walk_word.eq(next_row)]
        with m.If(run_start):
            m.d.sync += [bank.eq(0), inner.eq(0), walk_row.eq(run_local), walk_word.eq(run_local)]

        # ---- buffer reads for the store ------------------------------------------------------------------
        # of the read whose word is on x_word: delayed as the read is
        half = delayed(m, store.r_addr[0], self.read_latency, "half_q")
        m.d.comb += [self.rd_en.eq(store.r_en), self.rd_bank.eq(bank)]
        w8 = 8 * simd
        low_bytes = Cat(*(self.y_word.word_select(i, nx.RES_BITS)[:8] for i in range(simd)))
        m.d.comb += self.rd_banks.eq((cmd.kind == Transfer.STORE_K) | (cmd.kind == Transfer.STORE_VT))
        with m.Switch(cmd.kind):
            with m.Case(Transfer.STORE_X):
                m.d.comb += self.rd_addr.eq(store.r_addr >> 1)
            with m.Case(Transfer.STORE_Q):
                m.d.comb += self.rd_addr.eq(store.r_addr)
            with m.Case(Transfer.STORE_K, Transfer.STORE_VT):
                m.d.comb += self.rd_addr.eq(walk_word)
        # X's int16 lanes leave as they are (a byte word is half an X word); Q, K and V^T are bytes, the lanes' low ones.
        # The word is chosen in two registered steps before the store's queue: WORK's bank word (the banks' one
        # multiplexer, its select a register) is registered on its own beside X's half or Y's low bytes, then one of
        # the two (with the choice registered beside them); a block RAM's output and WORK's bank multiplexer were one
        # path with the queue's write (9fb44e8's seed 3 on the ECP5-85F, 8.15 ns), then, with one register, the bank
        # select's fan-out, the multiplexer and the choice (a2656b6's seed 3, 7.49 ns)
        work_q = Signal(w8, name="store_work_word", reset_less=True)
        other_q = Signal(w8, name="store_other_word", reset_less=True)
        from_work = Signal(name="store_from_work", reset_less=True)
        word = Signal(w8, name="store_word", reset_less=True)
        m.d.sync += [work_q.eq(self.work_word), from_work.eq(self.rd_banks),
                     other_q.eq(Mux(cmd.kind == Transfer.STORE_X, Mux(half, self.x_word[w8:], self.x_word[:w8]),
                                    low_bytes)),
                     word.eq(Mux(from_work, work_q, other_q))]
        m.d.comb += store.r_data.eq(word)

        # ---- buffer writes from the load ---------------------------------------------------------------
        # (into a register: ``wr`` leaves the mover from flip-flops, not from the load's word count, which was 3 ns of
        # wire from the buffers' write multiplexers: 7.33 ns at 5e9e52f's seed 1 on the ECP5-85F, aimed at 150 MHz)
        lw = load.w.payload
        wr = Signal(self.wr.shape(), name="wr_next")
        wr_q = Signal(self.wr.shape(), name="wr_q", reset_less=True)     # (the word: no reset; the valid has one)
        m.d.sync += [wr_q.eq(wr), self.wr.valid.eq(wr.valid)]
        m.d.comb += [self.wr[f].eq(wr_q[f]) for f in self.wr.shape().members if f != "valid"]
        m.d.comb += [load.w.ready.eq(1), wr.valid.eq(load.w.valid), wr.y.eq(self.load_y),
                     self.load_y.eq(lcmd.kind == Transfer.LOAD_Q)]
        lower = Const((1 << (simd // 2)) - 1, simd)
        with m.If(lcmd.kind == Transfer.LOAD_Q):
            m.d.comb += [wr.addr.eq(lw.addr), wr.en.eq((1 << simd) - 1),
                         wr.data.eq(Cat(*(Cat(b, b[7].replicate(nx.RES_BITS - 8))
                                          for b in (lw.data.word_select(i, 8) for i in range(simd)))))]
        with m.Else():
            m.d.comb += [wr.addr.eq(lw.addr >> 1), wr.data.eq(Cat(lw.data, lw.data)),
                         wr.en.eq(Mux(lw.addr[0], lower << (simd // 2), lower))]

        # byte words since the load's start: held at 0 while no load runs (a load's side runs from the cycle after
        # it takes its command, and a run writes nothing before that)
        # ``loaded`` follows them a cycle later (a reader waits a cycle longer; the command's kind and the halving are
        # not in front of the operand's hold) and clears with them
        written = Signal(range(self.max_words + 1), name="load_written")
        m.d.comb += self.loaded_next.eq(Mux(load_running, Mux(lcmd.kind == Transfer.LOAD_Q, written, written >> 1), 0))
        m.d.sync += self.loaded.eq(self.loaded_next)
        with m.If(self.wr.valid):
            m.d.sync += written.eq(written + 1)
        with m.If(~load_running):
            m.d.sync += written.eq(0)

        m.d.comb += [self.busy.eq(self.load_busy | self.store_busy),
                     self.reads_x.eq((cmd.kind == Transfer.STORE_X) & store_running),
                     self.reads_y.eq((cmd.kind == Transfer.STORE_Q) & store_running),
                     # a side's runs cover its engine's busy (a run waits for it to fall): the state alone, not the OR
                     # tree over the DMA's state, which the operand's hold and the buffers' read requests follow
                     self.load_busy.eq(load_running | load_taken), self.store_busy.eq(store_running | store_taken)]
        return m

    def _runs(self, m, name, start, given, engine):
        """One side's command and runs: ``start`` latches ``given``; a run starts ``engine`` two cycles after the
        previous one ended (RUN decides the first, STEP steps the run's registers and decides the next, START starts
        it). Returns the latched command, running, the run's DRAM base
        and bank-local word."""
        cmd = Signal.like(given, name=f"{name}_cmd")
        run_base = Signal(self.p.addr_bits, name=f"{name}_run_base")
        run_local = Signal(self.local_bits, name=f"{name}_run_local")
        runs_left = Signal.like(given.runs, name=f"{name}_runs_left")
        running = Signal(name=f"{name}_running")
        cancelled = Signal(name=f"{name}_cancelled")      # since the transfer's start: no further run
        with m.If(self.cancel):
            m.d.sync += cancelled.eq(1)
        stopped = self.error | self.cancel | cancelled                # no further run
        with m.FSM(name=f"{name}_runs"):
            with m.State("IDLE"):
                with m.If(start):
                    m.d.sync += [cmd.eq(given), run_base.eq(given.base), run_local.eq(given.local),
                                 runs_left.eq(given.runs), cancelled.eq(self.cancel)]
                    m.next = "RUN"
            with m.State("RUN"):            # the next run, decided here and started from the state register
                m.d.comb += running.eq(1)
                with m.If((runs_left == 0) | (cmd.words == 0) | stopped):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "START"
            with m.State("START"):
                m.d.comb += running.eq(1)
                with m.If(stopped):
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += engine.start.eq(1)
                    m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += running.eq(1)
                with m.If(~engine.busy):
                    m.next = "STEP"
            with m.State("STEP"):           # RUN after a run: the run's registers step here, on the state alone (the
                # engine's busy, an OR over its queues, which follow the AXI W channel's ready, is not at their
                # enables: ccef6e0's seed 2 on the ECP5-85F, the store side's run_base, runs_left and run_local,
                # 7.62-7.73 ns), and the next run is decided as in RUN, on the runs left before the step
                m.d.comb += running.eq(1)
                m.d.sync += [runs_left.eq(runs_left - 1), run_base.eq(run_base + cmd.step),
                             run_local.eq(run_local + cmd.local_step)]
                with m.If((runs_left == 1) | stopped):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "START"
        return cmd, running, run_base, run_local
