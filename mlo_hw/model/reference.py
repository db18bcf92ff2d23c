"""Float reference of a transformer layer stack (numpy, float64): what the integer model approximates.

Weights are in PyTorch's [out, in] layout. Two layer kinds (``model.norm``), with ``Attn(t) = MHA(t) @ Wo^T + bo``
and ``FFN(t) = GELU(t @ W1^T + b1) @ W2^T + b2``; post-LayerNorm (BERT, ``norm="post"``)::

    a = LN1(x + Attn(x)) ; y = LN2(a + FFN(a))

and pre-LayerNorm (GPT-2, ``norm="pre"``; its final LayerNorm ln_f runs on the host after the stack)::

    r = x + Attn(LN1(x)) ; y = r + FFN(LN2(r))

GELU is the exact erf form (``gelu="erf"``) or GPT-2's tanh approximation (``gelu="tanh"``); T5's FFN has a
ReLU (``gelu="relu"``: the engine's activation table holds any of them).

Encoder-decoder models (T5, BART; :mod:`mlo_hw.model.seq2seq`) add to a decoder layer a *cross-attention*
block (:class:`FloatCross`) whose keys and values come from the encoder's output (:class:`Memory`), between
the self-attention and the FFN, with its own norm; post-LN::

    a = LN1(x + Attn(x)) ; c = LNX(a + Cross(a, mem)) ; y = LN2(c + FFN(c))

pre-LN: ``r = x + Attn(LN1(x)) ; r2 = r + Cross(LNX(r), mem) ; y = r2 + FFN(LN2(r2))``. T5 normalises by the
root mean square alone (``rms=True``: no mean, no bias) and adds a relative position bias to the scores
(``bias``: [heads, S, keys], in the units of the scaled scores).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from .numerics import per_head

__all__ = ["FloatAttention", "FloatLayer", "FloatCross", "Memory", "random_float_layers", "float_layer", "float_stack",
           "gelu", "gelu_tanh", "GELU", "erf"]


@dataclass
class FloatAttention:
    """An attention block's projections (PyTorch's [out, in] weights): what a self-attention and a cross-attention
    share."""
    q_w: np.ndarray
    q_b: np.ndarray
    k_w: np.ndarray
    k_b: np.ndarray
    v_w: np.ndarray
    v_b: np.ndarray
    o_w: np.ndarray
    o_b: np.ndarray


@dataclass
class FloatLayer(FloatAttention):
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ffn_up_w: np.ndarray
    ffn_up_b: np.ndarray
    ffn_down_w: np.ndarray
    ffn_down_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray
    cross: "FloatCross | None" = None     # an encoder-decoder model's decoder layer: its cross-attention block

    @classmethod
    def from_dict(cls, d: dict) -> "FloatLayer":
        return cls(**_arrays(cls, d, "layer weights"))


@dataclass
class FloatCross(FloatAttention):
    """The cross-attention block of a decoder layer: Q from the decoder, K and V from the encoder's output, and
    the norm that goes with the block (``ln_g``, ``ln_b``)."""
    ln_g: np.ndarray
    ln_b: np.ndarray

    @classmethod
    def from_dict(cls, d: dict) -> "FloatCross":
        return cls(**_arrays(cls, d, "cross-attention weights"))


@dataclass
class Memory:
    """What a decoder layer's cross-attention reads: the encoder's output ``x`` [M, H], the keys a query may
    attend (``mask`` [M] or [S, M]) and an additive score ``bias`` ([heads, S, M], or None)."""
    x: np.ndarray
    mask: np.ndarray
    bias: np.ndarray | None = None


def _arrays(cls, d: dict, what: str) -> dict:
    names = [f.name for f in fields(cls) if f.name != "cross"]
    missing = [n for n in names if n not in d]
    if missing:
        raise ValueError(f"{what}: missing {missing[0]!r}")
    return {n: np.asarray(d[n], dtype=np.float64) for n in names}


def random_float_layers(cfg, rng: np.random.Generator) -> list[FloatLayer]:
    """BERT-initialised layers (weights N(0, 0.02)) with randomised biases and LayerNorm affine."""
    h, i = cfg.model.hidden, cfg.model.intermediate

    def lin(out, inp):
        return rng.normal(0, 0.02, (out, inp)), rng.normal(0, 0.02, out)

    layers = []
    for _ in range(cfg.model.layers):
        d = {}
        for name, (out, inp) in (("q", (h, h)), ("k", (h, h)), ("v", (h, h)), ("o", (h, h)),
                                 ("ffn_up", (i, h)), ("ffn_down", (h, i))):
            d[f"{name}_w"], d[f"{name}_b"] = lin(out, inp)
        for ln in ("ln1", "ln2"):
            d[f"{ln}_g"] = 1.0 + rng.normal(0, 0.1, h)
            d[f"{ln}_b"] = rng.normal(0, 0.1, h)
        layers.append(FloatLayer.from_dict(d))
    return layers


def erf(x):
    """Vectorised erf, |error| < 1.2e-7 (Numerical Recipes' erfc Chebyshev fit; float32 accuracy, no scipy)."""
    x = np.asarray(x, np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    return np.sign(x) * (1.0 - t * np.exp(poly))


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    """GPT-2's GELU (``gelu_new``, PyTorch's ``approximate='tanh'``)."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def relu(x):
    return np.maximum(np.asarray(x, np.float64), 0.0)


GELU = {"erf": gelu, "tanh": gelu_tanh, "relu": relu}     # by model.gelu: the FFN's activation


def _layernorm(x, g, b, eps, rms: bool = False):
    """LayerNorm over the last axis, or (``rms``) T5's RMSNorm: ``x / sqrt(mean(x**2) + eps) * g + b``."""
    mu = 0.0 if rms else x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _softmax(s, mask):
    s = np.where(mask, s, -1e30)
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s) * mask
    tot = e.sum(-1, keepdims=True)
    return np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)


