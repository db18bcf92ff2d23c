"""Formal AXI checks of mlo_hw: the harnesses, their DUTs and a command line.

Each :class:`Check` binds one DUT (Amaranth, converted with :func:`sim.runner.to_verilog`) to the
property modules in ``formal/props`` through a hand-written wrapper in ``formal/wrappers``, and
:func:`run_check` runs it with SymbiYosys (:func:`sim.formal.run_sby`): bounded model checking
(``bmc``), k-induction (``prove``) or reachability of the cover statements (``cover``). A
``mutant`` (a define of the wrapper) perturbs one AXI output of the DUT as the bus sees it; every
check has at least one, and the tests assert that the check catches each.

    python formal/run.py --list
    python formal/run.py read_dma write_dma regs           # bmc at each check's default depth
    python formal/run.py engine --depth 24                  # the engine top (finds the AR bug)
    python formal/run.py regs --mode prove                  # k-induction
    python formal/run.py read_dma --mutant ar_len_unstable  # must FAIL
    python formal/run.py regs --upstream-faxil path/to/faxil_slave.v   # ZipCPU's own file

Run one solver job at a time on a small machine (each check is one process).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:               # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from sim.formal import FormalResult, missing_tools, run_sby  # noqa: E402

__all__ = ["Check", "CHECKS", "formal_config", "run_check", "main"]

PROPS = HERE / "props"
WRAPPERS = HERE / "wrappers"
FAXI = PROPS / "mlo_faxi_master.v"
FAXIL = PROPS / "mlo_faxil_slave.v"

# The engine's formal configuration: the smallest the engine's checks accept (1 layer, hidden 8,
# 2 heads of 4, intermediate 16, 2 tokens; pe = simd = tile_rows = 2; a 32-bit AXI bus and bursts
# of at most 4 beats, so that the input tensor (2 x 8 int16 = 32 bytes) takes two bursts).
FORMAL_CONFIG = {
    "name": "formal_tiny",
    "model": {"layers": 1, "hidden": 8, "heads": 2, "intermediate": 16, "seq_len": 2},
    "folding": {"pe": 2, "simd": 2, "tile_rows": 2},
    "memory": {"axi_data_bits": 64, "axi_addr_bits": 32, "max_burst_beats": 4},
}


def formal_config():
    from mlo_hw.config import config_from_dict
    return config_from_dict(FORMAL_CONFIG)


def _width(verilog: str, port: str) -> int:
    m = re.search(rf"^\s*(?:input|output)\s+(?:\[(\d+):0\]\s+)?{re.escape(port)};", verilog, re.M)
    if not m:
        raise KeyError(f"port {port} not in the Verilog")
    return int(m.group(1)) + 1 if m.group(1) else 1


def _small_axi(max_burst_beats: int = 16):
    """The AXI parameters of the shipped ``small`` config (32-bit addresses, 64-bit data, 16 beats), with
    an optional shorter burst limit."""
    import dataclasses
    from mlo_hw.hw.axi import AxiParams
    from mlo_hw.config import load_config
    return dataclasses.replace(AxiParams.from_config(load_config("small")), max_burst_beats=max_burst_beats)


def _read_dma():
    from mlo_hw.hw.loop_ctrl import BEATS_BITS, TAG_BITS
    from mlo_hw.hw.weight_dma import ReadDma
    from sim.runner import to_verilog
    p = _small_axi()
    # as the weight streamer instantiates it: 8 bursts in flight
    v = to_verilog(ReadDma(p, beats_bits=BEATS_BITS, tag_bits=TAG_BITS, outstanding=8), "readdma")
    return "readdma.v", v, {"AW": p.addr_bits, "DW": p.data_bits, "IW": p.id_bits,
                            "CMDW": _width(v, "cmd__payload"), "BEATW": _width(v, "beats__payload"),
                            "ERRW": _width(v, "error_code"), "MAXBURST": p.max_burst_beats - 1, "LGQ": 3}


WRITE_DMA_BURST, WRITE_DMA_OUTSTANDING = 4, 4


def _write_dma():
    from mlo_hw.hw.act_dma import WriteDma
    from sim.runner import to_verilog
    p = _small_axi(WRITE_DMA_BURST)
    v = to_verilog(WriteDma(p, beats_bits=16, outstanding=WRITE_DMA_OUTSTANDING), "writedma")
    return "writedma.v", v, {"AW": p.addr_bits, "DW": p.data_bits, "IW": p.id_bits,
                             "CMDW": _width(v, "cmd__payload"), "DATAW": _width(v, "data__payload"),
                             "ERRW": _width(v, "error_code"), "MAXBURST": p.max_burst_beats - 1, "LGQ": 3}


def _regs():
    from mlo_hw.config import load_config
    from mlo_hw.hw.regs import AXIL_ADDR_BITS, ControlRegs
    from sim.runner import to_verilog
    cfg = load_config("small")
    v = to_verilog(ControlRegs(cfg), "regs")
    return "regs.v", v, {"AW": cfg.memory.axi_addr_bits, "LW": AXIL_ADDR_BITS}


def _engine():
    from mlo_hw.hw.axi import AxiParams
    from mlo_hw.hw.layer_engine import EngineTop
    from mlo_hw.hw.regs import AXIL_ADDR_BITS
    from sim.runner import to_verilog
    cfg = formal_config()
    top = EngineTop(cfg)
    p = top.engine.axi
    v = to_verilog(top, "engine_top")
    return "engine_top.v", v, {"AW": p.addr_bits, "DW": p.data_bits, "IW": p.id_bits, "LW": AXIL_ADDR_BITS,
                               "MAXBURST": p.max_burst_beats - 1, "LGQ": 3}


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    wrapper: str                          # file in formal/wrappers
    top: str                              # the wrapper's module
    build: Callable[[], tuple]            # -> (file name, DUT Verilog, wrapper parameters)
    props: tuple = (FAXI,)
    depth: int = 20                       # default bmc depth
    prove_depth: int = 8                  # k of k-induction
    # mutant -> the properties that catch it (the first failure names one of them)
    mutants: dict = field(default_factory=dict)


CHECKS = {c.name: c for c in (
    Check("read_dma", "mlo_hw.hw.weight_dma.ReadDma (8 bursts in flight, small config's bus) vs AXI4 master "
          "properties (read channels)", "readdma_formal.sv", "readdma_formal", _read_dma,
          depth=30, mutants={"ar_len_unstable": ("a_ar_len_stable",), "ar_4k": ("a_ar_4k",)}),
    Check("write_dma", "mlo_hw.hw.act_dma.WriteDma (4 bursts in flight, small config's bus) vs AXI4 master "
          "properties (write channels)", "writedma_formal.sv", "writedma_formal", _write_dma,
          depth=10, mutants={"w_last_early": ("a_w_last",), "w_valid_drop": ("a_w_valid_held",)}),
    Check("regs", "mlo_hw.hw.regs.ControlRegs (small config) vs AXI4-Lite slave properties", "regs_formal.sv",
          "regs_formal", _regs, props=(FAXIL,), depth=20, prove_depth=4,
          mutants={"b_without_write": ("a_b_after_aw", "a_b_after_w"), "r_data_unstable": ("a_r_data_stable",)}),
    Check("engine", "mlo_hw.hw.layer_engine.EngineTop (formal_tiny config) vs AXI4 master properties on m_axi_* "
          "and AXI4-Lite slave properties on s_axil_*", "engine_formal.sv", "engine_formal", _engine,
          props=(FAXI, FAXIL), depth=22,
          mutants={"ar_size_unstable": ("a_ar_size_stable",),
                   "axil_b_without_write": ("a_b_after_aw", "a_b_after_w")}),
)}


def run_check(name: str, *, mode: str = "bmc", depth: int | None = None, mutant: str | None = None,
              upstream_faxil: Path | None = None, timeout_s: float | None = None,
              workdir: Path | None = None) -> FormalResult:
    """Run one check of :data:`CHECKS` (see the module docstring)."""
    check = CHECKS[name]
    if mutant is not None and mutant not in check.mutants:
        raise KeyError(f"{name}: no mutant {mutant!r}; expected one of {', '.join(check.mutants)}")
    fname, verilog, params = check.build()
    sources = {fname: verilog}
    defines = {}
    props = list(check.props)
    if upstream_faxil is not None and FAXIL in props:
        props[props.index(FAXIL)] = Path(upstream_faxil)
        defines["FAXIL_MODULE"] = "faxil_slave"
    for p in props:
        sources[p.name] = p
    sources[check.wrapper] = WRAPPERS / check.wrapper
    if mutant:
        defines[f"MUTANT_{mutant.upper()}"] = 1
    if depth is None:
        depth = check.prove_depth if mode == "prove" else check.depth
    tag = f"{name}-{mode}" + (f"-{mutant}" if mutant else "") + ("-upstream" if upstream_faxil else "")
    return run_sby(tag, sources, check.top, mode=mode, depth=depth, defines=defines, params=params,
                   workdir=workdir, timeout_s=timeout_s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python formal/run.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("checks", nargs="*", help=f"checks to run (default: all): {', '.join(CHECKS)}")
    ap.add_argument("--mode", choices=("bmc", "prove", "cover"), default="bmc")
    ap.add_argument("--depth", type=int, help="bmc depth / induction length (default: per check)")
    ap.add_argument("--mutant", help="run the check on this mutant (it must fail)")
    ap.add_argument("--upstream-faxil", type=Path, help="ZipCPU's faxil_slave.v instead of mlo_faxil_slave.v")
    ap.add_argument("--timeout", type=float, help="seconds per check")
    ap.add_argument("--list", action="store_true", help="list the checks and their mutants")
    args = ap.parse_args(argv)
    if args.list:
        for c in CHECKS.values():
            print(f"{c.name:10s} bmc depth {c.depth}, prove k={c.prove_depth}: {c.description}")
            for mname, catchers in c.mutants.items():
                print(f"{'':10s}   mutant {mname}: caught by {' / '.join(catchers)}")
        return 0
    for name in args.checks:
        if name not in CHECKS:
            ap.error(f"check {name!r}: expected one of {', '.join(CHECKS)}")
    for name in ((args.checks or list(CHECKS)) if args.mutant else ()):
        if args.mutant not in CHECKS[name].mutants:
            ap.error(f"--mutant {args.mutant!r}: check {name} has {', '.join(CHECKS[name].mutants) or 'none'}")
    if args.depth is not None and args.depth < 1:
        ap.error(f"--depth: expected a positive number of steps, got {args.depth}")
    missing = missing_tools()
    if missing:
        print("not installed: " + ", ".join(missing), file=sys.stderr)
        return 2
    bad = 0
    for name in args.checks or list(CHECKS):
        r = run_check(name, mode=args.mode, depth=args.depth, mutant=args.mutant,
                      upstream_faxil=args.upstream_faxil, timeout_s=args.timeout)
        print(r.summary(), flush=True)
        bad += (not r.passed) != bool(args.mutant)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
