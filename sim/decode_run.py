"""Greedy generation through the engine's KV cache (docs/decode.md), in the golden model and as engine runs.

:func:`golden_generation` runs a prompt and greedy steps in the golden model (``prefill`` + ``decode_step``) with a
random vocabulary (an embedding table with random positions, an untied unembedding table: tied random tables
make the model repeat a token); :func:`engine_runs` turns it into the engine's runs (the prefill with CACHE_LEN 0,
then per step CACHE_LEN = the position rounded down to lcm(pe, simd) and the input rows from there on);
:func:`check_cache` compares the KV cache an engine left in its scratch with the golden one, and
:func:`check_generation` checks a whole generation's runs (the test's and ``bench/decode.py``'s).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlo_hw.model.decode import KVCache, decode_step, prefill
from mlo_hw.model.tiled import kv_head, scratch_layout
from mlo_hw.plan import kv_cache

__all__ = ["Generation", "golden_generation", "engine_runs", "check_cache", "check_generation"]

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
    sc, s, dh = scratch_layout(cfg), cfg.seq_padded, cfg.head_dim
    n = cache.length
    for layer in range(cfg.model.layers):
        for hh in range(cfg.model.heads):
            at = layer * sc.kv_stride + hh * s * dh
            k, vt = kv_head(cfg, scratch[sc.k + at:][:s * dh], scratch[sc.vt + at:][:s * dh])
            k, vt = k[:n], vt[:, :n]
            for name, got, want in (("K", k, cache.k[layer][:, hh * dh:(hh + 1) * dh]),
                                    ("V^T", vt, cache.v[layer][:, hh * dh:(hh + 1) * dh].T)):
                bad = np.argwhere(got != want)
                assert len(bad) == 0, f"layer {layer} head {hh}: cached {name} differs first at {tuple(bad[0])}"


def check_generation(sim, gen: Generation, prefill, starts, results, prompt_len: int):
    """AssertionError unless the engine's runs of ``gen`` (the prefill's :class:`sim.harness.Run` and result first,
    then one result per step, the last with its scratch dumped) equal the golden model: the prefill tensor by
    tensor, every step's output row and generated token, and the KV cache after the last step."""
    from sim.engine_check import check_run
    bit, cfg = sim.h.bit, sim.cfg
    for i, r in enumerate(results):
        assert r.status & bit("STATUS", "done") and not r.status & bit("STATUS", "error"), \
            f"run {i} (CACHE_LEN {([0] + list(starts))[i]}): STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"
    assert np.array_equal(results[0].output[:prompt_len], gen.outputs[0]), "prefill output differs"
    want, traces = sim.golden(prefill.x, prompt_len)
    check_run(cfg, results[0].output, want, traces, results[0].trace, cfg.model.seq_len, cfg.model.layers)
    generated = [gen.next_token(gen.outputs[0][-1])]
    for i, (a, r) in enumerate(zip(starts, results[1:])):
        n = prompt_len + i
        got, want_row = r.output[n - a], gen.outputs[i + 1][0]
        assert np.array_equal(got, want_row), \
            f"step {i} (position {n}, CACHE_LEN {a}): output differs at {np.flatnonzero(got != want_row)[:5]}"
        generated.append(gen.next_token(got))
    assert generated == gen.tokens[prompt_len:] + [gen.next_token(gen.outputs[-1][0])], "the generated tokens differ"
    check_cache(cfg, results[-1].scratch, gen.cache)
