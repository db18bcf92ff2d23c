"""Encoder-decoder models (T5, BART) in integers: the quantizer and the golden model of both stacks.

The float model (:class:`mlo_hw.frontend.seq2seq.Seq2Seq`: the encoder's and the decoder's
:class:`~mlo_hw.model.reference.FloatLayer`, the layer kind) is quantized as one stack per group
(:mod:`mlo_hw.model.quantize`'s scales, ``docs/numerics.md``), plus, per decoder layer, the cross-attention
block (:class:`~mlo_hw.model.golden.IntCross`):

- its Q input is narrowed per channel from the int16 tensor it reads (LN1's output post-LN, the block's own
  norm pre-LN); its K and V input is the *memory* (the encoder's output) narrowed per channel from int16;
- the memory is the encoder stack's int16 output itself when the cross-attention reads that (BART), else the
  host's part between the stacks (T5's final RMSNorm) runs in float on the dequantized output and its result
  is quantized to int16 at its own scale (:attr:`IntSeq2Seq.memory_scale`);
- T5's relative position bias (one float table per stack, by ``key - query``: :func:`relative_table`) becomes an
  integer table per layer in that layer's score units (``IntLayer.score_bias``), added to the raw scores;
- a post-LN decoder layer has three residual adds, each with its own int16 scale; a pre-LN stack has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import config_from_dict
from . import numerics as nx
from .golden import IntCross, IntLayer, IntMemory, int_stack, score_bits
from .quantize import (_attention_multipliers, _calibrate_stack, _layernorm_params, _matrix, _mse_range,
                       _narrow_shifts, _post_ln_scales, _pre_ln_scales, _quantize_layer, _res_scale, _INT8, _INT16)
from .reference import Memory

__all__ = ["IntSeq2Seq", "quantize_seq2seq", "relative_table", "random_seq2seq"]


def relative_table(bias, radius: int, mask=None) -> np.ndarray | None:
    """A float score bias [heads, S, S] that depends on ``key - query`` only (T5's buckets) as a table [heads,
    2 radius - 1] over the relative distance (entry ``d + radius - 1``), read where ``mask`` [S, S] (default: all)
    lets a query attend (distances never attended are zero), or None without a bias; ValueError when the bias is
    not such a function there."""
    if bias is None:
        return None
    from .golden import position_bias
    bias = np.asarray(bias, np.float64)
    heads, s, keys = bias.shape
    if s != keys or s > radius:
        raise ValueError(f"relative_table: a bias over {s} queries x {keys} keys does not fit a table of radius {radius}")
    mask = np.ones((s, s), bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), (s, s))
    q, k = np.nonzero(mask)
    table = np.zeros((heads, 2 * radius - 1))
    table[:, k - q + radius - 1] = bias[:, q, k]
    if not np.allclose(position_bias(table, s, s)[:, mask], bias[:, mask], rtol=0,
                       atol=1e-6 * max(1.0, float(np.abs(bias).max()))):
        raise ValueError("relative_table: the score bias is not a function of key - query")
    return table


@dataclass
class IntSeq2Seq:
    """Both integer stacks, the scales at their boundaries, and how the memory is made."""
    encoder: list[IntLayer]
    decoder: list[IntLayer]
    heads: int
    encoder_scale: float        # the encoder's int16 input
    decoder_scale: float        # the decoder's int16 input
    encoder_out_scale: float
    decoder_out_scale: float
    memory_scale: float         # the memory's int16 (the encoder's output scale when the host does nothing)
    memory_on_host: bool        # the host's part between the stacks runs on the dequantized encoder output

    @property
    def layers(self) -> list[IntLayer]:
        """The weight image's layers: the encoder's, then the decoder's."""
        return self.encoder + self.decoder

    @property
    def input_scale(self) -> float:
        return self.encoder_scale

    @property
    def output_scale(self) -> float:
        return self.decoder_out_scale

    def quantize_input(self, x) -> np.ndarray:
        """The encoder's float input -> int16."""
        return self.quantize(x, self.encoder_scale)

    def dequantize_output(self, y) -> np.ndarray:
        """The decoder's int16 output -> float."""
        return np.asarray(y, np.float64) * self.decoder_out_scale

    @staticmethod
    def quantize(x, scale: float) -> np.ndarray:
        return np.clip(np.floor(np.asarray(x) / scale + 0.5), -_INT16 - 1, _INT16).astype(np.int64)

    def encode(self, x_int, mask, traces=None) -> np.ndarray:
        """The encoder's layers on int16 ``x_int`` (``mask`` [S, S] or [S]: the keys each query attends)."""
        return int_stack(x_int, self.encoder, mask, self.heads, traces)

    def memory(self, enc_int, between=None) -> np.ndarray:
        """The int16 memory from the encoder's int16 output (``between``: the host's float function)."""
        if not self.memory_on_host:
            return np.asarray(enc_int, np.int64)
        return self.quantize(between(np.asarray(enc_int) * self.encoder_out_scale), self.memory_scale)

    def decode(self, y_int, mask, memory_int, cross_mask, traces=None) -> np.ndarray:
        """The decoder's layers on int16 ``y_int`` (``mask``: its causal mask) with cross-attention over the int16
        ``memory_int`` (``cross_mask``: the memory keys each query attends)."""
        return int_stack(y_int, self.decoder, mask, self.heads, traces, IntMemory(memory_int, cross_mask))


