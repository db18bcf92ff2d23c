"""Board integration: a board top level, its XDC, and an exportable Vivado build plan.

``python -m mlo_hw.boards --config CONFIG [--board BOARD] [--block NAME] [-o DIR] [--run]`` writes the
Vivado build plan of the board top (amaranth's platform build plan: ``build_mlo_top.sh``,
``mlo_top.tcl``, ``mlo_top.xdc``, ``mlo_top.v`` and the board XDC of ``constraints/``) into ``DIR``
(default ``build/<config name>/vivado_<board>/``) without running anything. A user with Vivado then
gets the bitstream from one command: ``sh DIR/build_mlo_top.sh`` (or ``--run``, which does the same).

Boards (:data:`BOARDS`): Arty A7-35 and Arty A7-100 (amaranth-boards ``ArtyA7_35Platform``,
``ArtyA7_100Platform``), and Nexys Video (XC7A200T; not in amaranth-boards 0.0.21, so
:class:`NexysVideoPlatform` below describes its clock, reset, LEDs and UART).

:class:`BoardTop` is the chip top level:

- clock: the board oscillator through a BUFG when ``target.clock_mhz`` equals it, else an
  MMCME2_BASE (integer multiply/divide chosen by :func:`mmcm_params`) makes the configured frequency;
- reset: the board's reset button (active low on all three boards; amaranth's ``PinsN`` inverts it),
  or'ed with the MMCM's ``not LOCKED``, synchronized by ``ResetSynchronizer`` into the active-high
  synchronous reset of the ``sync`` domain;
- the design: the layer engine (``mlo_hw.hw.layer_engine.engine_top(cfg)``; its ``aclk``/``aresetn``
  ports are driven from ``sync``; an engine that uses ``sync`` implicitly works as well), or, while
  the engine is not built, one block that exists (``--block``).
  The design's other ports have no board pins: the DRAM behind the AXI master needs the board's DDR3
  controller (Vivado's MIG), which is not part of this flow. So that the tools keep all the logic,
  every input bit is fed from its own flip-flop of a shift register filled by a free-running 64-bit
  xorshift generator, and every output port is folded by XOR into LED 0. The bitstream is a resource
  and timing build of the design on the part, not a working accelerator.

The XDC (:func:`xdc_text`) has ``create_clock`` for the board clock input at the configured period
(when an MMCM makes the configured clock, the input's own period, and Vivado derives the MMCM output
clock) and the configuration-bank settings; amaranth's generated ``mlo_top.xdc`` places the pins.
``constraints/<board>.xdc`` is the file for the shipped configs (100 MHz); the build plan carries the
one for the config it was made for.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path

from amaranth import C, Cat, ClockDomain, ClockSignal, Elaboratable, Instance, Module, ResetSignal, Signal, Value
from amaranth.build import Attrs, Clock, Pins, PinsN, Resource
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In
from amaranth.vendor import XilinxPlatform
from amaranth_boards.arty_a7 import ArtyA7_35Platform, ArtyA7_100Platform
from amaranth_boards.resources import LEDResources, UARTResource

from .cli import ArgumentParser, command, folder, staged_folder
from .config import ConfigError, _part_family, load_config

__all__ = ["NexysVideoPlatform", "Board", "BOARDS", "board_of", "mmcm_params", "BoardTop", "xdc_text",
           "write_xdc", "drive_from_stimulus", "design_component", "build_plan", "board_verilog", "TOP_NAME", "main"]

TOP_NAME = "mlo_top"


class NexysVideoPlatform(XilinxPlatform):
    """Digilent Nexys Video (XC7A200T-1SBG484C): 100 MHz clock, CPU_RESET button (active low), LEDs, UART.

    Pins from the Digilent Nexys Video master XDC.
    """
    device = "xc7a200t"
    package = "sbg484"
    speed = "1"
    default_clk = "clk100"
    default_rst = "rst"
    resources = [
        Resource("clk100", 0, Pins("R4", dir="i"), Clock(100e6), Attrs(IOSTANDARD="LVCMOS33")),
        Resource("rst", 0, PinsN("G4", dir="i"), Attrs(IOSTANDARD="LVCMOS15")),
        *LEDResources(pins="T14 T15 T16 U16 V15 W16 W15 Y13", attrs=Attrs(IOSTANDARD="LVCMOS25")),
        UARTResource(0, rx="V18", tx="AA19", attrs=Attrs(IOSTANDARD="LVCMOS33")),
    ]
    connectors = []


@dataclass(frozen=True)
class Board:
    name: str
    title: str
    platform: type
    osc_mhz: float          # the board oscillator on the platform's default clock
    config_voltage: float   # VCCO of configuration bank 0

    @property
    def part(self) -> str:
        return self.platform(toolchain="Vivado")._part


BOARDS = {
    "arty_a7_35": Board("arty_a7_35", "Digilent Arty A7-35", ArtyA7_35Platform, 100.0, 3.3),
    "arty_a7_100": Board("arty_a7_100", "Digilent Arty A7-100", ArtyA7_100Platform, 100.0, 3.3),
    "nexys_video": Board("nexys_video", "Digilent Nexys Video", NexysVideoPlatform, 100.0, 3.3),
}


def board_of(cfg, board: str | None = None) -> Board:
    """The board of ``cfg`` (or ``board``); its FPGA must be the config's part family."""
    name = cfg.target.board if board is None else board
    field = "target.board" if board is None else "--board"
    if name not in BOARDS:
        raise ConfigError(f"{field}: unknown board {name!r}; expected one of {', '.join(BOARDS)}")
    b = BOARDS[name]
    if board is None and _part_family(b.part) != cfg.part_family:
        raise ConfigError(f"target.part: {cfg.target.part} is not the FPGA of board {name} ({b.part})")
    return b


