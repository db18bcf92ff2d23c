"""Float reference of a transformer layer stack (numpy, float64): what the integer model approximates.

Weights are in PyTorch's [out, in] layout. Two layer kinds (``model.norm``), with ``Attn(t) = MHA(t) @ Wo^T + bo``
and ``FFN(t) = GELU(t @ W1^T + b1) @ W2^T + b2``; post-LayerNorm (BERT, ``norm="post"``)::

    a = LN1(x + Attn(x)) ; y = LN2(a + FFN(a))

and pre-LayerNorm (GPT-2, ``norm="pre"``; its final LayerNorm ln_f runs on the host after the stack)::

    r = x + Attn(LN1(x)) ; y = r + FFN(LN2(r))

GELU is the exact erf form (``gelu="erf"``) or GPT-2's tanh approximation (``gelu="tanh"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from .numerics import per_head

__all__ = ["FloatLayer", "random_float_layers", "float_layer", "float_stack", "gelu", "gelu_tanh", "GELU", "erf"]


@dataclass
class FloatLayer:
    q_w: np.ndarray
    q_b: np.ndarray
    k_w: np.ndarray
    k_b: np.ndarray
    v_w: np.ndarray
    v_b: np.ndarray
    o_w: np.ndarray
    o_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ffn_up_w: np.ndarray
    ffn_up_b: np.ndarray
    ffn_down_w: np.ndarray
    ffn_down_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray

    @classmethod
    def from_dict(cls, d: dict) -> "FloatLayer":
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d]
        if missing:
            raise ValueError(f"layer weights: missing {missing[0]!r}")
        return cls(**{n: np.asarray(d[n], dtype=np.float64) for n in names})


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


GELU = {"erf": gelu, "tanh": gelu_tanh}     # by model.gelu


def _layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _softmax(s, mask):
    s = np.where(mask, s, -1e30)
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s) * mask
    tot = e.sum(-1, keepdims=True)
    return np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)


def _attention(x, p: FloatLayer, mask, heads: int) -> dict:
    """Multi-head self-attention of x [S, H] and its output projection: the intermediates by trace name."""
    s_len, h = x.shape
    dh = h // heads
    q = x @ p.q_w.T + p.q_b
    k = x @ p.k_w.T + p.k_b
    v = x @ p.v_w.T + p.v_b
    split = lambda t: t.reshape(s_len, heads, dh).transpose(1, 0, 2)   # noqa: E731
    scores = split(q) @ split(k).transpose(0, 2, 1) / math.sqrt(dh)
    probs = _softmax(scores, per_head(mask))
    ctx = (probs @ split(v)).transpose(1, 0, 2).reshape(s_len, h)
    return dict(q=q, k=k, v=v, probs=probs, ctx=ctx, attn_out=ctx @ p.o_w.T + p.o_b)


def _ffn(x, p: FloatLayer, gelu: str) -> dict:
    up = x @ p.ffn_up_w.T + p.ffn_up_b
    act = GELU[gelu](up)
    return dict(ffn_up=up, gelu=act, ffn_down=act @ p.ffn_down_w.T + p.ffn_down_b)


def float_layer(x, p: FloatLayer, mask, heads: int, eps: float = 1e-12, trace: dict | None = None,
                norm: str = "post", gelu: str = "erf"):
    """One layer on x [S, H]; ``mask`` (:func:`~mlo_hw.model.numerics.attention_mask`: [S] keys or
    [S, S] rows x keys) is true where a key may be attended; ``norm`` "post" (BERT) or "pre" (GPT-2), ``gelu``
    "erf" or "tanh" (a key of :data:`GELU`)."""
    t = {}
    if norm == "pre":
        t["ln1"] = _layernorm(x, p.ln1_g, p.ln1_b, eps)
        t.update(_attention(t["ln1"], p, mask, heads))
        t["res1"] = x + t["attn_out"]
        t["ln2"] = _layernorm(t["res1"], p.ln2_g, p.ln2_b, eps)
        t.update(_ffn(t["ln2"], p, gelu))
        t["out"] = t["res1"] + t["ffn_down"]
    elif norm == "post":
        t.update(_attention(x, p, mask, heads))
        t["ln1"] = _layernorm(x + t["attn_out"], p.ln1_g, p.ln1_b, eps)
        t.update(_ffn(t["ln1"], p, gelu))
        t["out"] = _layernorm(t["ln1"] + t["ffn_down"], p.ln2_g, p.ln2_b, eps)
    else:
        raise ValueError(f"float_layer: norm {norm!r} is neither 'post' nor 'pre'")
    if trace is not None:
        trace.update(t)
    return t["out"]


def float_stack(x, layers, mask, heads: int, eps: float = 1e-12, traces: list | None = None,
                norm: str = "post", gelu: str = "erf"):
    """All layers; ``traces`` (a list) receives one dict of intermediates per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = float_layer(x, p, mask, heads, eps, t, norm, gelu)
        if traces is not None:
            traces.append(t)
    return x
