"""Decode throughput of the DRAM-tiled engine RTL: a prefill, then greedy one-token steps through the KV cache.

    python bench/decode.py --config gpt2_tiny [--prompt N] [--steps N] [--memory ideal|ddr3] [--seed N]

Runs in the full-stack harness (sim/harness.py) a prefill of ``--prompt`` random tokens, then ``--steps`` greedy
decode steps (sim/decode_run.py: CACHE_LEN the position rounded down to lcm(pe, simd), docs/decode.md), and checks
them as tests/test_kv_cache.py does (``sim.decode_run.check_generation``): the prefill tensor by tensor, every
step's output bit for bit and its token against the golden model's prefill + decode_step, and the KV cache left in
DRAM after the last step. Prints per step the cycles and the bytes moved
over the AXI port (the DRAM model's read and write beats), then

``decode: tokens/s=T bytes_per_token=B bus_fraction=F`` at the config's clock (not a routed one): the mean step,
and the share of the step's cycles with a beat on the port (reads and writes are separate AXI channels, so the
peak is one beat a cycle on each; the fraction counts both against one, as bench/cycles.py does);
``model: cycles=C bytes=B ...``: the planner's model of a step (``mlo_hw.plan.decode_step``: the roofline bound of
one block through every layer, every DRAM byte counted, plus the LayerNorm phases) and the measured step over it;
``minimum: bytes_per_token=M``: ``mlo_hw.model.decode.decode_traffic`` at the mean cache length, what a step must
move (the engine also streams each head's K_h and V_h^T over the whole capacity, and Q and the residual);
``extrapolated: seq_len=N ...``: the model at ``--extrapolate`` tokens (the cache's capacity; the config's plan at
that length), its cycles scaled by the measured/model ratio: tokens/s and the bus fraction of a step there.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlo_hw.cli import ArgumentParser, BadInput, command, positive_int  # noqa: E402
from mlo_hw.config import ConfigError, load_config  # noqa: E402
from mlo_hw.hw.layer_engine import with_seq_len  # noqa: E402
from mlo_hw.model.decode import decode_traffic  # noqa: E402
from mlo_hw.model.quantize import build_model  # noqa: E402
from mlo_hw.plan import decode_step, kv_cache, plan  # noqa: E402
from sim.decode_run import check_generation, engine_runs, golden_generation  # noqa: E402
from sim.harness import EngineSim  # noqa: E402


@command()
def main(argv=None) -> int:
    import numpy as np
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="gpt2_tiny")
    ap.add_argument("--prompt", type=positive_int, default=60, help="prompt tokens (default 60)")
    ap.add_argument("--steps", type=positive_int, default=4, help="decode steps (default 4)")
    ap.add_argument("--memory", choices=("ideal", "ddr3"), default="ideal")
    ap.add_argument("--seed", type=positive_int, default=1)
    ap.add_argument("--extrapolate", type=positive_int, default=1024,
                    help="the sequence length (cache capacity) to extrapolate the step to (default 1024)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if cfg.seq2seq:
        raise BadInput(f"--config: {cfg.name} is an encoder-decoder (model.encoder_layers); this bench generates with a "
                       "decoder-only model (its decoder's decode steps: tests/test_encoder_decoder.py, Accelerator.decode)")
    kv = kv_cache(cfg)
    try:
        far = with_seq_len(cfg, args.extrapolate)
    except ConfigError as e:
        raise BadInput(f"--extrapolate: {args.extrapolate} tokens: {e}") from None
    if kv is not None and kv_cache(far) is None:
        raise BadInput(f"--extrapolate: at {args.extrapolate} tokens {cfg.name}'s activations stay on chip: no KV cache")
    if kv is None:
        raise BadInput(f"--config: {cfg.name} has no KV cache (it needs model.causal: true and activations in DRAM; "
                       f"python -m mlo_hw.plan --config {args.config})")
    if args.prompt + args.steps > min(kv.capacity, cfg.model.seq_len):
        raise BadInput(f"--prompt/--steps: {args.prompt} + {args.steps} tokens exceed the cache's "
                       f"{min(kv.capacity, cfg.model.seq_len)} positions")
    model = build_model(cfg)[1]
    gen = golden_generation(cfg, model, args.prompt, args.steps, np.random.default_rng(args.seed))
    runs, starts = engine_runs(cfg, gen, args.prompt, dump_last=True)
    sim = EngineSim(cfg, model)
    results = sim.run_many(runs, memory=args.memory, seed=args.seed)
    check_generation(sim, gen, runs[0], starts, results, args.prompt)
    beat = cfg.axi_data_bytes
    prev = results[0].stats
    print(f"config {cfg.name}: layers={cfg.model.layers} hidden={cfg.model.hidden} capacity={kv.capacity} "
          f"block={kv.block} unit={kv.unit} bus={8 * beat} bits memory={args.memory}; prefill of {args.prompt} "
          f"tokens: {results[0].cycles} cycles")
    print(" step  position  cache_len   cycles  bytes_read  bytes_written")
    cycles, moved = [], []
    for i, (a, r) in enumerate(zip(starts, results[1:])):
        rd = (r.stats["rd_beats"] - prev["rd_beats"]) * beat
        wr = (r.stats["wr_beats"] - prev["wr_beats"]) * beat
        prev = r.stats
        cycles.append(r.cycles)
        moved.append(rd + wr)
        print(f"{i:5d}  {args.prompt + i:8d}  {a:9d}  {r.cycles:7d}  {rd:10d}  {wr:13d}")
    mean_cycles, mean_bytes = sum(cycles) / len(cycles), sum(moved) / len(moved)
    mhz = cfg.target.clock_mhz
    print(f"decode: tokens/s={mhz * 1e6 / mean_cycles:.1f} bytes_per_token={mean_bytes:.0f} "
          f"bus_fraction={mean_bytes / beat / mean_cycles:.3f} (at the config's {mhz:g} MHz, not a routed clock)")
    step = decode_step(cfg)
    error = mean_cycles / (step.cycles + step.layernorm)
    print(f"model: cycles={step.cycles + step.layernorm} (bound {step.cycles} + LayerNorm {step.layernorm}) "
          f"bytes={step.bytes} measured/model: cycles {error:.3f} bytes {mean_bytes / step.bytes:.3f}")
    traffic = decode_traffic(cfg, args.prompt + (args.steps - 1) / 2)
    need = sum(traffic.values())
    print(f"minimum: bytes_per_token={need:.0f} (weights {traffic['weights']}, kv "
          f"{traffic['kv_read'] + traffic['kv_written']:.0f}, at a cache of {args.prompt + (args.steps - 1) / 2:g}) "
          f"measured/minimum={mean_bytes / need:.2f}")
    far_step, far_plan = decode_step(far), plan(far)
    far_cycles = (far_step.cycles + far_step.layernorm) * error
    print(f"extrapolated: seq_len={args.extrapolate} (plan: {far_plan.mode}, block {far_plan.block}, "
          f"{far_plan.bram36:g} BRAM36) cycles={far_cycles:.0f} (model x {error:.3f}) bytes={far_step.bytes} "
          f"tokens/s={mhz * 1e6 / far_cycles:.1f} bus_fraction={far_step.bytes / beat / far_cycles:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