def _stack_config(model, layers: int, seq_len: int, causal: bool):
    """A :class:`~mlo_hw.config.Config` of one stack (its dimensions and layer kind) for the quantizer."""
    return config_from_dict({"name": "seq2seq", "model": {
        "layers": layers, "hidden": model.hidden, "heads": model.heads, "intermediate": model.intermediate,
        "seq_len": seq_len, "layernorm_eps": model.eps, "causal": causal, "norm": model.norm, "gelu": model.gelu,
        "rmsnorm": model.rms}})


def _decoder_scales(stats, norm: str) -> list[dict]:
    """Per decoder layer, as :func:`mlo_hw.model.quantize._post_ln_scales` plus the cross block's: where its Q
    input is narrowed from, its O output's and its norm output's scales."""
    if norm == "pre":
        s_res = _res_scale(*(st.absmax[n] for st in stats
                             for n in ("in", "attn_out", "res1", "x_attn_out", "resx", "ffn_down", "out")))
        out = []
        for st in stats:
            s_ln = {n: _res_scale(st.absmax[n]) for n in ("ln1", "lnx", "ln2")}
            out.append(dict(qkv_from=("ln1", s_ln["ln1"]), ffn_from=("ln2", s_ln["ln2"]), o_out=s_res,
                            down_out=s_res, ln1_out=s_ln["ln1"], ln2_out=s_ln["ln2"], cross_from=("lnx", s_ln["lnx"]),
                            cross_out=s_res, lnx_out=s_ln["lnx"],
                            report=dict(res1=s_res, resx=s_res, res2=s_res, out=s_res, **s_ln)))
        return out
    out = []
    for l, st in enumerate(stats):
        s_r1 = _res_scale(st.absmax["in"], st.absmax["attn_out"])
        s_rx = _res_scale(st.absmax["ln1"], st.absmax["x_attn_out"])
        s_r2 = _res_scale(st.absmax["lnx"], st.absmax["ffn_down"])
        s_out = (_res_scale(stats[l + 1].absmax["in"], stats[l + 1].absmax["attn_out"]) if l + 1 < len(stats)
                 else _res_scale(st.absmax["out"]))
        out.append(dict(qkv_from=("in", s_r1), ffn_from=("lnx", s_r2), o_out=s_r1, down_out=s_r2, ln1_out=s_rx,
                        ln2_out=s_out, cross_from=("ln1", s_rx), cross_out=s_rx, lnx_out=s_r2,
                        report=dict(res1=s_r1, resx=s_rx, res2=s_r2, out=s_out)))
    return out


