"""AXI plumbing for the engine's top level: a read arbiter and the aclk/aresetn wrapper.

:class:`ReadArbiter` merges the AR/R channels of ``n`` AXI4 read masters (slave ports
``s0_axi_*``, ``s1_axi_*`` ...) onto one master port ``m_axi_*``.

- AR: round robin. A registered stage; when it is empty or its AR was accepted, the next master
  with ``arvalid`` after the one granted last wins and sees ``arready`` in that cycle. The master's
  index goes into the upper ARID bits: ``m_axi_arid = {index, s<i>_axi_arid}``, so the output ID
  has ``id_bits + index bits`` bits. One AR per cycle to a memory that is always ready.
- R: a registered stage with a skid register (RREADY from a register: the skid empty; one beat a
  cycle), then routed by the index bits of RID (``rvalid`` to that master only, its ``rready`` back
  to the stage), the lower RID bits returned as the master's RID. Beats of different masters may
  interleave (distinct IDs); a master's own beats stay in the order of its ARs.

Deadlock freedom: the arbiter holds at most two R beats, in order, and waits for nothing but the
master a beat is for, so it cannot deadlock by itself; the memory may
answer in order (cocotbext-axi's AxiRam, most DRAM controllers), so a master that stops accepting R
beats blocks the others' beats queued behind its own. Each master must therefore accept the beats
of every burst it issued without waiting for another master: ReadDma behind a consumer that reserves
space before issuing (WeightStreamer claims a tile bank first) or that always drains
(the activation reader feeding on-chip buffers) qualifies.

:class:`ReadArbiter` is how the engine's weight streamer and activation mover share the port (both in
flight at once: in the DRAM-tiled schedule a block load overlaps the weight prefetch).

:class:`AxiTop` wraps a design that uses the ``sync`` domain into a top level with ``aclk`` and
``aresetn`` (active low, synchronous) and otherwise the design's own flat ports (``m_axi_*``,
``s_axil_*`` ...), so the Verilog is instantiable as is by Vivado IP Integrator or a SoC.
"""

from __future__ import annotations

from dataclasses import replace

from amaranth import Array, ClockDomain, DomainRenamer, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .axi import AxiParams, axi_read_master_members
from .pipeline import skid_stage

__all__ = ["ReadArbiter", "AxiTop", "flipped_members"]


def flipped_members(members: dict) -> dict:
    """The same flat ports with every direction reversed (a master's port set seen from the slave)."""
    return {name: (In if mem.flow == Out else Out)(mem.shape, init=mem.init) for name, mem in members.items()}


