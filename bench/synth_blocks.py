"""Synthesis figures of the compute blocks for ``docs/blocks.md``: one markdown table row per variant.

    .venv/bin/python bench/synth_blocks.py                 # every block
    .venv/bin/python bench/synth_blocks.py --block mvau    # one block

Each block is a function returning its variants as ``(label, component)`` pairs, plus optional
notes computed from the results; add a block by writing such a function and adding it to
:data:`BLOCKS`. Every variant is converted with ``sim.runner.to_verilog`` and synthesized with
``mlo_hw.synth.synth_verilog`` (yosys ``synth_xilinx -family xc7``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlo_hw.cli import ArgumentParser, command  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.synth import BLOCK_SYNTH_EXTRA, RESOURCE_KEYS, synth_verilog  # noqa: E402
from sim.runner import to_verilog  # noqa: E402


def mvau():
    """MVAU foldings: 1x1, 4x4 (the small config), 8x8 (bert_tiny), and 8x8 without DSP packing.

    DSPs per MAC lane are measured as the difference between the unpacked and the packed 8x8 build
    (both have the same requantization multipliers; unpacked is one multiplier per lane).
    """
    from mlo_hw.hw.mvau import MVAU, MVAUParams
    small, tiny = load_config("small"), load_config("bert_tiny")
    params = {
        "pe1 simd1 (small)": MVAUParams.from_config(small, pe=1, simd=1),
        "pe4 simd4 (small)": MVAUParams.from_config(small),
        "pe8 simd8 (bert_tiny)": MVAUParams.from_config(tiny),
        "pe8 simd8 (bert_tiny), unpacked": MVAUParams.from_config(tiny, pack_dsp=False),
    }
    variants = [(label, MVAU(p)) for label, p in params.items()]

    def notes(results):
        packed = results["pe8 simd8 (bert_tiny)"].used["DSP"]
        unpacked = results["pe8 simd8 (bert_tiny), unpacked"].used["DSP"]
        lanes = tiny.folding.pe * tiny.folding.simd
        mac = unpacked - packed            # unpacked has twice the MAC multipliers of packed
        return [f"8x8 MAC array: {mac} DSP48E1 for {lanes} MAC lanes = {mac / lanes:.2f} DSP per lane "
                f"(unpacked {unpacked} - packed {packed}); the other {packed - mac} DSPs are the "
                f"requantization multipliers (acc+bias 33 bit x mult 16 bit, 2 per shared requant lane: "
                f"{results['pe8 simd8 (bert_tiny)'].used['DSP'] - mac} for "
                f"{MVAUParams.from_config(tiny).requant_lanes} lane)."]
    return variants, notes


def layernorm():
    """Residual add + LayerNorm at H = 32 (small), 128 (bert_tiny) and 768 (BERT-base)."""
    from mlo_hw.hw.layernorm import LayerNorm
    variants = [("H=32 (small)", LayerNorm.from_config(load_config("small"))),
                ("H=128 (bert_tiny)", LayerNorm.from_config(load_config("bert_tiny"))),
                ("H=768 (BERT-base)", LayerNorm(hidden=768))]
    return variants, None


def softmax():
    """Softmax: one key a cycle at rows of 8 keys (small), 128 keys (bert_tiny) and 512 keys (BERT-base,
    head size 64); PE keys a cycle at the small config (4), bert_tiny (8) and minilm_l6 (16)."""
    from mlo_hw.hw.softmax import Softmax
    small, tiny, minilm = load_config("small"), load_config("bert_tiny"), load_config("minilm_l6")
    variants = [("8 keys, 21-bit scores (small)", Softmax.from_config(small)),
                ("128 keys, 23-bit scores (bert_tiny)", Softmax.from_config(tiny)),
                ("512 keys, 23-bit scores (BERT-base)", Softmax(row=512, score_bits=tiny.acc_bits(64)))]
    variants += [(f"{cfg.seq_padded} keys x {cfg.folding.pe} lanes ({cfg.name})",
                  Softmax.from_config(cfg, lanes=cfg.folding.pe)) for cfg in (small, tiny, minilm)]

    def notes(results):
        lines = []
        for label, comp in variants:
            lines.append(f"softmax {label}: {comp.slots} row slots, {comp.dividers} divider(s), "
                         f"first input to first output {comp.latency(comp.row, comp.lanes)} cycles.")
        return lines
    return variants, notes


def gelu():
    """GELU table with 4 lanes (small, PE=4), 8 lanes (bert_tiny, PE=8) and 16 lanes."""
    from mlo_hw.hw.gelu import GeluTable
    variants = [("4 lanes (small)", GeluTable.from_config(load_config("small"))),
                ("8 lanes (bert_tiny)", GeluTable.from_config(load_config("bert_tiny"))),
                ("16 lanes", GeluTable(lanes=16))]
    return variants, None


def layernorm_lanes():
    """The engine's LayerNorm lanes (``folding.ln_lanes``) at 1, 2 and 4 lanes: bert_tiny (H = 128, SIMD 8) and
    minilm_l6 (H = 384, SIMD 32); the note gives the cost of one lane (the 4-lane build minus the 2-lane one, halved)."""
    from mlo_hw.hw.engine.layernorm_lanes import LayerNormLanes
    cfgs = [load_config("bert_tiny"), load_config("minilm_l6")]
    variants = [(f"{n} lane{'s' if n > 1 else ''} ({cfg.name}, H={cfg.model.hidden}, SIMD {cfg.folding.simd})",
                 LayerNormLanes(cfg.model.hidden, cfg.folding.simd, cfg.seq_padded, n)) for cfg in cfgs for n in (1, 2, 4)]

    def notes(results):
        lines = []
        for cfg in cfgs:
            two, four = (next(r for label, r in results.items() if label.startswith(f"{n} lanes ({cfg.name},"))
                         for n in (2, 4))
            per = {k: (four.used[k] - two.used[k]) / 2 for k in RESOURCE_KEYS}
            lines.append(f"layernorm_lanes {cfg.name}: one lane costs " + ", ".join(f"{k} {v:g}" for k, v in per.items())
                         + " ((4 lanes - 2 lanes) / 2).")
        return lines
    return variants, notes


BLOCKS = {
    "mvau": mvau,
    "layernorm": layernorm,
    "layernorm_lanes": layernorm_lanes,
    "softmax": softmax,
    "gelu": gelu,
}


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="bench/synth_blocks.py", description=__doc__.splitlines()[0])
    ap.add_argument("--block", action="append", choices=sorted(BLOCKS), help="block(s) to synthesize")
    args = ap.parse_args(argv)
    names = args.block or list(BLOCKS)
    head = ["block", "variant", *RESOURCE_KEYS, "logic depth", "latches", "synth s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    extra = []
    for name in names:
        variants, notes = BLOCKS[name]()
        results = {}
        for label, comp in variants:
            top = f"{name}_top"
            t0 = time.time()
            res = synth_verilog(to_verilog(comp, top), top, extra=BLOCK_SYNTH_EXTRA.get(name, ""))
            results[label] = res
            used = res.used
            cells = [f"{used[k]:g}" for k in RESOURCE_KEYS]
            print(f"| {name} | {label} | " + " | ".join(cells)
                  + f" | {res.logic_depth} | {res.latches} | {time.time() - t0:.0f} |", flush=True)
        if notes:
            extra += notes(results)
    for line in extra:
        print(f"\n{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