def _attention(x, p, mask, heads: int, kv=None, bias=None) -> dict:
    """Multi-head attention of x [S, H] over the keys and values of ``kv`` [M, H] (x itself: self-attention) and
    its output projection (``p`` a :class:`FloatLayer` or :class:`FloatCross`): the intermediates by trace
    name; ``bias`` is added to the scaled scores."""
    s_len, h = x.shape
    dh = h // heads
    kv = x if kv is None else kv
    q = x @ p.q_w.T + p.q_b
    k = kv @ p.k_w.T + p.k_b
    v = kv @ p.v_w.T + p.v_b
    split = lambda t: t.reshape(len(t), heads, dh).transpose(1, 0, 2)   # noqa: E731
    scores = split(q) @ split(k).transpose(0, 2, 1) / math.sqrt(dh)
    if bias is not None:
        scores = scores + bias
    probs = _softmax(scores, per_head(mask))
    ctx = (probs @ split(v)).transpose(1, 0, 2).reshape(s_len, h)
    return dict(q=q, k=k, v=v, probs=probs, ctx=ctx, attn_out=ctx @ p.o_w.T + p.o_b)


def _ffn(x, p: FloatLayer, gelu: str) -> dict:
    up = x @ p.ffn_up_w.T + p.ffn_up_b
    act = GELU[gelu](up)
    return dict(ffn_up=up, gelu=act, ffn_down=act @ p.ffn_down_w.T + p.ffn_down_b)


def float_layer(x, p: FloatLayer, mask, heads: int, eps: float = 1e-12, trace: dict | None = None,
                norm: str = "post", gelu: str = "erf", rms: bool = False, bias=None, memory: Memory | None = None):
    """One layer on x [S, H]; ``mask`` (:func:`~mlo_hw.model.numerics.attention_mask`: [S] keys or
    [S, S] rows x keys) is true where a key may be attended; ``norm`` "post" (BERT) or "pre" (GPT-2), ``gelu``
    a key of :data:`GELU`; ``rms`` RMSNorm for LayerNorm; ``bias`` added to the self-attention's scores.
    A layer with a cross-attention block (``p.cross``) reads ``memory``; its intermediates are traced as
    ``x_q`` .. ``x_attn_out``, its norm as ``lnx`` (and its residual sum, pre-LN, as ``resx``)."""
    if norm not in ("post", "pre"):
        raise ValueError(f"float_layer: norm {norm!r} is neither 'post' nor 'pre'")
    if (p.cross is None) != (memory is None):
        raise ValueError("float_layer: a cross-attention block and a memory go together")
    ln = lambda v, g, b: _layernorm(v, g, b, eps, rms)  # noqa: E731
    t = {}

    def cross(v):
        m = memory
        t.update({"x_" + k: a for k, a in _attention(v, p.cross, m.mask, heads, m.x, m.bias).items()})
        return t["x_attn_out"]

    if norm == "pre":
        t["ln1"] = ln(x, p.ln1_g, p.ln1_b)
        t.update(_attention(t["ln1"], p, mask, heads, bias=bias))
        t["res1"] = r = x + t["attn_out"]
        if p.cross is not None:
            t["lnx"] = ln(r, p.cross.ln_g, p.cross.ln_b)
            t["resx"] = r = r + cross(t["lnx"])
        t["ln2"] = ln(r, p.ln2_g, p.ln2_b)
        t.update(_ffn(t["ln2"], p, gelu))
        t["out"] = r + t["ffn_down"]
    else:
        t.update(_attention(x, p, mask, heads, bias=bias))
        t["ln1"] = a = ln(x + t["attn_out"], p.ln1_g, p.ln1_b)
        if p.cross is not None:
            t["lnx"] = a = ln(a + cross(a), p.cross.ln_g, p.cross.ln_b)
        t.update(_ffn(a, p, gelu))
        t["out"] = ln(a + t["ffn_down"], p.ln2_g, p.ln2_b)
    if trace is not None:
        trace.update(t)
    return t["out"]


def float_stack(x, layers, mask, heads: int, eps: float = 1e-12, traces: list | None = None,
                norm: str = "post", gelu: str = "erf", rms: bool = False, bias=None, memory: Memory | None = None):
    """All layers (arguments as :func:`float_layer`); ``traces`` (a list) receives one dict of intermediates
    per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = float_layer(x, p, mask, heads, eps, t, norm, gelu, rms, bias, memory if p.cross is not None else None)
        if traces is not None:
            traces.append(t)
    return x