def mmcm_params(osc_mhz: float, want_mhz: float) -> dict:
    """Integer MMCME2 settings making ``want_mhz`` from ``osc_mhz`` (Artix-7 -1/-1L: VCO 600..1200 MHz,
    PFD 10..450 MHz); the exact frequency or the closest within 0.5 %, else ConfigError."""
    best = None
    for d in range(1, 11):
        pfd = osc_mhz / d
        if not 10 <= pfd <= 450:
            continue
        for mult in range(2, 65):
            vco = pfd * mult
            if not 600 <= vco <= 1200:
                continue
            o = max(1, min(128, round(vco / want_mhz)))
            err = abs(vco / o - want_mhz) / want_mhz
            if best is None or err < best[0] - 1e-12:
                best = (err, d, mult, o, vco)
    if best is None or best[0] > 0.005:
        raise ConfigError(f"target.clock_mhz: {want_mhz:g} MHz cannot be made from the {osc_mhz:g} MHz "
                          "oscillator by an integer MMCM setting within 0.5 %")
    err, d, mult, o, vco = best
    return {"DIVCLK_DIVIDE": d, "CLKFBOUT_MULT_F": float(mult), "CLKOUT0_DIVIDE_F": float(o),
            "vco_mhz": vco, "out_mhz": vco / o}


def drive_from_stimulus(m: Module, design, domain: str = "sync") -> Signal:
    """Connect ``design`` inside ``m`` to no pins: ``aclk``/``aresetn`` from ``domain``, every other
    input bit from its own flip-flop of a shift register fed by a 64-bit xorshift generator (so that no two
    input bits are equal and the tools cannot merge logic that the design duplicates), every output bit folded
    by XOR into the returned registered bit, through a tree of registers (16 bits into one at each level: the fold
    adds no path longer than two LUT levels, so the design's paths, not the fold's, set the clock). Used by
    :class:`BoardTop` and the ECP5 wrapper (:mod:`.ecp5`)."""
    x = Signal(64, init=0x9E3779B97F4A7C15)
    t, t2 = Signal(64), Signal(64)
    m.d.comb += [t.eq(x ^ (x << 13)[:64]), t2.eq(t ^ (t >> 7))]
    m.d[domain] += x.eq(t2 ^ (t2 << 17)[:64])
    inputs, outputs = [], []
    for path, member, value in design.signature.flatten(design):
        name, value = "__".join(str(p) for p in path), Value.cast(value)
        if name == "aclk":
            m.d.comb += value.eq(ClockSignal(domain))
        elif name == "aresetn":
            m.d.comb += value.eq(~ResetSignal(domain))
        elif member.flow == In:
            inputs.append(value)
        else:
            outputs.append(value)
    stimulus = Signal(max(sum(len(v) for v in inputs), 1))
    m.d[domain] += stimulus.eq(Cat(x, stimulus)[:len(stimulus)])
    at = 0
    for v in inputs:
        m.d.comb += v.eq(stimulus[at:at + len(v)])
        at += len(v)
    level, depth = Cat(*outputs) if outputs else C(0, 1), 0
    while True:
        chunks = [level[i:i + 16] for i in range(0, len(level), 16)]
        folded = Signal(len(chunks), name=f"folded{depth}")
        m.d[domain] += [folded[i].eq(c.xor()) for i, c in enumerate(chunks)]
        if len(chunks) == 1:
            return folded
        level, depth = folded, depth + 1


