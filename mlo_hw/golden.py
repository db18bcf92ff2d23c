"""Integer golden model of the encoder stack: what the RTL must equal bit for bit.

:class:`IntLayer` holds every integer parameter of one layer, exactly what the DRAM weight image
carries. :func:`int_layer` runs one layer on an int8 [S, H] input and can record every
intermediate tensor, so an RTL mismatch can be located to a layer and a tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import numerics as nx

__all__ = ["IntMatrix", "IntLayer", "int_matmul", "int_layer", "int_stack", "TRACE_ORDER"]

# The intermediates of one layer in the order the engine produces them.
TRACE_ORDER = ("q", "k", "v", "scores", "probs", "ctx", "attn_out", "res1", "ln1", "ffn_up",
               "gelu", "ffn_down", "res2", "out")


@dataclass
class IntMatrix:
    """``y = requant(x @ w.T + bias, mult, shift)``: int8 w [rows, cols], int32 bias, uint16 mult."""
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
    res1_a: int
    res1_b: int
    ln1_gain: np.ndarray
    ln1_bias: np.ndarray
    ln1_shift: int
    gelu: np.ndarray          # int8 table over the 256 int8 inputs
    res2_a: int
    res2_b: int
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


def _linear(x, m: IntMatrix, bits: int):
    return nx.requant(int_matmul(x, m.w.T) + m.bias, m.mult, m.shift, bits)


def int_layer(x, p: IntLayer, mask, heads: int, act_bits: int = 8, trace: dict | None = None):
    """One integer encoder layer: int8 x [S, H] -> int8 [S, H]; ``mask`` [S] true = attend."""
    x = np.asarray(x, np.int64)
    s_len, h = x.shape
    dh = h // heads
    q, k, v = (_linear(x, getattr(p, n), act_bits) for n in ("q", "k", "v"))
    split = lambda t: t.reshape(s_len, heads, dh).transpose(1, 0, 2)   # noqa: E731
    qh, kh, vh = split(q), split(k), split(v)
    scores = np.stack([int_matmul(qh[i], kh[i].T) for i in range(heads)])
    probs = nx.softmax(scores, np.asarray(mask, bool)[None, None, :], p.softmax_mult, p.softmax_shift)
    ctx_acc = np.stack([int_matmul(probs[i], vh[i]) for i in range(heads)])
    ctx = nx.requant(ctx_acc, p.ctx_mult, p.ctx_shift, act_bits).transpose(1, 0, 2).reshape(s_len, h)
    attn = _linear(ctx, p.o, act_bits)
    res1 = nx.residual_add(x, attn, p.res1_a, p.res1_b)
    ln1 = nx.layernorm(res1, p.ln1_gain, p.ln1_bias, p.ln1_shift, act_bits)
    up = _linear(ln1, p.ffn_up, act_bits)
    act = nx.table_lookup(up, p.gelu, act_bits)
    down = _linear(act, p.ffn_down, act_bits)
    res2 = nx.residual_add(ln1, down, p.res2_a, p.res2_b)
    out = nx.layernorm(res2, p.ln2_gain, p.ln2_bias, p.ln2_shift, act_bits)
    if trace is not None:
        trace.update(q=q, k=k, v=v, scores=scores, probs=probs, ctx=ctx, attn_out=attn, res1=res1,
                     ln1=ln1, ffn_up=up, gelu=act, ffn_down=down, res2=res2, out=out)
    return out


def int_stack(x, layers, mask, heads: int, act_bits: int = 8, traces: list | None = None):
    """Every layer in turn; ``traces`` (a list) receives one dict of intermediates per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = int_layer(x, p, mask, heads, act_bits, t)
        if traces is not None:
            traces.append(t)
    return x
