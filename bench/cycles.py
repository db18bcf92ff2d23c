"""Measured cycles of the layer engine RTL against the roofline bound, per layer and in total.

    python bench/cycles.py --config bert_tiny [--seq 32] [--memory ideal|ddr3|litedram] [--bram36-budget N] [--timeline]

Runs the engine RTL in the full-stack harness (sim/harness.py: the DRAM model in the simulated design)
on one input with every token valid, checks it tensor by tensor against the golden model (a DRAM-tiled
plan's tensors gathered block by block), and prints
per layer: measured cycles, the roofline bound of the config's plan (``mlo_hw.plan``: for the on-chip engine
``mlo_hw.perf.layer_bound``, the sum over tiles of max(compute, DMA) plus the attention products), their
ratio, the compute-busy and DMA-stall counters,
then the cycles per phase (``--timeline``: and each stretch of one phase, in order, with its MVAU result beats: where
a block's or a head's cycles go). ``--memory ideal`` answers every beat at once (no stalls); ``--memory ddr3``
applies the DRAM timing model (``sim.harness.ddr3``: read latency, row misses, refresh, turnaround and the
DRAM's data rate); ``--memory litedram`` puts LiteDRAM's real controller and its DFI-level DDR3 model in place of
the model (``sim.litedram_model``: MT41K128M16 at 100 MHz, 1:4, peak 16 bytes a cycle). On chip, input load and output store are counted in the total only (and so is their transfer time in
the total bound: every DRAM byte is counted). The last three lines:
``dma: bytes=B beats=N bus_fraction=F dram_fraction=D`` (bytes moved over the AXI port, the share of the
run's cycles with a beat on it, and the share of the DRAM's data time they took),
``throughput: inferences/s=I GMAC/s=G dsp_peak_fraction=F`` (at the config's clock, said so: not a routed one) and
``total: measured=N bound=M ratio=R memory=ideal|ddr3|litedram``.

An encoder-decoder config (``model.encoder_layers``, ``docs/seq2seq.md``) runs the encoder's run, then the decoder's
prefill (every token valid, the memory all of the encoder's), both checked against the golden model in DRAM; the
layers are printed per stack against their own bounds (a decoder layer's includes pass 0 and the cross block), and
the totals count both runs.
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlo_hw.cli import ArgumentParser, command, positive_int  # noqa: E402
from mlo_hw.config import PARTS, _part_family, load_config  # noqa: E402
from mlo_hw.hw.layer_engine import Op, with_seq_len  # noqa: E402
from mlo_hw.perf import matrix_costs  # noqa: E402
from mlo_hw.plan import plan  # noqa: E402
from mlo_hw.model.quantize import build_model  # noqa: E402
from sim.harness import MEMORIES, TIMEOUT_CYCLES, EngineSim, backend_of, memory_model, random_input  # noqa: E402


def total_bound(cfg) -> int:
    """Roofline bound of a run of every layer, every DRAM byte counted (the plan's, :mod:`mlo_hw.plan`)."""
    return plan(cfg).cycles


def throughput(cfg, cycles: int) -> str:
    """Inferences per second at the config's clock (``target.clock_mhz``: not a routed figure), the multiply-accumulates
    they deliver (every matrix and attention product of every layer, at ``seq_len`` tokens) and their share of the
    part's DSP peak (two int8 MACs per DSP a cycle)."""
    m, mhz = cfg.model, cfg.target.clock_mhz
    layer = 4 * m.hidden ** 2 + 2 * m.hidden * m.intermediate + 2 * m.seq_len * m.hidden
    cross = 4 * m.hidden ** 2 + 2 * m.seq_len * m.hidden      # a decoder layer's cross-attention block
    macs = m.seq_len * (m.encoder_layers * layer + m.layers * (layer + (cross if cfg.seq2seq else 0)))
    per_s = mhz * 1e6 / cycles
    dsp = PARTS[_part_family(cfg.target.part)]["DSP"]
    peak = 2 * dsp * mhz / 1e3
    return (f"throughput: inferences/s={per_s:.1f} GMAC/s={macs * per_s / 1e9:.2f} dsp_peak_fraction="
            f"{macs * per_s / 1e9 / peak:.3f} (at the config's {mhz:g} MHz, not a routed clock; peak 2 x {dsp} DSP x "
            f"{mhz:g} MHz = {peak:.1f} GMAC/s)")


def timeout_cycles(cfg) -> int:
    """How long a run may take before it counts as hung: twice the plan's expected cycles (BERT-base at 512 tokens
    expects about 780 million), and never less than the harness's default."""
    return max(TIMEOUT_CYCLES, 2 * plan(cfg).expected_cycles)


def measure(cfg, memory: str):
    """The result of one run of every layer with all tokens valid, checked against the golden model (an
    encoder-decoder: the results of the encoder's run and the decoder's prefill, checked in DRAM)."""
    if cfg.seq2seq:
        return measure_seq2seq(cfg, memory)
    sim = EngineSim(cfg, build_model(cfg)[1], backend=backend_of(memory))
    return [sim.run_checked(random_input(cfg, sim.model, 1), cfg.model.seq_len, memory=memory,
                            timeout_cycles=timeout_cycles(cfg))[0]]


def measure_seq2seq(cfg, memory: str):
    import numpy as np
    from mlo_hw.model import numerics as nx
    from sim.harness import Run
    _, q = build_model(cfg)
    m = cfg.model
    sim = EngineSim(cfg, q, backend=backend_of(memory))
    rng = np.random.default_rng(1)
    x, y = q.quantize_input(rng.normal(0, 1, (m.seq_len, m.hidden))), q.quantize(rng.normal(0, 1, (m.seq_len, m.hidden)),
                                                                                  q.decoder_scale)
    res = sim.run_many([Run(x, m.seq_len, m.encoder_layers, memory_tokens=0, output_to_memory=True, trace=False),
                        Run(y, m.seq_len, m.layers, memory_tokens=m.seq_len, weight_layer=m.encoder_layers,
                            cache_len=0, trace=False)], memory=memory, timeout_cycles=timeout_cycles(cfg))
    keys = np.ones(m.seq_len, bool)
    enc = q.encode(x, keys)
    dec = q.decode(y, nx.attention_mask(keys, True), enc, keys)
    for r, want, what in zip(res, (enc, dec), ("encoder", "decoder")):
        assert r.status & sim.h.bit("STATUS", "done") and np.array_equal(r.output, want), f"the {what}'s run differs"
    return res


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--seq", type=positive_int, help="sequence length (default: the config's)")
    ap.add_argument("--memory", choices=MEMORIES, default="ideal")
    ap.add_argument("--bram36-budget", type=float, help="block RAM the plan may use (forces the DRAM-tiled "
                                                                "plan on a small config)")
    ap.add_argument("--timeline", action="store_true", help="also print each stretch of one phase: its first "
                                                            "cycle, layer, phase, cycles and MVAU result beats")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.seq is not None or args.bram36_budget is not None:
        cfg = with_seq_len(cfg, cfg.model.seq_len if args.seq is None else args.seq, args.bram36_budget)
    t0 = time.time()
    results = measure(cfg, args.memory)
    wall = time.time() - t0
    p = plan(cfg)
    # (label, layers, bound per layer) of each run: the one stack's, or the encoder's and the decoder's
    stacks = ([("encoder", cfg.model.encoder_layers, p.encoder_layer_cycles), ("decoder", cfg.model.layers,
                                                                                p.layer_cycles)]
              if cfg.seq2seq else [("", cfg.model.layers, p.layer_cycles)])
    io_ops = ("LOAD", "STORE", "IDLE") if p.mode == "on-chip" else ("IDLE",)
    per_layer = defaultdict(lambda: {"cycles": 0, "compute": 0, "stall": 0})
    per_op = defaultdict(lambda: {"cycles": 0, "compute": 0, "stall": 0})
    for (label, _, _), r in zip(stacks, results):
        for ph in r.profile:
            op = Op(ph["op"]).name
            for k in ("cycles", "compute", "stall"):
                if op not in io_ops:
                    per_layer[label, ph["layer"]][k] += ph[k]
                per_op[op][k] += ph[k]
    mem = memory_model(cfg, args.memory)
    print(f"config {cfg.name}: layers={cfg.model.layers} seq={cfg.model.seq_len} (padded {cfg.seq_padded}) "
          f"hidden={cfg.model.hidden} pe x simd={cfg.folding.pe}x{cfg.folding.simd} "
          f"bus={cfg.memory.axi_data_bits} bits memory={mem} plan={p.mode} block={p.block}   "
          f"(built, simulated and checked in {wall:.0f} s)")
    print(f"{'layer':>10} {'measured':>10} {'bound':>10} {'ratio':>6} {'compute-busy':>13} {'dma-stall':>10}")
    for label, layers, bound in stacks:
        for layer in range(layers):
            row = per_layer[label, layer]
            print(f"{(label[:3] + ' ' if label else '') + str(layer):>10} {row['cycles']:>10} {bound:>10} "
                  f"{row['cycles'] / bound:>6.3f} {row['compute']:>13} {row['stall']:>10}")
    print("phases (all layers):")
    for op, row in per_op.items():
        print(f"  {op:>9}: cycles={row['cycles']:>9} compute-busy={row['compute']:>9} dma-stall={row['stall']:>8}")
    if args.timeline:
        print("timeline (each stretch of one phase): cycle layer phase cycles mvau_beats")
        for label, r in zip([lab for lab, _, _ in stacks], results):
            for t in r.timeline:
                print(f"  {(label[:3] + ' ' if label else '')}{t['cycle']:>9} {t['layer']:>3} {Op(t['op']).name:>9} "
                      f"{t['cycles']:>7} {t['mvau_beats']:>6}")
    print("bound per matrix (per layer): " + ", ".join(f"{c.matrix}={c.bound}" for c in matrix_costs(cfg)))
    total = total_bound(cfg)
    cycles = sum(r.cycles for r in results)
    print("counters: " + "; ".join(f"CYCLES={r.cycles} COMPUTE_CYCLES={r.compute_cycles} STALL_CYCLES={r.stall_cycles}"
                                   for r in results))
    r = results[-1]               # the DRAM model's counters count every run of the simulation
    beats = r.stats["rd_beats"] + r.stats["wr_beats"]
    if args.memory == "litedram":
        from sim.litedram_model import peak_bytes_per_cycle
        peak = peak_bytes_per_cycle()
        dram = f"dram_fraction={beats * cfg.axi_data_bytes / peak / cycles:.3f} " \
               f"read_fraction={r.stats['rd_beats'] * cfg.axi_data_bytes / peak / cycles:.3f} (peak {peak} B/cycle)"
    else:
        dram = f"dram_fraction={beats * mem.beat_cost / 256 / cycles:.3f}"
    print(f"dma: bytes={beats * cfg.axi_data_bytes} beats={beats} bus_fraction={beats / cycles:.3f} {dram}")
    print(throughput(cfg, cycles))
    print(f"total: measured={cycles} bound={total} ratio={cycles / total:.3f} memory={args.memory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