def _quantize_cross(p, st, r: dict, cfg, mem_channel, s_mem: float) -> IntCross:
    h, dh, wb, acc = cfg.model.hidden, cfg.head_dim, cfg.numerics.weight_bits, cfg.acc_bits
    k_q, s_q8 = _narrow_shifts(st.channel[r["cross_from"][0]], r["cross_from"][1])
    k_mem, s_mem8 = _narrow_shifts(mem_channel, s_mem)
    s = {n: _mse_range(np.abs(st.sample("x_" + n))) / _INT8 for n in ("q", "k", "v", "ctx")}
    sm_mult, sm_shift, ctx_mult, ctx_shift = _attention_multipliers(s["q"], s["k"], s["v"], s["ctx"], dh)
    ln = _layernorm_params(p.ln_g, p.ln_b, r["lnx_out"], h)
    return IntCross(q=_matrix(p.q_w, p.q_b, s_q8, s["q"], wb, acc(h)), k=_matrix(p.k_w, p.k_b, s_mem8, s["k"], wb, acc(h)),
                    v=_matrix(p.v_w, p.v_b, s_mem8, s["v"], wb, acc(h)),
                    o=_matrix(p.o_w, p.o_b, s["ctx"], r["cross_out"], wb, acc(h)),
                    softmax_mult=sm_mult, softmax_shift=sm_shift, ctx_mult=ctx_mult, ctx_shift=ctx_shift,
                    narrow_q=k_q, narrow_mem=k_mem, ln_gain=ln[0], ln_bias=ln[1], ln_shift=ln[2])


def _layer_bias(layer: IntLayer, table, head_dim: int):
    """A float relative position bias table as the layer's integer one, in its score units (s_q s_k / sqrt(d))."""
    if table is None:
        return None
    unit = layer.scales["q"] * layer.scales["k"] / math.sqrt(head_dim)
    return nx.saturate(np.floor(np.asarray(table) / unit + 0.5).astype(np.int64), score_bits(head_dim) - 1)


def quantize_seq2seq(model, calib: list[dict], memory_on_host: bool, radius: int | None = None) -> IntSeq2Seq:
    """Quantize an encoder-decoder ``model`` (:class:`mlo_hw.frontend.seq2seq.Seq2Seq`) on ``calib``: what
    :meth:`mlo_hw.frontend.seq2seq.Seq2SeqHost.run` returns per input (each stack's input, the memory, the
    :class:`~mlo_hw.frontend.seq2seq.Scores`); ``memory_on_host``: the memory is not the encoder's output itself.
    A score bias (T5's) becomes each self-attention layer's table over ``key - query`` out to ``radius`` - 1 (default:
    the longest calibration input; an engine's: its padded sequence)."""
    enc_len, dec_len = (max(len(c[k]) for c in calib) for k in ("enc_in", "dec_in"))
    radius = max(enc_len, dec_len) if radius is None else radius
    longest = {k: max(calib, key=lambda c: len(c[k + "_in"])) for k in ("enc", "dec")}
    tables = {"encoder": relative_table(longest["enc"]["encoder"].bias, radius, longest["enc"]["encoder"].mask),
              "decoder": relative_table(longest["dec"]["self"].bias, radius, longest["dec"]["self"].mask)}
    if longest["dec"]["cross"].bias is not None:
        raise ValueError("quantize_seq2seq: a cross-attention score bias is not modelled (T5's cross-attention has none)")
    enc_cfg = _stack_config(model, len(model.encoder), enc_len, False)
    dec_cfg = _stack_config(model, len(model.decoder), dec_len, True)
    kind = dict(eps=model.eps, norm=model.norm, gelu=model.gelu, rms=model.rms)
    enc_stats = _calibrate_stack(model.encoder, [(c["enc_in"], c["encoder"].mask, c["encoder"].bias, None)
                                                 for c in calib], model.heads, **kind)
    dec_stats = _calibrate_stack(model.decoder, [(c["dec_in"], c["self"].mask, c["self"].bias,
                                                  Memory(c["memory"], c["cross"].mask, c["cross"].bias))
                                                 for c in calib], model.heads, **kind)
    enc_scales = (_pre_ln_scales if model.norm == "pre" else _post_ln_scales)(enc_stats)
    encoder = [_quantize_layer(p, st, r, enc_cfg) for p, st, r in zip(model.encoder, enc_stats, enc_scales)]
    enc_out_scale = encoder[-1].scales["out"]
    mem = np.concatenate([np.abs(c["memory"]) for c in calib])
    s_mem = _res_scale(float(mem.max())) if memory_on_host else enc_out_scale
    decoder = []
    for p, st, r in zip(model.decoder, dec_stats, _decoder_scales(dec_stats, model.norm)):
        layer = _quantize_layer(p, st, r, dec_cfg)
        layer.cross = _quantize_cross(p.cross, st, r, dec_cfg, mem.max(axis=0), s_mem)
        decoder.append(layer)
    dh = model.hidden // model.heads
    for stack, layers in (("encoder", encoder), ("decoder", decoder)):
        for layer in layers:
            layer.rms = model.rms
            layer.score_bias = _layer_bias(layer, tables[stack], dh)
    return IntSeq2Seq(encoder=encoder, decoder=decoder, heads=model.heads, encoder_scale=encoder[0].scales["res1"],
                      decoder_scale=decoder[0].scales["res1"], encoder_out_scale=enc_out_scale,
                      decoder_out_scale=decoder[-1].scales["out"], memory_scale=s_mem, memory_on_host=memory_on_host)


