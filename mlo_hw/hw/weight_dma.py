"""A generic AXI4 read DMA: a stream of (address, beats, tag) commands in, a stream of data beats out.

Each command is split into INCR bursts of at most ``max_burst_beats`` beats that never cross a
4 KiB page; up to ``outstanding`` bursts are in flight, so a memory that answers every cycle
delivers one beat per cycle (the R channel is passed straight through: ``rready`` follows
``beats.ready``). Beats come out in command order with the command's ``tag`` and ``last`` set on
the final beat of a command.

Errors never hang the DMA. An RRESP of SLVERR or DECERR, or a bad command (zero beats or an address
that is not a multiple of the beat size), sets the sticky ``error`` flag with ``error_addr`` (the
byte address of the failing beat, or the command address; a bad command's the cycle after it was taken, while
``busy`` is high) and ``error_code``; the rest of the
command is dropped and the DMA drains the bursts already issued (AXI requires their beats to be
accepted) without forwarding them. ``cancel`` does the same without flagging an error. New commands
are accepted again once the DMA is idle and ``error`` has been cleared with ``clear``.

Interface:
    cmd:   In stream of ``DmaCommand``: addr (byte address, beat aligned), beats (>= 1), tag
    beats: Out stream of ``DmaBeat``: data (one AXI beat), last (last beat of its command), tag
    cancel, clear: In pulses; busy, error, error_addr, error_code: Out
    m_axi_ar* / m_axi_r*: the AXI4 read channels (see :mod:`mlo_hw.hw.axi`)

Latency: a command's first AR leaves two cycles after the command is accepted (each burst's length is
planned a cycle ahead, :func:`mlo_hw.hw.axi.planned_burst`); then one burst every other cycle while fewer
than ``outstanding`` are in flight. Throughput: one beat per cycle (bursts of two beats or more).
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import BURST_INCR, AxiParams, after_burst, axi_read_master_members, in_page, planned_burst

__all__ = ["ERR_BAD_COMMAND", "command_layout", "beat_layout", "command_intake", "ReadDma"]

ERR_BAD_COMMAND = 0b100     # error_code: bit 2 = bad command, bits 1:0 = RRESP of the failing beat


def command_layout(p: AxiParams, beats_bits: int, tag_bits: int) -> data.StructLayout:
    return data.StructLayout({"addr": p.addr_bits, "beats": beats_bits, "tag": tag_bits})


def beat_layout(p: AxiParams, tag_bits: int) -> data.StructLayout:
    return data.StructLayout({"data": p.data_bits, "last": 1, "tag": tag_bits})


def command_intake(m, dma, accept, may_take):
    """A DMA's command intake: ``dma.cmd.ready`` while ``may_take`` (the DMA's own state), no ``error``, no
    ``cancel`` and no bad command being flagged; ``accept`` (a signal the caller made) is driven with the
    handshake. Returns ``(good, checking)``: ``good`` is high when a well-formed command is taken (the caller
    starts it: its ``active``; the command's fields it loads on every ``accept``, a bad command's never used, so that
    the check is not at their enables: the weight DMA's were 7.10 ns at e3a54ec's seed 3 on an ECP5-85F),
    ``checking`` in the cycle after a bad one was taken (the caller counts it as busy). A bad command
    (zero beats, or an address not a multiple of the beat size) sets ``error``, ``error_addr`` (its address) and
    ``error_code`` (:data:`ERR_BAD_COMMAND`) in that next cycle, from registers: the check stays off the enables
    of the error registers, a wide fan-out behind the handshake."""
    sz = dma.p.size_log2
    c = dma.cmd.payload
    bad = (c.beats == 0) | (c.addr[:sz] != 0) if sz else (c.beats == 0)
    checking = Signal()                          # a bad command was taken last cycle
    bad_addr = Signal.like(dma.error_addr)
    m.d.comb += [dma.cmd.ready.eq(may_take & ~dma.error & ~dma.cancel & ~checking),
                 accept.eq(dma.cmd.valid & dma.cmd.ready)]
    m.d.sync += [checking.eq(accept & bad), bad_addr.eq(c.addr)]    # the address of the command taken last cycle
    with m.If(checking):
        m.d.sync += [dma.error.eq(1), dma.error_addr.eq(bad_addr), dma.error_code.eq(ERR_BAD_COMMAND)]
    return accept & ~bad, checking


class ReadDma(wiring.Component):
    """AXI4 read master; see the module docstring for the interface and timing."""

    def __init__(self, p: AxiParams, *, beats_bits: int = 16, tag_bits: int = 1, outstanding: int = 8):
        if outstanding < 1:
            raise ValueError(f"outstanding: expected at least 1 burst in flight, got {outstanding}")
        self.p, self.beats_bits, self.tag_bits, self.outstanding = p, beats_bits, tag_bits, outstanding
        super().__init__({
            "cmd": In(stream.Signature(command_layout(p, beats_bits, tag_bits))),
            "beats": Out(stream.Signature(beat_layout(p, tag_bits))),
            "cancel": In(1),
            "clear": In(1),
            "busy": Out(1),
            "error": Out(1),
            "error_addr": Out(p.addr_bits),
            "error_code": Out(3),
            **axi_read_master_members(p),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        sz = p.size_log2

        # ---- one FIFO entry per issued burst: where its beats belong ------------------------------
        # Its head is a register (SyncFIFOBuffered: an entry is out two cycles after its push, the AR leaves one
        # cycle after it, and AXI's first R beat comes after the AR's handshake): the LUT RAM's read, through a beat's
        # tag into the consumer's write enables, was 7.03 ns at 2d1c080's seed 2 on an ECP5-85F (the burst queue's
        # read address -> its LUT RAM -> the tag -> the weight tile buffer's write enable).
        burst = data.StructLayout({"addr": p.addr_bits, "tag": self.tag_bits, "cmd_last": 1})
        m.submodules.bursts = bursts = fifo.SyncFIFOBuffered(width=burst.size, depth=self.outstanding)
        head = data.View(burst, bursts.r_data)
        pushed = data.View(burst, bursts.w_data)

        drop = Signal()           # error or cancel: forward nothing until every issued burst drained
        active = Signal()         # a command is being split into bursts
        cur_addr = Signal(p.addr_bits)
        remaining = Signal(self.beats_bits)
        cur_tag = Signal(self.tag_bits)

        arvalid = Signal()
        m.d.comb += [
            self.m_axi_arvalid.eq(arvalid),
            self.m_axi_arid.eq(0),
            self.m_axi_arsize.eq(sz),
            self.m_axi_arburst.eq(BURST_INCR),
            self.m_axi_arlock.eq(0),
            self.m_axi_arcache.eq(0b0011),      # normal non-cacheable bufferable
            self.m_axi_arprot.eq(0),
        ]
        idle = ~active & ~arvalid & ~bursts.r_rdy

        # ---- AR side: split the command into page-bounded bursts --------------------------------
        issue, accept = Signal(), Signal()
        length, last, planned = planned_burst(m, p, cur_addr, remaining, issue | accept)
        m.d.comb += issue.eq(active & planned & ~drop & ~self.cancel & (~arvalid | self.m_axi_arready)
                             & bursts.w_rdy)
        m.d.comb += [
            pushed.addr.eq(cur_addr), pushed.tag.eq(cur_tag), pushed.cmd_last.eq(last),
            bursts.w_en.eq(issue),
        ]
        next_addr = after_burst(m, p, cur_addr, length)     # (its register outside the If)
        with m.If(issue):
            m.d.sync += [
                arvalid.eq(1),
                self.m_axi_araddr.eq(cur_addr),
                self.m_axi_arlen.eq(length - 1),
                cur_addr.eq(next_addr),
                remaining.eq(remaining - length),
            ]
            with m.If(last):
                m.d.sync += active.eq(0)
        with m.Elif(self.m_axi_arready):
            m.d.sync += arvalid.eq(0)

        # ---- command intake ---------------------------------------------------------------------
        good, checking = command_intake(m, self, accept, ~active & ~drop)
        idle &= ~checking
        c = self.cmd.payload
        with m.If(accept):       # (every command taken: the check stays off these registers' enables)
            m.d.sync += [cur_addr.eq(c.addr), remaining.eq(c.beats), cur_tag.eq(c.tag)]
        with m.If(good):
            m.d.sync += active.eq(1)

        m.d.comb += self.busy.eq(~idle)

        # ---- R side: forward beats, catch error responses --------------------------------------
        r_beat = Signal(8)
        bad_resp = self.m_axi_rresp[1]                       # SLVERR or DECERR
        m.d.comb += [
            self.beats.payload.data.eq(self.m_axi_rdata),
            self.beats.payload.tag.eq(head.tag),
            self.beats.payload.last.eq(self.m_axi_rlast & head.cmd_last),
            self.beats.valid.eq(self.m_axi_rvalid & ~drop & ~bad_resp),
            self.m_axi_rready.eq(drop | bad_resp | self.beats.ready),
        ]
        r_done = self.m_axi_rvalid & self.m_axi_rready
        with m.If(r_done):
            m.d.sync += r_beat.eq(r_beat + 1)
            with m.If(self.m_axi_rlast):
                m.d.sync += r_beat.eq(0)
                m.d.comb += bursts.r_en.eq(1)
            with m.If(bad_resp & ~drop):
                m.d.sync += [
                    drop.eq(1), active.eq(0), self.error.eq(1),
                    self.error_addr.eq(in_page(head.addr, r_beat << sz)),
                    self.error_code.eq(self.m_axi_rresp),
                ]

        with m.If(self.cancel):
            m.d.sync += [drop.eq(1), active.eq(0)]
        with m.Elif(drop & idle):
            m.d.sync += drop.eq(0)
        with m.If(self.clear):
            m.d.sync += [self.error.eq(0), self.error_code.eq(0)]
        return m
