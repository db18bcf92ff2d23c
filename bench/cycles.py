"""Measured cycles of the layer engine RTL against the roofline bound, per layer and in total.

    python bench/cycles.py --config bert_tiny [--seq 32]

Runs the engine (cocotb + Verilator, the memory answering at full speed) on one input with every
token valid, checks the output against the golden model, and prints per layer: measured cycles, the
roofline bound (``mlo_hw.perf.layer_bound``: the sum over tiles of max(compute, DMA) plus the
attention products), their ratio, the compute-busy and DMA-stall counters, then the cycles per
phase. Input load and output store are counted in the total only. Last line:
``total: measured=N bound=M ratio=R``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.layer_engine import with_seq_len  # noqa: E402
from mlo_hw.perf import layer_bound, matrix_costs  # noqa: E402
from sim.engine_run import engine_params, run_engine  # noqa: E402


def total_bound(cfg) -> int:
    """Roofline bound of a run of every layer (input load and output store not counted)."""
    return layer_bound(cfg) * cfg.model.layers


def profile(cfg, base_name: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "profile.json"
        run_engine(cfg, engine_params(cfg, base_name, profile_out=str(out), timeout_cycles=50_000_000), "profile")
        return json.loads(out.read_text())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--seq", type=int, help="sequence length (default: the config's)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    base = cfg.name
    if args.seq:
        cfg = with_seq_len(cfg, args.seq)
    t0 = time.time()
    prof = profile(cfg, base)
    wall = time.time() - t0
    bound = layer_bound(cfg)
    per_layer = defaultdict(lambda: {"cycles": 0, "compute": 0, "stall": 0})
    per_op = defaultdict(lambda: {"cycles": 0, "compute": 0, "stall": 0})
    for ph in prof["phases"]:
        key = ph["op"] if ph["op"] in ("LOAD", "STORE") else ph["layer"]
        for k in ("cycles", "compute", "stall"):
            if isinstance(key, int):
                per_layer[key][k] += ph[k]
            per_op[ph["op"]][k] += ph[k]
    print(f"config {cfg.name}: layers={cfg.model.layers} seq={cfg.model.seq_len} (padded {cfg.seq_padded}) "
          f"hidden={cfg.model.hidden} pe x simd={cfg.folding.pe}x{cfg.folding.simd} "
          f"bus={cfg.memory.axi_data_bits} bits   (simulated in {wall:.0f} s)")
    print(f"{'layer':>6} {'measured':>10} {'bound':>10} {'ratio':>6} {'compute-busy':>13} {'dma-stall':>10}")
    for layer in sorted(k for k in per_layer if k < cfg.model.layers):
        row = per_layer[layer]
        print(f"{layer:>6} {row['cycles']:>10} {bound:>10} {row['cycles'] / bound:>6.3f} {row['compute']:>13} "
              f"{row['stall']:>10}")
    print("phases (all layers):")
    for op, row in per_op.items():
        print(f"  {op:>9}: cycles={row['cycles']:>9} compute-busy={row['compute']:>9} dma-stall={row['stall']:>8}")
    print("bound per matrix (per layer): " + ", ".join(f"{c.matrix}={c.bound}" for c in matrix_costs(cfg)))
    total = total_bound(cfg)
    print(f"counters: CYCLES={prof['cycles']} COMPUTE_CYCLES={prof['compute_cycles']} "
          f"STALL_CYCLES={prof['stall_cycles']}")
    print(f"total: measured={prof['cycles']} bound={total} ratio={prof['cycles'] / total:.3f}")


if __name__ == "__main__":
    main()
