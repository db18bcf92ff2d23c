"""Autoregressive decode with a KV cache, in the integer golden model (``model.causal`` configs).

A decoder runs in two modes (Deeploy's *parallel* and *autoregressive*):

- :func:`prefill` runs the prompt's ``tokens`` rows through every layer at once with the causal mask
  (exactly :func:`~mlo_hw.model.golden.int_stack` with :func:`~mlo_hw.model.numerics.attention_mask`) and keeps
  each layer's int8 K and V of those rows: the cache.
- :func:`decode_step` runs ``n`` new rows (one token a step when generating) through every layer: each layer
  computes Q, K, V of the new rows only, appends K and V to its cache, and attends the cached keys plus the
  new rows' own (causally). Nothing of an earlier token is recomputed.

Every operation but attention is row by row and attention row i reads keys 0..i only, so a prefill of n
tokens followed by decode steps gives, bit for bit, the rows of one causal run over all of them
(``tests/test_decode.py``). The cache holds, per layer, K and V in the DRAM-tiled engine's scratch layout
(:func:`~mlo_hw.model.tiled.scratch_layout`: K_h and V_h^T in the MVAU's weight-word order); here it is kept
as plain [length, H] arrays, and :func:`decode_traffic` counts the bytes a step moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import numerics as nx
from .golden import IntLayer, int_layer
from .weight_image import layout

__all__ = ["KVCache", "CacheFull", "prefill", "decode_step", "decode_traffic"]


class CacheFull(ValueError):
    """A step past the cache's capacity (the engine refuses it with an error code and does not run)."""


@dataclass
class KVCache:
    """Per layer, the int8 K and V rows [length, H] of every token so far; at most ``capacity`` tokens."""
    capacity: int
    k: list[np.ndarray] = field(default_factory=list)
    v: list[np.ndarray] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.k[0]) if self.k else 0

    def append(self, layer: int, k, v) -> None:
        if layer == len(self.k):
            self.k.append(np.zeros((0, k.shape[1]), np.int64))
            self.v.append(np.zeros((0, v.shape[1]), np.int64))
        self.k[layer] = np.concatenate([self.k[layer], k])
        self.v[layer] = np.concatenate([self.v[layer], v])


def prefill(cfg, layers: list[IntLayer], x, tokens: int, capacity: int | None = None):
    """The prompt: int16 ``x`` [S, H] (rows beyond ``tokens`` are padding) through every layer with the causal mask;
    returns (output [S, H], the cache of the ``tokens`` rows). ``capacity`` defaults to ``cfg.model.seq_len``."""
    x = np.asarray(x, np.int64)
    cache = KVCache(cfg.model.seq_len if capacity is None else capacity)
    _check_room(cache, tokens)
    mask = nx.attention_mask(np.arange(len(x)) < tokens, causal=True)
    for li, p in enumerate(layers):
        trace: dict = {}
        x = int_layer(x, p, mask, cfg.model.heads, trace)
        cache.append(li, trace["k"][:tokens], trace["v"][:tokens])
    return x, cache


def decode_step(cfg, layers: list[IntLayer], x, cache: KVCache):
    """``n`` new tokens (int16 ``x`` [n, H], positions ``cache.length``..) through every layer against the cache,
    which they are appended to; returns their output [n, H]."""
    x = np.asarray(x, np.int64)
    n, past = len(x), cache.length
    if x.ndim != 2 or n == 0:
        raise ValueError(f"decode step: expected int16 rows [n >= 1, hidden], got shape {x.shape}")
    _check_room(cache, past + n)
    keys = np.arange(past + n)
    mask = keys[None, :] <= past + np.arange(n)[:, None]           # row r (position past + r) sees keys 0..past + r
    for li, p in enumerate(layers):
        trace: dict = {}
        x = int_layer(x, p, mask, cfg.model.heads, trace, past=(cache.k[li], cache.v[li]))
        cache.append(li, trace["k"], trace["v"])
    return x


def _check_room(cache: KVCache, length: int) -> None:
    if length > cache.capacity:
        raise CacheFull(f"KV cache: {length} tokens exceed its capacity of {cache.capacity}")


def decode_traffic(cfg, length: int) -> dict[str, int]:
    """DRAM bytes of one single-token decode step at cache ``length`` (before the step): every layer's weights,
    its cached K and V (int8, read once each), the new token's K and V written, and the int16 token in and out."""
    m = cfg.model
    return {"weights": layout(cfg).total_bytes,
            "kv_read": 2 * m.layers * length * m.hidden,
            "kv_written": 2 * m.layers * m.hidden,
            "activations": 2 * 2 * m.hidden}
