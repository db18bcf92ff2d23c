"""The LayerNorm lanes: rows of (a, b) int16 pairs from a buffer, LayerNorm(a + b) written back as whole words.

The engine's two LayerNorms (LN1: a = X, b = Y -> Y; LN2: a = Y, b = X -> X) read two buffers word by word
side by side and write one of them back in place (a row is read whole before its output overwrites it). One
:class:`~mlo_hw.hw.layernorm.LayerNorm` takes ``width`` elements a cycle (the config's ``folding.ln_width``) and
needs a while for each row's statistics, so ``lanes`` of them (``folding.ln_lanes``) work on alternate rows (row r
in lane r % lanes), each fed from a one-row FIFO.
"""

from __future__ import annotations

from amaranth import Array, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...model import numerics as nx
from ..layernorm import SHIFT_BITS, LayerNorm, ParamWriteSignature
from .activation_io import word_write_layout
from .vector_io import Serializer, VectorReader

__all__ = ["LayerNormLanes"]


class LayerNormLanes(wiring.Component):
    """``rows`` rows of ``hidden`` (a, b) int16 pairs in, LayerNorm(a + b) int16 out, ``simd`` elements a word.

    Interface:
        start (pulse): latches ``rows`` (1 .. ``max_rows``; hold it through the run) and restarts the counters
        (from a register: the cycle after); the first read is decided two cycles after ``start`` (on ``rd_en`` a
        cycle later). ``shift``: the LayerNorm
        output shift (hold it during the run). ``param``: the gain/bias
        write port, broadcast to every lane (:class:`~mlo_hw.hw.layernorm.ParamWriteSignature`).
        ``rd_addr``/``rd_en`` (from registers: the read decided a cycle earlier, the reader's ``registered_request``)
        -> ``rd_data`` ``read_latency`` cycles later; ``rd_hold``: decide no read this cycle (another reader's turn
        at a shared port); ``rd_want``: a read would be decided this cycle but for ``rd_hold`` (the engine gives the
        port's turns from it, a cycle ahead); pair word j, row-major from word 0,
        ``hidden / simd`` words a row; pair i of a word in bits ``32 i ..`` with ``a`` in the low half. ``avail``: pair
        words ``0 .. avail - 1`` may be read (all when left undriven): the engine starts a LayerNorm while the
        matrix before it still writes its last tile's rows, and raises ``avail`` a row at a time (it may fall only with
        ``start``: the reader judges it a cycle late).
        ``w``: a stream of ``{addr, data}`` word writes, row r's word c at ``r * hidden / simd + c``, lane 0
        first when several words are complete; ``written``: words written since ``start``; ``all_written``: every
        word of the ``rows`` (at least one) has been written (a register, set with ``written``'s last step, cleared
        with ``start``: the sequencer's "LayerNorm done" without a comparison of its own); ``rows_done``: rows
        ``0 .. rows_done - 1`` are written whole (a register, a cycle behind their last word's write), so that
        the matrix after the LayerNorm may read them while it runs.
        ``rd_done``: every pair word has been read (a register, 0 from ``start`` until the reader's last word has left
        it): the buffers' rows may then be overwritten while the lanes still write (the tiled engine's next block
        loads Q into Y while LN2 finishes).
        ``taps``: each lane's output handshake and beat of ``width`` elements (for a tracing testbench).

    Timing: the reader delivers one word (``simd`` pairs) a cycle, through a two-word queue, while the current row's
    lane FIFO has room; each lane takes ``width`` elements a cycle and emits as many a cycle once its row's
    statistics are done (a row's first output about hidden / width + 110 cycles after its first input; rows overlap
    inside a lane when hidden / width >= 52, :class:`~mlo_hw.hw.layernorm.LayerNorm`). Lane i starts
    ``i * hidden / simd`` cycles after ``start`` (its FIFO fills after lane i - 1's), so ``rows`` rows take about
    ``(lanes - 1) hidden / simd + (ceil(rows / lanes) - 1) max(hidden / width, 50) + 2 hidden / width + 124`` cycles
    in the engine
    (:func:`mlo_hw.perf.layernorm_cycles`). The single read port bounds the lanes: ``lanes * width`` elements a cycle
    are taken, ``simd`` delivered, so ``lanes * width <= simd`` (checked; more would wait on the port), and the
    lanes' words leave on ``w`` at ``lanes * width / simd`` a cycle, within its one a cycle. Backpressure on ``w``
    stalls the lanes without losing a word. The engine resets the whole component on a soft reset.
    """

    def __init__(self, hidden: int, simd: int, max_rows: int, lanes: int, rms: bool = False, read_latency: int = 1,
                 width: int = 1):
        if width < 1 or simd % width:
            raise ValueError(f"LayerNormLanes: width must divide simd={simd}, got {width}")
        if not 1 <= lanes * width <= simd:
            raise ValueError(f"LayerNormLanes: lanes x width must be 1..simd={simd} (one read port of simd pairs a "
                             f"cycle feeds them), got {lanes} x {width}")
        self.hidden, self.simd, self.max_rows, self.lanes, self.rms = hidden, simd, max_rows, lanes, rms
        self.width = width
        self.read_latency = read_latency
        self.row_words = hidden // simd
        max_words = max_rows * self.row_words
        rb = nx.RES_BITS
        super().__init__({
            "start": In(1), "rows": In(range(max_rows + 1)), "shift": In(SHIFT_BITS),
            "param": In(ParamWriteSignature(hidden)),
            "rd_addr": Out(range(max(max_words, 2))), "rd_en": Out(1), "rd_data": In(2 * rb * simd),
            "rd_hold": In(1), "rd_want": Out(1),
            "avail": In(range(max_words + 1), init=max_words),
            "w": Out(stream.Signature(word_write_layout(rb * simd, max_words))),
            "written": Out(range(max_words + 1)), "all_written": Out(1), "rows_done": Out(range(max_rows + 1)), "rd_done": Out(1),
            "taps": Out(data.StructLayout({"valid": lanes, "data": data.ArrayLayout(rb * width, lanes)})),
        })

    @classmethod
    def from_config(cls, cfg, read_latency: int = 1) -> "LayerNormLanes":
        """The engine's: ``folding.ln_lanes`` lanes of ``folding.ln_width`` elements a cycle, up to ``seq_padded``
        rows."""
        return cls(cfg.model.hidden, cfg.folding.simd, cfg.seq_padded, cfg.folding.ln_lanes, cfg.model.rmsnorm,
                   read_latency, cfg.folding.ln_width)

    def elaborate(self, platform):
        m = Module()
        rb, simd, rw, n, width = nx.RES_BITS, self.simd, self.row_words, self.lanes, self.width
        beats = simd // width          # a lane's beats a word
        max_words = self.max_rows * rw
        # the counters and the reader restart a cycle after ``start``, from a register: ``start`` is the sequencer's
        # decode, and their resets are spread over the lanes (``written`` and ``rows_done``, which the sequencer
        # reads, clear with ``start`` itself; ``rows_done`` holds 0 while the lanes' rows restart)
        restart = Signal()
        m.d.sync += restart.eq(self.start)
        m.submodules.reader = reader = VectorReader(len(self.rd_addr), 2 * rb * simd, max_words, 1,
                                                    latency=self.read_latency, registered_request=True)
        # the reader's next word is past ``avail``: a register, judged a cycle ahead from the word after this cycle's
        # read (the comparison then feeds no read decision: into the reader's enables it was 6.66 ns at e49c98d's
        # seed 1 on an ECP5-85F). ``avail`` only rises while the lanes run, so a cycle late is safe; it falls only as
        # a phase starts, a cycle before the reader restarts.
        past = Signal()
        m.d.sync += past.eq(Mux(reader.issue, reader.head + 1 >= self.avail, reader.head >= self.avail))
        m.d.comb += [reader.start.eq(restart), reader.base.eq(0), reader.stride.eq(0),
                     reader.words.eq(self.rows * rw), reader.vectors.eq(1),
                     self.rd_addr.eq(reader.addr), self.rd_en.eq(reader.en), reader.data.eq(self.rd_data),
                     self.rd_want.eq(reader.wants & ~past), reader.hold.eq(past | self.rd_hold)]
        # (the reader runs from the cycle after restart: busy until its last word has left its queue)
        with m.If(self.start | restart):
            m.d.sync += self.rd_done.eq(0)
        with m.Elif(~reader.busy):
            m.d.sync += self.rd_done.eq(1)

        # ---- rows to the lanes in turn: a row's words wait in its lane's FIFO, so the lanes work together
        lanes_out, fifos = [], []
        for i in range(n):
            m.submodules[f"fifo{i}"] = fifo = SyncFIFOBuffered(width=2 * rb * simd, depth=max(rw, 2))
            # the serializer's ready a register: the lane FIFO pops on it, not on the pair queue's level through the
            # serializer's last-element decode (into the FIFO's level, 7.07 ns at e3a54ec's seed 3 on an ECP5-85F);
            # its output a register: the element multiplexer ends beside it, not at the pair queue's LUT RAM (the
            # index -> the multiplexer -> the queue's write data 2.71 ns away, 7.60 ns at 25d1348's seed 1)
            m.submodules[f"pairs{i}"] = pairs = Serializer(beats, 2 * rb * width, registered_ready=True,
                                                           registered_output=True)
            m.submodules[f"ln{i}"] = ln = LayerNorm(self.hidden, rms=self.rms, width=width)
            # two-element queues on either side of the lane: its handshakes end at their level registers, not in
            # the serializer's word enables or the gather's (the lane sits apart from both on the die)
            m.submodules[f"pairs_q{i}"] = pairs_q = SyncFIFO(width=2 * rb * width, depth=2)
            m.submodules[f"out_q{i}"] = out_q = SyncFIFO(width=rb * width, depth=2)
            m.d.comb += [pairs.i.valid.eq(fifo.r_rdy), pairs.i.payload.eq(fifo.r_data), fifo.r_en.eq(pairs.i.ready),
                         ln.param.addr.eq(self.param.addr), ln.param.data.eq(self.param.data),
                         ln.param.en.eq(self.param.en), ln.shift.eq(self.shift)]
            wiring.connect(m, pairs.o, pairs_q.w_stream)
            wiring.connect(m, pairs_q.r_stream, ln.i)
            wiring.connect(m, ln.o, out_q.w_stream)
            lanes_out.append((ln.o, out_q.r_stream))
            fifos.append(fifo)
        # the reader's words pass a two-word queue before the lanes' FIFOs: the reader's queue pops on this queue's
        # room (its level register), not on the lane FIFOs' room through the lane multiplexer (that path into the
        # reader queue's level, across the die to the lanes and back, was 7.49 ns at d126af5's seed 2)
        m.submodules.to_lanes = to_lanes = SyncFIFO(width=2 * rb * simd, depth=2)
        wiring.connect(m, reader.o, to_lanes.w_stream)
        words = to_lanes.r_stream
        col, lane = Signal(range(max(rw, 2))), Signal(range(max(n, 2)))
        for i, fifo in enumerate(fifos):
            m.d.comb += [fifo.w_en.eq(words.valid & (lane == i)), fifo.w_data.eq(words.payload)]
        m.d.comb += words.ready.eq(Array(f.w_rdy for f in fifos)[lane])
        with m.If(words.valid & words.ready):
            m.d.sync += col.eq(col + 1)
            with m.If(col == rw - 1):
                m.d.sync += [col.eq(0), lane.eq(Mux(lane == n - 1, 0, lane + 1))]

        # ---- each lane gathers its elements into whole words; one word leaves a cycle, lane 0 first ---------
        # lane i writes rows i, i + n, ..: its first row not yet written whole is nxt[i]; rows_done, the least
        nxt = [Signal(range(self.max_rows + n + 1), name=f"next_row{i}") for i in range(n)]
        least = nxt[0]
        for r in nxt[1:]:
            least = Mux(r < least, r, least)
        with m.If(~restart):
            m.d.sync += self.rows_done.eq(Mux(least > self.rows, self.rows, least))
        full = Signal(n)
        first = Signal(n)                               # the full lane with the lowest index
        m.d.comb += [first[i].eq(full[i] & ~full[:i].any()) for i in range(n)]
        m.d.comb += self.w.valid.eq(full.any())
        for i, (ln_o, q) in enumerate(lanes_out):
            word = Signal(rb * simd, name=f"word{i}")
            idx = Signal(range(max(beats, 2)), name=f"idx{i}")
            addr = Signal.like(self.w.payload.addr, name=f"addr{i}")
            wcol = Signal(range(max(rw, 2)), name=f"col{i}")
            leave = first[i] & self.w.ready
            m.d.comb += [q.ready.eq(~full[i] | leave),
                         self.taps.valid[i].eq(ln_o.valid & ln_o.ready), self.taps.data[i].eq(ln_o.payload)]
            with m.If(first[i]):
                m.d.comb += [self.w.payload.addr.eq(addr), self.w.payload.data.eq(word)]
            with m.If(leave):
                m.d.sync += [full[i].eq(0), wcol.eq(wcol + 1), addr.eq(addr + 1)]
                with m.If(wcol == rw - 1):
                    m.d.sync += [wcol.eq(0), addr.eq(addr + 1 + (n - 1) * rw), nxt[i].eq(nxt[i] + n)]
            with m.If(q.valid & q.ready):
                m.d.sync += [word.word_select(idx, rb * width).eq(q.payload), idx.eq(idx + 1)]
                with m.If(idx == beats - 1):
                    m.d.sync += [idx.eq(0), full[i].eq(1)]
            with m.If(restart):
                m.d.sync += [full[i].eq(0), idx.eq(0), wcol.eq(0), addr.eq(i * rw), nxt[i].eq(i)]
        with m.If(self.w.valid & self.w.ready):
            m.d.sync += self.written.eq(self.written + 1)
            with m.If(self.written == self.rows * rw - 1):
                m.d.sync += self.all_written.eq(1)
        with m.If(restart):
            m.d.sync += [col.eq(0), lane.eq(0)]
        with m.If(self.start):
            m.d.sync += [self.written.eq(0), self.all_written.eq(0), self.rows_done.eq(0)]
        return m
