"""LiteDRAM's real DDR3 controller and its DFI-level DRAM model as an AXI4 slave for the full-stack harness.

:func:`litedram_verilog` generates (with migen, LiteDRAM 2024.12 and LiteX 2024.12) one Verilog file with two
modules:

``litedram_core`` (migen output): what the Arty A7 SoC of :mod:`mlo_hw.soc` puts between the engine's AXI4
master and the DDR3 pins, minus the vendor PHY:

  * the engine-to-LiteDRAM path of the SoC itself, built by the SoC's own code (``mlo_hw.soc.DramPath``,
    ``topology="soc"``, the default): ``mlo_axi_upsizer`` (``mlo_hw/rtl/mlo_axi_upsizer.v``, the same file
    the SoC's build scripts read: 64-bit INCR bursts become the 128-bit bursts covering the same bytes)
    into ``LiteDRAMAXI2Native`` (LiteDRAM's AXI4 user port, 16-entry read/write buffers) on a 128-bit
    crossbar port. ``topology="native"`` builds what ``mlo_hw.soc`` used to: ``LiteDRAMAXI2Native`` at the
    engine's width on ``crossbar.get_port(data_width=...)`` (LiteDRAM's native-port up-converter), which
    hangs on write bursts longer than 2 beats (tests/test_litedram.py);
  * ``LiteDRAMCore``: the DFI injector (hardware control from reset), ``LiteDRAMController`` with LiteX's
    default ``ControllerSettings`` (ROW_BANK_COL mapping, 8 bank machines with 8-deep command buffers,
    refresher, read/write turnaround) and the crossbar;
  * ``SDRAMPHYModel``: LiteDRAM's DFI-level DDR3 model (what ``litex_sim --with-sdram`` uses): per-bank
    memories with open-row tracking, the PHY's read latency (``cl_sys_latency + 6`` cycles, as the S7 PHY
    reports) and write latency, 1:4 rate (4 DFI phases of 32 bits a system clock: 16 bytes a cycle).
    It is *not* the vendor PHY (no IOSERDES, no calibration, no DQS), and it checks no timing itself: the
    timings are those the controller enforces.

  The module: Micron MT41K128M16 (the Arty A7's DDR3, x16, 8 banks, 1024 columns, LiteDRAM's default
  speed grade 1600 timings: tRP = tRCD = 13.75 ns, tRAS 35 ns, tRFC 260 ns, tREFI 7.8 us, tFAW 40 ns ...)
  at the Arty's SoC clock (``mlo_hw.soc.SOC_BOARDS["arty_a7_35"].sys_mhz``, 100 MHz, i.e. DDR3-800, 1:4), the
  clock the engine runs at in that SoC. Only the row count is cut to what the simulated address space
  needs (rows do not change any timing; addresses wrap modulo the model's size), so the memory stays small.

``litedram_dram``: a SystemVerilog wrapper with exactly the ports of ``sim/hdl/axi_dram.sv`` (so ``sim_top``
takes either): clk/rst (synchronous, active high) and the ``s_axi_*`` AXI4 slave; the stall, error and timing
inputs are accepted and ignored (LiteDRAM neither stalls at random nor answers SLVERR); the counters
``rd_beats``/``wr_beats``/``rd_bursts``/``wr_bursts`` count R/W/AR/AW handshakes (cleared by rst and reseed, as
in axi_dram); ``protocol_error`` is 0. It exports axi_dram's DPI backdoor:

    export "DPI-C" dram_write_byte(longint unsigned addr, byte unsigned value)
    export "DPI-C" dram_read_byte(longint unsigned addr) -> byte unsigned

on the bank memories, through the controller's address map: byte address A, controller word W = A >> 4
(byte A & 15 of it at bits 8*(A & 15)), column word c = W[0:7] (1024 columns / burst of 8), bank
b = W[7:10], row r = W[10:]; bank b's memory ``bank{b}`` holds W at index r * 128 + c (ROW_BANK_COL, as the
crossbar splits the native address with ``cba_shift = colbits - log2(burst 8)``).

Interface constraints inherited from LiteDRAMAXI2Native: INCR bursts of full-width beats, one outstanding
ID order (responses in order), every response OKAY.
"""
from __future__ import annotations

import functools

__all__ = ["LITEDRAM_SYS_MHZ", "LiteDramGeometry", "litedram_verilog", "peak_bytes_per_cycle"]

