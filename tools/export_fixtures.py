"""Export the small ONNX fixtures under ``tests/fixtures/onnx/`` (needs torch and transformers).

    .venv/bin/pip install torch==2.13.0 transformers onnxscript
    .venv/bin/python tools/export_fixtures.py [--out tests/fixtures/onnx] [--only NAME ...]

Every fixture is a tiny randomly initialised Hugging Face model (hidden 32, 2 heads (LLaMA: 4 query and
2 key-value heads), vocab 96), so
each file stays far below 1 MB and the default test suite needs neither torch nor transformers.
Parameters are randomised (biases, LayerNorm affine too) so every layer's initializers differ and the
exporter's optimizer cannot merge them, except in ``bert_merged`` which keeps Hugging Face's fresh
initialisation (zero biases, unit LayerNorm weights) on purpose: there the optimizer merges identical
initializers across layers and the front end must still find every layer's weights by role.
Next to each ``NAME.onnx`` goes ``NAME.json``: how it was made (model class, config, exporter).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
import zlib
from pathlib import Path

import onnx
import torch
import transformers as tf

VOCAB, HIDDEN, HEADS, INTER, POS, SEQ = 96, 32, 2, 64, 64, 8


def _randomize(model, seed: int):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def _bert_like(cls, config_cls, layers, attn="eager", pooler=False, **extra):
    cfg = config_cls(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=layers, num_attention_heads=HEADS,
                     intermediate_size=INTER, max_position_embeddings=POS, attn_implementation=attn, **extra)
    return cls(cfg, add_pooling_layer=pooler)


def _distilbert(layers):
    cfg = tf.DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=layers, n_heads=HEADS, hidden_dim=INTER,
                              max_position_embeddings=POS, attn_implementation="eager")
    return tf.DistilBertModel(cfg)


def _t5(layers):
    cfg = tf.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=INTER, num_layers=layers,
                      num_decoder_layers=layers, num_heads=HEADS, use_cache=False, attn_implementation="eager",
                      decoder_start_token_id=0)
    return tf.T5Model(cfg)


def _gpt2(layers):
    cfg = tf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=layers, n_head=HEADS, n_inner=INTER,
                        n_positions=POS, use_cache=False, attn_implementation="eager")
    return tf.GPT2Model(cfg)


def _llama(layers):
    cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=POS, use_cache=False,
                         attn_implementation="eager")
    return tf.LlamaModel(cfg)


def _bart(layers):
    cfg = tf.BartConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=layers, decoder_layers=layers,
                        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=INTER,
                        decoder_ffn_dim=INTER, max_position_embeddings=POS, use_cache=False,
                        attn_implementation="eager")
    return tf.BartModel(cfg)


# name: (builder, randomize, dynamo exporter, encoder-decoder, dynamic sequence length[, export options])
FIXTURES = {
    "bert":        (lambda: _bert_like(tf.BertModel, tf.BertConfig, 3), True, True, False, True),
    "bert_merged": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2), False, True, False, True),
    # static shapes + SDPA attention: the exporter puts the mask preparation into layer 0's scope
    "bert_sdpa":   (lambda: _bert_like(tf.BertModel, tf.BertConfig, 3, attn="sdpa"), True, True, False, False),
    # a tail after the layer stack (BERT's pooler) for the host to run on the engine's output
    "bert_pooler": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2, pooler=True), True, True, False, True),
    "roberta":     (lambda: _bert_like(tf.RobertaModel, tf.RobertaConfig, 2, pad_token_id=1), True, True, False,
                    True),
    "distilbert":  (lambda: _distilbert(2), True, True, False, True),
    "bert_legacy": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2), True, False, False, True),
    # legacy exporter, static shapes: shape inference leaves layer 0's batch dim symbolic, layer 1's concrete
    "bert_legacy_static": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2), True, False, False, False),
    # the unoptimised dynamo graph: Identity, CastLike, Constant, eval-mode Dropout, weight Transposes
    "bert_noopt":  (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2), True, True, False, True,
                    {"optimize": False}),
    "bert_noopt_sdpa": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2, attn="sdpa"), True, True, False, True,
                        {"optimize": False}),   # scores scaled by CastLike -> Sqrt -> Mul on Q and on K
    # decoders: causal self-attention (refused); BERT's structure with a causal mask, and GPT-2 (pre-LN, fused QKV)
    "bert_decoder": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2, is_decoder=True,
                                                  use_cache=False), True, True, False, True),
    # GPT2Model's second positional parameter is the cache: its inputs are passed by keyword
    # the legacy exporter over static shapes folds the causal comparison into constants
    "bert_decoder_legacy": (lambda: _bert_like(tf.BertModel, tf.BertConfig, 2, is_decoder=True, use_cache=False),
                            True, False, False, False),
    "gpt2":        (lambda: _gpt2(2), True, True, False, True, {"by_keyword": True}),
    "gpt2_noopt":  (lambda: _gpt2(2), True, True, False, True, {"by_keyword": True, "optimize": False}),
    # a current decoder: RMSNorm, rotary positions, grouped-query attention (4 query, 2 KV heads), SwiGLU
    "llama":       (lambda: _llama(2), True, True, False, True, {"by_keyword": True}),
    "t5":          (lambda: _t5(2), True, True, True, True),
    "bart":        (lambda: _bart(2), True, True, True, True),
}


class _Wrapped(torch.nn.Module):
    """Positional inputs for the legacy TorchScript tracer (its scopes gain a ``model.`` prefix)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


