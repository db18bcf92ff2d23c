"""Simulated cycles per second of the full-stack RTL simulation (sim/harness.py), with the bit-exact check.

    python bench/simspeed.py [--config bert_tiny] [--seq 32 128] [--stall 0.3] [--memory ideal|ddr3]

For each sequence length: builds the harness (cached; the build time is printed, not counted), runs every
layer on one random input with the DRAM model stalling each AXI channel at random (probability --stall),
recording every on-chip tensor, then checks the run tensor by tensor against the golden model. One line
per run: ``simspeed: config=.. seq=.. cycles=N sim_s=S cycles_per_s=R check_s=C verdict=bit-exact``, where
``sim_s`` is the wall time of the simulation process (one core; DRAM loads, dumps and trace files
included) and ``check_s`` the golden model and the comparison afterwards.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from mlo_hw.cli import ArgumentParser, command, positive_int  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.model.golden import int_stack  # noqa: E402
from mlo_hw.hw.layer_engine import with_seq_len  # noqa: E402
from mlo_hw.model.quantize import build_model, random_inputs  # noqa: E402
from sim.engine_check import check_run  # noqa: E402
from sim.harness import EngineSim  # noqa: E402


def measure(cfg, stall: float, memory: str) -> str:
    t0 = time.time()
    model = build_model(cfg)[1]
    sim = EngineSim(cfg, model)
    prep = time.time() - t0
    x_float, _ = random_inputs(cfg, np.random.default_rng(1), 1, padded=False)[0]
    x = model.quantize_input(x_float)
    r = sim.run(x, cfg.model.seq_len, seed=1, stall=stall, memory=memory)
    t1 = time.time()
    traces = []
    want = int_stack(x, model.layers, np.ones(cfg.model.seq_len, bool), cfg.model.heads, traces)
    try:
        check_run(cfg, r.output, want, traces, r.trace, cfg.model.seq_len, cfg.model.layers)
        verdict = "bit-exact" if r.irq else "timeout"
    except AssertionError as e:
        verdict = f"DIFFERS ({e})"
    check = time.time() - t1
    cycles = r.stats["cycle"]
    return (f"simspeed: config={cfg.name} seq={cfg.model.seq_len} stall={stall} memory={memory} cycles={cycles} "
            f"sim_s={r.wall_s:.2f} cycles_per_s={cycles / r.wall_s:.0f} check_s={check:.2f} "
            f"build_and_model_s={prep:.0f} verdict={verdict}")


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bert_tiny")
    ap.add_argument("--seq", type=positive_int, nargs="+", default=[32, 128])
    ap.add_argument("--stall", type=float, default=0.3, help="probability a channel stalls in a cycle (0..0.99)")
    ap.add_argument("--memory", choices=("ideal", "ddr3"), default="ideal")
    args = ap.parse_args(argv)
    if not 0 <= args.stall < 1:
        ap.error(f"--stall: expected 0 <= p < 1, got {args.stall}")
    base = load_config(args.config)
    if base.seq2seq:
        from mlo_hw.cli import BadInput
        raise BadInput(f"--config: {base.name} is an encoder-decoder (model.encoder_layers); this bench runs one stack "
                       "(bench/cycles.py runs both of its runs)")
    cfgs = [with_seq_len(base, s) for s in args.seq]
    ok = True
    for cfg in cfgs:
        line = measure(cfg, args.stall, args.memory)
        print(line, flush=True)
        ok &= line.endswith("verdict=bit-exact")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
