"""``python -m mlo_hw.elaborate --config CONFIG [-o DIR]``: weight image, manifest, report (and RTL).

Writes into ``DIR`` (default ``build/<config name>/``): ``weights.bin`` and ``manifest.json`` (the
DRAM weight image), ``golden_input.bin``/``golden_output.bin`` (a test vector), ``report.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .config import PARTS, ConfigError, load_config
from .perf import layer_bound, matrix_costs, onchip_plan
from .quantize import build_model, random_inputs, run_int
from .weight_image import layout, pack_image, write_manifest

__all__ = ["main", "report"]


def report(cfg, rtl_note: str) -> str:
    lay = layout(cfg)
    m, f = cfg.model, cfg.folding
    lines = [f"# mlo_hw report: {cfg.name}", "",
             f"Model: {m.layers} layers, hidden {m.hidden}, {m.heads} heads, intermediate {m.intermediate}, "
             f"seq {m.seq_len} (padded to {cfg.seq_padded}).  ",
             f"Numerics: int{cfg.numerics.weight_bits} weights, int{cfg.numerics.act_bits} activations.  ",
             f"Folding: PE {f.pe} x SIMD {f.simd} = {cfg.mac_lanes} MAC lanes, {f.tile_rows} rows per weight tile.  ",
             f"Memory: AXI {cfg.memory.axi_data_bits}-bit, bursts up to {cfg.memory.max_burst_beats} beats.  ",
             f"Target: {cfg.target.part} ({cfg.target.board}) at {cfg.target.clock_mhz:g} MHz.", "",
             f"RTL: {rtl_note}", "",
             "## Weight image", "",
             f"Per layer {lay.layer_bytes} bytes, stride {lay.stride} bytes, total {lay.total_bytes} bytes.", "",
             "| section | offset | bytes | tiles | tile bytes |", "|---|---:|---:|---:|---:|"]
    for s in lay.sections:
        lines.append(f"| {s.name} | {s.offset} | {s.bytes} | {s.tiles or ''} | {s.tile_bytes or ''} |")
    plan = onchip_plan(cfg)
    total = sum(plan.values())
    avail = PARTS[cfg.part_family]["BRAM36"] * 4608
    lines += ["", "## On-chip memory plan", "", "| buffer | bytes |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in plan.items()]
    lines += [f"| **total** | **{total}** ({100 * total / avail:.0f}% of {cfg.part_family} block RAM, {avail} bytes) |"]
    lines += ["", "## Analytical cycle bound per layer", "",
              "Per tile max(compute, DMA) cycles, summed over tiles; attention products are compute only.", "",
              "| matrix | tiles | compute/tile | DMA/tile | bound | bytes/cycle needed |", "|---|---:|---:|---:|---:|---:|"]
    for c in matrix_costs(cfg):
        sec_bytes = lay[c.matrix].bytes if not c.matrix.startswith("attention") else 0
        bw = sec_bytes / max(c.tiles * c.compute, 1)
        lines.append(f"| {c.matrix} | {c.tiles} | {c.compute} | {c.dma} | {c.bound} | {bw:.2f} |")
    per_layer = layer_bound(cfg)
    mhz = cfg.target.clock_mhz
    lines += ["", f"Per layer: {per_layer} cycles; {m.layers} layers: {per_layer * m.layers} cycles "
              f"= {per_layer * m.layers / mhz / 1000:.3f} ms at {mhz:g} MHz "
              f"(bus peak {cfg.axi_data_bytes * mhz:.0f} MB/s).", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlo_hw.elaborate", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (bert_tiny)")
    ap.add_argument("-o", "--output", help="output folder (default build/<config name>)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        cfg = load_config(args.config)
        out = Path(args.output or Path("build") / cfg.name)
        out.mkdir(parents=True, exist_ok=True)
        _, model = build_model(cfg)
        (out / "weights.bin").write_bytes(pack_image(cfg, model.layers))
        write_manifest(out / "manifest.json", cfg)
        if cfg.weights.source == "onnx":      # the model's own inputs through its embeddings
            from .frontend.host import onnx_inputs
            x, mask = onnx_inputs(cfg, np.random.default_rng(cfg.weights.seed + 1), 1)[0]
        else:
            x, mask = random_inputs(cfg, np.random.default_rng(cfg.weights.seed + 1), 1)[0]
        x_int = model.quantize_input(x)
        y = run_int(model, x_int, mask, cfg)
        (out / "golden_input.bin").write_bytes(x_int.astype(np.int8).tobytes())
        (out / "golden_output.bin").write_bytes(y.astype(np.int8).tobytes())
        rtl_note = "not generated yet: the layer engine (mlo_hw/layer_engine.py) does not exist in this version."
        (out / "report.md").write_text(report(cfg, rtl_note))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {e.filename or ''}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"{cfg.name}: wrote {out}/weights.bin, manifest.json, report.md "
          f"({time.perf_counter() - t0:.2f} s). {rtl_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
