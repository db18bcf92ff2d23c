"""AXI4 (read and write channels) and AXI4-Lite port sets with flat, conventional names.

The members are plain signals named as in the AXI specification with a prefix (``m_axi_araddr``,
``s_axil_wdata`` ...), so that the Verilog of a top-level component carries exactly those port
names: cocotbext-axi's ``AxiReadBus.from_prefix(dut, "m_axi")`` and Vivado's interface inference
find them without adapters. Merge the dicts into a component's signature.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Mux, Signal
from amaranth.lib.wiring import In, Out

__all__ = ["RESP_OKAY", "RESP_EXOKAY", "RESP_SLVERR", "RESP_DECERR", "BURST_INCR", "PAGE_BYTES",
           "AxiParams", "axi_read_master_members", "axi_write_master_members", "axil_slave_members",
           "forward_ports", "burst_beats", "planned_burst", "after_burst", "in_page"]

RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0, 1, 2, 3
BURST_INCR = 1
PAGE_BYTES = 4096      # an INCR burst never crosses this boundary


@dataclass(frozen=True)
class AxiParams:
    """Widths of an AXI4 memory-mapped port (from ``cfg.memory``)."""
    addr_bits: int = 32
    data_bits: int = 64
    id_bits: int = 1
    max_burst_beats: int = 256

    @classmethod
    def from_config(cls, cfg, id_bits: int = 1) -> "AxiParams":
        m = cfg.memory
        return cls(m.axi_addr_bits, m.axi_data_bits, id_bits, m.max_burst_beats)

    @property
    def data_bytes(self) -> int:
        return self.data_bits // 8

    @property
    def size_log2(self) -> int:
        """ARSIZE: log2 of the bytes of a full-width beat."""
        return (self.data_bytes - 1).bit_length()


def axi_read_master_members(p: AxiParams, prefix: str = "m_axi") -> dict:
    """AR and R channels of an AXI4 read master."""
    return {
        f"{prefix}_arid":    Out(p.id_bits),
        f"{prefix}_araddr":  Out(p.addr_bits),
        f"{prefix}_arlen":   Out(8),
        f"{prefix}_arsize":  Out(3),
        f"{prefix}_arburst": Out(2),
        f"{prefix}_arlock":  Out(1),
        f"{prefix}_arcache": Out(4),
        f"{prefix}_arprot":  Out(3),
        f"{prefix}_arvalid": Out(1),
        f"{prefix}_arready": In(1),
        f"{prefix}_rid":     In(p.id_bits),
        f"{prefix}_rdata":   In(p.data_bits),
        f"{prefix}_rresp":   In(2),
        f"{prefix}_rlast":   In(1),
        f"{prefix}_rvalid":  In(1),
        f"{prefix}_rready":  Out(1),
    }


def axil_slave_members(addr_bits: int, prefix: str = "s_axil", data_bits: int = 32) -> dict:
    """The five channels of an AXI4-Lite slave."""
    return {
        f"{prefix}_awaddr":  In(addr_bits),
        f"{prefix}_awprot":  In(3),
        f"{prefix}_awvalid": In(1),
        f"{prefix}_awready": Out(1),
        f"{prefix}_wdata":   In(data_bits),
        f"{prefix}_wstrb":   In(data_bits // 8),
        f"{prefix}_wvalid":  In(1),
        f"{prefix}_wready":  Out(1),
        f"{prefix}_bresp":   Out(2),
        f"{prefix}_bvalid":  Out(1),
        f"{prefix}_bready":  In(1),
        f"{prefix}_araddr":  In(addr_bits),
        f"{prefix}_arprot":  In(3),
        f"{prefix}_arvalid": In(1),
        f"{prefix}_arready": Out(1),
        f"{prefix}_rdata":   Out(data_bits),
        f"{prefix}_rresp":   Out(2),
        f"{prefix}_rvalid":  Out(1),
        f"{prefix}_rready":  In(1),
    }


def axi_write_master_members(p: AxiParams, prefix: str = "m_axi") -> dict:
    """AW, W and B channels of an AXI4 write master."""
    return {
        f"{prefix}_awid":    Out(p.id_bits),
        f"{prefix}_awaddr":  Out(p.addr_bits),
        f"{prefix}_awlen":   Out(8),
        f"{prefix}_awsize":  Out(3),
        f"{prefix}_awburst": Out(2),
        f"{prefix}_awlock":  Out(1),
        f"{prefix}_awcache": Out(4),
        f"{prefix}_awprot":  Out(3),
        f"{prefix}_awvalid": Out(1),
        f"{prefix}_awready": In(1),
        f"{prefix}_wdata":   Out(p.data_bits),
        f"{prefix}_wstrb":   Out(p.data_bytes),
        f"{prefix}_wlast":   Out(1),
        f"{prefix}_wvalid":  Out(1),
        f"{prefix}_wready":  In(1),
        f"{prefix}_bid":     In(p.id_bits),
        f"{prefix}_bresp":   In(2),
        f"{prefix}_bvalid":  In(1),
        f"{prefix}_bready":  Out(1),
    }


def forward_ports(m, outer, inner, members: dict):
    """Connect the flat ports ``members`` of a submodule ``inner`` to the same-named ports of ``outer``
    (an ``Out`` member is driven by the submodule, an ``In`` member by the outside)."""
    for name, member in members.items():
        if member.flow == Out:
            m.d.comb += getattr(outer, name).eq(getattr(inner, name))
        else:
            m.d.comb += getattr(inner, name).eq(getattr(outer, name))


def burst_beats(m, p: AxiParams, addr, remaining):
    """The beats of the next INCR burst from ``addr`` (combinational): the ``remaining`` beats, at
    most ``p.max_burst_beats``, and never across a 4 KiB page (AXI forbids it)."""
    bound = _burst_bound(m, p, addr)
    length = Signal.like(bound)
    m.d.comb += length.eq(Mux(remaining < bound, remaining, bound))
    return length


def _burst_bound(m, p: AxiParams, addr):
    """The most beats a burst from ``addr`` may have: ``p.max_burst_beats``, or fewer up to the 4 KiB page.

    Both are powers of two, so no comparator: with the beat index in the page split at ``max_burst_beats``,
    the page ends within a burst only when the high part is all ones and the low part nonzero, and then
    ``max_burst_beats - low`` beats are left."""
    sz = p.size_log2
    page_beats = PAGE_BYTES >> sz
    idx = addr[sz:PAGE_BYTES.bit_length() - 1]               # the beat's index in its page
    bound = Signal(range(max(page_beats, p.max_burst_beats) + 1))
    if p.max_burst_beats >= page_beats or p.max_burst_beats & (p.max_burst_beats - 1):
        to_page = page_beats - idx
        m.d.comb += bound.eq(Mux(to_page < p.max_burst_beats, to_page, p.max_burst_beats))
        return bound
    split = p.max_burst_beats.bit_length() - 1
    low, high = idx[:split], idx[split:]
    m.d.comb += bound.eq(Mux(high.all() & low.any(), p.max_burst_beats - low, p.max_burst_beats))
    return bound


def after_burst(m, p: AxiParams, addr, length):
    """``addr + (length << size)``, the address after a burst of ``length`` beats from ``addr``, for a burst that
    stays in its 4 KiB page (every burst :func:`planned_burst` plans): the page offset's sum (13 bits) chooses
    between the page number and the page number plus one, which a register keeps a cycle after ``addr``. Valid
    when ``addr`` did not change in the cycle before (a :func:`planned_burst` caller issues a burst only then), so
    that no carry chain runs over the whole address. Call it outside any ``If`` (its register must follow ``addr``
    in every cycle)."""
    page_bits = PAGE_BYTES.bit_length() - 1
    next_page = Signal(len(addr) - page_bits, name="next_page")
    m.d.sync += next_page.eq(addr[page_bits:] + 1)
    offset = Signal(page_bits + 1, name="after_offset")
    m.d.comb += offset.eq(addr[:page_bits] + (length << p.size_log2))
    return Cat(offset[:page_bits], Mux(offset[page_bits], next_page, addr[page_bits:]))


def in_page(base, offset):
    """``base + offset`` for a sum in ``base``'s 4 KiB page (a beat of a burst): the page offsets' sum, the page
    number as it is."""
    page_bits = PAGE_BYTES.bit_length() - 1
    return Cat((base[:page_bits] + offset)[:page_bits], base[page_bits:])


def planned_burst(m, p: AxiParams, addr, remaining, changed):
    """:func:`burst_beats` of ``addr``/``remaining`` registered, a cycle ahead of its use: ``(length, last,
    planned)``, ``last`` = the burst ends the command (``remaining <= bound``, beside the length's
    comparison, not after it). ``changed`` (combinational) is high in a cycle in which the caller writes
    ``addr`` or ``remaining``; ``planned`` is low in the cycle after, when ``length``/``last`` still describe
    the old values, and high from the next. A caller issues a burst only while ``planned``: at most one every
    other cycle, and a command's first burst two cycles after the command is taken. The page and length
    arithmetic (three comparisons in a row) ends in a register instead of in the burst's address update."""
    bound = _burst_bound(m, p, addr)
    length, last, planned = Signal.like(bound), Signal(), Signal()
    m.d.sync += [length.eq(Mux(remaining < bound, remaining, bound)), last.eq(remaining <= bound),
                 planned.eq(~changed)]
    return length, last, planned
