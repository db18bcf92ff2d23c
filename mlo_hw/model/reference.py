"""Float reference of a BERT encoder stack (numpy, float64): what the integer model approximates.

Weights are in PyTorch's [out, in] layout. Post-LayerNorm BERT layer::

    ctx = MHA(x) ; a = LN1(x + ctx @ Wo^T + bo) ; y = LN2(a + GELU(a @ W1^T + b1) @ W2^T + b2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from .numerics import per_head

__all__ = ["FloatLayer", "random_float_layers", "float_layer", "float_stack", "gelu", "erf"]


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


def float_layer(x, p: FloatLayer, mask, heads: int, eps: float = 1e-12, trace: dict | None = None):
    """One encoder layer on x [S, H]; ``mask`` (:func:`~mlo_hw.model.numerics.attention_mask`: [S] keys or
    [S, S] rows x keys) is true where a key may be attended."""
    s_len, h = x.shape
    dh = h // heads
    q = x @ p.q_w.T + p.q_b
    k = x @ p.k_w.T + p.k_b
    v = x @ p.v_w.T + p.v_b
    split = lambda t: t.reshape(s_len, heads, dh).transpose(1, 0, 2)   # noqa: E731
    scores = split(q) @ split(k).transpose(0, 2, 1) / math.sqrt(dh)
    probs = _softmax(scores, per_head(mask))
    ctx = (probs @ split(v)).transpose(1, 0, 2).reshape(s_len, h)
    attn = ctx @ p.o_w.T + p.o_b
    ln1 = _layernorm(x + attn, p.ln1_g, p.ln1_b, eps)
    up = ln1 @ p.ffn_up_w.T + p.ffn_up_b
    act = gelu(up)
    down = act @ p.ffn_down_w.T + p.ffn_down_b
    out = _layernorm(ln1 + down, p.ln2_g, p.ln2_b, eps)
    if trace is not None:
        trace.update(q=q, k=k, v=v, probs=probs, ctx=ctx, attn_out=attn, ln1=ln1, ffn_up=up,
                     gelu=act, ffn_down=down, out=out)
    return out


def float_stack(x, layers, mask, heads: int, eps: float = 1e-12, traces: list | None = None):
    """All layers; ``traces`` (a list) receives one dict of intermediates per layer."""
    for p in layers:
        t = {} if traces is not None else None
        x = float_layer(x, p, mask, heads, eps, t)
        if traces is not None:
            traces.append(t)
    return x
