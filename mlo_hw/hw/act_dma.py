"""Activation I/O over AXI4: a generic write DMA, and the engine's input reader and output writer.

:class:`WriteDma` is the write-side twin of :class:`mlo_hw.hw.weight_dma.ReadDma`: a stream of
(address, beats) commands and a stream of data beats (data + byte strobes) in, AXI4 AW/W/B out.
Each command is split into INCR bursts of at most ``max_burst_beats`` beats that never cross a
4 KiB page; up to ``outstanding`` bursts are in flight (AW issued, B not yet received). ``done``
pulses once every B response of a command has arrived with OKAY.

Errors never hang the DMA. A BRESP of SLVERR or DECERR, or a bad command (zero beats or an address
that is not a multiple of the beat size), sets the sticky ``error`` flag with ``error_addr`` (the
start address of the failing burst, or the command address, the cycle after a bad command was taken) and
``error_code`` (as ReadDma: bit 2 =
bad command, bits 1:0 = the BRESP); no further burst of the command is issued. Bursts already
issued on AW are completed on W with WSTRB = 0 (AXI requires their beats; nothing more is written),
their B responses are drained, and from the error until ``clear`` every beat offered on ``data`` is
accepted and dropped, so that the producer never blocks either. ``cancel`` does the same without
flagging an error. (A beat offered with a cancel or in the cycle after it, or in the first cycle of ``error``,
is still written, to its own address: the strobes' select sees only registers.) New commands are accepted once
the DMA is idle and ``error`` is clear.

:class:`ActReader` fetches ``length`` bytes (the int8 activations [seq, hidden], row-major) from
``base`` with a ReadDma and delivers them as a stream of AXI beats seen as ``lanes = beat bytes``
int8 lanes, byte 0 of the beat in lane 0. A length that is not a multiple of the beat is read as
whole beats; the lanes past ``length`` in the final beat are zeroed. :class:`ActWriter` takes the
same lane stream and writes ``length`` bytes at ``base`` through a WriteDma; the final beat of a
length that is not a multiple of the beat is written with a partial WSTRB (bytes past ``length``
are left untouched in DRAM). ``base`` must be beat aligned (else ``error`` with the bad-command
code). The engine consumes/produces rows of ``hidden`` bytes: with hidden a multiple of the beat
(all shipped configs) a row is ``hidden / lanes`` whole beats.

Timing: commands leave one cycle after ``start`` (reader/writer); a WriteDma command's first AW two cycles
after its acceptance (each burst's length is planned a cycle ahead, :func:`mlo_hw.hw.axi.planned_burst`),
then one AW every other cycle while fewer than ``outstanding`` bursts are in flight. W is a registered
stage with a skid register (``data.ready`` from registers, not from WREADY): one beat per cycle; B is always
accepted.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import (BURST_INCR, AxiParams, after_burst, planned_burst, axi_read_master_members, axi_write_master_members,
                  forward_ports)
from .weight_dma import ReadDma, command_intake
from .pipeline import skid_stage

__all__ = ["write_command_layout", "write_beat_layout", "lanes_layout", "WriteDma", "ActReader", "ActWriter",
           "activation_bytes"]


def write_command_layout(p: AxiParams, beats_bits: int) -> data.StructLayout:
    return data.StructLayout({"addr": p.addr_bits, "beats": beats_bits})


def write_beat_layout(p: AxiParams) -> data.StructLayout:
    return data.StructLayout({"data": p.data_bits, "strb": p.data_bytes})


def lanes_layout(p: AxiParams, last: bool) -> data.StructLayout:
    """One AXI beat as int8 lanes (lane i = byte i of the beat), with ``last`` on the reader's side."""
    fields = {"data": data.ArrayLayout(signed(8), p.data_bytes)}
    if last:
        fields["last"] = 1
    return data.StructLayout(fields)


def activation_bytes(cfg) -> int:
    """Bytes of one activation tensor int8 [seq_len, hidden] in DRAM."""
    return cfg.model.seq_len * cfg.model.hidden


