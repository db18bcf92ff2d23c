"""Greedy generation through the engine's KV cache (docs/decode.md), in the golden model and as engine runs.

:func:`golden_generation` runs a prompt and greedy steps in the golden model (``prefill`` + ``decode_step``) with a
random vocabulary (an embedding table with random positions, an untied unembedding table: tied random tables
make the model repeat a token); :func:`engine_runs` turns it into the engine's runs (the prefill with CACHE_LEN 0,
then per step CACHE_LEN = the position rounded down to lcm(pe, simd) and the input rows from there on);
:func:`check_cache` compares the KV cache an engine left in its scratch with the golden one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlo_hw.model.decode import KVCache, decode_step, prefill
from mlo_hw.model.tiled import scratch_layout
from mlo_hw.model.weight_image import unpack_tile_weights
from mlo_hw.plan import kv_cache

__all__ = ["Generation", "golden_generation", "engine_runs", "check_cache"]

VOCAB = 50


@dataclass
class Generation:
    tokens: list            # the prompt's, then one per step
    inputs: np.ndarray      # int16 [positions, H]: every position's embedded token
    outputs: list           # the prompt's [prompt_len, H], then one [1, H] per step
    cache: KVCache          # after the last step
    unembed: np.ndarray
    model: object

    def next_token(self, out_row) -> int:
        return int(np.argmax(self.unembed @ self.model.dequantize_output(out_row)))


def golden_generation(cfg, model, prompt_len: int, steps: int, rng) -> Generation:
    """A random prompt of ``prompt_len`` tokens, then ``steps`` greedy tokens, in the golden model."""
    h = cfg.model.hidden
    table, unembed = rng.normal(0, 1, (VOCAB, h)), rng.normal(0, 1, (VOCAB, h))
    position = rng.normal(0, 0.3, (cfg.seq_padded, h))

    def embed(tok, pos):
        return model.quantize_input(table[tok] + position[pos])
    tokens = [int(t) for t in rng.integers(0, VOCAB, prompt_len)]
    x = np.zeros((cfg.seq_padded, h), np.int64)
    x[:prompt_len] = [embed(t, i) for i, t in enumerate(tokens)]
    y, cache = prefill(cfg, model.layers, x, prompt_len, capacity=cfg.seq_padded)
    gen = Generation(tokens, np.array(x[:prompt_len]), [y[:prompt_len]], cache, unembed, model)
    for _ in range(steps):
        n = len(gen.tokens)
        gen.tokens.append(gen.next_token(gen.outputs[-1][-1]))
        gen.inputs = np.concatenate([gen.inputs, embed(gen.tokens[-1], n)[None]])
        gen.outputs.append(decode_step(cfg, model.layers, gen.inputs[-1][None], cache))
    return gen


def engine_runs(cfg, gen: Generation, prompt_len: int, dump_last: bool = False):
    """The engine's runs of ``gen`` (sim.harness.Run: the prefill, then one per step) and each step's CACHE_LEN."""
    from sim.harness import Run
    unit = kv_cache(cfg).unit

    def rows(first, last):       # the engine's input: positions first..last at rows 0.., the rest zero
        x = np.zeros((cfg.model.seq_len, cfg.model.hidden), np.int64)
        x[:last - first + 1] = gen.inputs[first:last + 1]
        return x
    runs, starts = [Run(rows(0, prompt_len - 1), prompt_len, cache_len=0)], []
    last = len(gen.inputs) - 1
    for n in range(prompt_len, last + 1):
        a = n - n % unit
        starts.append(a)
        runs.append(Run(rows(a, n), n - a + 1, cache_len=a, trace=False, dump_scratch=dump_last and n == last))
    return runs, starts


def check_cache(cfg, scratch: bytes, cache: KVCache):
    """Every layer's K_h and V_h^T in the scratch (MVAU weight-word order) against the golden cache, key by key."""
    sc, s, dh, pe, simd = scratch_layout(cfg), cfg.seq_padded, cfg.head_dim, cfg.folding.pe, cfg.folding.simd
    mem = np.frombuffer(scratch, np.int8)
    n = cache.length
    for layer in range(cfg.model.layers):
        for hh in range(cfg.model.heads):
            at = layer * sc.kv_stride + hh * s * dh
            k = unpack_tile_weights(mem[sc.k + at:][:s * dh], s, dh, pe, simd)[:n]
            vt = unpack_tile_weights(mem[sc.vt + at:][:s * dh], dh, s, pe, simd)[:, :n]
            for name, got, want in (("K", k, cache.k[layer][:, hh * dh:(hh + 1) * dh]),
                                    ("V^T", vt, cache.v[layer][:, hh * dh:(hh + 1) * dh].T)):
                bad = np.argwhere(got != want)
                assert len(bad) == 0, f"layer {layer} head {hh}: cached {name} differs first at {tuple(bad[0])}"
