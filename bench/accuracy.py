"""Distance of the integer golden model to the float reference, per layer.

    python bench/accuracy.py [--config bert_tiny] [--inputs N]

Each layer's dequantized integer output is compared with the float reference's output of the same
layer (both run from the same float input); cosine similarity per token over the valid positions.
Last line: ``accuracy: min_cos=A mean_cos=B``.
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlo_hw.cli import ArgumentParser, command, positive_int  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.model.quantize import build_model, random_inputs, run_int  # noqa: E402
from mlo_hw.model.reference import float_stack  # noqa: E402
from mlo_hw.model.numerics import attention_mask  # noqa: E402


def cosines(a, b):
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    return (a * b).sum(-1) / np.maximum(na * nb, 1e-30)


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="bench/accuracy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bert_tiny", help="a YAML file, or the name of a shipped config")
    ap.add_argument("--inputs", type=positive_int, default=4, help="evaluation inputs (not the calibration ones)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    layers, model = build_model(cfg)
    rng = np.random.default_rng(cfg.weights.seed + 1000)
    per_layer = [[] for _ in layers]
    maxerr = [0.0 for _ in layers]
    t_int = 0.0
    for x, mask in random_inputs(cfg, rng, args.inputs):
        ftr, itr = [], []
        float_stack(x, layers, attention_mask(mask, cfg.model.causal), cfg.model.heads, cfg.model.layernorm_eps, ftr,
                    norm=cfg.model.norm, gelu=cfg.model.gelu)
        t0 = time.perf_counter()
        run_int(model, model.quantize_input(x), mask, cfg, itr)
        t_int += time.perf_counter() - t0
        for l, (f, i) in enumerate(zip(ftr, itr)):
            deq = i["out"] * model.layers[l].scales["out"]
            per_layer[l].append(cosines(deq[mask], f["out"][mask]))
            maxerr[l] = max(maxerr[l], float(np.abs(deq - f["out"])[mask].max()))
    print(f"config {cfg.name}: {cfg.model.layers} layers, hidden {cfg.model.hidden}, seq {cfg.model.seq_len}, "
          f"{args.inputs} inputs; integer model {t_int / args.inputs * 1000:.0f} ms per input")
    allc = []
    for l, cs in enumerate(per_layer):
        c = np.concatenate(cs)
        allc.append(c)
        print(f"layer {l}: min_cos={c.min():.4f} mean_cos={c.mean():.4f} max_abs_err={maxerr[l]:.4f}")
    c = np.concatenate(allc)
    print(f"accuracy: min_cos={c.min():.4f} mean_cos={c.mean():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
