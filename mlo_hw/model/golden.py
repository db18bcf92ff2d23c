"""Integer golden model of the layer stack: what the RTL must equal bit for bit.

:class:`IntLayer` holds every integer parameter of one layer, exactly what the DRAM weight image
carries (plus its kind, :attr:`IntLayer.norm`). :func:`int_layer` runs one layer on an int16 [S, H] input
(the residual stream) and can record every intermediate tensor, so an RTL mismatch can be located to a layer
and a tensor. The RTL runs post-LN (BERT) and pre-LN (GPT-2) layers (``docs/decode.md``). An encoder-decoder
model's decoder layer adds a cross-attention block (:class:`IntCross`, reading an :class:`IntMemory`); T5's
layers normalise by RMS (:attr:`IntLayer.rms`) and add a relative position bias to the scores
(:attr:`IntLayer.score_bias`): the RTL runs these too (:mod:`mlo_hw.model.seq2seq`, ``docs/seq2seq.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import numerics as nx

__all__ = ["IntMatrix", "IntLayer", "IntCross", "IntMemory", "int_matmul", "position_bias", "score_bits", "int_layer", "int_stack", "TRACE_ORDER", "PRE_LN_TRACE_ORDER"]

# The intermediates of one (post-LN) layer in the order the engine produces them.
TRACE_ORDER = ("x8", "q", "k", "v", "scores", "probs", "ctx", "attn_out", "res1", "ln1", "ln1_8", "ffn_up",
               "gelu", "ffn_down", "res2", "out")
# The intermediates of a pre-LN layer, in the order they are computed.
PRE_LN_TRACE_ORDER = ("ln1", "x8", "q", "k", "v", "scores", "probs", "ctx", "attn_out", "res1", "ln2", "ln2_8",
                      "ffn_up", "gelu", "ffn_down", "out")


@dataclass
class IntMatrix:
    """``y = requant(x @ w.T + bias, mult, shift, bits)``: int8 w [rows, cols], int32 bias, uint16 mult."""
    w: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: int


@dataclass
class IntLayer:
    q: IntMatrix
    k: IntMatrix
    v: IntMatrix
    o: IntMatrix
    ffn_up: IntMatrix
    ffn_down: IntMatrix
    softmax_mult: int
    softmax_shift: int
    ctx_mult: int
    ctx_shift: int
    ln1_gain: np.ndarray
    ln1_bias: np.ndarray
    ln1_shift: int
    gelu: np.ndarray          # uint8 table over the 256 int8 inputs (zero point folded into ffn_down.bias)
    narrow_in: np.ndarray     # [H] shifts to the Q/K/V input (int8): from the layer input (post), LN1 output (pre)
    narrow_ln1: np.ndarray    # [H] shifts to the FFN-up input (int8): from LN1's output (post), LN2's output (pre)
    ln2_gain: np.ndarray
    ln2_bias: np.ndarray
    ln2_shift: int
    scales: dict = field(default_factory=dict)   # float scales of every activation (for reports)
    norm: str = "post"        # the layer kind (model.norm): "post" (BERT) or "pre" (GPT-2)
    cross: "IntCross | None" = None   # an encoder-decoder model's decoder layer: its cross-attention block
    rms: bool = False         # the norms are RMSNorms (T5): LayerNorm without the mean
    # T5's relative position bias: int [heads, 2R - 1] in this layer's score units, added to the self-attention's
    # scores at ``key - query + R - 1`` (positions), the sum saturated to the score width (:func:`position_bias`)
    score_bias: np.ndarray | None = None

    MATRICES = ("q", "k", "v", "o", "ffn_up", "ffn_down")


@dataclass
class IntCross:
    """A decoder layer's cross-attention block: Q from the decoder's int8 ``narrow_q(t)`` (t: LN1's output
    post-LN, the residual's norm ``ln`` pre-LN), K and V from the memory narrowed per channel
    (``narrow_mem``), O into the residual, and the block's norm (``ln_*``)."""
    q: IntMatrix
    k: IntMatrix
    v: IntMatrix
    o: IntMatrix
    softmax_mult: int
    softmax_shift: int
    ctx_mult: int
    ctx_shift: int
    narrow_q: np.ndarray
    narrow_mem: np.ndarray
    ln_gain: np.ndarray
    ln_bias: np.ndarray
    ln_shift: int


@dataclass
class IntMemory:
    """What a decoder layer's cross-attention reads: the encoder's output as int16 ``x`` [M, H] and the keys a query
    may attend (``mask`` [M] or [S, M])."""
    x: np.ndarray
    mask: np.ndarray


def int_matmul(a, b) -> np.ndarray:
    """Exact integer ``a @ b`` (float64 BLAS is exact while every partial sum stays below 2**53)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    bound = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0)) * a.shape[-1]
    if bound >= 1 << 53:
        return a @ b
    return np.rint(a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)


def _linear(x, m: IntMatrix, bits: int = 8):
    return nx.requant(int_matmul(x, m.w.T) + m.bias, m.mult, m.shift, bits)


def score_bits(head_dim: int) -> int:
    """The width of a raw attention score (int8 Q . int8 K over ``head_dim``): what the engine's softmax takes."""
    return nx.acc_bits(head_dim)


def position_bias(table, queries: int, keys: int, first_query: int = 0) -> np.ndarray:
    """A relative position bias table [heads, 2R - 1] at the scores of ``queries`` rows (positions ``first_query``..)
    over ``keys`` keys (positions 0..): [heads, queries, keys], entry ``table[h, key - query + R - 1]``."""
    table = np.asarray(table)
    r = (table.shape[1] + 1) // 2
    rel = np.arange(keys)[None, :] - (first_query + np.arange(queries))[:, None] + r - 1
    return table[:, rel]


def _attention(x8, p, mask, heads: int, past, kv8=None) -> dict:
    """Q, K, V of int8 x8 (K and V of ``kv8`` when given: cross-attention), the attention over ``past`` keys
    then these, and the O projection (int16); ``p`` an :class:`IntLayer` (with its position bias) or
    :class:`IntCross`."""
    s_len, h = x8.shape
    dh = h // heads
    kv8 = x8 if kv8 is None else kv8
    q, k, v = _linear(x8, p.q), _linear(kv8, p.k), _linear(kv8, p.v)
    k_all, v_all = (k, v) if past is None else (np.concatenate([past[0], k]), np.concatenate([past[1], v]))
    split = lambda t: t.reshape(len(t), heads, dh).transpose(1, 0, 2)   # noqa: E731
    qh, kh, vh = split(q), split(k_all), split(v_all)
    scores = np.stack([int_matmul(qh[i], kh[i].T) for i in range(heads)])
    if getattr(p, "score_bias", None) is not None:
        bias = position_bias(p.score_bias, s_len, len(k_all), len(k_all) - s_len)
        scores = nx.saturate(scores + bias, score_bits(dh))
    probs = nx.softmax(scores, nx.per_head(mask), p.softmax_mult, p.softmax_shift)
    ctx_acc = np.stack([int_matmul(probs[i], vh[i]) for i in range(heads)])
    ctx = nx.requant(ctx_acc, p.ctx_mult, p.ctx_shift).transpose(1, 0, 2).reshape(s_len, h)
    return dict(q=q, k=k, v=v, scores=scores, probs=probs, ctx=ctx, attn_out=_linear(ctx, p.o, nx.RES_BITS))


def _ffn(x8, p: IntLayer) -> dict:
    """FFN up (int8), the GELU table (uint8), FFN down (int16) of int8 x8."""
    up = _linear(x8, p.ffn_up)
    act = nx.table_lookup(up, p.gelu)
    return dict(ffn_up=up, gelu=act, ffn_down=_linear(act, p.ffn_down, nx.RES_BITS))


def _cross(t: dict, x, p: IntLayer, memory: IntMemory, heads: int) -> np.ndarray:
    """The cross-attention block on int16 ``x`` (its trace names ``x_``-prefixed): the O output."""
    c = p.cross
    t["x_x8"] = nx.narrow(x, c.narrow_q)
    kv8 = nx.narrow(memory.x, c.narrow_mem)
    t.update({"x_" + k: v for k, v in _attention(t["x_x8"], c, memory.mask, heads, None, kv8).items()})
    return t["x_attn_out"]


def _post_ln(x, p: IntLayer, mask, heads: int, past, memory) -> dict:
    ln = lambda r, g, b, s: nx.layernorm(r, g, b, s, nx.RES_BITS, p.rms)  # noqa: E731
    t = {"x8": nx.narrow(x, p.narrow_in)}
    t.update(_attention(t["x8"], p, mask, heads, past))
    t["res1"] = x + t["attn_out"]
    t["ln1"] = a = ln(t["res1"], p.ln1_gain, p.ln1_bias, p.ln1_shift)
    if p.cross is not None:
        t["resx"] = a + _cross(t, a, p, memory, heads)
        t["lnx"] = a = ln(t["resx"], p.cross.ln_gain, p.cross.ln_bias, p.cross.ln_shift)
    t["ln1_8"] = nx.narrow(a, p.narrow_ln1)
    t.update(_ffn(t["ln1_8"], p))
    t["res2"] = a + t["ffn_down"]
    t["out"] = ln(t["res2"], p.ln2_gain, p.ln2_bias, p.ln2_shift)
    return t


def _pre_ln(x, p: IntLayer, mask, heads: int, past, memory) -> dict:
    """The residual stream stays int16 (one scale for the whole stack): each add saturates to it."""
    ln = lambda r, g, b, s: nx.layernorm(r, g, b, s, nx.RES_BITS, p.rms)  # noqa: E731
    t = {"ln1": ln(x, p.ln1_gain, p.ln1_bias, p.ln1_shift)}
    t["x8"] = nx.narrow(t["ln1"], p.narrow_in)
    t.update(_attention(t["x8"], p, mask, heads, past))
    t["res1"] = r = nx.saturate(x + t["attn_out"], nx.RES_BITS)
    if p.cross is not None:
        t["lnx"] = ln(r, p.cross.ln_gain, p.cross.ln_bias, p.cross.ln_shift)
        t["resx"] = r = nx.saturate(r + _cross(t, t["lnx"], p, memory, heads), nx.RES_BITS)
    t["ln2"] = ln(r, p.ln2_gain, p.ln2_bias, p.ln2_shift)
    t["ln2_8"] = nx.narrow(t["ln2"], p.narrow_ln1)
    t.update(_ffn(t["ln2_8"], p))
    t["out"] = nx.saturate(r + t["ffn_down"], nx.RES_BITS)
    return t


_LAYER_KINDS = {"post": _post_ln, "pre": _pre_ln}


def int_layer(x, p: IntLayer, mask, heads: int, trace: dict | None = None, past=None,
              memory: IntMemory | None = None):
    """One integer layer of kind ``p.norm``: int16 x [S, H] -> int16 [S, H]; ``mask`` an
    :func:`~mlo_hw.model.numerics.attention_mask` ([S] keys, or [S, S] rows x keys; true = attend).

    ``past`` (a decoder's KV cache: int8 K and V [P, H] of the P tokens before x's rows) puts those keys first:
    the scores are [heads, S, P + S] and ``mask`` is over P + S keys (:mod:`mlo_hw.model.decode`).

    The residual stream (x, the O and FFN-down outputs, the LayerNorm outputs) is int16; every matrix
    input is int8 (narrowed per channel from an int16 tensor, or an int8 activation), the GELU output uint8.
    Post-LN (:data:`TRACE_ORDER`): LN1(x + O), LN2(LN1 + FFN down), the LayerNorm inputs up to 20 bits.
    Pre-LN (:data:`PRE_LN_TRACE_ORDER`): the LayerNorms read the residual alone; x + O and res1 + FFN down
    saturate to int16.

    A layer with a relative position bias (``p.score_bias``, T5's) adds it to the self-attention's scores (the query
    rows at positions P.. after ``past``'s P keys). A layer with a cross-attention block (``p.cross``) reads
    ``memory``; its block sits between the self-attention and the FFN (``resx``, ``lnx``, ``x_q`` ..).
    """
    if (p.cross is None) != (memory is None):
        raise ValueError("int_layer: a cross-attention block and a memory go together")
    t = _LAYER_KINDS[p.norm](np.asarray(x, np.int64), p, mask, heads, past, memory)
    if trace is not None:
        trace.update(t)
    return t["out"]


def int_stack(x, layers, mask, heads: int, traces: list | None = None, memory: IntMemory | None = None):
    """Every layer in turn (``memory`` as :func:`int_layer`); ``traces`` (a list) receives one dict of intermediates
    per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = int_layer(x, p, mask, heads, t, memory=memory if p.cross is not None else None)
        if traces is not None:
            traces.append(t)
    return x
