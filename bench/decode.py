"""Decode throughput of the DRAM-tiled engine RTL: a prefill, then greedy one-token steps through the KV cache.

    python bench/decode.py --config gpt2_tiny [--prompt N] [--steps N] [--memory ideal|ddr3] [--seed N]

Runs in the full-stack harness (sim/harness.py) a prefill of ``--prompt`` random tokens, then ``--steps`` greedy
decode steps (sim/decode_run.py: CACHE_LEN the position rounded down to lcm(pe, simd), docs/decode.md), and checks
every step's output bit for bit against the golden model's prefill + decode_step, the generated tokens against the
golden model's, and the KV cache left in DRAM after the last step. Prints per step the cycles and the bytes moved
over the AXI port (the DRAM model's read and write beats), then

``decode: tokens/s=T bytes_per_token=B bus_fraction=F`` at the config's clock (not a routed one): the mean step,
and the share of the step's cycles with a beat on the port (reads and writes are separate AXI channels, so the
peak is one beat a cycle on each; the fraction counts both against one, as bench/cycles.py does);
``model: bytes_per_token=M (weights W, kv K)``: ``mlo_hw.model.decode.decode_traffic`` at the mean cache length,
the bytes a step must move; ``measured/model`` says how much more the engine moves (it streams every head's
K_h and V_h^T over the whole capacity, and computes a whole block of rows: docs/decode.md, "Not done").
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlo_hw.cli import ArgumentParser, BadInput, command, positive_int  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.model.decode import decode_traffic  # noqa: E402
from mlo_hw.model.quantize import build_model  # noqa: E402
from mlo_hw.plan import kv_cache  # noqa: E402
from sim.decode_run import check_cache, engine_runs, golden_generation  # noqa: E402
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
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    kv = kv_cache(cfg)
    if kv is None:
        raise BadInput(f"--config: {cfg.name} has no KV cache (it needs model.causal: true and activations in DRAM; "
                       f"python -m mlo_hw.plan --config {args.config})")
    if args.prompt + args.steps > min(kv.capacity, cfg.model.seq_len):
        raise BadInput(f"--prompt/--steps: {args.prompt} + {args.steps} tokens exceed the cache's "
                       f"{min(kv.capacity, cfg.model.seq_len)} positions")
    model = build_model(cfg)[1]
    gen = golden_generation(cfg, model, args.prompt, args.steps, np.random.default_rng(args.seed))
    runs, starts = engine_runs(cfg, gen, args.prompt, dump_last=True)
    results = EngineSim(cfg, model).run_many(runs, memory=args.memory, seed=args.seed)
    beat = cfg.axi_data_bytes
    prev = results[0].stats
    for i, r in enumerate(results):
        if not r.irq or r.error_code:
            raise AssertionError(f"run {i}: STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}")
    if not (results[0].output[:args.prompt] == gen.outputs[0]).all():
        raise AssertionError("the prefill's output differs from the golden model")
    print(f"config {cfg.name}: layers={cfg.model.layers} hidden={cfg.model.hidden} capacity={kv.capacity} "
          f"block={kv.block} unit={kv.unit} bus={8 * beat} bits memory={args.memory}; prefill of {args.prompt} "
          f"tokens: {results[0].cycles} cycles")
    print(" step  position  cache_len   cycles  bytes_read  bytes_written")
    cycles, moved = [], []
    for i, (a, r) in enumerate(zip(starts, results[1:])):
        n = args.prompt + i
        if not (r.output[n - a] == gen.outputs[i + 1][0]).all():
            raise AssertionError(f"step {i} (position {n}): the output differs from the golden model")
        if gen.next_token(r.output[n - a]) != gen.next_token(gen.outputs[i + 1][0]):
            raise AssertionError(f"step {i}: the generated token differs")
        rd = (r.stats["rd_beats"] - prev["rd_beats"]) * beat
        wr = (r.stats["wr_beats"] - prev["wr_beats"]) * beat
        prev = r.stats
        cycles.append(r.cycles)
        moved.append(rd + wr)
        print(f"{i:5d}  {n:8d}  {a:9d}  {r.cycles:7d}  {rd:10d}  {wr:13d}")
    check_cache(cfg, results[-1].scratch, gen.cache)
    mean_cycles, mean_bytes = sum(cycles) / len(cycles), sum(moved) / len(moved)
    traffic = decode_traffic(cfg, args.prompt + (args.steps - 1) / 2)
    model_bytes = sum(traffic.values())
    mhz = cfg.target.clock_mhz
    print(f"decode: tokens/s={mhz * 1e6 / mean_cycles:.1f} bytes_per_token={mean_bytes:.0f} "
          f"bus_fraction={mean_bytes / beat / mean_cycles:.3f} (at the config's {mhz:g} MHz, not a routed clock)")
    print(f"model: bytes_per_token={model_bytes:.0f} (weights {traffic['weights']}, kv "
          f"{traffic['kv_read'] + traffic['kv_written']:.0f}) measured/model={mean_bytes / model_bytes:.2f}; at the "
          f"model's bytes the step would take {model_bytes / beat:.0f} cycles at one beat a cycle, the measured "
          f"{mean_cycles:.0f} are {mean_cycles * beat / model_bytes:.2f}x that")
    return 0


if __name__ == "__main__":
    sys.exit(main())
