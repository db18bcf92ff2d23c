"""Encoder-decoder models (T5, BART) from ONNX: both layer groups as float layers, and the host around them.

An encoder-decoder export has two layer groups (:func:`mlo_hw.frontend.loop.find_groups`): the encoder stack and
the decoder stack, whose layers carry a causal self-attention and a *cross* attention reading the encoder's
output. :func:`seq2seq_model` turns them into :class:`Seq2Seq`: the float layers of each stack
(:class:`~mlo_hw.model.reference.FloatLayer`, a decoder layer's cross block in
:class:`~mlo_hw.model.reference.FloatCross`) and the layer kind (post-LN BART, pre-RMSNorm T5, the FFN's
activation, the norm's epsilon):

* each attention's constant score scaling (BART's 1/sqrt(d), T5's none) is folded into its Q weights, so
  every attention computes ``Q.K^T / sqrt(d)`` as the engine does;
* a decoder layer's norms in graph order are the self-attention's, the cross-attention's and the FFN's
  (``ln1``, ``lnx``, ``ln2``); T5's RMSNorm gains are the weight-sized constants of its Muls (``mul1`` ..);
  biases a model lacks are zeros.

:class:`Seq2SeqHost` runs the model in onnxruntime for token ids and returns what surrounds the stacks: each
stack's input (the embeddings), the encoder output the cross-attention reads (after T5's final norm, which
stays on the host: :meth:`Seq2SeqHost.memory`), every tensor added to the attention scores (the padding and
causal masks, T5's relative position bias: precomputed on the host), and each stack's output for the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..cli import one_line
from ..model.reference import FloatCross, FloatLayer, Memory, float_stack
from .graph import FrontendError
from .roles import LayerRoles, _scaling, norm_kind

__all__ = ["Seq2Seq", "Seq2SeqHost", "seq2seq_model", "seq2seq_refusal", "memory_on_host", "Scores", "MASKED",
           "seq2seq_inputs", "float_check", "integer_check", "check", "config_dict"]

MASKED = -1e9           # an added score below this masks the key (exporters add finfo(float32).min)
_ACTIVATIONS = (("Relu", "relu"), ("Tanh", "tanh"), ("Erf", "erf"), ("Gelu", "erf"))


@dataclass
class Scores:
    """What is added to one attention's scores: the keys a query may attend (``mask`` [S, keys]) and a float
    ``bias`` ([heads or 1, S, keys], the scaled scores' units) or None."""
    mask: np.ndarray
    bias: np.ndarray | None


@dataclass
class Seq2Seq:
    """The float layers of an encoder-decoder model and its layer kind."""
    encoder: list[FloatLayer]
    decoder: list[FloatLayer]
    heads: int
    hidden: int
    intermediate: int
    norm: str            # "post" (BART) or "pre" (T5)
    rms: bool            # RMSNorm (T5) for LayerNorm
    gelu: str            # the FFN's activation: "erf", "tanh" or "relu"
    eps: float

    def encode(self, x, scores: Scores, traces=None):
        return float_stack(x, self.encoder, scores.mask, self.heads, self.eps, traces, self.norm, self.gelu,
                           self.rms, scores.bias)

    def decode(self, y, scores: Scores, memory: Memory, traces=None):
        return float_stack(y, self.decoder, scores.mask, self.heads, self.eps, traces, self.norm, self.gelu,
                           self.rms, scores.bias, memory)


def _groups(fe):
    if len(fe.groups) != 2:
        raise FrontendError(f"encoder-decoder: {len(fe.groups)} layer group(s); expected 2 (encoder, decoder)")
    enc, dec = (fe.roles(k) for k in (0, 1))
    kinds = lambda r: [a.kind for a in r.attentions]   # noqa: E731
    if kinds(enc[0]) != ["self"] or kinds(dec[0]) != ["self", "cross"]:
        raise FrontendError(f"encoder-decoder: attention {kinds(enc[0])} in {fe.groups[0].prefix} and "
                            f"{kinds(dec[0])} in {fe.groups[1].prefix}; expected ['self'] and ['self', 'cross']")
    if dec[0].attentions[0].causal is None:
        raise FrontendError(f"{fe.groups[1].prefix}: the self-attention's mask is not causal")
    return enc, dec


def _norm_gains(g, r: LayerRoles, count: int) -> tuple[list, list, bool]:
    """The layer's ``count`` norms in graph order: gains, biases (None if absent) and whether they are RMSNorms
    (T5: no LayerNormalization node, a weight-sized gain constant read by a Mul)."""
    w = r.weights
    if r.norms:
        if len(r.norms) != count:
            raise FrontendError(f"{r.layer.index}: {len(r.norms)} LayerNormalization nodes; expected {count}")
        return [w[f"ln{n}_g"] for n in range(1, count + 1)], [w.get(f"ln{n}_b") for n in range(1, count + 1)], False
    gains = [w[k] for k in sorted((k for k in w if k.startswith("mul")), key=lambda k: int(k[3:]))]
    if len(gains) != count:
        raise FrontendError(f"layer {r.layer.index}: {len(gains)} norm gains (Mul by a weight-sized constant) and "
                            f"no LayerNormalization; expected {count} norms")
    return gains, [None] * count, True


def _rms_eps(g, r: LayerRoles) -> float:
    """The epsilon of a layer's RMSNorm: the scalar constant added to the mean square before the square root."""
    for i in r.layer.nodes:
        node = g.nodes[i]
        if node.op_type != "Add":
            continue
        consts = [g.const(t) for t in node.input if g.is_const(t)]
        p = g.producer.get(node.input[0])
        if len(consts) == 1 and consts[0].size == 1 and p is not None and g.nodes[p].op_type == "ReduceMean":
            return float(consts[0].ravel()[0])
    raise FrontendError(f"layer {r.layer.index}: no RMSNorm epsilon (ReduceMean + constant) found")


def _activation(r: LayerRoles) -> str:
    for op, name in _ACTIVATIONS:
        if op in r.activations:
            return name
    raise FrontendError(f"layer {r.layer.index}: FFN activation {r.activations}; expected Relu, Erf, Tanh or Gelu")


def _attention_weights(r: LayerRoles, a, prefix: str, dh: int) -> dict:
    """Q, K, V, O weights and biases of one attention; the score scaling folded into Q."""
    w, out = r.weights, {}
    fold = a.scale * math.sqrt(dh)
    for part in "qkvo":
        wt = w[f"{prefix}{part}_w"]
        out[f"{part}_w"] = wt * (fold if part == "q" else 1.0)
        out[f"{part}_b"] = w.get(f"{prefix}{part}_b", np.zeros(wt.shape[0])) * (fold if part == "q" else 1.0)
    return out


def _float_layer(g, r: LayerRoles, heads: int, decoder: bool) -> tuple[FloatLayer, bool]:
    w = r.weights
    hidden = w["ffn_down_w"].shape[0]
    dh = hidden // heads
    prefix = "self_" if decoder else ""
    d = _attention_weights(r, r.attentions[0], prefix, dh)
    gains, biases, rms = _norm_gains(g, r, 3 if decoder else 2)
    zeros = np.zeros(hidden)
    norms = [(gn, zeros if b is None else b) for gn, b in zip(gains, biases)]
    (d["ln1_g"], d["ln1_b"]), (d["ln2_g"], d["ln2_b"]) = norms[0], norms[-1]
    for part in ("ffn_up", "ffn_down"):
        d[f"{part}_w"] = w[f"{part}_w"]
        d[f"{part}_b"] = w.get(f"{part}_b", np.zeros(w[f"{part}_w"].shape[0]))
    layer = FloatLayer.from_dict(d)
    if decoder:
        c = _attention_weights(r, r.attentions[1], "cross_", dh)
        c["ln_g"], c["ln_b"] = norms[1]
        layer.cross = FloatCross.from_dict(c)
    return layer, rms


def _norm_position(g, r: LayerRoles, rms: bool) -> str:
    """"pre" when the self-attention reads the layer's own first norm (T5, GPT-2), else "post" (BART, BERT)."""
    if not rms:
        return norm_kind(g, r)
    p = g.producer.get(g.source(r.attentions[0].inputs[0]))
    own = p is not None and p in set(r.layer.nodes) and g.nodes[p].op_type == "Mul" \
        and any(g.is_const(x) and g.const(x).ndim == 1 for x in g.nodes[p].input)
    return "pre" if own else "post"


def seq2seq_model(fe) -> Seq2Seq:
    """The float layers of an encoder-decoder model (``fe``: a :class:`~mlo_hw.frontend.Frontend` with two layer
    groups), or FrontendError saying what does not fit."""
    g = fe.graph
    enc, dec = _groups(fe)
    heads = enc[0].heads
    if not heads or dec[0].heads != heads:
        raise FrontendError(f"encoder-decoder: heads {heads} (encoder) and {dec[0].heads} (decoder); expected the "
                            "same, known count")
    encoder = [_float_layer(g, r, heads, False) for r in enc]
    decoder = [_float_layer(g, r, heads, True) for r in dec]
    rms = encoder[0][1]
    if any(x[1] != rms for x in encoder + decoder):
        raise FrontendError("encoder-decoder: RMSNorm in some layers and LayerNorm in others")
    norm = _norm_position(g, enc[0], rms)
    if _norm_position(g, dec[0], rms) != norm:
        raise FrontendError("encoder-decoder: the encoder's and the decoder's norms sit in different places")
    act = _activation(enc[0])
    if _activation(dec[0]) != act:
        raise FrontendError("encoder-decoder: the encoder's and the decoder's FFN activations differ")
    eps = _rms_eps(g, enc[0]) if rms else float(g.attr(enc[0].norms[0], "epsilon", 1e-5))
    w = enc[0].weights
    return Seq2Seq(encoder=[x[0] for x in encoder], decoder=[x[0] for x in decoder], heads=heads,
                   hidden=int(w["ffn_down_w"].shape[0]), intermediate=int(w["ffn_up_w"].shape[0]), norm=norm,
                   rms=rms, gelu=act, eps=float(f"{eps:.6g}"))


def memory_on_host(fe) -> bool:
    """The cross-attention reads something the host makes from the encoder stack's output (T5's final norm), not
    the output itself (BART)."""
    _, dec = _groups(fe)
    g = fe.graph
    return g.source(dec[0].attentions[1].inputs[1]) != g.source(fe.groups[0].layers[-1].output)


def seq2seq_refusal(fe) -> str | None:
    """Why the engine cannot run this encoder-decoder (one line), or None (BART's kind: the cross-attention reading
    the encoder's output, no score bias)."""
    try:
        seq2seq_model(fe)           # the two stacks' structure, or the reason
    except FrontendError as e:
        return str(e)
    return None


def _score_addends(g, r: LayerRoles, a) -> list[tuple[str, float]]:
    """The activations added to an attention's scores between its Q.K^T MatMul and its Softmax, each with the
    constant scaling applied after it."""
    out, t, after = [], g.nodes[a.softmax].input[0], 1.0
    for _ in range(64):
        p = g.producer.get(t)
        if p is None or p == a.scores:
            return out
        node = g.nodes[p]
        ins = [x for x in node.input if x and not g.is_const(x)]
        if node.op_type == "Add" and len(ins) == 2:     # a causal mask without a padding mask is shape plumbing
            path = ins[0] if g.producer.get(ins[0]) is not None and _leads_to(g, ins[0], a.scores) else ins[1]
            out.extend((x, after) for x in ins if x != path)
            t = path
            continue
        ins = [x for x in ins if x not in g.plumbing]
        after *= _scaling(g, node, ins)
        t = ins[0] if ins else node.input[0]
    raise FrontendError(f"{g.describe(a.softmax)}: the path back to the score MatMul is too long")


def _leads_to(g, t: str, target: int, steps: int = 64) -> bool:
    for _ in range(steps):
        p = g.producer.get(t)
        if p is None:
            return False
        if p == target:
            return True
        ins = [x for x in g.nodes[p].input if x and not g.is_const(x)]
        if not ins:
            return False
        t = ins[0]
    return False


class Seq2SeqHost:
    """onnxruntime session of an encoder-decoder model returning what surrounds its two layer stacks."""

    def __init__(self, fe):
        from .host import ort_session
        self.fe, g = fe, fe.graph
        enc, dec = _groups(fe)
        self.enc_in, self.enc_out = fe.groups[0].layers[0].input, fe.groups[0].layers[-1].output
        self.dec_in, self.dec_out = fe.groups[1].layers[0].input, fe.groups[1].layers[-1].output
        self.memory_name = g.source(dec[0].attentions[1].inputs[1])
        # per stack and attention kind: the addends of every layer (checked to be the same tensors' values)
        self.addends = {"encoder": [_score_addends(g, r, r.attentions[0]) for r in enc],
                        "self": [_score_addends(g, r, r.attentions[0]) for r in dec],
                        "cross": [_score_addends(g, r, r.attentions[1]) for r in dec]}
        names = [self.enc_in, self.enc_out, self.dec_in, self.dec_out, self.memory_name]
        names += sorted({t for adds in self.addends.values() for layer in adds for t, _ in layer})
        self.names = list(dict.fromkeys(names))
        self.session = ort_session(g.model, self.names, g.dtypes)
        self.inputs = [i.name for i in self.session.get_inputs()]

    def _feeds(self, ids, mask, dec_ids) -> dict:
        feeds = {}
        for name in self.inputs:
            if name.startswith("decoder_") and "ids" in name:
                feeds[name] = np.asarray(dec_ids, np.int64)[None]
            elif "ids" in name:
                feeds[name] = np.asarray(ids, np.int64)[None]
            elif "mask" in name and not name.startswith("decoder_"):
                feeds[name] = np.asarray(mask, np.int64)[None]
            else:
                raise FrontendError(f"host: model input {name!r} is neither token ids, decoder token ids nor a mask")
        return feeds

    def has_position_bias(self) -> bool:
        """Whether the model adds a position bias to its self-attentions' scores (T5), from a run at 8 tokens."""
        r = self.run(np.full(8, 3), np.ones(8, bool), np.full(8, 3))
        return r["encoder"].bias is not None or r["self"].bias is not None

    def default_seq_len(self, candidates=(128, 64, 32, 16, 8)) -> int:
        """The longest of ``candidates`` the model runs at (encoder and decoder tokens alike), else FrontendError."""
        for seq in candidates:
            try:
                self.run(np.full(seq, 3), np.ones(seq, bool), np.full(seq, 3))
                return seq
            except FrontendError:
                pass
        raise FrontendError(f"--seq-len: the model runs at none of {', '.join(map(str, candidates))} tokens; "
                            "give one it accepts")

    def run(self, ids, mask, dec_ids) -> dict:
        """Encoder token ids and mask [S], decoder token ids [T] -> the stacks' inputs and outputs (``enc_in``,
        ``enc_out``, ``dec_in``, ``dec_out``), the ``memory`` [S, H] the cross-attention reads, and the
        :class:`Scores` of the ``encoder``, ``self`` and ``cross`` attentions; float64."""
        try:
            got = dict(zip(self.names, self.session.run(self.names, self._feeds(ids, mask, dec_ids))))
        except Exception as e:      # as above
            raise FrontendError(f"onnxruntime cannot run the model: {one_line(e)[:300]}") from None
        row = lambda t: np.asarray(t[0], np.float64)  # noqa: E731
        out = {k: row(got[n]) for k, n in (("enc_in", self.enc_in), ("enc_out", self.enc_out),
                                            ("dec_in", self.dec_in), ("dec_out", self.dec_out),
                                            ("memory", self.memory_name))}
        for kind, layers in self.addends.items():
            totals = [sum(np.asarray(got[t], np.float64) * f for t, f in adds) for adds in layers]
            if any(not np.array_equal(totals[0], t) for t in totals[1:]):
                raise FrontendError(f"host: the {kind} attention's score bias differs between layers; the engine "
                                    "shares one per stack")
            total = np.asarray(totals[0], np.float64)[0]          # [heads or 1, S, keys]
            keep = (total > MASKED).all(axis=0)
            bias = np.where(keep[None], total, 0.0)
            out[kind] = Scores(mask=keep, bias=bias if np.any(bias) else None)
        return out

    @cached_property
    def _between(self):
        """onnxruntime session of the host's graph from the encoder stack's output to the memory (T5's final
        norm), or None when the cross-attention reads the stack's output itself (BART)."""
        from .host import ort_subgraph
        return ort_subgraph(self.fe.graph, [self.enc_out], [self.memory_name]) if memory_on_host(self.fe) else None

    def memory(self, enc_out) -> np.ndarray:
        """The cross-attention's input from the encoder stack's output ``enc_out`` [S, H] (the engine's,
        dequantized): the host's part between the stacks."""
        if self._between is None:
            return np.asarray(enc_out, np.float64)
        name = self._between.get_inputs()[0].name
        (m,) = self._between.run(None, {name: np.asarray(enc_out, np.float32)[None]})
        return np.asarray(m[0], np.float64)


def float_check(model: Seq2Seq, host: Seq2SeqHost, inputs) -> dict:
    """Largest |float reference - onnxruntime| over ``inputs`` [(ids, mask, dec_ids)]: at the encoder's output,
    at the decoder's output given onnxruntime's memory, and end to end (the memory from the reference's own
    encoder output through the host's part between the stacks)."""
    worst = {"encoder": 0.0, "decoder": 0.0, "end_to_end": 0.0}
    for ids, mask, dec_ids in inputs:
        r = host.run(ids, mask, dec_ids)
        enc = model.encode(r["enc_in"], r["encoder"])
        cross = r["cross"]
        dec = model.decode(r["dec_in"], r["self"], Memory(r["memory"], cross.mask, cross.bias))
        e2e = model.decode(r["dec_in"], r["self"], Memory(host.memory(enc), cross.mask, cross.bias))
        for k, got, want in (("encoder", enc, r["enc_out"]), ("decoder", dec, r["dec_out"]),
                             ("end_to_end", e2e, r["dec_out"])):
            worst[k] = max(worst[k], float(np.abs(got - want).max()))
    return worst


def seq2seq_inputs(host: Seq2SeqHost, seq_len: int, dec_len: int, rng: np.random.Generator, count: int) -> list:
    """``count`` random model inputs [(ids [S], mask [S], decoder ids [T])]: the first unpadded, the others with a
    random padding of the encoder's tokens."""
    vocab = _vocab(host)
    out = []
    for n in range(count):
        valid = seq_len if n == 0 else int(rng.integers(1, seq_len + 1))
        out.append((rng.integers(0, vocab, seq_len), np.arange(seq_len) < valid, rng.integers(0, vocab, dec_len)))
    return out


def _vocab(host: Seq2SeqHost) -> int:
    from .host import _embedding_table
    g = host.fe.graph
    tables = [_embedding_table(g, i.name) for i in g.graph_inputs if "ids" in i.name]
    tables = [t for t in tables if t is not None]
    if not tables:
        raise FrontendError("host: no token ids input feeds an embedding Gather")
    return int(min(t.shape[0] for t in tables))


def _cosine(a, b) -> float:
    return float((a * b).sum() / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def integer_check(model: Seq2Seq, host: Seq2SeqHost, calib, inputs) -> dict:
    """Quantize on ``calib`` and run the integer golden model end to end (the memory through the host's part
    between the stacks) on ``inputs`` [(ids, mask, dec_ids)]: the smallest cosine against the float reference at
    the encoder's output (its real tokens) and at the decoder's output, and the quantized model (``model``)."""
    from ..model.seq2seq import quantize_seq2seq
    q = quantize_seq2seq(model, [host.run(*c) for c in calib], host._between is not None)
    worst = {"encoder": 1.0, "decoder": 1.0}
    for ids, mask, dec_ids in inputs:
        r = host.run(ids, mask, dec_ids)
        enc = q.encode(q.quantize(r["enc_in"], q.encoder_scale), r["encoder"].mask)
        dec = q.decode(q.quantize(r["dec_in"], q.decoder_scale), r["self"].mask, q.memory(enc, host.memory),
                       r["cross"].mask)
        f_enc = model.encode(r["enc_in"], r["encoder"])
        f_dec = model.decode(r["dec_in"], r["self"], Memory(host.memory(f_enc), r["cross"].mask, r["cross"].bias))
        worst["encoder"] = min(worst["encoder"], _cosine(enc[mask] * q.encoder_out_scale, f_enc[mask]))
        worst["decoder"] = min(worst["decoder"], _cosine(dec * q.decoder_out_scale, f_dec))
    worst["model"] = q
    return worst


def check(fe, seq_len: int = 16, dec_len: int = 8, seed: int = 0) -> str:
    """One line: the float reference against onnxruntime and the integer golden model against the float
    reference, on random inputs (the CLI's ``--check`` for an encoder-decoder model)."""
    model, host = seq2seq_model(fe), Seq2SeqHost(fe)
    rng = np.random.default_rng(seed)
    calib, inputs = (seq2seq_inputs(host, seq_len, dec_len, rng, n) for n in (4, 4))
    f = float_check(model, host, inputs)
    i = integer_check(model, host, calib, inputs)
    kind = f"{model.norm}-{'RMSNorm' if model.rms else 'LayerNorm'}, {model.gelu}"
    return (f"encoder-decoder ({kind}; {len(inputs)} inputs of {seq_len} + {dec_len} tokens): float reference vs "
            f"onnxruntime max |diff| encoder {f['encoder']:.2e}, decoder {f['decoder']:.2e}, end to end "
            f"{f['end_to_end']:.2e}; integer golden model vs float cosine min encoder {i['encoder']:.4f}, "
            f"decoder {i['decoder']:.4f}")


def config_dict(fe, onnx_path: str, seq_len: int, name: str | None = None, position_bias: bool = False) -> dict:
    """A config (a YAML-ready dict) running an encoder-decoder's two stacks on the engine (``model.encoder_layers``),
    or FrontendError saying why it cannot."""
    from pathlib import Path
    from .host import _divisor
    reason = seq2seq_refusal(fe)
    if reason:
        raise FrontendError(f"not runnable on the engine: {reason}")
    m = seq2seq_model(fe)
    dh = m.hidden // m.heads
    unit = _divisor((m.hidden, m.intermediate, dh), (8, 4, 2, 1))
    tile = _divisor((m.hidden, m.intermediate), (unit * 2, unit))
    return {
        "name": name or Path(onnx_path).stem,
        "model": {"layers": len(m.decoder), "encoder_layers": len(m.encoder), "hidden": m.hidden, "heads": m.heads,
                  "intermediate": m.intermediate, "seq_len": seq_len, "layernorm_eps": m.eps, "causal": True,
                  "norm": m.norm, "gelu": m.gelu, "rmsnorm": m.rms, "position_bias": position_bias},
        "numerics": {"weight_bits": 8, "act_bits": 8},
        "folding": {"pe": unit, "simd": unit, "tile_rows": tile},
        "weights": {"source": "onnx", "onnx": str(onnx_path), "seed": 0},
        "loop_body_hierarchy": [list(g.hierarchy) for g in fe.groups],
    }