class BoardTop(Elaboratable):
    """Clock, reset and the design on a board; see the module docstring for what the ports do."""

    def __init__(self, cfg, board: Board, design):
        self.cfg, self.board, self.design = cfg, board, design

    def elaborate(self, platform):
        m = Module()
        cfg, board = self.cfg, self.board
        m.submodules.clk_buf = clk_buf = io.Buffer("i", platform.request(platform.default_clk, 0, dir="-"))
        m.submodules.rst_buf = rst_buf = io.Buffer("i", platform.request(platform.default_rst, 0, dir="-"))
        clk_in, rst_in = clk_buf.i, rst_buf.i
        # the engine (EngineTop) makes its own ``sync`` from its aclk port: the board's clock is then a local domain
        own_clock = "aclk" in self.design.signature.members
        domain = "board" if own_clock else "sync"
        m.domains += ClockDomain(domain, local=own_clock)
        locked = Signal(init=1)
        if cfg.target.clock_mhz == board.osc_mhz:
            m.submodules.bufg = Instance("BUFG", i_I=clk_in, o_O=ClockSignal(domain))
        else:
            p = mmcm_params(board.osc_mhz, cfg.target.clock_mhz)
            clk_mmcm, clk_fb = Signal(), Signal()
            m.submodules.mmcm = Instance(
                "MMCME2_BASE", p_CLKIN1_PERIOD=round(1000 / board.osc_mhz, 3),
                p_DIVCLK_DIVIDE=p["DIVCLK_DIVIDE"], p_CLKFBOUT_MULT_F=p["CLKFBOUT_MULT_F"],
                p_CLKOUT0_DIVIDE_F=p["CLKOUT0_DIVIDE_F"],
                i_CLKIN1=clk_in, i_CLKFBIN=clk_fb, o_CLKFBOUT=clk_fb, i_RST=rst_in, i_PWRDWN=0,
                o_CLKOUT0=clk_mmcm, o_LOCKED=locked)
            m.submodules.bufg = Instance("BUFG", i_I=clk_mmcm, o_O=ClockSignal(domain))
        m.submodules.reset_sync = ResetSynchronizer(rst_in | ~locked, domain=domain)

        m.submodules.design = self.design
        led = drive_from_stimulus(m, self.design, domain)
        m.submodules.led_buf = led_buf = io.Buffer("o", platform.request("led", 0, dir="-"))
        m.d.comb += led_buf.o.eq(led)
        return m


def _clock_port(board: Board) -> str:
    """The top-level port amaranth gives the board clock input."""
    p = board.platform(toolchain="Vivado")
    return f"{p.default_clk}_0__io"


def xdc_text(cfg, board: Board) -> str:
    """``create_clock`` for the configured frequency and the bank-0 settings of ``board``."""
    mhz = cfg.target.clock_mhz
    port = _clock_port(board)
    lines = [f"# {board.title} ({board.part}): clock constraint for mlo_hw at {mhz:g} MHz.",
             "# Generated by mlo_hw.boards.xdc_text; pin locations and I/O standards are in amaranth's mlo_top.xdc."]
    if mhz == board.osc_mhz:
        lines.append(f"create_clock -name sys_clk -period {1000 / mhz:.3f} [get_ports {{{port}}}]")
    else:
        p = mmcm_params(board.osc_mhz, mhz)
        lines += [f"# The MMCM makes {p['out_mhz']:.3f} MHz (target {mhz:g} MHz) from the {board.osc_mhz:g} MHz "
                  "oscillator; Vivado derives that clock from this one.",
                  f"create_clock -name osc_clk -period {1000 / board.osc_mhz:.3f} [get_ports {{{port}}}]"]
    lines += [f"set_property CONFIG_VOLTAGE {board.config_voltage:g} [current_design]",
              "set_property CFGBVS VCCO [current_design]",
              "set_property BITSTREAM.GENERAL.COMPRESS TRUE [current_design]", ""]
    return "\n".join(lines)


