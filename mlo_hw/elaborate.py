"""``python -m mlo_hw.elaborate --config CONFIG [-o DIR]``: RTL, weight image, manifest, register map, report.

Writes into ``DIR`` (default ``build/<config name>/``): ``mlo_engine.v`` (the layer engine's plain
Verilog top level ``mlo_engine``: ``aclk``, ``aresetn``, ``m_axi_*``, ``s_axil_*``, ``irq``) and
``files.f`` (its file list), ``weights.bin`` and ``manifest.json`` (the DRAM weight image),
``regs.json`` and ``mlo_hw_regs.h`` (the register map), ``runtime.json`` (the config and the scales of
the int16 input and output: what the host runtime, :mod:`mlo_hw.runtime`, reads besides those),
``golden_input.bin``/``golden_output.bin`` (a test vector), ``report.md``. The build is written into a temporary folder beside ``DIR`` and renamed
to ``DIR`` once complete; an existing ``DIR`` is replaced only then, and only when it is empty or an
earlier build (a bad config or argument exits with status 2 and one line, see :mod:`mlo_hw.cli`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .model import numerics as nx
from .cli import ArgumentParser, command, folder, staged_folder
from .config import load_config
from .folding import format_search, search_of
from .perf import layer_bound, matrix_costs
from .plan import format_plan, plan
from .model.quantize import build_model, dram_bytes, random_inputs, run_int
from .model.weight_image import layout, pack_image, write_manifest
from .runtime.build import write_runtime_json

__all__ = ["main", "report", "write_build", "BUILD_MARKS"]

BUILD_MARKS = ("manifest.json", "mlo_engine.v")     # files that show a folder holds an earlier build


def report(cfg, rtl_note: str) -> str:
    lay = layout(cfg)
    m, f = cfg.model, cfg.folding
    lines = [f"# mlo_hw report: {cfg.name}", "",
             f"Model: {f'{m.encoder_layers} encoder layers, then {m.layers} decoder layers with cross-attention' if cfg.seq2seq else f'{m.layers} layers'}, "
             f"hidden {m.hidden}, {m.heads} heads, intermediate {m.intermediate}, "
             f"seq {m.seq_len} (padded to {cfg.seq_padded}), "
             f"{'causal self-attention (row i attends keys 0..i)' if m.causal else 'bidirectional self-attention'}.  ",
             f"Numerics: int{cfg.numerics.weight_bits} weights, int{cfg.numerics.act_bits} matrix inputs, "
             f"int{nx.RES_BITS} residual stream (DRAM input and output).  ",
             f"Folding: PE {f.pe} x SIMD {f.simd} = {cfg.mac_lanes} MAC lanes, {f.tile_rows} rows per weight tile, "
             f"{f.ln_lanes} LayerNorm lane{'s' if f.ln_lanes > 1 else ''} of {f.ln_width} element{'s' if f.ln_width > 1 else ''} a cycle"
             f"{' (chosen by folding: auto)' if search_of(cfg) else ''}.  ",
             f"Memory: AXI {cfg.memory.axi_data_bits}-bit, bursts up to {cfg.memory.max_burst_beats} beats.  ",
             f"Target: {cfg.target.part} ({cfg.target.board}) at {cfg.target.clock_mhz:g} MHz.", "",
             f"RTL: {rtl_note}", ""]
    search = format_search(cfg)
    if search:
        lines += ["## Folding (`folding: auto`)", "", *search, ""]
    lines += ["## Weight image", "",
             f"Per layer {lay.layer_bytes} bytes, stride {lay.stride} bytes, total {lay.total_bytes} bytes.", "",
             "| section | offset | bytes | tiles | tile bytes |", "|---|---:|---:|---:|---:|"]
    for s in lay.sections:
        lines.append(f"| {s.name} | {s.offset} | {s.bytes} | {s.tiles or ''} | {s.tile_bytes or ''} |")
    lines += ["", "## Memory plan (mlo_hw.plan)", "",
              "What stays on chip, what lives in DRAM, the DRAM traffic and the cycle bound counting every DRAM "
              "byte; BRAM36 are counted by width and depth (a wide memory needs block RAMs side by side).", ""]
    lines += format_plan(plan(cfg))
    lines += ["", "## Analytical cycle bound per layer, all on chip", "",
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


def write_build(cfg, out: Path, model=None):
    """Write the RTL, register map, weight image, manifest, runtime description, test vector and report of
    ``cfg`` into ``out``; ``model``: the quantized model to put in the image (default: the config's own,
    ``build_model``)."""
    from amaranth.back import verilog
    from .hw.layer_engine import engine_top
    from .hw.regs import write_register_map
    if model is None:
        _, model = build_model(cfg)
    if cfg.seq2seq:
        _write_seq2seq_vectors(cfg, out, model)
    elif cfg.weights.source == "onnx":      # the model's own inputs through its embeddings
        from .frontend.host import onnx_inputs
        x, mask = onnx_inputs(cfg, np.random.default_rng(cfg.weights.seed + 1), 1)[0]
    else:
        x, mask = random_inputs(cfg, np.random.default_rng(cfg.weights.seed + 1), 1)[0]
    if not cfg.seq2seq:
        x_int = model.quantize_input(x)
        y = run_int(model, x_int, mask, cfg)
        (out / "golden_input.bin").write_bytes(dram_bytes(x_int))
        (out / "golden_output.bin").write_bytes(dram_bytes(y))
        write_runtime_json(out, cfg, model.input_scale, model.output_scale)
    (out / "mlo_engine.v").write_text(verilog.convert(engine_top(cfg), name="mlo_engine", emit_src=False))
    (out / "files.f").write_text("mlo_engine.v\n")
    write_register_map(out, cfg)
    (out / "weights.bin").write_bytes(pack_image(cfg, model.layers))
    write_manifest(out / "manifest.json", cfg)
    rtl_note = ("mlo_engine.v (top level `mlo_engine`: aclk, aresetn, m_axi_*, s_axil_*, irq), "
                "file list files.f, register map regs.json / mlo_hw_regs.h.")
    (out / "report.md").write_text(report(cfg, rtl_note))


def _write_seq2seq_vectors(cfg, out: Path, model):
    """An encoder-decoder's test vector (``docs/seq2seq.md``): ``golden_input.bin`` the encoder's input (all tokens),
    ``golden_memory.bin`` its output (the memory), ``golden_decoder_input.bin`` and ``golden_output.bin`` the
    decoder's prefill over every token; ``runtime.json`` with the decoder's input and the memory's scales."""
    rng = np.random.default_rng(cfg.weights.seed + 1)
    s, h = cfg.model.seq_len, cfg.model.hidden
    between = None
    if cfg.weights.source == "onnx":      # the model's own inputs through its embeddings
        from .frontend.host import seq2seq_vectors
        x, y, between = seq2seq_vectors(cfg, rng)
    else:
        x, y = rng.normal(0.0, 1.0, (s, h)), rng.normal(0.0, 1.0, (s, h))
    keys = np.ones(s, bool)
    x_int, y_int = model.quantize_input(x), model.quantize(y, model.decoder_scale)
    memory = model.memory(model.encode(x_int, keys), between)     # T5: the host's final norm, requantized
    y_out = model.decode(y_int, nx.attention_mask(keys, True), memory, keys)
    for name, t in (("golden_input", x_int), ("golden_memory", memory), ("golden_decoder_input", y_int),
                    ("golden_output", y_out)):
        (out / f"{name}.bin").write_bytes(dram_bytes(t))
    write_runtime_json(out, cfg, model.input_scale, model.output_scale, decoder_input_scale=model.decoder_scale,
                       memory_scale=model.memory_scale, encoder_output_scale=model.encoder_out_scale,
                       memory_on_host=float(model.memory_on_host))


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m mlo_hw.elaborate", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a YAML file, or the name of a shipped config (bert_tiny)")
    ap.add_argument("-o", "--output", type=folder, help="output folder (default build/<config name>)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    cfg = load_config(args.config)       # refused before any folder is made
    out = args.output or Path("build") / cfg.name
    with staged_folder(out, "-o", BUILD_MARKS) as tmp:
        write_build(cfg, tmp)
    print(f"{cfg.name}: wrote {out}/mlo_engine.v, files.f, weights.bin, manifest.json, regs.json, "
          f"mlo_hw_regs.h, runtime.json, report.md ({time.perf_counter() - t0:.2f} s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
