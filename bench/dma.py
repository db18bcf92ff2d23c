"""Weight streaming bandwidth: ``python bench/dma.py [--config CONFIG]``.

Builds the memory system (loop controller + AXI read DMA + ping-pong tile buffers) of the config,
streams one layer's weights from an always-ready AXI memory (cocotbext-axi AxiRamRead under
Verilator) with a compute side that frees each tile bank as soon as it is full, and prints the
achieved bandwidth as a fraction of the bus peak (one ``axi_data_bits`` beat per cycle), counted
from START to DONE. The last line is ``dma: bytes=N cycles=C fraction=F`` (target F >= 0.95).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlo_hw.cli import ArgumentParser, UsageError, command  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.hw.loop_ctrl import WeightStreamer, streamer_tb_params  # noqa: E402
from mlo_hw.model.quantize import build_model  # noqa: E402
from mlo_hw.model.weight_image import layout, pack_image  # noqa: E402
from sim.runner import simulate, to_verilog  # noqa: E402


def address(text: str) -> int:
    return int(text, 0)         # argparse: "invalid address value: ..."


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="bench/dma.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bert_tiny", help="a YAML file or a shipped config name")
    ap.add_argument("--base", type=address, default=0x10000 - 64,
                    help="DRAM byte address of the weight image, a multiple of the AXI beat "
                         "(default just below a 4 KiB page)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if cfg.seq2seq:
        raise UsageError(f"--config: {cfg.name} is an encoder-decoder (model.encoder_layers); this bench streams one "
                         "layer's sections in image order, the on-chip engine's program, which an encoder-decoder does "
                         "not have: bench/cycles.py reports its weight stalls")
    lay = layout(cfg)
    if args.base < 0 or args.base % cfg.axi_data_bytes:
        raise UsageError(f"--base: {args.base:#x} is not a non-negative multiple of the {cfg.axi_data_bytes}-byte "
                         "AXI beat")
    if args.base + lay.layer_bytes > 1 << cfg.memory.axi_addr_bits:
        raise UsageError(f"--base: {args.base:#x} + {lay.layer_bytes} bytes of a layer exceeds the "
                         f"{cfg.memory.axi_addr_bits}-bit address space")
    _, model = build_model(cfg)
    with tempfile.TemporaryDirectory(prefix="mlo_dma_") as d:
        image, result = Path(d) / "weights.bin", Path(d) / "result.json"
        image.write_bytes(pack_image(cfg, model.layers))
        params = streamer_tb_params(cfg, image)
        params.update(base=args.base, result_path=str(result))
        top = "dma_bench_" + cfg.name.replace(".", "_").replace("-", "_")    # a Verilog identifier
        simulate(to_verilog(WeightStreamer(cfg), top), top, "tb_dma_bench", params)
        r = json.loads(result.read_text())
    if r["bytes"] != lay.layer_bytes:
        print(f"dma: read {r['bytes']} bytes, the layer has {lay.layer_bytes}", file=sys.stderr)
        return 1
    fraction = r["bytes"] / (r["cycles"] * cfg.axi_data_bytes)
    print(f"config {cfg.name}: AXI {cfg.memory.axi_data_bits}-bit, bursts <= {cfg.memory.max_burst_beats} beats, "
          f"peak {cfg.axi_data_bytes} B/cycle = {cfg.axi_data_bytes * cfg.target.clock_mhz:.0f} MB/s "
          f"at {cfg.target.clock_mhz:g} MHz")
    print(f"dma: bytes={r['bytes']} cycles={r['cycles']} fraction={fraction:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