def write_xdc(cfg, path, board: str | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(xdc_text(cfg, board_of(cfg, board)))
    return path


def _platform(board: Board):
    """The board platform with the clock's own constraint removed: the board XDC is the one source."""
    plat = board.platform(toolchain="Vivado")
    res = copy.copy(plat.lookup(plat.default_clk, 0))
    res.clock = None
    plat.resources[res.name, res.number] = res
    return plat


def design_component(cfg, block: str | None = None):
    """The engine component, or the named block when ``block`` is given; a clear refusal otherwise."""
    from .synth import BLOCKS, ENGINE_HOOK, ENGINE_MODULE, _module_exists
    if block is None:
        if not _module_exists(ENGINE_MODULE):
            present = [b.name for b in BLOCKS if _module_exists(b.module)]
            raise ConfigError("the engine is not built yet (mlo_hw/hw/layer_engine.py does not exist); "
                              + (f"pass --block with one of {', '.join(present)}" if present
                                 else "and no block of it is in the repository either"))
        import importlib
        return getattr(importlib.import_module(ENGINE_MODULE), ENGINE_HOOK)(cfg)
    known = {b.name: b for b in BLOCKS}
    if block not in known:
        raise ConfigError(f"--block: unknown block {block!r}; expected one of {', '.join(known)}")
    if not _module_exists(known[block].module):
        raise ConfigError(f"--block: {block} is not in the repository yet ({known[block].module})")
    return known[block].build(cfg)


def build_plan(cfg, design, board: str | None = None):
    """amaranth's Vivado build plan (nothing is run) of :class:`BoardTop` with ``design``."""
    b = board_of(cfg, board)
    plat = _platform(b)
    plat.add_file(f"{b.name}.xdc", xdc_text(cfg, b))
    return plat.build(BoardTop(cfg, b, design), name=TOP_NAME, do_build=False)


def board_verilog(cfg, design=None, board: str | None = None) -> tuple[str, str, str]:
    """(Verilog, top name, XDC with pins and clock) of the board top, e.g. for nextpnr."""
    plan = build_plan(cfg, design if design is not None else design_component(cfg), board)
    xdc = plan.files[f"{TOP_NAME}.xdc"] + "\n" + xdc_text(cfg, board_of(cfg, board))
    return plan.files[f"{TOP_NAME}.v"], TOP_NAME, xdc


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m mlo_hw.boards", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (bert_tiny)")
    ap.add_argument("--board", help=f"one of {', '.join(BOARDS)} (default: target.board of the config)")
    ap.add_argument("--block", help="build this block instead of the engine (while the engine is not built)")
    ap.add_argument("-o", "--output", type=folder, help="output folder (default build/<config>/vivado_<board>)")
    ap.add_argument("--run", action="store_true", help="also run Vivado (vivado must be on PATH)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    b = board_of(cfg, args.board)
    plan = build_plan(cfg, design_component(cfg, args.block), args.board)
    out = args.output or Path("build") / cfg.name / f"vivado_{b.name}"
    with staged_folder(out, "-o", (f"build_{TOP_NAME}.sh",)) as tmp:
        plan.extract(tmp)
    what = f"block {args.block}" if args.block else "the engine"
    print(f"{cfg.name} on {b.title} ({b.part}) at {cfg.target.clock_mhz:g} MHz, {what}: wrote the Vivado "
          f"build plan to {out}: {', '.join(sorted(plan.files))}")
    print(f"bitstream: sh {out}/build_{TOP_NAME}.sh   (needs vivado on PATH)")
    if args.run:
        import shutil
        if not shutil.which("vivado"):
            print("error: --run: vivado is not on PATH", file=sys.stderr)
            return 2
        plan.execute_local(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