KEEP_METADATA = ("pkg.torch.onnx.name_scopes", "pkg.torch.onnx.class_hierarchy")


def _strip_metadata(path: Path):
    """Drop the exporter's stack traces and FX node dumps (most of the file) and keep the scopes."""
    model = onnx.load(str(path))
    for node in model.graph.node:
        keep = [(p.key, p.value) for p in node.metadata_props if p.key in KEEP_METADATA]
        del node.metadata_props[:]
        for k, v in keep:
            node.metadata_props.add(key=k, value=v)
    onnx.save(model, str(path))


def export(name: str, out: Path):
    build, randomize, dynamo, enc_dec, dynamic, *opts = FIXTURES[name]
    opts = dict(opts[0]) if opts else {}
    by_keyword = opts.pop("by_keyword", False)
    torch.manual_seed(0)
    model = build().eval()
    if randomize:
        _randomize(model, seed=zlib.crc32(name.encode()))
    ids = torch.randint(3, VOCAB, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.long)
    args, kwargs = (ids,), {"attention_mask": mask}
    names = ["input_ids", "attention_mask"]
    if by_keyword:
        args, kwargs = (), {"input_ids": ids, **kwargs}
    outputs = ["last_hidden_state", "pooler_output"] if name == "bert_pooler" else ["last_hidden_state"]
    if enc_dec:
        kwargs["decoder_input_ids"] = torch.randint(3, VOCAB, (1, SEQ // 2))
        names.append("decoder_input_ids")
    axes = {n: {1: "seq" if n != "decoder_input_ids" else "dec_seq"} for n in names} if dynamic else None
    path = out / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            if by_keyword:   # dynamic_axes would be bound to the parameters by position: name them
                seq = torch.export.Dim("seq", max=POS)
                opts["dynamic_shapes"] = {n: {1: seq} for n in names} if dynamic else None
            else:
                opts["dynamic_axes"] = axes
            prog = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, input_names=names,
                                     output_names=outputs, opset_version=18, **opts)
            prog.save(str(path))
        else:
            torch.onnx.export(_Wrapped(model), (ids, mask), str(path), dynamo=False, input_names=names,
                              output_names=["last_hidden_state"], opset_version=17, dynamic_axes=axes)
    _strip_metadata(path)
    meta = {"model": type(model).__name__, "exporter": "dynamo" if dynamo else "legacy",
            "options": opts, "randomized": randomize, "seq_len": SEQ if not dynamic else "dynamic",
            "torch": torch.__version__, "transformers": tf.__version__, "config": model.config.to_diff_dict()}
    (out / f"{name}.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")
    print(f"{path}: {path.stat().st_size} bytes")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/onnx"))
    ap.add_argument("--only", nargs="*", choices=sorted(FIXTURES))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or FIXTURES:
        export(name, out)


if __name__ == "__main__":
    sys.exit(main())
