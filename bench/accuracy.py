"""Distance of the integer golden model to the float reference, per layer.

    python bench/accuracy.py [--config bert_tiny] [--inputs N]

Each layer's dequantized integer output is compared with the float reference's output of the same
layer (both run from the same float input); cosine similarity per token over the valid positions.
Last line: ``accuracy: min_cos=A mean_cos=B``. An encoder-decoder's layers are the encoder's, then the decoder's
(on a random decoder input, with the memory each model made).
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


def _traces(cfg, layers, model, x, mask, rng):
    """Per layer the float and the integer model's intermediates on ``x``, and the rows compared (the valid ones)."""
    m = cfg.model
    ftr, itr = [], []
    float_stack(x, layers, attention_mask(mask, m.causal), m.heads, m.layernorm_eps, ftr, norm=m.norm, gelu=m.gelu,
                rms=m.rmsnorm)
    run_int(model, model.quantize_input(x), mask, cfg, itr)
    return ftr, itr, [mask] * len(ftr)


def _seq2seq_traces(cfg, model, q, x, mask, rng):
    """An encoder-decoder (``model``: the float Seq2Seq, ``q``: its IntSeq2Seq): the encoder's layers on ``x``, then the
    decoder's on a random input of every token with the memory each model made (the float one's, the integer one's)."""
    from mlo_hw.frontend.seq2seq import Scores
    from mlo_hw.model.reference import Memory
    s = cfg.model.seq_len
    enc, dec = Scores(np.broadcast_to(mask, (s, s)), None), Scores(attention_mask(np.ones(s, bool), True), None)
    y = rng.normal(0.0, 1.0, (s, cfg.model.hidden))
    fe, fd, ie, idd = [], [], [], []
    f_mem = model.encode(x, enc, fe)
    model.decode(y, dec, Memory(f_mem, enc.mask), fd)
    i_mem = q.encode(q.quantize_input(x), enc.mask, ie)
    q.decode(q.quantize(y, q.decoder_scale), dec.mask, i_mem, enc.mask, idd)
    return fe + fd, ie + idd, [mask] * len(fe) + [np.ones(s, bool)] * len(fd)


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="bench/accuracy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bert_tiny", help="a YAML file, or the name of a shipped config")
    ap.add_argument("--inputs", type=positive_int, default=4, help="evaluation inputs (not the calibration ones)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    layers, model = build_model(cfg)
    rng = np.random.default_rng(cfg.weights.seed + 1000)
    n = cfg.image_layers
    per_layer = [[] for _ in range(n)]
    maxerr = [0.0 for _ in range(n)]
    t_int = 0.0
    for x, mask in random_inputs(cfg, rng, args.inputs):
        t0 = time.perf_counter()
        ftr, itr, rows = (_seq2seq_traces if cfg.seq2seq else _traces)(cfg, layers, model, x, mask, rng)
        t_int += time.perf_counter() - t0
        for l, (f, i, keep) in enumerate(zip(ftr, itr, rows)):
            deq = i["out"] * model.layers[l].scales["out"]
            per_layer[l].append(cosines(deq[keep], f["out"][keep]))
            maxerr[l] = max(maxerr[l], float(np.abs(deq - f["out"])[keep].max()))
    print(f"config {cfg.name}: {n} layers{' (encoder, then decoder)' if cfg.seq2seq else ''}, hidden {cfg.model.hidden}, seq {cfg.model.seq_len}, "
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
