"""Integer golden model of the encoder stack: what the RTL must equal bit for bit.

:class:`IntLayer` holds every integer parameter of one layer, exactly what the DRAM weight image
carries. :func:`int_layer` runs one layer on an int16 [S, H] input (the residual stream) and can record
every intermediate tensor, so an RTL mismatch can be located to a layer and a tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import numerics as nx

__all__ = ["IntMatrix", "IntLayer", "int_matmul", "int_layer", "int_stack", "TRACE_ORDER"]

# The intermediates of one layer in the order the engine produces them.
TRACE_ORDER = ("x8", "q", "k", "v", "scores", "probs", "ctx", "attn_out", "res1", "ln1", "ln1_8", "ffn_up",
               "gelu", "ffn_down", "res2", "out")


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
    narrow_in: np.ndarray     # [H] shifts: layer input (int16) -> Q/K/V input (int8)
    narrow_ln1: np.ndarray    # [H] shifts: LN1 output (int16) -> FFN-up input (int8)
    ln2_gain: np.ndarray
    ln2_bias: np.ndarray
    ln2_shift: int
    scales: dict = field(default_factory=dict)   # float scales of every activation (for reports)

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


def int_layer(x, p: IntLayer, mask, heads: int, trace: dict | None = None, past=None):
    """One integer encoder layer: int16 x [S, H] -> int16 [S, H]; ``mask`` an
    :func:`~mlo_hw.model.numerics.attention_mask` ([S] keys, or [S, S] rows x keys; true = attend).

    ``past`` (a decoder's KV cache: int8 K and V [P, H] of the P tokens before x's rows) puts those keys first:
    the scores are [heads, S, P + S] and ``mask`` is over P + S keys (:mod:`mlo_hw.model.decode`).

    The residual stream (x, the O and FFN-down outputs, the LayerNorm outputs) is int16; every matrix
    input is int8 (narrowed per channel from the stream, or an int8 activation), the GELU output uint8.
    """
    x = np.asarray(x, np.int64)
    s_len, h = x.shape
    dh = h // heads
    x8 = nx.narrow(x, p.narrow_in)
    q, k, v = (_linear(x8, getattr(p, n)) for n in ("q", "k", "v"))
    k_all, v_all = (k, v) if past is None else (np.concatenate([past[0], k]), np.concatenate([past[1], v]))
    split = lambda t: t.reshape(len(t), heads, dh).transpose(1, 0, 2)   # noqa: E731
    qh, kh, vh = split(q), split(k_all), split(v_all)
    scores = np.stack([int_matmul(qh[i], kh[i].T) for i in range(heads)])
    probs = nx.softmax(scores, nx.per_head(mask), p.softmax_mult, p.softmax_shift)
    ctx_acc = np.stack([int_matmul(probs[i], vh[i]) for i in range(heads)])
    ctx = nx.requant(ctx_acc, p.ctx_mult, p.ctx_shift).transpose(1, 0, 2).reshape(s_len, h)
    attn = _linear(ctx, p.o, nx.RES_BITS)
    res1 = x + attn
    ln1 = nx.layernorm(res1, p.ln1_gain, p.ln1_bias, p.ln1_shift, nx.RES_BITS)
    ln1_8 = nx.narrow(ln1, p.narrow_ln1)
    up = _linear(ln1_8, p.ffn_up)
    act = nx.table_lookup(up, p.gelu)
    down = _linear(act, p.ffn_down, nx.RES_BITS)
    res2 = ln1 + down
    out = nx.layernorm(res2, p.ln2_gain, p.ln2_bias, p.ln2_shift, nx.RES_BITS)
    if trace is not None:
        trace.update(x8=x8, q=q, k=k, v=v, scores=scores, probs=probs, ctx=ctx, attn_out=attn, res1=res1,
                     ln1=ln1, ln1_8=ln1_8, ffn_up=up, gelu=act, ffn_down=down, res2=res2, out=out)
    return out


def int_stack(x, layers, mask, heads: int, traces: list | None = None):
    """Every layer in turn; ``traces`` (a list) receives one dict of intermediates per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = int_layer(x, p, mask, heads, t)
        if traces is not None:
            traces.append(t)
    return x
