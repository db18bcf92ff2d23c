"""Integer golden model of the layer stack: what the RTL must equal bit for bit.

:class:`IntLayer` holds every integer parameter of one layer, exactly what the DRAM weight image
carries (plus its kind, :attr:`IntLayer.norm`). :func:`int_layer` runs one layer on an int16 [S, H] input
(the residual stream) and can record every intermediate tensor, so an RTL mismatch can be located to a layer
and a tensor. A post-LN (BERT) layer is what the RTL runs; a pre-LN (GPT-2) layer runs here only, built from
the same operations (``docs/decode.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import numerics as nx

__all__ = ["IntMatrix", "IntLayer", "int_matmul", "int_layer", "int_stack", "TRACE_ORDER", "PRE_LN_TRACE_ORDER"]

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
    norm: str = "post"        # the layer kind (model.norm): "post" (BERT, the RTL's) or "pre" (GPT-2)

    MATRICES = ("q", "k", "v", "o", "ffn_up", "ffn_down")


def int_matmul(a, b) -> np.ndarray:
    """Exact integer ``a @ b`` (float64 BLAS is exact while every partial sum stays below 2**53)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    bound = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0)) * a.shape[-1]
    if bound >= 1 << 53:
        return a @ b
    return np.rint(a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)


def _linear(x, m: IntMatrix, bits: int = 8):
    return nx.requant(int_matmul(x, m.w.T) + m.bias, m.mult, m.shift, bits)


def _attention(x8, p: IntLayer, mask, heads: int, past) -> dict:
    """Q, K, V of int8 x8, the attention over ``past`` keys then x8's, and the O projection (int16)."""
    s_len, h = x8.shape
    dh = h // heads
    q, k, v = (_linear(x8, getattr(p, n)) for n in ("q", "k", "v"))
    k_all, v_all = (k, v) if past is None else (np.concatenate([past[0], k]), np.concatenate([past[1], v]))
    split = lambda t: t.reshape(len(t), heads, dh).transpose(1, 0, 2)   # noqa: E731
    qh, kh, vh = split(q), split(k_all), split(v_all)
    scores = np.stack([int_matmul(qh[i], kh[i].T) for i in range(heads)])
    probs = nx.softmax(scores, nx.per_head(mask), p.softmax_mult, p.softmax_shift)
    ctx_acc = np.stack([int_matmul(probs[i], vh[i]) for i in range(heads)])
    ctx = nx.requant(ctx_acc, p.ctx_mult, p.ctx_shift).transpose(1, 0, 2).reshape(s_len, h)
    return dict(q=q, k=k, v=v, scores=scores, probs=probs, ctx=ctx, attn_out=_linear(ctx, p.o, nx.RES_BITS))


def _ffn(x8, p: IntLayer) -> dict:
    """FFN up (int8), the GELU table (uint8), FFN down (int16) of int8 x8."""
    up = _linear(x8, p.ffn_up)
    act = nx.table_lookup(up, p.gelu)
    return dict(ffn_up=up, gelu=act, ffn_down=_linear(act, p.ffn_down, nx.RES_BITS))


def _post_ln(x, p: IntLayer, mask, heads: int, past) -> dict:
    t = {"x8": nx.narrow(x, p.narrow_in)}
    t.update(_attention(t["x8"], p, mask, heads, past))
    t["res1"] = x + t["attn_out"]
    t["ln1"] = nx.layernorm(t["res1"], p.ln1_gain, p.ln1_bias, p.ln1_shift, nx.RES_BITS)
    t["ln1_8"] = nx.narrow(t["ln1"], p.narrow_ln1)
    t.update(_ffn(t["ln1_8"], p))
    t["res2"] = t["ln1"] + t["ffn_down"]
    t["out"] = nx.layernorm(t["res2"], p.ln2_gain, p.ln2_bias, p.ln2_shift, nx.RES_BITS)
    return t


def _pre_ln(x, p: IntLayer, mask, heads: int, past) -> dict:
    """The residual stream stays int16 (one scale for the whole stack): each add saturates to it."""
    t = {"ln1": nx.layernorm(x, p.ln1_gain, p.ln1_bias, p.ln1_shift, nx.RES_BITS)}
    t["x8"] = nx.narrow(t["ln1"], p.narrow_in)
    t.update(_attention(t["x8"], p, mask, heads, past))
    t["res1"] = nx.saturate(x + t["attn_out"], nx.RES_BITS)
    t["ln2"] = nx.layernorm(t["res1"], p.ln2_gain, p.ln2_bias, p.ln2_shift, nx.RES_BITS)
    t["ln2_8"] = nx.narrow(t["ln2"], p.narrow_ln1)
    t.update(_ffn(t["ln2_8"], p))
    t["out"] = nx.saturate(t["res1"] + t["ffn_down"], nx.RES_BITS)
    return t


_LAYER_KINDS = {"post": _post_ln, "pre": _pre_ln}


def int_layer(x, p: IntLayer, mask, heads: int, trace: dict | None = None, past=None):
    """One integer layer of kind ``p.norm``: int16 x [S, H] -> int16 [S, H]; ``mask`` an
    :func:`~mlo_hw.model.numerics.attention_mask` ([S] keys, or [S, S] rows x keys; true = attend).

    ``past`` (a decoder's KV cache: int8 K and V [P, H] of the P tokens before x's rows) puts those keys first:
    the scores are [heads, S, P + S] and ``mask`` is over P + S keys (:mod:`mlo_hw.model.decode`).

    The residual stream (x, the O and FFN-down outputs, the LayerNorm outputs) is int16; every matrix
    input is int8 (narrowed per channel from an int16 tensor, or an int8 activation), the GELU output uint8.
    Post-LN (:data:`TRACE_ORDER`): LN1(x + O), LN2(LN1 + FFN down), the LayerNorm inputs up to 20 bits.
    Pre-LN (:data:`PRE_LN_TRACE_ORDER`): the LayerNorms read the residual alone; x + O and res1 + FFN down
    saturate to int16.
    """
    t = _LAYER_KINDS[p.norm](np.asarray(x, np.int64), p, mask, heads, past)
    if trace is not None:
        trace.update(t)
    return t["out"]


def int_stack(x, layers, mask, heads: int, traces: list | None = None):
    """Every layer in turn; ``traces`` (a list) receives one dict of intermediates per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = int_layer(x, p, mask, heads, t)
        if traces is not None:
            traces.append(t)
    return x
