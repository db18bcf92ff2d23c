"""LiteDRAM's real DDR3 controller and its DFI-level DRAM model as an AXI4 slave for the full-stack harness.

:func:`litedram_verilog` generates (with migen, LiteDRAM 2024.12 and LiteX 2024.12) one Verilog file with two
modules:

``litedram_core`` (migen output): what the Arty A7 SoC of :mod:`mlo_hw.soc` puts between the engine's AXI4
master and the DDR3 pins, minus the vendor PHY:

  * ``LiteDRAMAXI2Native`` (LiteDRAM's AXI4 user port, 16-entry read/write buffers) at 128 bits on a
    full-width crossbar port, behind the wrapper's AXI up-converter when the engine's bus is narrower
    (``topology="wide"``, the default); ``topology="soc"`` builds it as ``mlo_hw.soc`` does instead, at the
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


def _core(dw: int, aw: int, geom: LiteDramGeometry, id_bits: int):
    """The migen module and its ports (name -> Signal, direction)."""
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
    return top, ports, core, phy


@functools.lru_cache(maxsize=None)
def _generate(dw: int, aw: int, size: int, id_bits: int, topology: str) -> str:
    from migen.fhdl.verilog import convert
    if topology not in ("wide", "soc"):
        raise ValueError(f"topology: expected 'wide' or 'soc', got {topology!r}")
    if dw not in (32, 64, 128):
        raise ValueError(f"the engine's AXI data width must be 32, 64 or 128 bits, got {dw}")
    geom = LiteDramGeometry(size)
    core_dw = 8 * WORD_BYTES if topology == "wide" else dw
    top, ports, core, phy = _core(core_dw, aw, geom, id_bits)
    out = convert(top, ios={p for p, _ in ports.values()}, name="litedram_core")
    text = str(out)
    for i in range(1 << BANK_BITS):
        assert f" bank{i}[" in text, f"bank{i} memory not found in the generated Verilog"
    s = core.controller.settings
    header = "\n".join([
        "// generated by sim/litedram_model.py (migen " "/ LiteDRAM 2024.12): LiteDRAMAXI2Native + LiteDRAMCore",
        f"// (MT41K128M16 at {LITEDRAM_SYS_MHZ:g} MHz, 1:4, rows cut to {1 << geom.row_bits}) + SDRAMPHYModel;",
        f"// topology {topology}: AXI port of {core_dw} bits on the crossbar, engine bus {dw} bits.",
        f"// PHY: cl={phy.settings.cl} cwl={phy.settings.cwl} read_latency={phy.settings.read_latency} "
        f"write_latency={phy.settings.write_latency}; controller: tRP={s.timing.tRP} tRCD={s.timing.tRCD} "
        f"tWR={s.timing.tWR} tREFI={s.timing.tREFI} tRFC={s.timing.tRFC} tRAS={s.timing.tRAS} "
        f"tCCD={s.timing.tCCD} tWTR={s.timing.tWTR} (system cycles)", ""])
    return header + text + "\n" + _wrapper(dw, core_dw, aw, geom, id_bits)


def litedram_verilog(cfg, size: int, id_bits: int = 1, topology: str = "wide") -> str:
    """The Verilog of ``litedram_core`` and its wrapper ``litedram_dram`` (see the module docstring) for the
    engine's AXI widths of ``cfg`` and ``size`` bytes of simulated address space (a power of two).
    ``topology``: ``wide`` (the default: the wrapper's AXI up-converter, LiteDRAMAXI2Native at 128 bits on a
    full-width crossbar port) or ``soc`` (as ``mlo_hw.soc`` builds it: LiteDRAMAXI2Native at the engine's
    width on ``get_port(data_width=...)``, i.e. LiteDRAM's native-port up-converter)."""
    return _generate(cfg.memory.axi_data_bits, cfg.memory.axi_addr_bits, size, id_bits, topology)


def _wrapper(dw: int, core_dw: int, aw: int, geom: LiteDramGeometry, id_bits: int) -> str:
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
    if core_dw == dw:
        conns = ", ".join(f".s_axi_{n}(s_axi_{n})" for _, _, n in axi_ports)
        conv = ""
    else:
        conns = ", ".join(f".s_axi_{n}(c_axi_{n})" for _, _, n in axi_ports)
        conv = _upconverter(dw, core_dw, aw, id_bits)
    case_w = "\n".join(f"            3'd{b}: core.bank{b}[idx][{{addr[3:0], 3'b000}} +: 8] = value;"
                       for b in range(1 << BANK_BITS))
    case_r = "\n".join(f"            3'd{b}: word = core.bank{b}[idx];" for b in range(1 << BANK_BITS))
    unused = ", ".join(n for _, _, n in ctrl)
    return f"""
// litedram_dram: axi_dram's ports around litedram_core (generated by sim/litedram_model.py; see there).
module litedram_dram (
{(',' + chr(10)).join(decls)}
);
{conv}
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


def _upconverter(dw: int, core_dw: int, aw: int, id_bits: int) -> str:
    """SystemVerilog of an AXI4 up-converter from the engine's ``s_axi_*`` (dw bits) to ``c_axi_*`` (core_dw bits)
    for INCR bursts of full-width beats: each narrow burst becomes the wide burst covering the same bytes (wide
    beats, lanes selected by the address), write strobes only on the narrow beats' lanes, read lanes picked from
    the wide beats; one FIFO of (first lane, narrow length) per direction keeps bursts in order."""
    r = core_dw // dw
    lb = (r - 1).bit_length()
    nb = (dw // 8 - 1).bit_length()          # log2 narrow bytes
    wb = (core_dw // 8 - 1).bit_length()     # log2 wide bytes
    return f"""
    // ---- AXI up-converter {dw} -> {core_dw} bits ({r} lanes) ----
    logic [{id_bits - 1}:0] c_axi_awid, c_axi_bid, c_axi_arid, c_axi_rid;
    logic [{aw - 1}:0] c_axi_awaddr, c_axi_araddr;
    logic [7:0] c_axi_awlen, c_axi_arlen;
    logic [2:0] c_axi_awsize, c_axi_arsize, c_axi_awprot, c_axi_arprot;
    logic [1:0] c_axi_awburst, c_axi_arburst, c_axi_bresp, c_axi_rresp;
    logic c_axi_awlock, c_axi_arlock;
    logic [3:0] c_axi_awcache, c_axi_arcache;
    logic c_axi_awvalid, c_axi_awready, c_axi_wlast, c_axi_wvalid, c_axi_wready, c_axi_bvalid, c_axi_bready;
    logic c_axi_arvalid, c_axi_arready, c_axi_rlast, c_axi_rvalid, c_axi_rready;
    logic [{core_dw - 1}:0] c_axi_wdata, c_axi_rdata;
    logic [{core_dw // 8 - 1}:0] c_axi_wstrb;

    function automatic logic [7:0] wide_len(input logic [{aw - 1}:0] addr, input logic [7:0] len);
        logic [{aw}:0] last;
        last = {{1'b0, addr}} + (({aw + 1}'(len) + {aw + 1}'(1)) << {nb}) - {aw + 1}'(1);
        return 8'((last >> {wb}) - ({aw + 1}'(addr) >> {wb}));
    endfunction

    // read side
    logic [{lb - 1}:0] rf_lane [4];
    logic [7:0] rf_len [4];
    logic [2:0] rf_wp, rf_rp;
    logic [{lb - 1}:0] r_lane;
    logic [7:0] r_cnt;
    logic r_started;
    wire rf_full = (rf_wp - rf_rp) == 3'd4;
    wire rf_empty = rf_wp == rf_rp;
    assign c_axi_arid = s_axi_arid;
    assign c_axi_araddr = s_axi_araddr & ~{aw}'({core_dw // 8 - 1});
    assign c_axi_arlen = wide_len(s_axi_araddr, s_axi_arlen);
    assign c_axi_arsize = 3'd{wb};
    assign c_axi_arburst = s_axi_arburst;
    assign c_axi_arlock = s_axi_arlock;
    assign c_axi_arcache = s_axi_arcache;
    assign c_axi_arprot = s_axi_arprot;
    assign c_axi_arvalid = s_axi_arvalid && !rf_full;
    assign s_axi_arready = c_axi_arready && !rf_full;
    wire [{lb - 1}:0] r_cur = r_started ? r_lane : rf_lane[rf_rp[1:0]];
    wire r_last = r_cnt == rf_len[rf_rp[1:0]];
    assign s_axi_rvalid = c_axi_rvalid && !rf_empty;
    assign s_axi_rdata = c_axi_rdata[{dw} * r_cur +: {dw}];
    assign s_axi_rresp = c_axi_rresp;
    assign s_axi_rid = c_axi_rid;
    assign s_axi_rlast = r_last;
    assign c_axi_rready = s_axi_rready && !rf_empty && (r_cur == {lb}'({r - 1}) || r_last);
    always_ff @(posedge clk) begin
        if (rst) begin
            rf_wp <= 3'd0; rf_rp <= 3'd0; r_cnt <= 8'd0; r_started <= 1'b0; r_lane <= '0;
        end else begin
            if (s_axi_arvalid && s_axi_arready) begin
                rf_lane[rf_wp[1:0]] <= s_axi_araddr[{wb - 1}:{nb}];
                rf_len[rf_wp[1:0]] <= s_axi_arlen;
                rf_wp <= rf_wp + 3'd1;
            end
            if (s_axi_rvalid && s_axi_rready) begin
                if (r_last) begin
                    r_cnt <= 8'd0; r_started <= 1'b0; rf_rp <= rf_rp + 3'd1;
                end else begin
                    r_cnt <= r_cnt + 8'd1; r_started <= 1'b1; r_lane <= r_cur + {lb}'(1);
                end
            end
        end
    end

    // write side
    logic [{lb - 1}:0] wf_lane [4];
    logic [7:0] wf_len [4];
    logic [2:0] wf_wp, wf_rp;
    logic [{lb - 1}:0] w_lane;
    logic [7:0] w_cnt;
    logic w_started;
    logic [{core_dw - 1}:0] w_hold;
    logic [{core_dw // 8 - 1}:0] w_hold_strb;
    wire wf_full = (wf_wp - wf_rp) == 3'd4;
    wire wf_empty = wf_wp == wf_rp;
    assign c_axi_awid = s_axi_awid;
    assign c_axi_awaddr = s_axi_awaddr & ~{aw}'({core_dw // 8 - 1});
    assign c_axi_awlen = wide_len(s_axi_awaddr, s_axi_awlen);
    assign c_axi_awsize = 3'd{wb};
    assign c_axi_awburst = s_axi_awburst;
    assign c_axi_awlock = s_axi_awlock;
    assign c_axi_awcache = s_axi_awcache;
    assign c_axi_awprot = s_axi_awprot;
    assign c_axi_awvalid = s_axi_awvalid && !wf_full;
    assign s_axi_awready = c_axi_awready && !wf_full;
    wire [{lb - 1}:0] w_cur = w_started ? w_lane : wf_lane[wf_rp[1:0]];
    wire w_last = w_cnt == wf_len[wf_rp[1:0]];
    wire w_emit = w_cur == {lb}'({r - 1}) || w_last;     // this narrow beat completes a wide beat
    logic [{core_dw - 1}:0] w_data_now;
    logic [{core_dw // 8 - 1}:0] w_strb_now;
    always_comb begin
        w_data_now = w_hold;
        w_strb_now = w_hold_strb;
        w_data_now[{dw} * w_cur +: {dw}] = s_axi_wdata;
        w_strb_now[{dw // 8} * w_cur +: {dw // 8}] = s_axi_wstrb;
    end
    assign c_axi_wdata = w_data_now;
    assign c_axi_wstrb = w_strb_now;
    assign c_axi_wlast = w_last;
    assign c_axi_wvalid = s_axi_wvalid && !wf_empty && w_emit;
    assign s_axi_wready = !wf_empty && (w_emit ? c_axi_wready : 1'b1);
    assign s_axi_bid = c_axi_bid;
    assign s_axi_bresp = c_axi_bresp;
    assign s_axi_bvalid = c_axi_bvalid;
    assign c_axi_bready = s_axi_bready;
    always_ff @(posedge clk) begin
        if (rst) begin
            wf_wp <= 3'd0; wf_rp <= 3'd0; w_cnt <= 8'd0; w_started <= 1'b0; w_lane <= '0; w_hold_strb <= '0;
        end else begin
            if (s_axi_awvalid && s_axi_awready) begin
                wf_lane[wf_wp[1:0]] <= s_axi_awaddr[{wb - 1}:{nb}];
                wf_len[wf_wp[1:0]] <= s_axi_awlen;
                wf_wp <= wf_wp + 3'd1;
            end
            if (s_axi_wvalid && s_axi_wready) begin
                if (w_emit) begin
                    w_hold_strb <= '0;
                end else begin
                    w_hold <= w_data_now;
                    w_hold_strb <= w_strb_now;
                end
                if (w_last) begin
                    w_cnt <= 8'd0; w_started <= 1'b0; wf_rp <= wf_rp + 3'd1;
                end else begin
                    w_cnt <= w_cnt + 8'd1; w_started <= 1'b1; w_lane <= w_cur + {lb}'(1);
                end
            end
        end
    end
"""
