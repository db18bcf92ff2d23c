"""Autoregressive decode with a KV cache (mlo_hw/model/decode.py): a prefill then decode steps equal one causal
run over every token, bit for bit, for post-LN (BERT) and pre-LN (GPT-2) layers; the cache refuses a step past its
capacity."""
import dataclasses

import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.model.decode import CacheFull, decode_step, decode_traffic, prefill
from mlo_hw.model.golden import int_stack
from mlo_hw.model.numerics import attention_mask
from mlo_hw.model.quantize import build_model
from mlo_hw.model.weight_image import layout


@pytest.fixture(scope="module", params=[("small", "post"), ("bert_tiny", "post"), ("small", "pre"),
                                        ("bert_tiny", "pre")], ids=lambda p: "-".join(p))
def decoder(request):
    name, norm = request.param
    cfg = load_config(name)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, causal=True, norm=norm,
                                                             gelu="tanh" if norm == "pre" else "erf"))
    model = build_model(cfg)[1]
    assert all(p.norm == norm for p in model.layers)
    return cfg, model


def _tokens(cfg, model, seed):
    x = np.random.default_rng(seed).normal(0, 1, (cfg.model.seq_len, cfg.model.hidden))
    return model.quantize_input(x)


def test_prefill_then_decode_steps_equal_one_causal_run(decoder):
    cfg, model = decoder
    s = cfg.model.seq_len
    x = _tokens(cfg, model, 1)
    full = int_stack(x, model.layers, attention_mask(np.ones(s, bool), causal=True), cfg.model.heads)
    prompt = s // 2
    y, cache = prefill(cfg, model.layers, np.where(np.arange(s)[:, None] < prompt, x, 0), prompt)
    assert np.array_equal(y[:prompt], full[:prompt])
    assert cache.length == prompt and len(cache.k) == cfg.model.layers
    pos = prompt
    for n in (1, 1, 2):                                  # single tokens, and a step of two
        got = decode_step(cfg, model.layers, x[pos:pos + n], cache)
        assert np.array_equal(got, full[pos:pos + n]), f"tokens {pos}..{pos + n - 1}"
        pos += n
        assert cache.length == pos
    # the cache is what a full run computes for those positions
    trace: list = []
    int_stack(x, model.layers, attention_mask(np.ones(s, bool), causal=True), cfg.model.heads, trace)
    for li in range(cfg.model.layers):
        assert np.array_equal(cache.k[li], trace[li]["k"][:pos]) and np.array_equal(cache.v[li], trace[li]["v"][:pos])


def test_a_step_past_the_capacity_is_refused(decoder):
    cfg, model = decoder
    x = _tokens(cfg, model, 2)
    _, cache = prefill(cfg, model.layers, x, 3, capacity=4)
    decode_step(cfg, model.layers, x[3:4], cache)
    before = [k.copy() for k in cache.k]
    with pytest.raises(CacheFull, match=r"^KV cache: 5 tokens exceed its capacity of 4$"):
        decode_step(cfg, model.layers, x[4:5], cache)
    assert all(np.array_equal(a, b) for a, b in zip(before, cache.k))        # nothing appended
    with pytest.raises(CacheFull):
        prefill(cfg, model.layers, x, 5, capacity=4)


def test_decode_traffic_counts_weights_and_the_cache():
    cfg = load_config("bert_tiny")
    t = decode_traffic(cfg, 100)
    assert t["weights"] == layout(cfg).total_bytes
    assert t["kv_read"] == 2 * 2 * 100 * 128 and t["kv_written"] == 2 * 2 * 128 and t["activations"] == 4 * 128