class ReadArbiter(wiring.Component):
    """``n`` AXI4 read masters -> one AXI4 read port; see the module docstring.

    Ports: ``s<i>_axi_ar*``/``s<i>_axi_r*`` (slave side, ID width ``p.id_bits``) for i < n, and
    ``m_axi_ar*``/``m_axi_r*`` with ``out_params.id_bits = p.id_bits + index_bits``.
    Latency: AR one cycle (registered), R one cycle (registered, with a skid register).
    """

    def __init__(self, p: AxiParams, n: int = 2):
        if n < 2:
            raise ValueError(f"n: expected at least 2 read masters to arbitrate, got {n}")
        self.p, self.n = p, n
        self.index_bits = (n - 1).bit_length()
        self.out_params = replace(p, id_bits=p.id_bits + self.index_bits)
        members = {}
        for i in range(n):
            members.update(flipped_members(axi_read_master_members(p, prefix=f"s{i}_axi")))
        members.update(axi_read_master_members(self.out_params))
        super().__init__(members)

    def _slave(self, i: int, ch: str):
        return getattr(self, f"s{i}_axi_{ch}")

    def elaborate(self, platform):
        m = Module()
        n, p = self.n, self.p
        fields = ("araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot")

        # ---- AR: round robin into a registered stage ---------------------------------------------
        last = Signal(range(n))        # the master granted last
        grant = Signal(range(n))
        any_valid = Signal()
        valids = [self._slave(i, "arvalid") for i in range(n)]
        with m.Switch(last):
            for l in range(n):
                with m.Case(l):
                    for j in range(n):
                        k = (l + 1 + j) % n
                        with (m.If if j == 0 else m.Elif)(valids[k]):
                            m.d.comb += [grant.eq(k), any_valid.eq(1)]

        arvalid = Signal()
        load = ~arvalid | self.m_axi_arready
        m.d.comb += self.m_axi_arvalid.eq(arvalid)
        for i in range(n):
            m.d.comb += self._slave(i, "arready").eq(load & any_valid & (grant == i))
        with m.If(load):
            m.d.sync += arvalid.eq(any_valid)
            with m.If(any_valid):
                m.d.sync += [
                    last.eq(grant),
                    self.m_axi_arid.eq(Array(self._slave(i, "arid") for i in range(n))[grant]
                                       | (grant << p.id_bits)),
                ]
                for f in fields:
                    m.d.sync += getattr(self, f"m_axi_{f}").eq(Array(self._slave(i, f) for i in range(n))[grant])

        # ---- R: a registered stage with a skid register, then routed by the index bits of RID -------
        # (:func:`~mlo_hw.hw.pipeline.skid_stage`) The stage loads on its own handshake (``~r_valid`` or the routed
        # master's ``rready``); RREADY is a register (the skid empty), so neither the R inputs nor a master's ready
        # cross the arbiter in one cycle: R arrived from the port through the ID decode and a master's valid logic
        # into its registers' enables (the mover's beat regrouper, 7.25 ns at 2d1c080's seed 1 on an ECP5-85F).
        beat = data.StructLayout({"id": len(self.m_axi_rid), "data": len(self.m_axi_rdata), "resp": 2, "last": 1})
        offered, ready = Signal(beat), Signal()
        m.d.comb += [offered.id.eq(self.m_axi_rid), offered.data.eq(self.m_axi_rdata),
                     offered.resp.eq(self.m_axi_rresp), offered.last.eq(self.m_axi_rlast)]
        r = skid_stage(m, offered, self.m_axi_rvalid, ready, "r")
        m.d.comb += self.m_axi_rready.eq(~r.skid_full)
        index = r.payload.id[p.id_bits:]
        routed_ready = 0
        for i in range(n):
            mine = index == i
            routed_ready = routed_ready | (mine & self._slave(i, "rready"))
            m.d.comb += [
                self._slave(i, "rvalid").eq(r.valid & mine),
                self._slave(i, "rid").eq(r.payload.id[:p.id_bits]),
                self._slave(i, "rdata").eq(r.payload.data),
                self._slave(i, "rresp").eq(r.payload.resp),
                self._slave(i, "rlast").eq(r.payload.last),
            ]
        m.d.comb += ready.eq(routed_ready)
        return m


class AxiTop(wiring.Component):
    """Top-level wrapper: ``aclk``/``aresetn`` ports plus every port of ``design``, under the same names.

    ``design`` is a :class:`~amaranth.lib.wiring.Component` clocked by ``sync`` (its flat AXI ports
    named ``m_axi_*``/``s_axil_*``); inside the wrapper ``sync`` becomes a local domain clocked by
    ``aclk`` and reset synchronously while ``aresetn`` is low. Convert with
    ``amaranth.back.verilog.convert(AxiTop(design), name=...)`` (no ``ports`` needed): the Verilog
    has ``aclk``, ``aresetn`` and the design's ports, and no ``clk``/``rst``.
    """

    def __init__(self, design: wiring.Component):
        for name in ("aclk", "aresetn"):
            if name in design.signature.members:
                raise ValueError(f"design: already has a port named {name!r}; wrap a design clocked by 'sync'")
        self.design = design
        super().__init__({"aclk": In(1), "aresetn": In(1), **dict(design.signature.members)})

    def elaborate(self, platform):
        m = Module()
        m.domains.axi = cd = ClockDomain("axi", local=True)
        m.d.comb += [cd.clk.eq(self.aclk), cd.rst.eq(~self.aresetn)]
        m.submodules.design = DomainRenamer({"sync": "axi"})(self.design)
        outer = [(path, member, value) for path, member, value in self.signature.flatten(self)
                 if path[0] not in ("aclk", "aresetn")]
        inner = list(self.design.signature.flatten(self.design))
        for (path, member, value), (ipath, _, ivalue) in zip(outer, inner, strict=True):
            assert path == ipath, (path, ipath)
            if member.flow == Out:
                m.d.comb += value.eq(ivalue)
            else:
                m.d.comb += ivalue.eq(value)
        return m