def random_seq2seq(cfg, rng: np.random.Generator, calib_count: int = 3):
    """A random encoder-decoder of ``cfg``'s sizes (``model.encoder_layers`` encoder layers, ``model.layers`` decoder
    layers with cross-attention; BERT-initialised like :func:`mlo_hw.model.reference.random_float_layers`) and its
    quantization on random embeddings-like inputs: (float model, :class:`IntSeq2Seq`). The memory is the encoder's
    output itself (BART's wiring)."""
    import dataclasses
    from ..frontend.seq2seq import Scores, Seq2Seq
    from .reference import FloatCross, random_float_layers
    m = cfg.model
    h, s = m.hidden, m.seq_len
    enc = random_float_layers(dataclasses.replace(cfg, model=dataclasses.replace(m, layers=m.encoder_layers)), rng)
    dec = random_float_layers(cfg, rng)
    for p in dec:
        d = {f"{n}_{k}": rng.normal(0, 0.02, (h, h) if k == "w" else h) for n in "qkvo" for k in ("w", "b")}
        d.update(ln_g=1.0 + rng.normal(0, 0.1, h), ln_b=rng.normal(0, 0.1, h))
        p.cross = FloatCross.from_dict(d)
    model = Seq2Seq(enc, dec, m.heads, h, m.intermediate, m.norm, m.rmsnorm, m.gelu, m.layernorm_eps)
    # T5's kind (model.position_bias): a random relative position bias per stack, over key - query
    from .golden import position_bias
    tables = [rng.normal(0.0, 0.5, (m.heads, 2 * s - 1)) if m.position_bias else None for _ in range(2)]
    bias = [None if t is None else position_bias(t, s, s) for t in tables]
    calib = []
    for n in range(calib_count):
        te, td = (s if n == 0 else int(rng.integers(1, s + 1)) for _ in range(2))
        keys_e, keys_d = np.arange(s) < te, np.arange(s) < td
        enc_keys = Scores(np.broadcast_to(keys_e, (s, s)), None)
        enc_scores = Scores(enc_keys.mask, bias[0])
        x = rng.normal(0.0, 1.0, (s, h))
        calib.append({"enc_in": x, "encoder": enc_scores, "dec_in": rng.normal(0.0, 1.0, (s, h)),
                      "self": Scores(nx.attention_mask(keys_d, True), bias[1]), "cross": enc_keys,
                      "memory": model.encode(x, enc_scores)})
    return model, quantize_seq2seq(model, calib, memory_on_host=False, radius=cfg.bias_radius)