BANK_BITS = 3
COL_BITS = 10          # 1024 columns
BURST_WORDS_LOG2 = 3   # burst length 8 = 4 phases x 2 (DDR)
WORD_BYTES = 16        # the controller's native word: 4 phases x 32 DFI bits


def _sys_mhz() -> float:
    from mlo_hw.soc import SOC_BOARDS
    return SOC_BOARDS["arty_a7_35"].sys_mhz


LITEDRAM_SYS_MHZ = _sys_mhz()


def peak_bytes_per_cycle() -> int:
    """The controller's peak: its native (DFI) word, 16 bytes, every system cycle (1.6 GB/s at 100 MHz)."""
    return WORD_BYTES


class LiteDramGeometry:
    """The model's geometry for ``size`` bytes of address space (rows cut to cover it, at least 2)."""

    def __init__(self, size: int):
        row_stripe = WORD_BYTES << (COL_BITS - BURST_WORDS_LOG2 + BANK_BITS)      # 16 KiB: one row of each bank
        self.row_bits = max(1, (max(size, row_stripe) // row_stripe - 1).bit_length())
        self.size = row_stripe << self.row_bits
        self.bank_words = 1 << (self.row_bits + COL_BITS - BURST_WORDS_LOG2)


def _core(dw: int, aw: int, geom: LiteDramGeometry, id_bits: int, topology: str):
    """The migen module, its ports (name -> Signal, direction), the core, the PHY model and the Verilog files
    the engine's DRAM path instantiates (the SoC's up-converter)."""
    from litedram.core import LiteDRAMCore
    from litedram.frontend.axi import LiteDRAMAXI2Native
    from litedram.modules import MT41K128M16
    from litedram.phy.model import SDRAMPHYModel
    from litex.soc.interconnect.axi import AXIInterface
    from migen import Module, Signal

    class Module_(MT41K128M16):
        nrows = 1 << geom.row_bits

    sys_clk = LITEDRAM_SYS_MHZ * 1e6
    top = Module()
    module = Module_(sys_clk, "1:4")
    module.geom_settings.addressbits = 14     # the real part's address pins (A10 is the precharge-all bit)
    assert (module.geom_settings.bankbits, module.geom_settings.colbits) == (BANK_BITS, COL_BITS)
    top.submodules.phy = phy = SDRAMPHYModel(module=module, data_width=16, clk_freq=sys_clk)
    assert phy.settings.dfi_databits * phy.settings.nphases == 8 * WORD_BYTES
    top.submodules.core = core = LiteDRAMCore(phy=phy, geom_settings=module.geom_settings,
                                              timing_settings=module.timing_settings, clk_freq=sys_clk)
    assert core.controller.settings.address_mapping == "ROW_BANK_COL"
    axi = AXIInterface(data_width=dw, address_width=aw, id_width=id_bits)
    files = []
    if topology == "soc":                 # the SoC's own wiring: mlo_hw.soc.DramPath
        from mlo_hw.soc import DramPath
        top.submodules.dram = path = DramPath(axi, core.crossbar)
        assert path.port.data_width == 8 * WORD_BYTES
        files += [path.upsizer] if path.upsizer is not None else []
    else:                                 # LiteDRAM's native-port up-converter (what mlo_hw.soc used to build)
        port = core.crossbar.get_port(data_width=dw)      # dw < 128: LiteDRAMNativePortUpConverter
        top.submodules.axi2native = LiteDRAMAXI2Native(axi, port, base_address=0)

    # name the bank memories for the backdoor
    from migen.fhdl.specials import Memory
    banks = [b for b in phy._submodules if type(b[1]).__name__ == "BankModel"]
    assert len(banks) == 1 << BANK_BITS
    for i, (_, bank) in enumerate(banks):
        (mem,) = [s for s in bank._fragment.specials if isinstance(s, Memory)]
        assert mem.depth == geom.bank_words and mem.width == 8 * WORD_BYTES, (mem.depth, mem.width)
        mem.name_override = f"bank{i}"

    ports = {}
    comb = []

    def port_(name, sig, out):
        p = Signal(len(sig), name=name)
        ports[name] = (p, out)
        comb.append(p.eq(sig) if out else sig.eq(p))

    for ch, fields in (("aw", ("id", "addr", "len", "size", "burst", "lock", "cache", "prot")),
                       ("ar", ("id", "addr", "len", "size", "burst", "lock", "cache", "prot"))):
        bus = getattr(axi, ch)
        for f in fields:
            port_(f"s_axi_{ch}{f}", getattr(bus, f), False)
        port_(f"s_axi_{ch}valid", bus.valid, False)
        port_(f"s_axi_{ch}ready", bus.ready, True)
    for f in ("data", "strb", "last", "valid"):
        port_(f"s_axi_w{f}", getattr(axi.w, f), False)
    port_("s_axi_wready", axi.w.ready, True)
    for f in ("id", "resp", "valid"):
        port_(f"s_axi_b{f}", getattr(axi.b, f), True)
    port_("s_axi_bready", axi.b.ready, False)
    for f in ("id", "data", "resp", "last", "valid"):
        port_(f"s_axi_r{f}", getattr(axi.r, f), True)
    port_("s_axi_rready", axi.r.ready, False)
    top.comb += comb
    return top, ports, core, phy, files


@functools.lru_cache(maxsize=None)
def _generate(dw: int, aw: int, size: int, id_bits: int, topology: str) -> str:
    from migen.fhdl.verilog import convert
    if topology not in ("soc", "native"):
        raise ValueError(f"topology: expected 'soc' or 'native', got {topology!r}")
    if dw not in (32, 64, 128):
        raise ValueError(f"the engine's AXI data width must be 32, 64 or 128 bits, got {dw}")
    geom = LiteDramGeometry(size)
    top, ports, core, phy, files = _core(dw, aw, geom, id_bits, topology)
    out = convert(top, ios={p for p, _ in ports.values()}, name="litedram_core")
    text = str(out)
    for i in range(1 << BANK_BITS):
        assert f" bank{i}[" in text, f"bank{i} memory not found in the generated Verilog"
    s = core.controller.settings
    header = "\n".join([
        "// generated by sim/litedram_model.py (migen " "/ LiteDRAM 2024.12): LiteDRAMAXI2Native + LiteDRAMCore",
        f"// (MT41K128M16 at {LITEDRAM_SYS_MHZ:g} MHz, 1:4, rows cut to {1 << geom.row_bits}) + SDRAMPHYModel;",
        f"// topology {topology}: engine bus {dw} bits"
        + (f", {', '.join(f.name for f in files)} (appended) to LiteDRAMAXI2Native at the native width"
           if files else ", LiteDRAMAXI2Native at the engine's width") + ".",
        f"// PHY: cl={phy.settings.cl} cwl={phy.settings.cwl} read_latency={phy.settings.read_latency} "
        f"write_latency={phy.settings.write_latency}; controller: tRP={s.timing.tRP} tRCD={s.timing.tRCD} "
        f"tWR={s.timing.tWR} tREFI={s.timing.tREFI} tRFC={s.timing.tRFC} tRAS={s.timing.tRAS} "
        f"tCCD={s.timing.tCCD} tWTR={s.timing.tWTR} (system cycles)", ""])
    extra = "".join(f"\n// ---- {f.name} (mlo_hw/rtl/, as the SoC builds it) ----\n{f.read_text()}" for f in files)
    return header + text + extra + "\n" + _wrapper(dw, aw, geom, id_bits)


def litedram_verilog(cfg, size: int, id_bits: int = 1, topology: str = "soc") -> str:
    """The Verilog of ``litedram_core`` and its wrapper ``litedram_dram`` (see the module docstring) for the
    engine's AXI widths of ``cfg`` and ``size`` bytes of simulated address space (a power of two).
    ``topology``: ``soc`` (the default: ``mlo_hw.soc.DramPath``, the SoC's own engine-to-LiteDRAM wiring:
    ``mlo_axi_upsizer`` into LiteDRAMAXI2Native at 128 bits on a full-width crossbar port) or ``native``
    (LiteDRAMAXI2Native at the engine's width on ``get_port(data_width=...)``, i.e. LiteDRAM's native-port
    up-converter, which hangs on write bursts longer than 2 beats: kept to document that)."""
    return _generate(cfg.memory.axi_data_bits, cfg.memory.axi_addr_bits, size, id_bits, topology)


def _wrapper(dw: int, aw: int, geom: LiteDramGeometry, id_bits: int) -> str:
    idx_bits = geom.row_bits + COL_BITS - BURST_WORDS_LOG2
    axi_ports = [("input", id_bits, "awid"), ("input", aw, "awaddr"), ("input", 8, "awlen"), ("input", 3, "awsize"),
                 ("input", 2, "awburst"), ("input", 1, "awlock"), ("input", 4, "awcache"), ("input", 3, "awprot"),
                 ("input", 1, "awvalid"), ("output", 1, "awready"), ("input", dw, "wdata"),
                 ("input", dw // 8, "wstrb"), ("input", 1, "wlast"), ("input", 1, "wvalid"), ("output", 1, "wready"),
                 ("output", id_bits, "bid"), ("output", 2, "bresp"), ("output", 1, "bvalid"), ("input", 1, "bready"),
                 ("input", id_bits, "arid"), ("input", aw, "araddr"), ("input", 8, "arlen"), ("input", 3, "arsize"),
                 ("input", 2, "arburst"), ("input", 1, "arlock"), ("input", 4, "arcache"), ("input", 3, "arprot"),
                 ("input", 1, "arvalid"), ("output", 1, "arready"), ("output", id_bits, "rid"),
                 ("output", dw, "rdata"), ("output", 2, "rresp"), ("output", 1, "rlast"), ("output", 1, "rvalid"),
                 ("input", 1, "rready")]
    from .harness import DRAM_INPUTS, DRAM_OUTPUTS
    ctrl = [("input", w, n) for n, w in DRAM_INPUTS.items()] + [("input", aw, "err_addr")]
    outs = [("output", w, n) for n, w in DRAM_OUTPUTS.items()]

    def decl(d, w, n):
        return f"    {d} logic {'' if w == 1 else f'[{w - 1}:0] '}{n}"

    decls = [decl("input", 1, "clk"), decl("input", 1, "rst")] + \
        [decl(d, w, f"s_axi_{n}") for d, w, n in axi_ports] + [decl(d, w, n) for d, w, n in ctrl + outs]
    conns = ", ".join(f".s_axi_{n}(s_axi_{n})" for _, _, n in axi_ports)
    case_w = "\n".join(f"            3'd{b}: core.bank{b}[idx][{{addr[3:0], 3'b000}} +: 8] = value;"
                       for b in range(1 << BANK_BITS))
    case_r = "\n".join(f"            3'd{b}: word = core.bank{b}[idx];" for b in range(1 << BANK_BITS))
    unused = ", ".join(n for _, _, n in ctrl)
    return f"""
// litedram_dram: axi_dram's ports around litedram_core (generated by sim/litedram_model.py; see there).
module litedram_dram (
{(',' + chr(10)).join(decls)}
);
    litedram_core core(.sys_clk(clk), .sys_rst(rst), {conns});

    // backdoor: byte address -> (row, bank, column word) as the crossbar maps it (ROW_BANK_COL)
    export "DPI-C" function dram_write_byte;
    export "DPI-C" function dram_read_byte;

    function automatic logic [{idx_bits - 1}:0] word_index(input longint unsigned addr);
        longint unsigned w;
        w = addr >> 4;
        return {{{idx_bits - (COL_BITS - BURST_WORDS_LOG2)}'(w >> {COL_BITS - BURST_WORDS_LOG2 + BANK_BITS}), \
{COL_BITS - BURST_WORDS_LOG2}'(w)}};
    endfunction

    function void dram_write_byte(input longint unsigned addr, input byte unsigned value);
        logic [{idx_bits - 1}:0] idx;
        idx = word_index(addr);
        case (3'(addr >> {4 + COL_BITS - BURST_WORDS_LOG2}))
{case_w}
        endcase
    endfunction

    function byte unsigned dram_read_byte(input longint unsigned addr);
        logic [{idx_bits - 1}:0] idx;
        logic [127:0] word;
        idx = word_index(addr);
        word = '0;
        case (3'(addr >> {4 + COL_BITS - BURST_WORDS_LOG2}))
{case_r}
        endcase
        return word[{{addr[3:0], 3'b000}} +: 8];
    endfunction

    always_ff @(posedge clk) begin
        if (rst || reseed) begin
            rd_beats <= 32'd0;
            wr_beats <= 32'd0;
            rd_bursts <= 32'd0;
            wr_bursts <= 32'd0;
        end else begin
            rd_beats <= rd_beats + 32'(s_axi_rvalid && s_axi_rready);
            wr_beats <= wr_beats + 32'(s_axi_wvalid && s_axi_wready);
            rd_bursts <= rd_bursts + 32'(s_axi_arvalid && s_axi_arready);
            wr_bursts <= wr_bursts + 32'(s_axi_awvalid && s_axi_awready);
        end
    end
    assign protocol_error = 1'b0;
    wire _unused_ok = &{{1'b0, {unused}}};
endmodule
"""