class WriteDma(wiring.Component):
    """AXI4 write master; see the module docstring for the interface and timing.

    Interface:
        cmd:  In stream of ``write_command_layout``: addr (byte address, beat aligned), beats (>= 1)
        data: In stream of ``write_beat_layout``: data (one AXI beat), strb (WSTRB of that beat)
        cancel, clear: In pulses; busy, done (pulse), error, error_addr, error_code: Out
        m_axi_aw* / m_axi_w* / m_axi_b*: the AXI4 write channels (see :func:`mlo_hw.hw.axi.axi_write_master_members`)
    """

    def __init__(self, p: AxiParams, *, beats_bits: int = 16, outstanding: int = 8):
        if outstanding < 1:
            raise ValueError(f"outstanding: expected at least 1 burst in flight, got {outstanding}")
        self.p, self.beats_bits, self.outstanding = p, beats_bits, outstanding
        super().__init__({
            "cmd": In(stream.Signature(write_command_layout(p, beats_bits))),
            "data": In(stream.Signature(write_beat_layout(p))),
            "cancel": In(1),
            "clear": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(1),
            "error_addr": Out(p.addr_bits),
            "error_code": Out(3),
            **axi_write_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        sz = p.size_log2

        # ---- per issued burst: its length for WLAST, its address and command end for B ----------
        m.submodules.w_bursts = w_bursts = fifo.SyncFIFO(width=8, depth=self.outstanding)
        b_layout = data.StructLayout({"addr": p.addr_bits, "cmd_last": 1})
        m.submodules.b_bursts = b_bursts = fifo.SyncFIFO(width=b_layout.size, depth=self.outstanding)
        b_head = data.View(b_layout, b_bursts.r_data)
        b_push = data.View(b_layout, b_bursts.w_data)

        drop = Signal()           # error or cancel: issue nothing until every issued burst drained
        active = Signal()         # a command is being split into bursts
        cur_addr = Signal(p.addr_bits)
        remaining = Signal(self.beats_bits)

        awvalid = Signal()
        m.d.comb += [
            self.m_axi_awvalid.eq(awvalid),
            self.m_axi_awid.eq(0),
            self.m_axi_awsize.eq(sz),
            self.m_axi_awburst.eq(BURST_INCR),
            self.m_axi_awlock.eq(0),
            self.m_axi_awcache.eq(0b0011),      # normal non-cacheable bufferable
            self.m_axi_awprot.eq(0),
            self.m_axi_bready.eq(1),
        ]
        idle = ~active & ~awvalid & ~b_bursts.r_rdy   # B is last: no B pending means W is done too

        # ---- AW side: split the command into page-bounded bursts --------------------------------
        issue, accept = Signal(), Signal()
        length, last, planned = planned_burst(m, p, cur_addr, remaining, issue | accept)
        m.d.comb += issue.eq(active & planned & ~drop & ~self.cancel & (~awvalid | self.m_axi_awready)
                             & w_bursts.w_rdy & b_bursts.w_rdy)
        m.d.comb += [
            w_bursts.w_data.eq(length - 1), w_bursts.w_en.eq(issue),
            b_push.addr.eq(cur_addr), b_push.cmd_last.eq(last), b_bursts.w_en.eq(issue),
        ]
        next_addr = after_burst(m, p, cur_addr, length)     # (its register outside the If)
        with m.If(issue):
            m.d.sync += [
                awvalid.eq(1),
                self.m_axi_awaddr.eq(cur_addr),
                self.m_axi_awlen.eq(length - 1),
                cur_addr.eq(next_addr),
                remaining.eq(remaining - length),
            ]
            with m.If(last):
                m.d.sync += active.eq(0)
        with m.Elif(self.m_axi_awready):
            m.d.sync += awvalid.eq(0)

        # ---- command intake ---------------------------------------------------------------------
        good, checking = command_intake(m, self, accept, ~active & ~drop)
        idle &= ~checking
        c = self.cmd.payload
        with m.If(accept):       # (every command taken: the check stays off these registers' enables)
            m.d.sync += [cur_addr.eq(c.addr), remaining.eq(c.beats)]
        with m.If(good):
            m.d.sync += active.eq(1)
        m.d.comb += self.busy.eq(~idle)

        # ---- W side: a registered stage with a skid register, one beat per cycle ---------------
        # (:func:`~mlo_hw.hw.pipeline.skid_stage`) The W registers load on AXI's handshake alone (``~wvalid |
        # wready``): the burst queue's level and the producer's valid reach only ``wvalid``'s input, and ``data.ready``
        # comes from registers (the skid's fill, the burst queue's level, the discard), not from ``wready``. (Was: the
        # level -> wready's decode -> the W data register's enable, 7.07 ns at 25d1348's seed 3 on an ECP5-85F.)
        # Issued bursts are completed with beats taken without waiting for ``data`` (``discard``: from the cycle after
        # a cancel, ``drop``, or from an error). A beat's strobes are its own only if it was offered (``data.valid``)
        # and ``w_discard`` (``discard`` a cycle late, one flip-flop beside the W registers) is low: so a beat offered
        # with a cancel or in the cycle after it, or in the first cycle of ``error``, is still written, to its own
        # address, and no decode of the DMA's state, nor ``cancel`` (a wire from the engine's control), reaches a W
        # register (they did, through the strobes' select: 2ca6dde's seeds 1 and 3, 7.32 and 7.01 ns). ``w_discard``
        # falls a cycle after ``discard``, when no burst is queued (``drop`` falls once idle, ``error`` at ``clear``,
        # a new command's first burst two cycles after it is taken), so no beat is taken then. The data of a beat is
        # left as it is: its strobes say whether it is written.
        discard = drop | self.error
        w_discard = Signal(name="w_discard")
        m.d.sync += w_discard.eq(discard)
        beat = data.StructLayout({"data": len(self.m_axi_wdata), "strb": len(self.m_axi_wstrb), "last": 1})
        offered = Signal(beat)
        w_beat = Signal(8)
        w = skid_stage(m, offered, w_bursts.r_rdy & (discard | self.data.valid), self.m_axi_wready, "w")
        m.d.comb += [
            offered.data.eq(self.data.payload.data),
            offered.strb.eq(Mux(self.data.valid & ~w_discard, self.data.payload.strb, 0)),
            offered.last.eq(w_beat == w_bursts.r_data),
            self.data.ready.eq(discard | (~w.skid_full & w_bursts.r_rdy)),
            self.m_axi_wvalid.eq(w.valid), self.m_axi_wdata.eq(w.payload.data), self.m_axi_wstrb.eq(w.payload.strb),
            self.m_axi_wlast.eq(w.payload.last),
        ]
        with m.If(w.take):
            m.d.sync += w_beat.eq(w_beat + 1)
            with m.If(offered.last):
                m.d.sync += w_beat.eq(0)
                m.d.comb += w_bursts.r_en.eq(1)

        # ---- B side: count responses, catch errors ----------------------------------------------
        b_done = self.m_axi_bvalid & b_bursts.r_rdy
        bad_resp = self.m_axi_bresp[1]                       # SLVERR or DECERR
        m.d.comb += b_bursts.r_en.eq(b_done)
        m.d.sync += self.done.eq(b_done & b_head.cmd_last & ~bad_resp & ~drop & ~self.error)
        with m.If(b_done & bad_resp & ~drop & ~self.error):
            m.d.sync += [
                drop.eq(1), active.eq(0), self.error.eq(1),
                self.error_addr.eq(b_head.addr), self.error_code.eq(self.m_axi_bresp),
            ]

        with m.If(self.cancel):
            m.d.sync += [drop.eq(1), active.eq(0)]
        with m.Elif(drop & idle):
            m.d.sync += drop.eq(0)
        with m.If(self.clear):
            m.d.sync += [self.error.eq(0), self.error_code.eq(0)]
        return m


class _ActTransfer(wiring.Component):
    """Common ports of the activation reader and writer: one transfer of ``length`` bytes at ``base``."""

    def __init__(self, p: AxiParams, max_bytes: int, outstanding: int, members: dict):
        if max_bytes < 1:
            raise ValueError(f"max_bytes: expected at least 1 byte of activations, got {max_bytes}")
        self.p, self.max_bytes, self.outstanding = p, max_bytes, outstanding
        self.max_beats = -(-max_bytes // p.data_bytes)
        self.beats_bits = max(self.max_beats.bit_length(), 1)
        super().__init__({
            "start": In(1), "cancel": In(1), "clear": In(1),
            "base": In(p.addr_bits), "length": In(range(max_bytes + 1)),
            "busy": Out(1), "done": Out(1),
            "error": Out(1), "error_addr": Out(p.addr_bits), "error_code": Out(3),
            **members,
        })

    @classmethod
    def from_config(cls, cfg, outstanding: int = 8):
        """At most one activation tensor of ``cfg`` (``seq_len * hidden`` bytes)."""
        return cls(AxiParams.from_config(cfg), activation_bytes(cfg), outstanding=outstanding)

    def _command(self, m, cmd):
        """On ``start``: latch base/length and offer one DMA command; returns (beats, tail bytes) of the transfer."""
        sz = self.p.size_log2
        valid = Signal()
        addr = Signal(self.p.addr_bits)
        beats = Signal(self.beats_bits + 1)
        tail = Signal(max(sz, 1))                        # bytes in a partial last beat (0: it is full)
        with m.If(self.start):
            m.d.sync += [
                valid.eq(1), addr.eq(self.base),
                beats.eq((self.length + (self.p.data_bytes - 1)) >> sz),
                tail.eq(self.length[:sz] if sz else 0),
            ]
        with m.Elif(self.cancel | cmd.ready):
            m.d.sync += valid.eq(0)
        m.d.comb += [cmd.valid.eq(valid), cmd.payload.addr.eq(addr), cmd.payload.beats.eq(beats)]
        return valid, beats, tail


class ActReader(_ActTransfer):
    """Reads the input activations: ``length`` bytes from ``base`` -> ``lanes`` stream.

    Interface:
        start (pulse, latches ``base``/``length``, clears ``error``), cancel, clear (pulse, clears ``error``),
        base (beat aligned), length (bytes, >= 1)
        lanes: Out stream of ``lanes_layout(p, last=True)``: ``data`` = int8 lanes of one AXI beat,
               ``last`` on the final beat; lanes past ``length`` in the final beat read as 0
        busy, done (pulse after the last beat left), error, error_addr, error_code (see ReadDma)
        m_axi_ar* / m_axi_r*
    """

    def __init__(self, p: AxiParams, max_bytes: int, *, outstanding: int = 8):
        super().__init__(p, max_bytes, outstanding, {
            "lanes": Out(stream.Signature(lanes_layout(p, last=True))),
            **axi_read_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        m.submodules.dma = dma = ReadDma(p, beats_bits=self.beats_bits + 1, tag_bits=1,
                                         outstanding=self.outstanding)
        forward_ports(m, self, dma, axi_read_master_members(p))
        pending, _, tail = self._command(m, dma.cmd)
        m.d.comb += [
            dma.cmd.payload.tag.eq(0), dma.clear.eq(self.start | self.clear), dma.cancel.eq(self.cancel),
            self.busy.eq(pending | dma.busy),
            self.error.eq(dma.error), self.error_addr.eq(dma.error_addr), self.error_code.eq(dma.error_code),
        ]
        beat = dma.beats.payload
        raw = data.View(data.ArrayLayout(signed(8), p.data_bytes), beat.data)
        for i in range(p.data_bytes):
            # lane 0 is always within the length; lane i > 0 of the final beat only if tail is 0 or > i
            keep = 1 if i == 0 else ~beat.last | (tail == 0) | ((tail > i) if i < p.data_bytes - 1 else 0)
            m.d.comb += self.lanes.payload.data[i].eq(Mux(keep, raw[i], 0))
        m.d.comb += [
            self.lanes.payload.last.eq(beat.last),
            self.lanes.valid.eq(dma.beats.valid),
            dma.beats.ready.eq(self.lanes.ready),
        ]
        m.d.sync += self.done.eq(self.lanes.valid & self.lanes.ready & beat.last)
        return m


class ActWriter(_ActTransfer):
    """Writes the output activations: ``lanes`` stream -> ``length`` bytes at ``base``.

    Interface:
        start (pulse, latches ``base``/``length``, clears ``error``), cancel, clear (pulse, clears ``error``),
        base (beat aligned), length (bytes, >= 1)
        lanes: In stream of ``lanes_layout(p, last=False)``: int8 lanes of one AXI beat; exactly
               ceil(length / lanes) beats are taken after ``start`` (lanes past ``length`` in the
               final beat are not written: partial WSTRB)
        busy, done (pulse: every B received with OKAY), error, error_addr, error_code (see WriteDma)
        m_axi_aw* / m_axi_w* / m_axi_b*
    """

    def __init__(self, p: AxiParams, max_bytes: int, *, outstanding: int = 8):
        super().__init__(p, max_bytes, outstanding, {
            "lanes": In(stream.Signature(lanes_layout(p, last=False))),
            **axi_write_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        m.submodules.dma = dma = WriteDma(p, beats_bits=self.beats_bits + 1, outstanding=self.outstanding)
        forward_ports(m, self, dma, axi_write_master_members(p))
        pending, beats, tail = self._command(m, dma.cmd)

        # beats still to take from ``lanes``, with "some left" and "one left" kept as flags beside it (the W stage's
        # take sees a register, not a comparator of the count: the count -> the take -> the burst FIFO's pop was 7.07 ns
        # at 1d63e36's seed 1 on an ECP5-85F)
        left = Signal.like(beats)
        some_left, one_left = Signal(), Signal()
        full = Const((1 << p.data_bytes) - 1, p.data_bytes)
        partial = Signal(p.data_bytes)
        m.d.comb += partial.eq((Const(1, p.data_bytes + 1) << tail) - 1)
        with m.If(self.start):
            total = (self.length + (p.data_bytes - 1)) >> p.size_log2
            m.d.sync += [left.eq(total), some_left.eq(total != 0), one_left.eq(total == 1)]
        with m.Elif(self.cancel):
            m.d.sync += [left.eq(0), some_left.eq(0), one_left.eq(0)]
        with m.Elif(dma.data.valid & dma.data.ready):
            m.d.sync += [left.eq(left - 1), some_left.eq(~one_left), one_left.eq(left == 2)]
        m.d.comb += [
            dma.data.valid.eq(self.lanes.valid & some_left),
            self.lanes.ready.eq(dma.data.ready & some_left),
            dma.data.payload.data.eq(self.lanes.payload.data.as_value()),
            dma.data.payload.strb.eq(Mux(one_left & (tail != 0), partial, full)),
            dma.clear.eq(self.start | self.clear), dma.cancel.eq(self.cancel),
            self.busy.eq(pending | dma.busy | some_left),
            self.done.eq(dma.done),
            self.error.eq(dma.error), self.error_addr.eq(dma.error_addr), self.error_code.eq(dma.error_code),
        ]
        return m
