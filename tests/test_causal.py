"""Causal self-attention (``model.causal``, a decoder's prefill): the golden model, the float reference and the
DRAM-tiled schedule attend keys 0..i from query row i, and a row's output never depends on a later token."""
import dataclasses
import random

import numpy as np
import pytest

from mlo_hw.config import ConfigError, config_from_dict, load_config
from mlo_hw.model.golden import int_stack
from mlo_hw.model.numerics import attention_mask
from mlo_hw.model.quantize import build_model, random_inputs, run_int
from mlo_hw.model.reference import float_stack
from mlo_hw.model.tiled import tiled_stack


def causal_config(name: str):
    cfg = load_config(name)
    return dataclasses.replace(cfg, name=f"{cfg.name}_causal", model=dataclasses.replace(cfg.model, causal=True))


@pytest.fixture(scope="module")
def small():
    cfg = causal_config("small")
    layers, model = build_model(cfg)
    return cfg, layers, model


def test_attention_mask():
    keys = np.array([1, 1, 1, 0], bool)
    assert np.array_equal(attention_mask(keys), keys)
    want = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], bool)
    assert np.array_equal(attention_mask(keys, causal=True), want)


@pytest.mark.parametrize("model_kind", ["int", "float"])
def test_a_row_never_sees_a_later_token(small, model_kind):
    cfg, layers, model = small
    rng = np.random.default_rng(1)
    s, h = cfg.model.seq_len, cfg.model.hidden
    x = rng.normal(0, 1, (s, h))
    mask = np.ones(s, bool)
    for i in (0, s // 2, s - 2):
        later = x.copy()
        later[i + 1:] = rng.normal(0, 1, (s - i - 1, h))
        if model_kind == "int":
            a, b = (run_int(model, model.quantize_input(t), mask, cfg) for t in (x, later))
        else:
            a, b = (float_stack(t, layers, attention_mask(mask, True), cfg.model.heads) for t in (x, later))
        assert np.array_equal(a[:i + 1], b[:i + 1]), f"row <= {i} changed with tokens after {i}"
        assert not np.array_equal(a[i + 1:], b[i + 1:])


def test_int_model_is_close_to_float_and_differs_from_bidirectional(small):
    cfg, layers, model = small
    x, mask = random_inputs(cfg, np.random.default_rng(5), 2)[1]
    traces = []
    y = run_int(model, model.quantize_input(x), mask, cfg, traces)
    f = float_stack(x, layers, attention_mask(mask, True), cfg.model.heads)
    deq = model.dequantize_output(y)[mask]
    cos = (deq * f[mask]).sum(-1) / np.linalg.norm(deq, axis=-1) / np.linalg.norm(f[mask], axis=-1)
    assert cos.min() > 0.98
    probs = traces[0]["probs"]
    assert (probs[:, np.triu_indices(cfg.model.seq_len, 1)[0], np.triu_indices(cfg.model.seq_len, 1)[1]] == 0).all()
    assert (probs[:, 0, 0] == 255).all()       # the first row attends only itself
    bidir = int_stack(model.quantize_input(x), model.layers, mask, cfg.model.heads)
    assert not np.array_equal(y, bidir)


def test_tiled_schedule_equals_the_golden_model_at_every_block(small):
    cfg, _, model = small
    s = cfg.seq_padded
    x, mask = random_inputs(cfg, np.random.default_rng(3), 2)[1]
    xi = np.zeros((s, cfg.model.hidden), np.int64)
    xi[:cfg.model.seq_len] = model.quantize_input(x)
    keys = np.zeros(s, bool)
    keys[:cfg.model.seq_len] = mask
    want = int_stack(xi, model.layers, attention_mask(keys, True), cfg.model.heads)
    unit = int(np.lcm(cfg.folding.pe, cfg.folding.simd))
    for block in (b for b in range(unit, s + 1, unit) if s % b == 0):
        got = tiled_stack(cfg, model.layers, xi, keys, block).output
        assert np.array_equal(got, want), f"block {block}"


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_causal_must_be_a_boolean(value):
    raw = {"model": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "seq_len": 8, "causal": value}}
    with pytest.raises(ConfigError, match=r"^model.causal: expected true or false, got "):
        config_from_dict(raw)


# ---- the engine RTL (sim/harness.py): bit exact with causal masks, on chip and through the DRAM-tiled schedule --

def _rtl_runs(cfg, runs):
    from sim.engine_check import check_run_rejects_corruption
    from sim.harness import EngineSim, random_input
    sim = EngineSim(cfg, build_model(cfg)[1])
    rng = random.Random(11)
    for i, (tokens, stall) in enumerate(runs):
        x = random_input(cfg, sim.model, 40 + i)
        r, want, traces = sim.run_checked(x, tokens, seed=i + 1, stall=stall)
        check_run_rejects_corruption(cfg, r, want, traces, tokens, cfg.model.layers, rng)


@pytest.mark.slow
@pytest.mark.parametrize("tokens, stall", [(45, 0.3), (64, 0.0)])
def test_rtl_causal_through_dram_tiled_blocks_bit_exact(tokens, stall):
    """Two blocks of 32 query rows: the second block's rows attend keys up to 32 + its row (the block offset).
    45 tokens under stalls: a full first block and a partial second one. In -m slow: the default run has the causal
    DRAM-tiled engine with pre-LN layers (tests/test_prenorm.py, tests/test_kv_cache.py)."""
    from sim.harness import small_tiled_config
    base = small_tiled_config()
    cfg = dataclasses.replace(base, name="small_tiled_causal", model=dataclasses.replace(base.model, causal=True))
    assert tokens <= cfg.model.seq_len
    _rtl_runs(cfg, [(tokens, stall)])


@pytest.mark.slow
def test_rtl_causal_on_chip_bit_exact():
    cfg = causal_config("small")
    _rtl_runs(cfg, [(cfg.model.seq_len, 0.0), (5, 0.3)])
